/* sim/rng.c -- xoshiro256** streams and the distributions fedsim draws from (see rng.h). */
#include "sim/rng.h"

#include <assert.h>
#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

const uint64_t sim_rng_core[] = {
        SIM_RNG_INIT_WEIGHTS, SIM_RNG_DATA_SPLIT,  SIM_RNG_DATA_GEN,    SIM_RNG_BATCHES,
        SIM_RNG_SELECT,       SIM_RNG_DEVICES,     SIM_RNG_AVAIL,       SIM_RNG_SHIFT,
        SIM_RNG_SEL_OORT,     SIM_RNG_SEL_POC,     SIM_RNG_SEL_FASTEST, SIM_RNG_SEL_AVAILABLE,
        SIM_RNG_COMPRESS,     SIM_RNG_NET,         SIM_RNG_PHONES,      SIM_RNG_TRANSFER,
        SIM_RNG_ENERGY,       SIM_RNG_EVAL_SAMPLE, SIM_RNG_TEST,        0};

void sim_rng_seed(sim_rng *r, uint64_t seed, uint64_t purpose, uint64_t index)
{
    /* Mix the three keys through splitmix64 one after another, so (1,2,3) and (2,1,3) differ. */
    uint64_t x = seed;
    uint64_t h = splitmix64(&x);
    x = h ^ purpose;
    h = splitmix64(&x);
    x = h ^ index;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

uint64_t sim_rng_u64(sim_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double sim_rng_uniform(sim_rng *r)
{
    return (double)(sim_rng_u64(r) >> 11) * 0x1.0p-53;
}

uint64_t sim_rng_below(sim_rng *r, uint64_t n)
{
    assert(n > 0);
    /* Rejection on the top of the range keeps the result exactly uniform. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = sim_rng_u64(r);
    while (x >= limit);
    return x % n;
}

double sim_rng_normal(sim_rng *r)
{
    /* Box-Muller without caching the second value: the stream stays a pure function of draws. */
    double u1 = 1.0 - sim_rng_uniform(r); /* (0, 1] so log is finite */
    double u2 = sim_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double sim_rng_gamma(sim_rng *r, double shape)
{
    assert(shape > 0);
    if (shape < 1.0) {
        /* Boost to shape+1 and scale by U^(1/shape) (Marsaglia & Tsang, section 6). */
        double u = 1.0 - sim_rng_uniform(r);
        return sim_rng_gamma(r, shape + 1.0) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = sim_rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = 1.0 - sim_rng_uniform(r);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v;
    }
}

void sim_rng_dirichlet(sim_rng *r, double *out, int k, double alpha)
{
    double sum = 0;
    for (int i = 0; i < k; i++)
        sum += out[i] = sim_rng_gamma(r, alpha);
    if (sum <= 0) {
        /* All draws underflowed (tiny alpha): put the mass on one uniformly chosen category. */
        for (int i = 0; i < k; i++)
            out[i] = 0;
        out[sim_rng_below(r, (uint64_t)k)] = 1;
        return;
    }
    for (int i = 0; i < k; i++)
        out[i] /= sum;
}

void sim_rng_shuffle_u32(sim_rng *r, uint32_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)sim_rng_below(r, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}
