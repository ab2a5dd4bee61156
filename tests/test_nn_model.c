/* tests/test_nn_model.c -- models as a whole: parameter counts of the papers' architectures,
 * whole-model gradient checks (dense and narrowed), narrowing and masks against the dense model
 * with zeroed weights (same outputs and gradients, fewer FLOPs), SGD semantics, memory accounting,
 * and a small learning run. */
#include "nn/model.h"
#include "nn/ops.h"
#include "tests/check.h"
#include "tests/gradcheck.h"

#include <stdlib.h>
#include <string.h>

static sim_rng rng;

static void build(nn_arch *a, const char *name, int c, int h, int w, int k)
{
    sim_err err = {0};
    int rc = nn_arch_build(a, name, c, h, w, k, &err);
    CHECK_MSG(rc == SIM_OK, "build %s: %s", name, err.msg);
}

static void fill(float *x, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((2 * sim_rng_uniform(&rng) - 1) * scale);
}

static void test_param_counts(void)
{
    static const struct {
        const char *name;
        int c, h, w, k;
        size_t params;
    } cases[] = {
            {"cnn2", 1, 28, 28, 10, 1663370},
            {"lenet5-caffe", 1, 28, 28, 10, 430500},
            {"pa3dfl-cnn", 1, 28, 28, 10, 1725194},
            {"leaf-cnn", 1, 28, 28, 62, 2278334}, /* pFedGate's EMNIST CNN (spec 000 §4.2) */
            {"fedpews-mlp", 5, 1, 1, 4, 14884},
            {"mlp:784-200-200-10", 1, 28, 28, 10, 199210},
            {"fedpews-cnn", 3, 32, 32, 20, 134228},
            /* NAME@p, a model of its own: as many parameters as the p-wide sub-model of
             * spec 004 §2.7's table (below), and the head keeps the classes */
            {"pa3dfl-cnn@0.0625", 1, 28, 28, 10, 6914},
            {"pa3dfl-cnn@0.25", 1, 28, 28, 10, 108362},
            {"mlp:784-200-200-10@0.5", 1, 28, 28, 10, 784 * 100 + 100 + 100 * 100 + 100 + 1010},
    };
    for (size_t i = 0; i < SIM_ARRAY_LEN(cases); i++) {
        nn_arch a;
        build(&a, cases[i].name, cases[i].c, cases[i].h, cases[i].w, cases[i].k);
        CHECK_MSG(a.layout.n_params == cases[i].params, "%s has %zu parameters, paper says %zu",
                  cases[i].name, a.layout.n_params, cases[i].params);
    }
    /* a p-wide pa3dfl-cnn holds and computes what spec 004 §2.7's table says: its parameters,
     * and 2 × its forward multiply-accumulates per sample (rolling windows count the same) */
    static const struct {
        double p;
        long shift;
        size_t params;
        double macs;
    } widths[] = {{1.0 / 16, 0, 6914, 85008},
                  {1.0 / 8, 3, 27274, 261472},
                  {1.0 / 4, 0, 108362, 888768},
                  {1.0 / 2, 40, 432010, 3240832},
                  {1, 0, 1725194, 12334848}};
    nn_arch p3;
    build(&p3, "pa3dfl-cnn", 1, 28, 28, 10);
    nn_model pm;
    nn_model_init(&pm, &p3, 1);
    float x[784] = {0};
    for (size_t i = 0; i < SIM_ARRAY_LEN(widths); i++) {
        nn_model_reset_narrowing(&pm);
        if (widths[i].p < 1) nn_model_set_width(&pm, widths[i].p, widths[i].shift);
        pm.cost.flops = 0;
        nn_model_forward(&pm, x, NULL, 1, 0);
        CHECK_MSG(nn_model_live_count(&pm) == widths[i].params &&
                          pm.cost.flops == 2 * widths[i].macs,
                  "width %g: %zu parameters, %g FLOPs", widths[i].p, nn_model_live_count(&pm),
                  pm.cost.flops);
    }
    nn_model_destroy(&pm);
    nn_arch a;
    sim_err err = {0};
    CHECK(nn_arch_build(&a, "resnet9000", 1, 28, 28, 10, &err) == SIM_EINVAL);
    CHECK(strstr(err.msg, "resnet9000") != NULL);
    CHECK(nn_arch_build(&a, "mlp:784-10", 1, 28, 28, 12, &err) == SIM_EINVAL);
    CHECK(nn_arch_build(&a, "mlp:784-x-10", 1, 28, 28, 10, &err) == SIM_EINVAL);
    CHECK(nn_arch_build(&a, "lenet5-caffe", 5, 1, 1, 4, &err) == SIM_EINVAL);
    CHECK(nn_arch_build(&a, "cnn2@0", 1, 28, 28, 10, &err) == SIM_EINVAL);
    CHECK(nn_arch_build(&a, "cnn2@1.5", 1, 28, 28, 10, &err) == SIM_EINVAL);
    CHECK(nn_arch_build(&a, "cnn2@0.5x", 1, 28, 28, 10, &err) == SIM_EINVAL);
    CHECK(nn_arch_build(&a, "@0.5", 1, 28, 28, 10, &err) == SIM_EINVAL);
    CHECK_MSG(strstr(err.msg, "NAME@WIDTH") != NULL, "%s", err.msg);
}

