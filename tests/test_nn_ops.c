/* tests/test_nn_ops.c -- every kernel against its naive reference and a finite-difference check,
 * the accumulation contract of backward, and a check that the gradient checker catches a bug. */
#include "nn/ops.h"
#include "sim/rng.h"
#include "tests/check.h"
#include "tests/gradcheck.h"

#include <stdlib.h>
#include <string.h>

static sim_rng rng;

static float *rnd(size_t n, double scale)
{
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((2 * sim_rng_uniform(&rng) - 1) * scale);
    return p;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

/* ---- linear ---- */
typedef struct {
    float *x, *w, *b, *y, *r;
    int B, I, O, ldw;
} lin_ctx;

static double lin_loss(void *p)
{
    lin_ctx *c = p;
    nn_linear_forward(c->y, c->x, c->w, c->ldw, c->b, c->B, c->I, c->O);
    return dot(c->y, c->r, (size_t)c->B * c->O);
}

static void test_linear(int B, int I, int O, int pad)
{
    int ldw = I + pad;
    lin_ctx c = {rnd((size_t)B * I, 1),
                 rnd((size_t)O * ldw, 0.5),
                 rnd((size_t)O, 0.5),
                 rnd((size_t)B * O, 1),
                 rnd((size_t)B * O, 1),
                 B,
                 I,
                 O,
                 ldw};
    float *y2 = rnd((size_t)B * O, 1);
    nn_linear_forward(c.y, c.x, c.w, ldw, c.b, B, I, O);
    nn_linear_forward_ref(y2, c.x, c.w, ldw, c.b, B, I, O);
    CHECK_MSG(max_diff(c.y, y2, (size_t)B * O) < 1e-4, "linear forward vs ref B=%d I=%d O=%d", B, I,
              O);
    float *dx = rnd((size_t)B * I, 1), *dx2 = rnd((size_t)B * I, 1);
    float *dw = calloc((size_t)O * ldw, 4), *dw2 = calloc((size_t)O * ldw, 4);
    float *db = calloc((size_t)O, 4), *db2 = calloc((size_t)O, 4);
    nn_linear_backward(dx, dw, ldw, db, c.r, c.x, c.w, ldw, B, I, O);
    nn_linear_backward_ref(dx2, dw2, ldw, db2, c.r, c.x, c.w, ldw, B, I, O);
    CHECK_MSG(max_diff(dx, dx2, (size_t)B * I) < 1e-4, "linear dx vs ref");
    CHECK_MSG(max_diff(dw, dw2, (size_t)O * ldw) < 1e-4, "linear dw vs ref");
    CHECK_MSG(max_diff(db, db2, (size_t)O) < 1e-4, "linear db vs ref");
    /* The loss is linear in x, w and b (as in the conv checks below): central differences are
     * exact at any step, and a large one keeps the float rounding of sums over a thousand inputs
     * small beside the difference it measures. */
    CHECK(gc_check("linear.x", c.x, dx, (size_t)B * I, lin_loss, &c, 40, 0.05, 1e-2, 1e-4, 1) == 0);
    CHECK(gc_check("linear.w", c.w, dw, (size_t)O * ldw, lin_loss, &c, 40, 0.05, 1e-2, 1e-4, 2) ==
          0);
    CHECK(gc_check("linear.b", c.b, db, (size_t)O, lin_loss, &c, 40, 0.05, 1e-2, 1e-4, 3) == 0);

    /* backward accumulates into dw/db: a second call doubles them */
    float *dw3 = malloc(sizeof(float) * (size_t)O * ldw);
    memcpy(dw3, dw, sizeof(float) * (size_t)O * ldw);
    nn_linear_backward(NULL, dw, ldw, db, c.r, c.x, c.w, ldw, B, I, O);
    for (size_t i = 0; i < (size_t)O * ldw; i++)
        dw3[i] *= 2;
    CHECK_MSG(max_diff(dw, dw3, (size_t)O * ldw) < 1e-4, "linear backward accumulates");

    /* the checker catches a wrong gradient: flip the sign of db */
    printf("  (the next gradcheck failures are expected: a sign-flipped gradient)\n");
    for (int o = 0; o < O; o++)
        db2[o] = -db2[o];
    CHECK_MSG(gc_check("linear.b(broken)", c.b, db2, (size_t)O, lin_loss, &c, 40, 0.05, 1e-2, 1e-4,
                       3) > 0,
              "gradcheck reports a sign-flipped bias gradient");
    CHECK_MSG(gc_last.worst_ratio > 5,
              "a sign-flipped bias misses by only %.3g times the allowance", gc_last.worst_ratio);
    free(c.x), free(c.w), free(c.b), free(c.y), free(c.r), free(y2), free(dx), free(dx2);
    free(dw), free(dw2), free(db), free(db2), free(dw3);
}

/* nn_linear_step against the double reference: the gradient by nn_linear_backward_ref, then
 * nn_model_sgd_step's rule; the padding columns past I and, without momentum, v stay as they
 * were. lr 0.1 makes a missed or doubled row ~0.1·|g| off, far beyond the 1e-5 allowed. */
static void test_linear_step(int B, int I, int O, int pad, float mu, float wd)
{
    int ldw = I + pad;
    size_t nw = (size_t)O * ldw;
    float *x = rnd((size_t)B * I, 1), *dy = rnd((size_t)B * O, 1), *w = rnd(nw, 0.5);
    float *v = rnd(nw, 0.5), *g = calloc(nw, 4), *w2 = malloc(nw * 4), *v2 = malloc(nw * 4);
    nn_linear_backward_ref(NULL, g, ldw, NULL, dy, x, w, ldw, B, I, O);
    for (size_t j = 0; j < nw; j++) {
        int in = (int)(j % (size_t)ldw) < I;
        float d = g[j] + wd * w[j];
        v2[j] = in && mu != 0 ? mu * v[j] + d : v[j];
        w2[j] = !in ? w[j] : w[j] - 0.1f * (mu != 0 ? v2[j] : d);
    }
    nn_linear_step(w, v, ldw, dy, x, B, I, O, 0.1f, mu, wd);
    CHECK_MSG(max_diff(w, w2, nw) < 1e-5 && max_diff(v, v2, nw) < 1e-5,
              "linear step vs ref B=%d I=%d O=%d mu=%g wd=%g: w %g v %g", B, I, O, (double)mu,
              (double)wd, max_diff(w, w2, nw), max_diff(v, v2, nw));
    free(x), free(dy), free(w), free(v), free(g), free(w2), free(v2);
}

/* ---- conv ---- */
typedef struct {
    float *x, *w, *b, *y, *r, *kept, *col;
    int B, C, H, W, O, k, s, p;
} conv_ctx;

static double conv_loss(void *q)
{
    conv_ctx *c = q;
    nn_conv_forward(c->y, c->kept, c->col, c->x, c->w, c->C * c->k * c->k, c->b, c->B, c->C, c->H,
                    c->W, c->O, c->k, c->s, c->p);
    int OH = nn_conv_out(c->H, c->k, c->s, c->p), OW = nn_conv_out(c->W, c->k, c->s, c->p);
    return dot(c->y, c->r, (size_t)c->O * c->B * OH * OW);
}

/* keep = 1: the forward keeps what backward needs (unfolding or transformed input) */
static void test_conv(int B, int C, int H, int W, int O, int k, int s, int p, int keep)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p), K = C * k * k;
    size_t nx = (size_t)C * B * H * W, ny = (size_t)O * B * OH * OW, nw = (size_t)O * K;
    /* buffers of exactly the sizes the kernels ask for, so ASan sees any overrun */
    size_t col_floats = nn_conv_scratch(B, C, H, W, O, k, s, p);
    conv_ctx c = {rnd(nx, 1),
                  rnd(nw, 0.3),
                  rnd((size_t)O, 0.3),
                  rnd(ny, 1),
                  rnd(ny, 1),
                  keep ? rnd(nn_conv_kept(B, C, H, W, k, s, p), 1) : NULL,
                  rnd(col_floats, 1),
                  B,
                  C,
                  H,
                  W,
                  O,
                  k,
                  s,
                  p};
    float *scratch = c.col;
    float *y2 = rnd(ny, 1);
    conv_loss(&c);
    nn_conv_forward_ref(y2, c.x, c.w, K, c.b, B, C, H, W, O, k, s, p);
    CHECK_MSG(max_diff(c.y, y2, ny) < 1e-4, "conv forward vs ref B%d C%d %dx%d O%d k%d s%d p%d", B,
              C, H, W, O, k, s, p);
    float *dx = rnd(nx, 1), *dx2 = rnd(nx, 1), *dw = calloc(nw, 4), *dw2 = calloc(nw, 4);
    float *db = calloc((size_t)O, 4), *db2 = calloc((size_t)O, 4);
    nn_conv_backward(dx, dw, K, db, c.kept, scratch, c.r, c.x, c.w, K, B, C, H, W, O, k, s, p);
    nn_conv_backward_ref(dx2, dw2, K, db2, c.r, c.x, c.w, K, B, C, H, W, O, k, s, p);
    CHECK_MSG(max_diff(dx, dx2, nx) < 1e-4, "conv dx vs ref");
    CHECK_MSG(max_diff(dw, dw2, nw) < 1e-3, "conv dw vs ref");
    CHECK_MSG(max_diff(db, db2, (size_t)O) < 1e-3, "conv db vs ref");
    /* The loss is linear in x, w and b, so central differences are exact at any step: a large
     * one keeps the forward's float rounding (larger under Winograd's transforms) small beside
     * the difference it measures. */
    CHECK(gc_check("conv.x", c.x, dx, nx, conv_loss, &c, 30, 0.05, 1e-2, 1e-3, 4) == 0);
    CHECK(gc_check("conv.w", c.w, dw, nw, conv_loss, &c, 30, 0.05, 1e-2, 1e-3, 5) == 0);
    CHECK(gc_check("conv.b", c.b, db, (size_t)O, conv_loss, &c, 30, 0.05, 1e-2, 1e-3, 6) == 0);
    free(c.x), free(c.w), free(c.b), free(c.y), free(c.r), free(c.kept), free(c.col), free(y2);
    free(dx), free(dx2), free(dw), free(dw2), free(db), free(db2);
}

