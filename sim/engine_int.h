/* sim/engine_int.h -- the engine's private header: its state and the functions its files share.
 *
 * The engine (sim/engine.h) is split by concern, into files that share this header:
 *   engine.c      the loop: construction, the event handler, selecting clients, aggregating;
 *   engine_jobs.c dispatching jobs, and the lookahead that trains them while the loop goes on;
 *   sync.c        synchronous rounds (start, arrivals, deadline, over-commit);
 *   async.c       FedBuff-style async (refill, buffered arrivals, staleness);
 *   eval.c        evaluation of the global and personalized models (an observer: no sim time);
 *   outputs.c     the run folder's files, the trace and the progress line;
 *   engine_ckpt.c the engine's state to and from a checkpoint payload (sim/checkpoint.c frames it,
 *                 sim/record.h writes and reads its records);
 *   engine_net.c  transfers over shared links (`network:`);
 *   engine_energy.c job energy and batteries (devices.energy);
 *   engine_rows.c algorithms' per-client rows (fl_rows) in the clients' state store.
 * Callers outside sim/engine*.c, sync.c, async.c, eval.c and outputs.c see only sim/engine.h.
 */
#ifndef SIM_ENGINE_INT_H
#define SIM_ENGINE_INT_H

#include "sim/engine.h"
#include "sim/net.h"
#include "sim/queue.h"
#include "sim/store.h"

#include <msgpack.h>

typedef struct sim_client {
    dev_avail_proc avail;
    int busy;            /* a job is in flight (its device is working) */
    int excluded;        /* its device cannot hold the model: never selected */
    int32_t job_round;   /* round (sync) or model version (async) the job started from */
    uint64_t job_id;     /* identifies the job its events belong to */
    sim_time busy_until; /* when the device is free again */
    void *up;            /* the job's up message until the upload is absorbed (owned) */
    size_t up_len;
    size_t priv_len;    /* its private state's length in e->store (0: it holds none) */
    void *pending_priv; /* the job's new private state until its training ends (owned) */
    size_t pending_priv_len;
    double weight;                                   /* training samples (FedAvg weight) */
    double job_flops;                                /* FLOPs the job's device executes */
    sim_time job_start, job_down_end, job_train_end; /* the current job's phases (timeline) */
    /* statistics for clients.tsv: jobs dispatched; of them, arrived (the update reached the
     * server: the upload ended, or the training when there is none), lost (the device went
     * offline first), or still out when the run ended; late arrivals came after their round
     * closed and were dropped (sync) */
    int jobs, arrived, lost, late;
    double bytes_up, bytes_down, flops;
    sim_time busy_ns;
    double acc; /* personalized accuracy at the last evaluation, NaN before */
    /* what the selection policy's view shows of it (sim_sel_client): its last arrived job's
     * report (loss NaN before one), and the round it was last selected in (-1: never) */
    double seen_loss, seen_loss_rms, seen_duration_s;
    int seen_steps, last_selected;
    /* the job in flight's report, known at dispatch, shown only once its update arrives */
    double job_loss, job_loss_rms;
    int job_steps;
} sim_client;

/* What the network needs of a client's job (engine_net.c; `network:` runs only): with shared
 * links a phase's end is known only once the phase before has ended. */
enum { SIM_NJ_IDLE, SIM_NJ_DOWN, SIM_NJ_TRAIN, SIM_NJ_UP };
typedef struct sim_netjob {
    dev_work work;       /* the training to run once the download ends */
    sim_time off;        /* when the client goes offline, losing the job (DEV_TIME_NEVER) */
    sim_time train_est;  /* the job as dev_price priced it alone, for busy_until's estimate: */
    sim_time up_est;     /*   training and upload durations */
    sim_time flow_start; /* the current transfer's flow: when it started, */
    sim_time own_ns;     /*   and how long it takes on the client's own link alone */
    sim_time wait_ns;    /* clients.tsv's net_wait_s: transfers' time beyond own_ns, summed */
    int phase;           /* SIM_NJ_* */
} sim_netjob;

/* A client's energy and battery (engine_energy.c; runs where some profile has power figures) */
typedef struct sim_energy {
    dev_batt b;
    double energy_j;  /* what its jobs drew so far (clients.tsv's energy_j) */
    int battery_lost; /* jobs lost to the battery's floor */
    int job_dies;     /* the job in flight ends at the floor (its loss is the battery's) */
} sim_energy;

/* The next flows' last bits (engine_net.c): an event of the engine's own, after the logged
 * kinds, never written to the event log */
enum { SIM_EV_FLOW_END = SIM_EV_COUNT };

