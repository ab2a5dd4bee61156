/* tests/test_fl_spafl.c -- SpaFL (spec 003) against hand computations and an independent
 * forward/backward: LeNet-5-Caffe's counts (d, n_τ, forward MACs); density 1 at τ = 0; Eq. 13 on
 * a hand example (both divisors); one training step whose threshold and weight updates are
 * rebuilt from the model's own gradient of the masked network and checked by finite differences
 * (s_i is the derivative of the loss along scaling row i); pruned ReLU rows get exactly zero
 * gradient while the output layer's pruned rows do not; Eq. 7 averaging; and, over a run's
 * events, per-job compute time that falls with density and messages of 4·n_τ bytes plus framing
 * up, twice that down (τ and Δτ). */
#include "algos/algo.h"
#include "algos/spafl.h"
#include "nn/pack.h"
#include "sim/engine.h"
#include "sim/scenario.h"
#include "tests/algos.h"
#include "tests/check.h"
#include "tests/scenario_text.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_lenet_counts(void)
{
    sim_err err = {0};
    nn_arch a;
    CHECK(nn_arch_build(&a, "lenet5-caffe", 1, 28, 28, 10, &err) == SIM_OK);
    CHECK_EQ_I64(a.layout.n_params, 430500);
    CHECK_EQ_I64(fl_spafl_n_thresholds(&a), 580);
    nn_model m;
    nn_model_init(&m, &a, 1);
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_TEST, 0);
    nn_model_init_params(&m, &r);
    float x[784] = {0};
    m.cost = (nn_cost){0};
    nn_model_forward(&m, x, NULL, 1, 0);
    CHECK_NEAR(m.cost.flops, 2 * 2293000.0, 0); /* flops are 2·MACs */
    /* τ = 0: every unit is kept (mean |w| > 0) */
    float tau[580] = {0}, ratio[4] = {1, 1, 1, 1};
    uint8_t keep[580];
    CHECK(fl_spafl_masks(&a, m.params, tau, ratio, keep, 0.01) == 0);
    int kept = 0;
    for (int i = 0; i < 580; i++)
        kept += keep[i];
    CHECK_EQ_I64(kept, 580);
    CHECK(ratio[0] == 1 && ratio[1] == 1 && ratio[2] == 1 && ratio[3] == 1);
    /* a collapsed layer (ratio ≤ 1%) has its thresholds reset before the mask */
    for (int i = 20; i < 70; i++)
        tau[i] = 100;
    CHECK(fl_spafl_masks(&a, m.params, tau, ratio, keep, 0.01) == 0);
    CHECK(ratio[1] == 0 && keep[20] == 0);
    CHECK(fl_spafl_masks(&a, m.params, tau, ratio, keep, 0.01) == 1);
    CHECK(ratio[1] == 1 && tau[20] == 0 && tau[69] == 0 && keep[20] == 1);
    nn_model_destroy(&m);
}