/* ---- max-pool, relu, sigmoid, batch norm, softmax cross-entropy ---- */
typedef struct {
    float *x, *y, *r, *g, *b, *rm, *rv, *xh, *is;
    int32_t *lab;
    float *q; /* soft targets (op 4) */
    int n, P, H, W, B, C, op;
} misc_ctx;

static double misc_loss(void *q)
{
    misc_ctx *c = q;
    switch (c->op) {
    case 0:
        nn_maxpool2_forward(c->y, c->x, c->P, c->H, c->W);
        return dot(c->y, c->r, (size_t)c->P * (c->H / 2) * (c->W / 2));
    case 1:
        nn_relu_forward(c->y, c->x, c->n);
        return dot(c->y, c->r, (size_t)c->n);
    case 2:
        nn_bn_forward(c->y, c->xh, c->is, c->x, c->g, c->b, c->rm, c->rv, c->B, c->C, 1, 0.1f,
                      1e-5f);
        return dot(c->y, c->r, (size_t)c->B * c->C);
    case 3:
        return nn_softmax_xent(NULL, c->x, c->lab, c->B, c->C);
    case 5:
        nn_sigmoid_forward(c->y, c->x, c->n);
        return dot(c->y, c->r, (size_t)c->n);
    default:
        return nn_softmax_xent_soft(NULL, c->x, c->q, c->B, c->C);
    }
}

