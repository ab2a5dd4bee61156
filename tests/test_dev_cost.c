/* tests/test_dev_cost.c -- the device cost model against figures computed by hand, profile YAML
 * (values, overrides, distributions, positioned errors) and the shipped catalog.
 *
 * Every expected time below is exact: the inputs are chosen so that the double arithmetic is
 * exact too, so the checks compare int64 nanoseconds with ==, never with a tolerance.
 */
#include "devices/catalog.h"
#include "devices/profile.h"
#include "tests/check.h"

#include <math.h>
#include <string.h>

static dev_trace *speed_trace(const char *text)
{
    dev_trace *t;
    sim_err err = {0};
    int rc = dev_trace_parse(&t, text, "speed.trace", DEV_TRACE_SPEED, &err);
    CHECK_MSG(rc == SIM_OK, "speed trace: %s", err.msg);
    return t;
}

/* dev_compute_ns and dev_work_flops on work given term by term */
static sim_time compute(const dev_profile *p, double flops, double masked, double nnz, double bytes,
                        double steps, sim_time start)
{
    dev_work w = {.flops = flops,
                  .flops_masked = masked,
                  .flops_masked_nnz = nnz,
                  .bytes = bytes,
                  .steps = steps};
    return dev_compute_ns(p, &w, start);
}

static double work_flops(const dev_profile *p, double flops, double masked, double nnz)
{
    dev_work w = {.flops = flops, .flops_masked = masked, .flops_masked_nnz = nnz};
    return dev_work_flops(p, &w);
}

/* The fit recovers a cost model from times it generated, keeps the bandwidth and overhead terms
 * >= 0 (leaving out a term that wants less), and with one point is FLOPs alone. */
static void test_fit(void)
{
    /* FLOPs falling as width squared, activation bytes as width */
    double f[5] = {1e9, 2.5e8, 6.25e7, 1.5625e7, 3.90625e6}, by[5] = {8e7, 4e7, 2e7, 1e7, 5e6},
           t[5], compute, bw, oh;
    for (int i = 0; i < 5; i++)
        t[i] = f[i] / 1e11 + 2e-3; /* 100 GFLOPS, 2 ms a step */
    CHECK(dev_fit_step_cost(f, NULL, t, 5, &compute, NULL, &oh) == 0);
    CHECK_MSG(fabs(compute / 1e11 - 1) < 1e-9 && fabs(oh / 2e-3 - 1) < 1e-9, "fit %g, %g", compute,
              oh);
    CHECK(dev_fit_step_cost(f, by, t, 5, &compute, &bw, &oh) == 0); /* no bandwidth term in t */
    CHECK_MSG(fabs(compute / 1e11 - 1) < 1e-6 && bw == 0 && fabs(oh / 2e-3 - 1) < 1e-6,
              "fit %g, %g, %g", compute, bw, oh);
    for (int i = 0; i < 5; i++)
        t[i] = f[i] / 2e11 + by[i] / 1e10 + 5e-4; /* 200 GFLOPS, 10 GB/s, 0.5 ms */
    CHECK(dev_fit_step_cost(f, by, t, 5, &compute, &bw, &oh) == 0);
    CHECK_MSG(fabs(compute / 2e11 - 1) < 1e-6 && fabs(bw / 1e10 - 1) < 1e-6 &&
                      fabs(oh / 5e-4 - 1) < 1e-6,
              "fit %g, %g, %g", compute, bw, oh);
    /* without the bytes the same times fit worse, and still with a positive overhead */
    double c2, oh2;
    CHECK(dev_fit_step_cost(f, NULL, t, 5, &c2, NULL, &oh2) == 0 && oh2 > 5e-4);
    for (int i = 0; i < 5; i++)
        t[i] = f[i] / 2e11 + by[i] / 1e10 - 1e-4; /* wants a negative overhead: fitted without */
    CHECK(dev_fit_step_cost(f, by, t, 5, &compute, &bw, &oh) == 0 && oh == 0 && bw > 0);
    for (int i = 0; i < 4; i++)
        t[i] = f[i] / 5e10; /* no overhead */
    CHECK(dev_fit_step_cost(f, NULL, t, 4, &compute, NULL, &oh) == 0);
    CHECK_MSG(fabs(compute / 5e10 - 1) < 1e-9 && fabs(oh) < 1e-12, "fit %g, %g", compute, oh);
    for (int i = 0; i < 4; i++)
        t[i] = f[i] / 1e11 - 3e-5 * (i + 1);
    CHECK(dev_fit_step_cost(f, NULL, t, 4, &compute, NULL, &oh) == 0 && oh == 0 && compute > 1e11);
    /* one point: FLOPs alone, whatever the bytes */
    CHECK(dev_fit_step_cost(f, by, (double[]){0.02}, 1, &compute, &bw, &oh) == 0 &&
          compute == 1e9 / 0.02 && oh == 0 && bw == 0);
    double down[2] = {2e-3, 1e-3}; /* more FLOPs, less time: a rate through the origin */
    CHECK(dev_fit_step_cost((double[]){1e6, 1e9}, NULL, down, 2, &compute, NULL, &oh) == 0 &&
          oh == 0);
    CHECK(dev_fit_step_cost((double[]){0, 0}, NULL, down, 2, &compute, NULL, &oh) == -1);
    /* the same point five times: only the FLOPs' rate is known, not how the time splits */
    double f5[5], b5[5], t5[5]; /* (figures whose elimination leaves rounding noise) */
    for (int i = 0; i < 5; i++)
        f5[i] = 940889600, b5[i] = 47454800, t5[i] = 0.36377344;
    CHECK(dev_fit_step_cost(f5, b5, t5, 5, &compute, &bw, &oh) == 0);
    CHECK_MSG(fabs(compute * 0.36377344 / 940889600 - 1) < 1e-12 && bw == 0 && oh == 0,
              "fit %g, %g, %g", compute, bw, oh);
    CHECK(dev_fit_step_cost(f5, NULL, t5, 5, &compute, NULL, &oh) == 0 && oh == 0 &&
          fabs(compute * 0.36377344 / 940889600 - 1) < 1e-12);
    /* two points: FLOPs and the overhead fit them exactly; the bandwidth is not tried */
    double f2[2] = {1e9, 2.5e8}, b2[2] = {8e7, 4e7},
           t2[2] = {1e9 / 1e11 + 2e-3, 2.5e8 / 1e11 + 2e-3};
    CHECK(dev_fit_step_cost(f2, b2, t2, 2, &compute, &bw, &oh) == 0);
    CHECK_MSG(fabs(compute / 1e11 - 1) < 1e-9 && bw == 0 && fabs(oh / 2e-3 - 1) < 1e-9,
              "fit %g, %g, %g", compute, bw, oh);
}

