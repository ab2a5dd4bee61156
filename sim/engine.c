/* sim/engine.c -- the event loop (engine.h): construction, the event handler, dispatching jobs
 * and aggregating; the protocols, evaluation, outputs and checkpoints are in files of their own
 * (engine_int.h lists them).
 *
 * Workload: up to ~10^6 clients, of which at most a few thousand have a job in flight; per job a
 * handful of events. Per-client state is a small struct; messages and private state exist only
 * for clients that have them. A job is lost when its client goes offline before the upload ends;
 * lost and late jobs keep their device busy until they would have ended, as a real device would.
 */
#include "sim/engine_int.h"

#include "nn/train.h"
#include "sim/budget.h"
#include "sim/cost.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const sim_event_names[SIM_EV_COUNT] = {
        "round_start", "dispatch",  "download_done", "train_done", "upload_done", "job_lost",
        "deadline",    "aggregate", "evaluate",      "late",       "retry",
};

double sim_eng_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

void sim_eng_schedule(sim_engine *e, sim_time at, int kind, int32_t who, uint64_t arg)
{
    assert(at >= e->now && "never schedule into the past");
    sim_queue_push(&e->q, at, kind, who, arg);
}

/* 1 when client c can take a job now: its device holds the model, it is idle and online */
static int eligible(void *ctx, int32_t c)
{
    sim_engine *e = ctx;
    sim_client *cl = &e->c[c];
    return !cl->excluded && !cl->busy && online(e, c, e->now) &&
           (!e->en || (sim_eng_energy_ok(e, c) &&
                       (!e->spec.fed.charging_only || sim_eng_energy_charging(e, c))));
}

/* What a real server knows of client c: its samples and declared device, the job time that
 * profile predicts, and what its jobs reported once they arrived; never the job in flight's
 * result (job_loss), which the engine knows from dispatch on. */
void sim_eng_sel_client(const void *ctx, int32_t c, sim_sel_client *out)
{
    const sim_engine *e = ctx;
    const sim_client *cl = &e->c[c];
    *out = (sim_sel_client){
            .samples = e->spec.env.part->n[c],
            .device = &e->spec.devices[c],
            .predicted_s = e->spec.predicted_s ? e->spec.predicted_s[c] : NAN,
            .loss = cl->seen_loss,
            .loss_rms = cl->seen_loss_rms,
            .duration_s = cl->seen_duration_s,
            .steps = cl->seen_steps,
            .last_round = cl->last_selected,
            .jobs = cl->jobs,
            .arrived = cl->arrived,
            .lost = cl->lost,
            .battery_j = INFINITY,
            .charging_w = 0,
            .predicted_j = e->spec.predicted_j ? e->spec.predicted_j[c] : NAN,
    };
    if (e->en) sim_eng_energy_view(e, c, &out->battery_j, &out->charging_w);
}

static sim_sel_view sel_view(sim_engine *e)
{
    return (sim_sel_view){.now = e->now,
                          .round = e->round,
                          .n = e->n,
                          .deadline = e->spec.fed.mode == SIM_SYNC ? e->spec.fed.deadline : 0,
                          .client = sim_eng_sel_client,
                          .eligible = eligible,
                          .ctx = e};
}

/* The policy picks from the clients that can take a job now (uniform tests them one at a time
 * as it draws; the others get the list), from its own stream. Each pick is dispatched at once,
 * in client-id order, so a round's event order does not depend on the sample's. */
