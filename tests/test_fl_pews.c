/* tests/test_fl_pews.c -- FedPeWS (algos/fedpews.c): after the warmup it is FedAvg bit for bit
 * (all masks ones); Fixed groups are disjoint and cover every hidden unit, also when a width is not
 * a multiple of N; a parameter no client's subnetwork holds stays unchanged while held ones move;
 * a warmup upload's bytes are its encoded length and fewer than a full model's; the mask-score
 * step follows ∂f/∂m̃ (checked by finite differences on the gates) and the diversity reward;
 * masks.tsv is written. */
#include "algos/algo.h"
#include "algos/submodel.h"
#include "nn/pack.h"
#include "nn/train.h"
#include "tests/algos.h"
#include "tests/check.h"
#include "tests/fljob.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static nn_dataset train, test;
static nn_partition part;
static nn_arch arch;

/* The units bitmap of a message, as a 0/1 vector of h entries. */
static void units_of(const void *buf, size_t len, uint8_t *keep, int h)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CHECK(msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *bits = nn_map_get(&u.data, "units");
    CHECK(bits && bits->via.bin.size == (uint32_t)(h + 7) / 8);
    for (int j = 0; j < h && bits; j++)
        keep[j] = ((const unsigned char *)bits->via.bin.ptr)[j / 8] >> (j % 8) & 1;
    msgpack_unpacked_destroy(&u);
}

static void test_full_is_fedavg(fl_config *cfg, const fl_env *env)
{
    sim_err err = {0};
    fl_worker w;
    fl_worker_init(&w);
    test_own(cfg, "{name: fedpews, pews: {warmup: 0, lambda: 1, mask_lr: 0.1}}"); /* every round is
                                                                                     a full round */
    void *sp = fl_fedpews.server_new(env, &err), *sa = fl_fedavg.server_new(env, &err);
    for (int c = 0; c < 3; c++) {
        fl_result rp, ra;
        test_job(&fl_fedpews, env, sp, c, 0, NULL, 0, &rp, &w);
        test_job(&fl_fedavg, env, sa, c, 0, NULL, 0, &ra, &w);
        CHECK(fl_fedpews.server_absorb(sp, c, rp.up.data, rp.up.size, 1, 1, &err) == SIM_OK);
        CHECK(fl_fedavg.server_absorb(sa, c, ra.up.data, ra.up.size, 1, 1, &err) == SIM_OK);
        CHECK(rp.cost.flops == ra.cost.flops && rp.priv.size == 0);
        fl_result_destroy(&rp), fl_result_destroy(&ra);
    }
    fl_fedpews.server_aggregate(sp);
    fl_fedavg.server_aggregate(sa);
    nn_model a, b;
    nn_model_init(&a, &arch, 1);
    nn_model_init(&b, &arch, 1);
    fl_fedpews.eval_params(sp, -1, NULL, 0, &a);
    fl_fedavg.eval_params(sa, -1, NULL, 0, &b);
    CHECK(!memcmp(a.params, b.params, sizeof(float) * arch.layout.n_floats));
    nn_model_destroy(&a), nn_model_destroy(&b);
    fl_fedpews.server_free(sp), fl_fedavg.server_free(sa);
    fl_worker_destroy(&w);
}