/* Eq. 13: rows shift by −sign(row sum)·Δτ/D. mlp:3-2-2 is fc1 (2×3) and fc2 (2×2). */
static void test_eq13(void)
{
    sim_err err = {0};
    nn_arch a;
    CHECK(nn_arch_build(&a, "mlp:3-2-2", 3, 1, 1, 2, &err) == SIM_OK);
    float *p = calloc(a.layout.n_floats, sizeof(float));
    const nn_tensor *f1 = &a.layout.t[a.l[0].wt], *f2 = &a.layout.t[a.l[a.n - 1].wt];
    float w1[6] = {0.1f, 0.2f, -0.05f, -0.3f, 0.1f, 0.0f}, w2[4] = {0.5f, -0.5f, 0.2f, 0.1f};
    memcpy(p + f1->off, w1, sizeof w1);
    memcpy(p + f2->off, w2, sizeof w2);
    float delta[4] = {0.03f, 0.03f, 0.02f, -0.04f};
    fl_spafl_eq13(&a, p, delta, 0);
    /* fc1 row 0 (sum > 0, Δ > 0): down by 0.01; row 1 (sum < 0): up by 0.01 */
    float e1[6] = {0.09f, 0.19f, -0.06f, -0.29f, 0.11f, 0.01f};
    for (int j = 0; j < 6; j++)
        CHECK_NEAR(p[f1->off + j], e1[j], 1e-7);
    /* fc2 row 0 sums to 0: unchanged; row 1 (sum > 0, Δ = −0.04): up by 0.04/2 */
    CHECK(p[f2->off] == 0.5f && p[f2->off + 1] == -0.5f);
    CHECK_NEAR(p[f2->off + 2], 0.22, 1e-7);
    CHECK_NEAR(p[f2->off + 3], 0.12, 1e-7);
    free(p);

    /* convs divide by k·k (code) or by n_in = c_in·k·k (paper): LeNet conv2 is 20·5·5 */
    nn_arch l;
    CHECK(nn_arch_build(&l, "lenet5-caffe", 1, 28, 28, 10, &err) == SIM_OK);
    float *q[2];
    float *d = calloc(580, sizeof(float));
    d[20] = 0.5f; /* conv2, filter 0 */
    const nn_tensor *c2 = NULL;
    for (int i = 0; i < l.n; i++)
        if (l.l[i].op == NN_CONV && l.l[i].c == 20) c2 = &l.layout.t[l.l[i].wt];
    for (int k = 0; k < 2; k++) {
        q[k] = calloc(l.layout.n_floats, sizeof(float));
        for (int j = 0; j < c2->cols; j++)
            q[k][c2->off + j] = 0.01f;
        fl_spafl_eq13(&l, q[k], d, k);
    }
    CHECK_EQ_I64(c2->cols, 500);
    CHECK_NEAR(q[0][c2->off + 7], 0.01 - 0.5 / 25, 1e-7);
    CHECK_NEAR(q[1][c2->off + 7], 0.01 - 0.5 / 500, 1e-7);
    CHECK(q[0][c2->off + c2->cols] == 0); /* filter 1 untouched */
    free(q[0]);
    free(q[1]);
    free(d);
}

/* A threshold message {"tau": v} in sb (initialized here). */
static void tau_msg(msgpack_sbuffer *sb, const float *v, size_t n)
{
    msgpack_sbuffer_init(sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str(&pk, 3);
    msgpack_pack_str_body(&pk, "tau", 3);
    nn_pack_f32(&pk, v, n);
}

/* ---------------------------------------------------------------------------------------- */
/* one step against an independent computation */

/* Read the float vector `key` of the msgpack map in buf. */
static int read_vec(const void *buf, size_t len, const char *key, float *v, size_t n)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int ok = msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS;
    const msgpack_object *o = ok ? nn_map_get(&u.data, key) : NULL;
    ok = o && nn_unpack_f32(v, n, o, key, NULL) == SIM_OK;
    msgpack_unpacked_destroy(&u);
    return ok;
}

typedef struct fd_ctx {
    nn_model *m;
    const float *x;
    const int32_t *y;
    int B;
    float *row, *orig; /* the row being scaled and its original values */
    int cols;
    uint64_t pattern;
} fd_ctx;

static double loss_scaled(fd_ctx *c, double s)
{
    for (int j = 0; j < c->cols; j++)
        c->row[j] = (float)(c->orig[j] * s);
    double l = nn_model_forward(c->m, c->x, c->y, c->B, 1);
    for (int j = 0; j < c->cols; j++)
        c->row[j] = c->orig[j];
    return l;
}

