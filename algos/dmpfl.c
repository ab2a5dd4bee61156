/* algos/dmpfl.c -- DM-PFL (Zhang et al., KDD 2023; spec 001): a sparse global model θ_g = w_g ⊙ m_g
 * and, per client, a sparse personalized model θ_c = w_g ⊙ (m_g ∩ m_c) + w_c ⊙ (m_c − m_g) (Eq. 4)
 * inside one architecture, trained in repeated phases (fl_dm_phase_of): 1, mask training (clients
 * train w_c under m_c, prune by magnitude and regrow by gradient, upload m_c and w_c ⊙ m_c; the
 * server averages each position over the clients covering it, Eq. 5, and votes m_g); 2a, FedAvg of
 * w_g under the fixed m_g; 2b, local training of the private weights only, with one download per
 * client per 2b phase and no upload. DM-PFL+ ("dmpfl+") evaluates each test sample with θ_c or θ_g
 * by Algorithm 4's entropy and cosine-similarity rule.
 *
 * Decisions are the spec's [D] unless said here:
 *  - A client's first state is the global model it first receives (m_c = m_g, w_c = w_g), which is
 *    the spec's m_c⁰ = m_g⁰ for clients sampled in round 0 and fresher for the later ones.
 *  - Regrowth refills every masked tensor to its target count ⌈(1 − S)·n⌉, so a client whose m_c
 *    came from a sparser m_g (too few votes, [D] 8) is back at exactly 1 − S after one readjust.
 *  - The regrowth gradient is taken on the trained weights before pruning (one dense batch).
 *  - The server knows what a client holds from the jobs that completed (absorb), not from the
 *    messages it sent: a job lost on the way leaves the client's copy stale, and the next message
 *    carries what is missing again.
 * The client's private state is a message (w_c under "mask" = m_c) with one more key, "mg": m_g
 * and the dense tensors there are the client's cached copies, which phase 2b trains against when
 * it downloads nothing.
 */
#include "algos/dmpfl.h"

#include "nn/pack.h"
#include "nn/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* settings and schedule (the masks and their messages: dmpfl_masks.c) */

static const char *const POLICIES[] = {"auto", "uniform", "uniform_skip_first", NULL};
static const char *const ANNEAL[] = {"constant", "cosine", NULL};

#define K(field) .offset = offsetof(fl_dmpfl_config, field)
static const sim_key KEYS[] = {
        {"sparsity", SIM_KEY_DOUBLE, K(sparsity), .dflt = "0.5", .lo = 0, .hi = 0.999,
         .doc = "S: every masked layer keeps ⌈(1 − S)·n⌉ weights"},
        {"density_policy", SIM_KEY_CHOICE, K(policy), .dflt = "auto", .words = POLICIES,
         .doc = "`uniform` (every conv/linear weight masked), `uniform_skip_first` (the first "
                "layer dense), `auto` (skip the first layer of CNNs only); biases are never "
                "masked"},
        {"iterations", SIM_KEY_INT, K(iterations), .dflt = "2", .lo = 0, .hi = 100000,
         .doc = "I; `0`: mask training throughout (the iter = 0 ablation)"},
        {"phase1", SIM_KEY_DOUBLE, K(phase1), .dflt = "0.5", .lo = 0, .hi = 1,
         .doc = "share of an iteration in phase 1 (mask training)"},
        {"phase2a", SIM_KEY_DOUBLE, K(phase2a), .dflt = "0.25", .lo = 0, .hi = 1,
         .doc = "share of an iteration in phase 2a (FedAvg under m_g; 2b gets the rest)"},
        {"alpha", SIM_KEY_DOUBLE, K(alpha), .dflt = "0.5", .lo = 0, .hi = 1,
         .doc = "α_0, the share of a layer's kept weights readjusted"},
        {"anneal", SIM_KEY_CHOICE, K(anneal), .dflt = "cosine", .words = ANNEAL,
         .doc = "α_t = α_0/2·(1 + cos(π t/T)), or `constant`"},
        {"readjust_every", SIM_KEY_INT, K(readjust_every), .dflt = "1", .lo = 1, .hi = 100000,
         .doc = "readjust in phase-1 rounds t with t mod N = 0"},
        {"vote", SIM_KEY_DOUBLE, K(vote), .dflt = "0.3", .lo = 0, .hi = 1,
         .doc = "m_g candidates: positions chosen by more than this share of the round's clients"},
        {"reset_private", SIM_KEY_BOOL, K(reset_private), .dflt = "false",
         .doc = "phase 2b starts from zero private weights (Algorithm 3 literally)"},
        {0},
};
#undef K

