/* sim/engine.c -- the event loop, the sync and async federation protocols, evaluation and the
 * run's output files (see engine.h).
 *
 * Workload: up to ~10^6 clients, of which at most a few thousand have a job in flight; per job a
 * handful of events. Per-client state is a small struct; messages and private state exist only
 * for clients that have them. A job is lost when its client goes offline before the upload ends;
 * lost and late jobs keep their device busy until they would have ended, as a real device would.
 */
#include "sim/engine.h"

#include "nn/pack.h"
#include "nn/train.h"
#include "sim/checkpoint.h"
#include "sim/cost.h"
#include "sim/fanout.h"
#include "sim/pool.h"
#include "sim/queue.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *const sim_event_names[SIM_EV_COUNT] = {
        "round_start", "dispatch",  "download_done", "train_done", "upload_done", "job_lost",
        "deadline",    "aggregate", "evaluate",      "late",       "retry",
};

typedef struct sim_client {
    dev_avail_proc avail;
    int busy;            /* a job is in flight (its device is working) */
    int excluded;        /* its device cannot hold the model: never selected */
    int32_t job_round;   /* round (sync) or model version (async) the job started from */
    uint64_t job_id;     /* identifies the job its events belong to */
    sim_time busy_until; /* when the device is free again */
    void *up;            /* the job's up message until the upload is absorbed (owned) */
    size_t up_len;
    void *priv; /* private state (owned), committed when training ends */
    size_t priv_len;
    void *pending_priv; /* the job's new private state until its training ends (owned) */
    size_t pending_priv_len;
    double weight;                                   /* training samples (FedAvg weight) */
    double job_flops;                                /* FLOPs the job's device executes */
    sim_time job_start, job_down_end, job_train_end; /* the current job's phases (timeline) */
    /* statistics for clients.tsv */
    int jobs, completed, lost, late;
    double bytes_up, bytes_down, flops;
    sim_time busy_ns;
    double acc; /* personalized accuracy at the last evaluation, NaN before */
} sim_client;

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
    struct buffered { /* async: updates waiting for the next aggregation */
        int32_t client, staleness;
        void *up; /* the update, moved out of the client (owned) */
        size_t up_len;
        double weight;
    } * buf;
    uint32_t *perm; /* selection permutation */
    uint64_t next_job, dispatches;
    int participants; /* updates aggregated at the last aggregation */
    sim_time next_eval_time;
    sim_time retry_at; /* async: when a pending wake-up refills idle slots (-1: none pending) */
    int eval_round;    /* round of the last evaluation (-1: none yet) */
    sim_totals tot;    /* bytes, FLOPs, job counts, last accuracy (now/round kept above) */
    /* outputs (OUT_*; f NULL without a run folder), each write checked (sim_out) */
    sim_out out[4];
    int trace_errnum; /* errno of the first failed write to spec.trace */
    msgpack_packer events_pk;
    double wall_start, wall_last;
    int rounds_at_start; /* rounds done when this process started (a resumed run's ETA) */
    double ckpt_wall;    /* wall time of the last checkpoint (or of the start) */
    int ckpt_round;      /* rounds/aggregations done at the last checkpoint written, -1 = none */
    int done;
    int resumed; /* restored from a checkpoint: the run continues instead of starting */
    int stopped; /* stopped on request after writing a checkpoint */
};

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------- */
/* event log */

enum { OUT_METRICS, OUT_CLIENTS, OUT_EVENTS, OUT_TIMELINE };
static const char *const out_names[4] = {"metrics.tsv", "clients.tsv", "events.msgpack",
                                         "timeline.tsv"};

static int write_events_cb(void *data, const char *buf, size_t len)
{
    sim_out *o = data;
    sim_out_write(o, buf, len);
    return o->errnum ? -1 : 0;
}

/* The first write that failed, to an output or the trace, as the run's error (a run must not go
 * on, and above all not checkpoint or finish, past output it lost). */
static int outputs_failed(sim_engine *e, sim_err *err)
{
    for (int i = 0; i < 4; i++)
        if (e->out[i].errnum) return sim_out_flush(&e->out[i], 0, err);
    if (e->trace_errnum)
        return sim_fail(err, SIM_EIO, e->spec.trace_path ? e->spec.trace_path : "trace", 0, 0,
                        "cannot write: %s", strerror(e->trace_errnum));
    return SIM_OK;
}

/* Every event: [time_ns, kind, client, round, bytes, flops] in events.msgpack, and as one text
 * line in the trace when one is asked for. */
static void log_event(sim_engine *e, int kind, int32_t who, double bytes, double flops)
{
    e->tot.events++;
    if (e->out[OUT_EVENTS].f) {
        msgpack_packer *pk = &e->events_pk;
        msgpack_pack_array(pk, 6);
        msgpack_pack_int64(pk, e->now);
        msgpack_pack_int(pk, kind);
        msgpack_pack_int32(pk, who);
        msgpack_pack_int32(pk, e->round);
        msgpack_pack_double(pk, bytes);
        msgpack_pack_double(pk, flops);
    }
    if (e->spec.trace && !e->trace_errnum) {
        errno = 0;
        if (fprintf(e->spec.trace,
                    "[%16.9f] %-13s client=%d round=%d from=%d bytes=%.0f flops=%.0f\n",
                    sim_time_to_s(e->now), sim_event_names[kind], who, e->round,
                    who >= 0 ? e->c[who].job_round : -1, bytes, flops) < 0)
            e->trace_errnum = errno ? errno : EIO;
    }
}

/* One job phase of client c in timeline.tsv, written when it ends (finished, lost or late). */
static void timeline_row(sim_engine *e, int32_t c, const char *phase, sim_time start,
                         const char *outcome)
{
    if (!e->out[OUT_TIMELINE].f) return;
    /* seconds printed exactly from integer ns: a million-job run writes millions of these rows,
     * and integer formatting is several times cheaper than %.9f of a double */
    sim_out_printf(&e->out[OUT_TIMELINE], "%d\t%d\t%s\t%lld.%09lld\t%lld.%09lld\t%s\n", c,
                   e->c[c].job_round, phase, (long long)(start / SIM_SEC),
                   (long long)(start % SIM_SEC), (long long)(e->now / SIM_SEC),
                   (long long)(e->now % SIM_SEC), outcome);
}

/* Flush what observers read, then let them look (engine.h: on_tick). A failed flush is kept in
 * the output's errnum, which stops the run (outputs_failed). */
static void tick(sim_engine *e, int final)
{
    if (!e->spec.on_tick) return;
    if (e->out[OUT_TIMELINE].f) sim_out_flush(&e->out[OUT_TIMELINE], 0, NULL);
    e->spec.on_tick(e->spec.tick_arg, e->round, final);
}

/* ---------------------------------------------------------------------------------------- */
/* devices */

static int online(sim_engine *e, int32_t c, sim_time t)
{
    return dev_avail_online(&e->c[c].avail, t);
}

double sim_message_bytes(const sim_run_spec *spec, size_t len)
{
    return len ? (double)len + spec->fed.overhead_bytes : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* jobs */

static void schedule(sim_engine *e, sim_time at, int kind, int32_t who, uint64_t arg)
{
    assert(at >= e->now && "never schedule into the past");
    sim_queue_push(&e->q, at, kind, who, arg);
}

/* Finish dispatching a job to client c now, given what its training produced: count the download,
 * and schedule its phases (or its loss, if the client goes offline first). The in-process and the
 * worker-pool paths both end here, in client-id order, so their events are the same. */
static int finish_dispatch(sim_engine *e, int32_t c, size_t down_len, sim_job_out *out,
                           sim_err *err)
{
    sim_client *cl = &e->c[c];
    const dev_profile *dev = &e->spec.devices[c];
    fl_result *r = &out->res;
    if (out->rc) {
        *err = out->err;
        return out->rc;
    }
    if (!isfinite(r->loss))
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "training diverged: client %d's loss is %g in round %d (lower "
                        "algorithm.lr, or set algorithm.clip)",
                        c, r->loss, e->round);
    double db = sim_message_bytes(&e->spec, down_len);
    dev_job job = {.work = sim_cost_work(&r->cost, r->steps),
                   .down_bytes = db,
                   .up_bytes = sim_message_bytes(&e->spec, r->up_bytes),
                   .down_always = 1};
    dev_phases ph;
    dev_price(dev, &job, e->now, &ph);
    sim_time t_down = ph.down_end, t_train = ph.train_end, t_up = ph.up_end;
    uint64_t id = ++e->next_job;
    cl->busy = 1;
    cl->job_round = e->round;
    cl->job_id = id;
    cl->jobs++;
    e->tot.jobs++;
    e->dispatches++;
    free(cl->up);
    cl->up = NULL;
    cl->up_len = r->up_bytes; /* in cost-only mode the size exists without the content */
    /* The client keeps the result's buffers themselves: a copy of a model-sized message would
     * touch fresh pages for every job of every round (a fifth of the coordinator's time). */
    if (r->up.size) cl->up = msgpack_sbuffer_release(&r->up);
    free(cl->pending_priv);
    cl->pending_priv = NULL;
    cl->pending_priv_len = r->priv.size;
    if (r->priv.size) cl->pending_priv = msgpack_sbuffer_release(&r->priv);
    /* The server sends the whole download at dispatch: its bytes count now. */
    cl->bytes_down += db;
    e->tot.bytes_down += db;
    log_event(e, SIM_EV_DISPATCH, c, db, 0);
    sim_time off = dev_avail_next_change(&cl->avail, e->now);
    if (t_up == DEV_TIME_NEVER && off == DEV_TIME_NEVER)
        off = e->now; /* the device can never finish (its speed stays 0): the job is lost now */
    sim_time end = off < t_up ? off : t_up;
    cl->busy_until = end;
    cl->busy_ns += end - e->now;
    if (t_down <= end) schedule(e, t_down, SIM_EV_DOWNLOAD_DONE, c, id);
    /* what the device executed: the masked-out FLOPs its sparse runtime skips are not counted */
    cl->job_flops = ph.flops;
    cl->job_start = e->now;
    cl->job_down_end = t_down;
    cl->job_train_end = t_train;
    if (t_train <= end) schedule(e, t_train, SIM_EV_TRAIN_DONE, c, id);
    if (off < t_up)
        schedule(e, off, SIM_EV_JOB_LOST, c, id);
    else if (r->up_bytes) /* without an upload, the job arrives when its training ends */
        schedule(e, t_up, SIM_EV_UPLOAD_DONE, c, id);
    cl->weight = e->spec.env.cfg->uniform ? 1 : e->spec.env.part->n[c];
    return SIM_OK;
}

