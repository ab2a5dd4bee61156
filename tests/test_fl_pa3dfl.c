/* tests/test_fl_pa3dfl.c -- Pa3dFL (algos/pa3dfl.c, algos/pa3dfl_parts.c): the decomposition of
 * the Fashion CNN has spec 004 §2.7's shapes, recovery MACs and §2.12's payloads at every width; a
 * recovered weight is u_i·v_j at channel j·R1 + i; the factorized layers' gradients (through the
 * narrowed model, with Eq. 32), chained from the weight gradients or in batch form from the linear
 * layers' inputs and output gradients (which then cost no weight gradient), and the
 * hyper-network's pass a finite-difference check and agree, and a broken one does not; the server
 * averages the general factors unweighted; messages are as long as their encodings and cost-only
 * jobs report the real FLOPs and bytes; a few rounds on synthetic data beat chance, with the
 * hyper-network and without (the ablation keeps the personal part in the private state, and only u
 * travels); server state survives a checkpoint round trip. */
#include "algos/algo.h"
#include "algos/pa3dfl.h"
#include "nn/pack.h"
#include "tests/algos.h"
#include "tests/check.h"
#include "tests/fljob.h"
#include "tests/gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the factorized layers' gradient check ---- */
typedef struct fctx {
    const fl_p3_net *d;
    const nn_arch *a;
    nn_model *m;
    int kb, B;
    float *u, *v;
    const float *x;
    const int32_t *y;
    double lambda;
    uint64_t pattern;
} fctx;

static double floss(void *p)
{
    fctx *c = p;
    fl_p3_compose(c->d, c->a, c->kb, c->u, c->v, c->m->params);
    double l = nn_model_forward(c->m, c->x, c->y, c->B, 1);
    float *scratch = calloc(c->d->n_u, sizeof(float));
    l += fl_p3_orth(c->d, c->lambda, c->u, scratch);
    free(scratch);
    return l;
}

static int fsame(void *p)
{
    fctx *c = p;
    return nn_model_pattern(c->m) == c->pattern;
}

/* ---- the hyper-network's gradient check: L = Σ_k ⟨g_k, gen(client_k)⟩ ---- */
typedef struct hctx {
    fl_p3_hn *h;
    int m;
    const int32_t *cl;
    float *const *g;
    float *gen;
} hctx;

static double hloss(void *p)
{
    hctx *c = p;
    fl_p3_hn_encode(c->h);
    double l = 0;
    for (int k = 0; k < c->m; k++) {
        fl_p3_hn_generate(c->h, c->cl[k], c->gen);
        for (size_t j = 0; j < c->h->n_gen; j++)
            l += (double)c->g[k][j] * c->gen[j];
    }
    return l;
}

/* Mean accuracy of the 4 clients' personalized models on the test set (priv NULL: none yet). */
static double mean_acc(void *s, const msgpack_sbuffer *priv, nn_model *em, const nn_dataset *test)
{
    double acc = 0;
    for (int c = 0; c < 4; c++) {
        fl_pa3dfl.eval_params(s, c, priv ? priv[c].data : NULL, priv ? priv[c].size : 0, em);
        acc += nn_evaluate(em, test, NULL, test->n, NULL) / 4;
    }
    return acc;
}

static void save(void *s, msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    fl_pa3dfl.server_save(s, &pk);
}