/* ---- whole-model gradient check ---- */
typedef struct {
    nn_model *m;
    const float *x;
    const int32_t *y;
    int B;
    uint64_t region; /* activation pattern at the unperturbed parameters */
} model_ctx;

static double model_loss(void *p)
{
    model_ctx *c = p;
    return nn_model_forward(c->m, c->x, c->y, c->B, 1);
}

static int model_same_region(void *p)
{
    model_ctx *c = p;
    return nn_model_pattern(c->m) == c->region;
}

static void gradcheck_model(const char *name, int c, int h, int w, int k, double width, float scale)
{
    nn_arch a;
    build(&a, name, c, h, w, k);
    nn_model m;
    int B = 4, feat = c * h * w;
    nn_model_init(&m, &a, B);
    nn_model_init_params(&m, &rng);
    if (width < 1) nn_model_set_width(&m, width, 5);
    m.narrow_scale = scale;
    float *x = malloc(sizeof(float) * (size_t)B * feat);
    int32_t y[4];
    fill(x, (size_t)B * feat, 1);
    for (int b = 0; b < B; b++)
        y[b] = (int32_t)sim_rng_below(&rng, (uint64_t)k);
    nn_model_zero_grad(&m);
    nn_model_forward(&m, x, y, B, 1);
    nn_model_backward(&m);
    float *g = malloc(sizeof(float) * a.layout.n_floats);
    memcpy(g, m.grads, sizeof(float) * a.layout.n_floats);
    model_ctx ctx = {&m, x, y, B, nn_model_pattern(&m)};
    int kinks = 0, checked = 0;
    for (int t = 0; t < a.layout.n; t++) {
        const nn_tensor *T = &a.layout.t[t];
        if (!T->trainable) continue;
        char what[96];
        snprintf(what, sizeof what, "%s@%.2fx%g.%s", name, width, (double)scale, T->name);
        int bad = gc_check_region(what, m.params + T->off, g + T->off, (size_t)T->rows * T->cols,
                                  model_loss, model_same_region, &ctx, 32, 1e-3, 1e-2, 1e-4,
                                  (uint64_t)t, &kinks);
        checked += 32;
        CHECK_MSG(bad == 0, "%s: %d coordinates disagree", what, bad);
    }
    /* kinks are detected exactly; the bound keeps the check from judging too few coordinates */
    CHECK_MSG(kinks * 2 <= checked, "%s@%.2f: %d of %d coordinates sit on kinks", name, width,
              kinks, checked);
    /* the same check catches a gradient whose sign is wrong in one tensor (the head's, which
     * crosses no kink, so every coordinate is judged) */
    const nn_tensor *T = &a.layout.t[a.layout.n - 1];
    for (size_t i = 0; i < (size_t)T->rows * T->cols; i++)
        g[T->off + i] = -g[T->off + i];
    printf("  (the next gradcheck failures are expected: a sign-flipped gradient)\n");
    CHECK_MSG(gc_check_region("broken", m.params + T->off, g + T->off, (size_t)T->rows * T->cols,
                              model_loss, model_same_region, &ctx, 32, 1e-3, 1e-2, 1e-4, 99,
                              &kinks) > 0,
              "%s: a sign-flipped gradient is caught", name);
    CHECK_MSG(gc_last.worst_ratio > 5,
              "%s: a sign-flipped gradient misses by only %.3g times the "
              "allowance",
              name, gc_last.worst_ratio);
    free(x);
    free(g);
    nn_model_destroy(&m);
}