static void test_compute(void)
{
    dev_profile p = {0};
    p.compute_flops = 8e9; /* 8 GFLOPS */

    /* 1.6e10 FLOPs at 8 GFLOPS: exactly 2 s */
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 0, 0, 0), 2000000000);
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 0, 0, 12345), 2000000000); /* no trace: start-free */
    CHECK_EQ_I64(compute(&p, 0, 0, 0, 0, 0, 0), 0);
    CHECK_EQ_I64(compute(&p, 8, 0, 0, 0, 0, 0), 1); /* 1 ns */
    CHECK_EQ_I64(compute(&p, 3, 0, 0, 0, 0, 0), 0); /* 0.375 ns rounds to 0 */
    CHECK_EQ_I64(compute(&p, 5, 0, 0, 0, 0, 0), 1); /* 0.625 ns rounds to 1 */

    /* 8e9 of the 1.6e10 FLOPs are in masked layers, 2e9 of those on kept weights: 6e9 skippable */
    CHECK_EQ_I64(compute(&p, 1.6e10, 8e9, 2e9, 0, 0, 0), 2000000000); /* sparse_eff 0 */
    p.sparse_eff = 0.5;                                               /* 1.3e10 -> 1.625 s */
    CHECK_EQ_I64(compute(&p, 1.6e10, 8e9, 2e9, 0, 0, 0), 1625000000);
    CHECK(work_flops(&p, 1.6e10, 8e9, 2e9) == 1.3e10); /* the FLOPs counted for the client */
    p.sparse_eff = 1.0;                                /* proportional: 1e10 -> 1.25 s */
    CHECK_EQ_I64(compute(&p, 1.6e10, 8e9, 2e9, 0, 0, 0), 1250000000);
    CHECK_EQ_I64(compute(&p, 1.6e10, 8e9, 8e9, 0, 0, 0), 2000000000); /* nothing masked out */
    p.sparse_eff = 0;
    /* a step overhead adds its time per step, on top of the FLOPs; not to the FLOPs counted */
    p.step_overhead_ns = 1500000; /* 1.5 ms */
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 0, 40, 0), 2060000000);
    CHECK_EQ_I64(compute(&p, 0, 0, 0, 0, 2, 0), 3000000);
    CHECK(work_flops(&p, 1.6e10, 0, 0) == 1.6e10);
    p.step_overhead_ns = 0;
    /* activation bytes take 8 x bytes / mem_bandwidth: 1e9 bytes at 80 Gbps (10 GB/s) is 0.1 s;
     * without a bandwidth they cost nothing */
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 1e9, 0, 0), 2000000000);
    p.mem_bandwidth_bps = 80e9;
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 1e9, 0, 0), 2100000000);
    CHECK_EQ_I64(compute(&p, 0, 0, 0, 2.5e8, 0, 0), 25000000);
    p.mem_bandwidth_bps = 0;

    /* Speed trace halving the speed after 1 s: 8e9 FLOPs in the first second, the other 8e9 at
     * 4 GFLOPS in 2 s more: 3 s. Starting at 0.5 s: 4e9 by 1 s, 1.2e10 at 4 GFLOPS = 3 s: 3.5 s. */
    p.speed = speed_trace("0 s 1\n1 s 0.5\n");
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 0, 0, 0), 3000000000);
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 0, 0, 500000000), 3500000000);
    CHECK_EQ_I64(compute(&p, 8e9, 0, 0, 0, 0, 0), 1000000000); /* ends on the breakpoint */
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 0, 0, 5000000000), 4000000000); /* all at half */
    /* sparsity and the trace compose: 1.3e10 effective = 8e9 (1 s) + 5e9 at 4 GFLOPS (1.25 s) */
    p.sparse_eff = 0.5;
    CHECK_EQ_I64(compute(&p, 1.6e10, 8e9, 2e9, 0, 0, 0), 2250000000);
    p.sparse_eff = 0;
    /* a step overhead is work at full speed: 4 steps of 0.125 s = 4e9 more, so 2e10 = 1 s at full
     * speed + 1.2e10 at half (3 s): 4 s (0.5 s more than 4 x 0.125 s would add without the trace)
     */
    p.step_overhead_ns = 125000000;
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 0, 4, 0), 4000000000);
    p.step_overhead_ns = 0;
    /* so is the memory traffic: 5e9 bytes at 80 Gbps = 0.5 s at full speed, the same 4e9 */
    p.mem_bandwidth_bps = 80e9;
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 5e9, 0, 0), 4000000000);
    p.mem_bandwidth_bps = 0;
    dev_trace_free(p.speed);

    /* a stall: speed 0 between 1 s and 2 s makes no progress */
    p.speed = speed_trace("0 s 1\n1 s 0\n2 s 1\n");
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 0, 0, 0), 3000000000);
    CHECK_EQ_I64(compute(&p, 8e9, 0, 0, 0, 0, 1500000000), 1500000000); /* waits 0.5 s, 1 s */
    dev_trace_free(p.speed);

    /* speed 0 for ever: never finishes (but work that fits before it does) */
    p.speed = speed_trace("0 s 1\n1 s 0\n");
    CHECK(compute(&p, 1.6e10, 0, 0, 0, 0, 0) == DEV_TIME_NEVER);
    CHECK_EQ_I64(compute(&p, 4e9, 0, 0, 0, 0, 0), 500000000);
    dev_trace_free(p.speed);

    /* before the first point of a non-looping trace the speed is nominal */
    p.speed = speed_trace("2 s 0.25\n");
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 0, 0, 0), 2000000000);
    CHECK_EQ_I64(compute(&p, 1.6e10, 0, 0, 0, 0, 1000000000), 1000000000 + 4000000000);
    dev_trace_free(p.speed);

    /* Looping: 1 s on, 1 s off, period 2 s: 8e9 FLOPs per period. 8e10 = ten periods' work ends
     * 1 s into the tenth period: 19 s. A billion periods' work skips whole periods. */
    p.speed = speed_trace("loop 2 s\n0 s 1\n1 s 0\n");
    CHECK_EQ_I64(compute(&p, 8e10, 0, 0, 0, 0, 0), 19000000000);
    CHECK_EQ_I64(compute(&p, 8e10, 0, 0, 0, 0, 1000000000), 20000000000); /* stalled 1 s */
    CHECK_EQ_I64(compute(&p, 8e9, 0, 0, 0, 0, 1500000000), 1500000000);
    CHECK_EQ_I64(compute(&p, 8e18, 0, 0, 0, 0, 0), 1999999999000000000);
    CHECK(compute(&p, 1e30, 0, 0, 0, 0, 0) == DEV_TIME_NEVER); /* beyond int64 ns */
    dev_trace_free(p.speed);

    /* looping trace whose first point is not at 0: [0, 1 s) of every period runs the last
     * value (2), [1 s, 3 s) 0.5, [3 s, 4 s) 2. From 0: 1.6e10 by 1 s, 4e9 more at half speed
     * (1 s). From 3.5 s: 8e9 by 4 s, then [4 s, 5 s) is double speed again (the wrap): 1.6e10. */
    p.speed = speed_trace("loop 4 s\n1 s 0.5\n3 s 2\n");
    CHECK_EQ_I64(compute(&p, 2e10, 0, 0, 0, 0, 0), 2000000000);
    CHECK_EQ_I64(compute(&p, 2.4e10, 0, 0, 0, 0, 3500000000), 1500000000);
    CHECK_EQ_I64(compute(&p, 2.8e10, 0, 0, 0, 0, 3500000000), 2500000000); /* +4e9 at half */
    dev_trace_free(p.speed);
    p.speed = NULL;
}

