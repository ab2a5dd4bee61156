/* tests/test_fl_pews.c -- FedPeWS (algos/fedpews.c): after the warmup it is FedAvg bit for bit
 * (all masks ones); Fixed groups are disjoint and cover every hidden unit, also when a width is not
 * a multiple of N; a parameter no client's subnetwork holds stays unchanged while held ones move;
 * a warmup upload's bytes are its encoded length and fewer than a full model's; the mask-score
 * step follows ∂f/∂m̃ (checked by finite differences on the gates) and the diversity reward;
 * masks.tsv is written, its uploaders in client-id order. The server keeps each client's θ_i as
 * its row (fl_rows, tests/rows.h): the mean of the others' it sends is the exact one rounded once,
 * whatever the rows' history; a saved and loaded server sends and saves the same, and its saved
 * state does not grow with the clients. */
#include "algos/algo.h"
#include "algos/submodel.h"
#include "nn/pack.h"
#include "nn/train.h"
#include "tests/algos.h"
#include "tests/check.h"
#include "tests/fljob.h"
#include "tests/rows.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
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

/* ---------------------------------------------------------------------------------------- */
/* the server's per-client rows (θ_i) and the mean of the others' */

static test_rows rows; /* the server's rows (tests/rows.h); a test with a new server clears them */

static void fresh_rows(fl_env *env)
{
    test_rows_free(&rows);
    env->rows = test_rows_api(&rows);
}

/* env over the first n clients of part (pn: their partition), learned masks, fresh rows. */
static fl_env first_clients(fl_config *cfg, const fl_env *env, nn_partition *pn, int n)
{
    test_own(cfg, "{name: fedpews, pews: {warmup: 0.05, lambda: 1, mask_lr: 0.1}}");
    *pn = part;
    pn->n_clients = n;
    fl_env e = *env;
    e.part = pn;
    fresh_rows(&e);
    return e;
}

/* Absorb client c's warmup upload with θ_i = theta (h floats), its subnetwork keep (NULL: every
 * unit) and a zero change. */
static int absorb_theta(void *s, int c, const float *theta, const uint8_t *keep, sim_err *err)
{
    int h = fl_sub_units(&arch);
    nn_model m;
    nn_model_init(&m, &arch, 1);
    if (keep) {
        const uint8_t *r[NN_MAX_LAYERS] = {0};
        for (int i = 0, u = 0; i < arch.n; i++)
            if (arch.l[i].narrow) r[i] = keep + u, u += arch.l[i].oc;
        nn_model_set_row_masks(&m, r);
    }
    float *zero = calloc(arch.layout.n_floats, sizeof(float));
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    fl_sub_pack(&pk, &m, zero);
    nn_pack_str(&pk, "theta");
    nn_pack_f32(&pk, theta, (size_t)h);
    int rc = fl_fedpews.server_absorb(s, c, sb.data, sb.size, 1, 1, err);
    msgpack_sbuffer_destroy(&sb);
    free(zero);
    nn_model_destroy(&m);
    return rc;
}

