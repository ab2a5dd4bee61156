/* algos/pfedgate.c -- pFedGate (Chen et al., ICML 2023; spec 000): a shared global model and, per
 * client, a private gating layer that reads each batch and picks the blocks of the model to keep
 * under the client's density budget s_i (pfedgate.h: the block table and the selection, here; the
 * gating layer, algos/pfedgate_gate.c).
 */
#include "algos/pfedgate.h"

#include "algos/algo.h"
#include "nn/ops.h"
#include "nn/pack.h"
#include "nn/train.h"
#include "sim/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const SPLITS[] = {"paper", "code", NULL};
static const char *const AGGREGATE[] = {"paper", "code", NULL};
static const char *const EVAL[] = {"own", "global", NULL};

/* eval defaults to own, or to global under async, where an update was trained from an older
 * global model, so the client's copy cannot be rebuilt */
static void eval_default(const sim_key_ctx *ctx, char *buf, size_t n)
{
    snprintf(buf, n, "%s", EVAL[ctx->async]);
}

#define K(field) .offset = offsetof(fl_pfedgate_config, field)
static const sim_key KEYS[] = {
        {"s", SIM_KEY_STRING, K(s_text), .size = sizeof(((fl_pfedgate_config *)0)->s_text),
         .dflt = "1",
         .doc = "density budget in (0, 1], or `capacity` (each client's `devices.capacity`)"},
        {"blocks", SIM_KEY_INT, K(blocks), .dflt = "5", .lo = 2, .hi = 64,
         .doc = "B, blocks per tensor"},
        {"split", SIM_KEY_CHOICE, K(code_split), .dflt = "paper", .words = SPLITS,
         .doc = "`paper`: the first block ⌈n·s_min⌉ and B−1 equal ones; `code`: B equal chunks"},
        {"paths", SIM_KEY_INT, K(paths), .dflt = "2", .lo = 1, .hi = 2,
         .doc = "the gate's FC+BN paths: 2 (M and G apart, the paper's) or 1 shared (the code's "
                "default)"},
        {"gate_lr", SIM_KEY_DOUBLE, K(gate_lr), .dflt = "0.1", .lo = 0, .hi = 1e3,
         .doc = "the gate's learning rate (the model's is `lr`); both decay with `lr_decay`"},
        {"clip", SIM_KEY_DOUBLE, K(clip), .dflt = "10", .lo = 0, .hi = 1e9,
         .doc = "gradient-norm clip, model and gate separately (`0`: none)"},
        {"aggregate", SIM_KEY_CHOICE, K(code_aggregate), .dflt = "paper", .words = AGGREGATE,
         .doc = "`paper`: each parameter averaged over the clients that sent it; `code`: Σ p_i Δ_i "
                "with p over all clients"},
        {"eval", SIM_KEY_CHOICE, K(eval_global), .dflt = "own; global under async",
         .dflt_fn = eval_default, .words = EVAL,
         .doc = "`own` (the released code's): a client whose update the aggregation just absorbed "
                "is evaluated on its own trained copy (the global model it started from plus its "
                "change), the others on the new global model; `global`: every client on the new "
                "global model. `own` needs `federation.mode: sync`"},
        {0},
};
#undef K

static int pfedgate_check(void *block, const sim_yaml *map, const sim_key_ctx *ctx, sim_err *err)
{
    fl_pfedgate_config *c = block;
    c->by_capacity = !strcmp(c->s_text, "capacity");
    if (!c->by_capacity) {
        char *end;
        c->s = strtod(c->s_text, &end);
        if (end == c->s_text || *end || !(c->s > 0 && c->s <= 1))
            return sim_yaml_fail(sim_yaml_get(map, "s"), err,
                                 "s: '%s' is not a density in (0, 1] or capacity", c->s_text);
    }
    if (ctx->async && !c->eval_global)
        return sim_yaml_fail(sim_yaml_get(map, "eval"), err,
                             "eval: own needs federation.mode: sync (an async update was trained "
                             "from an older global model, so the client's own copy cannot be "
                             "rebuilt); use eval: global");
    return SIM_OK;
}

const fl_section fl_pfedgate_section = {
        .name = "pfedgate",
        .keys = KEYS,
        .size = sizeof(fl_pfedgate_config),
        .check = pfedgate_check,
        .doc = "pFedGate, spec 000; checked for the others. Every weight and bias tensor is cut "
               "into "
               "`blocks` blocks, the first ⌈n·s_min⌉ long and always kept (s_min = min(max(1/B, "
               "0.1), "
               "s)); per batch the client's gate scores the blocks and the largest-scoring ones "
               "that fit "
               "the budget are kept and scaled (the released code's greedy selection per group of "
               "linear "
               "and other layers). Up goes the change of the blocks used over the job; the gate "
               "stays on "
               "the client.",
};