static void test_transfer(void)
{
    /* 1 MB = 1e6 bytes = 8e6 bits over 8 Mbps: 1 s, plus 40 ms latency */
    CHECK_EQ_I64(dev_transfer_ns(40 * SIM_MS, 1e6, 8e6), 1040000000);
    CHECK_EQ_I64(dev_transfer_ns(0, 1e6, 8e6), 1000000000);
    CHECK_EQ_I64(dev_transfer_ns(40 * SIM_MS, 0, 8e6), 40000000); /* empty message: latency */
    /* rounding to the nearest ns: 8/3 s, 8/3 ns, 0.8 ns, 0.4 ns */
    CHECK_EQ_I64(dev_transfer_ns(0, 1, 3), 2666666667);
    CHECK_EQ_I64(dev_transfer_ns(0, 1, 3e9), 3);
    CHECK_EQ_I64(dev_transfer_ns(0, 1, 1e10), 1);
    CHECK_EQ_I64(dev_transfer_ns(7, 1, 2e10), 7);
    /* 20 Mbps uplink, a 1.72 MB model update (lenet5-caffe, 430,500 floats + header) */
    CHECK_EQ_I64(dev_transfer_ns(30 * SIM_MS, 1722000, 20e6), 30000000 + 688800000);
    CHECK(dev_transfer_ns(0, 1e30, 1) == DEV_TIME_NEVER);
}

