/* tests/test_fl_scaffold.c -- SCAFFOLD (algos/scaffold.c) against the paper's Algorithm 1,
 * option II:
 *   - a client's job, given x, c and c_i, on a tiny MLP and 7 samples: its K corrected steps
 *     y ← y − η(g(y) − c_i + c) replayed here in double (gradients from the model's own forward
 *     and backward at each y, the same minibatches), then Δy = y − x, c_i⁺ = c_i − c + (x − y)/(Kη)
 *     and Δc = c_i⁺ − c_i, against the job's upload and private state; a first job is one with
 *     c_i = 0; a client without samples sends zeros and keeps c_i; cost-only prices the same;
 *   - the server's step from two crafted uploads of different weights: x moves by η_g times the
 *     weighted mean Δy, c by the sum of Δc over N (all clients, not the two that sent); malformed
 *     uploads are refused and change nothing; a saved server loads back to the same state;
 *   - scenarios/tiny.yaml (6 rounds of 3 local epochs) with SCAFFOLD learns (loss falling,
 *     accuracy well above chance), sends and receives twice FedAvg's bytes, and a run stopped after
 * round 2 and resumed writes the same outputs as a straight run.
 */
#include "algos/algo.h"
#include "nn/pack.h"
#include "nn/train.h"
#include "sim/engine.h"
#include "sim/rng.h"
#include "sim/scenario.h"
#include "tests/check.h"
#include "tests/files.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { NS = 8, NF_IN = 4 };
static float xs[NS * NF_IN];
static int32_t ys[NS];
static int32_t idx0[] = {0, 1, 2, 3, 4, 5, 6}, idx2[] = {7, 3};
static int32_t *idx[3] = {idx0, NULL, idx2};
static int ns[3] = {7, 0, 2}, nt[3];
static nn_dataset data = {NS, NF_IN, 1, 1, 2, xs, ys, NULL, 0};
static nn_partition part = {3, idx, ns, NULL, nt, 0, NULL, NULL};
static nn_arch arch;
static char dir[64];

/* values U(-a, a) on the live (trainable) parameters of model m, zero elsewhere */
static void fill(float *v, const nn_model *m, sim_rng *r, double a)
{
    memset(v, 0, m->arch.layout.n_floats * sizeof(float));
    for (size_t k = 0; k < m->n_runs; k++)
        for (uint32_t j = 0; j < m->runs[k][1]; j++)
            v[m->runs[k][0] + j] = (float)(a * (2 * sim_rng_uniform(r) - 1));
}

/* Two parameter messages [a][b] appended to sb. */
static void pack_pair(msgpack_sbuffer *sb, const float *a, const float *b)
{
    nn_pack_params(sb, &arch, a);
    nn_pack_params(sb, &arch, b);
}

/* Unpack a message of two parameter messages into a and b; SIM_OK or not. */
static int unpack_pair(const void *buf, size_t len, float *a, float *b)
{
    size_t mid;
    sim_err err = {0};
    if (nn_msgpack_check(buf, len, 0, &mid, NULL, "pair", &err)) return -1;
    if (nn_unpack_params(a, &arch, buf, mid, "first", &err)) return -1;
    return nn_unpack_params(b, &arch, (const char *)buf + mid, len - mid, "second", &err);
}

static double max_diff(const float *a, const double *b, size_t n)
{
    double worst = 0;
    for (size_t j = 0; j < n; j++)
        worst = fmax(worst, fabs((double)a[j] - b[j]));
    return worst;
}

/* Client's job of round (its batch order from the sync stream) on the worker every job here
 * shares, as the engine's workers are shared. */
static fl_worker worker;
static int train(const fl_algo *a, const fl_env *env, int client, int round, const void *down,
                 size_t down_len, const void *priv, size_t priv_len, fl_result *res)
{
    fl_job job = {client, round, down, down_len, priv, priv_len, (uint64_t)client << 32 | round};
    sim_err err = {0};
    fl_result_init(res);
    int rc = a->client_train(env, &job, &worker, res, &err);
    CHECK_MSG(rc == SIM_OK, "train: %s", err.msg);
    return rc;
}

