/* tests/test_fl_fednova.c -- FedNova (algos/fednova.c) against hand computations:
 *   - the normalizer a_i a client reports is the closed form [τ − ρ(1 − ρ^τ)/(1 − ρ)]/(1 − ρ) for
 *     momentum ρ (τ with plain SGD, τ counted from local_steps or from local_epochs over the
 *     client's samples, 0 for a client without samples), and that closed form is what nn/'s
 *     momentum step really applies: τ steps of a constant gradient g move the model by −η a g;
 *   - the server step from crafted uploads of clients with different a_i, weights and masses
 *     (sync, then async weights lowered by staleness; a client without steps counts nowhere) is
 *     x + η_g τ_eff Σ weight_i Δ_i/a_i / M with τ_eff = Σ mass_i a_i / M; malformed uploads are
 *     refused and change nothing; a server saved mid-round and loaded aggregates to the same bits;
 *   - with equal τ FedNova's upload is FedAvg's plus a_i and its global model is FedAvg's (to
 *     float rounding); with local_epochs over unequal data it is the hand-computed normalized step;
 *   - on scenarios/tiny.yaml with local_epochs over its unequal Dirichlet split the loss falls and
 *     the accuracy rises above chance, the upload bytes are FedAvg's plus 9 per job, and a run
 *     stopped at a checkpoint and resumed writes the bytes of a straight run. */
#include "algos/algo.h"
#include "nn/pack.h"
#include "sim/engine.h"
#include "sim/scenario.h"
#include "tests/check.h"
#include "tests/files.h"
#include "tests/fljob.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { CLIENTS = 4 };
static const int SIZES[CLIENTS] = {40, 13, 0, 25}; /* unequal, one without samples */
static nn_dataset train, test;
static nn_partition part;
static nn_arch arch;
static size_t nf;
static const fl_algo *nova, *avg;
static char dir[64];

/* The paper's closed form for momentum SGD (ρ = 0: τ). */
static double closed_form(int64_t tau, double rho)
{
    if (rho == 0) return (double)tau;
    return ((double)tau - rho * (1 - pow(rho, (double)tau)) / (1 - rho)) / (1 - rho);
}

/* The float64 after the parameter message of an upload (-1 when there is none). */
static double up_norm(const void *up, size_t len)
{
    size_t end = 0, off;
    if (nn_msgpack_check(up, len, 0, &end, NULL, "up", NULL)) return -1;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    off = end;
    double a = -1;
    if (!nn_msgpack_next(&u, up, len, &off, NULL, NULL) && u.data.type == MSGPACK_OBJECT_FLOAT64 &&
        off == len)
        a = u.data.via.f64;
    msgpack_unpacked_destroy(&u);
    return a;
}

/* Zero v's alignment padding, which messages do not carry and SGD does not step. */
static void zero_padding(float *v)
{
    float *keep = calloc(nf, sizeof(float));
    for (int t = 0; t < arch.layout.n; t++) {
        const nn_tensor *T = &arch.layout.t[t];
        memcpy(keep + T->off, v + T->off, sizeof(float) * (size_t)T->rows * T->cols);
    }
    memcpy(v, keep, nf * sizeof(float));
    free(keep);
}

/* An upload: Δ, then a as a float64. */
static void craft(msgpack_sbuffer *sb, const float *delta, double a)
{
    msgpack_sbuffer_init(sb);
    nn_pack_params(sb, &arch, delta);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_double(&pk, a);
}

/* x0 + η_g τ_eff Σ w_i Δ_i/a_i / M over the k clients with a_i > 0, in double, into out. */
static void expect_step(double *out, const float *x0, float *const *delta, const double *a,
                        const double *w, const double *m, int k, double server_lr)
{
    double M = 0, tm = 0;
    for (int i = 0; i < k; i++)
        if (a[i] > 0) M += m[i], tm += m[i] * a[i];
    for (size_t j = 0; j < nf; j++) {
        double s = 0;
        for (int i = 0; i < k; i++)
            if (a[i] > 0) s += w[i] * delta[i][j] / a[i];
        out[j] = x0[j] + (M > 0 ? server_lr * (tm / M) * s / M : 0);
    }
}

