/* tests/test_sim_engine.c -- the engine against hand-computed timelines and its protocol rules:
 * exact event times and bytes for a fixed device, determinism, selection, over-commit, deadline,
 * a client going offline mid-job, memory exclusion and async staleness; metrics.tsv's columns,
 * an algorithm's own among them (through a stand-in algorithm). Each rule's test fails if the
 * rule is broken. Scenarios are small YAML files written to a temporary folder. */
#include "algos/algo.h"
#include "nn/train.h"
#include "sim/engine.h"
#include "sim/scenario.h"
#include "tests/algos.h"
#include "tests/check.h"
#include "tests/files.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static const char *write_file(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

typedef struct run {
    char *trace; /* every event, one line each */
    size_t len;
    sim_totals t;
    int rc;
    char err[600];
} run;

/* Load the scenario text (plus overrides), run it with a text trace, keep the trace. */
static void run_text(run *r, const char *yaml, const char *const *sets, int n_sets)
{
    memset(r, 0, sizeof *r);
    const char *path = write_file("s.yaml", yaml);
    sim_scenario sc;
    sim_err err = {0};
    r->rc = sim_scenario_load(&sc, path, sets, n_sets, &err);
    if (r->rc) {
        sim_err_format(&err, r->err, sizeof r->err);
        return;
    }
    FILE *tr = open_memstream(&r->trace, &r->len);
    sc.spec.trace = tr;
    sc.spec.quiet = 1;
    sim_engine *e;
    r->rc = sim_engine_new(&e, &sc.spec, &err);
    if (!r->rc) {
        r->rc = sim_engine_run(e, &err);
        sim_engine_totals(e, &r->t);
        sim_engine_free(e);
    }
    if (r->rc) sim_err_format(&err, r->err, sizeof r->err);
    fclose(tr);
    sim_scenario_destroy(&sc);
}

/* Simulated time in ns of the n-th (0-based) trace line matching kind and client, or -1. */
static long long event_ns(const run *r, const char *kind, int client, int nth)
{
    char want[64];
    snprintf(want, sizeof want, "client=%d ", client);
    const char *p = r->trace;
    while (p && *p) {
        const char *end = strchr(p, '\n');
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)(end ? end - p : (long)strlen(p)), p);
        char k[32];
        double t;
        if (sscanf(line, "[%lf] %31s", &t, k) == 2 && !strcmp(k, kind) && strstr(line, want) &&
            nth-- == 0)
            return llround(t * 1e9);
        p = end ? end + 1 : NULL;
    }
    return -1;
}

static int count_events(const run *r, const char *kind)
{
    int n = 0;
    char want[40];
    snprintf(want, sizeof want, "] %s ", kind);
    for (const char *p = r->trace; p && (p = strstr(p, want)); p++)
        n++;
    return n;
}

/* One client on a fixed device: every event time follows from the formulas.
 *   message: fedpews-mlp has 14,884 float32 = 59,536 bytes, plus 129 bytes of msgpack header
 *            (map, "model", name, 10 tensors [name, rows, cols], "data", bin16) = 59,665 bytes
 *   download: 10 ms + 8·59,665 / 8 Mbps = 69.665 ms
 *   training: 2 steps of 16: per step 3·2·16·14,624 − 2·16·160 (no input gradient at the
 *             first layer) = 1,398,784 FLOPs, so 2,797,568 FLOPs at 1 GFLOPS = 2,797,568 ns
 *   upload:   10 ms + 8·59,665 / 4 Mbps = 129.33 ms */
static void test_timing(void)
{
    const char *yaml =
            "seed: 3\nrounds: 2\ndataset: {name: synth-pews-3.2k}\n"
            "partition: {scheme: iid, clients: 1, local_test: 0}\nmodel: fedpews-mlp\n"
            "algorithm: {name: fedavg, local_steps: 2, batch_size: 16, lr: 0.01}\n"
            "federation: {per_round: 1}\neval: {every: 0, personalized: false}\n"
            "devices:\n  profiles:\n    d: {compute: 1 GFLOPS, up: 4 Mbps, down: 8 Mbps, latency: "
            "10 ms, memory: 1 GiB}\n  mix: [{profile: d, share: 1}]\n";
    run r;
    run_text(&r, yaml, NULL, 0);
    CHECK_MSG(r.rc == 0, "timing run: %s", r.err);
    long long down = 69665000, train = 2797568, up = 129330000, job = down + train + up;
    CHECK_EQ_I64(event_ns(&r, "download_done", 0, 0), down);
    CHECK_EQ_I64(event_ns(&r, "train_done", 0, 0), down + train);
    CHECK_EQ_I64(event_ns(&r, "upload_done", 0, 0), job);
    CHECK_EQ_I64(event_ns(&r, "dispatch", 0, 1), job); /* round 2 starts when round 1 ends */
    CHECK_EQ_I64(event_ns(&r, "upload_done", 0, 1), 2 * job);
    CHECK_EQ_I64(r.t.now, 2 * job);
    CHECK_NEAR(r.t.bytes_up, 2 * 59665.0, 0);
    CHECK_NEAR(r.t.bytes_down, 2 * 59665.0, 0);
    CHECK_NEAR(r.t.flops, 2 * 2797568.0, 0);
    free(r.trace);

    /* a protocol overhead adds to every message */
    const char *set[] = {"federation.overhead=1000 B"};
    run_text(&r, yaml, set, 1);
    CHECK_EQ_I64(event_ns(&r, "download_done", 0, 0), 10000000 + 8LL * 60665 * 1000 / 8);
    CHECK_NEAR(r.t.bytes_up, 2 * 60665.0, 0);
    free(r.trace);

    /* a step overhead adds to each of the job's 2 steps; cost-only prices it the same */
    const char *oh[] = {"devices.profiles.d.step_overhead=1.5 ms", "cost_only=true"};
    for (int co = 0; co < 2; co++) {
        run_text(&r, yaml, oh, 1 + co);
        CHECK_MSG(r.rc == 0, "step overhead run: %s", r.err);
        CHECK_EQ_I64(event_ns(&r, "train_done", 0, 0), down + train + 2 * 1500000);
        CHECK_EQ_I64(r.t.now, 2 * (job + 2 * 1500000));
        CHECK_NEAR(r.t.flops, 2 * 2797568.0, 0); /* time, not FLOPs */
        free(r.trace);
    }
}

