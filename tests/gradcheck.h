/* tests/gradcheck.h -- finite-difference gradient checking for kernels and whole models.
 *
 * gc_check compares the analytic gradient with finite differences at a seeded subset of
 * coordinates, and decides on the math, not on the rounding of whatever BLAS kernels computed the
 * loss. A float loss carries rounding noise that differs between kernels (sgemm's summation order,
 * FMA or not), and a central difference (f(x+h) − f(x−h)) / 2h turns a noise σ into σ/h of error,
 * besides its truncation error ~h²·f'''. So the checker measures both and judges each coordinate
 * by what the measurement can tell:
 * - the noise σ of the loss, from the 4th differences f(x−2h) − 4f(x−h) + 6f(x) − 4f(x+h) +
 *   f(x+2h), one per coordinate the loss depends on (they cancel any cubic, and of independent
 *   noise leave 70σ²): their RMS, raised to a one-sided 99% upper bound for the number of
 *   samples; for a loss rounded to float, at least the rounding's q/√12 (q its ulp);
 * - per coordinate, the central differences D(s) and D(2s), whose Richardson extrapolation
 *   R = (4D(s) − D(2s)) / 3 cancels the s² term; its error is bounded by the correction R − D(s)
 *   (truncation, as in Ridders' method) plus GC_Z standard deviations of its noise, σ·√130/12s;
 * - the step s: first h/2 (so the steps reach the caller's h), halved while the ±2s points leave
 *   the region of x (see below); then, while the bound exceeds half the caller's tolerance,
 *   doubled as long as that lowers it (noise shrinks as 1/s), or else halved as long as that does
 *   (truncation shrinks as s²), within h/8 … 16h. Nothing here reads the analytic gradient, so a
 *   wrong one cannot choose its step.
 * A coordinate fails when |R − analytic| exceeds that bound plus max(abs_tol, rel_tol·(|R| +
 * |analytic|)): abs_tol and rel_tol are the caller's tolerance for the math (the analytic
 * gradient's own float rounding), the bound the finite difference's measured error.
 *
 * When `same_region` is given, a coordinate whose steps move the function into another linear
 * region (a ReLU changes sign, a max-pool changes its argmax) at every step down to h/8 is counted
 * in *kinks and not judged: there a difference averages two slopes. Returns the number of failing
 * coordinates, so a test can also assert that a broken gradient IS caught; gc_last holds the
 * figures of the latest check (a broken gradient should miss by several times the allowance).
 */
#ifndef TESTS_GRADCHECK_H
#define TESTS_GRADCHECK_H

#include "sim/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef double gc_loss_fn(void *ctx);
/* After a loss evaluation: is the function still in the region of the unperturbed point? */
typedef int gc_region_fn(void *ctx);

/* Steps h·2^k for k = GC_LO … GC_HI; a Richardson pair uses two neighbouring ones. */
enum { GC_LO = -3, GC_HI = 4, GC_LEVELS = GC_HI - GC_LO + 1, GC_BASE = -GC_LO };
/* Standard deviations of noise a coordinate's error may reach before it counts against it:
 * float rounding noise is a sum of many bounded errors, so its tails are Gaussian at most. */
#define GC_Z 4.0

/* The figures of the latest check. ratio: |R − analytic| over what is allowed (fails above 1). */
typedef struct gc_stats {
    int checked, judged, bad, kinks, noise_samples, evals;
    double noise, worst_ratio, min_step, max_step;
} gc_stats;
static gc_stats gc_last;

/* One coordinate's evaluations at each step level: f(x ± h_k), the steps as rounded to float. */
typedef struct gc_coord {
    size_t i;
    double fp[GC_LEVELS], fm[GC_LEVELS], span[GC_LEVELS]; /* span: (x + h_k) − (x − h_k) */
    signed char done[GC_LEVELS], same[GC_LEVELS];
    int lv; /* the lower level of the Richardson pair in use; −1: a kink */
} gc_coord;