/* A dispatched job the simulation has not placed yet (engine_jobs.c): its result may still be
 * training on a worker. */
typedef struct sim_pending {
    sim_job_out out; /* the result once out.done (the pool writes it: the struct stays put) */
    int32_t client;
    uint64_t id;       /* the job's id (sim_client.job_id) */
    uint64_t seq;      /* the first of the event seqs reserved for it at dispatch */
    size_t down_len;   /* its down message's length */
    sim_time down_end; /* when its download ends */
    sim_time train_lo; /* the least instant its training can end (exact when .exact) */
    sim_time off;      /* the device's next availability change after dispatch */
    sim_time need_at;  /* placed before any event at or after this instant */
    double flops;      /* with .exact: the FLOPs the device executes */
    int predicted;     /* the fields above are set (predict) */
    int exact;         /* FL_FIXED_COST: train_lo and flops are the job's own */
    int lost;          /* the device goes offline before train_lo: placed whole at dispatch */
    int sent;          /* trained on a worker */
    int down_placed;   /* its download's end (and a loss, if .lost) is in the queue */
    int dies;          /* with .lost: the loss is its battery's (devices.energy) */
    long events_at;    /* events logged when it was dispatched (the lookahead log's) */
} sim_pending;

/* async: an update waiting for the next aggregation */
typedef struct sim_buffered {
    int32_t client, staleness;
    void *up; /* the update, moved out of the client (owned) */
    size_t up_len;
    double weight;
} sim_buffered;

enum { OUT_METRICS, OUT_CLIENTS, OUT_EVENTS, OUT_TIMELINE, OUT_COUNT };

/* One column of metrics.tsv as this run writes it (outputs.c resolves the column table). */
typedef struct sim_metrics_col {
    char name[FL_COLUMN_NAME];
    int fmt;    /* how its value (a double) prints (outputs.c) */
    size_t off; /* offsetof its value in sim_metrics */
} sim_metrics_col;

/* The values of one metrics.tsv row: what an evaluation measured, and the run's counters when it
 * did. Personalized accuracies: mean, bottom decile, pooled, under each eval.shift; base_*: the
 * same by the algorithm's base evaluation (fl_algo.base); val: the mean on the clients'
 * validation splits; algo: the algorithm's own columns (fl_algo.columns), in its order. Integers
 * are held as doubles, printed exactly. */
typedef struct sim_metrics {
    double round, time_s, bytes_up, bytes_down, flops, acc_global, loss_global;
    double mean, p10, pooled, participants, dropped, density, energy_j;
    double shift[SIM_MAX_SHIFTS];
    double base_mean, base_p10, base_shift[SIM_MAX_SHIFTS];
    double val;
    double algo[FL_MAX_COLUMNS];
} sim_metrics;