static int n_algos(void)
{
    int n = 0;
    while (fl_algos[n])
        n++;
    return n;
}

/* Every algorithm counts the same SGD steps when it trains as when it only prices its jobs
 * (cost-only): on devices whose FLOPs and transfers take nanoseconds and whose steps take 1 s
 * each, a run's simulated length counts whole steps, and must not depend on the mode. FedAvg's:
 * 2 rounds of a job of 2 epochs of 48 steps (800 samples a client: 3,200 over 4, the local test
 * splits coming from the test set; 47 batches of 17 and one of 1). Ditto's and APFL's jobs step
 * two models: twice as long; pFedGate skips the 1-sample batches. Likewise the activation bytes
 * of every pass (on devices where they take 1 ms each and nothing else takes long), but learned
 * FedPeWS's, whose cost-only subnetworks are drawn, not learned. */
static void test_steps_every_algorithm(void)
{
    const char *yaml =
            "seed: 4\nrounds: 2\ndataset: {name: synth-pews-3.2k}\n"
            "partition: {scheme: iid, clients: 4, local_test: 0.2, local_val: 0.5}\n"
            "model: fedpews-mlp\n"
            "algorithm: {name: fedavg, local_epochs: 2, batch_size: 17, lr: 0.01}\n"
            "federation: {per_round: 2}\neval: {every: 0, personalized: false}\n"
            "devices:\n  profiles:\n    d: {compute: 1000 TFLOPS, up: 1 Tbps, down: 1 Tbps, "
            "latency: 0 ms, memory: 1 GiB, step_overhead: 1 s}\n"
            "  mix: [{profile: d, share: 1}]\n";
    long long fedavg = 0;
    /* every algorithm, then FedPeWS in its two warmups (its 2 rounds have none by default) */
    int n = n_algos();
    for (int i = 0; i < n + 2; i++) {
        const fl_algo *a = i < n ? fl_algos[i] : &fl_fedpews;
        char name[64];
        snprintf(name, sizeof name, "algorithm.name=%s", a->name);
        /* (DM-PFL's iterations must fit in the rounds) */
        const char *sets[] = {name,
                              i < n    ? "algorithm.dmpfl.iterations=1"
                              : i == n ? "algorithm.pews.mode=learned"
                                       : "algorithm.pews.mode=fixed",
                              "algorithm.pews.warmup=1",
                              "devices.profiles.d={compute: 1000 TFLOPS, up: 1 Tbps, down: 1 "
                              "Tbps, latency: 0 ms, memory: 1 GiB, mem_bandwidth: 1 kB/s}",
                              "cost_only=true"};
        long long len[2];
        sim_time bw[2];
        for (int co = 0; co < 2; co++) {
            run r;
            const char *s2[] = {sets[0], sets[1], sets[2], sets[4]};
            run_text(&r, yaml, s2, 3 + co);
            CHECK_MSG(r.rc == 0, "%s: %s", a->name, r.err);
            len[co] = (long long)(r.t.now / 1000000000); /* whole steps */
            free(r.trace);
            /* the same with activation bytes at 1 kB/s instead: their sum, trained and priced */
            run_text(&r, yaml, sets, 4 + co);
            CHECK_MSG(r.rc == 0, "%s: %s", a->name, r.err);
            bw[co] = r.t.now;
            free(r.trace);
        }
        CHECK_MSG(len[0] == len[1] && len[0] > 0, "%s (%s): %lld steps trained, %lld priced",
                  a->name, sets[1], len[0], len[1]);
        /* (FLOPs at 1000 TFLOPS add nanoseconds, summed in other orders trained and priced;
         * learned FedPeWS prices subnetworks drawn from the initial scores, not the learned
         * ones, so its widths differ, by design) */
        int learned = a == &fl_fedpews && i <= n;
        CHECK_MSG(bw[0] > 0 && (learned || llabs(bw[0] - bw[1]) <= bw[0] / 1000000000),
                  "%s (%s): %lld ns of activation bytes trained, %lld priced", a->name, sets[1],
                  (long long)bw[0], (long long)bw[1]);
        if (a == &fl_fedavg) fedavg = len[0];
        /* two models stepped on every minibatch, or (FedRep) the head's epochs then the body's,
         * or (FedPeWS's learned warmup) the scores then the weights */
        int twice = a == &fl_ditto || a == &fl_apfl || a == &fl_fedrep || i == n;
        if (twice || i > n)
            CHECK_MSG(len[0] == (twice ? 2 : 1) * fedavg, "%s (%s): %lld steps, FedAvg %lld",
                      a->name, sets[1], len[0], fedavg);
        if (a == &fl_pfedgate) /* its batch norm skips each epoch's 1-sample batch */
            CHECK_MSG(len[0] == fedavg - 2 * 2, "pFedGate: %lld steps, FedAvg %lld", len[0],
                      fedavg);
    }
    CHECK_MSG(fedavg == 2 * 2 * 48, "FedAvg: %lld steps", fedavg);
}