static const fl_pfedgate_config *conf(const fl_env *env)
{
    return env->cfg->own;
}

double fl_pg_s_min(int B, double s)
{
    double m = 1.0 / B > 0.1 ? 1.0 / B : 0.1;
    return m < s ? m : s;
}

static size_t cdiv(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* The first block of a tensor of n elements: ⌈n·s_min⌉ (the paper's rule) or 1/B of it (the
 * code's equal chunks). */
static size_t first_len(size_t n, int B, double s_min, int code_rule)
{
    if (code_rule) return cdiv(n, n < (size_t)B ? n : (size_t)B);
    size_t first = (size_t)ceil((double)n * s_min - 1e-9);
    return first < 1 ? 1 : first > n ? n : first;
}

void fl_pg_blocks_build(fl_pg_blocks *b, const nn_arch *a, int B, double s_min, int code_rule)
{
    memset(b, 0, sizeof *b);
    const nn_layout *L = &a->layout;
    size_t cap = (size_t)L->n * (size_t)B;
    b->off = sim_xmalloc(cap * sizeof(size_t));
    b->len = sim_xmalloc(cap * sizeof(size_t));
    b->first = sim_xmalloc(cap);
    b->linear = sim_xmalloc(cap);
    for (int ti = 0; ti < L->n; ti++) {
        const nn_tensor *t = &L->t[ti];
        if (!t->trainable) continue;
        int lin = 0;
        for (int i = 0; i < a->n; i++)
            if ((a->l[i].wt == ti || a->l[i].bt == ti) && a->l[i].op == NN_LINEAR) lin = 1;
        size_t n = (size_t)t->rows * t->cols, pos = 0;
        /* the first chunk and the size of the others */
        size_t first = first_len(n, B, s_min, code_rule), rest;
        if (code_rule)
            rest = first;
        else
            rest = B > 1 && n > first ? cdiv(n - first, (size_t)B - 1) : 1;
        for (int j = 0; pos < n; j++) {
            size_t len = j == 0 ? first : rest;
            if (len > n - pos) len = n - pos;
            b->off[b->n] = t->off + pos;
            b->len[b->n] = len;
            b->first[b->n] = j == 0;
            b->linear[b->n] = (uint8_t)lin;
            b->n++;
            pos += len;
        }
        b->d += n;
    }
}

void fl_pg_blocks_free(fl_pg_blocks *b)
{
    free(b->off);
    free(b->len);
    free(b->first);
    free(b->linear);
    memset(b, 0, sizeof *b);
}

/* Items in value order, ties by block index: a stable insertion sort on small L. */
static void sort_items(int *order, int n, const int *value)
{
    for (int i = 1; i < n; i++) {
        int k = order[i], j = i;
        for (; j > 0 && value[order[j - 1]] < value[k]; j--)
            order[j] = order[j - 1];
        order[j] = k;
    }
}

double fl_pg_select(const fl_pg_blocks *b, const float *G, double s, double s_min, uint8_t *I,
                    int *order)
{
    size_t kept = 0;
    if (s >= 1) {
        memset(I, 1, (size_t)b->n);
        return 1.0;
    }
    int *value = sim_xmalloc(sizeof(int) * (size_t)(b->n > 0 ? b->n : 1));
    for (int i = 0; i < b->n; i++) {
        value[i] = (int)nearbyint(10.0 * G[i]); /* the default rounding: half to even */
        I[i] = b->first[i];
        if (b->first[i]) kept += b->len[i];
    }
    for (int group = 0; group < 2; group++) {
        int n = 0;
        size_t total = 0;
        for (int i = 0; i < b->n; i++)
            if (!b->first[i] && b->linear[i] == group) {
                order[n++] = i;
                total += b->len[i];
            }
        double c = nearbyint((double)total * (s - s_min));
        size_t cap = c > 0 ? (size_t)c : 0, used = 0;
        sort_items(order, n, value);
        for (int k = 0; k < n; k++) /* take what fits, and go on: a later item may still fit */
            if (used + b->len[order[k]] <= cap) {
                used += b->len[order[k]];
                I[order[k]] = 1;
            }
        kept += used;
    }
    free(value);
    return b->d ? (double)kept / (double)b->d : 1.0;
}

/* ---------------------------------------------------------------------------------------- */
/* the algorithm
 *
 * Client i's budget s_i is the scenario's s, or its capacity r_i. Its block table depends on s_i
 * through s_min (the first block of every tensor is ⌈n·s_min⌉ long), so the server rebuilds the
 * sender's table to read an upload, and averages per parameter over the clients that sent it
 * (the paper's rule, block by block). A job: the dense global model comes down; every batch the
 * gate picks the blocks (I) and their scales (M), the model trains θ ⊙ expand(M·I) (dropped
 * blocks are element-masked, so the FLOPs count as masked at the kept density and the device's
 * sparse efficiency applies), and the gradients reach θ (scaled by M·I) and the gate (straight
 * through: ∂/∂M_b = a_b·I_b, ∂/∂G_b = a_b·M_b·I_b, with a_b = Σ_{e∈b} θ_e·∂L/∂θ̃_e). Norms are
 * clipped separately; both take SGD steps with algorithm.momentum and weight_decay (the paper
 * says SGD; its code uses 0.9 and 5e-4, and its learning rates were tuned with them: with the
 * model trained at scale M ≈ 1/2 per tensor, plain SGD at those rates barely moves it). The
 * model's momentum and decay act on the blocks used so far in the job only, where the code's act
 * on all and would make every upload dense; its momentum starts at zero each job unless
 * algorithm.persistent_momentum keeps it on the client after the gate (as the code's optimizer
 * does: with one epoch of 4-5 batches a round, momentum from zero takes about a quarter of the
 * steady steps), the gate's always persists. Up goes the change of the union of the blocks used
 * over the job's batches: a block bitmap and their values. The gate, with its running statistics
 * and momentum, is the client's private state.
 *
 * Evaluation: each client's gate, in eval mode, on its test split in batches of 128 (one mask
 * per batch, as the code). As the code, a client whose upload the aggregation just absorbed is
 * evaluated on its own post-training copy: the global model it started from plus its change,
 * rebuilt from the global model before the aggregation and its upload (exact up to float
 * rounding: a job changes only the blocks it uploads; sync only, as an async update was trained
 * from an older model), both kept only until the aggregation's event ends; the others on the new
 * global model (`pfedgate.eval: global`, async's default: everyone on it). */

enum { PG_EVAL_BATCH = 128 };

typedef struct pfedgate {
    const fl_env *env; /* borrowed */
    float *global;     /* n_floats */
    double *num, *den; /* n_floats each: Σ weight·change and Σ weight since the last aggregation */
    double all_mass;   /* the code's rule divides by every client's weight */
    size_t msg_bytes; /* the dense down message's length */
    float *scratch;   /* n_floats: an upload's values */
    /* evaluation on the clients' own trained copies (not eval.global): the global model the
     * aggregation started from, and the uploads it absorbed (a copy each, by client), kept until
     * the aggregation's event ends (server_round_end) */
    float *prev, *own; /* n_floats each; own: one client's copy being evaluated */
    void **kept;
    size_t *kept_len;
} pfedgate;

static double budget(const fl_env *env, int32_t c)
{
    const fl_pfedgate_config *g = conf(env);
    double s = g->by_capacity ? (env->capacity ? env->capacity[c] : 1) : g->s;
    return s > 1 ? 1 : s;
}

static void client_blocks(fl_pg_blocks *b, const fl_env *env, int32_t c)
{
    const fl_pfedgate_config *g = conf(env);
    fl_pg_blocks_build(b, env->arch, g->blocks, fl_pg_s_min(g->blocks, budget(env, c)),
                       g->code_split);
}

/* The client's gate: from its private state, or fresh (seeded per client) on its first job. */
static int load_gate(fl_pg_gate *gt, const fl_env *env, int32_t c, int L, int max_batch,
                     const void *priv, size_t priv_len, sim_err *err)
{
    const nn_arch *a = env->arch;
    sim_rng r;
    sim_rng_seed(&r, env->seed, SIM_RNG_INIT_WEIGHTS, (uint64_t)1 << 40 | (uint32_t)c);
    fl_pg_gate_init(gt, a->in_c, a->in_h * a->in_w, L, conf(env)->paths, max_batch, &r);
    if (!priv) return SIM_OK;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = !nn_msgpack_next(&u, priv, priv_len, &off, NULL, NULL)
                     ? nn_unpack_f32(gt->p, gt->n_saved, &u.data, "gate state", err)
                     : sim_fail(err, SIM_EFORMAT, "gate state", 0, 0, "not msgpack");
    msgpack_unpacked_destroy(&u);
    if (rc) fl_pg_gate_free(gt);
    return rc;
}

static void *pfedgate_new(const fl_env *env, sim_err *err)
{
    (void)err;
    pfedgate *s = sim_xcalloc(1, sizeof *s);
    size_t nf = env->arch->layout.n_floats;
    s->env = env;
    s->global = fl_initial_params(env);
    s->scratch = sim_xcalloc(nf, sizeof(float));
    s->num = sim_xcalloc(nf, sizeof(double));
    s->den = sim_xcalloc(nf, sizeof(double));
    for (int c = 0; c < env->part->n_clients; c++)
        s->all_mass += env->cfg->uniform ? 1 : env->part->n[c];
    s->msg_bytes = fl_dense_msg_bytes(env->arch);
    if (!conf(env)->eval_global) {
        s->prev = sim_xcalloc(nf, sizeof(float));
        s->own = sim_xcalloc(nf, sizeof(float));
        s->kept = sim_xcalloc((size_t)env->part->n_clients, sizeof(void *));
        s->kept_len = sim_xcalloc((size_t)env->part->n_clients, sizeof(size_t));
    }
    return s;
}

static void pfedgate_round_end(void *p)
{
    pfedgate *s = p;
    for (int c = 0; s->kept && c < s->env->part->n_clients; c++) {
        free(s->kept[c]);
        s->kept[c] = NULL;
    }
}

static void pfedgate_free(void *p)
{
    pfedgate *s = p;
    if (!s) return;
    free(s->global);
    free(s->scratch);
    free(s->num);
    free(s->den);
    pfedgate_round_end(s);
    free(s->prev), free(s->own), free(s->kept), free(s->kept_len);
    free(s);
}

static size_t pfedgate_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    pfedgate *s = p;
    (void)client, (void)round;
    if (!out) return s->msg_bytes; /* cost-only: not packed for nothing */
    size_t before = out->size;
    nn_pack_params(out, s->env->arch, s->global);
    return out->size - before;
}

/* {"blocks": bitmap of the blocks sent, "data": their values in block order}: its length */
static size_t up_bytes(const fl_pg_blocks *b, const uint8_t *used)
{
    size_t n = 0;
    for (int i = 0; i < b->n; i++)
        n += used[i] ? b->len[i] : 0;
    return 1 + 7 + nn_bin_bytes(((size_t)b->n + 7) / 8) + 5 + nn_bin_bytes(4 * n);
}

static void pack_up(msgpack_sbuffer *sb, const fl_pg_blocks *b, const uint8_t *used,
                    const float *delta)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    size_t bm = ((size_t)b->n + 7) / 8, n = 0;
    unsigned char *bits = sim_xcalloc(bm + 1, 1);
    for (int i = 0; i < b->n; i++)
        if (used[i]) {
            bits[i / 8] |= (unsigned char)(1u << (i % 8));
            n += b->len[i];
        }
    nn_pack_str(&pk, "blocks");
    msgpack_pack_bin(&pk, bm);
    msgpack_pack_bin_body(&pk, bits, bm);
    float *v = sim_xmalloc(sizeof(float) * (n + 1));
    for (int i = 0, k = 0; i < b->n; i++)
        if (used[i]) {
            memcpy(v + k, delta + b->off[i], sizeof(float) * b->len[i]);
            k += (int)b->len[i];
        }
    nn_pack_str(&pk, "data");
    nn_pack_f32(&pk, v, n);
    free(v);
    free(bits);
}