struct sim_engine {
    sim_run_spec spec;
    sim_client *c;
    int n;
    sim_queue q;
    sim_time now;
    void *server;
    fl_worker worker; /* in-process training scratch (no pool) */
    sim_pool *pool;   /* the workers, or NULL: train in this process */
    int eval_procs;   /* processes an evaluation spreads over: the forked workers' count, else 1 */
    nn_model eval_model;
    int32_t **shift_idx; /* [i · n + c]: client c's local test split under eval.shift[i] */
    /* protocol state */
    int round;         /* sync: current round; async: model version */
    int round_open;    /* sync: the current round still takes updates */
    int start_pending; /* sync: set only inside a checkpoint written between a round's close and
                          the next dispatch, so resume starts that round */
    int target;        /* sync: updates the round waits for */
    int in_flight;     /* sync: jobs of the current round not yet arrived or lost */
    int32_t *arrived;  /* sync: clients whose update arrived this round */
    int n_arrived;
    sim_buffered *buf;         /* async: updates waiting for the next aggregation */
    const sim_sel_policy *sel; /* the selection policy (spec.fed.selection, or uniform) */
    const void *sel_cfg;       /* its config (NULL: none) */
    void *sel_state;           /* its state (NULL: none) */
    uint64_t next_job, dispatches;
    int participants; /* updates aggregated at the last aggregation */
    sim_time next_eval_time;
    sim_time retry_at; /* async: when a pending wake-up refills idle slots (-1: none pending) */
    int eval_round;    /* round of the last evaluation (-1: none yet) */
    sim_totals tot;    /* bytes, FLOPs, job counts, last accuracy (now/round kept above) */
    /* outputs (OUT_*; f NULL without a run folder), each write checked (sim_out) */
    sim_out out[OUT_COUNT];
    int trace_errnum; /* errno of the first failed write to spec.trace */
    int eval_failed;  /* an evaluation could not read a client's state: its code; eval_err */
    sim_err eval_err;
    msgpack_packer events_pk;
    sim_metrics_col *mcol; /* metrics.tsv's columns (outputs.c) */
    int n_mcol;
    double wall_start, wall_last, wall_end; /* wall_end: when the run's last event was handled */
    int rounds_at_start; /* rounds done when this process started (a resumed run's ETA) */
    double ckpt_wall;    /* wall time of the last checkpoint (or of the start) */
    int ckpt_round;      /* rounds/aggregations done at the last checkpoint written, -1 = none */
    int done;
    int resumed;        /* restored from a checkpoint: the run continues instead of starting */
    sim_store *store;   /* every client's private state by id (out_dir/state.mdb, or memory) */
    uint64_t store_tag; /* the store's commit the last checkpoint names (0: none yet) */
    int has_states;     /* a client holds a private state, or the server a row (fl_rows):
                           checkpoints commit the store */
    fl_rows rows;       /* spec.env.rows: the server's per-client rows in store (engine_rows.c) */
    int rows_failed;    /* a row could not be read or written: its code; rows_err */
    sim_err rows_err;
    size_t row_len; /* the longest row put (an evaluation's batches count it per client) */
    /* an evaluation's batch of rows, read before its helpers fork (sim_eng_rows_fetch):
     * fetch_id sorted, a row at fetch_data + fetch_at (SIZE_MAX: none) of fetch_len bytes */
    int fetching, n_fetch;
    int32_t *fetch_id;
    size_t *fetch_at, *fetch_len;
    unsigned char *fetch_data;
    long state_reads;   /* the store's reads from disk, and its files' bytes, kept when it */
    double state_disk;  /*   closes at the end */
    int stopped;        /* stopped on request after writing a checkpoint */
    sim_pending **pend; /* jobs dispatched and not yet placed (engine_jobs.c), any order */
    int n_pend, cap_pend;
    sim_time need_min; /* the least need_at of pend (DEV_TIME_NEVER: none), kept as it changes */
    fl_env price_env;  /* spec.env in cost-only mode: prices FL_FIXED_COST jobs */
    fl_worker price_worker; /* its scratch (and job_bound's) */
    sim_net *net;           /* the shared links (spec.net), or NULL: transfers priced alone */
    sim_netjob *nj;         /* [n] with net */
    sim_time net_next;      /* with net: when the queued SIM_EV_FLOW_END fires, -1 none */
    /* with net: links.tsv (f NULL without a run folder), each link's load as its last row gave
     * it, whether a flow started or stopped since the last rows, and, restored from a
     * checkpoint, the file's length then (-1: none, it is written anew) */
    sim_out links_out;
    double *link_used;
    int links_touched;
    int64_t links_len;
    sim_energy *en;  /* [n] when some profile has power figures, else NULL */
    double energy_j; /* with en: what every job that ended drew */
};

/* engine.c: the loop's services to the protocols */
double sim_eng_wall_s(void);
/* Updates that can arrive for one aggregation (+1): sync, the jobs a round starts (at most n);
 * async, the buffer. Sizes the arrival arrays. */
int sim_eng_arrival_cap(const sim_fed_config *f, int n);
void sim_eng_schedule(sim_engine *e, sim_time at, int kind, int32_t who, uint64_t arg);
/* Pick up to k idle, online, eligible clients by the selection policy (its stream at
 * stream_index) into out, in client-id order. */
int sim_eng_select_clients(sim_engine *e, int k, int32_t *out, uint64_t stream_index);
/* Client c as the selection policy's view shows it (sim_sel_view.client; ctx: the engine). */
void sim_eng_sel_client(const void *ctx, int32_t c, sim_sel_client *out);
void sim_eng_sort_ids(int32_t *ids, int n);
/* The rates client c's job job_id transfers at (bit/s): its profile's, or, when the profile
 * draws them per transfer (dev_profile.up_draw/down_draw), that job's draws from (seed,
 * SIM_RNG_TRANSFER, job_id): a function of the job alone, so a checkpoint need not keep them. */
void sim_eng_job_rates(const sim_engine *e, int32_t c, uint64_t job_id, double *down, double *up);
/* engine_jobs.c */
/* Dispatch jobs to the n clients in sel now, counting each in in_flight. */
int sim_eng_dispatch_batch(sim_engine *e, const int32_t *sel, int n, sim_err *err);
/* 1 when client c's job is not yet placed. */
int sim_eng_job_pending(const sim_engine *e, int32_t c);
/* Open e->store: the clients' private states in the run folder's state.mdb behind a cache of
 * spec.state_memory bytes (resume: the existing file, checked to be this run's), or all in memory
 * for a run without a folder. */