/* A job's phases back to back (dev_price): every term of the cost model in one job, by hand. */
static void test_price(void)
{
    dev_profile p = {0};
    p.compute_flops = 8e9;          /* 8 GFLOPS */
    p.down_bps = 40e6;              /* 40 Mbps */
    p.up_bps = 10e6;                /* 10 Mbps */
    p.latency_ns = 40 * SIM_MS;     /* on each message */
    p.step_overhead_ns = SIM_MS;    /* 1 ms a step */
    p.mem_bandwidth_bps = 8e9;      /* 1 GB/s */
    p.sparse_eff = 0.5;             /* half the masked-out FLOPs saved */
    const sim_time start = SIM_SEC; /* prices are from the start on, not from 0 */
    dev_job job = {.work = {.flops = 1.6e10,
                            .flops_masked = 8e9,
                            .flops_masked_nnz = 2e9,
                            .bytes = 1e8,
                            .steps = 100},
                   .down_bytes = 1e6,
                   .up_bytes = 5e5};
    dev_phases ph;
    dev_price(&p, &job, start, &ph);
    /* down: 40 ms + 8e6 bits at 40 Mbps (200 ms) */
    CHECK_EQ_I64(ph.down, 240000000);
    CHECK_EQ_I64(ph.down_end, 1240000000);
    /* train: 1.6e10 - 0.5 x (8e9 - 2e9) = 1.3e10 FLOPs executed, + 100 steps x 1 ms (8e8 FLOPs'
     * worth) + 8e8 bits of activations at 8 Gbps (0.1 s, 8e8 more): 1.46e10 at 8 GFLOPS */
    CHECK(ph.flops == 1.3e10);
    CHECK_EQ_I64(ph.train, 1825000000);
    CHECK_EQ_I64(ph.train_end, 3065000000);
    /* up: 40 ms + 4e6 bits at 10 Mbps (400 ms) */
    CHECK_EQ_I64(ph.up, 440000000);
    CHECK_EQ_I64(ph.up_end, 3505000000);

    /* without an upload the job is done when its training ends */
    job.up_bytes = 0;
    dev_price(&p, &job, start, &ph);
    CHECK(ph.up == 0 && ph.up_end == ph.train_end && ph.train_end == 3065000000);
    /* an empty download takes the latency when the dispatch is a message (the engine), no time
     * otherwise (`fedsim check`) */
    job.down_bytes = 0;
    job.down_always = 1;
    dev_price(&p, &job, start, &ph);
    CHECK_EQ_I64(ph.down, 40000000);
    CHECK_EQ_I64(ph.train_end, 2865000000);
    job.down_always = 0;
    dev_price(&p, &job, start, &ph);
    CHECK(ph.down == 0 && ph.down_end == start);
    CHECK_EQ_I64(ph.train_end, 2825000000);

    /* The training runs on the speed trace from the download's end: 8e9 FLOPs from 0.24 s run
     * 0.76 s at full speed (6.08e9), the other 1.92e9 at half speed after 1 s (0.48 s). */
    p.speed = speed_trace("0 s 1\n1 s 0.5\n");
    p.step_overhead_ns = 0, p.mem_bandwidth_bps = 0, p.sparse_eff = 0;
    dev_job small = {.work = {.flops = 8e9}, .down_bytes = 1e6, .up_bytes = 5e5};
    dev_price(&p, &small, 0, &ph);
    CHECK_EQ_I64(ph.train, 1240000000);
    CHECK_EQ_I64(ph.up_end, 1920000000); /* 0.24 + 1.24 + 0.44 s */
    dev_trace_free(p.speed);
    /* a device whose speed drops to 0 for ever never finishes: the training, and the upload after
     * it, end at DEV_TIME_NEVER (and work that fits before the drop still ends) */
    p.speed = speed_trace("0 s 1\n1 s 0\n");
    small.work.flops = 1.6e10;
    dev_price(&p, &small, 0, &ph);
    CHECK_EQ_I64(ph.down_end, 240000000);
    CHECK(ph.train == DEV_TIME_NEVER && ph.train_end == DEV_TIME_NEVER);
    CHECK(ph.up_end == DEV_TIME_NEVER);
    small.work.flops = 4e9; /* 0.5 s from 0.24 s, before the drop at 1 s */
    dev_price(&p, &small, 0, &ph);
    CHECK_EQ_I64(ph.train_end, 740000000);
    dev_trace_free(p.speed);
}