/* HeteroFL's Scaler: a forward multiplies each hidden layer's pre-activation by s, so with one
 * hidden ReLU layer the logits minus the head's bias scale by s, in training and evaluation
 * forwards alike. (Its gradients are checked by gradcheck_model with a scale.) */
static void test_narrow_scale(void)
{
    nn_arch a;
    build(&a, "mlp:6-5-3", 6, 1, 1, 3);
    nn_model m;
    nn_model_init(&m, &a, 2);
    nn_model_init_params(&m, &rng);
    CHECK(m.narrow_scale == 1.0f);
    float x[12], ref[6];
    int32_t y[2] = {0, 2};
    fill(x, 12, 1);
    const float *b2 = m.params + a.layout.t[3].off;
    nn_model_forward(&m, x, y, 2, 1);
    memcpy(ref, m.logits, sizeof ref);
    m.narrow_scale = 2.5f;
    for (int train = 0; train < 2; train++) {
        nn_model_forward(&m, x, y, 2, train);
        double bad = 0;
        for (int j = 0; j < 6; j++)
            bad = fmax(bad, fabs((m.logits[j] - b2[j % 3]) - 2.5 * (ref[j] - b2[j % 3])));
        CHECK_MSG(bad < 1e-5, "scaled logits off by %g (train %d)", bad, train);
    }
    nn_model_destroy(&m);
}

/* ---- narrowing/masks against the dense model with zeroed weights ---- */
enum {
    NARROW_PREFIX,
    NARROW_ROLL,
    NARROW_ROWS,
    NARROW_EMASK,
    NARROW_EMASK_ROWS,
    NARROW_EMASK_DEAD
};