/* Dispatch jobs to the n clients in sel (client-id order) now, counting each in in_flight. All
 * jobs are built (down message, private state) and trained first, in this process or on the
 * workers, which may run them in any order: a job is a pure function of what it was sent and
 * nothing is scheduled until every result is back. Then each dispatch is finished in sel's order.
 * A job's down message lives only until its job is handed over. */
static int dispatch_batch(sim_engine *e, const int32_t *sel, int n, sim_err *err)
{
    const fl_algo *algo = e->spec.algo;
    int cost_only = e->spec.env.cost_only, rc = SIM_OK;
    sim_job_out *out = sim_xcalloc((size_t)(n > 0 ? n : 1), sizeof *out);
    size_t *down_len = sim_xcalloc((size_t)(n > 0 ? n : 1), sizeof *down_len);
    for (int i = 0; i < n; i++)
        fl_result_init(&out[i].res);
    if (e->pool) sim_pool_begin(e->pool, n, out);
    /* Hand the largest jobs out first (longest-processing-time order, by training samples), so
     * that with several workers the batch does not wait on one big job started last. The order
     * of training cannot change a result; the pool-less path keeps sel's order. */
    int *order = sim_xmalloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++)
        order[i] = i;
    if (e->pool)
        for (int i = 1; i < n; i++) { /* insertion sort: a batch is small, and this is stable */
            int k = order[i], j = i;
            for (; j > 0 && e->spec.env.part->n[sel[order[j - 1]]] < e->spec.env.part->n[sel[k]];
                 j--)
                order[j] = order[j - 1];
            order[j] = k;
        }
    msgpack_sbuffer down;
    msgpack_sbuffer_init(&down);
    for (int o = 0; o < n && !rc; o++) {
        int i = order[o];
        sim_client *cl = &e->c[sel[i]];
        msgpack_sbuffer_clear(&down);
        down_len[i] = algo->job_down(e->server, sel[i], e->round, cost_only ? NULL : &down);
        uint64_t stream = e->spec.fed.mode == SIM_SYNC
                                  ? (uint64_t)sel[i] << 32 | (uint32_t)e->round
                                  : (uint64_t)1 << 63 | (e->dispatches + (uint64_t)i);
        fl_job job = {sel[i], e->round, down.data, down.size, cl->priv, cl->priv_len, stream};
        if (e->pool)
            rc = sim_pool_submit(e->pool, i, &job, err);
        else
            out[i].rc =
                    algo->client_train(&e->spec.env, &job, &e->worker, &out[i].res, &out[i].err);
    }
    msgpack_sbuffer_destroy(&down);
    if (!rc && e->pool) rc = sim_pool_wait(e->pool, err);
    for (int i = 0; i < n && !rc; i++)
        if (!(rc = finish_dispatch(e, sel[i], down_len[i], &out[i], err))) e->in_flight++;
    for (int i = 0; i < n; i++)
        fl_result_destroy(&out[i].res);
    free(out);
    free(down_len);
    free(order);
    return rc;
}

/* Pick up to k idle, online, eligible clients uniformly at random (partial Fisher-Yates over a
 * persistent permutation: any starting order gives a uniform sample). */
