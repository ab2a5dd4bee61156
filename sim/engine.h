/* sim/engine.h -- the discrete-event engine: a federation of clients on simulated devices, the FL
 * protocol (synchronous rounds or FedBuff-style async), and the run's outputs.
 *
 * Time is int64 nanoseconds; events fire in (time, seq) order. A client job is download → train →
 * upload, each phase's length computed from the client's device and what the job really cost: the
 * down/up message lengths and the FLOPs the training executed. A job is a pure function of what it
 * was sent, so it trains when it is dispatched, in this process or on the worker pool
 * (spec.workers), and the engine needs its result only once the simulation reaches the instant its
 * training could end at the earliest: with a pool it goes on handling events meanwhile, so jobs
 * dispatched at different instants train at once (engine_jobs.c: the lookahead rule of DESIGN.md
 * §4). Every job's events keep the seqs it took at dispatch, so neither the order in which jobs
 * compute nor the worker count can change a result. Updates are absorbed in client-id order.
 * Availability is queried lazily (a client's process is advanced only when the engine looks at
 * it), so a million mostly idle clients cost nothing per event.
 *
 * The run folder gets metrics.tsv, clients.tsv, events.msgpack and timeline.tsv (one row per job
 * phase a device finished or lost: client, round, phase, start_s, end_s, outcome), which the
 * per-client timeline plot draws.
 *
 * Checkpoints (out_dir/checkpoint.msgpack, framed by sim/checkpoint.h) hold the whole engine state
 * at an event boundary, every job in flight placed first (its result awaited), so none is left
 * training on a worker: the event queue verbatim (heap order, every seq, next_seq), every client
 * (availability process and its RNG words, job fields, messages and private states in flight,
 * statistics, what the selection policy has seen of it), the protocol state (round, arrivals,
 * async buffer, the selection policy's state, job counters, next evaluation time), the totals,
 * the algorithm's server state, and how many bytes
 * each output file held, flushed. A resumed engine truncates the outputs back to those lengths and
 * goes on appending, so its outputs are byte-identical to an uninterrupted run's. They are taken
 * after an aggregation (every spec.checkpoint_every of them, or when spec.checkpoint_wall_s wall
 * seconds have passed) and, when *spec.stop becomes nonzero (a signal), after the event being
 * handled; then the run stops. A run that finishes removes its checkpoint: a finished folder
 * holds results only, and clients.tsv gets its rows (one per client) only then, so a folder whose
 * clients.tsv has rows holds a run that ended without error (what `fedsim sweep` keeps).
 * Every write to an output is checked as it is made: the first that fails stops the run with an
 * error naming the file and the OS reason, no checkpoint is written after it, and the last one
 * stays (outputs are fsync'ed before a checkpoint counts them, and before a finished run removes
 * it), so `fedsim resume` finishes the run once there is room.
 */
#ifndef SIM_ENGINE_H
#define SIM_ENGINE_H

#include "algos/algo.h"
#include "devices/profile.h"
#include "sim/pool.h"
#include "sim/select.h"
#include "sim/units.h"

#include <signal.h>
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
    int charging_only;       /* federation.participation: charging-only (needs devices.energy) */
    const sim_sel_policy *selection; /* who gets a job (sim/select.h); NULL: uniform */
    const void *selection_cfg;       /* its config block (NULL: a policy without keys) */
} sim_fed_config;

#define SIM_MAX_SHIFTS 16

typedef struct sim_eval_config {
    int every_rounds;    /* evaluate after every this many rounds/aggregations (0 = off) */
    sim_time every_time; /* or every this much simulated time (0 = off) */
    int personalized;    /* also each client's model on its local test split */
    int test_subset;     /* evaluate the global model on the first N test samples (0 = all) */
    int clients;         /* personalized: a fixed random sample of N clients (0 = all) */
    int n_shift;         /* test-time shifts (eval.shift): personalized accuracy with a share */
    double shift[SIM_MAX_SHIFTS]; /* shift[i] of each local test split drawn from the pool of
                                     all clients' splits, one metrics.tsv column each */
} sim_eval_config;

/* `network:` (sim/net.h): the shared links transfers compete for. A link of INFINITY bit/s is
 * unlimited (not on any path). */
typedef struct sim_net_group {
    char name[48];
    double up, down; /* bit/s */
} sim_net_group;