static void compare_dense(const char *name, int c, int h, int w, int k, int mode)
{
    nn_arch a;
    build(&a, name, c, h, w, k);
    int B = 5, feat = c * h * w;
    nn_model s, d; /* s: narrowed/masked, d: dense with the dead weights zeroed */
    nn_model_init(&s, &a, B);
    nn_model_init(&d, &a, B);
    nn_model_init_params(&s, &rng);
    uint8_t *keep[NN_MAX_LAYERS] = {0}, *mask = NULL, *masks[NN_MAX_TENSORS] = {0};
    int mt = -1;
    if (mode == NARROW_PREFIX) nn_model_set_width(&s, 0.5, 0);
    if (mode == NARROW_ROLL) nn_model_set_width(&s, 0.4, 7); /* wraps around */
    if (mode == NARROW_ROWS)
        for (int i = 0; i < a.n; i++) {
            if (!a.l[i].narrow) continue;
            keep[i] = malloc((size_t)a.l[i].oc);
            for (int j = 0; j < a.l[i].oc; j++)
                keep[i][j] = sim_rng_uniform(&rng) < 0.6;
            nn_model_set_rows(&s, i, keep[i]);
        }
    if (mode == NARROW_EMASK) {
        mt = a.l[0].wt; /* first layer's weight */
        size_t n = (size_t)a.layout.t[mt].rows * a.layout.t[mt].cols;
        mask = malloc(n);
        for (size_t j = 0; j < n; j++)
            mask[j] = sim_rng_uniform(&rng) < 0.3;
        nn_model_set_mask(&s, mt, mask);
    }
    /* masks that drop whole output rows, which forward and backward skip: 40% of the rows of
     * every conv/linear weight (half of each other row's entries), or all rows of the second
     * one; a dropped row's output is its bias */
    if (mode == NARROW_EMASK_ROWS || mode == NARROW_EMASK_DEAD) {
        int nth = 0;
        for (int i = 0; i < a.n; i++) {
            if (a.l[i].op != NN_CONV && a.l[i].op != NN_LINEAR) continue;
            const nn_tensor *t = &a.layout.t[a.l[i].wt];
            uint8_t *mk = masks[a.l[i].wt] = malloc((size_t)t->rows * t->cols);
            for (int r = 0; r < t->rows; r++) {
                int dead = mode == NARROW_EMASK_DEAD ? nth == 1 : sim_rng_uniform(&rng) < 0.4;
                for (int j = 0; j < t->cols; j++)
                    mk[(size_t)r * t->cols + j] =
                            !dead && (mode == NARROW_EMASK_DEAD || sim_rng_uniform(&rng) < 0.5);
            }
            nth++;
        }
        nn_model_set_masks(&s, (const uint8_t *const *)masks);
        for (int i = 0; i < a.n; i++) /* non-zero biases, so that dropped rows output something */
            if (a.l[i].bt >= 0)
                for (int r = 0; r < a.l[i].oc; r++)
                    s.params[a.layout.t[a.l[i].bt].off + r] = 0.3f * (float)(r % 3) - 0.2f;
    }
    size_t nf = a.layout.n_floats;
    for (size_t i = 0; i < nf; i++)
        d.params[i] = s.live[i] ? s.params[i] : 0.0f;
    for (int t = 0; t < a.layout.n; t++) /* running variance stays 1 even where dead */
        if (!a.layout.t[t].trainable && strstr(a.layout.t[t].name, "var"))
            for (int j = 0; j < a.layout.t[t].rows; j++)
                d.params[a.layout.t[t].off + j] = 1.0f;

    float *x = malloc(sizeof(float) * (size_t)B * feat);
    int32_t y[5];
    fill(x, (size_t)B * feat, 1);
    for (int b = 0; b < B; b++)
        y[b] = (int32_t)sim_rng_below(&rng, (uint64_t)k);
    nn_model_zero_grad(&s);
    nn_model_zero_grad(&d);
    float ls = nn_model_forward(&s, x, y, B, 1), ld = nn_model_forward(&d, x, y, B, 1);
    double dl = 0;
    for (int i = 0; i < B * k; i++)
        dl = fmax(dl, fabs((double)s.logits[i] - (double)d.logits[i]));
    CHECK_MSG(dl < 1e-4, "%s mode %d: logits differ by %g", name, mode, dl);
    CHECK_NEAR(ls, ld, 1e-5);
    nn_model_backward(&s);
    nn_model_backward(&d);
    /* the analytic step cost is exactly what forward + backward counted */
    nn_cost pc;
    nn_model_step_cost(&s, B, &pc);
    CHECK_MSG(pc.flops == s.cost.flops && pc.flops_masked == s.cost.flops_masked &&
                      fabs(pc.flops_masked_nnz - s.cost.flops_masked_nnz) <= 1e-9 * pc.flops,
              "%s mode %d: predicted %g FLOPs, counted %g", name, mode, pc.flops, s.cost.flops);
    CHECK_MSG(pc.bytes == s.cost.bytes && pc.bytes > 0,
              "%s mode %d: predicted %g bytes, counted %g", name, mode, pc.bytes, s.cost.bytes);
    double dg = 0, dead = 0, scale = 0;
    for (size_t i = 0; i < nf; i++) {
        scale = fmax(scale, fabs((double)d.grads[i]));
        if (s.live[i])
            dg = fmax(dg, fabs((double)s.grads[i] - (double)d.grads[i]));
        else
            dead = fmax(dead, fabs((double)s.grads[i]));
    }
    CHECK_MSG(dg < 1e-4 * fmax(1, scale), "%s mode %d: live gradients differ by %g", name, mode,
              dg);
    CHECK_MSG(dead == 0, "%s mode %d: dead parameters got gradient %g", name, mode, dead);
    if (mode >= NARROW_EMASK) {
        CHECK_MSG(s.cost.flops == d.cost.flops, "element masks count dense FLOPs");
        CHECK(s.cost.flops_masked > 0);
        double dens = s.cost.flops_masked_nnz / s.cost.flops_masked;
        if (mode == NARROW_EMASK)
            CHECK_MSG(dens > 0.2 && dens < 0.4, "masked density %.3f near 0.3", dens);
        if (mode == NARROW_EMASK_ROWS)
            CHECK_MSG(dens > 0.2 && dens < 0.4, "masked density %.3f near 0.6·0.5", dens);
        CHECK(d.cost.flops_masked == 0);
    } else {
        CHECK_MSG(s.cost.flops < 0.8 * d.cost.flops, "%s mode %d: %g FLOPs vs dense %g", name, mode,
                  s.cost.flops, d.cost.flops);
        CHECK(nn_model_memory_bytes(&s, B) < nn_model_memory_bytes(&d, B));
        CHECK(nn_model_live_count(&s) < nn_model_live_count(&d));
    }
    /* SGD leaves dead parameters, and their momentum, untouched */
    float *before = malloc(sizeof(float) * nf);
    memcpy(before, s.params, sizeof(float) * nf);
    nn_sgd opt = {0.1f, 0.9f, 0.01f, 0};
    nn_model_sgd_step(&s, &opt);
    int moved_dead = 0, moved_live = 0;
    for (size_t i = 0; i < nf; i++) {
        if (!s.live[i] && (s.params[i] != before[i] || s.mom[i] != 0)) moved_dead++;
        if (s.live[i] && s.params[i] != before[i]) moved_live++;
    }
    CHECK_MSG(moved_dead == 0, "%s mode %d: SGD moved %d dead parameters", name, mode, moved_dead);
    CHECK(moved_live > 0);
    for (int i = 0; i < NN_MAX_LAYERS; i++)
        free(keep[i]);
    for (int t = 0; t < NN_MAX_TENSORS; t++)
        free(masks[t]);
    free(mask);
    free(before);
    free(x);
    nn_model_destroy(&s);
    nn_model_destroy(&d);
}

