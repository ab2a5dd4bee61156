/* sim/engine_jobs.c -- dispatching client jobs, and the lookahead that lets jobs dispatched at
 * different simulated instants train at once (engine_int.h, DESIGN.md §4).
 *
 * A job is a pure function of what it is sent, and the engine needs its result only for the
 * events that follow from it: its training's end (when the device holds its new private state and
 * the cost is counted), its upload, and whether the device goes offline first. Everything else of
 * a dispatch is known at once: the download's length and end, the device's availability, the
 * job's id and the seqs of its events. So with a worker pool the engine sends the job off, places
 * what it knows, and goes on processing events without the result for as long as none of them can
 * depend on it: until the earliest instant the job's training could end (the conservative rule
 * of Chandy and Misra, with the job's cost as the lookahead). That instant is
 *   - exact for algorithms whose work is known before training (FL_FIXED_COST): the cost-only
 *     job prices it at dispatch, and the result is checked against it when it comes;
 *   - a lower bound for the others: the work fl_algo.job_bound gives (or none: training could
 *     take no time, and the download alone is the lookahead); a result that trained faster is an
 *     error naming the algorithm.
 * A job whose device goes offline before that instant is lost for certain: it is placed whole at
 * dispatch and not trained at all (its result could never be used).
 *
 * Each job reserves SIM_JOB_SEQS event seqs when dispatched (download end, training end, upload
 * end or loss), and its events are pushed with them whenever they are placed; so they fire,
 * among events at the same instant, where they would have had the result been there at dispatch,
 * and the outputs are those of training every job at once (what runs without a pool do), for any
 * worker count and any order results come back in. Jobs not yet placed are placed before a
 * checkpoint (which then holds no job in flight on a worker), before a round that finds no
 * client picks its retry from busy clients' ends, and at the end of the run. With shared links
 * (engine_net.c) a job's phases end only as the flows progress: its download starts at dispatch,
 * and its result is needed when the download could end at the earliest (its latency and its
 * bytes at its own link's rate: sharing only slows a flow), or when the device goes offline
 * first (the loss frees what the job holds).
 */
#include "sim/engine_int.h"

#include "sim/cost.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SIM_JOB_SEQS = 3 }; /* download end, training end, upload end or loss */

void sim_eng_job_rates(const sim_engine *e, int32_t c, uint64_t job_id, double *down, double *up)
{
    const dev_profile *p = &e->spec.devices[c];
    *down = p->down_bps, *up = p->up_bps;
    if (!(p->down_draw.sigma > 0 || p->up_draw.sigma > 0)) return;
    sim_rng r;
    sim_rng_seed(&r, e->spec.seed, SIM_RNG_TRANSFER, job_id);
    if (p->down_draw.sigma > 0) *down = dev_rate_draw(&p->down_draw, &r);
    if (p->up_draw.sigma > 0) *up = dev_rate_draw(&p->up_draw, &r);
}

/* Client c's profile for job id: its own, or a copy in *tmp with the job's drawn rates. */
static const dev_profile *job_profile(const sim_engine *e, int32_t c, uint64_t id, dev_profile *tmp)
{
    const dev_profile *dev = &e->spec.devices[c];
    if (!(dev->down_draw.sigma > 0 || dev->up_draw.sigma > 0)) return dev;
    *tmp = *dev;
    sim_eng_job_rates(e, c, id, &tmp->down_bps, &tmp->up_bps);
    return tmp;
}

/* The test hook FEDSIM_TEST_BOUND_SCALE=K (tests only): every job's predicted work or lower
 * bound is scaled by K, so a test can check that a wrong one stops the run. */
static double bound_scale(void)
{
    static double k = -1;
    if (k < 0) {
        const char *v = getenv("FEDSIM_TEST_BOUND_SCALE");
        k = v ? atof(v) : 1;
        if (!(k > 0)) k = 1;
    }
    return k;
}

/* Price job P (not yet trained) from what is known at dispatch: its download, the device's next
 * availability change, and the least instant its training can end (P->train_lo, exact with
 * FL_FIXED_COST). Sets P->need_at, or P->lost when the device goes offline before it. */