int sim_eng_select_clients(sim_engine *e, int k, int32_t *out, uint64_t stream_index)
{
    sim_rng r;
    sim_rng_seed(&r, e->spec.seed, e->sel->purpose, stream_index);
    sim_sel_view v = sel_view(e);
    int32_t *cand = NULL;
    if (e->sel != &sim_sel_uniform) {
        cand = sim_xmalloc(sizeof(int32_t) * (size_t)(e->n > 0 ? e->n : 1));
        for (int32_t c = 0; c < e->n; c++)
            if (eligible(e, c)) cand[v.n_cand++] = c;
        v.cand = cand;
    }
    int got = k > 0 ? e->sel->pick(e->sel_state, e->sel_cfg, &v, k, out, &r) : 0;
    free(cand);
    for (int i = 0; i < got; i++)
        e->c[out[i]].last_selected = e->round;
    return got;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void sim_eng_sort_ids(int32_t *ids, int n)
{
    qsort(ids, (size_t)n, sizeof *ids, cmp_i32);
}

/* ---------------------------------------------------------------------------------------- */
/* aggregation */

int sim_eng_arrival_cap(const sim_fed_config *f, int n)
{
    if (f->mode != SIM_SYNC) return f->buffer + 1;
    double w = ceil(f->per_round * f->over_commit - 1e-9);
    return (w > n ? n : (int)w) + 1;
}

void sim_eng_aggregate(sim_engine *e, int participants)
{
    if (!e->spec.env.cost_only) e->spec.algo->server_aggregate(e->server);
    e->participants = participants;
    e->round++;
    sim_eng_log_event(e, SIM_EV_AGGREGATE, -1, 0, 0);
    sim_eng_maybe_evaluate(e, e->round == e->spec.fed.rounds);
    /* the aggregation's event is over: what the server kept for its evaluation goes */
    if (e->spec.algo->server_round_end) e->spec.algo->server_round_end(e->server);
    sim_eng_progress(e, 0);
    sim_eng_tick(e, 0);
    if (e->round >= e->spec.fed.rounds) e->done = 1;
}

/* What the store did, for sim_totals: states read back from disk, and its files' bytes (0 when
 * they cannot be measured). */
static void store_figures(const sim_store *s, long *reads, double *disk)
{
    sim_store_stats st;
    if (sim_store_stats_get(s, &st, NULL)) sim_store_stats_peek(s, &st);
    *reads = (long)st.reads;
    *disk = (double)(st.disk_bytes + st.spill_bytes);
}

/* At an event boundary: write a checkpoint when one is due, and stop after it when asked to. */
static int boundary(sim_engine *e, int aggregated, int *stop, sim_err *err)
{
    const sim_run_spec *s = &e->spec;
    *stop = (s->stop && *s->stop) || (aggregated && e->round == s->stop_after_round);
    int due = *stop || (aggregated && (sim_eng_ckpt_due(e) ||
                                       (s->checkpoint_wall_s > 0 &&
                                        sim_eng_wall_s() - e->ckpt_wall >= s->checkpoint_wall_s)));
    return due ? sim_eng_ckpt_write(e, err) : SIM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* the loop */

static int handle(sim_engine *e, const sim_event *ev, sim_err *err)
{
    const sim_fed_config *f = &e->spec.fed;
    sim_client *cl = ev->who >= 0 ? &e->c[ev->who] : NULL;
    if (cl && ev->arg != cl->job_id) return SIM_OK; /* an event of an older job: stale */
    if (cl && e->net && !cl->busy) return SIM_OK;   /* a phase after its job was lost */
    switch (ev->kind) {
    case SIM_EV_FLOW_END:
        return sim_eng_net_flow_end(e, ev);
    case SIM_EV_ROUND_START:
        return sim_sync_start_round(e, err);
    case SIM_EV_RETRY:
        e->retry_at = -1;
        sim_eng_log_event(e, ev->kind, -1, 0, 0);
        return sim_async_fill(e, err);
    case SIM_EV_DOWNLOAD_DONE:
        sim_eng_log_event(e, ev->kind, ev->who, 0, 0);
        sim_eng_timeline_row(e, ev->who, "download", cl->job_start, "ok");
        if (e->net && sim_eng_job_pending(e, ev->who)) /* the lookahead's promise (engine_jobs.c) */
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                            "client %d's download ended at %.9f s before its job was placed: "
                            "the lookahead ran past it",
                            ev->who, sim_time_to_s(e->now));
        if (e->net) sim_eng_net_download_done(e, ev->who);
        return SIM_OK;
    case SIM_EV_TRAIN_DONE:
        cl->flops += cl->job_flops; /* counted when the device has done the work */
        e->tot.flops += cl->job_flops;
        if (cl->pending_priv) { /* the device now holds its new private state */
            int rc = sim_store_put(e->store, (uint32_t)ev->who, cl->pending_priv,
                                   cl->pending_priv_len, err);
            if (rc) return rc;
            cl->priv_len = cl->pending_priv_len;
            e->has_states = 1;
            free(cl->pending_priv);
            cl->pending_priv = NULL;
        }
        sim_eng_log_event(e, ev->kind, ev->who, 0, cl->job_flops);
        sim_eng_timeline_row(e, ev->who, "train", cl->job_down_end, "ok");
        if (cl->up_len == 0) goto arrived; /* nothing to upload (local training only) */
        if (e->net) sim_eng_net_train_done(e, ev->who);
        return SIM_OK;
    case SIM_EV_UPLOAD_DONE: {
        double ub = sim_message_bytes(&e->spec, cl->up_len);
        cl->bytes_up += ub;
        e->tot.bytes_up += ub;
        sim_eng_log_event(e, ev->kind, ev->who, ub, 0);
        goto arrived;
    }
    case SIM_EV_JOB_LOST:
        if (e->net) sim_eng_net_job_end(e, ev->who);
        cl->busy = 0;
        cl->lost++;
        e->tot.dropped++;
        free(cl->up);
        cl->up = NULL;
        free(cl->pending_priv);
        cl->pending_priv = NULL;
        sim_eng_log_event(e, ev->kind, ev->who, 0, 0);
        if (e->en) sim_eng_energy_job_end(e, ev->who); /* after the event names its reason */
        sim_eng_timeline_row(e, ev->who,
                             e->now < cl->job_down_end    ? "download"
                             : e->now < cl->job_train_end ? "train"
                                                          : "upload",
                             e->now < cl->job_down_end    ? cl->job_start
                             : e->now < cl->job_train_end ? cl->job_down_end
                                                          : cl->job_train_end,
                             "lost");
        return f->mode == SIM_ASYNC ? sim_async_lost(e, err) : sim_sync_lost(e, ev->who, err);
    case SIM_EV_DEADLINE:
        if ((int)ev->arg == e->round && e->round_open) {
            sim_eng_log_event(e, ev->kind, -1, 0, 0);
            return sim_sync_close_round(e, err);
        }
        return SIM_OK;
    default:
        assert(0 && "unknown event kind");
        return SIM_OK;
    }
arrived:
    if (e->net) sim_eng_net_job_end(e, ev->who);
    if (e->en) sim_eng_energy_job_end(e, ev->who);
    cl->busy = 0;
    cl->arrived++;
    /* the server now has the job's report, on time or late */
    cl->seen_loss = cl->job_loss;
    cl->seen_loss_rms = cl->job_loss_rms;
    cl->seen_steps = cl->job_steps;
    cl->seen_duration_s = 1e-9 * (double)(e->now - cl->job_start);
    return f->mode == SIM_ASYNC ? sim_async_arrival(e, ev->who, err)
                                : sim_sync_arrival(e, ev->who, err);
}

/* The next event into *ev; 0 when there is none. Jobs are placed first when they are needed by
 * then (engine_jobs.c): the lookahead. With a network, the flows' rates are solved before time
 * moves on, once for every change at this instant (engine_net.c). */
static int next_event(sim_engine *e, sim_event *ev, sim_err *err, int *rc)
{
    if (e->net) sim_eng_net_settle(e);
    if (e->n_pend) {
        const sim_event *top = sim_queue_peek(&e->q);
        sim_time upto = top ? top->at : DEV_TIME_NEVER;
        if (e->need_min <= upto && (*rc = sim_eng_jobs_due(e, upto, err))) return 0;
    }
    return sim_queue_pop(&e->q, ev);
}

int sim_engine_run(sim_engine *e, sim_err *err)
{
    e->wall_start = e->wall_last = e->ckpt_wall = sim_eng_wall_s();
    e->rounds_at_start = e->round;
    /* a resumed run goes on from its events, or starts the round its checkpoint was written
     * before (sim_sync_start_round then writes none: that one is this round's) */
    int pending = e->start_pending;
    e->start_pending = 0;
    /* metrics.tsv starts at round 0, the initial model, so every curve starts where training
     * does (a resumed run has that row already) */
    if (!e->resumed) sim_eng_evaluate(e);
    int rc = e->resumed                     ? (pending ? sim_sync_start_round(e, err) : SIM_OK)
             : e->spec.fed.mode == SIM_SYNC ? sim_sync_start_round(e, err)
                                            : sim_async_fill(e, err);
    sim_event ev;
    while (!rc && !e->done && next_event(e, &ev, err, &rc)) {
        if (e->spec.fed.max_time > 0 && ev.at > e->spec.fed.max_time) {
            e->now = e->spec.fed.max_time;
            break;
        }
        e->now = ev.at;
        int round = e->round;
        rc = handle(e, &ev, err);
        if (!rc) rc = sim_eng_outputs_failed(e, err);
        if (!rc && !e->done) rc = boundary(e, e->round != round, &e->stopped, err);
        if (e->stopped) break;
    }
    if (e->stopped) return rc; /* the checkpoint holds the rest; clients.tsv comes at the end */
    /* jobs still out count their device time (clients.tsv) as if placed at dispatch */
    if (!rc) rc = sim_eng_jobs_due(e, DEV_TIME_NEVER, err);
    /* a run cut short by max_time (or with nothing left to do) still ends on an evaluation; one
     * at its last aggregation already is (evaluated again later, pFedGate's clients would lose
     * their own copies, dropped as the aggregation's event ended) */
    if (!rc && e->eval_round != e->round) sim_eng_evaluate(e);
    if (!rc && e->spec.fed.mode == SIM_ASYNC && !e->done && e->round < e->spec.fed.rounds &&
        e->spec.fed.max_time == 0 && !sim_queue_peek(&e->q))
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                      "async run stopped at aggregation %d: no client can take part any more",
                      e->round);
    sim_eng_progress(e, 1);
    e->wall_end = sim_eng_wall_s();
    if (!rc) rc = sim_eng_outputs_finish(e, err);
    sim_eng_tick(e, 1);
    if (!rc) rc = sim_eng_write_report(e, err);
    if (!rc && e->spec.out_dir) { /* finished: the folder holds results only (engine.h) */
        char path[1100];
        sim_eng_ckpt_path(e, path, sizeof path);
        if (unlink(path) && errno != ENOENT)
            rc = sim_fail(err, SIM_EIO, path, 0, 0, "finished, but cannot remove: %s",
                          strerror(errno));
        /* the states were for resuming (the spill goes as the store closes) */
        store_figures(e->store, &e->state_reads, &e->state_disk);
        if (rc) /* the checkpoint stays: so do the states it resumes from */
            sim_store_free(e->store);
        else
            rc = sim_store_remove(e->store, err);
        e->store = NULL;
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* construction */

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

int sim_eng_store_open(sim_engine *e, int resume, sim_err *err)
{
    const sim_run_spec *spec = &e->spec;
    char identity[64];
    snprintf(identity, sizeof identity, "scenario %016llx seed %llu",
             (unsigned long long)spec->scenario_hash, (unsigned long long)spec->seed);
    sim_store_opts o = {.budget = spec->state_memory ? spec->state_memory
                                                     : sim_state_budget_default()};
    return sim_store_open(&e->store, spec->out_dir, identity, &o,
                          resume ? SIM_STORE_RESUME : SIM_STORE_NEW, err);
}

int sim_eng_state_get(sim_engine *e, int32_t c, const void **data, size_t *len, sim_err *err)
{
    int rc = sim_store_get(e->store, (uint32_t)c, data, len, err);
    if (rc < 0) return rc;
    if (rc == 0 || *len != e->c[c].priv_len) /* a store that does not match the checkpoint */
        return sim_fail(err, SIM_EFORMAT, sim_store_path(e->store), 0, 0,
                        "the state store holds %zu bytes for client %d where the run recorded "
                        "%zu: it does not belong to this run's checkpoint",
                        rc ? *len : 0, c, e->c[c].priv_len);
    return SIM_OK;
}

int sim_engine_new(sim_engine **out, const sim_run_spec *spec, sim_err *err)
{
    *out = NULL;
    sim_engine *e = sim_xcalloc(1, sizeof *e);
    e->ckpt_round = -1;
    e->spec = *spec;
    e->n = spec->n_clients;
    e->c = sim_xcalloc((size_t)e->n, sizeof *e->c);
    e->sel = spec->fed.selection ? spec->fed.selection : &sim_sel_uniform;
    e->sel_cfg = spec->fed.selection ? spec->fed.selection_cfg : NULL;
    if (e->sel->state_new) e->sel_state = e->sel->state_new(e->sel_cfg, e->n);
    int cap = sim_eng_arrival_cap(&spec->fed, e->n);
    e->arrived = sim_xmalloc(sizeof(int32_t) * (size_t)cap);
    e->buf = sim_xcalloc((size_t)cap, sizeof *e->buf);
    e->tot.acc_global = e->tot.loss_global = e->tot.acc_pers = NAN;
    e->next_eval_time = spec->eval.every_time;
    e->retry_at = -1;
    e->eval_round = -1;
    e->need_min = DEV_TIME_NEVER;
    sim_queue_init(&e->q);
    if (spec->net) sim_eng_net_new(e);
    fl_worker_init(&e->worker);
    fl_worker_init(&e->price_worker);
    sim_eng_rows_init(e);
    e->price_env = e->spec.env;
    e->price_env.cost_only = 1;
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
        cl->seen_loss = cl->seen_loss_rms = cl->seen_duration_s = NAN;
        cl->job_loss = cl->job_loss_rms = NAN;
        cl->last_selected = -1;
    }
    if (spec->eval.n_shift && spec->env.part->n_test) sim_eng_build_shifts(e);
    int rc = SIM_OK;
    if ((e->sel->flags & SIM_SEL_PREDICTED) && !spec->predicted_s)
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                      "selection %s needs each client's predicted job time (none given)",
                      e->sel->name);
    if (!rc) e->server = spec->algo->server_new(&e->spec.env, err);
    if (!rc && !e->server) rc = SIM_EINVAL; /* server_new filled err */
    if (!rc) rc = sim_eng_energy_new(e, err);
    /* a resumed run's store opens as its checkpoint names its commit (engine_ckpt.c) */
    if (!rc && !spec->resume) rc = sim_eng_store_open(e, 0, err);
    uint64_t out_len[OUT_COUNT];
    if (!rc && spec->resume) {
        assert((spec->out_dir || spec->resume_payload) && "resume needs a checkpoint");
        rc = sim_eng_ckpt_load(e, out_len, err);
        e->resumed = 1;
        e->ckpt_round = e->round; /* its file stays until a newer one replaces it */
    }
    if (!rc && spec->out_dir)
        rc = spec->resume ? sim_eng_outputs_reopen(e, out_len, err)
                          : sim_eng_outputs_create(e, err);
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
    /* the files' headers only now: the workers forked above must not inherit them unflushed */
    if (!rc) rc = sim_eng_outputs_begin(e, err);
    if (rc) {
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
        free(e->c[c].pending_priv);
    }
    free(e->c);
    if (e->sel_state) e->sel->state_free(e->sel_state);
    free(e->arrived);
    for (int i = 0; i < e->n_arrived && e->spec.fed.mode == SIM_ASYNC; i++)
        free(e->buf[i].up);
    free(e->buf);
    sim_queue_destroy(&e->q);
    if (e->net) sim_eng_net_free(e);
    sim_eng_energy_free(e);
    sim_pool_free(e->pool);
    sim_eng_jobs_free(e);
    fl_worker_destroy(&e->worker);
    fl_worker_destroy(&e->price_worker);
    nn_model_destroy(&e->eval_model);
    for (int i = 0; e->shift_idx && i < e->spec.eval.n_shift * e->n; i++)
        free(e->shift_idx[i]);
    free(e->shift_idx);
    if (e->server) e->spec.algo->server_free(e->server);
    sim_eng_outputs_free(e);
    sim_eng_rows_unfetch(e);
    sim_store_free(e->store);
    free(e);
}

void sim_engine_totals(const sim_engine *e, sim_totals *t)
{
    *t = e->tot;
    t->workers_replaced = sim_pool_replaced(e->pool);
    t->workers_timed_out = sim_pool_timeouts(e->pool);
    t->workers_busy_s = sim_pool_busy_s(e->pool);
    t->state_reads = e->state_reads;
    t->state_disk = e->state_disk;
    if (e->store) store_figures(e->store, &t->state_reads, &t->state_disk);
    t->state_clients = 0;
    t->state_bytes = 0;
    for (int32_t c = 0; c < e->n; c++) {
        t->state_clients += e->c[c].priv_len > 0;
        t->state_bytes += (double)e->c[c].priv_len;
    }
    t->wall_s = e->wall_end - e->wall_start;
    t->now = e->now;
    t->round = e->round;
    t->stopped = e->stopped;
    t->checkpoint_round = e->ckpt_round;
}