static void test_step(void)
{
    sim_err err = {0};
    enum { N = 16 };
    nn_dataset train = {0};
    train.n = N, train.c = 1, train.h = 28, train.w = 28, train.classes = 10;
    train.x = malloc(sizeof(float) * N * 784);
    train.y = malloc(sizeof(int32_t) * N);
    sim_rng r;
    sim_rng_seed(&r, 5, SIM_RNG_TEST, 1);
    for (int i = 0; i < N * 784; i++)
        train.x[i] = (float)sim_rng_uniform(&r);
    for (int i = 0; i < N; i++)
        train.y[i] = (int32_t)sim_rng_below(&r, 10);
    nn_partition part = {0};
    CHECK(nn_partition_iid(&part, &train, 1, 5, &err) == SIM_OK);
    nn_arch a;
    CHECK(nn_arch_build(&a, "lenet5-caffe", 1, 28, 28, 10, &err) == SIM_OK);
    fl_config cfg = {0};
    snprintf(cfg.name, sizeof cfg.name, "spafl");
    cfg.local_steps = 1, cfg.batch_size = N, cfg.lr = 1, cfg.lr_decay = 1;
    fl_spafl_config sp = {.alpha = 0.01, .ste_weight = 1, .collapse = 0.01};
    cfg.own = &sp;
    fl_env env = {&cfg, &a, &train, &train, &part, 11, 0, NULL, NULL, NULL, NULL};
    size_t nf = a.layout.n_floats;

    /* thresholds: prune conv1 filters 0-1, conv2 filter 5, fc3 neurons 0-9, logit 3 */
    float tau[580] = {0};
    int pruned[] = {0, 1, 25, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 573};
    for (size_t k = 0; k < sizeof pruned / sizeof *pruned; k++)
        tau[pruned[k]] = 2.0f;
    msgpack_sbuffer down;
    tau_msg(&down, tau, 580);

    fl_worker w;
    fl_worker_init(&w);
    fl_result res;
    fl_result_init(&res);
    fl_job job = {0, 0, down.data, down.size, NULL, 0, 0};
    CHECK_MSG(fl_spafl.client_train(&env, &job, &w, &res, &err) == SIM_OK, "%s", err.msg);
    CHECK_EQ_I64(res.up_bytes, 8 + 4 * 580);
    float tnew[580], *wnew = malloc(sizeof(float) * nf);
    CHECK(read_vec(res.up.data, res.up.size, "tau", tnew, 580));
    CHECK(read_vec(res.priv.data, res.priv.size, "w", wnew, nf));

    /* the same masked network, built with the model API: G = ∂L/∂w̃ */
    nn_model m;
    nn_model_init(&m, &a, N);
    fl_init_params(&m, &env);
    float ratio[4] = {1, 1, 1, 1}, t2[580];
    memcpy(t2, tau, sizeof t2);
    uint8_t keep[580];
    fl_spafl_masks(&a, m.params, t2, ratio, keep, 0.01);
    for (size_t k = 0; k < sizeof pruned / sizeof *pruned; k++)
        CHECK(!keep[pruned[k]]);
    CHECK_EQ_I64(ratio[0] * 20, 18);
    const uint8_t *rows[NN_MAX_LAYERS] = {0};
    int li[4], n = 0, off[5] = {0, 20, 70, 570, 580};
    for (int i = 0; i < a.n; i++)
        if (a.l[i].op == NN_CONV || a.l[i].op == NN_LINEAR) li[n++] = i;
    for (int l = 0; l < 3; l++)
        rows[li[l]] = keep + off[l];
    nn_model_set_row_masks(&m, rows);
    const nn_tensor *t4 = &a.layout.t[a.l[li[3]].wt];
    float saved[500];
    memcpy(saved, m.params + t4->off + 3 * 500, sizeof saved);
    memset(m.params + t4->off + 3 * 500, 0, sizeof saved);
    nn_model_zero_grad(&m);
    nn_model_forward(&m, train.x, train.y, N, 1);
    nn_model_backward(&m);
    memcpy(m.params + t4->off + 3 * 500, saved, sizeof saved);

    int bad_tau = 0, bad_w = 0, bad_fd = 0, fd_done = 0, exact_pruned = 1;
    for (int l = 0; l < 4; l++) {
        const nn_tensor *t = &a.layout.t[a.l[li[l]].wt];
        for (int i = 0; i < t->rows; i++) {
            int k = off[l] + i;
            size_t o = t->off + (size_t)i * t->cols;
            double s = 0;
            for (int j = 0; j < t->cols; j++)
                s += (double)m.grads[o + j] * m.params[o + j];
            double gt = tau[k] - tnew[k], want = -s - 0.01 * exp(-tau[k]);
            if (fabs(gt - want) > 1e-4 * fabs(want) + 1e-6) {
                if (bad_tau++ < 5) printf("  tau[%d]: step %.9g, expected %.9g\n", k, gt, want);
            }
            if (!keep[k] && l < 3) { /* ReLU layer: G = 0, so s = 0 and the row stays put */
                int ok = s == 0 && fabs(gt + 0.01 * exp(-2.0)) < 3e-7; /* the regulariser alone */
                for (int j = 0; j < t->cols; j++)
                    ok &= wnew[o + j] == m.params[o + j];
                if (!ok)
                    printf("  pruned row %d: s %g, tau step %.9g, w[0] %.9g -> %.9g\n", k, s, gt,
                           m.params[o], wnew[o]);
                exact_pruned &= ok;
                continue;
            }
            for (int j = 0; j < t->cols; j++) {
                double g = (keep[k] ? m.grads[o + j] : 0) + (m.params[o + j] > 0   ? 1
                                                             : m.params[o + j] < 0 ? -1
                                                                                   : 0) *
                                                                    s / t->cols;
                double step = m.params[o + j] - wnew[o + j];
                if (fabs(step - g) > 1e-4 * fabs(g) + 1e-6 && bad_w++ < 5)
                    printf("  w[%d][%d]: step %.9g, expected %.9g\n", k, j, step, g);
            }
            /* s_i by finite differences along the row: scale it (kept) or grow it from 0
             * (pruned logit), with the masks held */
            if (i % 7 && keep[k]) continue;
            nn_model_set_row_masks(&m, rows);
            float orig[800];
            memcpy(orig, m.params + o, sizeof(float) * (size_t)t->cols);
            fd_ctx c = {&m, train.x, train.y, N, m.params + o, orig, t->cols, 0};
            double h = 1e-3, num;
            if (keep[k]) {
                memset(m.params + t4->off + 3 * 500, 0, sizeof saved);
                nn_model_forward(&m, train.x, train.y, N, 1);
                uint64_t p0 = nn_model_pattern(&m);
                double lp = loss_scaled(&c, 1 + h);
                uint64_t p1 = nn_model_pattern(&m);
                double lm = loss_scaled(&c, 1 - h);
                uint64_t p2 = nn_model_pattern(&m);
                memcpy(m.params + t4->off + 3 * 500, saved, sizeof saved);
                if (p1 != p0 || p2 != p0) continue; /* crossed a kink */
                num = (lp - lm) / (2 * h);
            } else {
                double lp = loss_scaled(&c, h), lm = loss_scaled(&c, -h);
                num = (lp - lm) / (2 * h);
            }
            fd_done++;
            if (fabs(num - s) > 2e-2 * fabs(s) + 2e-4) {
                if (bad_fd++ < 5) printf("  s[%d]: numeric %.6g analytic %.6g\n", k, num, s);
            }
        }
    }
    CHECK_MSG(bad_tau == 0, "%d threshold steps differ from -s_i - a·exp(-tau_i)", bad_tau);
    CHECK_MSG(bad_w == 0, "%d weight steps differ from keep·G + sign(w)·s/n_in", bad_w);
    CHECK_MSG(exact_pruned, "pruned ReLU rows got a gradient");
    CHECK_MSG(fd_done >= 60 && bad_fd == 0, "s_i by finite differences: %d bad of %d", bad_fd,
              fd_done);
    /* the pruned logit does get a gradient (no ReLU after the output layer) */
    {
        size_t o = t4->off + 3 * 500;
        double s = 0;
        for (int j = 0; j < 500; j++)
            s += (double)m.grads[o + j] * m.params[o + j];
        CHECK(s != 0 && tnew[573] != tau[573]);
    }
    /* fewer FLOPs than the dense model: conv1 keeps 18 of 20 filters, fc3 490 of 500 */
    nn_cost dense;
    nn_model_reset_narrowing(&m);
    nn_model_step_cost(&m, N, &dense);
    CHECK(res.cost.flops < dense.flops);

    nn_model_destroy(&m);
    free(wnew);
    fl_result_destroy(&res);
    fl_worker_destroy(&w);
    msgpack_sbuffer_destroy(&down);
    nn_partition_destroy(&part);
    nn_dataset_destroy(&train);
}

