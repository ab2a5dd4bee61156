/* sim/engine.h -- the discrete-event engine: a federation of clients on simulated devices, the FL
 * protocol (synchronous rounds or FedBuff-style async), and the run's outputs.
 *
 * Time is int64 nanoseconds; events fire in (time, seq) order. A client job is download → train →
 * upload, each phase's length computed from the client's device and what the job really cost: the
 * down/up message lengths and the FLOPs the training executed. Jobs run when they are dispatched,
 * in this process or on the worker pool (spec.workers): every job dispatched at one simulated
 * instant is trained, in any order, before any of them is scheduled, since a job is a pure function
 * of what it was sent; so its result, and therefore its finish time, is known before any later
 * event fires, and neither the order in which jobs compute nor the worker count can change a
 * result (the lookahead rule of DESIGN.md §4). Updates are absorbed in client-id order.
 * Availability is queried lazily (a client's process is advanced only when the engine looks at
 * it), so a million mostly idle clients cost nothing per event.
 *
 * The run folder gets metrics.tsv, clients.tsv, events.msgpack and timeline.tsv (one row per job
 * phase a device finished or lost: client, round, phase, start_s, end_s, outcome), which the
 * per-client timeline plot draws.
 */
#ifndef SIM_ENGINE_H
#define SIM_ENGINE_H

#include "algos/algo.h"
#include "devices/profile.h"
#include "sim/units.h"

#include <stdio.h>

enum { SIM_SYNC = 0, SIM_ASYNC = 1 };
enum { SIM_STALE_CONST = 0, SIM_STALE_POLY = 1, SIM_STALE_HINGE = 2 };

typedef struct sim_fed_config {
    int mode;                /* SIM_SYNC or SIM_ASYNC */
    int rounds;              /* sync rounds, or async aggregations */
    int per_round;           /* sync: updates a round waits for (K) */
    double over_commit;      /* sync: select ceil(K·over_commit), keep the first K arrivals */
    sim_time deadline;       /* sync: a round closes this long after it starts (0 = none) */
    int concurrency;         /* async: jobs kept in flight */
    int buffer;              /* async: updates per aggregation */
    int staleness;           /* async: SIM_STALE_* weight of an update computed τ versions ago */
    double stale_a, stale_b; /* poly: (1+τ)^-a; hinge: 1 if τ <= b else 1/(a(τ−b)+1) */
    double overhead_bytes;   /* protocol overhead added to every message */
    sim_time max_time;       /* stop at this simulated time (0 = none) */
} sim_fed_config;

typedef struct sim_eval_config {
    int every_rounds;    /* evaluate after every this many rounds/aggregations (0 = off) */
    sim_time every_time; /* or every this much simulated time (0 = off) */
    int personalized;    /* also each client's model on its local test split */
    int test_subset;     /* evaluate the global model on the first N test samples (0 = all) */
} sim_eval_config;

/* Everything a run needs, resolved (the scenario loader builds it; tests build it by hand). */
typedef struct sim_run_spec {
    const char *name; /* run name (scenario name) */
    uint64_t seed;
    sim_fed_config fed;
    sim_eval_config eval;
    const fl_algo *algo;
    fl_env env; /* algorithm environment (config, arch, data, partition) */
    int n_clients;
    dev_profile *devices; /* n_clients concrete profiles (borrowed) */
    const char *out_dir;  /* run folder: metrics.tsv, clients.tsv, events.msgpack */
    int quiet;            /* no progress line */
    int workers;          /* training processes (sim/pool.h); 0 = train in this process */
    FILE *trace;          /* if non-NULL, every event as one text line (golden tests) */
    /* Called after every aggregation (final = 0) and once at the end (final = 1), after the
     * output files are flushed, so an observer (the live plots) may read them. It must not
     * change anything the run computes; it throttles itself. NULL = none. */
    void (*on_tick)(void *arg, int round, int final); /* round: rounds completed */
    void *tick_arg;
} sim_run_spec;

typedef struct sim_engine sim_engine;

/* Weight of an async update computed from a model tau versions old (federation.staleness). */
double sim_staleness_weight(const sim_fed_config *f, int tau);

/* Build the population and the algorithm's server; opens the output files. */
int sim_engine_new(sim_engine **out, const sim_run_spec *spec, sim_err *err);
/* Run to the end (rounds done, time limit, or nothing left to do). */
int sim_engine_run(sim_engine *e, sim_err *err);
void sim_engine_free(sim_engine *e);

/* Totals after (or during) a run. */
typedef struct sim_totals {
    sim_time now;
    int round; /* rounds or aggregations completed */
    double bytes_up, bytes_down, flops;
    long jobs, dropped, late, excluded;
    long events;
    long workers_replaced;          /* worker processes that died and were replaced (jobs re-run) */
    double acc_global, loss_global; /* of the last evaluation (NaN before) */
} sim_totals;
void sim_engine_totals(const sim_engine *e, sim_totals *t);

/* Event kinds, as written to events.msgpack and the text trace. */
enum {
    SIM_EV_ROUND_START,
    SIM_EV_DISPATCH,
    SIM_EV_DOWNLOAD_DONE,
    SIM_EV_TRAIN_DONE,
    SIM_EV_UPLOAD_DONE,
    SIM_EV_JOB_LOST,
    SIM_EV_DEADLINE,
    SIM_EV_AGGREGATE,
    SIM_EV_EVALUATE,
    SIM_EV_LATE,
    SIM_EV_COUNT
};
extern const char *const sim_event_names[SIM_EV_COUNT];

#endif /* SIM_ENGINE_H */