static inline int gc_eval(gc_coord *c, int lv, float *theta, double h, gc_loss_fn *loss,
                          gc_region_fn *same_region, void *ctx)
{
    if (c->done[lv]) return 0;
    float keep = theta[c->i];
    double hk = ldexp(h, lv - GC_BASE);
    theta[c->i] = (float)(keep + hk);
    double xp = theta[c->i];
    c->fp[lv] = loss(ctx);
    int same = !same_region || same_region(ctx);
    theta[c->i] = (float)(keep - hk);
    c->span[lv] = xp - theta[c->i]; /* the float steps, not h: keep ± h rounds */
    c->fm[lv] = loss(ctx);
    same = same && (!same_region || same_region(ctx));
    theta[c->i] = keep;
    c->same[lv] = (signed char)(same && c->span[lv] > 0);
    c->done[lv] = 1;
    return 2;
}

static inline double gc_diff(const gc_coord *c, int lv)
{
    return (c->fp[lv] - c->fm[lv]) / c->span[lv];
}

static inline double gc_richardson(const gc_coord *c, int lv)
{
    return (4 * gc_diff(c, lv) - gc_diff(c, lv + 1)) / 3;
}

/* The bound on |R − f'| at pair lv for loss noise sigma: noise of R plus the correction R − D(h).
 */
static inline double gc_bound(const gc_coord *c, int lv, double sigma)
{
    return GC_Z * sigma * sqrt(130.0) / (6 * c->span[lv]) +
           fabs(gc_diff(c, lv) - gc_diff(c, lv + 1)) / 3;
}

/* The caller's tolerance for the math, at the numeric gradient alone (it picks steps). */
static inline double gc_tol(const gc_coord *c, int lv, double rel_tol, double abs_tol)
{
    return fmax(abs_tol, rel_tol * 2 * fabs(gc_richardson(c, lv)));
}

/* sqrt(ν / χ²_ν(1%)): turns an RMS over ν samples into a 99% upper bound on σ (table for small ν,
 * then Wilson–Hilferty's approximation of the quantile). */
static inline double gc_upper99(int nu)
{
    static const double q[] = {0, 0.000157, 0.0201, 0.115, 0.297, 0.554, 0.872, 1.239, 1.646};
    if (nu < 9) return sqrt(nu / q[nu]);
    double a = 2.0 / (9 * nu), x = 1 - a - 2.326 * sqrt(a);
    return sqrt(1 / (x * x * x));
}

/* The check of n_grads analytic gradients of one loss (one gradient computed two ways): the
 * finite differences, which never read a gradient, are taken once and judge each in turn;
 * bad[g] is gradient g's count of failing coordinates, the return value their sum. */