/* Eq. 7: the server's thresholds are the plain mean of the uploads; the down message is τ alone
 * by default and carries the last change too with delta: latest. */
static void test_server(void)
{
    sim_err err = {0};
    nn_arch a;
    CHECK(nn_arch_build(&a, "mlp:3-2-2", 3, 1, 1, 2, &err) == SIM_OK);
    nn_dataset d = {0};
    nn_partition part = {0};
    fl_config cfg = {0};
    fl_spafl_config sp = {0};
    cfg.own = &sp;
    snprintf(cfg.name, sizeof cfg.name, "spafl");
    fl_env env = {&cfg, &a, &d, &d, &part, 1, 0, NULL, NULL, NULL, NULL};
    void *s = fl_spafl.server_new(&env, &err);
    float up[2][4] = {{1, 2, 3, 4}, {3, 2, 1, -4}}, got[4], delta[4];
    for (int k = 0; k < 2; k++) {
        msgpack_sbuffer sb;
        tau_msg(&sb, up[k], 4);
        CHECK(fl_spafl.server_absorb(s, k, sb.data, sb.size, 100.0 * (k + 1), 1, &err) == SIM_OK);
        msgpack_sbuffer_destroy(&sb);
    }
    CHECK(fl_spafl.server_absorb(s, 2, "\x81", 1, 1, 1, &err) == SIM_EFORMAT);
    fl_spafl.server_aggregate(s);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    CHECK_EQ_I64(fl_spafl.job_down(s, 0, 0, &out), 7 + 16); /* map, "tau", bin8 header */
    CHECK_EQ_I64(fl_spafl.job_down(s, 0, 0, NULL), 7 + 16);
    CHECK(read_vec(out.data, out.size, "tau", got, 4));
    CHECK(got[0] == 2 && got[1] == 2 && got[2] == 2 && got[3] == 0);
    CHECK(!read_vec(out.data, out.size, "delta", delta, 4));
    sp.delta = FL_DELTA_LATEST;
    msgpack_sbuffer_clear(&out);
    CHECK_EQ_I64(fl_spafl.job_down(s, 0, 0, &out), fl_spafl.job_down(s, 0, 0, NULL));
    CHECK(read_vec(out.data, out.size, "delta", delta, 4));
    CHECK(delta[0] == 2 && delta[3] == 0);
    msgpack_sbuffer_destroy(&out);
    fl_spafl.server_free(s);
}

