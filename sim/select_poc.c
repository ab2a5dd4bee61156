/* sim/select_poc.c -- `power-of-choice` (Cho, Wang and Joshi, "Towards Understanding Biased
 * Client Selection in Federated Learning", AISTATS 2022).
 *
 * From the clients that can take a job now, d are drawn without replacement with probability
 * proportional to their samples |B_i| (one after another, each among those not yet drawn; a
 * client without samples only once every other is drawn, uniformly), and the k of them with the
 * highest current local loss are picked. The loss a server knows is the one the client's last
 * arrived job reported; a client never heard from counts as +inf, so it is tried first (the
 * paper has every drawn client compute its loss; here that would be a job's future). Ties (two
 * unknown, or equal losses): the earlier drawn first. d = `d`, or 2k when 0; at most the
 * candidates. Stateless; stream SIM_RNG_SEL_POC.
 */
#include "sim/select.h"

#include <math.h>
#include <stdlib.h>

typedef struct poc_config {
    int d;
} poc_config;

static const sim_key KEYS[] = {
        {"d", SIM_KEY_INT, offsetof(poc_config, d), .dflt = "0", .lo = 0, .hi = 1e9,
         .doc = "candidates drawn (weighted by samples) before the k of highest loss are kept; 0: "
                "2k, at least k"},
        {0},
};

static int poc_pick(void *st, const void *cfg, const sim_sel_view *v, int k, int32_t *out,
                    sim_rng *r)
{
    (void)st;
    const poc_config *o = cfg;
    int n = v->n_cand, d = o->d > 0 ? o->d : 2 * k;
    if (d < k) d = k;
    if (d > n) d = n;
    double *w = sim_xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1)), total = 0;
    sim_sel_item *drawn = sim_xmalloc(sizeof *drawn * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) {
        sim_sel_client sc;
        v->client(v->ctx, v->cand[i], &sc);
        w[i] = sc.samples > 0 ? sc.samples : 0;
        total += w[i];
    }
    for (int j = 0; j < d; j++) {
        int pick = -1;
        if (total > 0) { /* the first whose cumulative weight passes u·total */
            double u = sim_rng_uniform(r) * total, acc = 0;
            for (int i = 0; i < n && pick < 0; i++)
                if (w[i] > 0 && (acc += w[i]) > u) pick = i;
            for (int i = n - 1; pick < 0 && i >= 0; i--) /* u·total rounded up to the sum */
                if (w[i] > 0) pick = i;
        } else { /* only clients without samples are left: uniformly */
            int left = n - j, m = (int)sim_rng_below(r, (uint64_t)left);
            for (int i = 0; i < n && pick < 0; i++)
                if (w[i] == 0 && m-- == 0) pick = i;
        }
        sim_sel_client sc;
        v->client(v->ctx, v->cand[pick], &sc);
        double loss = isnan(sc.loss) ? INFINITY : sc.loss;
        drawn[j] = (sim_sel_item){-loss, j, v->cand[pick]};
        total -= w[pick];
        if (total < 0) total = 0;
        w[pick] = -1; /* drawn */
    }
    sim_sel_sort(drawn, d);
    int got = sim_sel_take(drawn, k < d ? k : d, out);
    free(w);
    free(drawn);
    return got;
}

const sim_sel_policy sim_sel_poc = {
        .name = "power-of-choice",
        .doc = "power-of-choice (Cho et al., AISTATS 2022): draws `d` candidates weighted by "
               "their samples, keeps the k whose last reported loss is highest (a client never "
               "heard from first). Knows each client's samples and its last arrived job's loss",
        .keys = KEYS,
        .size = sizeof(poc_config),
        .purpose = SIM_RNG_SEL_POC,
        .pick = poc_pick,
};