/* The test hook FEDSIM_TEST_LOOKAHEAD=FILE (tests only): a line per job placed after its dispatch,
 * "job client dispatched need placed train_end events" (instants in ns; events: how many the
 * engine handled meanwhile), so a test can check the engine never ran past a job's need. */
static int lookahead_log(const sim_engine *e, const sim_pending *P, sim_time train_end,
                         sim_err *err)
{
    static FILE *f;
    static int tried;
    if (!tried) {
        tried = 1;
        const char *path = getenv("FEDSIM_TEST_LOOKAHEAD");
        if (path && !(f = fopen(path, "w")))
            return sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno));
    }
    if (f && (fprintf(f, "%llu %d %lld %lld %lld %lld %ld\n", (unsigned long long)P->id,
                      (int)P->client, (long long)e->c[P->client].job_start, (long long)P->need_at,
                      (long long)e->now, (long long)train_end, e->tot.events - P->events_at) < 0 ||
              fflush(f)))
        return sim_fail(err, SIM_EIO, "FEDSIM_TEST_LOOKAHEAD", 0, 0, "cannot write: %s",
                        strerror(errno));
    return SIM_OK;
}

static int predict(sim_engine *e, sim_pending *P, const fl_job *job, sim_err *err)
{
    const fl_algo *algo = e->spec.algo;
    sim_client *cl = &e->c[P->client];
    dev_profile tmp;
    const dev_profile *dev = job_profile(e, P->client, P->id, &tmp);
    if (e->net) {
        double db = sim_message_bytes(&e->spec, P->down_len);
        /* less a microsecond: the flow solver's integer-ns finishes may round a flow alone
         * a little below the transfer time priced alone */
        sim_time own = db > 0 ? dev_transfer_ns(dev->latency_ns, db, dev->down_bps) - 1000
                              : dev->latency_ns;
        sim_time off = dev_avail_next_change(&cl->avail, e->now);
        P->need_at = own >= DEV_TIME_NEVER - e->now ? DEV_TIME_NEVER : e->now + (own > 0 ? own : 0);
        if (off < P->need_at) P->need_at = off;
        P->predicted = 1;
        return SIM_OK;
    }
    fl_result r;
    fl_result_init(&r);
    P->exact = (algo->flags & FL_FIXED_COST) != 0;
    int rc = SIM_OK;
    if (P->exact) {
        fl_job cj = *job;
        cj.down = NULL, cj.down_len = 0; /* cost-only jobs read no message */
        rc = algo->client_train(&e->price_env, &cj, &e->price_worker, &r, err);
    } else if (algo->job_bound) {
        algo->job_bound(&e->spec.env, job, &e->price_worker, &r);
    }
    if (rc) {
        fl_result_destroy(&r);
        return rc;
    }
    dev_job dj = {.work = sim_cost_work(&r.cost, r.steps),
                  .down_bytes = sim_message_bytes(&e->spec, P->down_len),
                  .down_always = 1};
    fl_result_destroy(&r);
    double k = bound_scale();
    if (k != 1) {
        dj.work.flops *= k, dj.work.flops_masked *= k, dj.work.flops_masked_nnz *= k;
        dj.work.bytes *= k, dj.work.steps *= k;
    }
    dev_phases ph;
    dev_price(dev, &dj, e->now, &ph);
    P->down_end = ph.down_end;
    P->train_lo = ph.train_end;
    P->flops = ph.flops;
    P->off = dev_avail_next_change(&cl->avail, e->now);
    /* A device that never goes offline loses a job it can never finish at once (place_job): when
     * that may be this job's fate (its training may never end, on a speed trace that may stop, or
     * its upload may not, on a link of 0 bit/s), its result is awaited now. */
    int may_never = ph.train_end == DEV_TIME_NEVER || dev->speed || !(dev->up_bps > 0);
    P->predicted = 1;
    if (e->en) { /* a battery reaching its floor before the training could end loses the job */
        sim_time d = sim_eng_energy_death(e, P->client, P->down_end, DEV_TIME_NEVER, DEV_TIME_NEVER,
                                          P->off);
        if (d < P->train_lo) P->off = d, P->dies = 1;
    }
    if (P->off == DEV_TIME_NEVER && may_never)
        P->need_at = e->now;
    else if (P->off < P->train_lo)
        P->lost = 1, P->need_at = DEV_TIME_NEVER; /* never: placed whole at dispatch */
    else
        P->need_at = P->train_lo;
    return SIM_OK;
}

