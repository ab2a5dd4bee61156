/* sim/rng.h -- deterministic random streams: one run seed, one stream per purpose and index.
 *
 * A stream is xoshiro256** seeded by splitmix64 mixing of (seed, purpose, index), so adding a
 * client or drawing one more number for one consumer never shifts another consumer's sequence. The
 * distributions are our own code (libm only), so results do not depend on the C library's rand().
 */
#ifndef SIM_RNG_H
#define SIM_RNG_H

#include <stddef.h>
#include <stdint.h>

/* What a stream is for; the value enters the seed mix, so never renumber existing entries. These
 * are the core purposes; an algorithm declares its own streams in its file (fl_algo.streams, with
 * 8, 9, 10, 12 and 13 taken there). A new core purpose takes a free number below 256 and joins
 * sim_rng_core; a test fails when two streams share an id. */
enum {
    SIM_RNG_INIT_WEIGHTS = 1, /* index: model instance */
    SIM_RNG_DATA_SPLIT = 2,   /* index: 0 client partition, 1 local test splits */
    SIM_RNG_DATA_GEN = 3,     /* synthetic data generation; index: split/client */
    SIM_RNG_BATCHES = 4,      /* minibatch order; index: client << 32 | round, 0 centralized */
    SIM_RNG_SELECT = 5,       /* client selection; index: round (sync) or dispatch (async) */
    SIM_RNG_DEVICES = 6,      /* per-client device draws; index: client */
    SIM_RNG_AVAIL = 7,        /* availability processes; index: client */
    SIM_RNG_SHIFT = 11,       /* eval.shift's test-time shift draws; index: client */
    /* the selection policies' own (sim/select.h); index: as SIM_RNG_SELECT's */
    SIM_RNG_SEL_OORT = 14,
    SIM_RNG_SEL_POC = 15,
    SIM_RNG_SEL_FASTEST = 16,
    SIM_RNG_SEL_AVAILABLE = 17,
    SIM_RNG_PHONES = 20,      /* devices.population's phone and network draws; index: client */
    SIM_RNG_NET = 21,         /* network.groups' share draws; index: group */
    SIM_RNG_COMPRESS = 22,    /* update compression (nn/compress.h, algos/compress.c): randk's
                                 indices (seed: the message's own, index 0), and each message's
                                 draws (index: the job's stream for an upload, 1 << 62 | client
                                 << 32 | round for a download) */
    SIM_RNG_TRANSFER = 23,    /* per-transfer rates (dev_profile.up_draw/down_draw); index: job */
    SIM_RNG_ENERGY = 24,      /* batteries' initial levels and own charging processes (devices/
                                 energy.h); index: client */
    SIM_RNG_EVAL_SAMPLE = 25, /* eval.clients' sample of the clients evaluated; index 0 */
    SIM_RNG_TEST = 100,       /* tests only */
};

/* The core purposes above, ending with 0. */
extern const uint64_t sim_rng_core[];

typedef struct sim_rng {
    uint64_t s[4]; /* xoshiro256** state; never all zero */
} sim_rng;

void sim_rng_seed(sim_rng *r, uint64_t seed, uint64_t purpose, uint64_t index);
uint64_t sim_rng_u64(sim_rng *r);
double sim_rng_uniform(sim_rng *r);             /* [0, 1), 53 random bits */
uint64_t sim_rng_below(sim_rng *r, uint64_t n); /* uniform in [0, n), unbiased; n > 0 */
double sim_rng_normal(sim_rng *r);              /* N(0, 1) */
double sim_rng_gamma(sim_rng *r, double shape); /* Gamma(shape, 1), shape > 0 */
void sim_rng_dirichlet(sim_rng *r, double *out, int k, double alpha); /* k draws summing to 1 */
void sim_rng_shuffle_u32(sim_rng *r, uint32_t *a, size_t n);          /* Fisher-Yates */

#endif /* SIM_RNG_H */