/* The largest |x − want| / (FLT_EPSILON·(|x0| + |want − x0|)): the float result rounds the step
 * and the sum once each, so anything above ~1 is not rounding. */
static double ulps_off(const float *x, const double *want, const float *x0)
{
    double worst = 0;
    for (size_t j = 0; j < nf; j++) {
        double scale = FLT_EPSILON * (fabs((double)x0[j]) + fabs(want[j] - x0[j])) + 1e-30;
        worst = fmax(worst, fabs((double)x[j] - want[j]) / scale);
    }
    return worst;
}

static void global_of(const fl_algo *a, void *server, float *out)
{
    nn_model m;
    nn_model_init(&m, &arch, 1);
    a->eval_params(server, -1, NULL, 0, &m);
    memcpy(out, m.params, nf * sizeof(float));
    nn_model_destroy(&m);
}

static fl_config base_config(void)
{
    fl_config c = {.name = "fednova",
                   .local_epochs = 1,
                   .batch_size = 8,
                   .lr = 0.05,
                   .lr_decay = 1,
                   .mu = 0.01, /* the shared default, FedProx's: FedNova ignores it */
                   .server_lr = 1};
    return c;
}

/* (1) a_i: the client's report against the closed form, the closed form against nn/'s step. */
static void test_norm(void)
{
    CHECK_NEAR(closed_form(3, 0.5), 1 + 1.5 + 1.75, 1e-15); /* c_k = 1, 1 + ρ, 1 + ρ + ρ² */
    fl_config cfg = base_config();
    fl_env env = {&cfg, &arch, &train, &test, &part, 5, 0, NULL, NULL, NULL, NULL};
    sim_err err = {0};
    void *s = nova->server_new(&env, &err), *sa = avg->server_new(&env, &err);
    fl_worker w;
    fl_worker_init(&w);
    size_t dense = fl_dense_msg_bytes(&arch);
    /* local_steps with momentum, then local_epochs with and without momentum */
    const struct {
        int steps, epochs;
        double rho;
    } cases[] = {{7, 1, 0.9}, {0, 2, 0.9}, {0, 2, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        cfg.local_steps = cases[k].steps;
        cfg.local_epochs = cases[k].epochs;
        cfg.momentum = cases[k].rho;
        for (int c = 0; c < CLIENTS; c++) {
            int64_t tau = SIZES[c] == 0    ? 0
                          : cases[k].steps ? cases[k].steps
                                           : cases[k].epochs * ((SIZES[c] + 7) / 8);
            fl_result r, ra;
            test_job(nova, &env, s, c, 0, NULL, 0, &r, &w);
            double a = up_norm(r.up.data, r.up.size), want = closed_form(tau, cases[k].rho);
            CHECK_MSG(fabs(a - want) <= 1e-12 * want, "case %zu client %d: a_i %.17g, want %.17g",
                      k, c, a, want);
            CHECK_EQ_I64(r.steps, tau);
            /* FedAvg's message, then the float64; cost-only mode charges the same */
            test_job(avg, &env, sa, c, 0, NULL, 0, &ra, &w);
            CHECK(r.up_bytes == r.up.size && r.up.size == dense + 9 && ra.up.size == dense);
            CHECK(!memcmp(r.up.data, ra.up.data, ra.up.size));
            fl_env co = env;
            co.cost_only = 1;
            fl_job j = {c, 0, NULL, 0, NULL, 0, (uint64_t)c << 32};
            fl_result rc;
            fl_result_init(&rc);
            CHECK(nova->client_train(&co, &j, &w, &rc, &err) == SIM_OK);
            CHECK(rc.up_bytes == r.up_bytes && rc.steps == r.steps && rc.up.size == 0);
            fl_result_destroy(&rc), fl_result_destroy(&r), fl_result_destroy(&ra);
        }
    }
    /* τ steps of nn/'s momentum SGD from a zero buffer on a constant gradient g move the
     * parameters by −η a g: each step's float rounding is relative (v's sum, p's update), so
     * the error stays within a few τ·ε of |p0| + |η a g| */
    const int tau = 7;
    const double rho = 0.9, lr = 0.05, a = closed_form(tau, rho);
    nn_model m;
    nn_model_init(&m, &arch, 1);
    fl_init_params(&m, &env);
    sim_rng rng;
    sim_rng_seed(&rng, 3, SIM_RNG_INIT_WEIGHTS, 99);
    float *g = malloc(nf * sizeof(float)), *p0 = malloc(nf * sizeof(float));
    for (size_t j = 0; j < nf; j++)
        g[j] = (float)(2 * sim_rng_uniform(&rng) - 1);
    zero_padding(g);
    memcpy(p0, m.params, nf * sizeof(float));
    memset(m.mom, 0, nf * sizeof(float));
    nn_sgd opt = {(float)lr, (float)rho, 0, 0};
    for (int t = 0; t < tau; t++) {
        memcpy(m.grads, g, nf * sizeof(float));
        nn_model_sgd_step(&m, &opt);
    }
    double worst = 0;
    for (size_t j = 0; j < nf; j++) {
        double want = -(double)(float)lr * a * g[j], got = (double)m.params[j] - p0[j];
        worst = fmax(worst, fabs(got - want) / (tau * FLT_EPSILON * (fabs(p0[j]) + fabs(want))));
    }
    CHECK_MSG(worst <= 4, "momentum SGD's displacement is -lr*a*g (off by %.3g tau*eps)", worst);
    nn_model_destroy(&m);
    free(g), free(p0);
    fl_worker_destroy(&w);
    nova->server_free(s), avg->server_free(sa);
}

/* (2) the server step from crafted uploads, bad uploads, checkpoints. */
static void test_server(void)
{
    fl_config cfg = base_config();
    cfg.server_lr = 0.7;
    fl_env env = {&cfg, &arch, &train, &test, &part, 5, 0, NULL, NULL, NULL, NULL};
    sim_err err = {0};
    void *s = nova->server_new(&env, &err);
    float *d[3], *x0 = malloc(nf * sizeof(float)), *x = malloc(nf * sizeof(float));
    double *want = malloc(nf * sizeof(double));
    sim_rng rng;
    sim_rng_seed(&rng, 4, SIM_RNG_INIT_WEIGHTS, 98);
    for (int i = 0; i < 3; i++) {
        d[i] = malloc(nf * sizeof(float));
        for (size_t j = 0; j < nf; j++)
            d[i][j] = (float)(0.02 * (sim_rng_uniform(&rng) - 0.5));
        zero_padding(d[i]);
    }
    /* client 2 ran no step: its a is 0 and its change (garbage here) must count nowhere */
    const double a[3] = {3, 7.25, 0};
    msgpack_sbuffer up[3];
    for (int i = 0; i < 3; i++)
        craft(&up[i], d[i], a[i]);
    /* sync: weight = mass */
    const double w1[3] = {10, 30, 5};
    global_of(nova, s, x0);
    for (int i = 0; i < 3; i++)
        CHECK(nova->server_absorb(s, i, up[i].data, up[i].size, w1[i], w1[i], &err) == SIM_OK);
    nova->server_aggregate(s);
    global_of(nova, s, x);
    expect_step(want, x0, d, a, w1, w1, 3, 0.7);
    double off = ulps_off(x, want, x0);
    CHECK_MSG(off <= 1, "sync step: x + lr_g tau_eff sum w D/a / M (off by %.3g eps)", off);
    /* async: staleness lowers client 0's weight, not its mass */
    const double w2[3] = {10 * 0.25, 30, 5}, m2[3] = {10, 30, 5};
    memcpy(x0, x, nf * sizeof(float));
    for (int i = 0; i < 3; i++)
        CHECK(nova->server_absorb(s, i, up[i].data, up[i].size, w2[i], m2[i], &err) == SIM_OK);
    /* a server saved mid-round and loaded aggregates to the same bits */
    msgpack_sbuffer ck;
    msgpack_sbuffer_init(&ck);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &ck, msgpack_sbuffer_write);
    nova->server_save(s, &pk);
    void *s2 = nova->server_new(&env, &err);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t uoff = 0;
    CHECK(nn_msgpack_next(&u, ck.data, ck.size, &uoff, "checkpoint", &err) == SIM_OK);
    CHECK(nova->server_load(s2, &u.data, &err) == SIM_OK);
    nova->server_aggregate(s);
    nova->server_aggregate(s2);
    global_of(nova, s, x);
    expect_step(want, x0, d, a, w2, m2, 3, 0.7);
    off = ulps_off(x, want, x0);
    CHECK_MSG(off <= 1, "async step: tau_eff and M by mass, the sum by weight (off by %.3g eps)",
              off);
    float *x2 = malloc(nf * sizeof(float));
    global_of(nova, s2, x2);
    CHECK_MSG(!memcmp(x, x2, nf * sizeof(float)), "a loaded server aggregates as the saved one");
    /* FedAvg's server state (no Σ mass·a) does not fit */
    void *sa = avg->server_new(&env, &err);
    msgpack_sbuffer fa;
    msgpack_sbuffer_init(&fa);
    msgpack_packer_init(&pk, &fa, msgpack_sbuffer_write);
    avg->server_save(sa, &pk);
    msgpack_unpacked_destroy(&u);
    msgpack_unpacked_init(&u);
    uoff = 0;
    CHECK(nn_msgpack_next(&u, fa.data, fa.size, &uoff, "checkpoint", &err) == SIM_OK);
    CHECK(nova->server_load(s2, &u.data, &err) == SIM_EFORMAT);
    msgpack_unpacked_destroy(&u);

    /* malformed uploads are refused and add nothing: after them, client 0's upload alone moves
     * the model by exactly lr_g Δ_0 */
    msgpack_sbuffer bad[7];
    craft(&bad[0], d[0], 0.5); /* τ >= 1 steps give a >= 1 */
    craft(&bad[1], d[0], NAN);
    craft(&bad[2], d[0], -2);
    craft(&bad[3], d[0], INFINITY);
    msgpack_sbuffer_init(&bad[4]); /* FedAvg's upload: no a */
    nn_pack_params(&bad[4], &arch, d[0]);
    msgpack_sbuffer_init(&bad[5]); /* a as a float32 */
    nn_pack_params(&bad[5], &arch, d[0]);
    msgpack_packer_init(&pk, &bad[5], msgpack_sbuffer_write);
    msgpack_pack_float(&pk, 3);
    craft(&bad[6], d[0], 3); /* a byte after a */
    msgpack_sbuffer_write(&bad[6], "\x01", 1);
    global_of(nova, s, x0);
    for (int i = 0; i < 7; i++)
        CHECK_MSG(nova->server_absorb(s, 0, bad[i].data, bad[i].size, 1, 1, &err) == SIM_EFORMAT,
                  "bad upload %d refused", i);
    CHECK(nova->server_absorb(s, 0, up[0].data, up[0].size - 1, 1, 1, &err) == SIM_EFORMAT);
    CHECK(nova->server_absorb(s, 0, up[0].data, up[0].size, 4, 4, &err) == SIM_OK);
    nova->server_aggregate(s);
    global_of(nova, s, x);
    const double w3[1] = {4};
    expect_step(want, x0, d, a, w3, w3, 1, 0.7);
    off = ulps_off(x, want, x0);
    CHECK_MSG(off <= 1, "refused uploads left nothing behind (off by %.3g eps)", off);
    for (int i = 0; i < 7; i++)
        msgpack_sbuffer_destroy(&bad[i]);
    for (int i = 0; i < 3; i++)
        msgpack_sbuffer_destroy(&up[i]), free(d[i]);
    msgpack_sbuffer_destroy(&ck), msgpack_sbuffer_destroy(&fa);
    free(x0), free(x), free(x2), free(want);
    nova->server_free(s), nova->server_free(s2), avg->server_free(sa);
}