static void test_sgd(void)
{
    nn_arch a;
    build(&a, "mlp:3-2", 3, 1, 1, 2);
    nn_model m;
    nn_model_init(&m, &a, 1);
    size_t nf = a.layout.n_floats;
    for (int t = 0; t < a.layout.n; t++)
        for (int i = 0; i < a.layout.t[t].rows * a.layout.t[t].cols; i++)
            m.params[a.layout.t[t].off + (size_t)i] = 0.5f;
    nn_sgd opt = {0.1f, 0.9f, 0.2f, 0};
    float v = 0, p = 0.5f;
    for (int step = 0; step < 2; step++) {
        for (int t = 0; t < a.layout.n; t++)
            for (int i = 0; i < a.layout.t[t].rows * a.layout.t[t].cols; i++)
                m.grads[a.layout.t[t].off + (size_t)i] = 1.0f;
        nn_model_sgd_step(&m, &opt);
        float g = 1.0f + 0.2f * p;
        v = 0.9f * v + g;
        p -= 0.1f * v;
    }
    const nn_tensor *w = &a.layout.t[0];
    CHECK_NEAR(m.params[w->off], p, 1e-6);
    CHECK_NEAR(m.params[w->off + 5], p, 1e-6);
    CHECK(m.params[w->off + 6] == 0.0f); /* alignment padding is never touched */
    /* clipping scales the whole gradient to the given norm */
    nn_sgd clip = {1.0f, 0, 0, 1.0f};
    for (size_t i = 0; i < nf; i++)
        m.params[i] = 0, m.grads[i] = 0, m.mom[i] = 0;
    for (int i = 0; i < 6; i++)
        m.grads[w->off + i] = 2.0f;
    m.grads[a.layout.t[1].off] = 2.0f;
    m.grads[a.layout.t[1].off + 1] = 2.0f;
    float norm = nn_model_sgd_step(&m, &clip);
    CHECK_NEAR(norm, sqrt(8 * 4.0), 1e-5);
    CHECK_NEAR(m.params[w->off], -2.0 / sqrt(32.0), 1e-6);
    nn_model_destroy(&m);
}

/* nn_model_train_step against zero_grad + forward + backward + sgd_step on a copy: a hidden layer
 * of 784 × 700 at a batch of at most ten takes its step inside backward (and a half-width one,
 * 350 rows in place, too). Same parameters and momentum to float rounding, and the fused layer's
 * gradients never written: the fused path really ran. */
static void test_fused_step(double width, float mu)
{
    nn_arch a;
    build(&a, "mlp:784-700-10", 784, 1, 1, 10);
    nn_model m, r;
    nn_model_init(&m, &a, 10);
    nn_model_init(&r, &a, 10);
    nn_model_init_params(&m, &rng);
    size_t nf = a.layout.n_floats;
    memcpy(r.params, m.params, sizeof(float) * nf);
    if (width < 1) nn_model_set_width(&m, width, 0), nn_model_set_width(&r, width, 0);
    float *x = malloc(sizeof(float) * 10 * 784);
    int32_t y[10];
    nn_sgd opt = {0.05f, mu, 1e-3f, 0};
    for (int step = 0; step < 4; step++) {
        int B = step % 2 ? 7 : 10;
        for (int i = 0; i < B * 784; i++)
            x[i] = (float)sim_rng_uniform(&rng);
        for (int b = 0; b < B; b++)
            y[b] = (int32_t)sim_rng_below(&rng, 10);
        nn_model_train_step(&m, &opt, x, y, B);
        nn_model_zero_grad(&r);
        nn_model_forward(&r, x, y, B, 1);
        nn_model_backward(&r);
        nn_model_sgd_step(&r, &opt);
    }
    double dp = 0, dm = 0;
    for (size_t j = 0; j < nf; j++) {
        dp = fmax(dp, fabs(m.params[j] - r.params[j]));
        dm = fmax(dm, fabs(m.mom[j] - r.mom[j]));
    }
    const nn_tensor *w1 = &a.layout.t[0];
    int written = 0;
    for (size_t j = 0; j < (size_t)w1->rows * w1->cols; j++)
        written += m.grads[w1->off + j] != 0;
    CHECK_MSG(dp < 1e-6 && dm < 1e-5, "fused step (width %g, mu %g): params %g, momentum %g apart",
              width, (double)mu, dp, dm);
    CHECK_MSG(written == 0, "%d gradients of the fused layer were written", written);
    CHECK(m.cost.samples == 34);
    free(x);
    nn_model_destroy(&m);
    nn_model_destroy(&r);
}