static const char *base_yaml(void)
{
    return "seed: 5\nrounds: 6\ndataset: {name: synth-pews-3.2k}\n"
           "partition: {scheme: iid, clients: 10, local_test: 0.1}\nmodel: fedpews-mlp\n"
           "algorithm: {name: fedavg, local_steps: 10, batch_size: 16, lr: 0.05}\n"
           "federation: {per_round: 3}\neval: {every: 2}\n"
           "devices:\n  profiles:\n"
           "    slow: {compute: 10 MFLOPS, up: 1 Mbps, down: 2 Mbps, latency: 50 ms, memory: 1 "
           "GiB}\n"
           "    fast: {compute: 1 GFLOPS, up: 20 Mbps, down: 50 Mbps, latency: 5 ms, memory: 1 "
           "GiB}\n"
           "  mix: [{profile: slow, share: 0.5}, {profile: fast, share: 0.5}]\n";
}

static void test_determinism_and_selection(void)
{
    run a, b, c;
    run_text(&a, base_yaml(), NULL, 0);
    run_text(&b, base_yaml(), NULL, 0);
    const char *seed[] = {"seed=6"};
    run_text(&c, base_yaml(), seed, 1);
    CHECK_MSG(a.rc == 0 && b.rc == 0 && c.rc == 0, "runs: %s %s %s", a.err, b.err, c.err);
    CHECK_MSG(a.len == b.len && !memcmp(a.trace, b.trace, a.len), "same seed, same events");
    CHECK_MSG(a.len != c.len || memcmp(a.trace, c.trace, a.len), "another seed, other events");
    CHECK_EQ_I64(count_events(&a, "dispatch"), 6 * 3); /* per_round clients each round */
    CHECK_EQ_I64(count_events(&a, "aggregate"), 6);
    CHECK_EQ_I64(count_events(&a, "evaluate"), 4); /* round 0, then every 2 rounds */
    CHECK(a.t.acc_global > 0.25);                  /* it learned something (4 classes) */
    free(a.trace), free(b.trace), free(c.trace);

    /* fraction: 0.5 of 10 clients is 5 per round */
    const char *frac[] = {"federation={fraction: 0.5}"};
    run_text(&a, base_yaml(), frac, 1);
    CHECK_MSG(a.rc == 0, "%s", a.err);
    CHECK_EQ_I64(count_events(&a, "dispatch"), 6 * 5);
    free(a.trace);
}

/* Over-commit 2: 4 clients start, the round closes at the 2nd arrival, 2 arrive late. */
static void test_over_commit(void)
{
    const char *set[] = {"federation={per_round: 2, over_commit: 2.0}", "eval.every=0"};
    run r;
    run_text(&r, base_yaml(), set, 2);
    CHECK_MSG(r.rc == 0, "%s", r.err);
    /* each round aggregates exactly its first 2 arrivals; every other upload is late */
    CHECK_EQ_I64(count_events(&r, "upload_done") - r.t.late, 6 * 2);
    CHECK_EQ_I64(r.t.late, count_events(&r, "late"));
    CHECK(r.t.late >= 2);
    CHECK(count_events(&r, "dispatch") > 6 * 2); /* more were started than were needed */
    free(r.trace);
}

/* A deadline shorter than the slow devices' jobs (~1.1 s): the first round closes at exactly
 * 500 ms. */
static void test_deadline(void)
{
    const char *set[] = {"federation={per_round: 10, deadline: 500 ms}", "rounds=2",
                         "eval.every=0"};
    run r;
    run_text(&r, base_yaml(), set, 3);
    CHECK_MSG(r.rc == 0, "%s", r.err);
    CHECK_EQ_I64(event_ns(&r, "deadline", -1, 0), 500000000LL);
    CHECK_EQ_I64(event_ns(&r, "aggregate", -1, 0), 500000000LL);
    int before = 0; /* only the five fast clients made it in time */
    for (int c = 0; c < 10; c++) {
        long long t = event_ns(&r, "upload_done", c, 0);
        before += t >= 0 && t < 500000000LL;
    }
    CHECK_EQ_I64(before, 5);
    free(r.trace);
}

/* Client availability from a trace: every client goes offline at 50 ms, during its download. */
static void test_offline(void)
{
    write_file("off.trace", "0 s 1\n50 ms 0\n");
    const char *yaml =
            "seed: 1\nrounds: 1\ndataset: {name: synth-pews-3.2k}\n"
            "partition: {scheme: iid, clients: 4, local_test: 0}\nmodel: fedpews-mlp\n"
            "algorithm: {name: fedavg, local_steps: 1, batch_size: 16}\n"
            "federation: {per_round: 2}\neval: {every: 0, personalized: false}\n"
            "devices:\n  profiles:\n    d: {compute: 1 GFLOPS, up: 1 Mbps, down: 1 Mbps, latency: "
            "1 ms, memory: 1 GiB, availability: {kind: trace, file: off.trace}}\n"
            "  mix: [{profile: d, share: 1}]\n";
    run r;
    run_text(&r, yaml, NULL, 0);
    /* both jobs are lost at 50 ms; the round closes with no update; no client is ever online
     * again, so the next round cannot start: the run ends with a clear error */
    CHECK_EQ_I64(r.t.dropped, 2);
    CHECK_EQ_I64(count_events(&r, "job_lost"), 2);
    long long lost = -1;
    for (int c = 0; c < 4 && lost < 0; c++)
        lost = event_ns(&r, "job_lost", c, 0);
    CHECK_EQ_I64(lost, 50000000);
    CHECK_EQ_I64(count_events(&r, "aggregate"), 1);
    CHECK_EQ_I64(count_events(&r, "upload_done"), 0);
    free(r.trace);
}

/* A device whose memory cannot hold the training job is never selected. */
static void test_memory_exclusion(void)
{
    const char *set[] = {"devices.profiles.slow.memory=100 kB", "eval.every=0"};
    run r;
    run_text(&r, base_yaml(), set, 2);
    CHECK_MSG(r.rc == 0, "%s", r.err);
    CHECK_EQ_I64(r.t.excluded, 5);
    /* only the five fast clients ever run: each round's 3 come from them */
    int slow_jobs = 0;
    for (int c = 0; c < 10; c++)
        slow_jobs +=
                event_ns(&r, "train_done", c, 0) >= 0 && event_ns(&r, "train_done", c, 0) > 1e9;
    CHECK_EQ_I64(slow_jobs, 0); /* a slow device's job would take seconds */
    free(r.trace);
}