/* (3) equal τ: FedAvg's global model; unequal τ (local_epochs): the normalized step. */
static void test_vs_fedavg(void)
{
    fl_config cfg = base_config();
    cfg.momentum = 0.9;
    fl_env env = {&cfg, &arch, &train, &test, &part, 5, 0, NULL, NULL, NULL, NULL};
    sim_err err = {0};
    fl_worker w;
    fl_worker_init(&w);
    float *xa = malloc(nf * sizeof(float)), *xn = malloc(nf * sizeof(float)),
          *x0 = malloc(nf * sizeof(float)), *d[CLIENTS];
    double *want = malloc(nf * sizeof(double)), a[CLIENTS], wt[CLIENTS];
    for (int c = 0; c < CLIENTS; c++)
        d[c] = malloc(nf * sizeof(float));
    for (int equal = 1; equal >= 0; equal--) {
        cfg.local_steps = equal ? 5 : 0;
        cfg.local_epochs = 3;
        void *sn = nova->server_new(&env, &err), *sa = avg->server_new(&env, &err);
        global_of(nova, sn, x0);
        for (int c = 0; c < CLIENTS; c++) {
            fl_result rn, ra;
            test_job(nova, &env, sn, c, 0, NULL, 0, &rn, &w);
            test_job(avg, &env, sa, c, 0, NULL, 0, &ra, &w);
            wt[c] = SIZES[c];
            a[c] = up_norm(rn.up.data, rn.up.size);
            CHECK(nn_unpack_params(d[c], &arch, rn.up.data, rn.up.size, "up", &err) == SIM_OK);
            CHECK(nova->server_absorb(sn, c, rn.up.data, rn.up.size, wt[c], wt[c], &err) == SIM_OK);
            CHECK(avg->server_absorb(sa, c, ra.up.data, ra.up.size, wt[c], wt[c], &err) == SIM_OK);
            fl_result_destroy(&rn), fl_result_destroy(&ra);
        }
        nova->server_aggregate(sn);
        avg->server_aggregate(sa);
        global_of(nova, sn, xn);
        global_of(avg, sa, xa);
        expect_step(want, x0, d, a, wt, wt, CLIENTS, 1);
        double off = ulps_off(xn, want, x0);
        CHECK_MSG(off <= 1, "equal %d: the normalized step (off by %.3g eps)", equal, off);
        /* FedAvg's step, rounded once more its own way */
        double worst = 0, diff = 0;
        for (size_t j = 0; j < nf; j++) {
            double step = fabs((double)xa[j] - x0[j]);
            worst = fmax(worst, fabs((double)xn[j] - xa[j]) /
                                        (FLT_EPSILON * (fabs(x0[j]) + step) + 1e-30));
            diff = fmax(diff, fabs((double)xn[j] - xa[j]));
        }
        if (equal)
            CHECK_MSG(worst <= 2, "equal tau: FedAvg's global model (off by %.3g eps)", worst);
        else /* different τ (15, 6, 0, 12 steps): not FedAvg */
            CHECK_MSG(diff > 1e-4, "unequal tau: not FedAvg's model (largest difference %g)", diff);
        nova->server_free(sn), avg->server_free(sa);
    }
    for (int c = 0; c < CLIENTS; c++)
        free(d[c]);
    free(xa), free(xn), free(x0), free(want);
    fl_worker_destroy(&w);
}