/* A narrower conv input unfolds in larger sample chunks: every count of kept channels feeding a
 * conv must fit the workspace (LeNet at 28×28, batch 64: 13 of conv1's 20 filters once needed
 * 520,000 floats of a 518,400 buffer; ASan catches any overflow here). Each narrowed forward must
 * still equal the dense model with those filters zeroed. */
static void test_narrow_chunks(void)
{
    nn_arch a;
    build(&a, "lenet5-caffe", 1, 28, 28, 10);
    enum { B = 64 };
    nn_model m, d;
    nn_model_init(&m, &a, B);
    nn_model_init(&d, &a, B);
    nn_model_init_params(&m, &rng);
    float *x = malloc(sizeof(float) * B * 784);
    int32_t y[B];
    fill(x, (size_t)B * 784, 1);
    for (int b = 0; b < B; b++)
        y[b] = b % 10;
    uint8_t keep[20];
    int bad = 0;
    for (int kept = 1; kept <= 20; kept++) {
        for (int j = 0; j < 20; j++)
            keep[j] = j < kept;
        const uint8_t *rows[NN_MAX_LAYERS] = {keep};
        nn_model_set_row_masks(&m, rows);
        nn_model_zero_grad(&m);
        float l = nn_model_forward(&m, x, y, B, 1);
        nn_model_backward(&m);
        for (size_t i = 0; i < a.layout.n_floats; i++)
            d.params[i] = m.live[i] ? m.params[i] : 0.0f;
        float ld = nn_model_forward(&d, x, y, B, 1);
        bad += fabsf(l - ld) > 1e-4f * fmaxf(1, fabsf(ld));
    }
    CHECK_MSG(bad == 0, "%d narrowed forwards differ from the zeroed dense model", bad);
    free(x);
    nn_model_destroy(&m);
    nn_model_destroy(&d);
}

static void test_memory(void)
{
    nn_arch a;
    build(&a, "mlp:4-8-3", 4, 1, 1, 3);
    nn_model m;
    nn_model_init(&m, &a, 2);
    /* params 67 × (param, grad, momentum) + activations 16+16+6 + 2 × widest gradient 16 */
    CHECK_EQ_I64(nn_model_memory_bytes(&m, 2), (67 * 3 + 38 + 32) * 4);
    nn_model_set_width(&m, 0.5, 0);
    CHECK_EQ_I64(nn_model_live_count(&m), 35);
    CHECK_EQ_I64(nn_model_memory_bytes(&m, 2), (35 * 3 + 22 + 16) * 4);
    nn_model_destroy(&m);

    build(&a, "lenet5-caffe", 1, 28, 28, 10);
    nn_model_init(&m, &a, 64);
    size_t full = nn_model_memory_bytes(&m, 64);
    CHECK(full > 430500 * 12); /* at least params, grads and momentum */
    nn_model_destroy(&m);
}

/* nn_model_init_fit_live: at width 1/4 of mlp:16-8-8-3, the first layer's live rows (all 16
 * inputs live) keep their draws, the next layers' live weights and biases (2 of 8 inputs live)
 * grow by √(8/2) = 2, reaching past the full model's bound 1/√8; dead weights stay as drawn. */
