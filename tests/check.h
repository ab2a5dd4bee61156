/* tests/check.h -- the test harness: checks that report file:line on failure and a verdict.
 *
 * Each tests/test_*.c is one binary. It calls CHECK* as often as it likes and ends main with
 * `return CHECK_DONE();`, which prints "N passed, N failed" and returns non-zero on any failure;
 * tests/run.sh sums those lines into the suite's closing line.
 */
#ifndef TESTS_CHECK_H
#define TESTS_CHECK_H

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

#define CHECK_DONE()                                                                               \
    (printf("%d passed, %d failed\n", check_passed, check_failed), fflush(stdout),                 \
     check_failed ? 1 : 0)

#endif /* TESTS_CHECK_H */