/* One job of client 0 in round 1: K = 2 epochs of batches 3, 3, 1 = 6 steps at η = 0.2·0.5. */
static void test_job(const fl_algo *a, const fl_env *env)
{
    const fl_config *cfg = env->cfg;
    size_t nf = arch.layout.n_floats;
    nn_model m;
    nn_model_init(&m, &arch, cfg->batch_size);
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_TEST, 1);
    float *x = fl_initial_params(env), *c = calloc(nf, 4), *ci = calloc(nf, 4),
          *zero = calloc(nf, 4), *dy = calloc(nf, 4), *dc = calloc(nf, 4), *ci_new = calloc(nf, 4);
    fill(c, &m, &r, 0.5);
    fill(ci, &m, &r, 0.5);
    msgpack_sbuffer down, priv, priv0;
    msgpack_sbuffer_init(&down), msgpack_sbuffer_init(&priv), msgpack_sbuffer_init(&priv0);
    pack_pair(&down, x, c);
    nn_pack_params(&priv, &arch, ci);
    nn_pack_params(&priv0, &arch, zero);
    fl_result res;
    if (train(a, env, 0, 1, down.data, down.size, priv.data, priv.size, &res)) return;

    /* the reference, in double: the same minibatches (the job's stream), the model's gradient at
     * each y (rounded to float to run it), the corrected step */
    int K = 6;
    double lr = 0.2 * 0.5, *y = malloc(nf * sizeof(double)), *e_dy = malloc(nf * sizeof(double)),
           *e_dc = malloc(nf * sizeof(double)), *e_ci = malloc(nf * sizeof(double));
    for (size_t j = 0; j < nf; j++)
        y[j] = x[j];
    sim_rng br;
    sim_rng_seed(&br, env->seed, SIM_RNG_BATCHES, (uint64_t)0 << 32 | 1);
    nn_batcher b;
    nn_batcher_init(&b, &data, idx0, ns[0], cfg->batch_size, 0, &br);
    for (int k = 0; k < K; k++) {
        int nb = nn_batcher_next(&b);
        if (!nb) nb = nn_batcher_next(&b);
        for (size_t j = 0; j < nf; j++)
            m.params[j] = (float)y[j];
        nn_model_forward(&m, b.x, b.y, nb, 1);
        nn_model_zero_grad(&m);
        nn_model_backward(&m);
        for (size_t j = 0; j < nf; j++)
            y[j] -= lr * ((double)m.grads[j] - ci[j] + c[j]);
    }
    nn_batcher_destroy(&b);
    for (size_t j = 0; j < nf; j++) {
        e_dy[j] = y[j] - x[j];
        e_ci[j] = (double)ci[j] - c[j] + (x[j] - y[j]) / (K * lr);
        e_dc[j] = e_ci[j] - ci[j];
    }
    CHECK(unpack_pair(res.up.data, res.up.size, dy, dc) == SIM_OK);
    CHECK(nn_unpack_params(ci_new, &arch, res.priv.data, res.priv.size, "priv", NULL) == SIM_OK);
    /* Tolerances from float rounding: the job's y is float, rounded at each of its K = 6 steps
     * (values below 1: 2^-24 ≈ 6e-8 each) and its gradients taken at those rounded points; 1e-6
     * bounds that with room. c_i⁺ and Δc divide y's error by Kη = 0.6: 2e-6. (A flipped
     * correction moves y by 2Kη·|c − c_i|, up to 0.6; option II without 1/(Kη) changes Δc by a
     * factor 1/0.6.) */
    double ey = max_diff(dy, e_dy, nf), ec = max_diff(dc, e_dc, nf),
           ei = max_diff(ci_new, e_ci, nf);
    CHECK_MSG(ey < 1e-6, "Δy off by %g", ey);
    CHECK_MSG(ec < 2e-6, "Δc off by %g", ec);
    CHECK_MSG(ei < 2e-6, "c_i⁺ off by %g", ei);
    double moved = 0; /* (the job did move: the check is not trivially met) */
    for (size_t j = 0; j < nf; j++)
        moved = fmax(moved, fabs(dy[j]));
    CHECK_MSG(moved > 1e-2, "the job moved y by %g", moved);
    CHECK_EQ_I64(res.steps, K);
    /* twice FedAvg's message both ways, as the job_down of a fresh server */
    size_t dense = fl_dense_msg_bytes(&arch);
    CHECK_EQ_I64(res.up_bytes, 2 * dense);
    CHECK_EQ_I64(res.up.size, 2 * dense);
    void *s = a->server_new(env, NULL);
    CHECK_EQ_I64(a->job_down(s, 0, 1, NULL), 2 * dense);
    a->server_free(s);

    /* cost-only prices the same FLOPs, steps and upload */
    fl_env envc = *env;
    envc.cost_only = 1;
    fl_result rc;
    train(a, &envc, 0, 1, NULL, 0, NULL, 0, &rc);
    CHECK(rc.cost.flops == res.cost.flops && rc.steps == res.steps && rc.up_bytes == res.up_bytes);
    CHECK(rc.up.size == 0);
    fl_result_destroy(&rc);

    /* a first job (no private state) is one with c_i = 0 */
    fl_result r0, rz;
    train(a, env, 0, 1, down.data, down.size, NULL, 0, &r0);
    train(a, env, 0, 1, down.data, down.size, priv0.data, priv0.size, &rz);
    CHECK(r0.up.size == rz.up.size && !memcmp(r0.up.data, rz.up.data, r0.up.size));
    CHECK(r0.up.size != res.up.size || memcmp(r0.up.data, res.up.data, r0.up.size));
    fl_result_destroy(&r0), fl_result_destroy(&rz);

    /* a client without samples takes no step: Δy = Δc = 0, c_i kept */
    fl_result rn;
    train(a, env, 1, 1, down.data, down.size, priv.data, priv.size, &rn);
    /* (dy and dc still hold the first job's non-zero update) */
    CHECK(unpack_pair(rn.up.data, rn.up.size, dy, dc) == SIM_OK);
    CHECK(!memcmp(dy, zero, nf * 4) && !memcmp(dc, zero, nf * 4) && rn.steps == 0);
    CHECK(rn.priv.size == priv.size && !memcmp(rn.priv.data, priv.data, priv.size));
    fl_result_destroy(&rn);

    /* a down message without the control variate (FedAvg's) is refused */
    fl_job job = {0, 1, down.data, dense, NULL, 0, 1};
    fl_worker w;
    fl_worker_init(&w);
    fl_result_init(&rn);
    sim_err err = {0};
    CHECK(a->client_train(env, &job, &w, &rn, &err) == SIM_EFORMAT && strstr(err.msg, "two"));
    fl_result_destroy(&rn);
    fl_worker_destroy(&w);

    fl_result_destroy(&res);
    msgpack_sbuffer_destroy(&down), msgpack_sbuffer_destroy(&priv), msgpack_sbuffer_destroy(&priv0);
    free(x), free(c), free(ci), free(zero), free(dy), free(dc), free(ci_new);
    free(y), free(e_dy), free(e_dc), free(e_ci);
    nn_model_destroy(&m);
}