/* Blocks whose importance is flat: what a job keeps before its gate has learned (cost-only). */
static void flat_selection(const fl_pg_blocks *b, double s, double s_min, uint8_t *I)
{
    float *G = sim_xmalloc(sizeof(float) * (size_t)(b->n + 1));
    int *order = sim_xmalloc(sizeof(int) * (size_t)(b->n + 1));
    for (int i = 0; i < b->n; i++)
        G[i] = 0.5f;
    fl_pg_select(b, G, s, s_min, I, order);
    free(G);
    free(order);
}

/* Element masks of the kept blocks, one byte per float of the arena, and the per-tensor view. */
static void set_block_masks(nn_model *m, const fl_pg_blocks *b, const uint8_t *I, uint8_t *mask)
{
    const nn_layout *L = &m->arch.layout;
    const uint8_t *per[NN_MAX_TENSORS] = {0};
    for (int i = 0; i < b->n; i++)
        memset(mask + b->off[i], I[i] ? 1 : 0, b->len[i]);
    for (int t = 0; t < L->n; t++)
        per[t] = L->t[t].trainable ? mask + L->t[t].off : NULL;
    nn_model_set_masks(m, per);
}

static void clip_norm(float *g, size_t n, double max)
{
    if (max <= 0) return;
    double norm = sqrt(nn_sumsq(g, n));
    if (norm > max)
        for (size_t j = 0; j < n; j++)
            g[j] = (float)(g[j] * (max / norm));
}