static void test_memory_capacity(void)
{
    dev_profile p = {0};
    p.compute_flops = 10e9;
    p.memory_bytes = 1024.0 * 1024 * 1024; /* 1 GiB */
    CHECK(dev_fits(&p, p.memory_bytes));
    CHECK(!dev_fits(&p, p.memory_bytes + 1));
    CHECK(dev_fits(&p, 0));

    /* derived: min(1, memory / full model, compute / reference) */
    CHECK(dev_capacity(&p, 4.0 * p.memory_bytes, 0) == 0.25);
    CHECK(dev_capacity(&p, 4.0 * p.memory_bytes, 20e9) == 0.25);
    CHECK(dev_capacity(&p, p.memory_bytes, 40e9) == 0.25);
    CHECK(dev_capacity(&p, p.memory_bytes / 8, 5e9) == 1.0); /* capped at 1 */
    CHECK(dev_capacity(&p, 0, 0) == 1.0);
    p.capacity = 0.5; /* the profile's own value wins */
    CHECK(dev_capacity(&p, 4.0 * p.memory_bytes, 40e9) == 0.5);
}

/* Parse text as a profile (base may be NULL); returns the rc, err filled. */
static int profile_from(dev_profile *out, const char *text, const dev_profile *base, sim_err *err)
{
    sim_yaml *root;
    int rc = sim_yaml_load_string(&root, text, "p.yaml", err);
    if (rc) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    rc = dev_profile_from_yaml(out, root, base, err);
    sim_yaml_free(root);
    return rc;
}

/* The profile text must fail at line:col with a message containing what. */
static void expect_error(const char *text, int line, int col, const char *what)
{
    dev_profile p;
    sim_err err = {0};
    int rc = profile_from(&p, text, NULL, &err);
    char buf[1024];
    sim_err_format(&err, buf, sizeof buf);
    CHECK_MSG(rc < 0, "accepted: %s", text);
    CHECK_MSG(err.line == line && err.col == col && !strcmp(err.file, "p.yaml"),
              "want p.yaml:%d:%d, got %s (for %s)", line, col, buf, text);
    CHECK_MSG(strstr(err.msg, what) != NULL, "want '%s' in '%s'", what, buf);
    CHECK(p.compute_flops == 0 && p.speed == NULL); /* zeroed on error */
}

#define FULL "compute: 8 GFLOPS\nup: 10 Mbps\ndown: 40 Mbps\nlatency: 40 ms\nmemory: 2 GiB\n"