static void test_misc(void)
{
    misc_ctx c = {0};
    /* max-pool on odd sizes (floor) */
    c.P = 3, c.H = 7, c.W = 6, c.op = 0;
    size_t nx = (size_t)c.P * c.H * c.W, ny = (size_t)c.P * 3 * 3;
    c.x = rnd(nx, 1), c.y = rnd(ny, 1), c.r = rnd(ny, 1);
    float *dx = rnd(nx, 1);
    /* distinct values 0.01 apart, shuffled, so ±h never changes a window's argmax */
    uint32_t *perm = malloc(sizeof(uint32_t) * nx);
    for (size_t i = 0; i < nx; i++)
        perm[i] = (uint32_t)i;
    sim_rng_shuffle_u32(&rng, perm, nx);
    for (size_t i = 0; i < nx; i++)
        c.x[i] = 0.01f * (float)perm[i] - 0.5f;
    free(perm);
    misc_loss(&c);
    nn_maxpool2_backward(dx, c.r, c.x, c.y, c.P, c.H, c.W);
    CHECK(gc_check("maxpool.x", c.x, dx, nx, misc_loss, &c, 200, 1e-3, 1e-2, 1e-4, 7) == 0);
    int ok = 1;
    for (int q = 0; q < c.P; q++)
        for (int oy = 0; oy < 3; oy++)
            for (int ox = 0; ox < 3; ox++) {
                const float *xp = c.x + (size_t)q * c.H * c.W;
                float m = xp[2 * oy * c.W + 2 * ox];
                for (int d = 1; d < 4; d++)
                    m = fmaxf(m, xp[(2 * oy + d / 2) * c.W + 2 * ox + d % 2]);
                ok &= c.y[(q * 3 + oy) * 3 + ox] == m;
            }
    CHECK_MSG(ok, "maxpool picks the window maximum");
    /* ties: the gradient goes to the first maximal element in scan order, exactly once */
    float tx[8] = {1, 3, 3, 0, 2, 3, 3, 3}, ty[2], tdy[2] = {1, 10}, tdx[8];
    nn_maxpool2_forward(ty, tx, 1, 2, 4);
    nn_maxpool2_backward(tdx, tdy, tx, ty, 1, 2, 4);
    CHECK(ty[0] == 3 && ty[1] == 3);
    CHECK(tdx[1] == 1 && tdx[0] + tdx[4] + tdx[5] == 0);
    CHECK(tdx[2] == 10 && tdx[3] + tdx[6] + tdx[7] == 0);
    free(c.x), free(c.y), free(c.r), free(dx);
    /* rows of 8 or more windows take the vector path (with its overlapping last vector): against
     * the scan-order rule, on values from {0..3} so most windows hold ties */
    int sizes[][2] = {{16, 16}, {28, 28}, {14, 22}, {5, 39}, {6, 32}, {4, 17}};
    int vec_ok = 1;
    for (int t = 0; t < 6; t++) {
        int H = sizes[t][0], W = sizes[t][1], P = 3, OH = H / 2, OW = W / 2;
        size_t n = (size_t)P * H * W, no = (size_t)P * OH * OW;
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * no), *g = rnd(no, 1),
              *d = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++)
            x[i] = (float)sim_rng_below(&rng, 4);
        for (size_t i = 0; i < n; i++)
            d[i] = NAN; /* every cell must be written */
        nn_maxpool2_forward(y, x, P, H, W);
        nn_maxpool2_backward(d, g, x, y, P, H, W);
        for (int q = 0; q < P; q++)
            for (int r = 0; r < H; r++)
                for (int col = 0; col < W; col++) {
                    float want = 0;
                    if (r / 2 < OH && col / 2 < OW) {
                        size_t o = ((size_t)q * OH + r / 2) * OW + col / 2;
                        const float *w0 = x + ((size_t)q * H + r / 2 * 2) * W + col / 2 * 2;
                        int at = nn_maxpool2_argmax(w0, y[o], W);
                        if (at == (r % 2) * W + col % 2) want = g[o];
                    }
                    vec_ok &= d[((size_t)q * H + r) * W + col] == want;
                }
        free(x), free(y), free(g), free(d);
    }
    CHECK_MSG(vec_ok, "max-pool backward on rows of 8 to 19 windows, with ties, matches the rule");

    /* relu, inputs kept away from the kink */
    c.op = 1, c.n = 50;
    c.x = rnd(50, 1), c.y = rnd(50, 1), c.r = rnd(50, 1), dx = rnd(50, 1);
    for (int i = 0; i < 50; i++)
        c.x[i] += c.x[i] > 0 ? 0.05f : -0.05f;
    misc_loss(&c);
    nn_relu_backward(dx, c.r, c.y, 50);
    CHECK(gc_check("relu.x", c.x, dx, 50, misc_loss, &c, 50, 1e-3, 1e-2, 1e-4, 8) == 0);
    free(c.x), free(c.y), free(c.r), free(dx);

    /* sigmoid, over its curved middle and its flat tails; backward in place (dx aliasing dy, as
     * pFedGate's gate calls it) */
    c.op = 5, c.n = 50;
    c.x = rnd(50, 6), c.y = rnd(50, 1), c.r = rnd(50, 1), dx = rnd(50, 1);
    misc_loss(&c);
    CHECK_NEAR(c.y[7], 1 / (1 + exp(-(double)c.x[7])), 1e-7);
    memcpy(dx, c.r, sizeof(float) * 50);
    nn_sigmoid_backward(dx, dx, c.y, 50);
    CHECK(gc_check("sigmoid.x", c.x, dx, 50, misc_loss, &c, 50, 1e-3, 1e-2, 1e-4, 14) == 0);
    free(c.x), free(c.y), free(c.r), free(dx);

    /* batch norm, training mode */
    c.op = 2, c.B = 6, c.C = 4;
    size_t n = (size_t)c.B * c.C;
    c.x = rnd(n, 2), c.y = rnd(n, 1), c.r = rnd(n, 1), c.g = rnd(4, 1), c.b = rnd(4, 1);
    c.rm = calloc(4, 4), c.rv = calloc(4, 4), c.xh = rnd(n, 1), c.is = rnd(4, 1), dx = rnd(n, 1);
    float *dg = calloc(4, 4), *dbb = calloc(4, 4);
    misc_loss(&c);
    nn_bn_backward(dx, dg, dbb, c.r, c.xh, c.is, c.g, c.B, c.C);
    CHECK(gc_check("bn.x", c.x, dx, n, misc_loss, &c, 24, 1e-3, 1e-2, 1e-4, 9) == 0);
    CHECK(gc_check("bn.gamma", c.g, dg, 4, misc_loss, &c, 4, 1e-3, 1e-2, 1e-4, 10) == 0);
    CHECK(gc_check("bn.beta", c.b, dbb, 4, misc_loss, &c, 4, 1e-3, 1e-2, 1e-4, 11) == 0);
    /* eval mode uses the running statistics */
    for (int j = 0; j < 4; j++)
        c.rm[j] = 0.5f, c.rv[j] = 4.0f;
    nn_bn_forward(c.y, c.xh, c.is, c.x, c.g, c.b, c.rm, c.rv, c.B, c.C, 0, 0.1f, 1e-5f);
    CHECK_NEAR(c.y[5], c.g[1] * (c.x[5] - 0.5f) / sqrtf(4.0f + 1e-5f) + c.b[1], 1e-5);
    free(c.x), free(c.y), free(c.r), free(c.g), free(c.b), free(c.rm), free(c.rv), free(c.xh);
    free(c.is), free(dx), free(dg), free(dbb);

    /* softmax cross-entropy */
    c.op = 3, c.B = 5, c.C = 7;
    n = (size_t)c.B * c.C;
    c.x = rnd(n, 3), c.lab = malloc(4 * 5), dx = rnd(n, 1);
    for (int i = 0; i < 5; i++)
        c.lab[i] = (int32_t)sim_rng_below(&rng, 7);
    nn_softmax_xent(dx, c.x, c.lab, c.B, c.C);
    /* The loss comes back as a float near 2: at a step of 1e-3 its rounding alone moves the
     * quotient by 1e-4; at 1e-2 rounding and truncation (h^2 f'''/6) both stay near 1e-5. */
    CHECK(gc_check("xent.logits", c.x, dx, n, misc_loss, &c, 35, 1e-2, 1e-2, 1e-4, 12) == 0);
    float z[3] = {0, 0, 0};
    int32_t l0 = 1;
    CHECK_NEAR(nn_softmax_xent(NULL, z, &l0, 1, 3), log(3.0), 1e-6);
    /* each sample's loss squared, summed (Oort's utility): ln 2 for logits (0, 0) labelled 0,
     * ln 4 for (ln 3, 0) labelled 1 */
    float z2[4] = {0, 0, (float)log(3.0), 0};
    int32_t y2[2] = {0, 1};
    double sq;
    nn_softmax_xent_sq(NULL, z2, y2, 2, 2, &sq);
    CHECK_NEAR(sq, log(2.0) * log(2.0) + log(4.0) * log(4.0), 1e-6);

    /* against soft targets (self-distillation): one-hot targets give the hard loss and gradient,
     * and the gradient of a softened target passes the gradient check */
    float *dh = rnd(n, 1), *ds = rnd(n, 1);
    c.q = calloc(n, sizeof(float));
    for (int i = 0; i < c.B; i++)
        c.q[(size_t)i * c.C + c.lab[i]] = 1;
    float lh = nn_softmax_xent(dh, c.x, c.lab, c.B, c.C);
    CHECK_NEAR(nn_softmax_xent_soft(ds, c.x, c.q, c.B, c.C), lh, 1e-6);
    CHECK(max_diff(dh, ds, n) < 1e-7);
    float *logits2 = rnd(n, 2);
    nn_softmax(c.q, logits2, c.B, c.C); /* rows sum to one */
    double row = 0;
    for (int j = 0; j < c.C; j++)
        row += c.q[j];
    CHECK_NEAR(row, 1, 1e-6);
    c.op = 4;
    nn_softmax_xent_soft(ds, c.x, c.q, c.B, c.C);
    CHECK(gc_check("xent_soft.logits", c.x, ds, n, misc_loss, &c, 35, 1e-2, 1e-2, 1e-4, 13) == 0);
    free(c.x), free(c.lab), free(dx), free(dh), free(ds), free(c.q), free(logits2);
}