/* Over a run: one client on a 1 GFLOPS device, a strong regulariser: density falls round after
 * round, and so do the FLOPs of its jobs and their simulated compute time (= FLOPs / speed);
 * every message is τ alone. */
static void test_run_events(void)
{
    char dir[] = "/tmp/fedsim-spafl-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/s.yaml", dir);
    FILE *f = fopen(path, "w");
    fputs("seed: 2\nrounds: 8\ndataset: {name: synth-pews-3.2k}\n"
          "partition: {scheme: iid, clients: 1, local_test: 0.2}\nmodel: fedpews-mlp\n"
          "algorithm: {name: spafl, local_steps: 20, batch_size: 32, lr: 0.05, momentum: 0.9,\n"
          "            spafl: {alpha: 0.5}}\n"
          "federation: {per_round: 1}\neval: {every: 1}\n"
          "devices:\n  profiles:\n    d: {compute: 1 GFLOPS, up: 8 Mbps, down: 8 Mbps, latency: "
          "0 ms, memory: 1 GiB}\n  mix: [{profile: d, share: 1}]\n",
          f);
    fclose(f);
    sim_scenario sc;
    sim_err err = {0};
    CHECK_MSG(sim_scenario_load(&sc, path, NULL, 0, &err) == SIM_OK, "%s", err.msg);
    char *trace = NULL, *metrics = NULL, out[160];
    size_t tlen = 0;
    FILE *tr = open_memstream(&trace, &tlen);
    snprintf(out, sizeof out, "%s/run", dir);
    CHECK(mkdir(out, 0755) == 0);
    sc.spec.trace = tr;
    sc.spec.quiet = 1;
    sc.spec.out_dir = out;
    sim_engine *e = NULL;
    int rc = sim_engine_new(&e, &sc.spec, &err);
    if (!rc) rc = sim_engine_run(e, &err);
    CHECK_MSG(rc == SIM_OK, "spafl run: %s", err.msg);
    sim_engine_free(e);
    fclose(tr);
    char mpath[200];
    snprintf(mpath, sizeof mpath, "%s/metrics.tsv", out);
    FILE *mt = fopen(mpath, "r");
    CHECK(mt != NULL);
    if (mt) {
        metrics = calloc(1, 1 << 16);
        CHECK(fread(metrics, 1, (1 << 16) - 1, mt) > 0);
        fclose(mt);
    }
    /* job k: download_done at t0, train_done at t1 with flops F: t1 − t0 = F ns */
    double flops[8] = {0}, secs[8] = {0}, t0 = 0;
    int jobs = 0, bad_bytes = 0;
    for (char *p = trace; p && *p;) {
        char *end = strchr(p, '\n');
        double t, fl;
        char kind[32];
        long bytes;
        if (sscanf(p, "[%lf] %31s client=%*d round=%*d from=%*d bytes=%ld flops=%lf", &t, kind,
                   &bytes, &fl) == 4) {
            if (!strcmp(kind, "download_done")) t0 = t;
            /* fedpews-mlp: 32+64+128+32+4 = 260 thresholds; up {"tau"}, down {"tau", "delta"} */
            if ((!strcmp(kind, "upload_done") && bytes != 1048) ||
                (!strcmp(kind, "dispatch") && bytes != 1048 + 6 + 3 + 1040))
                bad_bytes++;
            if (!strcmp(kind, "train_done") && jobs < 8) {
                flops[jobs] = fl;
                secs[jobs++] = t - t0;
            }
        }
        p = end ? end + 1 : NULL;
    }
    CHECK_EQ_I64(jobs, 8);
    CHECK_EQ_I64(bad_bytes, 0);
    int exact = 1;
    for (int k = 0; k < jobs; k++)
        exact &= fabs(secs[k] - flops[k] * 1e-9) < 2e-9;
    CHECK_MSG(exact, "compute time is not FLOPs / 1 GFLOPS");
    /* density column: first and last evaluation */
    double d_first = -1, d_last = -1;
    for (char *p = metrics; p && *p;) {
        char *end = strchr(p, '\n');
        if (*p != '#' && *p != 'r') {
            const char *tab = p;
            for (int c = 0; c < 12 && tab; c++) /* density: the 13th column */
                tab = strchr(tab + 1, '\t');
            double d = tab ? atof(tab + 1) : -1;
            if (d_first < 0) d_first = d;
            d_last = d;
        }
        p = end ? end + 1 : NULL;
    }
    CHECK_MSG(d_first > 0 && d_last < 0.8 * d_first, "density %g then %g", d_first, d_last);
    CHECK_MSG(jobs > 0 && flops[jobs - 1] < 0.8 * flops[0] && secs[jobs - 1] < 0.8 * secs[0],
              "job FLOPs %g -> %g, compute %g s -> %g s", flops[0], flops[jobs ? jobs - 1 : 0],
              secs[0], secs[jobs ? jobs - 1 : 0]);
    free(trace);
    free(metrics);
    sim_scenario_destroy(&sc);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* One client's share of a small synthetic set and the FedPeWS MLP: SpaFL jobs on a small model
 * (batch 8, lr 0.01; the tests set the rest of cfg). */