static int dmpfl_check(void *block, const sim_yaml *map, const sim_key_ctx *ctx, sim_err *err)
{
    fl_dmpfl_config *c = block;
    c->density = 1 - c->sparsity;
    c->skip_first = c->policy - 1; /* auto −1, uniform 0, uniform_skip_first 1 */
    c->rounds = ctx->rounds;
    if (c->phase1 + c->phase2a > 1 + 1e-9)
        return sim_yaml_fail(sim_yaml_get(map, "phase2a"), err,
                             "dmpfl: phase1 %g + phase2a %g is more than a whole iteration",
                             c->phase1, c->phase2a);
    if (c->iterations > ctx->rounds)
        return sim_yaml_fail(sim_yaml_get(map, "iterations"), err,
                             "dmpfl: %d iterations do not fit in %d rounds", c->iterations,
                             ctx->rounds);
    return SIM_OK;
}

const fl_section fl_dmpfl_section = {
        .name = "dmpfl",
        .keys = KEYS,
        .size = sizeof(fl_dmpfl_config),
        .check = dmpfl_check,
        .doc = "DM-PFL and DM-PFL+, spec 001; checked for the others. The rounds are cut into "
               "`iterations` equal parts, each `phase1` of mask training (clients train w_c under "
               "m_c, "
               "prune ⌈α_t·nnz⌉ weights of least magnitude per layer and regrow as many of largest "
               "gradient, upload m_c and w_c ⊙ m_c; the server averages each position over the "
               "clients "
               "that sent it, keeps the old value elsewhere, and keeps in m_g the largest |w_g| "
               "among "
               "positions more than `vote` of the clients chose), `phase2a` of FedAvg of w_g under "
               "the "
               "fixed m_g, and the rest of local training of the private weights (m_c − m_g) with "
               "one "
               "download per client per phase and no upload. Messages are a bitmap of the mask "
               "(when the "
               "receiver lacks it) and float32 values of the masked positions. A client's personal "
               "model "
               "is w_g ⊙ (m_g ∩ m_c) + w_c ⊙ (m_c − m_g).",
};

/* DM-PFL's regrowth gradient batch; index: the job's batch stream */
enum { RNG_GRAD_BATCH = 10 };
static const fl_stream STREAMS[] = {{"dmpfl.grad_batch", RNG_GRAD_BATCH}, {0}};

static const fl_dmpfl_config *conf(const fl_env *env)
{
    return env->cfg->own;
}

fl_dm_phase fl_dm_phase_of(const fl_dmpfl_config *c, int round)
{
    if (c->iterations <= 0) return FL_DM_P1;
    int its = c->rounds / c->iterations; /* rounds per iteration; the loader keeps it ≥ 1 */
    int k = round / its;
    if (k >= c->iterations) k = c->iterations - 1; /* T mod I rounds left: the last 2b goes on */
    int r = round - k * its;
    int e1 = (int)(its * c->phase1 + 1e-9), e2 = (int)(its * (c->phase1 + c->phase2a) + 1e-9);
    return r < e1 ? FL_DM_P1 : r < e2 ? FL_DM_P2A : FL_DM_P2B;
}

double fl_dm_alpha(const fl_dmpfl_config *c, int round)
{
    if (!c->anneal || c->rounds <= 0) return c->alpha;
    return c->alpha / 2 * (1 + cos(acos(-1.0) * round / c->rounds));
}

/* ---------------------------------------------------------------------------------------- */
/* private state: {"mask": m_c, "mg", "vals": w_c at m_c, "dense"} */

typedef struct dm_client {
    float *wc;   /* n_floats: w_c on masked tensors, the cached dense tensors */
    uint8_t *mc; /* n_floats */
    uint8_t *mg; /* n_floats: the cached global mask */
} dm_client;

static void client_alloc(dm_client *c, size_t nf)
{
    c->wc = sim_xcalloc(nf, sizeof(float));
    c->mc = sim_xcalloc(nf, 1);
    c->mg = sim_xcalloc(nf, 1);
}

static void client_free(dm_client *c)
{
    free(c->wc);
    free(c->mc);
    free(c->mg);
}

static void pack_client(msgpack_sbuffer *sb, const fl_dm_shape *s, const dm_client *c)
{
    fl_dm_pack_state(sb, s, c->mc, c->mg, c->wc);
}

static int unpack_client(dm_client *c, const fl_dm_shape *s, const void *buf, size_t len,
                         sim_err *err)
{
    return fl_dm_unpack_state(s, buf, len, c->mc, c->mg, c->wc, err);
}

/* ---------------------------------------------------------------------------------------- */
/* server */