int sim_eng_store_open(sim_engine *e, int resume, sim_err *err);
/* Client c's private state from the store (it holds one: priv_len > 0), checked against the
 * length the engine recorded; *data is the store's, valid until its next call. */
int sim_eng_state_get(sim_engine *e, int32_t c, const void **data, size_t *len, sim_err *err);
/* engine_rows.c */
/* Point spec.env.rows at the engine's rows, before the server is made. */
void sim_eng_rows_init(sim_engine *e);
/* The first row that could not be read or written, as the run's error (0: none). */
int sim_eng_rows_failed(sim_engine *e, sim_err *err);
/* Read the rows of clients ids (n, any order, repeats allowed) from the store, and serve the
 * server's reads from them until sim_eng_rows_unfetch (an evaluation's helpers must not use the
 * store); nothing for an algorithm without FL_EVAL_ROWS. */
int sim_eng_rows_fetch(sim_engine *e, const int32_t *ids, int n, sim_err *err);
void sim_eng_rows_unfetch(sim_engine *e);
/* Place every job needed at or before upto (DEV_TIME_NEVER: all), waiting for its result. */
int sim_eng_jobs_due(sim_engine *e, sim_time upto, sim_err *err);
void sim_eng_jobs_free(sim_engine *e);
/* After the updates are absorbed: aggregate them (participants of them), count the round, then
 * evaluate when due, report progress; done once the last round is reached. */
void sim_eng_aggregate(sim_engine *e, int participants);

/* sync.c */
int sim_sync_start_round(sim_engine *e, sim_err *err);
int sim_sync_close_round(sim_engine *e, sim_err *err);
int sim_sync_arrival(sim_engine *e, int32_t c, sim_err *err);
int sim_sync_lost(sim_engine *e, int32_t c, sim_err *err);

/* async.c */
int sim_async_fill(sim_engine *e, sim_err *err);
int sim_async_arrival(sim_engine *e, int32_t c, sim_err *err);
int sim_async_lost(sim_engine *e, sim_err *err);

/* eval.c */
int sim_eng_has_base(const sim_engine *e);
int sim_eng_has_val(const sim_engine *e);
void sim_eng_build_shifts(sim_engine *e);
/* eval.clients' sample, sorted, into out[n] (NULL: only counted); returns its size, with the
 * clients that have a local test split in *n_split (NULL: not wanted). */
int sim_eng_eval_sample(const sim_engine *e, int32_t *out, int *n_split);
void sim_eng_evaluate(sim_engine *e);
void sim_eng_maybe_evaluate(sim_engine *e, int force);

/* outputs.c */
void sim_eng_ckpt_path(const sim_engine *e, char *buf, size_t n);
/* A fresh run: remove a stale checkpoint, create the output files. */
int sim_eng_outputs_create(sim_engine *e, sim_err *err);
/* A resumed run: check and cut the outputs back to the checkpoint's lengths. */
int sim_eng_outputs_reopen(sim_engine *e, const uint64_t out_len[OUT_COUNT], sim_err *err);
/* Resolve metrics.tsv's columns, then write the headers (a fresh run's files only). */
int sim_eng_outputs_begin(sim_engine *e, sim_err *err);
int sim_eng_outputs_failed(sim_engine *e, sim_err *err);
void sim_eng_log_event(sim_engine *e, int kind, int32_t who, double bytes, double flops);
void sim_eng_timeline_row(sim_engine *e, int32_t c, const char *phase, sim_time start,
                          const char *outcome);
void sim_eng_metrics_row(sim_engine *e, const sim_metrics *m);
void sim_eng_progress(sim_engine *e, int final);
void sim_eng_tick(sim_engine *e, int final);
/* The finished run: clients.tsv's rows, every output flushed to disk and closed. */
int sim_eng_outputs_finish(sim_engine *e, sim_err *err);
/* The algorithm's report file (fl_algo.report), when it has one. */
int sim_eng_write_report(sim_engine *e, sim_err *err);
void sim_eng_outputs_free(sim_engine *e);

/* engine_net.c: transfers as flows over shared links (spec.net) */
void sim_eng_net_new(sim_engine *e);
void sim_eng_net_free(sim_engine *e);
/* Client c's job was just dispatched, its download down_bytes long: start it, and place its loss
 * (with the job's reserved seqs from seq: engine_jobs.c). */