typedef struct small {
    nn_dataset d, dt;
    nn_partition part;
    nn_arch a;
    fl_config cfg;
    fl_spafl_config sp; /* cfg.own */
    fl_env env;
} small;

static void small_init(small *S)
{
    sim_err err = {0};
    memset(S, 0, sizeof *S);
    CHECK(nn_synth_pews_make(&S->d, &S->dt, 20, 1, &err) == SIM_OK);
    CHECK(nn_partition_iid(&S->part, &S->d, 1, 1, &err) == SIM_OK);
    CHECK(nn_arch_build(&S->a, "fedpews-mlp", 5, 1, 1, 4, &err) == SIM_OK);
    snprintf(S->cfg.name, sizeof S->cfg.name, "spafl");
    S->cfg.batch_size = 8, S->cfg.lr = 0.01, S->cfg.lr_decay = 1;
    S->cfg.own = &S->sp;
    S->env = (fl_env){&S->cfg, &S->a, &S->d, &S->d, &S->part, 3, 0, NULL, NULL, NULL, NULL};
}

static void small_destroy(small *S)
{
    nn_partition_destroy(&S->part);
    nn_dataset_destroy(&S->d);
    nn_dataset_destroy(&S->dt);
}

/* A layer with every unit pruned outputs zeros (logits 0: loss ln 10) without crashing, and the
 * next step's collapse guard resets its thresholds to 0. */
