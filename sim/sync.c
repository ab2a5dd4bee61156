/* sim/sync.c -- synchronous rounds (engine.h): a round selects ceil(per_round · over_commit) idle
 * online clients, dispatches them together, and closes on its per_round-th arrival, when every
 * job it started has arrived or been lost, or at its deadline; what arrives after that is late.
 * The arrived updates are absorbed in client-id order, whatever order they arrived in.
 */
#include "sim/engine_int.h"

#include <stdlib.h>

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

/* Absorb the arrived updates in client-id order, aggregate, evaluate, start the next round. */
int sim_sync_close_round(sim_engine *e, sim_err *err)
{
    e->round_open = 0;
    sim_eng_sort_ids(e->arrived, e->n_arrived);
    for (int i = 0; i < e->n_arrived; i++) {
        sim_client *cl = &e->c[e->arrived[i]];
        int rc = absorb(e, e->arrived[i], cl->weight, err);
        if (rc) return rc;
    }
    sim_eng_aggregate(e, e->n_arrived);
    return e->done ? SIM_OK : sim_sync_start_round(e, err);
}

/* A periodic checkpoint due is written here, before the round's jobs are dispatched, and marked
 * to start the round on resume. Dispatching trains every job of the round before the event ends,
 * so a checkpoint written after it would lose the round to a worker lost during the training (an
 * MPI rank cannot be replaced: DESIGN.md §13). */
int sim_sync_start_round(sim_engine *e, sim_err *err)
{
    if (sim_eng_ckpt_due(e)) {
        e->start_pending = 1;
        int rc = sim_eng_ckpt_write(e, err);
        e->start_pending = 0;
        if (rc) return rc;
    }
    const sim_fed_config *f = &e->spec.fed;
    sim_eng_log_event(e, SIM_EV_ROUND_START, -1, 0, 0);
    int want = sim_eng_arrival_cap(f, e->n) - 1; /* ceil(per_round × over_commit), at most n */
    int32_t *sel = sim_xmalloc(sizeof(int32_t) * (size_t)(want > 0 ? want : 1));
    int got = sim_eng_select_clients(e, want, sel, (uint64_t)e->round);
    e->n_arrived = 0;
    e->in_flight = 0;
    e->target = got < f->per_round ? got : f->per_round;
    e->round_open = 1;
    if (got == 0) {
        /* Nobody can take part now: try again when the first busy or offline client changes
         * (busy ones' ends are known once their jobs are placed). */
        free(sel);
        int rc = sim_eng_jobs_due(e, DEV_TIME_NEVER, err);
        if (rc) return rc;
        sim_time next = DEV_TIME_NEVER;
        int idle = 0; /* clients that could take part now, which a selection policy passed over */
        for (int32_t c = 0; c < e->n; c++) {
            sim_client *cl = &e->c[c];
            if (cl->excluded) continue;
            idle += !cl->busy && dev_avail_online(&cl->avail, e->now) &&
                    (!e->en || sim_eng_energy_ok(e, c));
            sim_time t = cl->busy ? cl->busy_until : sim_eng_next_change(e, c);
            if (t < next) next = t;
        }
        e->round_open = 0;
        if (next == DEV_TIME_NEVER) {
            e->done = 1;
            if (idle)
                return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                                "round %d: federation.selection %s picked none of the %d clients "
                                "that can take part, and none of them will change",
                                e->round, e->sel->name, idle);
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                            "round %d: no client can take part now or later (all excluded%s or "
                            "offline for good)",
                            e->round, e->en ? ", out of battery" : "");
        }
        sim_eng_schedule(e, next, SIM_EV_ROUND_START, -1, (uint64_t)e->round);
        return SIM_OK;
    }
    int rc = sim_eng_dispatch_batch(e, sel, got, err);
    free(sel);
    if (rc) return rc;
    if (f->deadline > 0)
        sim_eng_schedule(e, e->now + f->deadline, SIM_EV_DEADLINE, -1, (uint64_t)e->round);
    return SIM_OK;
}

/* Client c's update arrived (its upload ended, or its training when it uploads nothing): it
 * counts toward the round, or is late after its round closed. */
int sim_sync_arrival(sim_engine *e, int32_t c, sim_err *err)
{
    sim_client *cl = &e->c[c];
    int late = cl->job_round != e->round || !e->round_open;
    if (cl->up_len) sim_eng_timeline_row(e, c, "upload", cl->job_train_end, late ? "late" : "ok");
    if (late) {
        cl->late++;
        e->tot.late++;
        free(cl->up);
        cl->up = NULL;
        sim_eng_log_event(e, SIM_EV_LATE, c, 0, 0);
        return SIM_OK;
    }
    e->arrived[e->n_arrived++] = c;
    e->in_flight--;
    if (e->n_arrived >= e->target || e->in_flight == 0) return sim_sync_close_round(e, err);
    return SIM_OK;
}

/* Client c's job was lost: the round closes once none of its jobs is still out. */
int sim_sync_lost(sim_engine *e, int32_t c, sim_err *err)
{
    if (e->c[c].job_round == e->round && e->round_open && --e->in_flight == 0)
        return sim_sync_close_round(e, err);
    return SIM_OK;
}