static void test_init_fit_live(void)
{
    nn_arch a;
    build(&a, "mlp:16-8-8-3", 16, 1, 1, 3);
    nn_model m;
    nn_model_init(&m, &a, 2);
    nn_model_init_params(&m, &rng);
    size_t nf = a.layout.n_floats;
    float *before = malloc(sizeof(float) * nf);
    memcpy(before, m.params, sizeof(float) * nf);
    nn_model_set_width(&m, 0.25, 0);
    nn_model_init_fit_live(&m);
    int bad = 0;
    float biggest = 0;
    for (int i = 0; i < a.layout.n; i++) {
        const nn_tensor *t = &a.layout.t[i];
        int first = t->name[0] == 'f' && t->name[2] == '1'; /* "fc1.w", "fc1.b" */
        for (size_t j = t->off; j < t->off + (size_t)t->rows * t->cols; j++) {
            float want = m.live[j] && !first ? 2 * before[j] : before[j];
            bad += m.params[j] != want;
            if (m.live[j] && !first) biggest = fmaxf(biggest, fabsf(m.params[j]));
        }
    }
    CHECK_MSG(bad == 0 && biggest > 1 / sqrtf(8) && biggest <= 1 / sqrtf(2),
              "fit to the live fan-in: %d values off, largest %g", bad, biggest);
    free(before);
    nn_model_destroy(&m);
}

/* nn_model_nest_width keeps the gradients: a full pass plus a nested half-width pass leave the
 * sum of the two passes' gradients, each as computed on its own. */
static void test_nest_width(void)
{
    enum { B = 4, D = 6, K = 3 };
    nn_arch a;
    build(&a, "mlp:6-8-8-3", D, 1, 1, K);
    nn_model m;
    nn_model_init(&m, &a, B);
    nn_model_init_params(&m, &rng);
    size_t nf = a.layout.n_floats, full_live = nn_model_live_count(&m);
    float x[B * D], q[B * K], *g_full = malloc(sizeof(float) * nf),
                              *g_half = malloc(sizeof(float) * nf);
    int32_t y[B] = {0, 1, 2, 1};
    for (int i = 0; i < B * D; i++)
        x[i] = (float)sim_rng_normal(&rng);
    nn_model_zero_grad(&m);
    nn_model_forward(&m, x, y, B, 1);
    nn_model_backward(&m);
    memcpy(g_full, m.grads, sizeof(float) * nf);
    nn_softmax(q, m.logits, B, K);
    nn_model_set_width(&m, 0.5, 0);
    nn_model_forward_soft(&m, x, q, B);
    nn_model_backward(&m);
    memcpy(g_half, m.grads, sizeof(float) * nf);
    nn_model_reset_narrowing(&m);

    nn_model_zero_grad(&m);
    nn_model_forward(&m, x, y, B, 1);
    nn_model_backward(&m);
    nn_model_nest_width(&m, 0.5);
    nn_model_forward_soft(&m, x, q, B);
    nn_model_backward(&m);
    nn_model_nest_width(&m, 1);
    int bad = 0, half_only = 0;
    for (size_t j = 0; j < nf; j++) {
        bad += fabsf(m.grads[j] - (g_full[j] + g_half[j])) > 1e-6f;
        half_only += g_half[j] != 0;
    }
    CHECK_MSG(bad == 0 && half_only > 0, "%d gradients are not full + nested", bad);
    CHECK(nn_model_live_count(&m) == full_live); /* back at the full width */
    free(g_full), free(g_half);
    nn_model_destroy(&m);
}

/* Two Gaussian blobs in 10-D: a 2-layer MLP must separate them. */
static void test_learns(void)
{
    enum { N = 800, D = 10 };
    float *x = malloc(sizeof(float) * N * D);
    int32_t *y = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) {
        y[i] = i % 2;
        for (int j = 0; j < D; j++)
            x[i * D + j] = (float)(sim_rng_normal(&rng) + (y[i] ? 1.5 : -1.5) * (j < 3));
    }
    nn_arch a;
    build(&a, "mlp:10-32-2", D, 1, 1, 2);
    nn_model m;
    nn_model_init(&m, &a, 16);
    nn_model_init_params(&m, &rng);
    nn_sgd opt = {0.05f, 0.9f, 0, 0};
    for (int epoch = 0; epoch < 3; epoch++)
        for (int s = 0; s < 640; s += 16)
            nn_model_train_step(&m, &opt, x + s * D, y + s, 16);
    double loss;
    int correct = nn_model_evaluate(&m, x + 640 * D, y + 640, 160, &loss);
    CHECK_MSG(correct >= 152, "held-out accuracy %d/160 (Bayes error is 0.5%%)", correct);
    CHECK(m.cost.samples == 3 * 640.0);
    CHECK(m.cost.flops > 0);
    free(x);
    free(y);
    nn_model_destroy(&m);
}