static void test_collapse_in_training(void)
{
    sim_err err = {0};
    small S;
    small_init(&S);
    S.cfg.local_steps = 1;
    S.sp = (fl_spafl_config){.alpha = 0.01, .ste_weight = 1, .collapse = 0.01};
    int nt = fl_spafl_n_thresholds(&S.a);
    float *tau = calloc((size_t)nt, sizeof(float)), *tnew = calloc((size_t)nt, sizeof(float));
    for (int i = 0; i < 32; i++) /* the first hidden layer: all 32 neurons pruned */
        tau[i] = 50;
    msgpack_sbuffer down;
    tau_msg(&down, tau, (size_t)nt);
    fl_worker w;
    fl_worker_init(&w);
    fl_result res;
    fl_result_init(&res);
    fl_job job = {0, 0, down.data, down.size, NULL, 0, 0};
    CHECK(fl_spafl.client_train(&S.env, &job, &w, &res, &err) == SIM_OK);
    /* the only signal left: logits are 0, so the cross-entropy is ln 4, plus the regulariser */
    CHECK_MSG(res.loss > log(4.0) - 1e-6 && res.loss < log(4.0) + 0.01 * nt, "loss %g", res.loss);
    CHECK(read_vec(res.up.data, res.up.size, "tau", tnew, (size_t)nt) && tnew[0] >= 50);
    float ratio[NN_MAX_LAYERS];
    CHECK(read_vec(res.priv.data, res.priv.size, "ratio", ratio, 5) && ratio[0] == 0);
    /* a second job from this state: its first step resets the layer's thresholds */
    fl_result res2;
    fl_result_init(&res2);
    fl_job job2 = {0, 0, down.data, down.size, res.priv.data, res.priv.size, 1};
    S.sp.eq13 = 0;
    CHECK(fl_spafl.client_train(&S.env, &job2, &w, &res2, &err) == SIM_OK);
    CHECK(read_vec(res2.up.data, res2.up.size, "tau", tnew, (size_t)nt) && fabsf(tnew[0]) < 1);
    CHECK(read_vec(res2.priv.data, res2.priv.size, "ratio", ratio, 5) && ratio[0] == 1);
    fl_result_destroy(&res);
    fl_result_destroy(&res2);
    fl_worker_destroy(&w);
    msgpack_sbuffer_destroy(&down);
    small_destroy(&S);
    free(tau);
    free(tnew);
}

/* delta: mean — Eq. 13 shifts by the change of τ_g since the client's last round divided by the
 * rounds between. With lr 0 a job is that shift alone: jobs at rounds 4 and 6 (the client last at
 * 0, then 4) give exactly Eq. 13 with (T1 − 0)/4, then (T2 − T1)/2. */