/* What a job's 1-sample batches would have cost, taken out of a cost-only job's: training skips
 * them (below), neither computing nor stepping. */
static void skip_singles(const fl_env *env, const fl_job *job, const nn_model *m, fl_result *res)
{
    int n = env->part->n[job->client], B = env->cfg->batch_size;
    if (n <= 0 || (B > 1 && n % B != 1)) return;
    int64_t steps = fl_job_steps(env, n), ones = B == 1 ? steps : fl_job_short_batches(steps, n, B);
    nn_cost c;
    nn_model_step_cost(m, 1, &c);
    nn_cost_add(&res->cost, &c, -(double)ones);
    fl_count_steps(res, -ones);
}

static int pfedgate_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                          sim_err *err)
{
    const fl_pfedgate_config *cfg = conf(env);
    nn_model *m = fl_worker_model(w, env);
    size_t nf = env->arch->layout.n_floats;
    int32_t c = job->client;
    double s = budget(env, c), s_min = fl_pg_s_min(cfg->blocks, s);
    fl_pg_blocks b;
    client_blocks(&b, env, c);
    int L = b.n;
    uint8_t *I = sim_xcalloc((size_t)L, 1), *used = sim_xcalloc((size_t)L, 1);
    uint8_t *mask = sim_xcalloc(nf, 1);
    int rc = SIM_OK;
    if (env->cost_only) { /* the cost of a job keeping what a flat gate keeps */
        flat_selection(&b, s, s_min, I);
        set_block_masks(m, &b, I, mask);
        fl_local_sgd(env, job, m, 0, NULL, res);
        skip_singles(env, job, m, res);
        nn_model_reset_narrowing(m);
        res->up_bytes = up_bytes(&b, I);
        goto done;
    }
    fl_pg_gate gt;
    if ((rc = load_gate(&gt, env, c, L, env->cfg->batch_size, job->priv, job->priv_len, err)))
        goto done;
    if ((rc = nn_unpack_params(m->params, env->arch, job->down, job->down_len, "down message",
                               err))) {
        fl_pg_gate_free(&gt);
        goto done;
    }
    memcpy(w->ref, m->params, nf * sizeof(float));
    float *theta = sim_xmalloc(nf * sizeof(float)), *Mt = sim_xmalloc(sizeof(float) * (size_t)L);
    float *vel = m->mom; /* the model's momentum, after the gate in the private state */
    float mu = (float)env->cfg->momentum, wd = (float)env->cfg->weight_decay;
    if ((rc = fl_momentum_load(env, job, 1, m, err))) {
        free(theta), free(Mt);
        fl_pg_gate_free(&gt);
        goto done;
    }
    float *dG = sim_xmalloc(sizeof(float) * (size_t)L),
          *dM = sim_xmalloc(sizeof(float) * (size_t)L);
    int *order = sim_xmalloc(sizeof(int) * (size_t)L), masked = 0;
    int64_t skipped = 0;
    uint8_t *Iprev = sim_xmalloc((size_t)L);
    memcpy(theta, m->params, nf * sizeof(float));
    fl_loop lp;
    if (fl_loop_start(&lp, env, job, m)) {
        double gate_lr = cfg->gate_lr * (env->cfg->lr > 0 ? lp.lr / env->cfg->lr : 1);
        for (int nb; (nb = fl_loop_next(&lp));) {
            if (nb < 2) { /* batch norm needs two samples (the code skips them too) */
                skipped++;
                continue;
            }
            fl_pg_gate_forward(&gt, lp.b.x, nb, 1, s_min);
            fl_pg_select(&b, gt.G, s, s_min, I, order);
            for (int i = 0; i < L; i++) {
                Mt[i] = I[i] ? gt.M[i] : 0.0f;
                used[i] |= I[i];
                if (!I[i])
                    memset(m->params + b.off[i], 0, sizeof(float) * b.len[i]);
                else
                    for (size_t e = b.off[i]; e < b.off[i] + b.len[i]; e++)
                        m->params[e] = theta[e] * Mt[i];
            }
            /* the same selection as the last batch keeps its masks (and the model's live map) */
            if (!masked || memcmp(I, Iprev, (size_t)L)) set_block_masks(m, &b, I, mask);
            memcpy(Iprev, I, (size_t)L);
            masked = 1;
            nn_model_zero_grad(m);
            lp.loss += nn_model_forward(m, lp.b.x, lp.b.y, nb, 1);
            nn_model_backward(m);
            for (int i = 0; i < L; i++) { /* straight through the selection */
                dM[i] = dG[i] = 0.0f;
                if (!I[i]) continue; /* a dropped block has no gradient */
                double a = nn_dot(theta + b.off[i], m->grads + b.off[i], b.len[i]);
                dM[i] = (float)a;
                dG[i] = s < 1 ? (float)(a * gt.M[i]) : 0.0f;
                for (size_t e = b.off[i]; e < b.off[i] + b.len[i]; e++)
                    m->grads[e] *= Mt[i];
            }
            memset(gt.g, 0, sizeof(float) * gt.n_params);
            fl_pg_gate_backward(&gt, dG, dM);
            /* outside the blocks the gradients are zero (padding, running statistics) */
            clip_norm(m->grads, nf, cfg->clip);
            /* SGD (PyTorch's form, v = μv + g + wd·w) on the blocks used so far this job: the
             * others have neither gradient nor momentum, so they stay put and out of the upload */
            for (int i = 0; i < L; i++)
                for (size_t e = b.off[i]; used[i] && e < b.off[i] + b.len[i]; e++) {
                    vel[e] = mu * vel[e] + m->grads[e] + wd * theta[e];
                    theta[e] -= (float)lp.lr * vel[e];
                }
            clip_norm(gt.g, gt.n_params, cfg->clip);
            for (size_t j = 0; j < gt.n_params; j++) {
                gt.v[j] = mu * gt.v[j] + gt.g[j] + wd * gt.p[j];
                gt.p[j] -= (float)gate_lr * gt.v[j];
            }
        }
        int64_t steps = lp.steps;
        fl_loop_finish(&lp, res);
        fl_count_steps(res, -skipped);
        res->loss = steps > skipped ? lp.loss / (double)(steps - skipped) : 0; /* of those run */
    }
    nn_model_reset_narrowing(m);    /* the masks are freed below */
    for (size_t j = 0; j < nf; j++) /* the change, in place in ref */
        w->ref[j] = theta[j] - w->ref[j];
    pack_up(&res->up, &b, used, w->ref);
    res->up_bytes = res->up.size;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &res->priv, msgpack_sbuffer_write);
    nn_pack_f32(&pk, gt.p, gt.n_saved);
    fl_momentum_save(env, m, res);
    fl_pg_gate_free(&gt);
    free(theta), free(Mt), free(dG), free(dM), free(order), free(Iprev);