typedef struct dmpfl {
    const fl_env *env; /* borrowed */
    fl_dm_shape sh;
    float *wg;          /* n_floats: w_g, kept at every position (also outside m_g) */
    uint8_t *mg;        /* n_floats */
    double *num;        /* n_floats: Σ weight·value per position since the last aggregation */
    double *den;        /* n_floats: Σ weight over the clients that sent the position */
    int32_t *votes;     /* n_floats: clients whose m_c holds the position (phase 1) */
    int n_in;           /* uploads absorbed since the last aggregation */
    int agg_phase;      /* their phase */
    int32_t gver, mver; /* versions of w_g and of m_g (one more per aggregation) */
    int32_t *have_g, *have_m; /* per client: the versions its private state holds (-1: none) */
    int32_t *pend_g, *pend_m; /* ... once its current job completes */
    int8_t *pend_phase;       /* per client: its current job's phase */
    int32_t cost_round;       /* cost-only: the round of the last job (−1: none), whose end
                                 stands for the aggregation that mode never runs */
    /* DM-PFL+: the base entropies of the last client this process evaluated, a function of its
     * training samples and its two models only, so reused for its shifted test sets (the engine
     * evaluates a client's splits one after another): they cost more forward passes than a test
     * split (its training samples, through both models) */
    int32_t be_client, be_gver, be_mver; /* the key: client (−1: none) and model versions... */
    const void *be_priv;                 /* ... and its private state */
    size_t be_priv_len;
    double be_g, be_c;
} dmpfl;

static void dm_config_shape(fl_dm_shape *sh, const fl_env *env)
{
    const fl_dmpfl_config *c = conf(env);
    fl_dm_shape_init(sh, env->arch, c->density, c->skip_first);
}

static void *dmpfl_new(const fl_env *env, sim_err *err)
{
    (void)err;
    dmpfl *s = sim_xcalloc(1, sizeof *s);
    size_t nf = env->arch->layout.n_floats;
    int n = env->part->n_clients;
    s->env = env;
    s->be_client = -1;
    dm_config_shape(&s->sh, env);
    s->wg = fl_initial_params(env);
    s->mg = sim_xcalloc(nf, 1);
    s->num = sim_xcalloc(nf, sizeof(double));
    s->den = sim_xcalloc(nf, sizeof(double));
    s->votes = sim_xcalloc(nf, sizeof(int32_t));
    const nn_layout *L = &env->arch->layout;
    for (int t = 0; t < L->n; t++) { /* m_g⁰: the largest initial weights; w_g ← w_g ⊙ m_g⁰ */
        if (!s->sh.masked[t]) continue;
        size_t off = L->t[t].off, nt = fl_dm_numel(&L->t[t]);
        fl_dm_topk(s->mg + off, s->wg + off, NULL, nt, s->sh.keep[t]);
        for (size_t j = off; j < off + nt; j++)
            if (!s->mg[j]) s->wg[j] = 0;
    }
    s->have_g = sim_xmalloc(sizeof(int32_t) * (size_t)n);
    s->have_m = sim_xmalloc(sizeof(int32_t) * (size_t)n);
    s->pend_g = sim_xmalloc(sizeof(int32_t) * (size_t)n);
    s->pend_m = sim_xmalloc(sizeof(int32_t) * (size_t)n);
    s->pend_phase = sim_xcalloc((size_t)n, 1);
    for (int c = 0; c < n; c++)
        s->have_g[c] = s->have_m[c] = s->pend_g[c] = s->pend_m[c] = -1;
    s->cost_round = -1;
    return s;
}

static void dmpfl_free(void *p)
{
    dmpfl *s = p;
    if (!s) return;
    free(s->wg), free(s->mg), free(s->num), free(s->den), free(s->votes);
    free(s->have_g), free(s->have_m), free(s->pend_g), free(s->pend_m), free(s->pend_phase);
    free(s);
}

/* Phase 1 sends m_g and w_g ⊙ m_g every time (m_g changes every round); 2a the values, and the
 * bitmap when the client's copy is stale; 2b what 2a would, once per client per 2b phase, and
 * nothing (a zero-length message) to a client that holds the current w_g and m_g. */