/* Run tiny.yaml with the overrides into dir/name (stop after aggregation stop, resume: continue
 * from its checkpoint); totals in t. */
static void run_tiny(const char *name, const char *algo, int stop, int resume, sim_totals *t)
{
    char out[128], set[64];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    if (!resume) CHECK(mkdir(out, 0755) == 0);
    snprintf(set, sizeof set, "algorithm.name=%s", algo);
    const char *sets[] = {set, "algorithm.local_epochs=2", "rounds=8"};
    sim_scenario sc;
    sim_err err = {0};
    int rc = sim_scenario_load(&sc, "scenarios/tiny.yaml", sets, 3, &err);
    CHECK_MSG(rc == SIM_OK, "tiny.yaml: %s", err.msg);
    if (rc) return;
    sc.spec.out_dir = out;
    sc.spec.quiet = 1;
    sc.spec.stop_after_round = stop;
    sc.spec.resume = resume;
    sim_engine *e;
    rc = sim_engine_new(&e, &sc.spec, &err);
    if (!rc) {
        rc = sim_engine_run(e, &err);
        sim_engine_totals(e, t);
        sim_engine_free(e);
    }
    CHECK_MSG(rc == SIM_OK, "%s: %s", name, err.msg);
    sim_scenario_destroy(&sc);
}