/* The server's state as its down message sends it: x and c. */
static void server_xc(const fl_algo *a, void *s, float *x, float *c)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    a->job_down(s, 0, 0, &sb);
    CHECK(unpack_pair(sb.data, sb.size, x, c) == SIM_OK);
    msgpack_sbuffer_destroy(&sb);
}

static void test_server(const fl_algo *a, const fl_env *env)
{
    size_t nf = arch.layout.n_floats;
    sim_err err = {0};
    nn_model m;
    nn_model_init(&m, &arch, 1);
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_TEST, 2);
    float *dy1 = calloc(nf, 4), *dc1 = calloc(nf, 4), *dy2 = calloc(nf, 4), *dc2 = calloc(nf, 4),
          *x = calloc(nf, 4), *c = calloc(nf, 4), *x0 = fl_initial_params(env);
    double *ex = malloc(nf * sizeof(double)), *ec = malloc(nf * sizeof(double));
    fill(dy1, &m, &r, 0.1), fill(dc1, &m, &r, 1), fill(dy2, &m, &r, 0.1), fill(dc2, &m, &r, 1);
    msgpack_sbuffer u1, u2;
    msgpack_sbuffer_init(&u1), msgpack_sbuffer_init(&u2);
    pack_pair(&u1, dy1, dc1);
    pack_pair(&u2, dy2, dc2);
    void *s = a->server_new(env, &err);
    /* client 0 with weight 1.5 of mass 3 (an async update at staleness weight 0.5), client 2 with
     * 5 of 5; η_g = 0.7, N = 3 */
    CHECK(a->server_absorb(s, 0, u1.data, u1.size, 1.5, 3, &err) == SIM_OK);
    CHECK(a->server_absorb(s, 2, u2.data, u2.size, 5, 5, &err) == SIM_OK);
    a->server_aggregate(s);
    server_xc(a, s, x, c);
    for (size_t j = 0; j < nf; j++) {
        ex[j] = x0[j] + 0.7 * (1.5 * dy1[j] + 5.0 * dy2[j]) / 8;
        ec[j] = ((double)dc1[j] + dc2[j]) / 3;
    }
    /* one float rounding of values below 2 (the server sums in double): 2.4e-7 */
    double dx = max_diff(x, ex, nf), dcv = max_diff(c, ec, nf);
    CHECK_MSG(dx < 2.4e-7, "x off by %g", dx);
    CHECK_MSG(dcv < 2.4e-7, "c off by %g", dcv);
    /* the sums start again: client 0 alone (weight and mass 3) */
    CHECK(a->server_absorb(s, 0, u1.data, u1.size, 3, 3, &err) == SIM_OK);
    a->server_aggregate(s);
    for (size_t j = 0; j < nf; j++)
        ex[j] = x[j] + 0.7 * dy1[j], ec[j] = c[j] + dc1[j] / 3.0;
    server_xc(a, s, x, c);
    dx = max_diff(x, ex, nf), dcv = max_diff(c, ec, nf);
    CHECK_MSG(dx < 2.4e-7 && dcv < 2.4e-7, "second aggregation: x off by %g, c by %g", dx, dcv);
    /* metrics.tsv's c_norm column: ‖c‖₂ of the control variate the server now holds, within
     * ‖c − ec‖ ≤ √n·max|c − ec| of the hand-computed one's */
    double norm = 0;
    for (size_t j = 0; j < nf; j++)
        norm += ec[j] * ec[j];
    norm = sqrt(norm);
    CHECK(a->columns && !strcmp(a->columns[0].name, "c_norm") && !a->columns[1].name);
    if (a->columns)
        CHECK_MSG(fabs(a->columns[0].value(s) - norm) <= sqrt((double)nf) * 2.4e-7 && norm > 0.01,
                  "c_norm %g, ‖c‖ %g", a->columns[0].value(s), norm);

    /* malformed uploads are refused and change nothing: FedAvg's single message, a truncated
     * one, bytes after the pair, a broken control variate */
    msgpack_sbuffer before, after, bad;
    msgpack_sbuffer_init(&before), msgpack_sbuffer_init(&after), msgpack_sbuffer_init(&bad);
    a->job_down(s, 0, 0, &before);
    size_t dense = fl_dense_msg_bytes(&arch);
    CHECK(a->server_absorb(s, 0, u1.data, dense, 1, 1, &err) == SIM_EFORMAT);
    CHECK(a->server_absorb(s, 0, u1.data, u1.size - 1, 1, 1, &err) == SIM_EFORMAT);
    msgpack_sbuffer_write(&bad, u1.data, u1.size);
    msgpack_sbuffer_write(&bad, "\xc0", 1);
    CHECK(a->server_absorb(s, 0, bad.data, bad.size, 1, 1, &err) == SIM_EFORMAT);
    bad.size = 0;
    nn_pack_params(&bad, &arch, dy1);
    msgpack_sbuffer_write(&bad, "\x80", 1); /* an empty map: no tensors */
    CHECK(a->server_absorb(s, 0, bad.data, bad.size, 1, 1, &err) == SIM_EFORMAT);
    a->server_aggregate(s);
    a->job_down(s, 0, 0, &after);
    CHECK(before.size == after.size && !memcmp(before.data, after.data, before.size));

    /* saved with sums pending, loaded into a fresh server: the same state and next step */
    CHECK(a->server_absorb(s, 2, u2.data, u2.size, 2, 2, &err) == SIM_OK);
    msgpack_sbuffer ck;
    msgpack_sbuffer_init(&ck);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &ck, msgpack_sbuffer_write);
    a->server_save(s, &pk);
    void *s2 = a->server_new(env, &err);
    msgpack_unpacked un;
    msgpack_unpacked_init(&un);
    CHECK(msgpack_unpack_next(&un, ck.data, ck.size, NULL) == MSGPACK_UNPACK_SUCCESS);
    CHECK(a->server_load(s2, &un.data, &err) == SIM_OK);
    a->server_aggregate(s), a->server_aggregate(s2);
    before.size = after.size = 0;
    a->job_down(s, 0, 0, &before);
    a->job_down(s2, 0, 0, &after);
    CHECK(before.size == after.size && !memcmp(before.data, after.data, before.size));
    /* ... and FedAvg's state does not load */
    void *sf = fl_dense->server_new(env, &err);
    ck.size = 0;
    fl_dense->server_save(sf, &pk);
    msgpack_unpacked_destroy(&un);
    msgpack_unpacked_init(&un);
    CHECK(msgpack_unpack_next(&un, ck.data, ck.size, NULL) == MSGPACK_UNPACK_SUCCESS);
    CHECK(a->server_load(s2, &un.data, &err) == SIM_EFORMAT);
    fl_dense->server_free(sf);

    msgpack_unpacked_destroy(&un);
    msgpack_sbuffer_destroy(&ck), msgpack_sbuffer_destroy(&bad);
    msgpack_sbuffer_destroy(&before), msgpack_sbuffer_destroy(&after);
    msgpack_sbuffer_destroy(&u1), msgpack_sbuffer_destroy(&u2);
    a->server_free(s), a->server_free(s2);
    free(dy1), free(dc1), free(dy2), free(dc2), free(x), free(c), free(x0), free(ex), free(ec);
    nn_model_destroy(&m);
}

