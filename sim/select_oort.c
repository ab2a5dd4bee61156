/* sim/select_oort.c -- `oort` (Lai et al., "Oort: Efficient Federated Learning via Guided
 * Participant Selection", OSDI 2021), after FedScale's Oort selector, with the choices below.
 *
 * A client is explored once one of its jobs has arrived (the server has its report). A selection
 * of k clients at round r (async: model version) splits as Oort's does:
 *   ε_r = max(epsilon · epsilon_decay^r, epsilon_min)   the exploration share
 *   exploit = min(floor(k · (1 − ε_r)), explored candidates); the rest explores
 * Exploited clients are the explored candidates of highest score
 *   score_i = U_i / max_j U_j + sqrt(0.1 · ln(r + 1) / (last_i + 1))   (staleness bonus)
 *   score_i ·= (T / t_i)^alpha   when t_i > T                          (system penalty)
 * where U_i = |B_i| · L_i is the statistical utility (|B_i| the client's samples, L_i Oort's
 * sqrt of the mean over its last arrived job's training samples of each one's squared loss;
 * for an algorithm whose job counts no per-sample loss, the job's mean loss over its batches,
 * which is at most that), max over the explored candidates,
 * last_i the round it was last selected in, t_i its last job's dispatch-to-arrival time, T the
 * preferred round duration (`duration`, or else the `percentile` of the explored clients'
 * durations: FedScale's round_threshold). Rounds count from 0 here, so r + 1 and last_i + 1 are
 * Oort's 1-based rounds.
 * Exploration picks uniformly at random among the unexplored candidates (Oort prefers the
 * fastest by their declared speed; FedScale weights by data size). When one side has too few,
 * the other fills the rest. A client selected more than `blacklist_rounds` times (0: never) is
 * blacklisted: picked only when no other candidate is left, the highest score first.
 * Left out: Oort's pacer (which moves T over the rounds as the utility stalls) and FedScale's
 * weighted random choice among the clients above 95% of the cut-off score (the top scores are
 * taken). Ties: by the policy's stream (one draw per candidate), then client id.
 * Stateless: everything it reads is in the view, which the checkpoint holds.
 */
#include "sim/select.h"

#include <math.h>
#include <stdlib.h>

typedef struct oort_config {
    double alpha;
    sim_time duration;
    double percentile;
    double epsilon, epsilon_decay, epsilon_min;
    int blacklist_rounds;
} oort_config;

#define K(field) .offset = offsetof(oort_config, field)
static const sim_key KEYS[] = {
        {"alpha", SIM_KEY_DOUBLE, K(alpha), .dflt = "2", .lo = 0, .hi = 100,
         .doc = "the system penalty's exponent: a client slower than T scores (T/t)^alpha of its "
                "utility"},
        {"duration", SIM_KEY_TIME, K(duration), .dflt = "none",
         .doc = "the preferred round duration T; `none`: the `percentile` of the durations the "
                "explored clients' last jobs took"},
        {"percentile", SIM_KEY_DOUBLE, K(percentile), .dflt = "0.3", .lo = 0, .hi = 1,
         .doc = "T as this share into the explored clients' durations sorted (FedScale's "
                "round_threshold 30%), when `duration` is none"},
        {"epsilon", SIM_KEY_DOUBLE, K(epsilon), .dflt = "0.9", .lo = 0, .hi = 1,
         .doc = "the share of a selection that explores at round 0"},
        {"epsilon_decay", SIM_KEY_DOUBLE, K(epsilon_decay), .dflt = "0.98", .lo = 0, .hi = 1,
         .doc = "the share is multiplied by this every round (async: aggregation)"},
        {"epsilon_min", SIM_KEY_DOUBLE, K(epsilon_min), .dflt = "0.3", .lo = 0, .hi = 1,
         .doc = "the share never goes below this"},
        {"blacklist_rounds", SIM_KEY_INT, K(blacklist_rounds), .dflt = "0", .lo = 0, .hi = 1e9,
         .doc = "a client selected more than this many times is picked only when no other can "
                "be (0: never blacklisted)"},
        {0},
};
#undef K

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* T: the key, or the percentile of the explored clients' last durations (0 when none) */
static double preferred_s(const oort_config *o, const sim_sel_view *v)
{
    if (o->duration > 0) return 1e-9 * (double)o->duration;
    double *d = sim_xmalloc(sizeof(double) * (size_t)(v->n > 0 ? v->n : 1));
    int m = 0;
    for (int32_t c = 0; c < v->n; c++) {
        sim_sel_client sc;
        v->client(v->ctx, c, &sc);
        if (sc.arrived > 0 && !isnan(sc.duration_s)) d[m++] = sc.duration_s;
    }
    double t = 0;
    if (m) {
        qsort(d, (size_t)m, sizeof *d, cmp_double);
        int i = (int)(m * o->percentile);
        t = d[i < m - 1 ? i : m - 1];
    }
    free(d);
    return t;
}