done:
    fl_pg_blocks_free(&b);
    free(I), free(used), free(mask);
    return rc;
}

/* A client's upload: which of its blocks it sent (sent[i]) and their values, in block order,
 * into vals (n_floats at most). */
static int read_upload(const fl_pg_blocks *b, const void *up, size_t len, uint8_t *sent,
                       float *vals, sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0, bm = ((size_t)b->n + 7) / 8, n = 0;
    int rc = SIM_OK;
    const msgpack_object *bits = NULL, *data = NULL;
    if (!up || nn_msgpack_next(&u, up, len, &off, NULL, NULL) ||
        !(bits = nn_map_get(&u.data, "blocks")) || bits->type != MSGPACK_OBJECT_BIN ||
        bits->via.bin.size != bm || !(data = nn_map_get(&u.data, "data")))
        rc = sim_fail(err, SIM_EFORMAT, "up message", 0, 0,
                      "not a pFedGate upload (\"blocks\": %zu bytes, \"data\")", bm);
    for (int i = 0; !rc && i < b->n; i++) {
        sent[i] = ((const unsigned char *)bits->via.bin.ptr)[i / 8] >> (i % 8) & 1;
        n += sent[i] ? b->len[i] : 0;
    }
    if (!rc) rc = nn_unpack_f32(vals, n, data, "up message", err);
    msgpack_unpacked_destroy(&u);
    return rc;
}

