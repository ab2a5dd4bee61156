/* tests/check.h -- the test harness: checks that report file:line on failure and a verdict.
 *
 * Each tests/test_*.c is one binary. It calls CHECK* as often as it likes and ends main with
 * `return CHECK_DONE();`, which prints "N passed, N failed" and returns non-zero on any failure;
 * tests/run.sh sums those lines into the suite's closing line.
 *
 * Before main, every test binary picks its BLAS kernels as fedsim does (sim/blas.h): when
 * OpenBLAS's own choice falls short of the CPU and OPENBLAS_CORETYPE is unset, it executes itself
 * again with the better kernels; then it prints "BLAS kernels: NAME", which tests/run.sh shows.
 * Without this a test would run the generic kernels on a CPU newer than Debian's OpenBLAS, which
 * fedsim never runs there, and a kernel set by the caller (run.sh's second pass) is always kept.
 */
#ifndef TESTS_CHECK_H
#define TESTS_CHECK_H

#include "sim/blas.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

static int check_passed, check_failed;

#define CHECK_AT(cond, ...)                                                                        \
    do {                                                                                           \
        if (cond) {                                                                                \
            check_passed++;                                                                        \
        } else {                                                                                   \
            check_failed++;                                                                        \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

#define CHECK(cond)          CHECK_AT((cond), "%s", #cond)
#define CHECK_MSG(cond, ...) CHECK_AT((cond), __VA_ARGS__)
#define CHECK_EQ_I64(a, b)                                                                         \
    do {                                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        CHECK_AT(check_a_ == check_b_, "%s == %s (%lld vs %lld)", #a, #b, check_a_, check_b_);     \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double check_a_ = (double)(a), check_b_ = (double)(b);                                     \
        CHECK_AT(fabs(check_a_ - check_b_) <= (tol), "%s ~ %s (%.9g vs %.9g, tol %g)", #a, #b,     \
                 check_a_, check_b_, (double)(tol));                                               \
    } while (0)

/* glibc calls constructors with main's arguments; a constructor runs in every binary that
 * includes this header, with no line in any main, and before main has started anything. */
__attribute__((constructor)) static void check_blas_kernels(int argc, char **argv, char **envp)
{
    (void)argc, (void)envp;
    sim_blas_kernels(argv);
    printf("BLAS kernels: %s\n", sim_blas_corename());
    fflush(stdout); /* before any fork, or a child would print it again */
}

#define CHECK_DONE()                                                                               \
    (printf("%d passed, %d failed\n", check_passed, check_failed), fflush(stdout),                 \
     check_failed ? 1 : 0)

#endif /* TESTS_CHECK_H */
