/* sim/async.c -- FedBuff-style asynchronous aggregation (engine.h): `concurrency` jobs are kept in
 * flight; arriving updates wait in a buffer, and every `buffer` of them are absorbed together in
 * client-id order, each weighted by its staleness (how many model versions passed since its job
 * started, federation.staleness).
 */
#include "sim/engine_int.h"

#include <math.h>
#include <stdlib.h>

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
int sim_async_fill(sim_engine *e, sim_err *err)
{
    int want = e->spec.fed.concurrency - e->in_flight;
    if (want <= 0) return SIM_OK;
    if (want > e->n) want = e->n;
    int32_t *sel = sim_xmalloc(sizeof(int32_t) * (size_t)want);
    int got = sim_eng_select_clients(e, want, sel, e->dispatches + ((uint64_t)1 << 40));
    int rc = sim_eng_dispatch_batch(e, sel, got, err);
    free(sel);
    if (rc || got == want || e->retry_at >= 0) return rc;
    sim_time next = DEV_TIME_NEVER;
    for (int32_t c = 0; c < e->n; c++) {
        sim_client *cl = &e->c[c];
        if (cl->excluded || cl->busy) continue;
        sim_time t = sim_eng_next_change(e, c);
        if (t < next) next = t;
    }
    if (next != DEV_TIME_NEVER) {
        e->retry_at = next;
        sim_eng_schedule(e, next, SIM_EV_RETRY, -1, 0);
    }
    return SIM_OK;
}

static int cmp_buffered(const void *a, const void *b)
{
    const sim_buffered *x = a, *y = b;
    return (x->client > y->client) - (x->client < y->client);
}

/* Buffer client c's update (its client may start another job before the buffer is full); every
 * `buffer` updates, absorb them in client-id order with their staleness weights. */
static int buffer_update(sim_engine *e, int32_t c, sim_err *err)
{
    const sim_fed_config *f = &e->spec.fed;
    sim_client *cl = &e->c[c];
    sim_buffered *b = &e->buf[e->n_arrived++];
    *b = (sim_buffered){c, e->round - cl->job_round, cl->up, cl->up_len, cl->weight};
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
    int participants = e->n_arrived;
    e->n_arrived = 0;
    sim_eng_aggregate(e, participants);
    return SIM_OK;
}

/* Client c's update arrived: buffered (and aggregated when the buffer is full), and its slot
 * refilled. */
int sim_async_arrival(sim_engine *e, int32_t c, sim_err *err)
{
    if (e->c[c].up_len) sim_eng_timeline_row(e, c, "upload", e->c[c].job_train_end, "ok");
    e->in_flight--;
    int rc = buffer_update(e, c, err);
    return rc ? rc : e->done ? SIM_OK : sim_async_fill(e, err);
}

/* A job was lost: its slot is refilled. */
int sim_async_lost(sim_engine *e, sim_err *err)
{
    e->in_flight--;
    return sim_async_fill(e, err);
}