static int pfedgate_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                           double mass, sim_err *err)
{
    pfedgate *s = p;
    (void)mass;
    fl_pg_blocks b;
    client_blocks(&b, s->env, client);
    uint8_t *sent = sim_xmalloc((size_t)b.n);
    int rc = read_upload(&b, up, len, sent, s->scratch, err);
    for (int i = 0, k = 0; !rc && i < b.n; i++) {
        if (!sent[i]) continue;
        for (size_t e = 0; e < b.len[i]; e++) {
            s->num[b.off[i] + e] += weight * (double)s->scratch[k + (int)e];
            s->den[b.off[i] + e] += weight;
        }
        k += (int)b.len[i];
    }
    if (!rc && s->kept) {
        free(s->kept[client]);
        s->kept[client] = sim_xmalloc(len);
        memcpy(s->kept[client], up, len);
        s->kept_len[client] = len;
    }
    free(sent);
    fl_pg_blocks_free(&b);
    return rc;
}

static void pfedgate_aggregate(void *p)
{
    pfedgate *s = p;
    const fl_config *cfg = s->env->cfg;
    size_t nf = s->env->arch->layout.n_floats;
    if (s->prev) memcpy(s->prev, s->global, nf * sizeof(float));
    for (size_t j = 0; j < nf; j++) {
        double by = conf(s->env)->code_aggregate ? s->all_mass : s->den[j];
        if (s->den[j] > 0) s->global[j] += (float)(cfg->server_lr * s->num[j] / by);
    }
    memset(s->num, 0, nf * sizeof(double));
    memset(s->den, 0, nf * sizeof(double));
}