static size_t dmpfl_down(void *p, int32_t c, int32_t round, msgpack_sbuffer *out)
{
    dmpfl *s = p;
    const fl_dmpfl_config *cfg = conf(s->env);
    if (!out && round != s->cost_round) { /* cost-only: the versions the aggregation would set */
        fl_dm_phase last = s->cost_round < 0 ? FL_DM_P2B : fl_dm_phase_of(cfg, s->cost_round);
        s->gver += last != FL_DM_P2B;
        s->mver += last == FL_DM_P1;
        s->cost_round = round;
    }
    fl_dm_phase ph = fl_dm_phase_of(cfg, round);
    int with_mask = ph == FL_DM_P1 || s->have_m[c] != s->mver;
    int none = ph == FL_DM_P2B && !with_mask && s->have_g[c] == s->gver;
    s->pend_phase[c] = (int8_t)ph;
    s->pend_g[c] = s->gver;
    s->pend_m[c] = s->mver;
    if (!out) { /* cost-only: no job is lost, so the client holds what it is sent */
        s->have_g[c] = s->gver;
        s->have_m[c] = s->mver;
        return none ? 0 : fl_dm_msg_bytes(&s->sh, with_mask, fl_dm_count(&s->sh, s->mg));
    }
    if (none) return 0;
    size_t before = out->size;
    fl_dm_pack(out, &s->sh, with_mask, s->mg, s->wg);
    return out->size - before;
}

static int dmpfl_absorb(void *p, int32_t c, const void *up, size_t len, double weight, double mass,
                        sim_err *err)
{
    dmpfl *s = p;
    (void)mass;
    s->have_g[c] = s->pend_g[c];
    s->have_m[c] = s->pend_m[c];
    if (s->pend_phase[c] == FL_DM_P2B) return SIM_OK; /* nothing is uploaded */
    size_t nf = s->env->arch->layout.n_floats;
    float *w = sim_xcalloc(nf, sizeof(float));
    uint8_t *m = sim_xmalloc(nf);
    memcpy(m, s->mg, nf); /* phase 2a: the values are at m_g */
    int got, rc = fl_dm_unpack(&s->sh, up, len, m, &got, w, "up message", err);
    if (!rc && got != (s->pend_phase[c] == FL_DM_P1))
        rc = sim_fail(err, SIM_EFORMAT, "up message", 0, 0,
                      got ? "a mask in phase 2a" : "no mask in phase 1");
    const nn_layout *L = &s->env->arch->layout;
    for (int t = 0; !rc && t < L->n; t++)
        for (size_t j = L->t[t].off; j < L->t[t].off + fl_dm_numel(&L->t[t]); j++) {
            if (s->sh.masked[t] && !m[j]) continue;
            s->num[j] += weight * (double)w[j];
            s->den[j] += weight;
            s->votes[j] += s->sh.masked[t];
        }
    if (!rc) {
        s->n_in++;
        s->agg_phase = s->pend_phase[c];
    }
    free(w);
    free(m);
    return rc;
}

static void dmpfl_aggregate(void *p)
{
    dmpfl *s = p;
    const nn_layout *L = &s->env->arch->layout;
    size_t nf = L->n_floats;
    if (s->n_in) {
        for (size_t j = 0; j < nf; j++) /* Eq. 5: positions no client sent keep their value */
            if (s->den[j] > 0) s->wg[j] = (float)(s->num[j] / s->den[j]);
        if (s->agg_phase == FL_DM_P1) {
            /* m_g: the largest |w_g| among the positions more than vote·K clients chose */
            uint8_t *cand = sim_xmalloc(nf);
            double need = conf(s->env)->vote * s->n_in;
            for (size_t j = 0; j < nf; j++)
                cand[j] = s->votes[j] > need;
            for (int t = 0; t < L->n; t++) {
                if (!s->sh.masked[t]) continue;
                size_t off = L->t[t].off, nt = fl_dm_numel(&L->t[t]);
                memset(s->mg + off, 0, nt);
                fl_dm_topk(s->mg + off, s->wg + off, cand + off, nt, s->sh.keep[t]);
            }
            free(cand);
            s->mver++;
        }
        s->gver++;
    }
    memset(s->num, 0, nf * sizeof(double));
    memset(s->den, 0, nf * sizeof(double));
    memset(s->votes, 0, nf * sizeof(int32_t));
    s->n_in = 0;
}

/* Mean over conv/linear layers of the share of weights a model of mask m uses. */
static double weight_density(const fl_dm_shape *s, const uint8_t *m)
{
    const nn_arch *a = s->a;
    double sum = 0;
    int k = 0;
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        if ((l->op != NN_LINEAR && l->op != NN_CONV) || l->wt < 0) continue;
        const nn_tensor *t = &a->layout.t[l->wt];
        size_t on = 0, n = fl_dm_numel(t);
        for (size_t j = t->off; s->masked[l->wt] && j < t->off + n; j++)
            on += m[j] != 0;
        sum += s->masked[l->wt] ? (double)on / (double)n : 1.0;
        k++;
    }
    return k ? sum / k : 1.0;
}