/* scenarios/tiny.yaml for 6 rounds of 3 local epochs with algorithm `name` (cost-only when
 * cost) into dir/out (NULL: no outputs), stopping after aggregation stop (0: none) or resuming;
 * its totals in t. */
static int run_tiny(const char *name, int cost, const char *out, int stop, int resume,
                    sim_totals *t)
{
    char set[64], path[128];
    snprintf(set, sizeof set, "algorithm.name=%s", name);
    const char *sets[] = {set, "rounds=6", "algorithm.local_epochs=3", "cost_only=true"};
    sim_scenario sc;
    sim_err err = {0};
    int rc = sim_scenario_load(&sc, "scenarios/tiny.yaml", sets, cost ? 4 : 3, &err);
    CHECK_MSG(rc == SIM_OK, "tiny.yaml: %s", err.msg);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/%s", dir, out ? out : "");
    if (out && !resume) mkdir(path, 0755);
    sc.spec.out_dir = out ? path : NULL;
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
    CHECK_MSG(rc == SIM_OK, "%s run: %s", name, err.msg);
    sim_scenario_destroy(&sc);
    return rc;
}

/* acc_global and loss_global (metrics.tsv's 6th and 7th columns) of dir/out's rows into acc
 * and loss (up to n rows); how many rows. */
