/* tests/test_nn_gradcheck.c -- the gradient checker itself (tests/gradcheck.h), on losses whose
 * exact gradient is known: it passes the true gradient of a loss that carries rounding-like noise
 * (a float loss does, of a size that depends on the BLAS kernels: issue 37), and of a loss so
 * curved that a central difference at the caller's step is off by 4%; it fails a gradient wrong
 * by its sign or by 20% on both, by a clear margin; and its noise estimate is the noise put in. */
#include "tests/check.h"
#include "tests/gradcheck.h"

#include <string.h>

enum { N = 64 };

/* f(θ) = Σ a_j sin(k θ_j) + noise(θ); the noise is a hash of θ's bits, uniform in ±amp: like
 * rounding, a fixed function of the input that jumps at the smallest change. */
typedef struct sctx {
    float theta[N];
    double a[N], k, amp;
} sctx;

static double noise(const float *theta)
{
    uint64_t x = 1469598103934665603u; /* FNV-1a over the floats' bits, then a finalizer */
    for (int j = 0; j < N; j++) {
        uint32_t b;
        memcpy(&b, &theta[j], sizeof b);
        x = (x ^ b) * 1099511628211u;
    }
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 29;
    return (double)(x >> 11) * 0x1p-52 - 1;
}

static double sloss(void *p)
{
    sctx *c = p;
    double f = c->amp * noise(c->theta);
    for (int j = 0; j < N; j++)
        f += c->a[j] * sin(c->k * c->theta[j]);
    return f;
}

/* The analytic gradient, times `wrong` (1: correct). */
static void sgrad(const sctx *c, float *g, float wrong)
{
    for (int j = 0; j < N; j++)
        g[j] = (float)(c->a[j] * c->k * cos(c->k * c->theta[j])) * wrong;
}

static void setup(sctx *c, double a, double k, double amp, uint64_t seed)
{
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_TEST, 0);
    c->k = k, c->amp = amp;
    for (int j = 0; j < N; j++) {
        /* |k θ| < 1.2 keeps cos(kθ) ≥ 0.36: every gradient is far from 0 */
        c->theta[j] = (float)((2 * sim_rng_uniform(&r) - 1) * 1.2 / k);
        c->a[j] = a * (0.5 + sim_rng_uniform(&r));
    }
}

int main(void)
{
    sctx c;
    float g[N];
    /* noise: gradients 0.005 … 0.045, a loss noise of ±1e-6 (σ 5.8e-7), the caller's step 1e-3:
     * at that step alone a central difference is off by up to 1e-3, beyond the 1e-4 and 1%
     * tolerances; the checker measures the noise and takes a larger step */
    setup(&c, 0.01, 3, 1e-6, 1);
    sgrad(&c, g, 1);
    CHECK(gc_check("noisy", c.theta, g, N, sloss, &c, N, 1e-3, 1e-2, 1e-4, 1) == 0);
    double sigma = 1e-6 / sqrt(3.0);
    CHECK_MSG(gc_last.noise > 0.6 * sigma && gc_last.noise < 1.6 * sigma,
              "noise measured %.3g, put in %.3g", gc_last.noise, sigma);
    CHECK(gc_last.judged == N && gc_last.max_step > 1e-3);
    for (int wrong = 0; wrong < 2; wrong++) {
        sgrad(&c, g, wrong ? -1 : 1.2f);
        printf("  (the next gradcheck failures are expected: a gradient %s)\n",
               wrong ? "of the wrong sign" : "20% too large");
        CHECK_MSG(gc_check("noisy(broken)", c.theta, g, N, sloss, &c, N, 1e-3, 1e-2, 1e-4, 1) >
                                  N / 2 &&
                          gc_last.worst_ratio > 5,
                  "a wrong gradient fails %d of %d coordinates, by %.3g times the allowance",
                  gc_last.bad, gc_last.judged, gc_last.worst_ratio);
    }

    /* truncation: f''' = k² f' with k = 10, so at the caller's step 0.05 a central difference is
     * off by h²k²/6 ≈ 4% of the gradient; Richardson's extrapolation and a smaller step are not */
    setup(&c, 0.1, 10, 0, 2);
    sgrad(&c, g, 1);
    CHECK(gc_check("curved", c.theta, g, N, sloss, &c, N, 0.05, 1e-2, 1e-4, 2) == 0);
    CHECK(gc_last.judged == N);
    for (int wrong = 0; wrong < 2; wrong++) {
        sgrad(&c, g, wrong ? -1 : 1.2f);
        printf("  (the next gradcheck failures are expected: a gradient %s)\n",
               wrong ? "of the wrong sign" : "20% too large");
        CHECK_MSG(gc_check("curved(broken)", c.theta, g, N, sloss, &c, N, 0.05, 1e-2, 1e-4, 2) >
                                  N / 2 &&
                          gc_last.worst_ratio > 5,
                  "a wrong gradient fails %d of %d coordinates, by %.3g times the allowance",
                  gc_last.bad, gc_last.judged, gc_last.worst_ratio);
    }
    return CHECK_DONE();
}