static void test_profile_yaml(void)
{
    dev_profile p, q;
    sim_err err = {0};
    CHECK(profile_from(&p, FULL "capacity: 0.5\nsparse_eff: 0.25\n", NULL, &err) == SIM_OK);
    CHECK(p.compute_flops == 8e9 && p.up_bps == 10e6 && p.down_bps == 40e6);
    CHECK_EQ_I64(p.latency_ns, 40000000);
    CHECK(p.memory_bytes == 2.0 * 1024 * 1024 * 1024);
    CHECK(p.capacity == 0.5 && p.sparse_eff == 0.25);
    CHECK(p.avail.kind == DEV_AVAIL_ALWAYS && p.speed == NULL && !dev_profile_has_dist(&p));
    CHECK(p.step_overhead_ns == 0 && p.mem_bandwidth_bps == 0);
    snprintf(p.name, sizeof p.name, "mine");
    char line[512];
    dev_profile_describe(&p, line, sizeof line);
    CHECK_MSG(strstr(line, "compute 8.00 GFLOPS") && strstr(line, "up 10.0 Mbps") &&
                      strstr(line, "latency 40.0 ms") && strstr(line, "memory 2.00 GiB") &&
                      strstr(line, "availability always") && !strstr(line, "step_overhead") &&
                      !strstr(line, "mem_bandwidth"),
              "describe: %s", line);
    CHECK(profile_from(&q, "step_overhead: 2.5 ms\n", &p, &err) == SIM_OK);
    CHECK_EQ_I64(q.step_overhead_ns, 2500000);
    dev_profile_describe(&q, line, sizeof line);
    CHECK_MSG(strstr(line, "sparse_eff 0.25, step_overhead 2.50 ms, availability"), "describe: %s",
              line);
    dev_profile_destroy(&q);
    /* bytes a second, or bits */
    CHECK(profile_from(&q, "mem_bandwidth: 12.5 GB/s\nstep_overhead: 2.5 ms\n", &p, &err) ==
          SIM_OK);
    CHECK(q.mem_bandwidth_bps == 100e9);
    dev_profile_describe(&q, line, sizeof line);
    CHECK_MSG(strstr(line, "sparse_eff 0.25, mem_bandwidth 12.5 GB/s, step_overhead 2.50 ms, "),
              "describe: %s", line);
    dev_profile_destroy(&q);
    CHECK(profile_from(&q, "mem_bandwidth: 100 Gbps\n", &p, &err) == SIM_OK);
    CHECK(q.mem_bandwidth_bps == 100e9);
    dev_profile_destroy(&q);

    /* overrides keep the base's other fields and its name */
    CHECK(profile_from(&q,
                       "up: 2 Mbps\ncapacity: auto\navailability: {kind: markov, mean_on: "
                       "30 min, mean_off: 90 min}\n",
                       &p, &err) == SIM_OK);
    CHECK(q.up_bps == 2e6 && q.down_bps == 40e6 && q.compute_flops == 8e9 && q.capacity == 0);
    CHECK(!strcmp(q.name, "mine"));
    CHECK(q.avail.kind == DEV_AVAIL_MARKOV && q.avail.mean_on_ns == 30 * 60 * SIM_SEC &&
          q.avail.mean_off_ns == 90 * 60 * SIM_SEC);
    CHECK(p.avail.kind == DEV_AVAIL_ALWAYS); /* the base is untouched */
    dev_profile_describe(&q, line, sizeof line);
    CHECK_MSG(strstr(line, "markov(on 30.0 min, off 1.50 h)"), "describe: %s", line);
    dev_profile_destroy(&q);
    dev_profile_destroy(&q); /* a second destroy is harmless */

    /* distributions: lognormal around a median, uniform between bounds */
    CHECK(profile_from(&q,
                       "up: {lognormal: 20 Mbps, sigma: 0.5, max: 100 Mbps}\n"
                       "down: {uniform: [5 Mbps, 50 Mbps]}\n"
                       "latency: {uniform: [0 ms, 100 ms]}\n",
                       &p, &err) == SIM_OK);
    CHECK(dev_profile_has_dist(&q));
    CHECK(q.up_bps == 20e6 && q.dist[DEV_FIELD_UP].kind == DEV_DIST_LOGNORMAL);
    CHECK(q.down_bps == 27.5e6 && q.dist[DEV_FIELD_DOWN].kind == DEV_DIST_UNIFORM);
    CHECK_EQ_I64(q.latency_ns, 50000000);
    dev_profile_describe(&q, line, sizeof line);
    CHECK_MSG(strstr(line, "up lognormal(20.0 Mbps, sigma 0.5)") &&
                      strstr(line, "down uniform(5.00 Mbps..50.0 Mbps)"),
              "describe: %s", line);

    /* Draws: the median of 20001 lognormal draws is within 2% of 20 Mbps (the sample median of
     * a lognormal has sd ~ 1.2533 x sigma / sqrt(n) in log space = 0.44%), the clamp holds,
     * uniform draws stay in range with mean 27.5 Mbps (sd of the mean: 45/sqrt(12 n) = 0.09). */
    enum { N = 20001 };
    static double ups[N];
    double down_sum = 0, down_min = INFINITY, down_max = 0;
    sim_rng r;
    sim_rng_seed(&r, 7, SIM_RNG_DEVICES, 0);
    int clamp_ok = 1, fixed_ok = 1;
    for (int i = 0; i < N; i++) {
        dev_profile c;
        dev_profile_draw(&c, &q, &r);
        ups[i] = c.up_bps;
        clamp_ok &= c.up_bps > 0 && c.up_bps <= 100e6;
        down_sum += c.down_bps;
        down_min = fmin(down_min, c.down_bps);
        down_max = fmax(down_max, c.down_bps);
        fixed_ok &= !dev_profile_has_dist(&c) && c.compute_flops == 8e9 && c.latency_ns >= 0 &&
                    c.latency_ns <= 100 * SIM_MS;
        dev_profile_destroy(&c);
    }
    int below_hi = 0, below_lo = 0;
    for (int i = 0; i < N; i++)
        below_hi += ups[i] < 20e6 * 1.02, below_lo += ups[i] < 20e6 * 0.98;
    CHECK(below_lo < N / 2 && below_hi > N / 2); /* the sample median lies within +-2% */
    CHECK(clamp_ok && fixed_ok);
    CHECK(down_min >= 5e6 && down_max < 50e6);
    CHECK_NEAR(down_sum / N / 1e6, 27.5, 0.5);

    /* the same seed draws the same clients */
    sim_rng r1, r2;
    sim_rng_seed(&r1, 7, SIM_RNG_DEVICES, 3);
    sim_rng_seed(&r2, 7, SIM_RNG_DEVICES, 3);
    dev_profile c1, c2;
    dev_profile_draw(&c1, &q, &r1);
    dev_profile_draw(&c2, &q, &r2);
    CHECK(c1.up_bps == c2.up_bps && c1.down_bps == c2.down_bps && c1.latency_ns == c2.latency_ns);
    dev_profile_destroy(&c1);
    dev_profile_destroy(&c2);
    dev_profile_destroy(&q);
    dev_profile_destroy(&p);

    /* errors name the value's position */
    expect_error(FULL "bandwith: 10 Mbps\n", 6, 1, "unknown key 'bandwith'");
    expect_error("compute: 8 GFLOPS\nup: 20\ndown: 40 Mbps\nlatency: 40 ms\nmemory: 2 GiB\n", 2, 5,
                 "no unit");
    expect_error("compute: 8 GFLOPS\nup: 20 MB\ndown: 40 Mbps\nlatency: 40 ms\nmemory: 2 GiB\n", 2,
                 5, "not a rate unit");
    expect_error("compute: 8 GFLOPS\nup: -5 Mbps\ndown: 40 Mbps\nlatency: 40 ms\nmemory: 2 GiB\n",
                 2, 5, "negative");
    expect_error("compute: 8 GFLOPS\nup: 10 Mbps\ndown: 0 Mbps\nlatency: 40 ms\nmemory: 2 GiB\n", 3,
                 7, "down must be > 0");
    expect_error("compute: 0 GFLOPS\nup: 10 Mbps\ndown: 1 Mbps\nlatency: 40 ms\nmemory: 2 GiB\n", 1,
                 10, "compute must be > 0");
    expect_error("compute: 8 GFLOPS\nup: 10 Mbps\ndown: 40 Mbps\nmemory: 2 GiB\n", 1, 1,
                 "missing 'latency'");
    expect_error(FULL "capacity: 1.5\n", 6, 11, "capacity");
    expect_error(FULL "capacity: 0\n", 6, 11, "capacity must be in (0, 1]");
    expect_error(FULL "sparse_eff: -0.1\n", 6, 13, "sparse_eff");
    expect_error(FULL "step_overhead: 2\n", 6, 16, "no unit");
    expect_error(FULL "step_overhead: -1 ms\n", 6, 16, "step_overhead");
    expect_error(FULL "mem_bandwidth: 10 GB\n", 6, 16, "not a rate unit");
    expect_error(FULL "mem_bandwidth: -1 GB/s\n", 6, 16, "negative");
    expect_error(FULL "mem_bandwidth: 0 GB/s\n", 6, 16, "mem_bandwidth must be > 0");
    expect_error("compute: 8 GFLOPS\nup: {uniform: [50 Mbps, 5 Mbps]}\ndown: 40 Mbps\n"
                 "latency: 40 ms\nmemory: 2 GiB\n",
                 2, 25, "high is below low");
    expect_error("compute: 8 GFLOPS\nup: {lognormal: 20 Mbps}\ndown: 40 Mbps\n"
                 "latency: 40 ms\nmemory: 2 GiB\n",
                 2, 5, "sigma");
    expect_error("compute: 8 GFLOPS\nup: {lognormal: 20 Mbps, sigma: 0.5, mu: 1}\n"
                 "down: 40 Mbps\nlatency: 40 ms\nmemory: 2 GiB\n",
                 2, 38, "unknown key 'mu'");
    expect_error(FULL "availability: {kind: sometimes}\n", 6, 22, "unknown availability kind");
    expect_error(FULL "availability: {kind: markov, mean_on: 30 min}\n", 6, 15, "mean_off");
    expect_error(FULL "availability: {kind: markov, mean_on: 30, mean_off: 1 h}\n", 6, 39,
                 "no unit");
    expect_error(FULL "availability: {kind: markov, mean_on: 0 s, mean_off: 1 h}\n", 6, 39,
                 "mean_on must be > 0");
    expect_error(FULL "speed: {file: /nonexistent/x.trace}\n", 6, 9, "cannot open"); /* key */
    expect_error("[1, 2]\n", 1, 1, "map");
}