/* devices.capacity: uniform is a permutation of 1/N … 1, a number is every client's, a bad value
 * names the key; with widths by capacity, a device too small for the full model trains the
 * narrower model its memory affords instead of being excluded. */
static void test_capacity(void)
{
    const char *path = write_file("s.yaml", base_yaml());
    const char *set_uniform[] = {"devices.capacity=uniform"},
               *set_half[] = {"devices.capacity=0.5"};
    const char *set_bad[] = {"devices.capacity=1.5"};
    sim_scenario sc;
    sim_err err = {0};
    CHECK(sim_scenario_load(&sc, path, set_uniform, 1, &err) == SIM_OK);
    int seen[11] = {0}, ok = 1;
    for (int c = 0; c < 10; c++) {
        int k = (int)lround(sc.capacity[c] * 10);
        ok &= k >= 1 && k <= 10 && fabs(sc.capacity[c] - k / 10.0) < 1e-12 && !seen[k]++;
    }
    CHECK_MSG(ok, "uniform capacities are not a permutation of 0.1 … 1");
    sim_scenario_destroy(&sc);
    CHECK(sim_scenario_load(&sc, path, set_half, 1, &err) == SIM_OK && sc.capacity[7] == 0.5);
    sim_scenario_destroy(&sc);
    CHECK(sim_scenario_load(&sc, path, set_bad, 1, &err) == SIM_EINVAL);
    CHECK_MSG(strstr(err.msg, "capacity") && strstr(err.msg, "1.5"), "%s", err.msg);

    /* HeteroFL at width 1 for all (by = fixed) needs the full model's memory */
    const char *fixed[] = {"devices.profiles.slow.memory=100 kB", "eval.every=0",
                           "algorithm.name=heterofl", "algorithm.width.p=1"};
    const char *narrow[] = {"devices.profiles.slow.memory=100 kB", "eval.every=0",
                            "algorithm.name=heterofl", "algorithm.width.p=1",
                            "algorithm.width.by=capacity"};
    run r;
    run_text(&r, base_yaml(), fixed, 4);
    CHECK_MSG(r.rc == 0 && r.t.excluded == 5, "%s: %ld excluded", r.err, r.t.excluded);
    free(r.trace);
    run_text(&r, base_yaml(), narrow, 5);
    CHECK_MSG(r.rc == 0 && r.t.excluded == 0, "%s: %ld excluded", r.err, r.t.excluded);
    free(r.trace);
}

/* pFedGate: a lower density budget makes the rounds shorter (sparse training on devices that turn
 * sparsity into speed, smaller uploads) and sends fewer bytes; its FLOPs count as the devices'. */
static void test_pfedgate_budget(void)
{
    const char *common[] = {"devices.profiles.slow.sparse_eff=1",
                            "devices.profiles.fast.sparse_eff=1", "eval.every=0",
                            "algorithm.name=pfedgate", ""};
    const char *budgets[] = {"algorithm.pfedgate.s=1", "algorithm.pfedgate.s=0.3"};
    run r[2];
    for (int i = 0; i < 2; i++) {
        common[4] = budgets[i];
        run_text(&r[i], base_yaml(), common, 5);
        CHECK_MSG(r[i].rc == 0, "%s", r[i].err);
    }
    CHECK_MSG(r[1].t.now < r[0].t.now && r[1].t.bytes_up < r[0].t.bytes_up,
              "s = 0.3: %lld ns, %.0f B up; s = 1: %lld ns, %.0f B", (long long)r[1].t.now,
              r[1].t.bytes_up, (long long)r[0].t.now, r[0].t.bytes_up);
    for (int i = 0; i < 2; i++)
        free(r[i].trace);

    /* the client FLOPs are what the devices execute: the masked-out share their sparse runtime
     * skips is not counted, so at s = 0.3 they fall as sparse_eff rises, linearly (the training
     * is the same whatever the devices) */
    const char *effs[][2] = {
            {"devices.profiles.slow.sparse_eff=0", "devices.profiles.fast.sparse_eff=0"},
            {"devices.profiles.slow.sparse_eff=0.5", "devices.profiles.fast.sparse_eff=0.5"},
            {"devices.profiles.slow.sparse_eff=1", "devices.profiles.fast.sparse_eff=1"}};
    double f[3];
    for (int i = 0; i < 3; i++) {
        common[0] = effs[i][0], common[1] = effs[i][1];
        run_text(&r[0], base_yaml(), common, 5);
        CHECK_MSG(r[0].rc == 0, "%s", r[0].err);
        f[i] = r[0].t.flops;
        free(r[0].trace);
    }
    CHECK_MSG(f[2] < 0.9 * f[0] && fabs(f[1] - (f[0] + f[2]) / 2) <= 1e-9 * f[0],
              "client FLOPs at sparse_eff 0 / 0.5 / 1: %g / %g / %g", f[0], f[1], f[2]);
}

/* Async FedBuff: 4 in flight, aggregate every 2 arrivals; slow clients' updates are stale. */
static void test_async(void)
{
    const char *set[] = {("federation={mode: async, concurrency: 4, buffer: 2, staleness: {kind: "
                          "polynomial, a: 0.5}}"),
                         "rounds=8", "eval.every=4"};
    run r;
    run_text(&r, base_yaml(), set, 3);
    CHECK_MSG(r.rc == 0, "%s", r.err);
    CHECK_EQ_I64(r.t.round, 8);
    CHECK_EQ_I64(count_events(&r, "aggregate"), 8);
    CHECK_EQ_I64(count_events(&r, "upload_done"), 16);
    CHECK(count_events(&r, "dispatch") >= 16 + 2);
    int stale = 0;
    for (const char *p = r.trace; (p = strstr(p, "] upload_done")); p++) {
        int round, from;
        const char *q = strstr(p, "round="), *f = strstr(p, "from=");
        if (q && f && sscanf(q, "round=%d", &round) == 1 && sscanf(f, "from=%d", &from) == 1)
            stale += round > from;
    }
    CHECK_MSG(stale > 0, "some updates were computed from an older model");
    CHECK(r.t.acc_global > 0.25);
    free(r.trace);
    /* 2026-11-22: a nested section left out (federation.staleness) gets its defaults too */
    const char *bare[] = {"federation={mode: async, concurrency: 2, buffer: 2}", "rounds=2"};
    run_text(&r, base_yaml(), bare, 2);
    CHECK_MSG(r.rc == 0, "async without a staleness section: %s", r.err);
    free(r.trace);
}