static double pfedgate_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    pfedgate *s = p;
    (void)client, (void)priv, (void)priv_len;
    nn_model_reset_narrowing(m);
    memcpy(m->params, s->global, s->env->arch->layout.n_floats * sizeof(float));
    return 1.0;
}

static double pfedgate_eval_client(void *p, int32_t c, const void *priv, size_t priv_len,
                                   const nn_dataset *d, const int32_t *idx, int n, nn_model *m,
                                   double *density)
{
    pfedgate *s = p;
    const fl_env *env = s->env;
    double bud = budget(env, c), s_min = fl_pg_s_min(conf(env)->blocks, bud);
    fl_pg_blocks b;
    client_blocks(&b, env, c);
    int cap = m->max_batch < PG_EVAL_BATCH ? m->max_batch : PG_EVAL_BATCH, correct = 0;
    fl_pg_gate gt;
    sim_err err;
    *density = 1;
    if (load_gate(&gt, env, c, b.n, cap, priv, priv_len, &err)) { /* a stored state is ours */
        fl_pg_blocks_free(&b);
        return 0;
    }
    /* the model the gate scales: the client's own trained copy when this aggregation absorbed
     * its upload (the global model it started from plus its change), else the global model */
    const float *base = s->global;
    if (s->kept && s->kept[c]) {
        uint8_t *sent = sim_xmalloc((size_t)b.n);
        if (read_upload(&b, s->kept[c], s->kept_len[c], sent, s->scratch, &err) == SIM_OK) {
            memcpy(s->own, s->prev, env->arch->layout.n_floats * sizeof(float));
            for (int i = 0, k = 0; i < b.n; i++)
                for (size_t e = 0; sent[i] && e < b.len[i]; e++, k++)
                    s->own[b.off[i] + e] += s->scratch[k];
            base = s->own;
        }
        free(sent);
    }
    nn_model_reset_narrowing(m);
    memcpy(m->params, base, env->arch->layout.n_floats * sizeof(float));
    int feat = d->c * d->h * d->w, K = env->arch->classes;
    float *x = sim_xmalloc(sizeof(float) * (size_t)cap * feat);
    int32_t *y = sim_xmalloc(sizeof(int32_t) * (size_t)cap);
    uint8_t *I = sim_xmalloc((size_t)b.n);
    int *order = sim_xmalloc(sizeof(int) * (size_t)b.n);
    double dens = 0;
    for (int off = 0; off < n; off += cap) {
        int nb = n - off < cap ? n - off : cap;
        nn_gather(x, y, d, idx + off, nb);
        fl_pg_gate_forward(&gt, x, nb, 0, s_min);
        dens += nb * fl_pg_select(&b, gt.G, bud, s_min, I, order);
        for (int i = 0; i < b.n; i++) {
            float sc = I[i] ? gt.M[i] : 0.0f;
            for (size_t e = b.off[i]; e < b.off[i] + b.len[i]; e++)
                m->params[e] = base[e] * sc;
        }
        nn_model_forward(m, x, NULL, nb, 0);
        for (int k = 0; k < nb; k++) {
            const float *z = m->logits + (size_t)k * K;
            int best = 0;
            for (int j = 1; j < K; j++)
                if (z[j] > z[best]) best = j;
            correct += best == y[k];
        }
    }
    *density = n > 0 ? dens / n : 1;
    free(x), free(y), free(I), free(order);
    fl_pg_gate_free(&gt);
    fl_pg_blocks_free(&b);
    return n > 0 ? (double)correct / n : 0;
}

/* [global floats, num doubles, den doubles], raw native-order bytes (read back by this build) */
static void pfedgate_save(void *p, msgpack_packer *pk)
{
    pfedgate *s = p;
    size_t nf = s->env->arch->layout.n_floats;
    msgpack_pack_array(pk, 3);
    msgpack_pack_bin(pk, nf * sizeof(float));
    msgpack_pack_bin_body(pk, s->global, nf * sizeof(float));
    msgpack_pack_bin(pk, nf * sizeof(double));
    msgpack_pack_bin_body(pk, s->num, nf * sizeof(double));
    msgpack_pack_bin(pk, nf * sizeof(double));
    msgpack_pack_bin_body(pk, s->den, nf * sizeof(double));
}

