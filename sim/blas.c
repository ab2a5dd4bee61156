/* sim/blas.c -- OpenBLAS's kernel choice, corrected where it falls back below the CPU (blas.h).
 *
 * Why: Debian 12's OpenBLAS 0.3.21 does not know Sapphire Rapids and runs its SSE3 kernels there:
 * sgemm at 34 GFLOP/s on one core, where the AVX-512 kernels it ships run at 164 on the same
 * core (`make bench` prints which it uses). The training jobs are mostly GEMMs, so a run takes
 * 1.7x as long. A user's OPENBLAS_CORETYPE is always kept, even an unhelpful one.
 */
#include "sim/blas.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* name: whether OpenBLAS's kernels called name are in the NULL-terminated list */
static int named(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (!strcasecmp(name, *list)) return 1;
    return 0;
}

/* The kernels of the widest vector units this CPU has, and the kernels that use them at least as
 * well; NULL when OpenBLAS's own choice cannot fall short (no AVX2, or not x86). */
static const char *wanted(const char *const **enough)
{
#if defined(__x86_64__) || defined(__i386__)
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *const avx2[] = {
            "Haswell", "Zen", "Excavator", "SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512cd")) {
        *enough = avx512;
        return "SkylakeX";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *enough = avx2;
        return "Haswell";
    }
#endif
    (void)enough;
    return NULL;
}

void sim_blas_kernels(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE")) return; /* the user's choice, or ours in the second start */
    const char *const *enough = NULL;
    const char *best = wanted(&enough);
    if (!best || named(sim_blas_corename(), enough)) return;
    if (setenv("OPENBLAS_CORETYPE", best, 1)) return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* exec failed: keep the environment as the user gave it */
}

const char *sim_blas_corename(void)
{
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}