/* A diverging run stops with a message naming the round and the client. */
static void test_divergence(void)
{
    const char *set[] = {"algorithm.lr=900", "algorithm.local_steps=50"};
    run r;
    run_text(&r, base_yaml(), set, 2);
    CHECK(r.rc != 0);
    CHECK_MSG(strstr(r.err, "diverged") && strstr(r.err, "client") && strstr(r.err, "round 0"),
              "divergence message: %s", r.err);
    free(r.trace);
}

/* 2026-11-22 review: local-only jobs (nothing to upload) arrived twice; now once, at train end. */
static void test_local_arrives_once(void)
{
    const char *set[] = {"algorithm.name=local", "rounds=4", "eval.every=0"};
    run r;
    run_text(&r, base_yaml(), set, 3);
    CHECK_MSG(r.rc == 0, "%s", r.err);
    CHECK_EQ_I64(count_events(&r, "dispatch"), 4 * 3);
    CHECK_EQ_I64(count_events(&r, "train_done"), 4 * 3);
    CHECK_EQ_I64(count_events(&r, "upload_done"), 0);
    CHECK_EQ_I64(r.t.late, 0);
    CHECK_NEAR(r.t.bytes_up + r.t.bytes_down, 0, 0);
    free(r.trace);
}

/* 2026-11-22 review: async with every idle client offline used to stop dead; it now wakes up
 * when the first one comes back. Clients are online 5 s of every ~10 min here. */
static void test_async_waits_for_clients(void)
{
    const char *set[] = {
            "federation={mode: async, concurrency: 2, buffer: 2}", "rounds=6", "eval.every=0",
            "devices.profiles.slow.availability={kind: markov, mean_on: 5 s, mean_off: 10 min}",
            "devices.profiles.fast.availability={kind: markov, mean_on: 5 s, mean_off: 10 min}"};
    run r;
    run_text(&r, base_yaml(), set, 5);
    CHECK_MSG(r.rc == 0, "%s", r.err);
    CHECK_EQ_I64(r.t.round, 6);
    CHECK(count_events(&r, "retry") > 0);
    free(r.trace);
}

/* 2026-11-22 review: a run cut short by max_time ends on an evaluation. */
static void test_max_time_evaluates(void)
{
    const char *set[] = {"eval.every=0", "max_time=1 s"};
    run r;
    run_text(&r, base_yaml(), set, 2);
    CHECK_MSG(r.rc == 0, "%s", r.err);
    CHECK_EQ_I64(r.t.now, 1000000000LL);
    CHECK(!isnan(r.t.acc_global));
    CHECK_EQ_I64(count_events(&r, "evaluate"), 2); /* the initial model's, and at max_time */
    free(r.trace);
}

/* 2026-11-23 review: a run cut by max_time right after an evaluated aggregation is not
 * evaluated again at max_time (pFedGate's clients, evaluated on their own trained copies at the
 * aggregation, would be scored a second time on the global model alone). */
static void test_max_time_no_second_evaluation(void)
{
    const char *set[] = {"algorithm.name=pfedgate", "eval={every: 1, personalized: true}", ""};
    run full, cut;
    run_text(&full, base_yaml(), set, 2);
    CHECK_MSG(full.rc == 0, "%s", full.err);
    /* max_time midway between the 2nd and 3rd aggregations */
    double at[3] = {0};
    int k = 0;
    for (const char *p = full.trace; p && (p = strstr(p, "] aggregate ")) && k < 3; p++) {
        const char *b = p;
        while (b > full.trace && b[-1] != '[')
            b--;
        at[k++] = atof(b);
    }
    CHECK_EQ_I64(k, 3);
    char mt[64];
    snprintf(mt, sizeof mt, "max_time=%.6f s", (at[1] + at[2]) / 2);
    set[2] = mt;
    run_text(&cut, base_yaml(), set, 3);
    CHECK_MSG(cut.rc == 0, "%s", cut.err);
    CHECK_MSG(count_events(&cut, "aggregate") == 2 && count_events(&cut, "evaluate") == 3,
              "cut after 2 aggregations: %d evaluations (round 0's, then one per aggregation)",
              count_events(&cut, "evaluate"));
    free(full.trace), free(cut.trace);
}

/* 2026-11-22 review: relative file names in a scenario become absolute in the resolved tree, so
 * the run folder's scenario.yaml (what fedsim resume reads) names the same files. */
static void test_paths_resolved(void)
{
    write_file("on.trace", "0 s 1\n");
    const char *path = write_file(
            "rel.yaml", "rounds: 1\ndataset: {name: synth-pews-3.2k}\n"
                        "partition: {scheme: iid, clients: 2}\nmodel: fedpews-mlp\n"
                        "devices:\n  profiles:\n    d: {compute: 1 GFLOPS, up: 1 Mbps, down: 1 "
                        "Mbps, latency: 1 ms, memory: 1 GiB, availability: {kind: trace, file: "
                        "on.trace}}\n  mix: [{profile: d, share: 1}]\n");
    sim_scenario sc;
    sim_err err = {0};
    CHECK_MSG(sim_scenario_load(&sc, path, NULL, 0, &err) == SIM_OK, "%s", err.msg);
    const sim_yaml *f = sim_yaml_get(
            sim_yaml_get(
                    sim_yaml_get(sim_yaml_get(sim_yaml_get(sc.doc, "devices"), "profiles"), "d"),
                    "availability"),
            "file");
    CHECK(f && f->value[0] == '/' && strstr(f->value, "on.trace"));
    sim_scenario_destroy(&sc);
}