static void test_delta_mean(void)
{
    sim_err err = {0};
    small S;
    small_init(&S);
    S.cfg.local_steps = 2, S.cfg.momentum = 0.9;
    S.sp = (fl_spafl_config){
            .alpha = 0.01, .eq13 = 1, .delta = FL_DELTA_MEAN, .ste_weight = 1, .collapse = 0.01};
    size_t nf = S.a.layout.n_floats, nt = (size_t)fl_spafl_n_thresholds(&S.a);
    float *tg[3], *w = malloc(sizeof(float) * nf), *got = malloc(sizeof(float) * nf);
    float *delta = malloc(sizeof(float) * nt);
    int rounds[3] = {0, 4, 6};
    sim_rng r;
    sim_rng_seed(&r, 8, SIM_RNG_TEST, 2);
    fl_worker wk;
    fl_worker_init(&wk);
    fl_result res[3];
    for (int k = 0; k < 3; k++) {
        tg[k] = calloc(nt, sizeof(float));
        for (size_t j = 0; k && j < nt; j++)
            tg[k][j] = (float)(0.1 * sim_rng_uniform(&r) - 0.05);
        msgpack_sbuffer down;
        tau_msg(&down, tg[k], nt);
        fl_result_init(&res[k]);
        fl_job job = {0,
                      rounds[k],
                      down.data,
                      down.size,
                      k ? res[k - 1].priv.data : NULL,
                      k ? res[k - 1].priv.size : 0,
                      (uint64_t)k};
        if (k) S.cfg.lr = 0; /* the shift alone */
        CHECK(fl_spafl.client_train(&S.env, &job, &wk, &res[k], &err) == SIM_OK);
        msgpack_sbuffer_destroy(&down);
        if (!k) continue;
        CHECK(read_vec(res[k - 1].priv.data, res[k - 1].priv.size, "w", w, nf));
        float per = 1.0f / (float)(rounds[k] - rounds[k - 1]);
        for (size_t j = 0; j < nt; j++)
            delta[j] = (tg[k][j] - tg[k - 1][j]) * per;
        fl_spafl_eq13(&S.a, w, delta, 0);
        CHECK(read_vec(res[k].priv.data, res[k].priv.size, "w", got, nf));
        size_t moved = 0;
        for (size_t j = 0; j < nf; j++)
            moved += got[j] != w[j];
        CHECK_MSG(moved == 0, "round %d: %zu weights off Eq. 13 with the mean change", rounds[k],
                  moved);
    }
    for (int k = 0; k < 3; k++)
        fl_result_destroy(&res[k]), free(tg[k]);
    fl_worker_destroy(&wk);
    small_destroy(&S);
    free(w), free(got), free(delta);
}

/* Scenario keys: spafl's map is validated (bad keys name file and line), also under fedavg. */
static void test_scenario_keys(void)
{
    const char *base = "dataset: {name: synth-pews-3.2k}\nmodel: fedpews-mlp\n"
                       "partition: {scheme: iid, clients: 4}\n";
    const char *alg[] = {"algorithm: {name: spafl, spafl: {alpha: 0.1, delta: accumulated}}\n",
                         "algorithm: {name: fedavg, spafl: {alpha: 0.1}}\n",
                         "algorithm: {name: spafl,\n  spafl: {alfa: 0.1}}\n",
                         "algorithm: {name: spafl, spafl: {delta: newest}}\n"};
    for (int k = 0; k < 4; k++) {
        char text[512], msg[700];
        snprintf(text, sizeof text, "%s%s", base, alg[k]);
        sim_scenario sc;
        int rc = test_load_scenario(&sc, text, msg, sizeof msg);
        if (k < 2) {
            CHECK_MSG(rc == SIM_OK, "%s", msg);
            if (!rc) {
                /* under fedavg the section is read too, though not fedavg's own */
                const fl_spafl_config *sp =
                        fl_config_block(&sc.cfg, fl_algo_find("spafl")->section);
                CHECK(sp && (sp == sc.cfg.own) == (k == 0));
                CHECK(sp && sp->alpha == 0.1 &&
                      sp->delta == (k == 1 ? FL_DELTA_LATEST : FL_DELTA_ACCUMULATED));
                CHECK(sp && (k == 1 || (sp->eq13 && sp->warmup && !sp->clamp)));
                sim_scenario_destroy(&sc);
            }
        } else {
            CHECK_MSG(rc != SIM_OK && strstr(msg, k == 2 ? "alfa" : "newest") &&
                              strstr(msg, k == 2 ? "s.yaml:5" : "s.yaml:4"),
                      "%s", msg);
        }
    }
}

int main(void)
{
    test_lenet_counts();
    test_eq13();
    test_step();
    test_server();
    test_run_events();
    test_collapse_in_training();
    test_delta_mean();
    test_scenario_keys();
    return CHECK_DONE();
}
