/* devices/population.h -- device populations built from public measurements: each client a phone
 * of the AI-Benchmark list, on the network of one of the 19 users FLASH measured
 * (devices/phones/, where the data and its sources are).
 *
 * A client's profile starts as a copy of the reference profile (a measured phone of the catalog,
 * meizu-16t by default) and takes from its draw:
 *   memory        = the drawn phone's RAM (the list's, in GiB);
 *   compute       = reference compute x s, step_overhead = reference step_overhead / s,
 *                   mem_bandwidth = reference mem_bandwidth x s,
 *                   s = (phone's CPU_F_AI_Score / the reference's score)^exponent:
 *                   every term of a step's time scales by score^-exponent. The exponent (0.65
 *                   by default) is the least-squares fit, in logs, of FLASH's measured per-batch
 *                   times of three phones against their scores; score alone (exponent 1) misses
 *                   those ratios by -52%..+524%, 0.65 by -59%..+133% (devices/phones/README.md);
 *   up, down      = the drawn user's measured means, and each transfer (a job's download, its
 *                   upload) draws its own rate from Normal(mean, sigma) of that user, redrawn
 *                   below floor x mean (truncated; after 64 redraws it is floor x mean): the
 *                   profile's up_draw and down_draw, which the engine samples per job from the
 *                   stream (seed, SIM_RNG_TRANSFER, job).
 * Latency, availability, sparse_eff and capacity are the reference's.
 *
 * Phones and users are drawn uniformly (the list is a ranking, not a market share) from the
 * stream the caller seeds (sim/rng.h SIM_RNG_PHONES, index: client), so a client's draw depends
 * on the seed and its index alone.
 */
#ifndef DEV_POPULATION_H
#define DEV_POPULATION_H

#include "devices/profile.h"
#include "sim/base.h"
#include "sim/rng.h"

typedef struct dev_phone {
    char model[64];
    double ram_bytes;
    double score; /* CPU_F_AI_Score */
} dev_phone;

typedef struct dev_net_user {
    double down_mean, down_sigma, up_mean, up_sigma; /* bit/s */
} dev_net_user;

typedef struct dev_population {
    dev_phone *phones;
    int n_phones;
    dev_net_user *users;
    int n_users;
    double ref_score; /* the reference profile's phone's score, > 0 */
    double exponent;  /* step time ~ score^-exponent, >= 0 */
    double floor;     /* bandwidth draws below floor x mean are redrawn, in [0, 1) */
} dev_population;

/* Read the phone list (TSV: model, cpu, ram_gib, year, cpu_f_score; '#' comments, a header) and
 * the users (TSV: user, down_mean, down_sigma, up_mean, up_sigma in KiB/s) into p, whose
 * ref_score, exponent and floor the caller sets. Errors name the file and line. On error p is
 * zeroed. */
int dev_population_load(dev_population *p, const char *phones_path, const char *users_path,
                        sim_err *err);
void dev_population_destroy(dev_population *p);

/* One client's profile: a copy of ref with the draws above from r; *phone and *user (may be NULL)
 * get the indices drawn. out must be destroyed. */
void dev_population_draw(const dev_population *p, const dev_profile *ref, sim_rng *r,
                         dev_profile *out, int *phone, int *user);

#endif /* DEV_POPULATION_H */