static void test_staleness_weights(void)
{
    sim_fed_config f = {0};
    f.staleness = SIM_STALE_CONST;
    CHECK(sim_staleness_weight(&f, 7) == 1.0);
    f.staleness = SIM_STALE_POLY;
    f.stale_a = 0.5;
    CHECK_NEAR(sim_staleness_weight(&f, 0), 1.0, 0);
    CHECK_NEAR(sim_staleness_weight(&f, 3), 0.5, 1e-15); /* (1+3)^-0.5 */
    f.staleness = SIM_STALE_HINGE;
    f.stale_a = 2, f.stale_b = 4;
    CHECK(sim_staleness_weight(&f, 4) == 1.0);
    CHECK_NEAR(sim_staleness_weight(&f, 6), 1.0 / 5, 1e-15); /* 1/(2·(6−4)+1) */
}

/* The column named name of the last row of OUT/metrics.tsv (NaN without it). */
static double last_metric(const char *out, const char *name)
{
    char p[200], line[1024], head[1024] = "", row[1024] = "";
    snprintf(p, sizeof p, "%s/metrics.tsv", out);
    FILE *f = fopen(p, "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "round\t", 6))
            snprintf(head, sizeof head, "%s", line);
        else if (line[0] != '#')
            snprintf(row, sizeof row, "%s", line);
    if (f) fclose(f);
    size_t len = strlen(name);
    for (const char *h = head, *v = row; *h;) {
        if (!strncmp(h, name, len) && (h[len] == '\t' || h[len] == '\n')) return atof(v);
        h = strchr(h, '\t') ? strchr(h, '\t') + 1 : "";
        v = strchr(v, '\t') ? strchr(v, '\t') + 1 : "";
    }
    return NAN;
}

/* Run the scenario file at path into DIR/name (a new folder); sc stays loaded for the caller. */
static void run_into(sim_scenario *sc, const char *path, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", dir, name);
    sim_err err = {0};
    CHECK(sim_scenario_load(sc, path, NULL, 0, &err) == SIM_OK);
    sc->spec.out_dir = out;
    sc->spec.quiet = 1;
    CHECK(mkdir(out, 0755) == 0);
    sim_engine *e;
    CHECK(sim_engine_new(&e, &sc->spec, &err) == SIM_OK);
    CHECK(sim_engine_run(e, &err) == SIM_OK);
    sim_engine_free(e);
}

/* metrics.tsv's personalized columns on the tiny scenario (Dirichlet: clients' test splits of
 * unequal sizes), against clients.tsv's final accuracies: acc_pers_mean is their plain mean,
 * acc_pers_pooled their mean weighted by each client's test split (all samples pooled). */
static void test_pooled_accuracy(void)
{
    const char *path = write_file("pooled.yaml", "name: pooled\nseed: 7\nrounds: 2\n"
                                                 "dataset: {name: synth-pews-3.2k}\n"
                                                 "partition: {scheme: dirichlet, clients: 8, "
                                                 "alpha: 0.5, min_size: 20, local_test: 0.2}\n"
                                                 "model: fedpews-mlp\n"
                                                 "algorithm: {name: fedavg, batch_size: 32}\n"
                                                 "federation: {per_round: 4}\n"
                                                 "eval: {every: 1, personalized: true}\n");
    char out[128], p[160];
    sim_scenario sc;
    run_into(&sc, path, "pooled-out", out, sizeof out);
    const nn_partition *part = sc.spec.env.part;
    double mean = 0, hit = 0, all = 0, acc;
    int c, k = 0, unequal = 0;
    snprintf(p, sizeof p, "%s/clients.tsv", out);
    FILE *f = fopen(p, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        const char *last = strrchr(line, '\t');
        if (sscanf(line, "%d", &c) != 1 || !last || c < 0 || c >= part->n_clients) continue;
        acc = atof(last + 1);
        mean += acc, k++;
        hit += acc * part->n_test[c], all += part->n_test[c];
        unequal |= part->n_test[c] != part->n_test[0];
    }
    if (f) fclose(f);
    CHECK_MSG(k == 8 && unequal, "8 clients with test splits of unequal sizes (%d)", k);
    double col[2] = {last_metric(out, "acc_pers_mean"), last_metric(out, "acc_pers_pooled")};
    CHECK_MSG(fabs(col[0] - mean / 8) < 2e-6 && fabs(col[1] - hit / all) < 2e-6 &&
                      fabs(col[0] - col[1]) > 1e-4,
              "acc_pers_mean %.6f = mean %.6f; acc_pers_pooled %.6f = weighted %.6f", col[0],
              mean / 8, col[1], hit / all);
    sim_scenario_destroy(&sc);
}

/* partition.local_val: clients are tested on what the validation split leaves of their local
 * split and validated on the rest. At lr 0 every client's model stays the initial one, so both
 * means are recomputed here from the initial weights, client by client; without the key there
 * is no acc_val_mean column. */
static void test_validation_split(void)
{
    const char *text = "name: val\nseed: 7\nrounds: 2\n"
                       "dataset: {name: synth-pews-3.2k}\n"
                       "partition: {scheme: dirichlet, clients: 8, alpha: 0.5, min_size: 20, "
                       "local_test: 0.3, local_val: 0.5}\nmodel: fedpews-mlp\n"
                       "algorithm: {name: fedavg, batch_size: 32, lr: 0}\n"
                       "federation: {per_round: 4}\neval: {every: 1, personalized: true}\n";
    char out[128];
    sim_scenario sc;
    run_into(&sc, write_file("val.yaml", text), "val-out", out, sizeof out);
    const fl_env *env = &sc.spec.env;
    const nn_partition *part = env->part;
    nn_model m;
    nn_model_init(&m, env->arch, 64);
    fl_init_params(&m, env);
    const nn_dataset *d = part->test_from_train ? env->train : env->test;
    double val = 0, test = 0;
    int split = 1;
    for (int c = 0; c < part->n_clients; c++) {
        split &= part->n_val[c] > 0 && part->n_test[c] > 0;
        val += nn_evaluate(&m, d, part->val_idx[c], part->n_val[c], NULL);
        test += nn_evaluate(&m, d, part->test_idx[c], part->n_test[c], NULL);
    }
    val /= part->n_clients, test /= part->n_clients;
    double got_val = last_metric(out, "acc_val_mean"), got_test = last_metric(out, "acc_pers_mean");
    CHECK_MSG(split && fabs(got_val - val) < 2e-6 && fabs(got_test - test) < 2e-6 &&
                      fabs(val - test) > 1e-4,
              "acc_val_mean %.6f = %.6f, acc_pers_mean %.6f = %.6f (they differ)", got_val, val,
              got_test, test);
    nn_model_destroy(&m);
    sim_scenario_destroy(&sc);

    sim_scenario plain;
    char *cut = strstr(text, ", local_val: 0.5"), buf[600];
    snprintf(buf, sizeof buf, "%.*s%s", (int)(cut - text), text, cut + strlen(", local_val: 0.5"));
    run_into(&plain, write_file("noval.yaml", buf), "noval-out", out, sizeof out);
    CHECK(plain.spec.env.part->val_idx == NULL);
    CHECK(isnan(last_metric(out, "acc_val_mean")) && !isnan(last_metric(out, "acc_pers_mean")));
    sim_scenario_destroy(&plain);
}

/* ---------------------------------------------------------------------------------------- */
/* an algorithm's own metrics.tsv columns (fl_algo.columns) */

/* A stand-in algorithm: FedAvg whose server also counts its aggregations (and checkpoints the
 * count), with two columns of its own that read it. */
typedef struct counted {
    void *fa; /* FedAvg's server */
    int aggregations;
} counted;

static void *counted_new(const fl_env *env, sim_err *err)
{
    void *fa = fl_fedavg.server_new(env, err);
    if (!fa) return NULL;
    counted *s = calloc(1, sizeof *s);
    s->fa = fa;
    return s;
}

static void counted_free(void *p)
{
    counted *s = p;
    if (!s) return;
    fl_fedavg.server_free(s->fa);
    free(s);
}

static size_t counted_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    return fl_fedavg.job_down(((counted *)p)->fa, client, round, out);
}