/* nn_dot and nn_sumsq: the plain double sum to rounding at every length around the 8 lanes
 * (the tail and the lanes both counted), and exactly the lanes' order: Σ tail, then lane 0..7. */
static void test_reductions(void)
{
    for (size_t n = 0; n <= 35; n++) {
        float *a = rnd(n, 1), *b = rnd(n, 3);
        double want = dot(a, b, n), got = nn_dot(a, b, n), sq = nn_sumsq(a, n);
        CHECK_MSG(fabs(got - want) <= 1e-12 * (1 + fabs(want)), "nn_dot n=%zu: %.17g vs %.17g", n,
                  got, want);
        CHECK_MSG(fabs(sq - dot(a, a, n)) <= 1e-12 * (1 + sq), "nn_sumsq n=%zu", n);
        double lane[8] = {0}, order = 0;
        size_t full = n / 8 * 8;
        for (size_t j = 0; j < full; j++)
            lane[j % 8] += (double)a[j] * (double)b[j];
        for (size_t j = full; j < n; j++)
            order += (double)a[j] * (double)b[j];
        for (int k = 0; k < 8; k++)
            order += lane[k];
        CHECK_MSG(got == order, "nn_dot n=%zu: the fixed order's bits", n);
        free(a), free(b);
    }
}

