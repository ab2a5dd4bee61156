/* sim/select.h -- client selection policies (`federation.selection`): which of the clients that
 * can take a job now get one, in a sync round (ceil(per_round · over_commit) of them) or for an
 * async run's idle slots.
 *
 * A policy is one file (sim/select_NAME.c) and one line in sim_sel_policies[] (select.c), as an
 * algorithm is: a name, a doc, its keys (`federation.selection.NAME:`, a sim/keys.h table filling
 * a config block of its own), an optional state (new/free, and save/load for checkpoints), a pick
 * and an optional hook that sees what the server learns. Every policy draws from a random stream
 * of its own (rng purpose, index: the round in sync, the dispatch count in async), breaks ties
 * by that stream or by client id, and returns its picks in client-id order.
 *
 * What a policy may know is the view (sim_sel_view): per client, only what a real server could
 * know (sim_sel_client: its sample count, its device's declared profile and the job time that
 * profile predicts, what its last arrived job reported, when it was last selected and its jobs'
 * outcomes so far), the time and round, and which clients can take a job now. Never a job's
 * future (a result is computed at dispatch, but the view gets its loss only when the upload
 * arrives), the availability process's coming draws, or any client's data.
 */
#ifndef SIM_SELECT_H
#define SIM_SELECT_H

#include "devices/profile.h"
#include "sim/keys.h"
#include "sim/rng.h"

#include <msgpack.h>
#include <stdint.h>

/* One client as the server knows it. */
typedef struct sim_sel_client {
    int samples;               /* |B_i|: its training samples */
    const dev_profile *device; /* its declared profile (device->name: its class) */
    double predicted_s;        /* its job's time as its profile predicts (`fedsim check`'s
                                  pricing), seconds; NAN unless the policy asked for it */
    /* what its last arrived job reported (on time or late): NAN and 0 before one arrived */
    double loss;       /* the job's mean training loss over its batches */
    double loss_rms;   /* the sqrt of the mean over its training samples of each one's squared
                          loss (Oort's); 0 or NAN when the job counted none (its algorithm's own
                          loss, or a cost-only run) */
    double duration_s; /* dispatch to arrival, seconds */
    int steps;         /* SGD steps the job took */
    int last_round;    /* the round (async: model version) it was last selected in; -1: never */
    int jobs, arrived, lost; /* jobs dispatched to it; of them, arrived and lost so far */
    /* with devices.energy, what a phone reports of its battery (and the profile declares):
     * joules above its floor now (INFINITY without a battery), the rate it charges at now (0:
     * not charging), and its job's energy as predicted_s's pricing gives it (NAN unless the
     * policy asked for predictions, or without energy) */
    double battery_j, charging_w, predicted_j;
} sim_sel_client;

/* What a policy sees when it picks. The engine fills it; tests may build their own. */
typedef struct sim_sel_view {
    sim_time now;
    int round;           /* sync: the round starting; async: the model version */
    int n;               /* clients */
    sim_time deadline;   /* sync: the round's deadline (0: none; always 0 in async) */
    const int32_t *cand; /* the clients that can take a job now: online, idle, eligible, in id
                            order (NULL for uniform, which asks one client at a time) */
    int n_cand;
    /* client c as the server knows it */
    void (*client)(const void *ctx, int32_t c, sim_sel_client *out);
    /* 1 when client c can take a job now (uniform's lazy test; the others read cand) */
    int (*eligible)(void *ctx, int32_t c);
    void *ctx;
} sim_sel_view;

/* sim_sel_policy.flags */
enum {
    SIM_SEL_PREDICTED = 1 << 0, /* reads sim_sel_client.predicted_s: the run prices every client's
                                   job from its profile before it starts */
};