static void test_catalog(void)
{
    dev_catalog c;
    sim_err err = {0};
    int rc = dev_catalog_load(&c, "devices/catalog.yaml", &err);
    char buf[1024];
    sim_err_format(&err, buf, sizeof buf);
    CHECK_MSG(rc == SIM_OK, "catalog: %s", buf);
    CHECK(c.n >= 8);
    const char *need[] = {"phone-low",        "phone-mid", "phone-high", "rpi4",           "rpi5",
                          "jetson-orin-nano", "laptop",    "desktop",    "workstation-gpu"};
    for (size_t i = 0; i < SIM_ARRAY_LEN(need); i++)
        CHECK_MSG(dev_catalog_find(&c, need[i]) != NULL, "catalog lacks %s", need[i]);
    CHECK(dev_catalog_find(&c, "toaster") == NULL);
    for (int i = 0; i < c.n; i++) {
        const dev_profile *p = &c.profiles[i];
        CHECK_MSG(p->compute_flops > 0 && p->up_bps > 0 && p->down_bps > 0 && p->latency_ns > 0 &&
                          p->memory_bytes > 0 && p->name[0],
                  "profile %d (%s) has a non-positive figure", i, p->name);
        CHECK(!dev_profile_has_dist(p));
        dev_profile_describe(p, buf, sizeof buf);
        printf("  %-18s %s\n", p->name, buf);
    }
    /* the tiers are ordered as their names say */
    const dev_profile *lo = dev_catalog_find(&c, "phone-low"),
                      *mid = dev_catalog_find(&c, "phone-mid"),
                      *hi = dev_catalog_find(&c, "phone-high");
    if (lo && mid && hi)
        CHECK(lo->compute_flops < mid->compute_flops && mid->compute_flops < hi->compute_flops);
    const dev_profile *rpi4 = dev_catalog_find(&c, "rpi4");
    if (rpi4) CHECK(rpi4->compute_flops == 12e9);
    dev_catalog_destroy(&c);
    dev_catalog_destroy(&c);

    /* catalog errors: duplicate names (the YAML layer), a bad profile, keys beside profiles */
    sim_yaml *root;
    CHECK(sim_yaml_load_string(&root, "profiles:\n  a: {compute: 1 GFLOPS}\n", "c.yaml", &err) ==
          SIM_OK);
    CHECK(dev_catalog_from_yaml(&c, sim_yaml_get(root, "profiles"), &err) < 0);
    CHECK(err.line == 2 && err.col == 6 && strstr(err.msg, "missing 'up'"));
    CHECK(c.n == 0 && c.profiles == NULL);
    sim_yaml_free(root);
    CHECK(dev_catalog_load(&c, "/nonexistent/catalog.yaml", &err) < 0);
}

int main(void)
{
    test_fit();
    test_compute();
    test_transfer();
    test_price();
    test_memory_capacity();
    test_profile_yaml();
    test_catalog();
    return CHECK_DONE();
}