/* θ_g (client −1, or a client that has not trained yet) or θ_c (Eq. 4) into m. */
static double dmpfl_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    dmpfl *s = p;
    size_t nf = s->env->arch->layout.n_floats;
    nn_model_reset_narrowing(m);
    dm_client c;
    client_alloc(&c, nf);
    double dens;
    if (client >= 0 && priv && unpack_client(&c, &s->sh, priv, priv_len, NULL) == SIM_OK) {
        fl_dm_compose(m->params, &s->sh, s->wg, s->mg, c.wc, c.mc);
        dens = weight_density(&s->sh, c.mc);
    } else {
        fl_dm_compose(m->params, &s->sh, s->wg, s->mg, s->wg, s->mg);
        dens = weight_density(&s->sh, s->mg);
    }
    client_free(&c);
    return dens;
}

/* ---------------------------------------------------------------------------------------- */
/* client */

/* The per-tensor element masks of mask over the masked tensors (the model borrows mask). */
static void set_masks(nn_model *m, const fl_dm_shape *s, const uint8_t *mask)
{
    const uint8_t *per[NN_MAX_TENSORS] = {0};
    for (int t = 0; t < m->arch.layout.n; t++)
        per[t] = s->masked[t] ? mask + m->arch.layout.t[t].off : NULL;
    nn_model_set_masks(m, per);
}

/* Phase 2b trains the private positions (m_c − m_g) only: the shared ones and the dense tensors
 * are w_g's, frozen; weight decay applies to what trains. */
typedef struct p2b_ctx {
    const uint8_t *train; /* n_floats: 1 at private positions */
    float wd;
} p2b_ctx;

static void p2b_grad(nn_model *m, void *ctx)
{
    const p2b_ctx *c = ctx;
    for (size_t k = 0; k < m->n_runs; k++) {
        size_t off = m->runs[k][0];
        for (uint32_t j = 0; j < m->runs[k][1]; j++)
            m->grads[off + j] =
                    c->train[off + j] ? m->grads[off + j] + c->wd * m->params[off + j] : 0.0f;
    }
}

/* The dense gradient of the loss of m's weights (under no mask) on one minibatch of the client,
 * into g; its cost goes into res. */
static void regrow_grad(const fl_env *env, const fl_job *job, nn_model *m, float *g, fl_result *res)
{
    nn_model_reset_narrowing(m);
    int n = env->part->n[job->client];
    nn_cost before = m->cost;
    if (n <= 0) return;
    if (env->cost_only) {
        nn_cost c;
        nn_model_step_cost(m, env->cfg->batch_size < n ? env->cfg->batch_size : n, &c);
        res->cost.flops += c.flops;
        res->cost.bytes += c.bytes;
        return;
    }
    sim_rng r;
    sim_rng_seed(&r, env->seed, RNG_GRAD_BATCH, job->stream);
    nn_batcher b;
    nn_batcher_init(&b, env->train, env->part->idx[job->client], n, env->cfg->batch_size, 0, &r);
    int nb = nn_batcher_next(&b);
    nn_model_zero_grad(m);
    nn_model_forward(m, b.x, b.y, nb, 1);
    nn_model_backward(m);
    memcpy(g, m->grads, m->arch.layout.n_floats * sizeof(float));
    nn_batcher_destroy(&b);
    res->cost.flops += m->cost.flops - before.flops;
    res->cost.bytes += m->cost.bytes - before.bytes;
}

/* A mask of the target density (the first keep[t] positions): what cost-only jobs train under. */
static void target_mask(uint8_t *mask, const fl_dm_shape *s)
{
    const nn_layout *L = &s->a->layout;
    for (int t = 0; t < L->n; t++)
        if (s->masked[t]) memset(mask + L->t[t].off, 1, s->keep[t]);
}