/* The θ_{g∖c} client c's warmup download carries, into out (h floats). */
static void loo_of(void *s, int c, float *out)
{
    int h = fl_sub_units(&arch);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    fl_fedpews.job_down(s, c, 0, &sb);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    sim_err err = {0};
    CHECK(msgpack_unpack_next(&u, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *t = nn_map_get(&u.data, "theta");
    CHECK(t && nn_unpack_f32(out, (size_t)h, t, "theta", &err) == SIM_OK);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

/* An exact sum of floats in [0, 1], independent of fedpews.c's: binary digits in units of
 * 2^-172 (frexpf writes a float as M·2^(e − 24), M < 2^24 an integer, e >= -148). */
enum { EXACT_BITS = 256 };
typedef struct exact {
    uint8_t bit[EXACT_BITS];
} exact;

static void exact_add(exact *x, float f)
{
    int e;
    uint32_t mant = (uint32_t)ldexpf(frexpf(f, &e), 24);
    for (int b = 0; b < 24; b++)
        for (int i = e - 24 + 172 + b, carry = mant >> b & 1; carry && i < EXACT_BITS; i++) {
            carry = x->bit[i];
            x->bit[i] ^= 1;
        }
}

/* The sum rounded to the nearest double by the hardware: its top 64 bits with every bit below
 * them folded into the last (sticky) are exact in a long double of 64 bits, whose rounding to
 * double is then the sum's. */
static double exact_double(const exact *x)
{
    int top = EXACT_BITS - 1;
    while (top >= 0 && !x->bit[top])
        top--;
    if (top < 0) return 0;
    int lo = top >= 63 ? top - 63 : 0;
    uint64_t w = 0;
    for (int i = top; i >= lo; i--)
        w = w << 1 | x->bit[i];
    for (int i = 0; i < lo; i++)
        w |= x->bit[i];
    return (double)ldexpl((long double)w, lo - 172);
}

/* What client c must get: (Σ_{k≠c} θ_k)/(n − 1), the sum exact and rounded to double once (the
 * old sum over the others in double whenever that was exact), NaN where some other θ_k is. */
static void loo_want(const float *model, int n, int h, int c, float *want)
{
    for (int j = 0; j < h; j++) {
        exact x = {{0}};
        int nan = 0;
        for (int k = 0; k < n; k++)
            if (k != c && isnan(model[(size_t)k * h + j]))
                nan = 1;
            else if (k != c)
                exact_add(&x, model[(size_t)k * h + j]);
        want[j] = nan ? NAN : (float)(exact_double(&x) / (n - 1));
    }
}

/* Every client's download against loo_want; the mismatches. */
static int loo_bad(void *s, const float *model, int n, int h)
{
    float *got = malloc(sizeof(float) * (size_t)h), *want = malloc(sizeof(float) * (size_t)h);
    int bad = 0;
    for (int c = 0; c < n; c++) {
        loo_of(s, c, got);
        loo_want(model, n, h, c, want);
        for (int j = 0; j < h; j++)
            if (isnan(got[j]) != isnan(want[j]) ||
                (!isnan(want[j]) && memcmp(&got[j], &want[j], sizeof(float)))) {
                if (bad++ < 3)
                    printf("  client %d unit %d: θ_g∖i %a, want %a\n", c, j, got[j], want[j]);
            }
    }
    free(got), free(want);
    return bad;
}

static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005u + 1442695040888963407u;
    return *x >> 33;
}

/* Values 1 to 2^-149 apart in one sum (a double holds 53 bits of it), ones that leave again (a
 * running sum in floating point keeps what they rounded away), NaN; all against the exact mean,
 * bit for bit, after every upload; the rows are what was uploaded; θ outside [0, 1] is refused
 * and changes nothing; with theta: binary the rows are the units uploaded. */
static void test_loo(fl_config *cfg, fl_env *env)
{
    enum { N = 5 };
    sim_err err = {0};
    int h = fl_sub_units(&arch);
    CHECK(LDBL_MANT_DIG >= 64); /* exact_double's long double */
    nn_partition pn;
    fl_env e = first_clients(cfg, env, &pn, N);
    void *s = fl_fedpews.server_new(&e, &err);
    float *model = malloc(sizeof(float) * N * (size_t)h), *theta = malloc(sizeof(float) * h);
    for (int j = 0; j < N * h; j++)
        model[j] = 0.5f; /* σ(score_init = 0): a client without a row */
    const float vals[] = {1,         0,         0.5f,  0x1p-30f,       0x1p-60f,   0x1p-90f,
                          0x1p-120f, 0x1p-149f, 0.75f, 0x1.fffffep-1f, 0x1.8p-26f, 1.0f / 3};
    int nv = (int)(sizeof vals / sizeof *vals), bad = loo_bad(s, model, N, h), wide = 0;
    uint64_t x = 7;
    for (int step = 0; step < 30; step++) {
        int c = step == 0 || step == 20 ? 0 : (int)(lcg(&x) % N);
        for (int j = 0; j < h; j++) /* client 0 first all 1, at step 20 all 0 */
            theta[j] = step == 0 ? 1 : step == 20 ? 0 : vals[lcg(&x) % (uint64_t)nv];
        CHECK(absorb_theta(s, c, theta, NULL, &err) == SIM_OK);
        memcpy(model + (size_t)c * h, theta, sizeof(float) * h);
        if (step % 4 == 3) fl_fedpews.server_aggregate(s);
        bad += loo_bad(s, model, N, h);
    }
    /* the sums were wide: some held 1 and 2^-60 at once */
    for (int j = 0; j < h; j++) {
        int big = 0, tiny = 0;
        for (int c = 1; c < N; c++)
            big |= model[c * h + j] == 1, tiny |= model[c * h + j] == 0x1p-60f;
        wide += big && tiny;
    }
    /* two sums of client 4's others that only a correct rounding to double gets right:
     * unit 0: 1 + 3·2^-24 − 2^-92, 2^-92 below a double that is a tie between two floats:
     * rounded to that double, the mean is the even float (cut to 53 bits, the odd one below);
     * unit 1: 1 + 2^-24 + 2^-53, a tie between two doubles: the even one, 1 + 2^-24, is a tie
     * between the floats 1 and 1 + 2^-23 and gives 1 (the odd one, above, 1 + 2^-23) */
    const float tie[2][4] = {{0x1.fffffep-1f, 0x1.fffffep-23f, 0x1.fffffcp-47f, 0x1.fffffcp-70f},
                             {0x1.fffffep-1f, 0x1p-23f, 0x1p-53f, 0}};
    for (int c = 0; c < 4; c++) {
        memcpy(theta, model + (size_t)c * h, sizeof(float) * h);
        theta[0] = tie[0][c], theta[1] = tie[1][c];
        CHECK(absorb_theta(s, c, theta, NULL, &err) == SIM_OK);
        model[c * h] = tie[0][c], model[c * h + 1] = tie[1][c];
    }
    fl_fedpews.server_aggregate(s);
    float *got = malloc(sizeof(float) * h);
    loo_of(s, 4, got);
    CHECK_MSG(got[0] == (1 + 0x1p-22f) / 4 && got[1] == 0.25f, "the ties: %a %a", got[0], got[1]);
    bad += loo_bad(s, model, N, h);
    /* NaN from client 2 at unit 7: the others get NaN there, client 2 the mean of the others */
    memcpy(theta, model + 2 * h, sizeof(float) * h);
    theta[7] = NAN;
    CHECK(absorb_theta(s, 2, theta, NULL, &err) == SIM_OK);
    model[2 * h + 7] = NAN;
    loo_of(s, 0, got);
    CHECK(isnan(got[7]) && !isnan(got[6]));
    bad += loo_bad(s, model, N, h);
    theta[7] = 0.25f;
    CHECK(absorb_theta(s, 2, theta, NULL, &err) == SIM_OK);
    model[2 * h + 7] = 0.25f;
    bad += loo_bad(s, model, N, h);
    CHECK_MSG(bad == 0 && wide > 10, "θ_g∖i off the exact mean: %d (wide sums: %d)", bad, wide);
    for (int c = 0; c < N; c++)
        CHECK(rows.row[c] && rows.len[c] == sizeof(float) * (size_t)h &&
              !memcmp(rows.row[c], model + (size_t)c * h, sizeof(float) * h));
    /* a θ that is no probability: refused, naming it, nothing changed */
    const float wrong[] = {1.5f, -0.25f, INFINITY};
    long puts = rows.puts;
    for (int i = 0; i < 3; i++) {
        memcpy(theta, model + 3 * h, sizeof(float) * h);
        theta[9] = wrong[i];
        err = (sim_err){0};
        CHECK(absorb_theta(s, 3, theta, NULL, &err) == SIM_EFORMAT);
        CHECK_MSG(strstr(err.msg, "theta[9]"), "%s", err.msg);
    }
    CHECK(rows.puts == puts && loo_bad(s, model, N, h) == 0);
    /* a row that is no probabilities (a damaged store): reported as bad, the download built from
     * the initial row, no crash */
    ((float *)rows.row[3])[9] = 2.5f;
    CHECK(rows.bad == 0);
    loo_of(s, 3, got);
    CHECK_MSG(rows.bad == 1, "a damaged row reported %ld times", rows.bad);
    fl_fedpews.server_free(s);

    /* theta: binary: a client's row is the units it uploaded, whatever θ it sent */
    test_own(cfg, "{name: fedpews, pews: {warmup: 0.05, lambda: 1, mask_lr: 0.1, theta: binary}}");
    fresh_rows(&e);
    s = fl_fedpews.server_new(&e, &err);
    uint8_t *keep = malloc((size_t)h);
    for (int j = 0; j < N * h; j++)
        model[j] = 0.5f;
    for (int c = 0; c < 3; c++) {
        for (int j = 0; j < h; j++) {
            keep[j] = (j + c) % 3 != 0;
            theta[j] = 0.3f;
            model[c * h + j] = keep[j];
        }
        CHECK(absorb_theta(s, c, theta, keep, &err) == SIM_OK);
    }
    CHECK(loo_bad(s, model, N, h) == 0);
    CHECK(rows.row[1] && !memcmp(rows.row[1], model + h, sizeof(float) * h));
    fl_fedpews.server_free(s);
    free(keep), free(got), free(model), free(theta);
    test_own(cfg, "{name: fedpews, pews: {warmup: 0.05, lambda: 1, mask_lr: 0.1}}");
}

/* Some warmup uploads of clients 0-3 with θ from vals, and an aggregation. */
static void some_uploads(void *s, uint64_t seed)
{
    int h = fl_sub_units(&arch);
    sim_err err = {0};
    float *theta = malloc(sizeof(float) * h);
    for (int c = 0; c < 4; c++) {
        for (int j = 0; j < h; j++)
            theta[j] = (float)ldexp(1, -(int)(lcg(&seed) % 150));
        CHECK(absorb_theta(s, c, theta, NULL, &err) == SIM_OK);
    }
    fl_fedpews.server_aggregate(s);
    free(theta);
}

static void save(void *s, msgpack_sbuffer *sb)
{
    msgpack_sbuffer_init(sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    fl_fedpews.server_save(s, &pk);
}

/* A server saved and loaded into a new one (the same rows, as a resumed run's store) sends the
 * same θ_g∖i and saves the same bytes; a state of other clients or the old shape is refused.
 * The saved state does not grow with the clients (the rows are the store's). */
static void test_save_load(fl_config *cfg, fl_env *env)
{
    enum { N = 5 };
    sim_err err = {0};
    int h = fl_sub_units(&arch);
    nn_partition pn;
    fl_env e = first_clients(cfg, env, &pn, N);
    void *a = fl_fedpews.server_new(&e, &err), *b = fl_fedpews.server_new(&e, &err);
    some_uploads(a, 3);
    msgpack_sbuffer sa, sb;
    save(a, &sa);
    float *la = malloc(sizeof(float) * h), *lb = malloc(sizeof(float) * h);
    loo_of(a, 4, la), loo_of(b, 4, lb);
    CHECK(memcmp(la, lb, sizeof(float) * h)); /* b, before it loads, sends what a did not */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CHECK(msgpack_unpack_next(&u, sa.data, sa.size, &off) == MSGPACK_UNPACK_SUCCESS);
    CHECK(fl_fedpews.server_load(b, &u.data, &err) == SIM_OK);
    int same = 1;
    for (int c = 0; c < N; c++) {
        loo_of(a, c, la), loo_of(b, c, lb);
        same &= !memcmp(la, lb, sizeof(float) * h);
    }
    save(b, &sb);
    CHECK(same && sb.size == sa.size && !memcmp(sb.data, sa.data, sa.size));
    msgpack_sbuffer_destroy(&sb);
    /* another population's state, and the old one of five entries (Θ whole), are refused */
    pn.n_clients = N + 1;
    void *c6 = fl_fedpews.server_new(&e, &err);
    err = (sim_err){0};
    CHECK(fl_fedpews.server_load(c6, &u.data, &err) == SIM_EFORMAT);
    CHECK_MSG(strstr(err.msg, "6 clients"), "%s", err.msg);
    fl_fedpews.server_free(c6);
    pn.n_clients = N;
    msgpack_object old = u.data;
    old.via.array.size = 5;
    CHECK(fl_fedpews.server_load(b, &old, &err) == SIM_EFORMAT);
    msgpack_unpacked_destroy(&u);
    fl_fedpews.server_free(a), fl_fedpews.server_free(b);
    /* 4,000 clients: the same uploads save to as many bytes as with 5 but the count's (msgpack
     * writes 5 in one byte, 4000 in three) */
    pn.n_clients = 4000;
    fresh_rows(&e);
    a = fl_fedpews.server_new(&e, &err);
    some_uploads(a, 3);
    save(a, &sb);
    CHECK_MSG(sb.size == sa.size + 2 && rows.puts == 4,
              "saved %zu bytes for 4000 clients, %zu for 5", sb.size, sa.size);
    fl_fedpews.server_free(a);
    msgpack_sbuffer_destroy(&sa), msgpack_sbuffer_destroy(&sb);
    free(la), free(lb);
}

/* masks.tsv's row lists the round's uploaders in client-id order, a client that uploaded twice
 * with its last units, as an upload per client in id order does. */
static void test_masks_order(fl_config *cfg, fl_env *env)
{
    sim_err err = {0};
    int h = fl_sub_units(&arch);
    test_own(cfg, "{name: fedpews, pews: {warmup: 0.05, lambda: 1, mask_lr: 0.1}}");
    fresh_rows(env);
    uint8_t *k[4];
    float *theta = malloc(sizeof(float) * h);
    for (int i = 0; i < 4; i++) {
        k[i] = malloc((size_t)h);
        for (int j = 0; j < h; j++) /* k[2] within k[3]: the same parameters held */
            k[i][j] = i == 2 ? j % 4 == 0 : i == 3 ? j % 2 == 0 : (j + i) % 3 != 0;
    }
    for (int j = 0; j < h; j++)
        theta[j] = 0.5f;
    char *text[2];
    for (int run = 0; run < 2; run++) {
        fresh_rows(env);
        void *s = fl_fedpews.server_new(env, &err);
        static const int order[2][4] = {{2, 0, 1, 1}, {0, 1, 2, -1}};
        static const int units[2][4] = {{1, 0, 2, 3}, {0, 3, 1, -1}};
        for (int i = 0; i < 4 && order[run][i] >= 0; i++)
            CHECK(absorb_theta(s, order[run][i], theta, k[units[run][i]], &err) == SIM_OK);
        fl_fedpews.server_aggregate(s);
        size_t len;
        FILE *f = open_memstream(&text[run], &len);
        fl_fedpews.report(s, f);
        fclose(f);
        fl_fedpews.server_free(s);
    }
    CHECK_MSG(!strcmp(text[0], text[1]), "%s\nvs\n%s", text[0], text[1]);
    CHECK(strstr(text[1], "\t0:0.6641,1:0.5000,2:0.6680\n"));
    for (int i = 0; i < 4; i++)
        free(k[i]);
    free(text[0]), free(text[1]), free(theta);
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
    fresh_rows(&env);
    test_full_is_fedavg(&cfg, &env);
    test_fixed(&cfg, &env);
    test_score_step(&cfg, &env);
    test_loo(&cfg, &env);
    test_save_load(&cfg, &env);
    test_masks_order(&cfg, &env);
    test_rows_free(&rows);
    fl_config_destroy(&cfg);
    nn_partition_destroy(&part);
    nn_dataset_destroy(&train), nn_dataset_destroy(&test);
    return CHECK_DONE();
}