static void test_fixed(fl_config *cfg, const fl_env *env)
{
    sim_err err = {0};
    int h = fl_sub_units(&arch); /* 32 + 64 + 128 + 32 */
    CHECK_EQ_I64(h, 256);
    test_own(
            cfg,
            "{name: fedpews, pews: {warmup: 0.05, mode: fixed, lambda: 1, mask_lr: 0.1}}"); /* 5 of
                                                                                               100
                                                                                               rounds
                                                                                             */
    void *s = fl_fedpews.server_new(env, &err); /* 3 clients: 32 = 11 + 11 + 10 */
    uint8_t keep[3][256];
    int union_ok = 1, disjoint = 1;
    for (int c = 0; c < 3; c++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        fl_fedpews.job_down(s, c, 0, &sb);
        units_of(sb.data, sb.size, keep[c], h);
        msgpack_sbuffer_destroy(&sb);
    }
    for (int j = 0; j < h; j++) {
        int n = keep[0][j] + keep[1][j] + keep[2][j];
        union_ok &= n >= 1;
        disjoint &= n <= 1;
    }
    CHECK(union_ok && disjoint);
    /* contiguous, larger groups first: layer 1 (32 units) is 0-10, 11-21, 22-31 */
    CHECK(keep[0][0] && keep[0][10] && !keep[0][11] && keep[1][11] && keep[1][21] && keep[2][22] &&
          keep[2][31] && !keep[2][21]);

    /* one warmup round: parameters between two clients' groups are held by nobody and stay */
    nn_model g0, g1, lm;
    nn_model_init(&g0, &arch, 1);
    nn_model_init(&g1, &arch, 1);
    nn_model_init(&lm, &arch, 1);
    fl_fedpews.eval_params(s, -1, NULL, 0, &g0);
    fl_worker w;
    fl_worker_init(&w);
    uint8_t *held = calloc(arch.layout.n_floats, 1);
    for (int c = 0; c < 3; c++) {
        fl_result r;
        test_job(&fl_fedpews, env, s, c, 0, NULL, 0, &r, &w);
        CHECK(r.up_bytes == r.up.size);
        CHECK(fl_fedpews.server_absorb(s, c, r.up.data, r.up.size, 1, 1, &err) == SIM_OK);
        const uint8_t *rows[NN_MAX_LAYERS] = {0};
        for (int i = 0, u = 0; i < arch.n; i++)
            if (arch.l[i].narrow) rows[i] = keep[c] + u, u += arch.l[i].oc;
        nn_model_set_row_masks(&lm, rows);
        for (size_t j = 0; j < arch.layout.n_floats; j++)
            held[j] |= lm.live[j];
        fl_result_destroy(&r);
    }
    fl_fedpews.server_aggregate(s);
    fl_fedpews.eval_params(s, -1, NULL, 0, &g1);
    int moved = 0, still = 1, unheld = 0;
    for (int t = 0; t < arch.layout.n; t++)
        for (int j = 0; j < arch.layout.t[t].rows * arch.layout.t[t].cols; j++) {
            size_t o = arch.layout.t[t].off + (size_t)j;
            if (held[o]) {
                moved += g1.params[o] != g0.params[o];
            } else {
                unheld++;
                still &= g1.params[o] == g0.params[o];
            }
        }
    CHECK_MSG(unheld > 0 && still && moved > 100, "unheld %d (unchanged: %d), moved %d", unheld,
              still, moved);
    free(held);
    nn_model_destroy(&g0), nn_model_destroy(&g1), nn_model_destroy(&lm);
    fl_worker_destroy(&w);
    fl_fedpews.server_free(s);
    test_own(cfg, "{name: fedpews, pews: {warmup: 0.05, lambda: 1, mask_lr: 0.1}}");
}

typedef struct gate_ctx {
    nn_model *m;
    const float *x;
    const int32_t *y;
    int B;
} gate_ctx;

/* The loss with unit u's outgoing weights (of the next layer) scaled by g. */
static double gated_loss(gate_ctx *c, const float *w0, int li, int j, double g)
{
    nn_model *m = c->m;
    int nx = li + 1;
    while (arch.l[nx].op != NN_LINEAR)
        nx++;
    const nn_tensor *t = &arch.layout.t[arch.l[nx].wt];
    for (int r = 0; r < t->rows; r++)
        m->params[t->off + (size_t)r * t->cols + j] =
                (float)(g * w0[t->off + (size_t)r * t->cols + j]);
    double l = nn_model_forward(m, c->x, c->y, c->B, 1);
    for (int r = 0; r < t->rows; r++)
        m->params[t->off + (size_t)r * t->cols + j] = w0[t->off + (size_t)r * t->cols + j];
    return l;
}

/* One learned step on the whole client (batch = its data), λ = 0: the score change is
 * −η_s·∂f/∂m̃·σ'(0), ∂f/∂m̃_j the derivative of the loss in a gate on unit j, at 1 for units the
 * first draw kept and at 0 for units it dropped (with the other gates as drawn). */