static int dmpfl_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                       sim_err *err)
{
    const fl_dmpfl_config *cfg = conf(env);
    nn_model *m = fl_worker_model(w, env);
    size_t nf = env->arch->layout.n_floats;
    fl_dm_shape sh;
    dm_config_shape(&sh, env);
    fl_dm_phase ph = fl_dm_phase_of(cfg, job->round);
    int readjust = ph == FL_DM_P1 && job->round % cfg->readjust_every == 0 && cfg->alpha > 0;
    dm_client c;
    client_alloc(&c, nf);
    float *wg = sim_xcalloc(nf, sizeof(float));
    uint8_t *train = NULL;
    int rc = SIM_OK;
    if (env->cost_only) {
        target_mask(c.mc, &sh);
        set_masks(m, &sh, c.mc);
        fl_local_sgd_with(env, job, m, 0, NULL, NULL, res);
        if (readjust) regrow_grad(env, job, m, NULL, res);
        nn_model_reset_narrowing(m);
        res->up_bytes = ph == FL_DM_P2B ? 0 : fl_dm_msg_bytes(&sh, ph == FL_DM_P1, sh.n_keep);
        goto done;
    }
    int have = job->priv != NULL, got = 0;
    if (have && (rc = unpack_client(&c, &sh, job->priv, job->priv_len, err))) goto done;
    if (job->down_len &&
        (rc = fl_dm_unpack(&sh, job->down, job->down_len, c.mg, &got, wg, "down message", err)))
        goto done;
    if (!job->down_len && !have) {
        rc = sim_fail(err, SIM_EFORMAT, "down message", 0, 0, "empty, and no state to train on");
        goto done;
    }
    if (!have) { /* a first job: the global model as it came */
        memcpy(c.mc, c.mg, nf);
        memcpy(c.wc, wg, nf * sizeof(float));
    }
    const nn_layout *L = &env->arch->layout;
    if (job->down_len && ph != FL_DM_P2A) /* Alg. 1 L6, Alg. 3 L3: shared positions from w_g */
        for (int t = 0; t < L->n; t++)
            for (size_t j = L->t[t].off; j < L->t[t].off + fl_dm_numel(&L->t[t]); j++) {
                int priv = sh.masked[t] && c.mc[j] && !c.mg[j];
                if (!sh.masked[t] || (c.mc[j] && c.mg[j])) c.wc[j] = wg[j];
                if (priv && ph == FL_DM_P2B && cfg->reset_private) c.wc[j] = 0;
            }
    nn_model_reset_narrowing(m);
    if (ph == FL_DM_P2A) { /* Alg. 2: FedAvg of w_g ⊙ m_g */
        fl_dm_compose(m->params, &sh, wg, c.mg, wg, c.mg);
        set_masks(m, &sh, c.mg);
        fl_local_sgd_with(env, job, m, env->cfg->weight_decay, NULL, NULL, res);
        nn_model_reset_narrowing(m);
        fl_dm_pack(&res->up, &sh, 0, c.mg, m->params);
    } else {
        fl_dm_compose(m->params, &sh, c.wc, c.mg, c.wc, c.mc); /* w_c ⊙ m_c */
        set_masks(m, &sh, c.mc);
        if (ph == FL_DM_P1) {
            fl_local_sgd_with(env, job, m, env->cfg->weight_decay, NULL, NULL, res);
        } else {
            train = sim_xcalloc(nf, 1);
            for (int t = 0; t < L->n; t++)
                for (size_t j = L->t[t].off;
                     sh.masked[t] && j < L->t[t].off + fl_dm_numel(&L->t[t]); j++)
                    train[j] = c.mc[j] && !c.mg[j];
            p2b_ctx pc = {train, (float)env->cfg->weight_decay};
            fl_local_sgd_with(env, job, m, 0, p2b_grad, &pc, res);
        }
        nn_model_reset_narrowing(m);
        memcpy(c.wc, m->params, nf * sizeof(float));
        if (readjust) {
            float *g = sim_xmalloc(nf * sizeof(float));
            regrow_grad(env, job, m, g, res);
            fl_dm_readjust(&sh, c.wc, c.mc, g, fl_dm_alpha(cfg, job->round));
            free(g);
        }
        if (ph == FL_DM_P1) fl_dm_pack(&res->up, &sh, 1, c.mc, c.wc);
    }
    res->up_bytes = res->up.size;
    pack_client(&res->priv, &sh, &c);
done:
    client_free(&c);
    free(wg);
    free(train);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* DM-PFL+ (Algorithm 4) */

/* Softmax outputs of m over samples idx[0..n) of d into p (n, K). */
static void probs(nn_model *m, const nn_dataset *d, const int32_t *idx, int n, float *p)
{
    int feat = d->c * d->h * d->w, K = m->arch.classes, cap = m->max_batch;
    float *x = sim_xmalloc(sizeof(float) * (size_t)cap * (size_t)feat);
    int32_t *y = sim_xmalloc(sizeof(int32_t) * (size_t)cap);
    for (int off = 0; off < n; off += cap) {
        int nb = n - off < cap ? n - off : cap;
        nn_gather(x, y, d, idx + off, nb);
        nn_model_forward(m, x, NULL, nb, 0);
        for (int k = 0; k < nb; k++) {
            const float *z = m->logits + (size_t)k * K;
            float *q = p + (size_t)(off + k) * K;
            double mx = z[0], s = 0;
            for (int j = 1; j < K; j++)
                mx = fmax(mx, z[j]);
            for (int j = 0; j < K; j++)
                s += q[j] = (float)exp(z[j] - mx);
            for (int j = 0; j < K; j++)
                q[j] = (float)(q[j] / s);
        }
    }
    free(x);
    free(y);
}

static double entropy(const float *q, int K)
{
    double h = 0;
    for (int j = 0; j < K; j++)
        h -= q[j] > 0 ? q[j] * log(q[j]) : 0;
    return h;
}

static int argmax(const float *q, int K)
{
    int b = 0;
    for (int j = 1; j < K; j++)
        if (q[j] > q[b]) b = j;
    return b;
}

/* Mean output entropy of the n rows of p: BE(θ), the base entropy. */
static double base_entropy(const float *p, int n, int K)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += entropy(p + (size_t)i * K, K);
    return n ? s / n : 0;
}