/* Column col (0-based) of metrics.tsv's data rows of dir/name, into v (up to cap); the count. */
static int metric(const char *name, int col, double *v, int cap)
{
    char p[160];
    snprintf(p, sizeof p, "%s/%s/metrics.tsv", dir, name);
    size_t len;
    char *t = test_slurp(p, &len);
    int n = 0;
    for (char *l = t; l && *l && n < cap; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (*l < '0' || *l > '9') continue; /* the comment and the header */
        char *f = l;
        for (int k = 0; k < col && f; k++)
            f = strchr(f, '\t'), f = f ? f + 1 : NULL;
        if (f) v[n++] = strtod(f, NULL);
    }
    free(t);
    return n;
}

/* (4) tiny.yaml: learning, bytes, checkpoint and resume. */
static void test_tiny(void)
{
    sim_totals tn, ta, tr;
    run_tiny("nova", "fednova", 0, 0, &tn);
    run_tiny("avg", "fedavg", 0, 0, &ta);
    double acc[8], loss[8];
    int n = metric("nova", 5, acc, 8);
    CHECK(metric("nova", 6, loss, 8) == 8 && n == 8);
    if (n == 8) {
        double late = (acc[4] + acc[5] + acc[6] + acc[7]) / 4;
        CHECK_MSG(late > 0.25 + 0.15, "accuracy of the last 4 rounds %.3f, chance 0.25", late);
        CHECK_MSG(loss[7] < 0.8 * loss[0], "global loss falls: %.4f -> %.4f", loss[0], loss[7]);
    }
    CHECK(tn.jobs == ta.jobs && tn.jobs > 0);
    CHECK_MSG(tn.bytes_up == ta.bytes_up + 9.0 * tn.jobs, "bytes up %.0f = FedAvg's %.0f + 9 * %ld",
              tn.bytes_up, ta.bytes_up, tn.jobs);
    CHECK(tn.bytes_down == ta.bytes_down);
    run_tiny("resumed", "fednova", 3, 0, &tr);
    CHECK(tr.stopped && tr.round == 3);
    run_tiny("resumed", "fednova", 0, 1, &tr);
    const char *files[] = {"metrics.tsv", "clients.tsv", "timeline.tsv"};
    for (int k = 0; k < 3; k++) {
        char a[160], b[160];
        snprintf(a, sizeof a, "%s/nova/%s", dir, files[k]);
        snprintf(b, sizeof b, "%s/resumed/%s", dir, files[k]);
        CHECK_MSG(test_same_file(a, b), "resumed run's %s is the straight run's", files[k]);
    }
}