static int pfedgate_load(void *p, const msgpack_object *o, sim_err *err)
{
    pfedgate *s = p;
    size_t nf = s->env->arch->layout.n_floats;
    const msgpack_object *a =
            o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 3 ? o->via.array.ptr : NULL;
    if (!a || a[0].type != MSGPACK_OBJECT_BIN || a[0].via.bin.size != nf * sizeof(float) ||
        a[1].type != MSGPACK_OBJECT_BIN || a[1].via.bin.size != nf * sizeof(double) ||
        a[2].type != MSGPACK_OBJECT_BIN || a[2].via.bin.size != nf * sizeof(double))
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "server state does not fit pfedgate with a %zu-parameter model", nf);
    memcpy(s->global, a[0].via.bin.ptr, nf * sizeof(float));
    memcpy(s->num, a[1].via.bin.ptr, nf * sizeof(double));
    memcpy(s->den, a[2].via.bin.ptr, nf * sizeof(double));
    return SIM_OK;
}

int fl_pg_classes_reached(const nn_arch *a, const fl_pfedgate_config *g, double s)
{
    const nn_layer *l = &a->l[a->n - 1];
    double s_min = fl_pg_s_min(g->blocks, s);
    if (s >= 1 || s > s_min || l->op != NN_LINEAR) return a->classes;
    const nn_tensor *t = &a->layout.t[l->wt];
    size_t first = first_len((size_t)t->rows * t->cols, g->blocks, s_min, g->code_split);
    size_t rows = cdiv(first, (size_t)t->cols);
    return rows < (size_t)a->classes ? (int)rows : a->classes;
}

/* Budgets too small to choose from: the clients on them train a model that cannot output most
 * classes, which the run should say (a device's capacity far below the laptop's gives one). */
static int pfedgate_warn(const fl_env *env, char *msg, size_t cap)
{
    const fl_pfedgate_config *g = conf(env);
    int n = env->part->n_clients, hit = 0, reached = env->arch->classes;
    double least = 1;
    for (int32_t c = 0; c < n; c++) {
        double s = budget(env, c);
        int k = fl_pg_classes_reached(env->arch, g, s);
        if (k == env->arch->classes) continue;
        hit++;
        if (s < least) least = s, reached = k;
    }
    if (!hit) return 0;
    snprintf(msg, cap,
             "pfedgate: %d of %d clients have a density budget (%.3g at the least) that leaves the "
             "gate no blocks to choose: each tensor keeps only its first block, so the output "
             "layer reaches %d of %d classes and their models cannot predict the others. A budget "
             "above %.3g leaves room (algorithm.pfedgate.s, or the devices' capacity)",
             hit, n, least, reached, env->arch->classes, fl_pg_s_min(g->blocks, 1));
    return 1;
}

/* For the memory check: a sparse model of density s costs about what a √s-wide one does
 * (spec 000 §3.3). */
static double pfedgate_width(const fl_env *env, int32_t client)
{
    return sqrt(budget(env, client));
}

/* job_bound: the gate picks each batch's blocks, so a job's FLOPs are known only by training; its
 * steps are not (the cost-only job's: batches of one are skipped, as training skips them). The
 * steps at no FLOPs or bytes. */
static void pfedgate_bound(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *lo)
{
    fl_env ce = *env;
    ce.cost_only = 1;
    sim_err err;
    pfedgate_train(&ce, job, w, lo, &err); /* cost-only: no message read, nothing fails */
    memset(&lo->cost, 0, sizeof lo->cost);
}

const fl_algo fl_pfedgate = {
        .version = FL_ALGO_VERSION,
        .name = "pfedgate",
        .summary = "pFedGate: a private gate picks each batch's blocks under the client's "
                   "density budget",
        .doc = "a private gate picks, batch by batch, the blocks of the shared model each client "
               "trains under its density budget",
        .flags = FL_HAS_GLOBAL | FL_KEEPS_MOMENTUM | FL_NEEDS_BATCH2,
        .section = &fl_pfedgate_section,
        .server_new = pfedgate_new,
        .server_free = pfedgate_free,
        .job_down = pfedgate_down,
        .client_train = pfedgate_train,
        .server_absorb = pfedgate_absorb,
        .server_aggregate = pfedgate_aggregate,
        .eval_params = pfedgate_eval,
        .server_save = pfedgate_save,
        .server_load = pfedgate_load,
        .client_width = pfedgate_width,
        .eval_client = pfedgate_eval_client,
        .server_round_end = pfedgate_round_end,
        .warn = pfedgate_warn,
        .job_bound = pfedgate_bound,
        .no_compress = "pFedGate uploads the blocks its gate used, a block bitmap and their values "
                       "that differ by client and job, and compressing them is not implemented",
};