static int select_clients(sim_engine *e, int k, int32_t *out, uint64_t stream_index)
{
    sim_rng r;
    sim_rng_seed(&r, e->spec.seed, SIM_RNG_SELECT, stream_index);
    int got = 0;
    for (int i = 0; i < e->n && got < k; i++) {
        uint32_t j = (uint32_t)(i + (int)sim_rng_below(&r, (uint64_t)(e->n - i)));
        uint32_t t = e->perm[i];
        e->perm[i] = e->perm[j];
        e->perm[j] = t;
        int32_t c = (int32_t)e->perm[i];
        sim_client *cl = &e->c[c];
        if (cl->excluded || cl->busy || !online(e, c, e->now)) continue;
        out[got++] = c;
    }
    return got;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* ---------------------------------------------------------------------------------------- */
/* evaluation (an observer: it costs no simulated time) */

/* The personalized accuracies of one evaluation: mean, bottom decile, pooled, under each
 * eval.shift; base: the same by the algorithm's base evaluation (fl_algo.base); val: the mean
 * on the clients' validation splits. */
typedef struct pers_acc {
    double mean, p10, pooled, shift[SIM_MAX_SHIFTS];
    double base_mean, base_p10, base_shift[SIM_MAX_SHIFTS];
    double val;
} pers_acc;

/* Whether metrics.tsv has the base columns: the algorithm names a base and clients are
 * evaluated on their own splits. */
static int has_base(const sim_engine *e)
{
    return e->spec.algo->base && e->spec.eval.personalized;
}

/* Whether metrics.tsv has acc_val_mean: clients are evaluated on their own splits and the
 * partition sets validation splits apart (partition.local_val). */
static int has_val(const sim_engine *e)
{
    return e->spec.eval.personalized && e->spec.env.part->val_idx;
}

static void write_metrics_row(sim_engine *e, const pers_acc *pa, double density)
{
    sim_out *m = &e->out[OUT_METRICS];
    if (!m->f) return;
    sim_out_printf(m, "%d\t%.9f\t%.0f\t%.0f\t%.6g\t%.6f\t%.6f\t%.6f\t%.6f\t%.6f\t%d\t%ld\t%.6f",
                   e->round, sim_time_to_s(e->now), e->tot.bytes_up, e->tot.bytes_down,
                   e->tot.flops, e->tot.acc_global, e->tot.loss_global, pa->mean, pa->p10,
                   pa->pooled, e->participants, e->tot.dropped + e->tot.late, density);
    int ns = e->spec.eval.n_shift;
    for (int i = 0; i < ns; i++)
        sim_out_printf(m, "\t%.6f", pa->shift[i]);
    if (has_base(e)) {
        sim_out_printf(m, "\t%.6f\t%.6f", pa->base_mean, pa->base_p10);
        for (int i = 0; i < ns; i++)
            sim_out_printf(m, "\t%.6f", pa->base_shift[i]);
    }
    if (has_val(e)) sim_out_printf(m, "\t%.6f", pa->val);
    sim_out_printf(m, "\n");
    sim_out_flush(m, 0, NULL); /* a failure is kept in m->errnum */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* eval.shift: client c's split under shift p keeps its size; a random round(p·n) of its samples
 * are replaced by samples drawn without replacement from the pool of every client's split (the
 * paper's meta-distribution). The draws come from the stream (seed, SIM_RNG_SHIFT, c) and are
 * nested: a larger p replaces the same samples and more, so every method and run sees the same
 * shifted sets. */
static void build_shifts(sim_engine *e)
{
    const nn_partition *part = e->spec.env.part;
    int ns = e->spec.eval.n_shift;
    size_t pool_n = 0;
    for (int c = 0; c < e->n; c++)
        pool_n += (size_t)(part->n_test[c] > 0 ? part->n_test[c] : 0);
    int32_t *pool = sim_xmalloc(sizeof(int32_t) * (pool_n + 1)),
            *draw = sim_xmalloc(sizeof(int32_t) * (pool_n + 1));
    for (int c = 0, k = 0; c < e->n; c++)
        for (int j = 0; j < part->n_test[c]; j++)
            pool[k++] = part->test_idx[c][j];
    e->shift_idx = sim_xcalloc((size_t)ns * (size_t)e->n, sizeof *e->shift_idx);
    for (int c = 0; c < e->n; c++) {
        int n = part->n_test[c];
        if (n <= 0) continue;
        sim_rng r;
        sim_rng_seed(&r, e->spec.seed, SIM_RNG_SHIFT, (uint64_t)c);
        uint32_t *where = sim_xmalloc(sizeof(uint32_t) * (size_t)n);
        for (int j = 0; j < n; j++)
            where[j] = (uint32_t)j;
        sim_rng_shuffle_u32(&r, where, (size_t)n);
        memcpy(draw, pool, sizeof(int32_t) * pool_n);
        for (size_t j = 0; j < (size_t)n && j < pool_n; j++) { /* partial Fisher-Yates */
            size_t q = j + (size_t)sim_rng_below(&r, pool_n - j);
            int32_t t = draw[j];
            draw[j] = draw[q];
            draw[q] = t;
        }
        for (int i = 0; i < ns; i++) {
            int32_t *l = sim_xmalloc(sizeof(int32_t) * (size_t)n);
            memcpy(l, part->test_idx[c], sizeof(int32_t) * (size_t)n);
            int k = (int)floor(e->spec.eval.shift[i] * n + 0.5);
            for (int j = 0; j < k; j++)
                l[where[j]] = draw[j];
            e->shift_idx[(size_t)i * (size_t)e->n + (size_t)c] = l;
        }
        free(where);
    }
    free(pool);
    free(draw);
}

/* Client c's personalized accuracy on samples idx[0..n) of d; *dens gets its model's density.
 * base: by the base evaluation (its model from eval_params, evaluated plainly). */
static double client_accuracy(sim_engine *e, int32_t c, const nn_dataset *d, const int32_t *idx,
                              int n, double *dens, int base)
{
    const fl_algo *a = e->spec.algo;
    nn_model *m = &e->eval_model;
    *dens = 1;
    if (a->eval_client && !base)
        return a->eval_client(e->server, c, e->c[c].priv, e->c[c].priv_len, d, idx, n, m, dens);
    *dens = a->eval_params(e->server, c, e->c[c].priv, e->c[c].priv_len, m);
    return nn_evaluate(m, d, idx, n, NULL);
}

/* Evaluation as independent tasks (sim/fanout.h): first the global model's test set in chunks
 * of the evaluation batch, then every client's personalized accuracy on its own split, then on
 * its split under each nonzero eval.shift, then on its validation split (has_val). Each writes
 * three numbers: a chunk its correct count and loss·B (summed afterwards in chunk order, exactly
 * as nn_evaluate sums), a client its accuracy (NaN on an empty validation split), its model's
 * density and its accuracy by the base evaluation (NaN without one, and on validation). */
enum { VAL_TASK = -2 }; /* eval_tasks.shift of a client's validation task */

typedef struct eval_tasks {
    sim_engine *e;
    int nt, n_chunks; /* global: samples evaluated, chunks of them */
    int n_pers;       /* personalized tasks */
    int32_t *client;  /* of personalized task k */
    int *shift;       /* its eval.shift index, -1 for the client's own split, VAL_TASK */
    int holds_global; /* this process's eval model holds the global model */
} eval_tasks;

static void eval_task(void *ctx, int i, void *out)
{
    eval_tasks *t = ctx;
    sim_engine *e = t->e;
    const fl_env *env = &e->spec.env;
    nn_model *m = &e->eval_model;
    double *o = out;
    if (i < t->n_chunks) {
        if (!t->holds_global) e->spec.algo->eval_params(e->server, -1, NULL, 0, m);
        t->holds_global = 1;
        int s = i * m->max_batch, B = t->nt - s < m->max_batch ? t->nt - s : m->max_batch,
            f = nn_dataset_features(env->test);
        double l;
        o[0] = nn_model_evaluate(m, env->test->x + (size_t)s * f, env->test->y + s, B, &l);
        o[1] = l * B;
        o[2] = 0;
        return;
    }
    int k = i - t->n_chunks, sh = t->shift[k];
    int32_t c = t->client[k];
    t->holds_global = 0;
    const nn_dataset *src = env->part->test_from_train ? env->train : env->test;
    if (sh == VAL_TASK) {
        int n = env->part->n_val[c];
        o[0] = n ? client_accuracy(e, c, src, env->part->val_idx[c], n, &o[1], 0) : NAN;
        o[2] = NAN;
        return;
    }
    const int32_t *idx =
            sh < 0 ? env->part->test_idx[c] : e->shift_idx[(size_t)sh * (size_t)e->n + (size_t)c];
    o[0] = client_accuracy(e, c, src, idx, env->part->n_test[c], &o[1], 0);
    double dens;
    o[2] = has_base(e) ? client_accuracy(e, c, src, idx, env->part->n_test[c], &dens, 1) : NAN;
}

/* Mean, bottom decile and mean under each eval.shift of k clients' accuracies, the i-th
 * client's on its own split at r[3·i·per], under its j-th nonzero shift at r[3·(i·per + 1 + j)]
 * (shift 0 is the own split). */
static void pers_stats(const double *r, int k, int per, int ns, const double *shift, double *mean,
                       double *p10, double *shift_acc)
{
    double *acc = sim_xmalloc(sizeof(double) * (size_t)k), s = 0;
    for (int i = 0; i < k; i++)
        s += acc[i] = r[3 * i * per];
    *mean = s / k;
    for (int sh = 0, j = 1; sh < ns; sh++) {
        int zero = shift[sh] == 0;
        s = 0;
        for (int i = 0; i < k; i++)
            s += r[3 * (i * per + (zero ? 0 : j))];
        j += !zero;
        shift_acc[sh] = s / k;
    }
    qsort(acc, (size_t)k, sizeof *acc, cmp_double);
    *p10 = acc[(k - 1) / 10]; /* bottom decile: the 10th-percentile client */
    free(acc);
}

static void evaluate(sim_engine *e)
{
    const fl_env *env = &e->spec.env;
    e->eval_round = e->round;
    log_event(e, SIM_EV_EVALUATE, -1, 0, 0);
    double density = NAN;
    pers_acc pa = {NAN, NAN, NAN, {0}, NAN, NAN, {0}, NAN};
    for (int i = 0; i < SIM_MAX_SHIFTS; i++)
        pa.shift[i] = pa.base_shift[i] = NAN;
    if (env->cost_only) {
        write_metrics_row(e, &pa, density);
        return;
    }
    nn_model *m = &e->eval_model;
    eval_tasks t = {.e = e};
    if (e->spec.algo->flags & FL_HAS_GLOBAL) {
        density = e->spec.algo->eval_params(e->server, -1, NULL, 0, m);
        t.holds_global = 1;
        t.nt = e->spec.eval.test_subset > 0 && e->spec.eval.test_subset < env->test->n
                       ? e->spec.eval.test_subset
                       : env->test->n;
        t.n_chunks = (t.nt + m->max_batch - 1) / m->max_batch;
    }
    /* a client's tasks are consecutive (its own split, each nonzero shift, its validation
     * split), so an algorithm that prepares a client's model once (FedAvg-FT's fine-tuning) can
     * reuse it */
    int ns = e->spec.eval.n_shift, k = 0, per = 1 + has_val(e);
    for (int sh = 0; sh < ns; sh++)
        per += e->spec.eval.shift[sh] != 0;
    if (e->spec.eval.personalized && env->part->n_test) {
        t.client = sim_xmalloc(sizeof(int32_t) * (size_t)e->n * (size_t)per);
        t.shift = sim_xmalloc(sizeof(int) * (size_t)e->n * (size_t)per);
        for (int32_t c = 0; c < e->n; c++) {
            if (env->part->n_test[c] <= 0) continue;
            for (int sh = -1; sh < ns + has_val(e); sh++)
                if (sh < 0 || sh == ns || e->spec.eval.shift[sh] != 0) {
                    t.client[t.n_pers] = c;
                    t.shift[t.n_pers++] = sh == ns ? VAL_TASK : sh;
                }
            k++;
        }
    }
    int n_tasks = t.n_chunks + t.n_pers;
    double *o = sim_xmalloc(sizeof(double) * 3 * (size_t)(n_tasks > 0 ? n_tasks : 1));
    sim_fanout(e->eval_procs, n_tasks, 3 * sizeof(double), eval_task, &t, o);
    if (e->spec.algo->flags & FL_HAS_GLOBAL) {
        long correct = 0;
        double sum = 0;
        for (int i = 0; i < t.n_chunks; i++) {
            correct += (long)o[3 * i];
            sum += o[3 * i + 1];
        }
        e->tot.acc_global = t.nt ? (double)correct / t.nt : 0;
        e->tot.loss_global = t.nt ? sum / t.nt : 0;
    }
    if (k) {
        /* the i-th client's own split is task i·per, its j-th nonzero shift i·per + 1 + j */
        const double *r = o + 3 * (size_t)t.n_chunks;
        double hit = 0, all = 0, dens = 0;
        for (int i = 0; i < k; i++) {
            int32_t c = t.client[i * per];
            e->c[c].acc = r[3 * i * per];
            dens += r[3 * i * per + 1];
            hit += e->c[c].acc * env->part->n_test[c];
            all += env->part->n_test[c];
        }
        pa.pooled = hit / all; /* every client's test samples pooled (pFedGate's paper's Acc) */
        density = dens / k;    /* personalized models: the mean over the clients evaluated */
        pers_stats(r, k, per, ns, e->spec.eval.shift, &pa.mean, &pa.p10, pa.shift);
        e->tot.acc_pers = pa.mean;
        if (has_base(e))
            pers_stats(r + 2, k, per, ns, e->spec.eval.shift, &pa.base_mean, &pa.base_p10,
                       pa.base_shift);
        if (has_val(e)) { /* each client's last task; the mean over those with a split */
            double sv = 0;
            int nv = 0;
            for (int i = 0; i < k; i++) {
                double acc = r[3 * (i * per + per - 1)];
                if (!isnan(acc)) sv += acc, nv++;
            }
            pa.val = nv ? sv / nv : NAN;
        }
    }
    free(o);
    free(t.client);
    free(t.shift);
    write_metrics_row(e, &pa, density);
}

/* The aggregation's event is over: what the server kept for its evaluation goes. */
static void round_end(sim_engine *e)
{
    if (e->spec.algo->server_round_end) e->spec.algo->server_round_end(e->server);
}

static void maybe_evaluate(sim_engine *e, int force)
{
    const sim_eval_config *ev = &e->spec.eval;
    int due = force || (ev->every_rounds > 0 && e->round % ev->every_rounds == 0);
    if (ev->every_time > 0 && e->now >= e->next_eval_time) {
        due = 1;
        while (e->next_eval_time <= e->now)
            e->next_eval_time += ev->every_time;
    }
    if (due) evaluate(e);
}

/* ---------------------------------------------------------------------------------------- */
/* progress */

static void progress(sim_engine *e, int final)
{
    if (e->spec.quiet) return;
    /* on a terminal one line refreshes every second; in a log, a line every 10 seconds */
    int tty = isatty(fileno(stderr));
    double w = wall_s();
    if (!final && w - e->wall_last < (tty ? 1.0 : 10.0)) return;
    e->wall_last = w;
    int total = e->spec.fed.rounds;
    int done = e->round - e->rounds_at_start;
    double el = w - e->wall_start, eta = done > 0 ? el * (total - e->round) / done : 0;
    char t[32], up[32], down[32];
    sim_format_time(t, sizeof t, e->now);
    sim_format_bytes(up, sizeof up, e->tot.bytes_up);
    sim_format_bytes(down, sizeof down, e->tot.bytes_down);
    fprintf(stderr, "%s%s %d/%d  sim %s  up %s down %s  acc %.4f  wall %.0fs  eta %.0fs%s",
            tty ? "\r" : "", e->spec.fed.mode == SIM_SYNC ? "round" : "aggregation", e->round,
            total, t, up, down, isnan(e->tot.acc_global) ? e->tot.acc_pers : e->tot.acc_global, el,
            eta, tty ? "   " : "\n");
    if (final && tty) fprintf(stderr, "\n");
}

/* ---------------------------------------------------------------------------------------- */
/* synchronous rounds */

/* Updates that can arrive for one aggregation (+1): sync, the jobs a round starts (at most n);
 * async, the buffer. Sizes the arrival arrays. */
static int arrival_cap(const sim_fed_config *f, int n)
{
    if (f->mode != SIM_SYNC) return f->buffer + 1;
    double w = ceil(f->per_round * f->over_commit - 1e-9);
    return (w > n ? n : (int)w) + 1;
}

static int start_round(sim_engine *e, sim_err *err);

/* Hand client c's update to the algorithm (cost-only runs have sizes but no content). */
static int absorb(sim_engine *e, int32_t c, double weight, sim_err *err)
{
    sim_client *cl = &e->c[c];
    int rc = SIM_OK;
    if (!e->spec.env.cost_only)
        rc = e->spec.algo->server_absorb(e->server, c, cl->up, cl->up ? cl->up_len : 0, weight,
                                         cl->weight, err);
    free(cl->up);
    cl->up = NULL;
    return rc;
}

static int write_checkpoint(sim_engine *e, sim_err *err);

/* A checkpoint every checkpoint_every rounds, once per round. */
static int periodic_due(const sim_engine *e)
{
    int every = e->spec.checkpoint_every;
    return every > 0 && e->round % every == 0 && e->ckpt_round != e->round;
}

/* Absorb the arrived updates in client-id order, aggregate, evaluate, start the next round. */
static int close_round(sim_engine *e, sim_err *err)
{
    e->round_open = 0;
    qsort(e->arrived, (size_t)e->n_arrived, sizeof *e->arrived, cmp_i32);
    for (int i = 0; i < e->n_arrived; i++) {
        sim_client *cl = &e->c[e->arrived[i]];
        int rc = absorb(e, e->arrived[i], cl->weight, err);
        if (rc) return rc;
    }
    if (!e->spec.env.cost_only) e->spec.algo->server_aggregate(e->server);
    e->participants = e->n_arrived;
    e->round++;
    log_event(e, SIM_EV_AGGREGATE, -1, 0, 0);
    maybe_evaluate(e, e->round == e->spec.fed.rounds);
    round_end(e);
    progress(e, 0);
    tick(e, 0);
    if (e->round >= e->spec.fed.rounds) {
        e->done = 1;
        return SIM_OK;
    }
    return start_round(e, err);
}

/* Sync: a periodic checkpoint due is written here, before the round's jobs are dispatched, and
 * marked to start the round on resume. Dispatching trains every job of the round before the event
 * ends, so a checkpoint written after it would lose the round to a worker lost during the
 * training (an MPI rank cannot be replaced: DESIGN.md §13). */
static int start_round(sim_engine *e, sim_err *err)
{
    if (periodic_due(e)) {
        e->start_pending = 1;
        int rc = write_checkpoint(e, err);
        e->start_pending = 0;
        if (rc) return rc;
    }
    const sim_fed_config *f = &e->spec.fed;
    log_event(e, SIM_EV_ROUND_START, -1, 0, 0);
    int want = arrival_cap(f, e->n) - 1; /* ceil(per_round × over_commit), at most n */
    int32_t *sel = sim_xmalloc(sizeof(int32_t) * (size_t)(want > 0 ? want : 1));
    int got = select_clients(e, want, sel, (uint64_t)e->round);
    e->n_arrived = 0;
    e->in_flight = 0;
    e->target = got < f->per_round ? got : f->per_round;
    e->round_open = 1;
    if (got == 0) {
        /* Nobody can take part now: try again when the first busy or offline client changes. */
        free(sel);
        sim_time next = DEV_TIME_NEVER;
        for (int32_t c = 0; c < e->n; c++) {
            sim_client *cl = &e->c[c];
            if (cl->excluded) continue;
            sim_time t = cl->busy ? cl->busy_until : dev_avail_next_change(&cl->avail, e->now);
            if (t < next) next = t;
        }
        e->round_open = 0;
        if (next == DEV_TIME_NEVER) {
            e->done = 1;
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                            "round %d: no client can take part now or later (all excluded or "
                            "offline for good)",
                            e->round);
        }
        schedule(e, next, SIM_EV_ROUND_START, -1, (uint64_t)e->round);
        return SIM_OK;
    }
    /* dispatch in client-id order, so a round's event order does not depend on the sample order */
    qsort(sel, (size_t)got, sizeof *sel, cmp_i32);
    int rc = dispatch_batch(e, sel, got, err);
    free(sel);
    if (rc) return rc;
    if (f->deadline > 0) schedule(e, e->now + f->deadline, SIM_EV_DEADLINE, -1, (uint64_t)e->round);
    return SIM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* async (FedBuff) */

double sim_staleness_weight(const sim_fed_config *f, int tau)
{
    switch (f->staleness) {
    case SIM_STALE_POLY:
        return pow(1.0 + tau, -f->stale_a);
    case SIM_STALE_HINGE:
        return tau <= f->stale_b ? 1.0 : 1.0 / (f->stale_a * (tau - f->stale_b) + 1.0);
    default:
        return 1.0;
    }
}

/* Keep `concurrency` jobs in flight. When too few idle clients are online, wake up again when
 * the first idle one comes online (busy ones refill the slots themselves when they arrive or are
 * lost); one wake-up is pending at a time. */
static int async_fill(sim_engine *e, sim_err *err)
{
    int want = e->spec.fed.concurrency - e->in_flight;
    if (want <= 0) return SIM_OK;
    if (want > e->n) want = e->n;
    int32_t *sel = sim_xmalloc(sizeof(int32_t) * (size_t)want);
    int got = select_clients(e, want, sel, e->dispatches + ((uint64_t)1 << 40));
    qsort(sel, (size_t)got, sizeof *sel, cmp_i32);
    int rc = dispatch_batch(e, sel, got, err);
    free(sel);
    if (rc || got == want || e->retry_at >= 0) return rc;
    sim_time next = DEV_TIME_NEVER;
    for (int32_t c = 0; c < e->n; c++) {
        sim_client *cl = &e->c[c];
        if (cl->excluded || cl->busy) continue;
        sim_time t = dev_avail_next_change(&cl->avail, e->now);
        if (t < next) next = t;
    }
    if (next != DEV_TIME_NEVER) {
        e->retry_at = next;
        schedule(e, next, SIM_EV_RETRY, -1, 0);
    }
    return SIM_OK;
}

static int cmp_buffered(const void *a, const void *b)
{
    const struct buffered *x = a, *y = b;
    return (x->client > y->client) - (x->client < y->client);
}

/* An update arrives: buffer it (its client may start another job before the buffer is full);
 * every `buffer` updates, absorb them in client-id order with their staleness weights. */
static int async_arrival(sim_engine *e, int32_t c, sim_err *err)
{
    const sim_fed_config *f = &e->spec.fed;
    sim_client *cl = &e->c[c];
    struct buffered *b = &e->buf[e->n_arrived++];
    *b = (struct buffered){c, e->round - cl->job_round, cl->up, cl->up_len, cl->weight};
    cl->up = NULL;
    if (e->n_arrived < f->buffer) return SIM_OK;
    qsort(e->buf, (size_t)e->n_arrived, sizeof *e->buf, cmp_buffered);
    int rc = SIM_OK;
    for (int i = 0; i < e->n_arrived; i++) {
        b = &e->buf[i];
        if (!rc && !e->spec.env.cost_only)
            rc = e->spec.algo->server_absorb(e->server, b->client, b->up, b->up ? b->up_len : 0,
                                             b->weight * sim_staleness_weight(f, b->staleness),
                                             b->weight, err);
        free(b->up);
        b->up = NULL;
    }
    if (rc) return rc;
    if (!e->spec.env.cost_only) e->spec.algo->server_aggregate(e->server);
    e->participants = e->n_arrived;
    e->n_arrived = 0;
    e->round++;
    log_event(e, SIM_EV_AGGREGATE, -1, 0, 0);
    maybe_evaluate(e, e->round == f->rounds);
    round_end(e);
    progress(e, 0);
    tick(e, 0);
    if (e->round >= f->rounds) e->done = 1;
    return SIM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* checkpoints (engine.h). The payload is one msgpack array:
 *   ["fedsim-checkpoint", CKPT_VERSION, name, seed, scenario_hash, n_clients,
 *    [bytes of metrics.tsv, clients.tsv, events.msgpack, timeline.tsv],
 *    [now, round, round_open, target, in_flight, n_arrived, next_job, dispatches, participants,
 *     next_eval_time, retry_at, eval_round, start_pending],
 *    [bytes_up, bytes_down, flops, jobs, dropped, late, excluded, events, acc_global, loss_global,
 *     acc_pers],
 *    arrived (sync: client ids), buffered (async: [client, staleness, up, up_len, weight]...),
 *    perm (bin of n uint32), [next_seq, [[at, seq, kind, who, arg]...] in heap-array order],
 *    clients ([avail_on, avail_until, avail_last, [rng words], busy, job_round, job_id,
 *              busy_until, up, up_len, priv, pending_priv, weight, job_flops, job_start,
 *              job_down_end, job_train_end, jobs, completed, lost, late, bytes_up, bytes_down,
 *              flops, busy_ns, acc]...),
 *    server state (fl_algo.server_save), the writer's build (sim_checkpoint_build)]
 * Messages are bin or nil; perm is raw native-order uint32 (the same build reads it back). The
 * heap array is stored as is, so the restored queue pops in the same order. */

enum { CKPT_VERSION = 5, CKPT_FIELDS = 16, CKPT_CLIENT_FIELDS = 26 };
static const char ckpt_magic[] = "fedsim-checkpoint";
static void ckpt_path(const sim_engine *e, char *buf, size_t n)
{
    snprintf(buf, n, "%s/checkpoint.msgpack", e->spec.out_dir);
}

static void pack_blob(msgpack_packer *pk, const void *p, size_t n)
{
    if (!p) {
        msgpack_pack_nil(pk);
        return;
    }
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, p, n);
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* Flush the outputs to disk and write the checkpoint; the lengths saved are what resume keeps,
 * so they must be on disk before a checkpoint counts them, and no checkpoint may follow a lost
 * write (the one before it stays, and resumes the run). */
static int write_checkpoint(sim_engine *e, sim_err *err)
{
    if (!e->spec.out_dir) return SIM_OK;
    uint64_t len[4];
    int rc = outputs_failed(e, err);
    for (int i = 0; i < 4 && !rc; i++) {
        rc = sim_out_flush(&e->out[i], 1, err);
        len[i] = (uint64_t)ftello(e->out[i].f);
    }
    if (rc) return rc;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pkr, *pk = &pkr;
    msgpack_packer_init(pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(pk, CKPT_FIELDS);
    pack_str(pk, ckpt_magic);
    msgpack_pack_int(pk, CKPT_VERSION);
    pack_str(pk, e->spec.name ? e->spec.name : "");
    msgpack_pack_uint64(pk, e->spec.seed);
    msgpack_pack_uint64(pk, e->spec.scenario_hash);
    msgpack_pack_int(pk, e->n);
    msgpack_pack_array(pk, 4);
    for (int i = 0; i < 4; i++)
        msgpack_pack_uint64(pk, len[i]);
    msgpack_pack_array(pk, 13);
    msgpack_pack_int64(pk, e->now);
    msgpack_pack_int(pk, e->round);
    msgpack_pack_int(pk, e->round_open);
    msgpack_pack_int(pk, e->target);
    msgpack_pack_int(pk, e->in_flight);
    msgpack_pack_int(pk, e->n_arrived);
    msgpack_pack_uint64(pk, e->next_job);
    msgpack_pack_uint64(pk, e->dispatches);
    msgpack_pack_int(pk, e->participants);
    msgpack_pack_int64(pk, e->next_eval_time);
    msgpack_pack_int64(pk, e->retry_at);
    msgpack_pack_int(pk, e->eval_round);
    msgpack_pack_int(pk, e->start_pending);
    const sim_totals *t = &e->tot;
    msgpack_pack_array(pk, 11);
    msgpack_pack_double(pk, t->bytes_up);
    msgpack_pack_double(pk, t->bytes_down);
    msgpack_pack_double(pk, t->flops);
    msgpack_pack_int64(pk, t->jobs);
    msgpack_pack_int64(pk, t->dropped);
    msgpack_pack_int64(pk, t->late);
    msgpack_pack_int64(pk, t->excluded);
    msgpack_pack_int64(pk, t->events);
    msgpack_pack_double(pk, t->acc_global);
    msgpack_pack_double(pk, t->loss_global);
    msgpack_pack_double(pk, t->acc_pers);
    int sync = e->spec.fed.mode == SIM_SYNC;
    msgpack_pack_array(pk, sync ? (size_t)e->n_arrived : 0);
    for (int i = 0; sync && i < e->n_arrived; i++)
        msgpack_pack_int32(pk, e->arrived[i]);
    msgpack_pack_array(pk, sync ? 0 : (size_t)e->n_arrived);
    for (int i = 0; !sync && i < e->n_arrived; i++) {
        const struct buffered *b = &e->buf[i];
        msgpack_pack_array(pk, 5);
        msgpack_pack_int32(pk, b->client);
        msgpack_pack_int32(pk, b->staleness);
        pack_blob(pk, b->up, b->up_len);
        msgpack_pack_uint64(pk, b->up_len);
        msgpack_pack_double(pk, b->weight);
    }
    pack_blob(pk, e->perm, sizeof(uint32_t) * (size_t)e->n);
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint64(pk, e->q.next_seq);
    msgpack_pack_array(pk, e->q.n);
    for (size_t i = 0; i < e->q.n; i++) {
        const sim_event *ev = &e->q.ev[i];
        msgpack_pack_array(pk, 5);
        msgpack_pack_int64(pk, ev->at);
        msgpack_pack_uint64(pk, ev->seq);
        msgpack_pack_int(pk, ev->kind);
        msgpack_pack_int32(pk, ev->who);
        msgpack_pack_uint64(pk, ev->arg);
    }
    msgpack_pack_array(pk, (size_t)e->n);
    for (int32_t c = 0; c < e->n; c++) {
        const sim_client *cl = &e->c[c];
        msgpack_pack_array(pk, CKPT_CLIENT_FIELDS);
        /* what dev_avail_init cannot rebuild: the process's position and its stream */
        msgpack_pack_int(pk, cl->avail.on);
        msgpack_pack_int64(pk, cl->avail.until);
        msgpack_pack_int64(pk, cl->avail.last);
        msgpack_pack_array(pk, 4);
        for (int k = 0; k < 4; k++)
            msgpack_pack_uint64(pk, cl->avail.rng.s[k]);
        msgpack_pack_int(pk, cl->busy);
        msgpack_pack_int32(pk, cl->job_round);
        msgpack_pack_uint64(pk, cl->job_id);
        msgpack_pack_int64(pk, cl->busy_until);
        pack_blob(pk, cl->up, cl->up_len); /* up, when present, holds up_len bytes */
        msgpack_pack_uint64(pk, cl->up_len);
        pack_blob(pk, cl->priv, cl->priv_len);
        pack_blob(pk, cl->pending_priv, cl->pending_priv_len);
        msgpack_pack_double(pk, cl->weight);
        msgpack_pack_double(pk, cl->job_flops);
        msgpack_pack_int64(pk, cl->job_start);
        msgpack_pack_int64(pk, cl->job_down_end);
        msgpack_pack_int64(pk, cl->job_train_end);
        msgpack_pack_int(pk, cl->jobs);
        msgpack_pack_int(pk, cl->completed);
        msgpack_pack_int(pk, cl->lost);
        msgpack_pack_int(pk, cl->late);
        msgpack_pack_double(pk, cl->bytes_up);
        msgpack_pack_double(pk, cl->bytes_down);
        msgpack_pack_double(pk, cl->flops);
        msgpack_pack_int64(pk, cl->busy_ns);
        msgpack_pack_double(pk, cl->acc);
    }
    e->spec.algo->server_save(e->server, pk);
    pack_str(pk, sim_checkpoint_build());
    char path[1100];
    ckpt_path(e, path, sizeof path);
    rc = sim_checkpoint_write(path, sb.data, sb.size, err);
    msgpack_sbuffer_destroy(&sb);
    e->ckpt_wall = wall_s();
    if (!rc) e->ckpt_round = e->round;
    return rc;
}

/* A cursor over a msgpack array; any mismatch (type, range, count) sets bad and reads zeros. */
typedef struct rd {
    const msgpack_object *o;
    uint32_t n, i;
    int bad;
} rd;

static void rd_init(rd *r, const msgpack_object *o, uint32_t want)
{
    int ok = o && o->type == MSGPACK_OBJECT_ARRAY && (!want || o->via.array.size == want);
    *r = (rd){ok ? o->via.array.ptr : NULL, ok ? o->via.array.size : 0, 0, !ok};
}

static const msgpack_object *rd_next(rd *r)
{
    if (r->i >= r->n) {
        r->bad = 1;
        return NULL;
    }
    return &r->o[r->i++];
}

static int64_t rd_int(rd *r, int64_t lo, int64_t hi)
{
    const msgpack_object *o = rd_next(r);
    int64_t v = 0;
    if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        v = (int64_t)o->via.u64;
    else if (o && o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        v = o->via.i64;
    else
        r->bad = 1;
    if (v < lo || v > hi) r->bad = 1;
    return r->bad ? lo : v;
}

static uint64_t rd_u64(rd *r)
{
    const msgpack_object *o = rd_next(r);
    if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) return o->via.u64;
    r->bad = 1;
    return 0;
}

static double rd_f64(rd *r)
{
    const msgpack_object *o = rd_next(r);
    if (o && (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32))
        return o->via.f64;
    r->bad = 1;
    return 0;
}

/* A bin (copied, owned by the caller) or nil (NULL); *len gets its size. */
static void *rd_blob(rd *r, size_t *len)
{
    const msgpack_object *o = rd_next(r);
    *len = 0;
    if (o && o->type == MSGPACK_OBJECT_NIL) return NULL;
    if (!o || o->type != MSGPACK_OBJECT_BIN) {
        r->bad = 1;
        return NULL;
    }
    *len = o->via.bin.size;
    void *p = sim_xmalloc(*len ? *len : 1);
    memcpy(p, o->via.bin.ptr, *len);
    return p;
}

static void rd_sub(rd *r, rd *sub, uint32_t want)
{
    rd_init(sub, rd_next(r), want);
    if (sub->bad) r->bad = 1;
}

static int ckpt_bad(const char *path, const char *what, sim_err *err)
{
    return sim_fail(err, SIM_EFORMAT, path, 0, 0, "malformed checkpoint (%s); not loaded", what);
}

/* 1 when the engine queues events of this kind for who (schedule's callers): a job's phases for a
 * client, the round's and the async refill's for none (-1). handle() trusts both. */
static int queued_kind(int kind, int32_t who)
{
    switch (kind) {
    case SIM_EV_DOWNLOAD_DONE:
    case SIM_EV_TRAIN_DONE:
    case SIM_EV_UPLOAD_DONE:
    case SIM_EV_JOB_LOST:
        return who >= 0;
    case SIM_EV_ROUND_START:
    case SIM_EV_DEADLINE:
    case SIM_EV_RETRY:
        return who == -1;
    default:
        return 0;
    }
}

/* Restore the state saved by write_checkpoint into e, fresh from construction (clients
 * initialized, server new); the output lengths go to out_len. */
static int restore(sim_engine *e, const msgpack_object *root, uint64_t out_len[4], const char *path,
                   sim_err *err)
{
    rd r, s;
    rd_init(&r, root, 0);
    const msgpack_object *m = rd_next(&r);
    if (r.bad || m->type != MSGPACK_OBJECT_STR || m->via.str.size != strlen(ckpt_magic) ||
        memcmp(m->via.str.ptr, ckpt_magic, m->via.str.size))
        return ckpt_bad(path, "not a fedsim checkpoint", err);
    int64_t version = rd_int(&r, 0, INT32_MAX);
    /* version 4 is this one without the writer's build, its last field */
    if (r.bad || version < CKPT_VERSION - 1 || version > CKPT_VERSION)
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "checkpoint format version %lld; this fedsim reads versions %d and %d; not "
                        "loaded",
                        (long long)version, CKPT_VERSION - 1, CKPT_VERSION);
    if (r.n != CKPT_FIELDS - (version < CKPT_VERSION)) return ckpt_bad(path, "field count", err);
    rd_next(&r); /* the name: for people reading the file; the hash below covers it */
    uint64_t seed = rd_u64(&r), hash = rd_u64(&r);
    int64_t n = rd_int(&r, 0, INT32_MAX);
    if (r.bad) return ckpt_bad(path, "header", err);
    if (seed != e->spec.seed || hash != e->spec.scenario_hash || n != e->n)
        return sim_fail(err, SIM_EINVAL, path, 0, 0,
                        "the checkpoint belongs to another scenario (seed, clients or the text of "
                        "scenario.yaml differ from when it was written); not loaded");
    rd_sub(&r, &s, 4);
    for (int i = 0; i < 4; i++)
        out_len[i] = rd_u64(&s);
    if (s.bad) return ckpt_bad(path, "output lengths", err);
    int sync = e->spec.fed.mode == SIM_SYNC;
    int cap = arrival_cap(&e->spec.fed, e->n);
    rd_sub(&r, &s, 13);
    e->now = rd_int(&s, 0, INT64_MAX);
    e->round = (int)rd_int(&s, 0, INT32_MAX);
    e->round_open = (int)rd_int(&s, 0, 1);
    e->target = (int)rd_int(&s, 0, INT32_MAX);
    e->in_flight = (int)rd_int(&s, 0, n);
    e->n_arrived = 0; /* set below, once arrived or buf holds that many */
    int n_arrived = (int)rd_int(&s, 0, cap - 1);
    e->next_job = rd_u64(&s);
    e->dispatches = rd_u64(&s);
    e->participants = (int)rd_int(&s, 0, INT32_MAX);
    e->next_eval_time = rd_int(&s, 0, INT64_MAX);
    e->retry_at = rd_int(&s, -1, INT64_MAX);
    e->eval_round = (int)rd_int(&s, -1, INT32_MAX);
    e->start_pending = (int)rd_int(&s, 0, sync);
    if (s.bad) return ckpt_bad(path, "protocol state", err);
    sim_totals *t = &e->tot;
    rd_sub(&r, &s, 11);
    t->bytes_up = rd_f64(&s);
    t->bytes_down = rd_f64(&s);
    t->flops = rd_f64(&s);
    t->jobs = (long)rd_int(&s, 0, INT64_MAX);
    t->dropped = (long)rd_int(&s, 0, INT64_MAX);
    t->late = (long)rd_int(&s, 0, INT64_MAX);
    t->excluded = (long)rd_int(&s, 0, n);
    t->events = (long)rd_int(&s, 0, INT64_MAX);
    t->acc_global = rd_f64(&s);
    t->loss_global = rd_f64(&s);
    t->acc_pers = rd_f64(&s);
    if (s.bad) return ckpt_bad(path, "totals", err);
    rd_sub(&r, &s, sync ? (uint32_t)n_arrived : 0);
    for (int i = 0; sync && i < n_arrived; i++)
        e->arrived[i] = (int32_t)rd_int(&s, 0, n - 1);
    if (s.bad || s.i != s.n) return ckpt_bad(path, "arrivals", err);
    rd_sub(&r, &s, sync ? 0 : (uint32_t)n_arrived);
    for (int i = 0; !sync && i < n_arrived; i++) {
        rd b;
        rd_sub(&s, &b, 5);
        struct buffered *bu = &e->buf[i];
        bu->client = (int32_t)rd_int(&b, 0, n - 1);
        bu->staleness = (int32_t)rd_int(&b, 0, INT32_MAX);
        size_t got;
        bu->up = rd_blob(&b, &got);
        e->n_arrived = i + 1; /* buf[0..i] now owns its messages */
        bu->up_len = (size_t)rd_u64(&b);
        bu->weight = rd_f64(&b);
        if (b.bad || (bu->up && got != bu->up_len)) s.bad = 1;
    }
    if (s.bad || s.i != s.n) return ckpt_bad(path, "async buffer", err);
    e->n_arrived = n_arrived;
    size_t perm_len;
    uint32_t *perm = rd_blob(&r, &perm_len);
    int perm_ok = perm && perm_len == sizeof(uint32_t) * (size_t)n;
    if (perm_ok) { /* a permutation of 0..n-1: seen[] marks each value once */
        char *seen = sim_xcalloc((size_t)n + 1, 1);
        for (int64_t i = 0; i < n && perm_ok; i++)
            perm_ok = perm[i] < (uint64_t)n && !seen[perm[i]]++;
        free(seen);
    }
    if (perm_ok) memcpy(e->perm, perm, perm_len);
    free(perm);
    if (!perm_ok) return ckpt_bad(path, "selection permutation", err);
    rd_sub(&r, &s, 2);
    uint64_t next_seq = rd_u64(&s);
    rd q;
    rd_sub(&s, &q, 0);
    if (s.bad) return ckpt_bad(path, "event queue", err);
    for (uint32_t i = 0; i < q.n; i++) {
        rd ev;
        rd_sub(&q, &ev, 5);
        sim_time at = rd_int(&ev, e->now, INT64_MAX);
        uint64_t seq = rd_u64(&ev);
        int kind = (int)rd_int(&ev, 0, SIM_EV_COUNT - 1);
        int32_t who = (int32_t)rd_int(&ev, -1, n - 1);
        uint64_t arg = rd_u64(&ev);
        if (ev.bad || seq >= next_seq || !queued_kind(kind, who))
            return ckpt_bad(path, "event queue", err);
        /* pushing in heap-array order with seq forced reproduces the array exactly */
        e->q.next_seq = seq;
        sim_queue_push(&e->q, at, kind, who, arg);
        if (e->q.ev[i].seq != seq) return ckpt_bad(path, "event queue is not a heap", err);
    }
    e->q.next_seq = next_seq;
    rd cs;
    rd_sub(&r, &cs, (uint32_t)n);
    if (r.bad) return ckpt_bad(path, "clients", err);
    for (int32_t c = 0; c < n; c++) {
        sim_client *cl = &e->c[c];
        rd f, w;
        rd_sub(&cs, &f, CKPT_CLIENT_FIELDS);
        cl->avail.on = (int)rd_int(&f, 0, 1);
        cl->avail.until = rd_int(&f, INT64_MIN, INT64_MAX);
        cl->avail.last = rd_int(&f, INT64_MIN, e->now); /* queries never go back */
        rd_sub(&f, &w, 4);
        for (int k = 0; k < 4; k++)
            cl->avail.rng.s[k] = rd_u64(&w);
        cl->busy = (int)rd_int(&f, 0, 1);
        cl->job_round = (int32_t)rd_int(&f, 0, INT32_MAX);
        cl->job_id = rd_u64(&f);
        cl->busy_until = rd_int(&f, INT64_MIN, INT64_MAX);
        size_t got;
        cl->up = rd_blob(&f, &got);
        cl->up_len = (size_t)rd_u64(&f);
        if (cl->up && got != cl->up_len) f.bad = 1;
        cl->priv = rd_blob(&f, &cl->priv_len);
        cl->pending_priv = rd_blob(&f, &cl->pending_priv_len);
        cl->weight = rd_f64(&f);
        cl->job_flops = rd_f64(&f);
        cl->job_start = rd_int(&f, INT64_MIN, INT64_MAX);
        cl->job_down_end = rd_int(&f, INT64_MIN, INT64_MAX);
        cl->job_train_end = rd_int(&f, INT64_MIN, INT64_MAX);
        cl->jobs = (int)rd_int(&f, 0, INT32_MAX);
        cl->completed = (int)rd_int(&f, 0, INT32_MAX);
        cl->lost = (int)rd_int(&f, 0, INT32_MAX);
        cl->late = (int)rd_int(&f, 0, INT32_MAX);
        cl->bytes_up = rd_f64(&f);
        cl->bytes_down = rd_f64(&f);
        cl->flops = rd_f64(&f);
        cl->busy_ns = rd_int(&f, INT64_MIN, INT64_MAX);
        cl->acc = rd_f64(&f);
        if (f.bad || w.bad) return ckpt_bad(path, "a client", err);
    }
    const msgpack_object *so = rd_next(&r), *bo = version < CKPT_VERSION ? NULL : rd_next(&r);
    if (r.bad || (bo && bo->type != MSGPACK_OBJECT_STR))
        return ckpt_bad(path, "server state or the writer's build", err);
    int rc = e->spec.algo->server_load(e->server, so, err);
    if (rc) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return sim_fail(err, rc, path, 0, 0, "%s; not loaded", why);
    }
    const char *build = sim_checkpoint_build();
    char theirs[256];
    if (bo)
        snprintf(theirs, sizeof theirs, "%.*s", (int)bo->via.str.size, bo->via.str.ptr);
    else
        snprintf(theirs, sizeof theirs, "unrecorded: format version %lld", (long long)version);
    if (strcmp(theirs, build))
        fprintf(stderr,
                "fedsim: warning: %s was written by another build (%s; this one: %s): the run "
                "goes on, but its remaining rounds can round differently from an uninterrupted "
                "run's\n",
                path, theirs, build);
    return SIM_OK;
}

/* Restore the checkpoint payload buf[0..len) (path names it in errors). */
static int decode_checkpoint(sim_engine *e, const void *buf, size_t len, const char *path,
                             uint64_t out_len[4], sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = nn_msgpack_next(&u, buf, len, &off, path, err);
    if (rc) { /* err says where; the checkpoint's framing is said once, for every cause */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        rc = sim_fail(err, SIM_EFORMAT, path, 0, 0, "malformed checkpoint (%s); not loaded", why);
    } else if (off != len) {
        rc = ckpt_bad(path, "bytes after its msgpack object", err);
    } else {
        rc = restore(e, &u.data, out_len, path, err);
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* Read, verify and restore out_dir/checkpoint.msgpack, or spec.resume_payload (before any output
 * is touched). */
static int load_checkpoint(sim_engine *e, uint64_t out_len[4], sim_err *err)
{
    if (e->spec.resume_payload)
        return decode_checkpoint(e, e->spec.resume_payload, e->spec.resume_len,
                                 "checkpoint payload", out_len, err);
    char path[1100];
    ckpt_path(e, path, sizeof path);
    void *buf;
    size_t len;
    int rc = sim_checkpoint_read(path, &buf, &len, err);
    if (rc) return rc;
    rc = decode_checkpoint(e, buf, len, path, out_len, err);
    free(buf);
    return rc;
}

/* At an event boundary: write a checkpoint when one is due, and stop after it when asked to. */
static int boundary(sim_engine *e, int aggregated, int *stop, sim_err *err)
{
    const sim_run_spec *s = &e->spec;
    *stop = (s->stop && *s->stop) || (aggregated && e->round == s->stop_after_round);
    int due = *stop || (aggregated &&
                        (periodic_due(e) || (s->checkpoint_wall_s > 0 &&
                                             wall_s() - e->ckpt_wall >= s->checkpoint_wall_s)));
    return due ? write_checkpoint(e, err) : SIM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* the loop */

static int handle(sim_engine *e, const sim_event *ev, sim_err *err)
{
    const sim_fed_config *f = &e->spec.fed;
    sim_client *cl = ev->who >= 0 ? &e->c[ev->who] : NULL;
    if (cl && ev->arg != cl->job_id) return SIM_OK; /* an event of an older job: stale */
    switch (ev->kind) {
    case SIM_EV_ROUND_START:
        return start_round(e, err);
    case SIM_EV_RETRY:
        e->retry_at = -1;
        log_event(e, ev->kind, -1, 0, 0);
        return async_fill(e, err);
    case SIM_EV_DOWNLOAD_DONE:
        log_event(e, ev->kind, ev->who, 0, 0);
        timeline_row(e, ev->who, "download", cl->job_start, "ok");
        return SIM_OK;
    case SIM_EV_TRAIN_DONE:
        cl->flops += cl->job_flops; /* counted when the device has done the work */
        e->tot.flops += cl->job_flops;
        if (cl->pending_priv) { /* the device now holds its new private state */
            free(cl->priv);
            cl->priv = cl->pending_priv;
            cl->priv_len = cl->pending_priv_len;
            cl->pending_priv = NULL;
        }
        log_event(e, ev->kind, ev->who, 0, cl->job_flops);
        timeline_row(e, ev->who, "train", cl->job_down_end, "ok");
        if (cl->up_len == 0) goto arrived; /* nothing to upload (local training only) */
        return SIM_OK;
    case SIM_EV_UPLOAD_DONE: {
        double ub = sim_message_bytes(&e->spec, cl->up_len);
        cl->bytes_up += ub;
        e->tot.bytes_up += ub;
        log_event(e, ev->kind, ev->who, ub, 0);
        goto arrived;
    }
    case SIM_EV_JOB_LOST:
        cl->busy = 0;
        cl->lost++;
        e->tot.dropped++;
        free(cl->up);
        cl->up = NULL;
        free(cl->pending_priv);
        cl->pending_priv = NULL;
        log_event(e, ev->kind, ev->who, 0, 0);
        timeline_row(e, ev->who,
                     e->now < cl->job_down_end    ? "download"
                     : e->now < cl->job_train_end ? "train"
                                                  : "upload",
                     e->now < cl->job_down_end    ? cl->job_start
                     : e->now < cl->job_train_end ? cl->job_down_end
                                                  : cl->job_train_end,
                     "lost");
        if (f->mode == SIM_ASYNC) {
            e->in_flight--;
            return async_fill(e, err);
        }
        if (cl->job_round == e->round && e->round_open && --e->in_flight == 0)
            return close_round(e, err);
        return SIM_OK;
    case SIM_EV_DEADLINE:
        if ((int)ev->arg == e->round && e->round_open) {
            log_event(e, ev->kind, -1, 0, 0);
            return close_round(e, err);
        }
        return SIM_OK;
    default:
        assert(0 && "unknown event kind");
        return SIM_OK;
    }
arrived:
    cl->busy = 0;
    cl->completed++;
    int late = f->mode == SIM_SYNC && (cl->job_round != e->round || !e->round_open);
    if (cl->up_len) timeline_row(e, ev->who, "upload", cl->job_train_end, late ? "late" : "ok");
    if (f->mode == SIM_ASYNC) {
        e->in_flight--;
        int rc = async_arrival(e, ev->who, err);
        return rc ? rc : e->done ? SIM_OK : async_fill(e, err);
    }
    if (late) { /* after its round closed */
        cl->late++;
        e->tot.late++;
        free(cl->up);
        cl->up = NULL;
        log_event(e, SIM_EV_LATE, ev->who, 0, 0);
        return SIM_OK;
    }
    e->arrived[e->n_arrived++] = ev->who;
    e->in_flight--;
    if (e->n_arrived >= e->target || e->in_flight == 0) return close_round(e, err);
    return SIM_OK;
}

/* The algorithm's report file (fl_algo.report), written whole: made in memory, then replacing
 * the file at once (sim_write_file). */
static int write_report(sim_engine *e, sim_err *err)
{
    char path[1100], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", e->spec.out_dir, e->spec.algo->report_file);
    FILE *f = open_memstream(&text, &len);
    if (!f) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno));
    e->spec.algo->report(e->server, f);
    int rc = fclose(f) ? sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno))
                       : sim_write_file(path, text, len, err);
    free(text);
    return rc;
}

int sim_engine_run(sim_engine *e, sim_err *err)
{
    e->wall_start = e->wall_last = e->ckpt_wall = wall_s();
    e->rounds_at_start = e->round;
    /* a resumed run goes on from its events, or starts the round its checkpoint was written
     * before (start_round then writes none: that one is this round's) */
    int pending = e->start_pending;
    e->start_pending = 0;
    int rc = e->resumed                     ? (pending ? start_round(e, err) : SIM_OK)
             : e->spec.fed.mode == SIM_SYNC ? start_round(e, err)
                                            : async_fill(e, err);
    sim_event ev;
    while (!rc && !e->done && sim_queue_pop(&e->q, &ev)) {
        if (e->spec.fed.max_time > 0 && ev.at > e->spec.fed.max_time) {
            e->now = e->spec.fed.max_time;
            break;
        }
        e->now = ev.at;
        int round = e->round;
        rc = handle(e, &ev, err);
        if (!rc) rc = outputs_failed(e, err);
        if (!rc && !e->done) rc = boundary(e, e->round != round, &e->stopped, err);
        if (e->stopped) break;
    }
    if (e->stopped) return rc; /* the checkpoint holds the rest; clients.tsv comes at the end */
    /* a run cut short by max_time (or with nothing left to do) still ends on an evaluation; one
     * at its last aggregation already is (evaluated again later, pFedGate's clients would lose
     * their own copies, dropped as the aggregation's event ended) */
    if (!rc && e->eval_round != e->round) evaluate(e);
    if (!rc && e->spec.fed.mode == SIM_ASYNC && !e->done && e->round < e->spec.fed.rounds &&
        e->spec.fed.max_time == 0 && !sim_queue_peek(&e->q))
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                      "async run stopped at aggregation %d: no client can take part any more",
                      e->round);
    progress(e, 1);
    if (!rc && e->out[OUT_CLIENTS].f) { /* its rows mark a finished run (engine.h) */
        for (int32_t c = 0; c < e->n; c++) {
            const sim_client *cl = &e->c[c];
            sim_out_printf(&e->out[OUT_CLIENTS],
                           "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%.6g\t%.9f\t%.6f\n", c,
                           e->spec.devices[c].name, cl->excluded, cl->jobs, cl->completed, cl->lost,
                           cl->late, cl->bytes_up, cl->bytes_down, cl->flops,
                           sim_time_to_s(cl->busy_ns), cl->acc);
        }
    }
    /* everything on disk before the checkpoint goes: until then it resumes a failed finish */
    if (!rc && e->spec.trace && fflush(e->spec.trace) && !e->trace_errnum) e->trace_errnum = errno;
    if (!rc) rc = outputs_failed(e, err);
    for (int i = 0; i < 4 && !rc; i++)
        rc = sim_out_close(&e->out[i], 1, err);
    tick(e, 1);
    if (!rc && e->spec.out_dir && e->spec.algo->report && !e->spec.env.cost_only)
        rc = write_report(e, err);
    if (!rc && e->spec.out_dir) { /* finished: the folder holds results only (engine.h) */
        char path[1100];
        ckpt_path(e, path, sizeof path);
        if (unlink(path) && errno != ENOENT)
            rc = sim_fail(err, SIM_EIO, path, 0, 0, "finished, but cannot remove: %s",
                          strerror(errno));
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* construction */

/* Resume: every output must still hold at least what the checkpoint counted (all are checked
 * before any is cut), then each is cut back to that length and written on from there. */
static int reopen_outputs(sim_engine *e, const uint64_t out_len[4], sim_err *err)
{
    char path[4][1100];
    for (int i = 0; i < 4; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", e->spec.out_dir, out_names[i]);
        struct stat st;
        if (stat(path[i], &st))
            return sim_fail(err, SIM_EIO, path[i], 0, 0, "cannot resume: %s", strerror(errno));
        if ((uint64_t)st.st_size < out_len[i])
            return sim_fail(err, SIM_EINVAL, path[i], 0, 0,
                            "cannot resume: %lld bytes, shorter than the %llu the checkpoint "
                            "counted",
                            (long long)st.st_size, (unsigned long long)out_len[i]);
    }
    for (int i = 0; i < 4; i++) {
        int rc = sim_out_open(&e->out[i], path[i], "r+b", err);
        if (rc) return rc;
        if (ftruncate(fileno(e->out[i].f), (off_t)out_len[i]) || fseeko(e->out[i].f, 0, SEEK_END))
            return sim_fail(err, SIM_EIO, path[i], 0, 0, "cannot resume: %s", strerror(errno));
    }
    return SIM_OK;
}

double sim_client_width(const sim_run_spec *spec, int32_t c)
{
    return spec->algo->client_width ? spec->algo->client_width(&spec->env, c) : 1;
}

double sim_width_memory(const sim_run_spec *spec, double w, nn_model *m)
{
    if (w < 1) nn_model_set_width(m, w, 0);
    double bytes = (double)nn_model_memory_bytes(m, spec->env.cfg->batch_size);
    nn_model_reset_narrowing(m);
    return bytes;
}

int sim_engine_new(sim_engine **out, const sim_run_spec *spec, sim_err *err)
{
    *out = NULL;
    sim_engine *e = sim_xcalloc(1, sizeof *e);
    e->ckpt_round = -1;
    e->spec = *spec;
    e->n = spec->n_clients;
    e->c = sim_xcalloc((size_t)e->n, sizeof *e->c);
    e->perm = sim_xmalloc(sizeof(uint32_t) * (size_t)e->n);
    int cap = arrival_cap(&spec->fed, e->n);
    e->arrived = sim_xmalloc(sizeof(int32_t) * (size_t)cap);
    e->buf = sim_xcalloc((size_t)cap, sizeof *e->buf);
    e->tot.acc_global = e->tot.loss_global = e->tot.acc_pers = NAN;
    e->next_eval_time = spec->eval.every_time;
    e->retry_at = -1;
    e->eval_round = -1;
    sim_queue_init(&e->q);
    fl_worker_init(&e->worker);
    nn_model_init(&e->eval_model, spec->env.arch, 256);
    /* a client is excluded when its device cannot hold the model it trains (its width's; the
     * memory is measured again only when the width changes) */
    double width = 1, memory = sim_width_memory(spec, 1, &e->eval_model);
    for (int32_t c = 0; c < e->n; c++) {
        sim_client *cl = &e->c[c];
        sim_rng r;
        sim_rng_seed(&r, spec->seed, SIM_RNG_AVAIL, (uint64_t)c);
        dev_avail_init(&cl->avail, &spec->devices[c].avail, &r);
        double wc = sim_client_width(spec, c);
        if (wc != width) memory = sim_width_memory(spec, width = wc, &e->eval_model);
        cl->excluded = !dev_fits(&spec->devices[c], memory);
        e->tot.excluded += cl->excluded;
        cl->acc = NAN;
        e->perm[c] = (uint32_t)c;
    }
    if (spec->eval.n_shift && spec->env.part->n_test) build_shifts(e);
    int rc = SIM_OK;
    e->server = spec->algo->server_new(&e->spec.env, err);
    if (!e->server) rc = SIM_EINVAL; /* server_new filled err */
    uint64_t out_len[4];
    if (!rc && spec->resume) {
        assert((spec->out_dir || spec->resume_payload) && "resume needs a checkpoint");
        rc = load_checkpoint(e, out_len, err);
        e->resumed = 1;
        e->ckpt_round = e->round; /* its file stays until a newer one replaces it */
    }
    if (!rc && spec->out_dir && spec->resume) {
        rc = reopen_outputs(e, out_len, err);
    } else if (!rc && spec->out_dir) {
        char path[1100];
        ckpt_path(e, path, sizeof path);
        unlink(path); /* a stale checkpoint of an earlier run here would resume the wrong run */
        for (int i = 0; i < 4 && !rc; i++) {
            snprintf(path, sizeof path, "%s/%s", spec->out_dir, out_names[i]);
            rc = sim_out_open(&e->out[i], path, "wb", err);
        }
    }
    /* Fork now: the workers inherit the datasets, partition and environment loaded so far, and
     * nothing the engine writes later. Cost-only jobs are too cheap to be worth a frame. MPI
     * worker ranks (spec->link) loaded the same environment themselves. */
    if (!rc && spec->link && !spec->env.cost_only)
        rc = sim_pool_new_linked(&e->pool, spec->link, spec->job_timeout_s, err);
    else if (!rc && spec->workers > 0 && !spec->env.cost_only)
        rc = sim_pool_new(&e->pool, spec->workers, spec->algo, &e->spec.env, spec->job_timeout_s,
                          err);
    /* The workers are idle while the coordinator evaluates, so it forks as many helpers; MPI
     * worker ranks may sit on other machines, so rank 0 evaluates alone. */
    e->eval_procs = !spec->link && spec->workers > 1 ? spec->workers : 1;
    if (rc) {
        sim_engine_free(e);
        return rc;
    }
    if (e->resumed) { /* the files already hold their headers */
        if (e->out[OUT_EVENTS].f)
            msgpack_packer_init(&e->events_pk, &e->out[OUT_EVENTS], write_events_cb);
        *out = e;
        return SIM_OK;
    }
    if (e->out[OUT_METRICS].f) {
        sim_out *m = &e->out[OUT_METRICS];
        sim_out_printf(m, "# fedsim run %s seed=%llu algorithm=%s clients=%d", spec->name,
                       (unsigned long long)spec->seed, spec->algo->name, e->n);
        if (has_base(e)) sim_out_printf(m, " base=%s", spec->algo->base);
        sim_out_printf(m, "\n");
        sim_out_printf(m,
                       "round\tsim_time_s\tbytes_up\tbytes_down\tclient_flops\tacc_global\t"
                       "loss_global\tacc_pers_mean\tacc_pers_p10\tacc_pers_pooled\tparticipants\t"
                       "dropped\t"
                       "density");
        for (int i = 0; i < spec->eval.n_shift; i++)
            sim_out_printf(m, "\tacc_shift_%g", spec->eval.shift[i]);
        if (has_base(e)) { /* the base algorithm's evaluation, from this same training */
            sim_out_printf(m, "\tacc_base_mean\tacc_base_p10");
            for (int i = 0; i < spec->eval.n_shift; i++)
                sim_out_printf(m, "\tacc_base_shift_%g", spec->eval.shift[i]);
        }
        if (has_val(e)) sim_out_printf(m, "\tacc_val_mean");
        sim_out_printf(m, "\n");
        /* the columns, for readers of a run going on (plots, summary); a failure is in errnum */
        sim_out_flush(m, 0, NULL);
    }
    if (e->out[OUT_TIMELINE].f) {
        sim_out_printf(&e->out[OUT_TIMELINE],
                       "# fedsim run %s: one row per job phase that ended (ok, lost, or "
                       "late: uploaded after its round closed)\n",
                       spec->name);
        sim_out_printf(&e->out[OUT_TIMELINE], "client\tround\tphase\tstart_s\tend_s\toutcome\n");
    }
    if (e->out[OUT_CLIENTS].f)
        sim_out_printf(&e->out[OUT_CLIENTS],
                       "client\tdevice\texcluded\tjobs\tcompleted\tlost\tlate\tbytes_up\t"
                       "bytes_down\tflops\tbusy_s\tacc_final\n");
    if (e->out[OUT_EVENTS].f) {
        msgpack_packer_init(&e->events_pk, &e->out[OUT_EVENTS], write_events_cb);
        /* header: the field names and the kind names, so the file describes itself */
        msgpack_packer *pk = &e->events_pk;
        msgpack_pack_map(pk, 2);
        msgpack_pack_str(pk, 6);
        msgpack_pack_str_body(pk, "fields", 6);
        static const char *const fields[] = {"time_ns", "kind",  "client",
                                             "round",   "bytes", "flops"};
        msgpack_pack_array(pk, 6);
        for (int i = 0; i < 6; i++) {
            msgpack_pack_str(pk, strlen(fields[i]));
            msgpack_pack_str_body(pk, fields[i], strlen(fields[i]));
        }
        msgpack_pack_str(pk, 5);
        msgpack_pack_str_body(pk, "kinds", 5);
        msgpack_pack_array(pk, SIM_EV_COUNT);
        for (int i = 0; i < SIM_EV_COUNT; i++) {
            msgpack_pack_str(pk, strlen(sim_event_names[i]));
            msgpack_pack_str_body(pk, sim_event_names[i], strlen(sim_event_names[i]));
        }
    }
    if ((rc = outputs_failed(e, err))) {
        sim_engine_free(e);
        return rc;
    }
    *out = e;
    return SIM_OK;
}

void sim_engine_free(sim_engine *e)
{
    if (!e) return;
    for (int32_t c = 0; c < e->n; c++) {
        free(e->c[c].up);
        free(e->c[c].priv);
        free(e->c[c].pending_priv);
    }
    free(e->c);
    free(e->perm);
    free(e->arrived);
    for (int i = 0; i < e->n_arrived && e->spec.fed.mode == SIM_ASYNC; i++)
        free(e->buf[i].up);
    free(e->buf);
    sim_queue_destroy(&e->q);
    sim_pool_free(e->pool);
    fl_worker_destroy(&e->worker);
    nn_model_destroy(&e->eval_model);
    for (int i = 0; e->shift_idx && i < e->spec.eval.n_shift * e->n; i++)
        free(e->shift_idx[i]);
    free(e->shift_idx);
    if (e->server) e->spec.algo->server_free(e->server);
    for (int i = 0; i < 4; i++) /* closed unchecked only on error or stop paths */
        sim_out_discard(&e->out[i]);
    free(e);
}

void sim_engine_totals(const sim_engine *e, sim_totals *t)
{
    *t = e->tot;
    t->workers_replaced = sim_pool_replaced(e->pool);
    t->workers_timed_out = sim_pool_timeouts(e->pool);
    t->now = e->now;
    t->round = e->round;
    t->stopped = e->stopped;
    t->checkpoint_round = e->ckpt_round;
}