typedef struct sim_sel_policy {
    const char *name;
    const char *doc;     /* what it does and knows (Markdown), for `fedsim keys` and the README */
    const sim_key *keys; /* its section's keys, ending with a NULL name (NULL: none) */
    size_t size;         /* its config block's size */
    /* Optional: checks across keys once they are read, errors at the key (map is the section). */
    int (*check)(void *cfg, const sim_yaml *map, const sim_key_ctx *ctx, sim_err *err);
    unsigned flags;   /* SIM_SEL_* */
    uint64_t purpose; /* its random stream's purpose (sim/rng.h), its own */
    /* Optional state (NULL new: none): made for n clients and the policy's config; saved as one
     * msgpack object and loaded into a state fresh from new (SIM_EFORMAT naming what is wrong). */
    void *(*state_new)(const void *cfg, int n);
    void (*state_free)(void *st);
    void (*save)(const void *st, msgpack_packer *pk);
    int (*load)(void *st, const msgpack_object *o, sim_err *err);
    /* Up to k clients the view says can take a job now into out, in client-id order; returns how
     * many. r is the policy's stream for this selection. */
    int (*pick)(void *st, const void *cfg, const sim_sel_view *v, int k, int32_t *out, sim_rng *r);
} sim_sel_policy;

extern const sim_sel_policy *const sim_sel_policies[]; /* NULL-ended; [0] is uniform */
const sim_sel_policy *sim_sel_find(const char *name);
extern const sim_sel_policy sim_sel_uniform, sim_sel_oort, sim_sel_poc, sim_sel_fastest,
        sim_sel_available;

/* The policy named in a scenario and its settings, as the scenario loader read them. */
#define SIM_SEL_MAX 8
typedef struct sim_sel_config {
    const sim_sel_policy *policy; /* NULL: uniform with its defaults (no `selection:` given) */
    const void *cfg;              /* its block (in blocks[]) */
    void *blocks[SIM_SEL_MAX];    /* owned: every section read, by index in sim_sel_policies */
} sim_sel_config;

/* Read `federation.selection:` (the map at s, which may be absent: then nothing is read or
 * written and c->policy stays NULL): its name (defaults written back), the chosen policy's
 * section and every other present (checked, so a sweep over the name keeps one scenario). */
int sim_sel_config_read(sim_sel_config *c, sim_keys_map *s, const sim_key_ctx *ctx, sim_err *err);
/* The same from YAML text holding a `selection:` map's content ("{name: oort, oort: {alpha:
 * 3}}", file name "selection"), every key checked used: for tests. ctx may be NULL (sync). */
int sim_sel_config_load(sim_sel_config *c, const char *text, const sim_key_ctx *ctx, sim_err *err);
void sim_sel_config_destroy(sim_sel_config *c);
/* `fedsim keys` for `federation.selection`: its name, then every policy's section. */
int sim_sel_keys_print(FILE *f, const char *filter, int markdown);
/* The key of `federation.selection:` itself (its name), for hints. */
extern const sim_key sim_sel_keys[];

/* Oort's score of each of v's candidates (NAN: unexplored, no report yet) into score, and the
 * preferred round duration T it used (seconds; 0: none yet) into *T (sim/select_oort.c). */
void sim_sel_oort_scores(const void *cfg, const sim_sel_view *v, double *score, double *T);

/* P(online through t_s more seconds | online at now) from a declared availability a, as
 * `available` ranks by (sim/select_available.c). */
double sim_sel_stay_online(const dev_avail_spec *a, sim_time now, double t_s);

/* Shared helpers for policy files: a candidate with its sort key and tie-break, sorted by key
 * ascending, then tie ascending, then id (so any order of equal keys is decided). */
typedef struct sim_sel_item {
    double key, tie;
    int32_t id;
} sim_sel_item;
void sim_sel_sort(sim_sel_item *it, int n);
/* The first k of it's ids (k <= n) into out, in client-id order; returns k. */
int sim_sel_take(const sim_sel_item *it, int k, int32_t *out);

#endif /* SIM_SELECT_H */