static int metrics(const char *out, double *acc, double *loss, int n)
{
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s/metrics.tsv", dir, out);
    char *t = test_slurp(p, &len);
    int k = 0;
    for (char *line = t; line && *line && k < n;) {
        if (*line >= '0' && *line <= '9') {
            char *f = line;
            for (int col = 0; col < 5 && f; col++)
                f = strchr(f, '\t') ? strchr(f, '\t') + 1 : NULL;
            if (f) acc[k] = strtod(f, &f), loss[k++] = strtod(f, NULL);
        }
        line = strchr(line, '\n');
        if (line) line++;
    }
    free(t);
    return k;
}

static void test_run(void)
{
    sim_totals sc, fa, st;
    if (run_tiny("scaffold", 0, "straight", 0, 0, &sc) || run_tiny("fedavg", 1, NULL, 0, 0, &fa))
        return;
    /* the same jobs, twice FedAvg's bytes each way (FedAvg priced only: its sizes are those) */
    CHECK_EQ_I64(sc.jobs, fa.jobs);
    CHECK_MSG(sc.bytes_up == 2 * fa.bytes_up && sc.bytes_down == 2 * fa.bytes_down,
              "bytes up %.0f down %.0f, FedAvg's %.0f %.0f", sc.bytes_up, sc.bytes_down,
              fa.bytes_up, fa.bytes_down);
    /* it learns: the loss falls by more than 30%, the accuracy ends above 0.55 (4 classes:
     * chance is 0.25, and models that tell only the data's two halves apart stall at 0.5) */
    double acc[8], loss[8];
    int n = metrics("straight", acc, loss, 8);
    CHECK_EQ_I64(n, 7); /* rounds 0 (the initial model) to 6 */
    if (n == 7)
        CHECK_MSG(acc[6] > 0.55 && loss[6] < 0.7 * loss[1],
                  "accuracy %.3f and loss %.3f after round 1, %.3f and %.3f after 6", acc[1],
                  loss[1], acc[6], loss[6]);
    /* stopped after round 2 (a checkpoint) and resumed: the straight run's outputs */
    if (run_tiny("scaffold", 0, "resumed", 2, 0, &st)) return;
    CHECK(st.stopped && st.round == 2);
    if (run_tiny("scaffold", 0, "resumed", 0, 1, &st)) return;
    CHECK(test_same_outputs(dir, "straight", "resumed", 1));
}