static int counted_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                          double mass, sim_err *err)
{
    return fl_fedavg.server_absorb(((counted *)p)->fa, client, up, len, weight, mass, err);
}

static void counted_aggregate(void *p)
{
    counted *s = p;
    fl_fedavg.server_aggregate(s->fa);
    s->aggregations++;
}

static double counted_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    return fl_fedavg.eval_params(((counted *)p)->fa, client, priv, priv_len, m);
}

static void counted_save(void *p, msgpack_packer *pk)
{
    counted *s = p;
    msgpack_pack_array(pk, 2);
    fl_fedavg.server_save(s->fa, pk);
    msgpack_pack_int(pk, s->aggregations);
}

static int counted_load(void *p, const msgpack_object *o, sim_err *err)
{
    counted *s = p;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2 ||
        o->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return sim_fail(err, SIM_EFORMAT, "counted", 0, 0, "not [fedavg, aggregations]");
    s->aggregations = (int)o->via.array.ptr[1].via.u64;
    return fl_fedavg.server_load(s->fa, &o->via.array.ptr[0], err);
}

static double col_aggregations(const void *p)
{
    return ((const counted *)p)->aggregations;
}

static double col_half(const void *p)
{
    return ((const counted *)p)->aggregations / 2.0;
}

static const fl_column counted_columns[] = {
        {"aggregations", FL_COL_INT, col_aggregations},
        {"aggregations_half", FL_COL_F6, col_half},
        {0},
};

/* FedAvg's table with the counting server and its columns (fl_fedavg's fields are not constant
 * expressions, so it is made at run time). */
static const fl_algo *counted_algo(void)
{
    static fl_algo a;
    a = fl_fedavg;
    a.name = "counted";
    a.server_new = counted_new;
    a.server_free = counted_free;
    a.job_down = counted_down;
    a.server_absorb = counted_absorb;
    a.server_aggregate = counted_aggregate;
    a.eval_params = counted_eval;
    a.server_save = counted_save;
    a.server_load = counted_load;
    a.columns = counted_columns;
    return &a;
}

/* Run tiny.yaml for 4 rounds with the stand-in into DIR/name: through, or stopped after
 * stop_after rounds and then resumed from its checkpoint. */
static void run_counted(const char *name, int stop_after, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", dir, name);
    CHECK(mkdir(out, 0755) == 0);
    const char *sets[] = {"rounds=4"};
    for (int resume = 0; resume <= (stop_after > 0); resume++) {
        sim_scenario sc;
        sim_err err = {0};
        int rc = sim_scenario_load(&sc, "scenarios/tiny.yaml", sets, 1, &err);
        CHECK_MSG(rc == SIM_OK, "tiny loads: %s", err.msg);
        if (rc) return;
        sc.spec.algo = counted_algo();
        sc.spec.out_dir = out;
        sc.spec.quiet = 1;
        sc.spec.stop_after_round = resume ? 0 : stop_after;
        sc.spec.resume = resume;
        sim_engine *e;
        sim_totals tot = {0};
        rc = sim_engine_new(&e, &sc.spec, &err);
        if (!rc) {
            rc = sim_engine_run(e, &err);
            sim_engine_totals(e, &tot);
            sim_engine_free(e);
        }
        CHECK_MSG(rc == SIM_OK && tot.stopped == (!resume && stop_after > 0),
                  "%s, %s: %s (stopped %d)", name, resume ? "resumed" : "started", err.msg,
                  tot.stopped);
        sim_scenario_destroy(&sc);
    }
}