/* Per sample θ_c or θ_g: the one whose entropy, less (1 − cos(p_c, p_g)) times its base entropy
 * on the client's training samples, is lower (ties to θ_c). */
static double plus_eval_client(void *p, int32_t c, const void *priv, size_t priv_len,
                               const nn_dataset *d, const int32_t *idx, int n, nn_model *m,
                               double *density)
{
    dmpfl *s = p;
    const fl_env *env = s->env;
    int K = env->arch->classes, nt = env->part->n[c];
    int known = s->be_client == c && s->be_gver == s->gver && s->be_mver == s->mver &&
                s->be_priv == priv && s->be_priv_len == priv_len;
    size_t rows = (size_t)n + (known ? 0 : (size_t)nt) + 1;
    float *pg = sim_xmalloc(sizeof(float) * rows * K), *pc = sim_xmalloc(sizeof(float) * rows * K);
    dmpfl_eval(s, -1, NULL, 0, m);
    probs(m, d, idx, n, pg);
    if (!known) probs(m, env->train, env->part->idx[c], nt, pg + (size_t)n * K);
    *density = dmpfl_eval(s, c, priv, priv_len, m);
    probs(m, d, idx, n, pc);
    if (!known) {
        probs(m, env->train, env->part->idx[c], nt, pc + (size_t)n * K);
        s->be_g = base_entropy(pg + (size_t)n * K, nt, K);
        s->be_c = base_entropy(pc + (size_t)n * K, nt, K);
        s->be_client = c, s->be_gver = s->gver, s->be_mver = s->mver;
        s->be_priv = priv, s->be_priv_len = priv_len;
    }
    double be_g = s->be_g, be_c = s->be_c;
    int correct = 0;
    for (int i = 0; i < n; i++) {
        const float *qc = pc + (size_t)i * K, *qg = pg + (size_t)i * K;
        double dot = 0, nc = 0, ng = 0;
        for (int j = 0; j < K; j++) {
            dot += (double)qc[j] * qg[j];
            nc += (double)qc[j] * qc[j];
            ng += (double)qg[j] * qg[j];
        }
        double sim = nc > 0 && ng > 0 ? dot / sqrt(nc * ng) : 0;
        int use_c = entropy(qc, K) - (1 - sim) * be_c <= entropy(qg, K) - (1 - sim) * be_g;
        int32_t y = d->y[idx ? idx[i] : i];
        correct += argmax(use_c ? qc : qg, K) == y;
    }
    free(pg);
    free(pc);
    return n > 0 ? (double)correct / n : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* checkpoints: [w_g, m_g, num, den, votes as raw bytes; n_in, agg_phase, gver, mver; have_g,
 * have_m, pend_g, pend_m, pend_phase as raw bytes; cost_round] (read back by the same build) */

static void pack_raw(msgpack_packer *pk, const void *p, size_t n)
{
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, p, n);
}

static void dmpfl_save(void *p, msgpack_packer *pk)
{
    dmpfl *s = p;
    size_t nf = s->env->arch->layout.n_floats, n = (size_t)s->env->part->n_clients;
    msgpack_pack_array(pk, 15);
    pack_raw(pk, s->wg, nf * sizeof(float));
    pack_raw(pk, s->mg, nf);
    pack_raw(pk, s->num, nf * sizeof(double));
    pack_raw(pk, s->den, nf * sizeof(double));
    pack_raw(pk, s->votes, nf * sizeof(int32_t));
    msgpack_pack_int64(pk, s->n_in);
    msgpack_pack_int64(pk, s->agg_phase);
    msgpack_pack_int64(pk, s->gver);
    msgpack_pack_int64(pk, s->mver);
    pack_raw(pk, s->have_g, n * sizeof(int32_t));
    pack_raw(pk, s->have_m, n * sizeof(int32_t));
    pack_raw(pk, s->pend_g, n * sizeof(int32_t));
    pack_raw(pk, s->pend_m, n * sizeof(int32_t));
    pack_raw(pk, s->pend_phase, n);
    msgpack_pack_int64(pk, s->cost_round);
}