typedef struct sim_net_config {
    double server_up, server_down; /* bit/s */
    int n_groups;
    sim_net_group *groups; /* [n_groups] (owned by whoever built it) */
    int32_t *group_of;     /* [n_clients]: the group a client sits behind, -1 none (owned too) */
} sim_net_config;

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
    /* n_clients predicted job times in seconds, from each client's profile as `fedsim check`
     * prices its round-1 job (sim_cli_predict_jobs), for a selection policy that reads them
     * (SIM_SEL_PREDICTED; borrowed); NULL: none */
    const double *predicted_s;
    /* with it and devices.energy, the same jobs' energy in joules (dev_energy_job), else NULL */
    const double *predicted_j;
    /* shared links (borrowed); NULL: every transfer has its client's link to itself */
    const sim_net_config *net;
    const char *out_dir; /* run folder: metrics.tsv, clients.tsv, events.msgpack */
    /* bytes of clients' private states kept in memory (sim/store.h); the rest wait in
     * out_dir/state.mdb. 0 = sim_state_budget_default(); without out_dir, all stay in memory */
    size_t state_memory;
    int quiet;            /* no progress line */
    int workers;          /* training processes (sim/pool.h); 0 = train in this process */
    double job_timeout_s; /* wall seconds a worker may hold a job before it is replaced (0 = none)
                           */
    const sim_pool_link *link; /* MPI worker ranks (sim/mpi.h) instead of forked workers, or NULL */
    FILE *trace;               /* if non-NULL, every event as one text line (golden tests) */
    const char *trace_path;    /* its name, for a failed write's message (NULL: "trace") */
    /* Called after every aggregation (final = 0) and once at the end (final = 1), after the
     * output files are flushed, so an observer (the live plots) may read them. It must not
     * change anything the run computes; it throttles itself. NULL = none. */
    void (*on_tick)(void *arg, int round, int final); /* round: rounds completed */
    void *tick_arg;
    int checkpoint_every;     /* checkpoint after every this many rounds/aggregations (0 = off) */
    double checkpoint_wall_s; /* or at the first aggregation this long after the last (0 = off) */
    uint64_t scenario_hash;   /* of the resolved scenario text: a resume refuses another one */
    /* When set and nonzero at an event boundary (a signal handler sets it), the engine writes a
     * checkpoint and stops; sim_totals.stopped says so. NULL = never. */
    const volatile sig_atomic_t *stop;
    int stop_after_round; /* tests: checkpoint and stop after this aggregation (0 = off) */
    int resume;           /* continue from out_dir/checkpoint.msgpack instead of starting */
    /* With resume: the checkpoint's payload (what sim_checkpoint_read returns) in memory instead
     * of out_dir's file, which is then not read (out_dir may be NULL: no outputs). For decoding
     * untrusted bytes without a file (fuzzing, tests). */
    const void *resume_payload;
    size_t resume_len;
} sim_run_spec;

typedef struct sim_engine sim_engine;

/* Weight of an async update computed from a model tau versions old (federation.staleness). */
double sim_staleness_weight(const sim_fed_config *f, int tau);

/* Bytes on the wire for an encoded message of len bytes: len plus federation.overhead; 0 for no
 * message. */
double sim_message_bytes(const sim_run_spec *spec, size_t len);

/* The width of the model client c trains (fl_algo.client_width; 1 for the others) and the bytes
 * training a model of width w needs, measured on m, a model of the run's architecture whose
 * narrowing is reset on return. A client whose device cannot hold its model is excluded. */
double sim_client_width(const sim_run_spec *spec, int32_t c);
double sim_width_memory(const sim_run_spec *spec, double w, nn_model *m);

/* Build the population and the algorithm's server; opens the output files. With spec->resume the
 * checkpoint is read, verified and restored first, and only then are the outputs truncated to its
 * lengths: a checkpoint that is missing, truncated, corrupted, of another version or scenario is
 * an error naming the file, and leaves every file as it was. */
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
    long workers_replaced;  /* worker processes that died and were replaced (jobs re-run) */
    long workers_timed_out; /* of those, killed for exceeding spec.job_timeout_s */
    long eval_reruns;       /* evaluation tasks the coordinator ran again: a helper died */
    /* achieved parallelism: wall seconds workers held jobs, summed, over the run's wall seconds
     * (sim_engine_run's; 0 without workers) */
    double workers_busy_s, wall_s;
    /* the clients' private states (sim/store.h): clients holding one and their bytes at the
     * end, and states read back from disk (evicted from the cache earlier) */
    long state_clients, state_reads;
    double state_bytes, state_disk; /* state_disk: out_dir/state.mdb and .spill's bytes */
    double acc_global, loss_global; /* of the last evaluation (NaN before) */
    double acc_pers;      /* mean personalized accuracy of the last evaluation (NaN before) */
    int stopped;          /* stopped on request (spec.stop), leaving a checkpoint */
    int checkpoint_round; /* rounds/aggregations done at the last checkpoint written, -1 = none */
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
    SIM_EV_RETRY, /* async: idle slots are refilled once a client comes online */
    SIM_EV_COUNT
};
extern const char *const sim_event_names[SIM_EV_COUNT];

#endif /* SIM_ENGINE_H */
