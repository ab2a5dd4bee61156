/* sim/select_available.c -- `available`: the clients whose availability process predicts they
 * stay online through their whole job.
 *
 * Each candidate (online now) is ranked by P(online through T | online now), T its predicted job
 * time (as `fastest` predicts it, SIM_SEL_PREDICTED), from its class's declared availability
 * (devices/avail.h), never from its process's coming draws:
 *   always   1;
 *   markov   exp(−T / mean_on): holding times are exponential, so the time left online has the
 *            same law whenever it is asked;
 *   trace    with a fixed offset the trace says exactly (1 when it stays on from now through
 *            now + T, else 0); with a random per-client offset (not known to the server) the
 *            share of the period's online time from which T more online time follows: Σ max(0,
 *            L_j − T) / Σ L_j over its online spans L_j (joined across the period's end).
 * With devices.energy, a client whose battery is predicted to reach its floor mid-job (its job's
 * predicted energy, less what it charges over the job at the rate it charges now, is at least
 * what its battery holds above the floor: what a phone reports) is ranked after every other:
 * picked only when too few others can take part. The k most likely are picked, ties by the
 * policy's stream (so among always-online clients it picks uniformly). Knows the declared
 * profiles, the clients' samples and their batteries' reports. Stateless; stream
 * SIM_RNG_SEL_AVAILABLE.
 */
#include "sim/select.h"

#include <math.h>
#include <stdlib.h>

/* The share of a looping trace's online time from which t_ns more online time follows. Segment
 * i holds value[i] from at[i] to at[i + 1]; the last one to the period's end and on, before the
 * first point, to at[0] of the next. Walked once around from an offline segment. */
static double trace_share(const dev_trace *tr, double t_ns)
{
    if (!tr->period) return 1; /* not looping: a random offset needs a period (devices/avail.h) */
    size_t n = tr->n, off = n;
    for (size_t i = 0; i < n && off == n; i++)
        if (tr->value[i] < 0.5) off = i;
    if (off == n) return 1; /* never offline */
    double on = 0, kept = 0, span = 0;
    for (size_t j = 1; j <= n; j++) { /* the last is segment off itself: it closes the span */
        size_t i = (off + j) % n;
        double len = i + 1 < n ? (double)(tr->at[i + 1] - tr->at[i])
                               : (double)(tr->period - tr->at[n - 1] + tr->at[0]);
        if (tr->value[i] > 0.5) {
            span += len;
        } else {
            on += span, kept += fmax(0, span - t_ns);
            span = 0;
        }
    }
    return on > 0 ? kept / on : 0;
}

double sim_sel_stay_online(const dev_avail_spec *a, sim_time now, double t_s)
{
    double t_ns = t_s * 1e9;
    switch (a->kind) {
    case DEV_AVAIL_MARKOV:
        return exp(-t_ns / (double)a->mean_on_ns);
    case DEV_AVAIL_TRACE: {
        if (a->offset_random) return trace_share(a->trace, t_ns);
        sim_time at = now + a->offset_ns;
        if (dev_trace_value(a->trace, at) < 0.5) return 0;
        sim_time next = dev_trace_next_change(a->trace, at);
        return next == DEV_TIME_NEVER || (double)(next - at) >= t_ns ? 1 : 0;
    }
    default:
        return 1;
    }
}

static int available_pick(void *st, const void *cfg, const sim_sel_view *v, int k, int32_t *out,
                          sim_rng *r)
{
    (void)st, (void)cfg;
    int n = v->n_cand;
    sim_sel_item *it = sim_xmalloc(sizeof *it * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) {
        double tie = sim_rng_uniform(r); /* one draw per candidate, in id order */
        sim_sel_client sc;
        v->client(v->ctx, v->cand[i], &sc);
        double t = isnan(sc.predicted_s) ? 0 : sc.predicted_s;
        double p = sim_sel_stay_online(&sc.device->avail, v->now, t);
        if (sc.predicted_j > 0 && sc.predicted_j - sc.charging_w * t >= sc.battery_j)
            p = -1; /* its battery runs out first */
        it[i] = (sim_sel_item){-p, tie, v->cand[i]};
    }
    sim_sel_sort(it, n);
    int got = sim_sel_take(it, k < n ? k : n, out);
    free(it);
    return got;
}

const sim_sel_policy sim_sel_available = {
        .name = "available",
        .doc = "the clients most likely to stay online through their predicted job, from their "
               "class's declared availability (always, Markov mean_on, a trace) and the job "
               "time their profile predicts; with devices.energy, those whose battery is "
               "predicted to reach its floor first come last. Knows the declared profiles, the "
               "clients' samples and their batteries' reports",
        .flags = SIM_SEL_PREDICTED,
        .purpose = SIM_RNG_SEL_AVAILABLE,
        .pick = available_pick,
};