static int dmpfl_load(void *p, const msgpack_object *o, sim_err *err)
{
    dmpfl *s = p;
    size_t nf = s->env->arch->layout.n_floats, n = (size_t)s->env->part->n_clients;
    void *raw[14] = {s->wg, s->mg, s->num,    s->den,    s->votes,  NULL,      NULL,
                     NULL,  NULL,  s->have_g, s->have_m, s->pend_g, s->pend_m, s->pend_phase};
    size_t len[14] = {nf * sizeof(float),
                      nf,
                      nf * sizeof(double),
                      nf * sizeof(double),
                      nf * sizeof(int32_t),
                      0,
                      0,
                      0,
                      0,
                      n * sizeof(int32_t),
                      n * sizeof(int32_t),
                      n * sizeof(int32_t),
                      n * sizeof(int32_t),
                      n};
    int ok = o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 15 &&
             (o->via.array.ptr[14].type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
              o->via.array.ptr[14].type == MSGPACK_OBJECT_NEGATIVE_INTEGER);
    for (int i = 0; ok && i < 14; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        ok = raw[i] ? e->type == MSGPACK_OBJECT_BIN && e->via.bin.size == len[i]
                    : e->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
    }
    if (!ok)
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "server state does not fit dmpfl with a %zu-parameter model and %zu "
                        "clients",
                        nf, n);
    for (int i = 0; i < 14; i++)
        if (raw[i]) memcpy(raw[i], o->via.array.ptr[i].via.bin.ptr, len[i]);
    s->n_in = (int)o->via.array.ptr[5].via.u64;
    s->agg_phase = (int)o->via.array.ptr[6].via.u64;
    s->gver = (int32_t)o->via.array.ptr[7].via.u64;
    s->mver = (int32_t)o->via.array.ptr[8].via.u64;
    s->cost_round = (int32_t)o->via.array.ptr[14].via.i64;
    return SIM_OK;
}

/* For the memory check: a sparse model of density d costs about what a √d-wide one does. */
static double dmpfl_width(const fl_env *env, int32_t client)
{
    (void)client;
    return sqrt(conf(env)->density);
}

const fl_algo fl_dmpfl = {
        .version = FL_ALGO_VERSION,
        .name = "dmpfl",
        .summary = "DM-PFL: a sparse global model and sparse personal models sharing "
                   "weights through dual masks",
        .doc = "DM-PFL: a sparse global model and sparse personal models sharing its weights "
               "through dual masks",
        .flags = FL_HAS_GLOBAL | FL_FIXED_COST,
        .section = &fl_dmpfl_section,
        .streams = STREAMS,
        .server_new = dmpfl_new,
        .server_free = dmpfl_free,
        .job_down = dmpfl_down,
        .client_train = dmpfl_train,
        .server_absorb = dmpfl_absorb,
        .server_aggregate = dmpfl_aggregate,
        .eval_params = dmpfl_eval,
        .server_save = dmpfl_save,
        .server_load = dmpfl_load,
        .client_width = dmpfl_width,
        .no_compress = "DM-PFL sends each parameter's mask with the masked weights w ⊙ m, and "
                       "compressing that pair is not implemented",
};
const fl_algo fl_dmpfl_plus = {
        .version = FL_ALGO_VERSION,
        .name = "dmpfl+",
        .summary = "DM-PFL+: DM-PFL choosing the personal or the global model per "
                   "test sample",
        .doc = "DM-PFL choosing the personal or the global model per test sample; `acc_base_*` in "
               "its metrics.tsv are DM-PFL's accuracies from the same run",
        .flags = FL_HAS_GLOBAL | FL_FIXED_COST,
        .section = &fl_dmpfl_section,
        .streams = STREAMS,
        .server_new = dmpfl_new,
        .server_free = dmpfl_free,
        .job_down = dmpfl_down,
        .client_train = dmpfl_train,
        .server_absorb = dmpfl_absorb,
        .server_aggregate = dmpfl_aggregate,
        .eval_params = dmpfl_eval,
        .server_save = dmpfl_save,
        .server_load = dmpfl_load,
        .client_width = dmpfl_width,
        .eval_client = plus_eval_client,
        .base = "dmpfl",
        .no_compress = "DM-PFL+ sends each parameter's mask with the masked weights w ⊙ m, and "
                       "compressing that pair is not implemented",
};