/* |B_i| · L_i (see above) */
static double utility(const sim_sel_client *sc)
{
    return sc->samples * (sc->loss_rms > 0 ? sc->loss_rms : sc->loss);
}

void sim_sel_oort_scores(const void *cfg, const sim_sel_view *v, double *score, double *T)
{
    const oort_config *o = cfg;
    *T = preferred_s(o, v);
    double umax = 0;
    for (int i = 0; i < v->n_cand; i++) {
        sim_sel_client sc;
        v->client(v->ctx, v->cand[i], &sc);
        if (!isnan(sc.loss)) umax = fmax(umax, utility(&sc));
    }
    for (int i = 0; i < v->n_cand; i++) {
        sim_sel_client sc;
        v->client(v->ctx, v->cand[i], &sc);
        if (isnan(sc.loss)) {
            score[i] = NAN;
            continue;
        }
        double u = umax > 0 ? utility(&sc) / umax : 0;
        double s = u + sqrt(0.1 * log(v->round + 1.0) / (sc.last_round + 1.0));
        if (*T > 0 && sc.duration_s > *T) s *= pow(*T / sc.duration_s, o->alpha);
        score[i] = s;
    }
}

static int oort_pick(void *st, const void *cfg, const sim_sel_view *v, int k, int32_t *out,
                     sim_rng *r)
{
    (void)st;
    const oort_config *o = cfg;
    int n = v->n_cand;
    double *score = sim_xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1)), T;
    sim_sel_item *ex = sim_xmalloc(sizeof *ex * (size_t)(n > 0 ? n : 1));
    sim_sel_item *un = sim_xmalloc(sizeof *un * (size_t)(n > 0 ? n : 1));
    sim_sel_item *bl = sim_xmalloc(sizeof *bl * (size_t)(n > 0 ? n : 1));
    sim_sel_oort_scores(cfg, v, score, &T);
    int n_ex = 0, n_un = 0, n_bl = 0;
    for (int i = 0; i < n; i++) {
        double tie = sim_rng_uniform(r); /* one draw per candidate, in id order */
        sim_sel_client sc;
        v->client(v->ctx, v->cand[i], &sc);
        int black = o->blacklist_rounds > 0 && sc.jobs > o->blacklist_rounds;
        double key = isnan(score[i]) ? INFINITY : -score[i]; /* unexplored after the explored */
        sim_sel_item it = {key, tie, v->cand[i]};
        if (black)
            bl[n_bl++] = it;
        else if (isnan(score[i]))
            un[n_un++] = (sim_sel_item){tie, 0, v->cand[i]};
        else
            ex[n_ex++] = it;
    }
    sim_sel_sort(ex, n_ex);
    sim_sel_sort(un, n_un);
    sim_sel_sort(bl, n_bl);
    double eps = fmax(o->epsilon * pow(o->epsilon_decay, v->round), o->epsilon_min);
    int want = k < n ? k : n;
    int exploit = (int)floor(want * (1 - eps) + 1e-9);
    if (exploit > n_ex) exploit = n_ex;
    int explore = want - exploit < n_un ? want - exploit : n_un;
    if (exploit + explore < want) /* too few unexplored: exploit more */
        exploit = want - explore < n_ex ? want - explore : n_ex;
    int got = 0;
    for (int i = 0; i < exploit; i++)
        out[got++] = ex[i].id;
    for (int i = 0; i < explore; i++)
        out[got++] = un[i].id;
    for (int i = 0; i < n_bl && got < want; i++)
        out[got++] = bl[i].id;
    free(score);
    free(ex);
    free(un);
    free(bl);
    sim_sel_item *ids = sim_xmalloc(sizeof *ids * (size_t)(got > 0 ? got : 1));
    for (int i = 0; i < got; i++)
        ids[i] = (sim_sel_item){0, 0, out[i]};
    sim_sel_take(ids, got, out);
    free(ids);
    return got;
}

const sim_sel_policy sim_sel_oort = {
        .name = "oort",
        .doc = "Oort (Lai et al., OSDI 2021): exploits the explored clients of highest "
               "statistical utility (samples × the rms of their last job's per-sample losses), "
               "penalized by "
               "(T/t)^alpha when their last job took t > T, plus a staleness bonus; explores a "
               "decaying share among clients never heard from; blacklists after "
               "`blacklist_rounds` selections. Knows each client's samples and what its arrived "
               "jobs reported (loss, duration) and when it was last selected",
        .keys = KEYS,
        .size = sizeof(oort_config),
        .purpose = SIM_RNG_SEL_OORT,
        .pick = oort_pick,
};