static void test_score_step(fl_config *cfg, fl_env *env)
{
    sim_err err = {0};
    int h = fl_sub_units(&arch), n = part.n[0];
    test_own(cfg, "{name: fedpews, pews: {warmup: 0.05, lambda: 0, mask_lr: 1}}");
    cfg->local_steps = 1, cfg->batch_size = n;
    void *s = fl_fedpews.server_new(env, &err);
    fl_worker w;
    fl_worker_init(&w);
    fl_result r;
    test_job(&fl_fedpews, env, s, 0, 0, NULL, 0, &r, &w);
    float *sc = malloc(sizeof(float) * (size_t)h);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CHECK(msgpack_unpack_next(&u, r.priv.data, r.priv.size, &off) == MSGPACK_UNPACK_SUCCESS);
    CHECK(nn_unpack_f32(sc, (size_t)h, &u.data, "scores", &err) == SIM_OK);
    msgpack_unpacked_destroy(&u);
    /* the first draw of the job's mask stream: Procedure I's gates */
    sim_rng mr;
    sim_rng_seed(&mr, env->seed, fl_algo_stream("fedpews.masks"), 0);
    uint8_t *keep = malloc((size_t)h);
    for (int j = 0; j < h; j++)
        keep[j] = sim_rng_uniform(&mr) < 0.5;
    nn_model m;
    nn_model_init(&m, &arch, n);
    fl_init_params(&m, env);
    float *x = malloc(sizeof(float) * (size_t)n * 5);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    nn_gather(x, y, &train, part.idx[0], n);
    /* the gated network: dropped units' outgoing weights zeroed */
    float *w0 = malloc(sizeof(float) * arch.layout.n_floats);
    memcpy(w0, m.params, sizeof(float) * arch.layout.n_floats);
    for (int i = 0, uu = 0; i < arch.n; i++) {
        if (!arch.l[i].narrow) continue;
        int nx = i + 1;
        while (arch.l[nx].op != NN_LINEAR)
            nx++;
        const nn_tensor *t = &arch.layout.t[arch.l[nx].wt];
        for (int j = 0; j < arch.l[i].oc; j++, uu++)
            if (!keep[uu])
                for (int q = 0; q < t->rows; q++)
                    m.params[t->off + (size_t)q * t->cols + j] = 0;
    }
    float *gated = malloc(sizeof(float) * arch.layout.n_floats);
    memcpy(gated, m.params, sizeof(float) * arch.layout.n_floats);
    gate_ctx c = {&m, x, y, n};
    int bad = 0, checked = 0;
    for (int i = 0, uu = 0; i < arch.n; i++) {
        if (!arch.l[i].narrow) continue;
        for (int j = 0; j < arch.l[i].oc; j++, uu++) {
            if (uu % 5) continue;
            /* gate g on unit uu: outgoing weights g·w0 (from the ungated values) */
            memcpy(m.params, gated, sizeof(float) * arch.layout.n_floats);
            double g0 = keep[uu] ? 1 : 0, hh = 1e-3;
            double lp = gated_loss(&c, w0, i, j, g0 + hh), lm = gated_loss(&c, w0, i, j, g0 - hh);
            double num = (lp - lm) / (2 * hh), step = -(sc[uu] - 0.0) / (1 * 0.25);
            checked++;
            if (fabs(num - step) > 2e-2 * fabs(num) + 2e-4 && bad++ < 5)
                printf("  unit %d (kept %d): dL/dgate %.6g, from the score step %.6g\n", uu,
                       keep[uu], num, step);
            memcpy(m.params, gated, sizeof(float) * arch.layout.n_floats);
        }
    }
    CHECK_MSG(bad == 0 && checked > 40, "score step vs gate gradient: %d of %d off", bad, checked);
    /* the diversity reward pushes a unit's probability away from the others' */
    test_own(cfg, "{name: fedpews, pews: {warmup: 0.05, lambda: 50, mask_lr: 1}}");
    fl_result r2;
    /* client 1 gets θ_{g∖1} = client 0's σ(s) = 0.5 everywhere at first: the reward's gradient
     * is 0 at σ = 0.5 exactly, so feed client 0's upload first to move Θ[0] */
    CHECK(fl_fedpews.server_absorb(s, 0, r.up.data, r.up.size, 1, 1, &err) == SIM_OK);
    fl_fedpews.server_aggregate(s);
    test_job(&fl_fedpews, env, s, 1, 1, NULL, 0, &r2, &w);
    CHECK(r2.up_bytes == r2.up.size && r2.up.size < fl_fedpews.job_down(s, 1, 10, NULL));
    fl_result_destroy(&r), fl_result_destroy(&r2);
    free(sc), free(keep), free(x), free(y), free(w0), free(gated);
    nn_model_destroy(&m);
    fl_worker_destroy(&w);
    fl_fedpews.server_free(s);
}

int main(void)
{
    sim_err err = {0};
    CHECK(nn_synth_pews_make(&train, &test, 20, 3, &err) == SIM_OK);
    CHECK(nn_partition_iid(&part, &train, 3, 3, &err) == SIM_OK);
    CHECK(nn_arch_build(&arch, "fedpews-mlp", 5, 1, 1, 4, &err) == SIM_OK);
    fl_config cfg = {.name = "fedpews",
                     .local_epochs = 1,
                     .batch_size = 16,
                     .lr = 0.05,
                     .lr_decay = 1,
                     .server_lr = 1};
    fl_env env = {&cfg, &arch, &train, &test, &part, 9, 0, NULL, NULL, NULL, NULL};
    test_full_is_fedavg(&cfg, &env);
    test_fixed(&cfg, &env);
    test_score_step(&cfg, &env);
    fl_config_destroy(&cfg);
    nn_partition_destroy(&part);
    nn_dataset_destroy(&train), nn_dataset_destroy(&test);
    return CHECK_DONE();
}
