/* tests/gradcheck.h -- finite-difference gradient checking for kernels and whole models.
 *
 * gc_check perturbs a seeded subset of coordinates by ±h and compares the central difference with
 * the analytic gradient. A coordinate passes when the relative error is within rel_tol or the
 * absolute error within abs_tol (coordinates whose gradient is ~0). When `same_region` is given,
 * a coordinate whose ±h steps move the function into another linear region (a ReLU changes sign,
 * a max-pool changes its argmax) is counted in *kinks and not judged: there the central
 * difference averages two slopes. Returns the number of failing coordinates, so a test can also
 * assert that a broken gradient IS caught.
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

static inline int gc_disagree(double a, double b, double rel_tol, double abs_tol)
{
    double abs_err = fabs(a - b);
    return abs_err > abs_tol && abs_err / fmax(1e-12, fabs(a) + fabs(b)) > rel_tol;
}

static inline int gc_check_region(const char *what, float *theta, const float *grad, size_t n,
                                  gc_loss_fn *loss, gc_region_fn *same_region, void *ctx,
                                  int max_coords, double h, double rel_tol, double abs_tol,
                                  uint64_t seed, int *kinks)
{
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_TEST, n);
    int bad = 0, checks = (size_t)max_coords < n ? max_coords : (int)n;
    for (int c = 0; c < checks; c++) {
        size_t i = (size_t)max_coords < n ? (size_t)sim_rng_below(&r, n) : (size_t)c;
        float keep = theta[i];
        theta[i] = (float)(keep + h);
        double lp = loss(ctx);
        int same = !same_region || same_region(ctx);
        theta[i] = (float)(keep - h);
        double lm = loss(ctx);
        same = same && (!same_region || same_region(ctx));
        theta[i] = keep;
        if (!same) {
            ++*kinks;
            continue;
        }
        double num = (lp - lm) / (2 * h), ana = grad[i];
        if (gc_disagree(num, ana, rel_tol, abs_tol)) {
            if (bad < 5)
                printf("  gradcheck %s[%zu]: numeric %.6g analytic %.6g\n", what, i, num, ana);
            bad++;
        }
    }
    return bad;
}

static inline int gc_check(const char *what, float *theta, const float *grad, size_t n,
                           gc_loss_fn *loss, void *ctx, int max_coords, double h, double rel_tol,
                           double abs_tol, uint64_t seed)
{
    return gc_check_region(what, theta, grad, n, loss, NULL, ctx, max_coords, h, rel_tol, abs_tol,
                           seed, NULL);
}

#endif /* TESTS_GRADCHECK_H */