int main(void)
{
    sim_rng_seed(&rng, 42, SIM_RNG_TEST, 0);
    test_reductions();
    test_linear(3, 5, 4, 0);
    test_linear(1, 7, 3, 2);
    test_linear(17, 33, 9, 5);
    /* big weights and a small batch: the streaming kernels (forward up to B = 10, input gradient
     * up to 20), with batch, row and column remainders of every tile size */
    test_linear(7, 1203, 263, 3);
    test_linear(13, 1203, 263, 0);
    test_linear(10, 2051, 129, 1);
    /* the fused weight step: every batch size it takes, row and column remainders, padding */
    for (int B = 1; B <= 10; B++)
        test_linear_step(B, 37 + 16 * B, 7 + (B % 4), B % 3, B % 2 ? 0.9f : 0.0f, 0.01f * (B % 3));
    test_linear_step(10, 3136, 64, 0, 0.9f, 0.0f);
    /* im2col: few input channels, stride 2, an even kernel */
    test_conv(2, 1, 8, 8, 3, 5, 1, 2, 0);
    test_conv(2, 1, 8, 8, 3, 5, 1, 2, 1);
    test_conv(3, 2, 7, 9, 4, 3, 1, 0, 0);
    test_conv(1, 3, 9, 9, 2, 3, 2, 1, 0);
    test_conv(1, 3, 9, 9, 2, 3, 2, 1, 1);
    test_conv(2, 3, 9, 8, 4, 4, 1, 1, 0);
    test_conv(2, 3, 9, 8, 4, 4, 1, 1, 1);
    test_conv(3, 2, 28, 28, 4, 5, 1, 2, 0); /* large enough to be unfolded one sample at a time */
    /* Winograd F(4×4, 5×5) and F(4×4, 3×3): partial edge tiles, p = 0 (patches that reach
     * past the image on one side only), p = k − 1, several chunks of samples, kept or not */
    test_conv(2, 8, 8, 8, 3, 5, 1, 2, 0);
    test_conv(2, 8, 8, 8, 3, 5, 1, 2, 1);
    test_conv(3, 9, 7, 9, 4, 3, 1, 0, 0);
    test_conv(3, 9, 7, 9, 4, 3, 1, 0, 1);
    test_conv(2, 8, 12, 11, 5, 5, 1, 0, 1);
    test_conv(2, 8, 6, 7, 3, 3, 1, 2, 0);
    test_conv(2, 8, 7, 6, 3, 5, 1, 4, 1);
    test_conv(2, 2, 9, 10, 4, 5, 1, 2, 0); /* 2 and 3 input channels: Winograd too */
    test_conv(2, 3, 11, 9, 5, 3, 1, 1, 1);
    test_conv(2, 8, 5, 5, 3, 5, 1, 0, 0); /* one output: a single, mostly empty 4×4 tile */
    test_conv(2, 8, 5, 6, 3, 5, 1, 0, 1);
    test_conv(12, 8, 14, 14, 3, 5, 1, 2, 0);
    test_conv(12, 8, 14, 14, 3, 5, 1, 2, 1);
    test_conv(3, 32, 28, 28, 4, 5, 1, 2, 0);
    test_misc();
    return CHECK_DONE();
}