/* The dispatch itself, in client-id order: the job's id and seqs, the device busy, the download
 * counted and logged, and, for a job placed later, what is known of it now. */
static void commit(sim_engine *e, sim_pending *P, int deferred)
{
    sim_client *cl = &e->c[P->client];
    double db = sim_message_bytes(&e->spec, P->down_len);
    assert(P->id == e->next_job + 1);
    e->next_job = P->id;
    P->seq = sim_queue_reserve(&e->q, SIM_JOB_SEQS);
    cl->busy = 1;
    cl->job_round = e->round;
    cl->job_id = P->id;
    cl->jobs++;
    e->tot.jobs++;
    e->dispatches++;
    free(cl->up);
    cl->up = NULL;
    cl->up_len = 0;
    free(cl->pending_priv);
    cl->pending_priv = NULL;
    cl->pending_priv_len = 0;
    /* The server sends the whole download at dispatch: its bytes count now. */
    cl->bytes_down += db;
    e->tot.bytes_down += db;
    sim_eng_log_event(e, SIM_EV_DISPATCH, P->client, db, 0);
    cl->weight = e->spec.env.cfg->uniform ? 1 : e->spec.env.part->n[P->client];
    cl->job_start = e->now;
    P->events_at = e->tot.events;
    if (e->net) { /* the download starts now; the rest as the flows progress */
        sim_eng_net_start(e, P->client, db, P->seq);
        return;
    }
    if (!deferred || P->need_at == e->now) return; /* place_job does it all */
    cl->job_down_end = P->down_end;
    if (P->down_end <= P->off)
        sim_queue_push_seq(&e->q, P->down_end, SIM_EV_DOWNLOAD_DONE, P->client, P->id, P->seq);
    P->down_placed = 1;
    if (!P->lost) return;
    /* lost before its training could end: the whole job is known */
    cl->job_train_end = P->train_lo; /* after the loss: the timeline's phase is right */
    cl->job_flops = P->flops;
    cl->busy_until = P->off;
    cl->busy_ns += P->off - e->now;
    if (e->en) e->en[P->client].job_dies = P->dies;
    sim_queue_push_seq(&e->q, P->off, SIM_EV_JOB_LOST, P->client, P->id, P->seq + 2);
}