void sim_eng_net_start(sim_engine *e, int32_t c, double down_bytes, uint64_t seq);
/* Its result is in (job and ph as dev_price priced it alone): what it trains, and the estimates
 * of its phases busy_until takes. Before its download can have ended (engine_jobs.c). */
void sim_eng_net_work(sim_engine *e, int32_t c, const dev_job *job, const dev_phases *ph);
/* Before time moves on from now (no event left at now): the flows' new rates, their end events
 * moved; nothing while events at now remain. */
void sim_eng_net_settle(sim_engine *e);
int sim_eng_net_flow_end(sim_engine *e, const sim_event *ev);
void sim_eng_net_download_done(sim_engine *e, int32_t c);
void sim_eng_net_train_done(sim_engine *e, int32_t c);
/* The job ended now (arrived, or lost: its flow is freed). */
void sim_eng_net_job_end(sim_engine *e, int32_t c);
/* links.tsv, created (resume 0, its header written) or, resuming, cut back to the length the
 * checkpoint counted; when the run has a run folder. */
int sim_eng_net_links_open(sim_engine *e, int resume, sim_err *err);
/* The network's part of a checkpoint: its flows and the clients' sim_netjob. unpack returns
 * NULL, or what it refused. */
void sim_eng_net_pack(sim_engine *e, msgpack_packer *pk);
const char *sim_eng_net_unpack(sim_engine *e, const msgpack_object *o, char *why, size_t n);

/* engine_energy.c: job energy and batteries (devices/energy.h), with en only */
int sim_eng_energy_new(sim_engine *e, sim_err *err);
void sim_eng_energy_free(sim_engine *e);
int sim_eng_has_energy(const sim_engine *e);
/* 1 when client c's battery is above its floor now (it may take a job). */
int sim_eng_energy_ok(sim_engine *e, int32_t c);
/* Client c's job is dispatched now: its battery, idle until now, is brought to now. */
void sim_eng_energy_start(sim_engine *e, int32_t c);
/* The instant client c's battery (as sim_eng_energy_start left it) reaches its floor in a job
 * with these phase ends (DEV_TIME_NEVER: the phase does not end), when that is before end (its
 * upload's end, or the client going offline); DEV_TIME_NEVER otherwise. The caller sets
 * job_dies. */
sim_time sim_eng_energy_death(const sim_engine *e, int32_t c, sim_time down_end, sim_time train_end,
                              sim_time up_end, sim_time end);
/* Client c's job ended now (arrived, or lost): its phases' energy is counted and drawn from its
 * battery. Returns 1 when it was lost to the battery. */
int sim_eng_energy_job_end(sim_engine *e, int32_t c);
/* Client c's battery as a selection policy's view shows it (sim_sel_client.battery_j,
 * charging_w), as of its last move (the engine moves an idle candidate's to now as it tests it
 * eligible). */
void sim_eng_energy_view(const sim_engine *e, int32_t c, double *battery_j, double *charging_w);
/* 1 when client c's device charges now (a device without a battery: always, it is on mains). */
int sim_eng_energy_charging(sim_engine *e, int32_t c);
/* When idle client c may next change (its availability, or its battery charging above the
 * floor): what a round or async refill waits for. */
sim_time sim_eng_next_change(sim_engine *e, int32_t c);
/* An event's energy_j (what the phase of client who's job that ends now drew: download_done,
 * train_done, upload_done, job_lost; 0 for the others) and reason (job_lost's: "battery" or
 * "offline"). */
void sim_eng_energy_event(const sim_engine *e, int kind, int32_t who, double *joules,
                          const char **reason);
/* clients.tsv's energy_j and battery_end columns (with a tab after each): client c's values,
 * or the header's when c < 0; "" without energy */
void sim_eng_energy_cols(sim_engine *e, int32_t c, char *buf, size_t n);
void sim_eng_energy_pack(sim_engine *e, msgpack_packer *pk);
const char *sim_eng_energy_unpack(sim_engine *e, const msgpack_object *o, char *why, size_t n);

/* engine_ckpt.c */
/* A periodic checkpoint is due (every checkpoint_every rounds, once per round). */
int sim_eng_ckpt_due(const sim_engine *e);
int sim_eng_ckpt_write(sim_engine *e, sim_err *err);
/* Read, verify and restore out_dir/checkpoint.msgpack or spec.resume_payload into e, fresh from
 * construction; the output lengths it counted go to out_len. */
int sim_eng_ckpt_load(sim_engine *e, uint64_t out_len[OUT_COUNT], sim_err *err);

#endif /* SIM_ENGINE_INT_H */