int main(void)
{
    sim_err err = {0};
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_TEST, 0);
    for (int i = 0; i < NS; i++) {
        for (int f = 0; f < NF_IN; f++)
            xs[i * NF_IN + f] = (float)sim_rng_normal(&r);
        ys[i] = xs[i * NF_IN] + xs[i * NF_IN + 1] > 0;
    }
    CHECK(nn_arch_build(&arch, "mlp:4-3-2", NF_IN, 1, 1, 2, &err) == SIM_OK);
    fl_config cfg;
    CHECK_MSG(fl_config_load(&cfg,
                             "{name: scaffold, local_epochs: 2, batch_size: 3, lr: 0.2, "
                             "lr_decay: 0.5, server_lr: 0.7}",
                             NULL, &err) == SIM_OK,
              "%s", err.msg);
    fl_env env = {&cfg, &arch, &data, &data, &part, 9, 0, NULL, NULL, NULL, NULL};
    const fl_algo *a = fl_algo_find("scaffold");
    CHECK(a && (a->flags & FL_HAS_GLOBAL) && (a->flags & FL_PLAIN_SGD));
    if (!a) return CHECK_DONE();
    fl_worker_init(&worker);
    test_job(a, &env);
    test_server(a, &env);
    fl_worker_destroy(&worker);
    fl_config_destroy(&cfg);

    snprintf(dir, sizeof dir, "/tmp/fedsim-scaffold-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    test_run();
    char cmd[100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return CHECK_DONE();
}