int main(void)
{
    sim_err err = {0};
    nova = fl_algo_find("fednova");
    avg = fl_algo_find("fedavg");
    CHECK(nova && avg && (nova->flags & FL_HAS_GLOBAL));
    if (!nova || !avg) return CHECK_DONE();
    CHECK(nn_synth_pews_make(&train, &test, 10, 3, &err) == SIM_OK);
    CHECK(nn_arch_build(&arch, "fedpews-mlp", 5, 1, 1, 4, &err) == SIM_OK);
    nf = arch.layout.n_floats;
    /* a hand-made split: contiguous slices of SIZES */
    part.n_clients = CLIENTS;
    part.idx = calloc(CLIENTS, sizeof *part.idx);
    part.n = calloc(CLIENTS, sizeof *part.n);
    part.n_test = calloc(CLIENTS, sizeof *part.n_test);
    for (int c = 0, next = 0; c < CLIENTS; next += SIZES[c++]) {
        part.n[c] = SIZES[c];
        part.idx[c] = malloc(sizeof(int32_t) * (SIZES[c] + 1));
        for (int i = 0; i < SIZES[c]; i++)
            part.idx[c][i] = next + i;
    }
    snprintf(dir, sizeof dir, "/tmp/fedsim-fednova-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_norm();
    test_server();
    test_vs_fedavg();
    test_tiny();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("could not remove %s\n", dir);
    nn_partition_destroy(&part);
    nn_dataset_destroy(&train), nn_dataset_destroy(&test);
    return CHECK_DONE();
}