/* Place job P from its result: the device's new state and message, its phases' events. */
static int place_job(sim_engine *e, sim_pending *P, sim_err *err)
{
    int32_t c = P->client;
    sim_client *cl = &e->c[c];
    fl_result *r = &P->out.res;
    const fl_algo *algo = e->spec.algo;
    if (P->out.rc) {
        *err = P->out.err;
        return P->out.rc;
    }
    if (!isfinite(r->loss))
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "training diverged: client %d's loss is %g in round %d (lower "
                        "algorithm.lr, or set algorithm.clip)",
                        c, r->loss, cl->job_round);
    dev_profile tmp;
    const dev_profile *dev = job_profile(e, c, P->id, &tmp);
    dev_job job = {.work = sim_cost_work(&r->cost, r->steps),
                   .down_bytes = sim_message_bytes(&e->spec, P->down_len),
                   .up_bytes = sim_message_bytes(&e->spec, r->up_bytes),
                   .down_always = 1};
    dev_phases ph;
    dev_price(dev, &job, cl->job_start, &ph);
    sim_time t_down = ph.down_end, t_train = ph.train_end, t_up = ph.up_end;
    if (P->down_placed) { /* what the engine ran ahead on must hold */
        if (P->exact && (t_train != P->train_lo || ph.flops != P->flops))
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                            "algorithm %s declares its jobs' work known before training, but "
                            "client %d's job %llu trained %.17g FLOPs to end at %.9f s where its "
                            "cost-only job priced %.17g to end at %.9f s",
                            algo->name, c, (unsigned long long)P->id, ph.flops,
                            sim_time_to_s(t_train), P->flops, sim_time_to_s(P->train_lo));
        if (t_train < P->train_lo || e->now > P->train_lo)
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                            "algorithm %s's lower bound on a job's training is too high: client "
                            "%d's job %llu ended its training at %.9f s, before the bound %.9f s "
                            "the engine simulated ahead to",
                            algo->name, c, (unsigned long long)P->id, sim_time_to_s(t_train),
                            sim_time_to_s(P->train_lo));
        assert(t_down == P->down_end);
        int rc = lookahead_log(e, P, t_train, err);
        if (rc) return rc;
    }
    cl->up_len = r->up_bytes; /* in cost-only mode the size exists without the content */
    /* The client keeps the result's buffers themselves: a copy of a model-sized message would
     * touch fresh pages for every job of every round (a fifth of the coordinator's time). */
    if (r->up.size) cl->up = msgpack_sbuffer_release(&r->up);
    cl->pending_priv_len = r->priv.size;
    if (r->priv.size) cl->pending_priv = msgpack_sbuffer_release(&r->priv);
    cl->job_loss = r->loss;
    cl->job_loss_rms = r->cost.loss_n > 0 ? sqrt(r->cost.loss_sq / r->cost.loss_n) : NAN;
    cl->job_steps = r->steps;
    if (e->net) { /* shared links: the phases are scheduled as they end (engine_net.c) */
        sim_eng_net_work(e, c, &job, &ph);
        return P->predicted ? lookahead_log(e, P, P->need_at, err) : SIM_OK;
    }
    sim_time off = P->predicted ? P->off : dev_avail_next_change(&cl->avail, cl->job_start);
    if (t_up == DEV_TIME_NEVER && off == DEV_TIME_NEVER)
        off = cl->job_start; /* the device can never finish (its speed stays 0): lost at once */
    sim_time end = off < t_up ? off : t_up;
    if (e->en) { /* a battery that reaches its floor first ends the job then */
        sim_time d = sim_eng_energy_death(e, c, t_down, t_train, t_up, end);
        e->en[c].job_dies = d < end;
        if (d < end) off = end = d;
    }
    cl->busy_until = end;
    cl->busy_ns += end - cl->job_start;
    if (!P->down_placed && t_down <= end)
        sim_queue_push_seq(&e->q, t_down, SIM_EV_DOWNLOAD_DONE, c, P->id, P->seq);
    /* what the device executed: the masked-out FLOPs its sparse runtime skips are not counted */
    cl->job_flops = ph.flops;
    cl->job_down_end = t_down;
    cl->job_train_end = t_train;
    if (t_train <= end) sim_queue_push_seq(&e->q, t_train, SIM_EV_TRAIN_DONE, c, P->id, P->seq + 1);
    if (off < t_up)
        sim_queue_push_seq(&e->q, off, SIM_EV_JOB_LOST, c, P->id, P->seq + 2);
    else if (r->up_bytes) /* without an upload, the job arrives when its training ends */
        sim_queue_push_seq(&e->q, t_up, SIM_EV_UPLOAD_DONE, c, P->id, P->seq + 2);
    return SIM_OK;
}

static void pending_free(sim_pending *P)
{
    if (!P) return;
    fl_result_destroy(&P->out.res);
    free(P);
}

/* Wait for job P's result (when it was trained on a worker) and place it. */
static int settle(sim_engine *e, sim_pending *P, sim_err *err)
{
    int rc = P->sent ? sim_pool_wait(e->pool, &P->out, err) : SIM_OK;
    return rc ? rc : place_job(e, P, err);
}

/* Dispatch jobs to the n clients in sel (client-id order) now, counting each in in_flight. Every
 * job is built (down message, private state) and sent to a worker or trained here; the workers
 * may run them in any order. Without a pool (or with shared links) every job is placed once all
 * are back, in sel's order; with one, jobs are placed as the simulation reaches them
 * (sim_eng_jobs_due). A job's down message lives only until its job is handed over. */
