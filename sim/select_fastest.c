/* sim/select_fastest.c -- `fastest`: the clients whose job their device's profile predicts to be
 * shortest.
 *
 * A client's predicted job time is its round-1 job priced from its declared profile as `fedsim
 * check` prices it (sim_cli_predict_jobs: its own samples and steps, the algorithm's messages,
 * its device's speed at time 0), computed once before the run (SIM_SEL_PREDICTED). The k
 * shortest are picked, ties by the policy's stream; with `deadline_only`, k of those whose
 * predicted job ends within the sync round's deadline, uniformly at random (fewer when fewer make
 * it). Knows only the declared profiles: a device slowed by a speed trace later, or a job that
 * grows, is not seen. Stateless; stream SIM_RNG_SEL_FASTEST.
 */
#include "sim/engine.h" /* sim_fed_config: the deadline */
#include "sim/select.h"

#include <math.h>
#include <stdlib.h>

typedef struct fastest_config {
    int deadline_only;
} fastest_config;

static const sim_key KEYS[] = {
        {"deadline_only", SIM_KEY_BOOL, offsetof(fastest_config, deadline_only), .dflt = "false",
         .doc = "`true`: pick uniformly among the clients predicted to meet the sync round's "
                "`deadline` (needs one) instead of the fastest"},
        {0},
};

/* deadline_only needs a sync deadline: ctx->parent is the federation's config, read before */
static int fastest_check(void *cfg, const sim_yaml *map, const sim_key_ctx *ctx, sim_err *err)
{
    const fastest_config *o = cfg;
    const sim_fed_config *f = ctx->parent;
    if (o->deadline_only && (ctx->async || !f || f->deadline <= 0))
        return sim_yaml_fail(sim_yaml_get(map, "deadline_only"), err,
                             "deadline_only: needs a sync round's federation.deadline (%s)",
                             ctx->async ? "async rounds have none" : "none is set");
    return SIM_OK;
}

static int fastest_pick(void *st, const void *cfg, const sim_sel_view *v, int k, int32_t *out,
                        sim_rng *r)
{
    (void)st;
    const fastest_config *o = cfg;
    int n = v->n_cand, m = 0;
    double limit = 1e-9 * (double)v->deadline;
    sim_sel_item *it = sim_xmalloc(sizeof *it * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) {
        double tie = sim_rng_uniform(r); /* one draw per candidate, in id order */
        sim_sel_client sc;
        v->client(v->ctx, v->cand[i], &sc);
        double t = isnan(sc.predicted_s) ? INFINITY : sc.predicted_s;
        if (!o->deadline_only)
            it[m++] = (sim_sel_item){t, tie, v->cand[i]};
        else if (t <= limit)
            it[m++] = (sim_sel_item){tie, 0, v->cand[i]};
    }
    sim_sel_sort(it, m);
    int got = sim_sel_take(it, k < m ? k : m, out);
    free(it);
    return got;
}

const sim_sel_policy sim_sel_fastest = {
        .name = "fastest",
        .doc = "the clients whose declared device profile predicts the shortest job (as `fedsim "
               "check` prices it), or with `deadline_only` any of those predicted to meet the "
               "deadline. Knows the declared profiles and the clients' samples",
        .keys = KEYS,
        .size = sizeof(fastest_config),
        .check = fastest_check,
        .flags = SIM_SEL_PREDICTED,
        .purpose = SIM_RNG_SEL_FASTEST,
        .pick = fastest_pick,
};
