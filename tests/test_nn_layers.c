/* tests/test_nn_layers.c -- the double-precision layers (nn/layers.h): the gradients of
 * nn_linear64_backward and nn_relu64_backward pass a finite-difference check, sample by sample
 * over a batch; backward writes the input gradient and accumulates the others; a NULL gradient is
 * skipped; and the forward's sums are exactly the documented ones (bias first, inputs in order),
 * which the algorithms built on them rely on for their bits. */
#include "nn/layers.h"
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

/* loss = Σ r ⊙ relu(linear(x)) (relu off: Σ r ⊙ linear(x)); x is kept in float (xf) so the
 * checker can perturb it, and widened to double for each evaluation */
typedef struct {
    float *xf, *w, *b;
    double *x, *y, *h, *r;
    int B, I, O, relu;
} lctx;

static double loss(void *p)
{
    lctx *c = p;
    size_t ny = (size_t)c->B * c->O;
    for (size_t j = 0; j < (size_t)c->B * c->I; j++)
        c->x[j] = c->xf[j];
    nn_linear64_forward(c->y, c->x, c->w, c->b, c->B, c->I, c->O);
    if (c->relu) nn_relu64_forward(c->h, c->y, (long)ny);
    double s = 0;
    for (size_t j = 0; j < ny; j++)
        s += c->r[j] * (c->relu ? c->h[j] : c->y[j]);
    return s;
}

/* The output stays away from ReLU's kink: a step of 1e-3 never crosses it. */
static int away_from_kink(const lctx *c)
{
    for (size_t j = 0; j < (size_t)c->B * c->O; j++)
        if (fabs(c->y[j]) < 0.02) return 0;
    return 1;
}

static float *narrow(const double *d, size_t n)
{
    float *f = malloc(sizeof(float) * n);
    for (size_t j = 0; j < n; j++)
        f[j] = (float)d[j];
    return f;
}

static void test_linear64(int B, int I, int O, int relu, uint64_t seed)
{
    size_t nx = (size_t)B * I, nw = (size_t)O * I, ny = (size_t)B * O;
    lctx c = {rnd(nx, 1),
              rnd(nw, 0.5),
              rnd((size_t)O, 0.5),
              malloc(sizeof(double) * nx),
              malloc(sizeof(double) * ny),
              malloc(sizeof(double) * ny),
              malloc(sizeof(double) * ny),
              B,
              I,
              O,
              relu};
    for (size_t j = 0; j < ny; j++)
        c.r[j] = 2 * sim_rng_uniform(&rng) - 1;
    while (loss(&c), relu && !away_from_kink(&c)) /* redraw the bias until it is */
        for (int o = 0; o < O; o++)
            c.b[o] = (float)(2 * sim_rng_uniform(&rng) - 1);
    /* the forward's sums, exactly */
    int exact = 1;
    for (int n = 0; n < B; n++)
        for (int o = 0; o < O; o++) {
            double s = c.b[o];
            for (int i = 0; i < I; i++)
                s += (double)c.w[(size_t)o * I + i] * c.x[(size_t)n * I + i];
            exact &= c.y[(size_t)n * O + o] == s;
        }
    CHECK_MSG(exact, "linear64 forward (%d,%d,%d): bias, then the inputs in order", B, I, O);

    /* backward, into gradients that already hold 1: dw and db accumulate, dx is written */
    double *dy = malloc(sizeof(double) * ny), *dx = malloc(sizeof(double) * nx),
           *dw = malloc(sizeof(double) * nw), *db = malloc(sizeof(double) * (size_t)O);
    if (relu)
        nn_relu64_backward(dy, c.r, c.h, (long)ny);
    else
        memcpy(dy, c.r, sizeof(double) * ny);
    for (size_t j = 0; j < nx; j++)
        dx[j] = 1;
    for (size_t j = 0; j < nw; j++)
        dw[j] = 1;
    for (int o = 0; o < O; o++)
        db[o] = 1;
    nn_linear64_backward(dx, dw, db, dy, c.x, c.w, B, I, O);
    for (size_t j = 0; j < nw; j++)
        dw[j] -= 1;
    for (int o = 0; o < O; o++)
        db[o] -= 1;
    float *gx = narrow(dx, nx), *gw = narrow(dw, nw), *gb = narrow(db, (size_t)O);
    CHECK(gc_check("linear64.x", c.xf, gx, nx, loss, &c, 40, 1e-3, 1e-4, 1e-6, seed) == 0);
    CHECK(gc_check("linear64.w", c.w, gw, nw, loss, &c, 40, 1e-3, 1e-4, 1e-6, seed + 1) == 0);
    CHECK(gc_check("linear64.b", c.b, gb, (size_t)O, loss, &c, 40, 1e-3, 1e-4, 1e-6, seed + 2) ==
          0);

    /* NULL gradients are skipped, and the others come out the same */
    double *dx2 = malloc(sizeof(double) * nx), *dw2 = calloc(nw, sizeof(double));
    nn_linear64_backward(dx2, NULL, NULL, dy, c.x, c.w, B, I, O);
    nn_linear64_backward(NULL, dw2, NULL, dy, c.x, c.w, B, I, O);
    CHECK(memcmp(dx2, dx, sizeof(double) * nx) == 0);
    int same = 1;
    for (size_t j = 0; j < nw; j++)
        same &= fabs(dw2[j] - dw[j]) < 1e-12;
    CHECK_MSG(same, "the weight gradient alone matches");
    free(dx2), free(dw2);
    free(gx), free(gw), free(gb), free(dy), free(dx), free(dw), free(db);
    free(c.xf), free(c.w), free(c.b), free(c.x), free(c.y), free(c.h), free(c.r);
}

int main(void)
{
    sim_rng_seed(&rng, 7, SIM_RNG_TEST, 0);
    test_linear64(1, 6, 5, 0, 1);
    test_linear64(3, 7, 4, 1, 11); /* through a ReLU */
    test_linear64(4, 13, 9, 0, 21);
    /* relu64: positive passes, the rest (−0 and NaN among them) gives +0 */
    double x[5] = {2.5, -1, -0.0, 0, NAN}, y[5], d[5] = {1, 2, 3, 4, 5};
    nn_relu64_forward(y, x, 5);
    CHECK(y[0] == 2.5 && y[1] == 0 && y[3] == 0 && y[4] == 0);
    CHECK(y[2] == 0 && !signbit(y[2]));
    nn_relu64_backward(d, d, y, 5); /* in place */
    CHECK(d[0] == 1 && d[1] == 0 && d[2] == 0 && d[3] == 0 && d[4] == 0);
    return CHECK_DONE();
}