int sim_eng_dispatch_batch(sim_engine *e, const int32_t *sel, int n, sim_err *err)
{
    const fl_algo *algo = e->spec.algo;
    int cost_only = e->spec.env.cost_only, rc = SIM_OK;
    int deferred = e->pool != NULL;
    size_t nn = (size_t)(n > 0 ? n : 1);
    sim_pending **P = sim_xcalloc(nn, sizeof *P);
    for (int i = 0; i < n; i++) {
        P[i] = sim_xcalloc(1, sizeof **P);
        fl_result_init(&P[i]->out.res);
        P[i]->client = sel[i];
        P[i]->id = e->next_job + 1 + (uint64_t)i;
        P[i]->off = DEV_TIME_NEVER;
    }
    /* Hand the largest jobs out first (longest-processing-time order, by training samples), so
     * that with several workers the batch does not wait on one big job started last. The order
     * of training cannot change a result; the pool-less path keeps sel's order. */
    int *order = sim_xmalloc(sizeof(int) * nn);
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
        P[i]->down_len = algo->job_down(e->server, sel[i], e->round, cost_only ? NULL : &down);
        uint64_t stream = e->spec.fed.mode == SIM_SYNC
                                  ? (uint64_t)sel[i] << 32 | (uint32_t)e->round
                                  : (uint64_t)1 << 63 | (e->dispatches + (uint64_t)i);
        const void *priv = NULL; /* the store's buffer: valid until its next call, after the
                                    job is trained here or framed for a worker */
        size_t priv_len = 0;
        if (cl->priv_len && (rc = sim_eng_state_get(e, sel[i], &priv, &priv_len, err))) break;
        fl_job job = {sel[i], e->round, down.data, down.size, priv, priv_len, stream};
        if (e->en) sim_eng_energy_start(e, sel[i]); /* the battery, idle until now */
        if (deferred && (rc = predict(e, P[i], &job, err))) break;
        if (P[i]->lost) continue; /* never trained: its result could not be used */
        if (e->pool) {
            rc = sim_pool_submit(e->pool, &P[i]->out, &job, err);
            P[i]->sent = 1;
        } else {
            P[i]->out.rc = algo->client_train(&e->spec.env, &job, &e->worker, &P[i]->out.res,
                                              &P[i]->out.err);
        }
    }
    msgpack_sbuffer_destroy(&down);
    if (!rc && e->pool && !deferred) rc = sim_pool_wait(e->pool, NULL, err);
    for (int i = 0; i < n && !rc; i++) {
        commit(e, P[i], deferred);
        e->in_flight++;
        if (deferred && P[i]->lost) continue; /* placed whole by commit, never trained */
        if (deferred) {
            if (e->n_pend == e->cap_pend)
                e->pend = sim_xrealloc(
                        e->pend, sizeof *e->pend * (size_t)(e->cap_pend = 2 * e->cap_pend + 16));
            e->pend[e->n_pend++] = P[i];
            if (P[i]->need_at < e->need_min) e->need_min = P[i]->need_at;
            P[i] = NULL;
        } else {
            rc = place_job(e, P[i], err);
        }
    }
    for (int i = 0; i < n; i++)
        pending_free(P[i]);
    free(P);
    free(order);
    return rc;
}

int sim_eng_job_pending(const sim_engine *e, int32_t c)
{
    for (int i = 0; i < e->n_pend; i++)
        if (e->pend[i]->client == c) return 1;
    return 0;
}

int sim_eng_jobs_due(sim_engine *e, sim_time upto, sim_err *err)
{
    int rc = SIM_OK;
    for (int i = 0; i < e->n_pend && !rc;) {
        sim_pending *P = e->pend[i];
        if (P->need_at > upto) {
            i++;
            continue;
        }
        rc = settle(e, P, err);
        e->pend[i] = e->pend[--e->n_pend]; /* the order of placing cannot matter: seqs */
        pending_free(P);
    }
    e->need_min = DEV_TIME_NEVER;
    for (int i = 0; i < e->n_pend; i++)
        if (e->pend[i]->need_at < e->need_min) e->need_min = e->pend[i]->need_at;
    return rc;
}

void sim_eng_jobs_free(sim_engine *e)
{
    for (int i = 0; i < e->n_pend; i++)
        pending_free(e->pend[i]);
    free(e->pend);
    e->pend = NULL;
    e->n_pend = e->cap_pend = 0;
    e->need_min = DEV_TIME_NEVER;
}