static inline int gc_check_grads(const char *what, float *theta, const float *const *grads,
                                 int n_grads, int *bad, size_t n, gc_loss_fn *loss,
                                 gc_region_fn *same_region, void *ctx, int max_coords, double h,
                                 double rel_tol, double abs_tol, uint64_t seed, int *kinks)
{
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_TEST, n);
    int checks = (size_t)max_coords < n ? max_coords : (int)n;
    gc_coord *cs = calloc((size_t)checks, sizeof *cs);
    gc_stats st = {.checked = checks, .min_step = HUGE_VAL};
    for (int g = 0; g < n_grads; g++)
        bad[g] = 0;
    double f0 = loss(ctx), sum4 = 0;
    int floats = (double)(float)f0 == f0; /* is the loss a float? */
    /* pass 1: each coordinate's Richardson pair at h/2 or, near a kink, below; its 4th difference
     */
    for (int k = 0; k < checks; k++) {
        gc_coord *c = &cs[k];
        c->i = (size_t)max_coords < n ? (size_t)sim_rng_below(&r, n) : (size_t)k;
        for (c->lv = GC_BASE - 1; c->lv >= 0; c->lv--) {
            st.evals += gc_eval(c, c->lv, theta, h, loss, same_region, ctx);
            st.evals += gc_eval(c, c->lv + 1, theta, h, loss, same_region, ctx);
            if (c->same[c->lv] && c->same[c->lv + 1]) break;
        }
        if (c->lv < 0) {
            st.kinks++;
            continue;
        }
        double f[] = {c->fm[c->lv + 1], c->fm[c->lv], f0, c->fp[c->lv], c->fp[c->lv + 1]};
        int flat = 1;
        for (int j = 0; j < 5; j++)
            floats &= (double)(float)f[j] == f[j], flat &= f[j] == f0;
        if (flat) continue; /* the loss ignores this coordinate: it measures no noise */
        double d4 = f[0] - 4 * f[1] + 6 * f[2] - 4 * f[3] + f[4];
        sum4 += d4 * d4;
        st.noise_samples++;
    }
    int nu = st.noise_samples;
    st.noise = nu ? sqrt(sum4 / (70.0 * nu)) : 0;
    double sigma = nu ? st.noise * gc_upper99(nu) : 0;
    /* A float loss is rounded to its ulp q: an error of ±q/2, σ = q/√12 at least, which a loss
     * linear in a coordinate can hide from its 4th differences (the roundings then repeat). */
    if (floats && f0 != 0) sigma = fmax(sigma, ldexp(1.0, ilogb(f0) - 23) / sqrt(12.0));
    /* pass 2: while the bound is more than half the caller's tolerance, a larger step if that
     * lowers it (noise dominates), else a smaller one if that does (truncation dominates) */
    for (int k = 0; k < checks; k++) {
        gc_coord *c = &cs[k];
        if (c->lv < 0) continue;
        for (int dir = 1; dir >= -1; dir -= 2) {
            int moved = 0;
            for (;;) {
                int next = c->lv + dir, far = dir > 0 ? c->lv + 2 : c->lv - 1;
                if (far < 0 || far >= GC_LEVELS ||
                    gc_bound(c, c->lv, sigma) <= gc_tol(c, c->lv, rel_tol, abs_tol) / 2)
                    break;
                st.evals += gc_eval(c, far, theta, h, loss, same_region, ctx);
                if (!c->same[far] || gc_bound(c, next, sigma) >= gc_bound(c, c->lv, sigma)) break;
                c->lv = next;
                moved = 1;
            }
            if (moved) break;
        }
        double num = gc_richardson(c, c->lv), fd = gc_bound(c, c->lv, sigma);
        st.judged++;
        st.min_step = fmin(st.min_step, c->span[c->lv] / 2);
        st.max_step = fmax(st.max_step, c->span[c->lv] / 2);
        for (int g = 0; g < n_grads; g++) {
            double ana = grads[g][c->i];
            double allowed = fd + fmax(abs_tol, rel_tol * (fabs(num) + fabs(ana)));
            double ratio = fabs(num - ana) / allowed;
            st.worst_ratio = fmax(st.worst_ratio, ratio);
            if (ratio > 1) {
                if (bad[g] < 5) {
                    printf("  gradcheck %s", what);
                    if (n_grads > 1) printf(" #%d", g + 1);
                    printf("[%zu]: numeric %.6g analytic %.6g (allowed ±%.3g, of it %.3g measured "
                           "at step %.3g)\n",
                           c->i, num, ana, allowed, fd, c->span[c->lv] / 2);
                }
                bad[g]++;
                st.bad++;
            }
        }
    }
    printf("  gradcheck %s: %d coordinates, %d failed, %d on kinks; loss %.6g, noise %.3g (%d "
           "samples); steps %.3g..%.3g; %d evaluations; worst error/allowed %.3g\n",
           what, checks, st.bad, st.kinks, f0, st.noise, nu, st.judged ? st.min_step : 0,
           st.max_step, st.evals, st.worst_ratio);
    if (kinks) *kinks += st.kinks;
    free(cs);
    gc_last = st;
    return st.bad;
}

static inline int gc_check_region(const char *what, float *theta, const float *grad, size_t n,
                                  gc_loss_fn *loss, gc_region_fn *same_region, void *ctx,
                                  int max_coords, double h, double rel_tol, double abs_tol,
                                  uint64_t seed, int *kinks)
{
    int bad;
    return gc_check_grads(what, theta, &grad, 1, &bad, n, loss, same_region, ctx, max_coords, h,
                          rel_tol, abs_tol, seed, kinks);
}

static inline int gc_check(const char *what, float *theta, const float *grad, size_t n,
                           gc_loss_fn *loss, void *ctx, int max_coords, double h, double rel_tol,
                           double abs_tol, uint64_t seed)
{
    return gc_check_region(what, theta, grad, n, loss, NULL, ctx, max_coords, h, rel_tol, abs_tol,
                           seed, NULL);
}

#endif /* TESTS_GRADCHECK_H */