int main(void)
{
    sim_err err = {0};

    /* shapes of the Fashion CNN at p_min = 1/16 (spec §2.7) and payloads (§2.12) */
    nn_arch fa;
    fl_p3_net fd;
    CHECK(nn_arch_build(&fa, "pa3dfl-cnn", 1, 28, 28, 10, &err) == SIM_OK);
    CHECK(fl_p3_net_build(&fd, &fa, 1.0 / 16, &err) == SIM_OK);
    CHECK(fd.n == 4 && fd.nb == 16);
    int R1[] = {2, 4, 32, 8}, R2[] = {25, 32, 32, 8};
    for (int k = 0; k < 4; k++)
        CHECK_MSG(fd.l[k].R1 == R1[k] && fd.l[k].R2 == R2[k], "layer %d: R1 %d R2 %d", k,
                  fd.l[k].R1, fd.l[k].R2);
    CHECK_EQ_I64(fd.n_u, 5538);
    CHECK_EQ_I64(fd.n_v, 1687952);
    CHECK_EQ_I64(fd.n_gen, 1687952 + 1290);
    long payload[] = {12245, 32126, 111440, 428276, 1694780}; /* p = 1/16, 1/8, … 1 */
    for (int k = 0; k < 5; k++)
        CHECK_EQ_I64(fd.n_u + fl_p3_kept(&fd, 1 << k), payload[k]);
    /* recovery MACs per step, §2.7's last column (FLOPs count 2 per MAC) */
    CHECK(fl_p3_compose_flops(&fd, 1) == 2 * 210402.0);
    CHECK(fl_p3_compose_flops(&fd, 16) == 2 * 53562912.0);
    /* "Ideal": p_min = 1, one block per layer */
    CHECK(fl_p3_net_build(&fd, &fa, 1, &err) == SIM_OK);
    CHECK_EQ_I64(fd.n_u, 349728);
    CHECK_EQ_I64(fd.n_v, 1672217);
    CHECK(fl_p3_net_build(&fd, &fa, 1.0 / 128, &err) == SIM_EINVAL); /* 32/128 channels */
    nn_arch bn;
    CHECK(nn_arch_build(&bn, "mlpbn:5-32-4", 5, 1, 1, 4, &err) == SIM_OK);
    CHECK(fl_p3_net_build(&fd, &bn, 0.25, &err) == SIM_EINVAL);

    /* a small model for the rest: the same CNN on 8×8 images, p_min = 1/4 */
    nn_arch a;
    fl_p3_net d;
    CHECK(nn_arch_build(&a, "pa3dfl-cnn", 1, 8, 8, 10, &err) == SIM_OK);
    CHECK(fl_p3_net_build(&d, &a, 0.25, &err) == SIM_OK);
    sim_rng r;
    sim_rng_seed(&r, 5, SIM_RNG_TEST, 0);
    float *u = malloc(sizeof(float) * d.n_u), *v = calloc(d.n_gen, sizeof(float));
    for (size_t j = 0; j < d.n_u; j++)
        u[j] = (float)(sim_rng_normal(&r) * 0.3);
    for (size_t j = 0; j < d.n_gen; j++)
        v[j] = (float)(sim_rng_normal(&r) * 0.3);
    nn_model m;
    int B = 3, kb = 2;
    nn_model_init(&m, &a, B);
    nn_model_set_width(&m, 0.5, 0);
    size_t nf = a.layout.n_floats;
    memset(m.params, 0, sizeof(float) * nf);
    double fl = fl_p3_compose(&d, &a, kb, u, v, m.params);
    CHECK(fl == fl_p3_compose_flops(&d, kb) && fl > 0);
    /* conv2 (S 32, T 64, k 5, R1 16, R2 32): channel 17 = block j 1, row i 1; input 3, tap 7 */
    {
        const fl_p3_layer *q = &d.l[1];
        const nn_tensor *t = &a.layout.t[a.l[q->li].wt];
        int i = 1, j = 1, s = 3, tap = 7;
        double want = 0;
        for (int rr = 0; rr < q->R2; rr++)
            want += (double)u[q->u_off + (size_t)(i * q->kk + tap) * q->R2 + rr] *
                    v[q->v_off + (size_t)rr * q->nb * q->S + (size_t)j * q->S + s];
        CHECK_NEAR(m.params[t->off + (size_t)(j * q->R1 + i) * t->cols + s * q->kk + tap], want,
                   1e-5);
        /* block 2 is pruned at kb 2: its channels stay untouched */
        CHECK(m.params[t->off + (size_t)(2 * q->R1) * t->cols] == 0);
    }
    /* the factor gradients from the weight gradients (recovery form), then with the linear
     * layers in batch form (R1 ≫ B here): both pass the check and agree, at kb 2 and at full
     * width (every block kept: the batch form's one-GEMM path) */
    for (int full = 0; full < 2; full++) {
        kb = full ? d.nb : 2;
        nn_model_reset_narrowing(&m);
        if (!full) nn_model_set_width(&m, 0.5, 0);
        float *x = malloc(sizeof(float) * B * 64);
        int32_t y[] = {1, 7, 3};
        for (int j = 0; j < B * 64; j++)
            x[j] = (float)sim_rng_uniform(&r);
        /* recovered weights of scale 1/√fan-in (0.3² · R2 · σ² = 1/fan-in for v ~ N(0, σ²)), so
         * the activations and the loss stay O(1) and float central differences are accurate */
        for (int k = 0; k < d.n && !full; k++) {
            const fl_p3_layer *q = &d.l[k];
            float f = (float)(1 / (0.09 * sqrt((double)q->R2 * q->S * q->kk)));
            for (size_t j = 0; j < (size_t)q->R2 * q->nb * q->S; j++)
                v[q->v_off + j] *= f;
        }
        /* and a head that is not zero, so the loss depends on the factorized layers (with the
         * zero head the arena starts with, only Eq. 32 would carry a gradient) */
        const nn_tensor *ht = &a.layout.t[a.l[d.head_li].wt];
        for (int j = 0; j < ht->rows * ht->cols; j++)
            m.params[ht->off + j] = (float)(sim_rng_normal(&r) * 0.3);
        float *take = malloc(sizeof(float) * fl_p3_take_floats(&d, m.max_batch));
        float *du[2], *dv[2];
        double back[2];
        for (int batch = 0; batch < 2; batch++) {
            fctx c = {&d, &a, &m, kb, B, u, v, x, y, 0.1, 0};
            du[batch] = calloc(d.n_u, sizeof(float)), dv[batch] = calloc(d.n_gen, sizeof(float));
            fl_p3_take(&d, &m, kb, B, batch ? take : NULL);
            for (int k = 0; k < d.n; k++)
                CHECK(!!m.grad_out[d.l[k].li] == (batch && d.l[k].lin) &&
                      fl_p3_batch_form(&d.l[k], kb, B) == d.l[k].lin);
            floss(&c);
            c.pattern = nn_model_pattern(&m);
            nn_model_zero_grad(&m);
            m.cost = (nn_cost){0};
            nn_model_backward(&m);
            back[batch] = m.cost.flops;
            nn_model_step_cost(&m, B, &m.cost);
            double fwd = m.cost.flops - back[batch]; /* forward, as step_cost counts it */
            m.cost = (nn_cost){0};
            nn_model_forward_cost(&m, B, &m.cost);
            CHECK_MSG(fabs(fwd - m.cost.flops) < 1, "batch %d: backward %g + forward %g counted",
                      batch, back[batch],
                      m.cost.flops); /* no dW counted for the layers in batch form */
            CHECK(fl_p3_compose_backward(&d, &m, kb, B, u, v, du[batch], dv[batch]) ==
                  fl_p3_backward_flops(&d, kb, B));
            fl_p3_orth(&d, c.lambda, u, du[batch]);
        }
        double dw = 0; /* the weight gradients the batch form spares: fc1's and fc2's */
        for (int k = 2; k < d.n; k++)
            dw += 2.0 * B * kb * d.l[k].R1 * (d.l[k].S / d.nb * kb);
        CHECK_MSG(back[0] - back[1] == dw, "backward FLOPs %g and %g, dW %g", back[0], back[1], dw);
        double worst = 0;
        for (size_t j = 0; j < d.n_u; j++)
            worst = fmax(worst, fabs(du[0][j] - du[1][j]) / (1e-3 + fabs(du[0][j])));
        for (size_t j = 0; j < d.n_gen; j++)
            worst = fmax(worst, fabs(dv[0][j] - dv[1][j]) / (1e-3 + fabs(dv[0][j])));
        CHECK_MSG(worst < 1e-3, "recovery and batch forms differ by %g", worst);
        fl_p3_take(&d, &m, kb, B, NULL);
        /* both forms' gradients against the finite differences of the one loss they differentiate,
         * taken once. The loss (≈ 454, nearly all Eq. 32's) carries ≈ 2e-7 of float rounding
         * noise, which sgemm's kernels set: at a fixed step 3e-3 the central difference of one
         * coordinate missed by 1.5e-4 on OpenBLAS's generic kernels (issue 37); the checker
         * measures the noise and takes the step it calls for */
        fctx c = {&d, &a, &m, kb, B, u, v, x, y, 0.1, 0};
        floss(&c);
        c.pattern = nn_model_pattern(&m);
        const double h = 3e-3;
        int kinks = 0, bad[2];
        const float *both[2] = {du[0], du[1]};
        gc_check_grads("u", u, both, 2, bad, d.n_u, floss, fsame, &c, 80, h, 1e-2, 1e-4, 1, &kinks);
        CHECK(bad[0] == 0 && bad[1] == 0);
        /* the kept v of each layer (the first block's first row) and a pruned block (grad 0) */
        for (int k = 0; k < d.n; k++) {
            const float *vk[2] = {dv[0] + d.l[k].v_off, dv[1] + d.l[k].v_off};
            gc_check_grads("v", v + d.l[k].v_off, vk, 2, bad, (size_t)d.l[k].S, floss, fsame, &c,
                           20, h, 1e-2, 1e-4, 2 + k, &kinks);
            CHECK(bad[0] == 0 && bad[1] == 0);
        }
        size_t pruned = d.l[2].v_off + 3 * (size_t)d.l[2].S; /* fc1, block 3 */
        if (!full) {
            const float *vp[2] = {dv[0] + pruned, dv[1] + pruned};
            gc_check_grads("v pruned", v + pruned, vp, 2, bad, (size_t)d.l[2].S, floss, fsame, &c,
                           10, h, 1e-2, 1e-4, 9, &kinks);
            CHECK(bad[0] == 0 && bad[1] == 0);
        }
        CHECK(kinks < 20);
        /* a broken chain is caught */
        for (size_t j = 0; j < d.n_u; j++)
            du[0][j] *= 1.5f;
        CHECK(gc_check("u broken", u, du[0], d.n_u, floss, &c, 20, 3e-3, 1e-2, 1e-4, 1) > 0);
        CHECK_MSG(gc_last.worst_ratio > 5, "a broken chain misses by only %.3g times the allowance",
                  gc_last.worst_ratio);
        for (int batch = 0; batch < 2; batch++)
            free(du[batch]), free(dv[batch]);
        free(take), free(x);
    }

    /* hyper-network gradients, with random decoders and temperatures so every path carries one;
     * with the encoded embeddings as they come and scaled to unit norm */
    for (int unit = 0; unit < 2; unit++) {
        fl_p3_hn h;
        sim_rng_seed(&r, 6, SIM_RNG_TEST, 1);
        fl_p3_hn_init(&h, &d, 5, 3, 4, 3, v, &r);
        h.unit = unit;
        for (size_t j = h.rho; j < h.n_phi; j++)
            h.phi[j] = (float)(sim_rng_normal(&r) * (j < h.dec_b ? 0.5 : 0.05));
        int32_t cl[] = {4, 1};
        float *g[2], *gen = malloc(sizeof(float) * h.n_gen);
        for (int k = 0; k < 2; k++) {
            g[k] = malloc(sizeof(float) * h.n_gen);
            for (size_t j = 0; j < h.n_gen; j++)
                g[k][j] = (float)(sim_rng_normal(&r) * 1e-3);
        }
        float *gs = calloc(h.n_small, sizeof(float)), *gd = calloc(h.n_phi - h.n_small, 4);
        fl_p3_hn_encode(&h);
        fl_p3_hn_backward(&h, 2, cl, g, gs, gd, 0, 0);
        hctx c = {&h, 2, cl, g, gen};
        CHECK(gc_check("E", h.phi + h.E, gs + h.E, (size_t)5 * 3, hloss, &c, 15, 1e-2, 2e-2, 1e-5,
                       3) == 0);
        CHECK(gc_check("encoder", h.phi + h.enc[0], gs + h.enc[0], h.rho - h.enc[0], hloss, &c, 40,
                       1e-3, 2e-2, 1e-5, 4) == 0);
        CHECK(gc_check("rho", h.phi + h.rho, gs + h.rho, (size_t)h.nt, hloss, &c, 5, 1e-2, 2e-2,
                       1e-5, 5) == 0);
        CHECK(gc_check("dec b", h.phi + h.dec_b, gs + h.dec_b, h.n_gen, hloss, &c, 20, 1e-2, 2e-2,
                       1e-5, 6) == 0);
        CHECK(gc_check("dec W", h.phi + h.dec_w, gd, h.n_phi - h.n_small, hloss, &c, 30, 1e-2, 2e-2,
                       1e-5, 7) == 0);
        /* in place: the decoder weights move by −γ·their gradient */
        float *w0 = malloc(sizeof(float) * (h.n_phi - h.n_small));
        memcpy(w0, h.phi + h.dec_w, sizeof(float) * (h.n_phi - h.n_small));
        float *gs2 = calloc(h.n_small, sizeof(float));
        fl_p3_hn_encode(&h);
        fl_p3_hn_backward(&h, 2, cl, g, gs2, NULL, 0.5, 0);
        int bad = 0;
        for (size_t j = 0; j < h.n_phi - h.n_small; j++)
            bad += fabsf(h.phi[h.dec_w + j] - (w0[j] - 0.5f * gd[j])) > 1e-6f;
        CHECK(bad == 0);
        CHECK(!memcmp(gs, gs2, sizeof(float) * h.n_small));
        free(w0), free(gs2), free(gs), free(gd), free(gen), free(g[0]), free(g[1]);
        fl_p3_hn_destroy(&h);
    }
    /* one client's step from the initial decoders (W = 0, so only the decoders move): under
     * nlms the regenerated vector lands on gen − γ·g exactly; plain SGD overshoots by 1 + ‖ê‖² */
    for (int nlms = 1; nlms >= 0; nlms--) {
        fl_p3_hn h;
        sim_rng_seed(&r, 8, SIM_RNG_TEST, 2);
        fl_p3_hn_init(&h, &d, 5, 3, 4, 2, v, &r);
        int32_t cl[] = {2};
        float *g = malloc(sizeof(float) * h.n_gen), *g0 = malloc(sizeof(float) * h.n_gen),
              *g1 = malloc(sizeof(float) * h.n_gen), *gs = calloc(h.n_small, sizeof(float));
        for (size_t j = 0; j < h.n_gen; j++)
            g[j] = (float)(sim_rng_normal(&r) * 1e-2);
        fl_p3_hn_encode(&h);
        fl_p3_hn_generate(&h, 2, g0);
        fl_p3_hn_backward(&h, 1, cl, &g, gs, NULL, 1, nlms);
        for (size_t j = 0; j < h.n_small; j++)
            h.phi[j] -= gs[j];
        fl_p3_hn_encode(&h);
        fl_p3_hn_generate(&h, 2, g1);
        double worst = 0, ratio = 0;
        for (size_t j = 0; j < h.n_gen; j++) {
            worst = fmax(worst, fabs((g0[j] - g1[j]) - g[j]));
            ratio += (g0[j] - g1[j]) / g[j] / (double)h.n_gen;
        }
        if (nlms)
            CHECK_MSG(worst < 1e-6, "nlms: generated moves by exactly g (worst %g)", worst);
        else
            CHECK_MSG(ratio > 1.05, "plain SGD overshoots: the step is %.3f·g", ratio);
        free(g), free(g0), free(g1), free(gs);
        fl_p3_hn_destroy(&h);
    }
    nn_model_destroy(&m);
    free(u), free(v);

    /* the algorithm on synthetic data: 4 clients of capacities 1, 1/4, 1/16, 1/2 → widths 1,
     * 1/2, 1/4, 1/2 (p_min 1/4), an MLP whose layers split into 4 blocks */
    nn_dataset train, test;
    nn_partition part;
    nn_arch ma;
    CHECK(nn_synth_pews_make(&train, &test, 200, 3, &err) == SIM_OK);
    CHECK(nn_partition_iid(&part, &train, 4, 3, &err) == SIM_OK);
    CHECK(nn_arch_build(&ma, "mlp:5-32-32-4", 5, 1, 1, 4, &err) == SIM_OK);
    fl_config cfg = {.name = "pa3dfl",
                     .local_epochs = 2,
                     .batch_size = 16,
                     .lr = 0.1,
                     .lr_decay = 1,
                     .server_lr = 1};
    /* γ = 0.5: at the default γ = 1 this 200-sample task diverges for some seeds (accuracy back
     * to chance on 2 of 3 initializations tried), which a test of the mechanics must not hang on */
    fl_pa3dfl_config pc = {0.001, 0.5, 1, 1, 1, 8, 8, 2, 0, 0.1, 11, 1, "auto"};
    cfg.own = &pc;
    double cap[] = {1, 0.25, 0.0625, 0.5};
    fl_env env = {&cfg, &ma, &train, &test, &part, 9, 0, cap, NULL, NULL, NULL};
    CHECK(fl_pa3dfl.client_width(&env, 2) == 0.25 && fl_pa3dfl.client_width(&env, 1) == 0.5);
    void *s = fl_pa3dfl.server_new(&env, &err);
    CHECK(s != NULL);
    fl_worker w;
    fl_worker_init(&w);
    nn_model em, wm;
    nn_model_init(&em, &ma, 64);
    nn_model_init(&wm, &ma, 1);
    fl_p3_net md;
    CHECK(fl_p3_net_build(&md, &ma, 0.25, &err) == SIM_OK);
    msgpack_sbuffer priv[4];
    double acc0 = mean_acc(s, NULL, &em, &test);
    for (int c = 0; c < 4; c++)
        msgpack_sbuffer_init(&priv[c]);
    for (int round = 0; round < 8; round++) {
        pc.alphas = round == 1 ? 1 : 11; /* round 1: no α search, nothing held out */
        for (int c = 0; c < 4; c++) {
            fl_result res;
            test_job(&fl_pa3dfl, &env, s, c, round, NULL, 0, &res, &w);
            CHECK(res.up_bytes == res.up.size);
            if (round < 2) {
                /* the reply holds u and the kept entries of a width-p client */
                int kc = c == 0 ? 4 : c == 2 ? 1 : 2;
                CHECK_EQ_I64(res.up.size, 1 + 2 + nn_bin_bytes(4 * md.n_u) + 2 +
                                                  nn_bin_bytes(4 * fl_p3_kept(&md, kc)));
                /* cost-only reports the same FLOPs and bytes */
                fl_env co = env;
                co.cost_only = 1;
                fl_job j = {c, round, NULL, 0, NULL, 0, (uint64_t)c << 32 | (uint32_t)round};
                fl_result rc;
                fl_result_init(&rc);
                CHECK(fl_pa3dfl.client_train(&co, &j, &w, &rc, &err) == SIM_OK);
                CHECK_MSG(rc.cost.flops == res.cost.flops, "cost-only %g, real %g", rc.cost.flops,
                          res.cost.flops);
                CHECK(rc.up_bytes == res.up_bytes && rc.steps == res.steps);
                fl_result_destroy(&rc);
            }
            /* unweighted: the engine's weights must not matter */
            CHECK(fl_pa3dfl.server_absorb(s, c, res.up.data, res.up.size, 1 + 10 * c, 1 + 10 * c,
                                          &err) == SIM_OK);
            priv[c].size = 0;
            msgpack_sbuffer_write(&priv[c], res.priv.data, res.priv.size);
            fl_result_destroy(&res);
        }
        fl_pa3dfl.server_aggregate(s);
    }
    double acc = 0;
    for (int c = 0; c < 4; c++) {
        double dens = fl_pa3dfl.eval_params(s, c, priv[c].data, priv[c].size, &em), p = cap[c];
        nn_model_reset_narrowing(&wm);
        if (c) nn_model_set_width(&wm, c == 3 ? 0.5 : sqrt(p), 0); /* widths 1, 1/2, 1/4, 1/2 */
        CHECK(dens == nn_model_unit_density(&wm) && (c == 0) == (dens == 1));
        acc += nn_evaluate(&em, &test, NULL, test.n, NULL) / 4;
    }
    /* 4 classes: chance is 0.25; trained runs reach 0.52-0.6+ over the initializations tried */
    CHECK_MSG(acc > 0.45 && acc > acc0 + 0.1, "accuracy %.3f (untrained %.3f)", acc, acc0);

    /* With validation splits (partition.local_val) a client trains on all its samples and picks
     * α on its validation split; without, it holds out val = 10% of them. Cost-only prices both
     * the same as the real job (the α grid's forward passes over the split chosen on). */
    {
        nn_partition vp;
        CHECK(nn_partition_iid(&vp, &train, 4, 3, &err) == SIM_OK);
        CHECK(nn_partition_local_test(&vp, &train, &test, 0.5, 0, 3, &err) == SIM_OK);
        CHECK(nn_partition_local_val(&vp, &test, 0.5, 3, &err) == SIM_OK);
        fl_env ve = env, co;
        ve.part = &vp;
        for (int with = 0; with < 2; with++) {
            fl_result rj, rc;
            const fl_env *je = with ? &ve : &env;
            test_job(&fl_pa3dfl, je, s, 1, 10, NULL, 0, &rj, &w);
            int n = je->part->n[1], held = with ? 0 : (int)lround(0.1 * n);
            CHECK_MSG(rj.cost.samples == cfg.local_epochs * (n - held), "trained on %g of %d",
                      rj.cost.samples / cfg.local_epochs, n);
            co = *je;
            co.cost_only = 1;
            fl_job j = {1, 10, NULL, 0, NULL, 0, (uint64_t)1 << 32 | 10u};
            fl_result_init(&rc);
            CHECK(fl_pa3dfl.client_train(&co, &j, &w, &rc, &err) == SIM_OK);
            CHECK_MSG(rc.cost.flops == rj.cost.flops,
                      "with a validation split %d: cost-only %g, "
                      "real %g",
                      with, rc.cost.flops, rj.cost.flops);
            fl_result_destroy(&rj);
            fl_result_destroy(&rc);
        }
        nn_partition_destroy(&vp);
    }

    /* algorithm.clip: one step moves u and the kept entries by lr·clip exactly when the gradient
     * is longer, by more without it */
    {
        int kc = fl_p3_blocks(&md, 1);
        size_t nk = fl_p3_kept(&md, kc);
        float *fac[2][2]; /* {down, up} × {u, kept} */
        double moved[2];
        cfg.local_epochs = 0, cfg.local_steps = 1;
        for (int clip = 0; clip < 2; clip++) {
            cfg.clip = clip ? 1e-2 : 0;
            msgpack_sbuffer down;
            msgpack_sbuffer_init(&down);
            fl_pa3dfl.job_down(s, 0, 11, &down);
            fl_result rs;
            test_job(&fl_pa3dfl, &env, s, 0, 11, NULL, 0, &rs, &w);
            const msgpack_sbuffer *m2[2] = {&down, &rs.up};
            double ss = 0;
            for (int k = 0; k < 2; k++) {
                msgpack_unpacked mu;
                msgpack_unpacked_init(&mu);
                size_t off = 0;
                CHECK(msgpack_unpack_next(&mu, m2[k]->data, m2[k]->size, &off) ==
                      MSGPACK_UNPACK_SUCCESS);
                fac[k][0] = malloc(4 * md.n_u), fac[k][1] = malloc(4 * nk);
                CHECK(nn_unpack_f32(fac[k][0], md.n_u, nn_map_get(&mu.data, "u"), "u", &err) ==
                      SIM_OK);
                CHECK(nn_unpack_f32(fac[k][1], nk, nn_map_get(&mu.data, "v"), "v", &err) == SIM_OK);
                msgpack_unpacked_destroy(&mu);
            }
            for (size_t j = 0; j < md.n_u; j++)
                ss += ((double)fac[1][0][j] - fac[0][0][j]) * ((double)fac[1][0][j] - fac[0][0][j]);
            for (size_t j = 0; j < nk; j++)
                ss += ((double)fac[1][1][j] - fac[0][1][j]) * ((double)fac[1][1][j] - fac[0][1][j]);
            moved[clip] = sqrt(ss);
            for (int k = 0; k < 2; k++)
                free(fac[k][0]), free(fac[k][1]);
            fl_result_destroy(&rs);
            msgpack_sbuffer_destroy(&down);
        }
        CHECK_MSG(fabs(moved[1] - 0.1 * 1e-2) < 2e-5 && moved[0] > 5 * moved[1],
                  "one step moved %g unclipped, %g clipped at 1e-2 (lr 0.1)", moved[0], moved[1]);
        cfg.local_epochs = 2, cfg.local_steps = 0, cfg.clip = 0;
    }

    /* Eq. 6: the general factors become the plain mean of what the clients sent */
    {
        fl_result r0, r1;
        test_job(&fl_pa3dfl, &env, s, 0, 9, NULL, 0, &r0, &w);
        test_job(&fl_pa3dfl, &env, s, 2, 9, NULL, 0, &r1, &w);
        float *u0 = malloc(4 * md.n_u), *u1 = malloc(4 * md.n_u);
        float *k0 = malloc(4 * fl_p3_kept(&md, 4)), *k1 = malloc(4 * fl_p3_kept(&md, 1));
        msgpack_unpacked mu;
        msgpack_unpacked_init(&mu);
        size_t off = 0;
        CHECK(msgpack_unpack_next(&mu, r0.up.data, r0.up.size, &off) == MSGPACK_UNPACK_SUCCESS);
        CHECK(nn_unpack_f32(u0, md.n_u, nn_map_get(&mu.data, "u"), "u", &err) == SIM_OK);
        off = 0;
        CHECK(msgpack_unpack_next(&mu, r1.up.data, r1.up.size, &off) == MSGPACK_UNPACK_SUCCESS);
        CHECK(nn_unpack_f32(u1, md.n_u, nn_map_get(&mu.data, "u"), "u", &err) == SIM_OK);
        CHECK(fl_pa3dfl.server_absorb(s, 0, r0.up.data, r0.up.size, 100, 100, &err) == SIM_OK);
        /* checkpoint mid-round: the pending reply travels too */
        msgpack_sbuffer a1, a2;
        save(s, &a1);
        void *s2 = fl_pa3dfl.server_new(&env, &err);
        msgpack_unpacked lo;
        msgpack_unpacked_init(&lo);
        off = 0;
        CHECK(msgpack_unpack_next(&lo, a1.data, a1.size, &off) == MSGPACK_UNPACK_SUCCESS);
        CHECK(fl_pa3dfl.server_load(s2, &lo.data, &err) == SIM_OK);
        save(s2, &a2);
        CHECK(a1.size == a2.size && !memcmp(a1.data, a2.data, a1.size));
        /* a state for another model is refused */
        msgpack_object bad = lo.data;
        bad.via.array.size = 3;
        CHECK(fl_pa3dfl.server_load(s2, &bad, &err) == SIM_EFORMAT);
        msgpack_unpacked_destroy(&lo);
        CHECK(fl_pa3dfl.server_absorb(s, 2, r1.up.data, r1.up.size, 1, 1, &err) == SIM_OK);
        CHECK(fl_pa3dfl.server_absorb(s2, 2, r1.up.data, r1.up.size, 1, 1, &err) == SIM_OK);
        fl_pa3dfl.server_aggregate(s);
        fl_pa3dfl.server_aggregate(s2);
        msgpack_sbuffer_destroy(&a1), msgpack_sbuffer_destroy(&a2);
        save(s, &a1);
        save(s2, &a2);
        CHECK(a1.size == a2.size && !memcmp(a1.data, a2.data, a1.size));
        /* u sits first in the state: [u, …] */
        off = 0;
        CHECK(msgpack_unpack_next(&mu, a1.data, a1.size, &off) == MSGPACK_UNPACK_SUCCESS);
        float *ua = malloc(4 * md.n_u);
        CHECK(nn_unpack_f32(ua, md.n_u, &mu.data.via.array.ptr[0], "u", &err) == SIM_OK);
        int bad_mean = 0;
        for (size_t j = 0; j < md.n_u; j++)
            bad_mean += fabs(ua[j] - ((double)u0[j] + u1[j]) / 2) > 1e-6;
        CHECK(bad_mean == 0);
        /* a truncated reply is refused */
        CHECK(fl_pa3dfl.server_absorb(s, 0, r0.up.data, r0.up.size - 9, 1, 1, &err) == SIM_EFORMAT);
        msgpack_unpacked_destroy(&mu);
        msgpack_sbuffer_destroy(&a1), msgpack_sbuffer_destroy(&a2);
        free(u0), free(u1), free(k0), free(k1), free(ua);
        fl_result_destroy(&r0), fl_result_destroy(&r1);
        fl_pa3dfl.server_free(s2);
    }
    /* Table 3's ablation (hn: false): only u travels, the personal part lives in the private
     * state from job to job, and a reply without "v" is refused by the full method */
    {
        pc.hn = 0;
        void *sa = fl_pa3dfl.server_new(&env, &err);
        fl_result ra;
        for (int round = 0; round < 6; round++) {
            for (int c = 0; c < 4; c++) {
                test_job(&fl_pa3dfl, &env, sa, c, round, round ? priv[c].data : NULL,
                         round ? priv[c].size : 0, &ra, &w);
                CHECK_EQ_I64(ra.up.size, 1 + 2 + nn_bin_bytes(4 * md.n_u));
                CHECK(fl_pa3dfl.server_absorb(sa, c, ra.up.data, ra.up.size, 1, 1, &err) == SIM_OK);
                if (round == 0 && c == 0) {
                    pc.hn = 1;
                    CHECK(fl_pa3dfl.server_absorb(s, c, ra.up.data, ra.up.size, 1, 1, &err) ==
                          SIM_EFORMAT);
                    pc.hn = 0;
                }
                priv[c].size = 0;
                msgpack_sbuffer_write(&priv[c], ra.priv.data, ra.priv.size);
                fl_result_destroy(&ra);
            }
            fl_pa3dfl.server_aggregate(sa);
        }
        double acc_a = mean_acc(sa, priv, &em, &test);
        CHECK_MSG(acc_a > 0.6, "without the hyper-network: accuracy %.3f", acc_a);
        fl_pa3dfl.server_free(sa);
        pc.hn = 1;
    }
    for (int c = 0; c < 4; c++)
        msgpack_sbuffer_destroy(&priv[c]);
    fl_pa3dfl.server_free(s);
    nn_model_destroy(&em);
    nn_model_destroy(&wm);
    fl_worker_destroy(&w);
    nn_partition_destroy(&part);
    nn_dataset_destroy(&train), nn_dataset_destroy(&test);
    return CHECK_DONE();
}