/* An algorithm's own columns (fl_algo.columns) end every row, valued from its server when the
 * row is written: the stand-in's count of aggregations is the row's round, printed as an
 * integer, and its half with six decimals. A run stopped after round 2 and resumed from its
 * checkpoint writes the same metrics.tsv, byte for byte, as one that ran through: the resumed
 * engine has the columns (no header is written again) and reads them from the restored server. */
static void test_algorithm_columns(void)
{
    char through[128], resumed[128], p[160];
    run_counted("counted", 0, through, sizeof through);
    run_counted("counted-resumed", 2, resumed, sizeof resumed);
    size_t la = 0, lb = 0;
    snprintf(p, sizeof p, "%s/metrics.tsv", through);
    char *a = test_slurp(p, &la);
    snprintf(p, sizeof p, "%s/metrics.tsv", resumed);
    char *b = test_slurp(p, &lb);
    int rows = 0, right = 0, last = -1;
    char *l = a ? strstr(a, "\nround\t") : NULL;
    for (l = l ? strchr(l + 1, '\n') : NULL; l && l[1]; l = strchr(l + 1, '\n')) {
        char line[1024], want[32];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(l + 1, "\n"), l + 1);
        last = atoi(line);
        snprintf(want, sizeof want, "\t%d\t%.6f", last, last / 2.0);
        size_t n = strlen(line), w = strlen(want);
        right += n > w && !strcmp(line + n - w, want);
        rows++;
    }
    CHECK_MSG(rows >= 4 && right == rows && last == 4,
              "%d rows end in their round's count and half (%d do), the last at round %d", rows,
              right, last);
    CHECK_MSG(a && b && la == lb && !memcmp(a, b, la),
              "a resumed run's metrics.tsv (%zu bytes) is the run's through (%zu bytes)", lb, la);
    free(a);
    free(b);
}

/* metrics.tsv's header and every row have the same columns, for every combination of the
 * optional ones: eval.shift's (one per shift), the base evaluation's (an algorithm with a base,
 * clients evaluated), acc_val_mean (validation splits, clients evaluated), the algorithm's own
 * (the stand-in's two, last); 13 always. */
static void test_metrics_columns(void)
{
    for (int k = 0; k < 32; k++) {
        int base = k & 1, pers = k >> 1 & 1, shift = k >> 2 & 1, val = k >> 3 & 1, own = k >> 4;
        if (shift && !pers) continue; /* a shift shifts clients' splits: refused without */
        if (own && base) continue;    /* the stand-in is FedAvg, which has no base */
        const char *sets[] = {"rounds=2",
                              "cost_only=true",
                              base ? "algorithm.name=fedavg-ft" : "algorithm.name=fedavg",
                              pers ? "eval.personalized=true" : "eval.personalized=false",
                              val ? "partition.local_val=0.2" : "partition.local_val=0",
                              "eval.shift=[0, 0.5]"};
        char out[128], p[160];
        snprintf(out, sizeof out, "%s/cols-%d", dir, k);
        CHECK(mkdir(out, 0755) == 0);
        sim_scenario sc;
        sim_err err = {0};
        int rc = sim_scenario_load(&sc, "scenarios/tiny.yaml", sets, 5 + shift, &err);
        CHECK_MSG(rc == SIM_OK, "combination %d loads: %s", k, err.msg);
        if (rc) continue;
        sc.spec.out_dir = out;
        sc.spec.quiet = 1;
        if (own) sc.spec.algo = counted_algo();
        sim_engine *e;
        CHECK(sim_engine_new(&e, &sc.spec, &err) == SIM_OK);
        CHECK(sim_engine_run(e, &err) == SIM_OK);
        sim_engine_free(e);
        sim_scenario_destroy(&sc);
        snprintf(p, sizeof p, "%s/metrics.tsv", out);
        size_t len;
        char *t = test_slurp(p, &len);
        int want = 13 + 2 * shift + (base && pers) * (2 + 2 * shift) + (val && pers) + 2 * own;
        int lines = 0;
        int header = -1, same = 1;
        for (char *l = t ? strchr(t, '\n') : NULL; l && l[1]; l = strchr(l + 1, '\n')) {
            int cols = 1;
            for (char *c = l + 1; *c && *c != '\n'; c++)
                cols += *c == '\t';
            if (header < 0) header = cols;
            same &= cols == header;
            lines++;
        }
        CHECK_MSG(header == want && same && lines == 4, /* header, rounds 0..2 */
                  "base %d pers %d shift %d val %d own %d: %d columns (want %d), rows alike %d, "
                  "%d lines",
                  base, pers, shift, val, own, header, want, same, lines);
        CHECK_MSG(t && !strstr(t, " base=fedavg\n") == !(base && pers),
                  "base %d pers %d: the first line names the base when it has columns", base, pers);
        CHECK_MSG(t && !strstr(t, "\taggregations\taggregations_half\n") == !own,
                  "combination %d: the algorithm's own columns end the header when it has them", k);
        free(t);
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/fedsim-engine-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_timing();
    test_steps_every_algorithm();
    test_determinism_and_selection();
    test_over_commit();
    test_deadline();
    test_offline();
    test_memory_exclusion();
    test_capacity();
    test_pfedgate_budget();
    test_async();
    test_staleness_weights();
    test_divergence();
    test_local_arrives_once();
    test_async_waits_for_clients();
    test_max_time_evaluates();
    test_max_time_no_second_evaluation();
    test_paths_resolved();
    test_pooled_accuracy();
    test_validation_split();
    test_metrics_columns();
    test_algorithm_columns();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