/* The activation bytes of a cnn2 step, counted by hand from its shapes (28x28 input, 5x5 convs
 * padded to keep the size): conv1 unfolds 25 x 784 per sample and writes 32 x 784; pool1 32 x 196;
 * its ReLU as many; conv2 unfolds 32 x 25 x 196 and writes 64 x 196; pool2, ReLU and flatten
 * 64 x 49 each; fc1 and its ReLU 512; the head 10. Backward writes each input gradient but the
 * data's: the head's 512, ReLU's 512 (in place), fc1's 3136, flatten's and ReLU2's 3136 each,
 * pool2's 64 x 196, conv2's 32 x 196 and its unfolded 156800, ReLU1's 6272, pool1's 32 x 784.
 * At width 1/2 every hidden layer halves: all but conv1's unfolded input and the head's 10. */
static void test_act_bytes(void)
{
    nn_arch a;
    sim_err err = {0};
    CHECK(nn_arch_build(&a, "cnn2", 1, 28, 28, 10, &err) == SIM_OK);
    nn_model m;
    nn_model_init(&m, &a, 2);
    nn_cost c;
    double fwd = 19600 + 25088 + 6272 + 6272 + 156800 + 12544 + 3 * 3136 + 2 * 512 + 10,
           bwd = 512 + 512 + 3 * 3136 + 12544 + 6272 + 156800 + 6272 + 25088;
    nn_model_step_cost(&m, 2, &c);
    CHECK_MSG(c.bytes == 4 * 2 * (fwd + bwd), "cnn2: %g bytes a step, by hand %g", c.bytes,
              4 * 2 * (fwd + bwd));
    nn_model_forward_cost(&m, 2, &c);
    CHECK(c.bytes == 4 * 2 * fwd);
    nn_model_set_width(&m, 0.5, 0);
    nn_model_step_cost(&m, 2, &c);
    double half = (fwd - 19600 - 10) / 2 + 19600 + 10 + bwd / 2;
    CHECK_MSG(c.bytes == 4 * 2 * half, "cnn2 at 1/2: %g bytes a step, by hand %g", c.bytes,
              4 * 2 * half);
    nn_model_destroy(&m);
}

int main(void)
{
    sim_rng_seed(&rng, 7, SIM_RNG_TEST, 1);
    test_param_counts();
    test_act_bytes();
    test_nest_width();
    test_init_fit_live();
    gradcheck_model("mlpbn:12-10-8-5", 12, 1, 1, 5, 1, 1);
    gradcheck_model("mlpbn:12-10-8-5", 12, 1, 1, 5, 0.5, 1);
    gradcheck_model("mlpbn:12-10-8-5", 12, 1, 1, 5, 0.5, 2);
    gradcheck_model("cnn2", 3, 8, 8, 4, 1, 1);
    gradcheck_model("cnn2", 3, 8, 8, 4, 0.3, 1);
    gradcheck_model("cnn2", 3, 8, 8, 4, 0.3, 1 / 0.3f);
    gradcheck_model("lenet5-caffe", 1, 16, 16, 10, 1, 1);
    test_narrow_scale();
    static const struct {
        const char *name;
        int c, h, w, k;
    } nets[] = {{"mlpbn:20-16-12-5", 20, 1, 1, 5},
                {"cnn2", 1, 12, 12, 10},
                {"cnn2", 3, 12, 12, 6},
                {"lenet5-caffe", 1, 16, 16, 10},
                {"pa3dfl-cnn", 1, 12, 12, 10}};
    for (size_t i = 0; i < SIM_ARRAY_LEN(nets); i++)
        for (int mode = NARROW_PREFIX; mode <= NARROW_EMASK_DEAD; mode++)
            compare_dense(nets[i].name, nets[i].c, nets[i].h, nets[i].w, nets[i].k, mode);
    test_sgd();
    test_fused_step(1, 0.9f);
    test_fused_step(1, 0);
    test_fused_step(0.5, 0.9f);
    test_narrow_chunks();
    test_memory();
    test_learns();
    return CHECK_DONE();
}
