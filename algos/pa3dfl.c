/* algos/pa3dfl.c -- Pa3dFL (Wang et al., 2024; spec 004): personalized FL under capacity
 * heterogeneity by decomposing every layer but the head into a general factor u, the same for
 * every client and averaged unweighted (Eq. 6), and a personal factor v of 1/p_min blocks, of
 * which a client of width p keeps the first p/p_min (Eq. 10). A server-side hyper-network
 * generates each client's personal factors and local head from client embeddings mixed by
 * self-attention (Eq. 9), and learns from the changes clients make to them (Eq. 7–8).
 *
 * A job: the down message carries u and the client's kept personal entries {"u", "v"}; the
 * client recovers its p-wide weights with small GEMMs (pa3dfl.h), trains the nn model narrowed to
 * p on them through the frozen random global head H_g (cross-entropy L_g), trains the generated
 * local head on the detached penultimate features (L_c), adds λ·Eq. 32 on the conv factors, and
 * chains the gradients back into u and v for one plain SGD step (spec A19: no momentum, no
 * weight decay): from the weight gradients, or, for a linear layer whose R1 is large against the
 * batch (p_min = 1 makes R1 = T), from its input and output gradient without forming the weight
 * gradient (fl_p3_batch_form; the same gradients in 9× fewer FLOPs for fc1 at p_min = 1). Its FLOPs
 * are the model's GEMMs as the kernels ran them plus every recovery, the chain back, Eq. 32 and the
 * local head. It then picks α on its validation samples for its test model (1−α)·M_0 + α·M_1 (M_0:
 * received weights with H_g; M_1: trained with its local head, interpolated as recovered dense
 * weights, spec §2.11) and keeps that model as private state, which personalized evaluation reads.
 * It uploads u and its kept personal entries.
 *
 * Decisions beyond the spec's own (see scenarios/README.md for the keys):
 * - α is chosen on the client's validation split (partition.local_val, the paper's 60 of 600
 *   images), or, in a partition without one, on `val` (default 10 %) of the client's training
 *   samples, held out of training: choosing α on the reported test split would leak it.
 * - A client never selected is evaluated on the model it would receive now (current u and
 *   hyper-network, with H_g) rather than one frozen at round 0: it is what the server holds for it.
 * - H_g comes from the seed on both sides (spec A34), so it never travels.
 * - The decomposed layers have no biases (A2): the model's biases stay 0 and are not trained.
 * - `hn_clip` (default 1) clips the gradient norm of the embeddings, encoder and temperatures (the
 *   spec keeps FLGo's clip optional and off): their gradient grows with ‖Δ‖², and unclipped at
 *   γ = 1 personalized accuracy on Fashion (4 clients a round) fell from 62% to 19% between
 *   rounds 2 and 4 (clipped: 58%, then 73% by round 8). The decoders, which carry the personal
 *   parameters themselves, are never clipped.
 * - Clipping alone did not stop the collapse on the Table 1 protocol (100 clients, 20 a round): the
 *   decoder weights start at 0 and grow as W ≈ −γ·Σ g·êᵀ, so the encoder's gradient Wᵀg points
 *   along ê itself whenever successive rounds' changes agree, and the step scales ê up (‖ê‖² 0.48 →
 *   7.8 in one step at γ = 1, clip 1; clients diverged a round later; at clip 0.1 it still grew
 *   ~40% a round). A larger ê amplifies every later decoder step by 1 + ‖ê‖². Two stabilizers,
 *   both on by default: `hn_unit` scales each encoded embedding to unit norm (cosine attention
 *   scores; only the direction of ê can be learned, and τ keeps the role the paper gives it), and
 *   `hn_nlms` divides each client's share of the decoder gradient by 1 + ‖ê‖² (normalized LMS: a
 *   single absorbed client moves its generated vector by exactly γ·g).
 */
#include "algos/pa3dfl.h"
#include "algos/algo.h"
#include "nn/ops.h"
#include "nn/pack.h"
#include "nn/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define K(field) .offset = offsetof(fl_pa3dfl_config, field)
static const sim_key KEYS[] = {
        {"lambda", SIM_KEY_DOUBLE, K(lambda), .dflt = "0.001", .lo = 0, .hi = 1e3,
         .doc = "λ, weight of the orthogonality penalty (Eq. 32)"},
        {"hn_lr", SIM_KEY_DOUBLE, K(hn_lr), .dflt = "1", .lo = 0, .hi = 1e3,
         .doc = "γ, the hyper-network's SGD step (Eq. 8)"},
        {"hn_clip", SIM_KEY_DOUBLE, K(hn_clip), .dflt = "1", .lo = 0, .hi = 1e9,
         .doc = "clip the gradient norm of the embeddings, encoder and temperatures to this (`0`: "
                "none); decoders are not clipped"},
        {"hn_nlms", SIM_KEY_BOOL, K(hn_nlms), .dflt = "true",
         .doc = "normalized decoder steps: client k's share of a decoder's gradient is divided by "
                "1 + ‖ê_k‖² (ê_k: its mixed embedding), so one client's step moves its generated "
                "parameters by γ·g exactly; `false`: plain SGD, whose step is γ·(1 + ‖ê‖²)·g and "
                "grows as the encoder does"},
        {"hn_unit", SIM_KEY_BOOL, K(hn_unit), .dflt = "true",
         .doc = "scale every encoded embedding to unit norm before the attention (cosine scores, "
                "so τ alone sets how sharp the mixing is); `false`: as encoded, whose norm the "
                "hyper-network's own step grows round after round until clients diverge (measured: "
                "‖ê‖² 0.48 → 7.8 in one step at γ = 1)"},
        {"embed", SIM_KEY_INT, K(embed), .dflt = "64", .lo = 1, .hi = 4096,
         .doc = "d_e, the embedding width"},
        {"hidden", SIM_KEY_INT, K(hidden), .dflt = "64", .lo = 1, .hi = 4096,
         .doc = "d_h, the encoder's width"},
        {"depth", SIM_KEY_INT, K(depth), .dflt = "4", .lo = 1, .hi = FL_PA3DFL_MAX_DEPTH,
         .doc = "the encoder's linear layers"},
        {"val", SIM_KEY_DOUBLE, K(val), .dflt = "0.1", .lo = 0, .hi = 0.9,
         .doc = "share of each client's training samples held out (not trained on) to choose α"},
        {"alphas", SIM_KEY_INT, K(alphas), .dflt = "11", .lo = 1, .hi = 1001,
         .doc = "points of the α grid on [0, 1]; `1`: no search, the trained model is the test "
                "model"},
        {"hn", SIM_KEY_BOOL, K(hn), .dflt = "true",
         .doc = "`false`: Table 3's \"w.o. HN-based Agg.\" ablation: no hyper-network, each client "
                "keeps its personal blocks and local head in its private state (from the common "
                "initial ones) and only u travels"},
        {"p_min", SIM_KEY_STRING, K(p_min_text),
         .size = sizeof(((fl_pa3dfl_config *)0)->p_min_text), .dflt = "auto",
         .doc = "the width quantum 1/2^k: `auto` takes the largest of 1, 1/2, … 1/32 with p_min² ≤ "
                "the smallest capacity (1 when every capacity is 1: full-rank factors, whose step "
                "is far larger than a dense layer's; on Fashion at lr 0.1 they diverge in the "
                "first round, so the Ideal preset takes Hetero's 1/16)"},
        {0},
};
#undef K

static int pa3dfl_check(void *block, const sim_yaml *map, const sim_key_ctx *ctx, sim_err *err)
{
    fl_pa3dfl_config *c = block;
    const char *pv = c->p_min_text;
    (void)ctx;
    c->p_min = 0;
    if (strcmp(pv, "auto")) {
        char *end;
        double x = strtod(pv, &end);
        int k = x > 0 ? (int)lround(1 / x) : 0;
        if (end == pv || *end || !(x > 0 && x <= 1) || k > 1024 || (k & (k - 1)) ||
            fabs(k * x - 1) > 1e-9)
            return sim_yaml_fail(sim_yaml_get(map, "p_min"), err,
                                 "p_min: '%s' is not auto or 1/2^k (1, 0.5, … 1/1024)", pv);
        c->p_min = x;
    }
    return SIM_OK;
}

const fl_section fl_pa3dfl_section = {
        .name = "pa3dfl",
        .keys = KEYS,
        .size = sizeof(fl_pa3dfl_config),
        .check = pa3dfl_check,
        .doc = "Pa3dFL, spec 004; checked for the others. Every conv/linear layer but the head is "
               "W = "
               "u·v: u (k²·R1 × R2) the same for all clients and averaged unweighted, v made of "
               "1/p_min "
               "blocks of which a client keeps the first p_i/p_min, p_i the largest multiple of "
               "p_min "
               "with p_i² ≤ r_i (`devices.capacity`). R1 = T·p_min, R2 = max(min(S, T), k²) for "
               "convs and "
               "R1 for linear layers; the decomposed layers have no bias. Clients train through a "
               "frozen "
               "random global head plus their generated local head, with λ·Σ‖uᵀu − diag‖² on the "
               "convs, "
               "and take their test model (1−α)·received + α·trained with α from an 11-point grid "
               "chosen "
               "on held-out training samples. A server-side hyper-network generates every client's "
               "v and "
               "local head from its embedding mixed with all others' by attention (a temperature "
               "per "
               "tensor) and learns from the clients' changes to them. The messages carry u and the "
               "client's kept entries both ways. Clients take plain SGD steps "
               "(`algorithm.momentum` and "
               "`weight_decay` are refused; `algorithm.clip` clips the joint norm of u's and the "
               "kept "
               "entries' gradient). Defaults: the spec's Fashion Hetero column, except `hn_clip` "
               "(unclipped, γ = 1 diverged within four rounds on Fashion), and the two stabilizers "
               "`hn_unit` and `hn_nlms`, which the paper does not describe.",
};

/* Pa3dFL's initial state; index: 0 general factors, 1 personal factors, 2 frozen global head,
 * 3 hyper-network */
enum { RNG_PA3DFL = 12 };
static const fl_stream STREAMS[] = {{"pa3dfl.init", RNG_PA3DFL}, {0}};

static const fl_pa3dfl_config *conf(const fl_env *env)
{
    return env->cfg->own;
}

/* The width quantum: the scenario's, or the largest 1/2^k ≤ 1/32 with (1/2^k)² ≤ min r (§2.4;
 * a client weaker than 1/32² still trains the 1/32-wide model). */
static double p_min_of(const fl_env *env)
{
    if (conf(env)->p_min > 0) return conf(env)->p_min;
    double rmin = 1, q = 1;
    for (int c = 0; env->capacity && c < env->part->n_clients; c++)
        rmin = fmin(rmin, env->capacity[c]);
    while (q * q > rmin && q > 1.0 / 32)
        q /= 2;
    return q;
}

/* Blocks client c keeps: the largest kb with (kb/nb)² ≤ r_c, at least one. */
static int client_blocks(const fl_env *env, int nb, int32_t c)
{
    double r = env->capacity ? env->capacity[c] : 1;
    int kb = nb;
    while (kb > 1 && (double)kb * kb > r * nb * nb * (1 + 1e-12))
        kb--;
    return kb;
}

static double pa3dfl_width(const fl_env *env, int32_t client)
{
    int nb = (int)lround(1 / p_min_of(env));
    return (double)client_blocks(env, nb, client) / nb;
}

/* Narrow m to kb of nb blocks (the first channels of every hidden layer). */
static void narrow(nn_model *m, int kb, int nb)
{
    nn_model_reset_narrowing(m);
    if (kb < nb) nn_model_set_width(m, (double)kb / nb, 0);
}

/* A head (K·d_pen weights, then K biases) into the model arena's last layer. */
static void set_head(const nn_arch *a, const fl_p3_net *d, float *params, const float *head)
{
    const nn_layer *l = &a->l[d->head_li];
    size_t nw = (size_t)d->K * d->d_pen;
    memcpy(params + a->layout.t[l->wt].off, head, sizeof(float) * nw);
    memcpy(params + a->layout.t[l->bt].off, head + nw, sizeof(float) * d->K);
}

/* The frozen global head, the same in every process: PyTorch's default Linear init. */
static void global_head(const fl_p3_net *d, uint64_t seed, float *hg)
{
    sim_rng r;
    sim_rng_seed(&r, seed, RNG_PA3DFL, 2);
    double b = 1 / sqrt(d->d_pen);
    for (size_t j = 0; j < (size_t)d->K * d->d_pen + d->K; j++)
        hg[j] = (float)((2 * sim_rng_uniform(&r) - 1) * b);
}

/* Initial factors (spec §2.8): u with orthonormal columns (rows when it is wide, rescaled to the
 * same entry variance 1/rows), v ~ N(0, 2·R1/(S·R2)) so that the recovered weights are
 * He-scaled, and a default-initialised local head. */
static void init_factors(const fl_p3_net *d, uint64_t seed, float *u, float *v)
{
    sim_rng r;
    sim_rng_seed(&r, seed, RNG_PA3DFL, 0);
    for (int k = 0; k < d->n; k++) {
        const fl_p3_layer *q = &d->l[k];
        int rows = q->kk * q->R1, cols = q->R2, tall = rows >= cols;
        int nvec = tall ? cols : rows, len = tall ? rows : cols;
        double *x = sim_xmalloc(sizeof(double) * (size_t)nvec * len);
        for (size_t j = 0; j < (size_t)nvec * len; j++)
            x[j] = sim_rng_normal(&r);
        for (int a = 0; a < nvec; a++) { /* modified Gram–Schmidt */
            double *xa = x + (size_t)a * len, nrm = 0;
            for (int b = 0; b < a; b++) {
                const double *xb = x + (size_t)b * len;
                double dot = 0;
                for (int e = 0; e < len; e++)
                    dot += xa[e] * xb[e];
                for (int e = 0; e < len; e++)
                    xa[e] -= dot * xb[e];
            }
            for (int e = 0; e < len; e++)
                nrm += xa[e] * xa[e];
            for (int e = 0; e < len; e++)
                xa[e] /= sqrt(nrm);
            double sc = tall ? 1 : sqrt((double)cols / rows);
            for (int e = 0; e < len; e++) /* vector a is column a (tall) or row a */
                u[q->u_off + (tall ? (size_t)e * cols + a : (size_t)a * cols + e)] =
                        (float)(xa[e] * sc);
        }
        free(x);
    }
    sim_rng_seed(&r, seed, RNG_PA3DFL, 1);
    for (int k = 0; k < d->n; k++) {
        const fl_p3_layer *q = &d->l[k];
        double sd = sqrt(2.0 * q->R1 / ((double)q->S * q->R2));
        for (size_t j = 0; j < (size_t)q->R2 * q->nb * q->S; j++)
            v[q->v_off + j] = (float)(sim_rng_normal(&r) * sd);
    }
    global_head(d, seed ^ 0x9e3779b97f4a7c15ull, v + d->n_v); /* its own draw, not H_g */
}

/* n floats from key of map o (SIM_EFORMAT, naming what, when it is missing or of another size). */
static int unpack_key(float *v, size_t n, const msgpack_object *o, const char *key,
                      const char *what, sim_err *err)
{
    const msgpack_object *x = nn_map_get(o, key);
    return x ? nn_unpack_f32(v, n, x, what, err)
             : sim_fail(err, SIM_EFORMAT, what, 0, 0, "no \"%s\"", key);
}

/* {"u": n_u floats, "v": the kept personal floats}: the message both ways; without the
 * hyper-network (`hn: false`) the personal part stays on the client and only "u" travels. */
static size_t msg_bytes(const fl_env *env, const fl_p3_net *d, int kb)
{
    size_t n = 1 + 2 + nn_bin_bytes(sizeof(float) * d->n_u);
    return conf(env)->hn ? n + 2 + nn_bin_bytes(sizeof(float) * fl_p3_kept(d, kb)) : n;
}

/* kept NULL: "u" alone */
static void pack_msg(msgpack_sbuffer *sb, const fl_p3_net *d, int kb, const float *u,
                     const float *kept)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, kept ? 2 : 1);
    nn_pack_str(&pk, "u");
    nn_pack_f32(&pk, u, d->n_u);
    if (!kept) return;
    nn_pack_str(&pk, "v");
    nn_pack_f32(&pk, kept, fl_p3_kept(d, kb));
}

static int unpack_msg(const void *buf, size_t len, const fl_p3_net *d, int kb, float *u,
                      float *kept, const char *what, sim_err *err)
{
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    size_t off = 0;
    int rc = buf && !nn_msgpack_next(&m, buf, len, &off, NULL, NULL)
                     ? SIM_OK
                     : sim_fail(err, SIM_EFORMAT, what, 0, 0, "not a msgpack map");
    if (!rc) rc = unpack_key(u, d->n_u, &m.data, "u", what, err);
    if (!rc && kept) rc = unpack_key(kept, fl_p3_kept(d, kb), &m.data, "v", what, err);
    msgpack_unpacked_destroy(&m);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* server */

typedef struct p3_server {
    const fl_env *env; /* borrowed */
    fl_p3_net net;
    float *u;   /* n_u: the general factors */
    float *hg;  /* the frozen global head */
    float *gen; /* n_gen: a generated personal vector (without the hyper-network: the initial
                   one, which a client never trained is evaluated with) */
    fl_p3_hn hn;
    int encoded;   /* hn's encoding is of the current φ */
    double *u_sum; /* the round so far: Σ of the received u */
    int got;
    int32_t *pend;  /* clients absorbed this round, in order */
    float **pend_g; /* their generated − returned kept personal entries */
    int n_pend;
} p3_server;

static int server_blocks(const p3_server *s, int32_t c)
{
    return client_blocks(s->env, s->net.nb, c);
}

static void encode(p3_server *s)
{
    if (!s->encoded) fl_p3_hn_encode(&s->hn);
    s->encoded = 1;
}

static void *pa3dfl_new(const fl_env *env, sim_err *err)
{
    const fl_pa3dfl_config *c = conf(env);
    p3_server *s = sim_xcalloc(1, sizeof *s);
    s->env = env;
    if (fl_p3_net_build(&s->net, env->arch, p_min_of(env), err)) {
        free(s);
        return NULL;
    }
    const fl_p3_net *d = &s->net;
    int N = env->part->n_clients;
    s->u = sim_xcalloc(d->n_u, sizeof(float));
    s->gen = sim_xcalloc(d->n_gen, sizeof(float));
    s->hg = sim_xcalloc((size_t)d->K * d->d_pen + d->K, sizeof(float));
    init_factors(d, env->seed, s->u, s->gen); /* gen: the decoders' initial biases */
    global_head(d, env->seed, s->hg);
    sim_rng r;
    sim_rng_seed(&r, env->seed, RNG_PA3DFL, 3);
    if (c->hn) fl_p3_hn_init(&s->hn, d, N, c->embed, c->hidden, c->depth, s->gen, &r);
    s->hn.unit = c->hn_unit;
    s->u_sum = sim_xcalloc(d->n_u, sizeof(double));
    s->pend = sim_xcalloc((size_t)N, sizeof(int32_t));
    s->pend_g = sim_xcalloc((size_t)N, sizeof(float *));
    return s;
}

static void clear_round(p3_server *s)
{
    for (int k = 0; k < s->n_pend; k++)
        free(s->pend_g[k]);
    s->n_pend = s->got = 0;
    memset(s->u_sum, 0, sizeof(double) * s->net.n_u);
}

static void pa3dfl_free(void *p)
{
    p3_server *s = p;
    if (!s) return;
    clear_round(s);
    fl_p3_hn_destroy(&s->hn);
    free(s->u);
    free(s->hg);
    free(s->gen);
    free(s->u_sum);
    free(s->pend);
    free(s->pend_g);
    free(s);
}

static size_t pa3dfl_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    p3_server *s = p;
    (void)round;
    int kb = server_blocks(s, client);
    if (!out) return msg_bytes(s->env, &s->net, kb);
    size_t before = out->size;
    if (!conf(s->env)->hn) {
        pack_msg(out, &s->net, kb, s->u, NULL);
        return out->size - before;
    }
    encode(s);
    fl_p3_hn_generate(&s->hn, client, s->gen);
    float *kept = sim_xmalloc(sizeof(float) * fl_p3_kept(&s->net, kb));
    fl_p3_gather(&s->net, kb, s->gen, kept);
    pack_msg(out, &s->net, kb, s->u, kept);
    free(kept);
    return out->size - before;
}

/* Eq. 6 needs every u; the hyper-network's gradient (Eq. 7) needs what the client was sent, which
 * φ (unchanged until aggregation in sync rounds, the paper's setting) regenerates, so only the
 * difference is kept. Under async federation φ may have moved since the dispatch: the gradient
 * is then taken at φ as the reply finds it. */
static int pa3dfl_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                         double mass, sim_err *err)
{
    p3_server *s = p;
    (void)weight, (void)mass; /* Eq. 6 and Eq. 7 weigh every client alike (spec A21) */
    const fl_p3_net *d = &s->net;
    int kb = server_blocks(s, client);
    size_t nk = fl_p3_kept(d, kb);
    int hn = conf(s->env)->hn;
    float *u = sim_xmalloc(sizeof(float) * d->n_u),
          *v = hn ? sim_xmalloc(sizeof(float) * nk) : NULL;
    int rc = unpack_msg(up, len, d, kb, u, v, "up message", err);
    if (!rc && s->n_pend == s->env->part->n_clients)
        rc = sim_fail(err, SIM_EINVAL, "up message", 0, 0, "more replies than clients in a round");
    if (rc) {
        free(u);
        free(v);
        return rc;
    }
    for (size_t j = 0; j < d->n_u; j++)
        s->u_sum[j] += u[j];
    s->got++;
    if (!hn) {
        free(u);
        return SIM_OK;
    }
    encode(s);
    fl_p3_hn_generate(&s->hn, client, s->gen);
    float *g = sim_xmalloc(sizeof(float) * nk);
    fl_p3_gather(d, kb, s->gen, g);
    for (size_t j = 0; j < nk; j++)
        g[j] -= v[j];
    s->pend[s->n_pend] = client;
    s->pend_g[s->n_pend++] = g;
    free(u);
    free(v);
    return SIM_OK;
}

static void pa3dfl_aggregate(void *p)
{
    p3_server *s = p;
    const fl_p3_net *d = &s->net;
    int m = s->n_pend;
    if (!s->got) return;
    for (size_t j = 0; j < d->n_u; j++)
        s->u[j] = (float)(s->u_sum[j] / s->got);
    if (!m) { /* no hyper-network */
        clear_round(s);
        return;
    }
    /* ∂L_HN/∂θ_i = (θ_i generated − θ_i returned)/m on the kept entries, 0 elsewhere */
    float **g = sim_xmalloc(sizeof(float *) * (size_t)m);
    for (int k = 0; k < m; k++) {
        int kb = server_blocks(s, s->pend[k]);
        size_t nk = fl_p3_kept(d, kb);
        for (size_t j = 0; j < nk; j++)
            s->pend_g[k][j] /= (float)m;
        g[k] = sim_xcalloc(d->n_gen, sizeof(float));
        fl_p3_scatter(d, kb, s->pend_g[k], g[k]);
    }
    encode(s);
    float *grad = sim_xcalloc(s->hn.n_small, sizeof(float));
    double gamma = conf(s->env)->hn_lr;
    fl_p3_hn_backward(&s->hn, m, s->pend, g, grad, NULL, gamma, conf(s->env)->hn_nlms);
    double clip = conf(s->env)->hn_clip, nrm = 0, sc = 1;
    for (size_t j = 0; j < s->hn.dec_b; j++)
        nrm += (double)grad[j] * grad[j];
    nrm = sqrt(nrm);
    if (clip > 0 && nrm > clip) sc = clip / nrm;
    for (size_t j = 0; j < s->hn.n_small; j++)
        s->hn.phi[j] -= (float)(gamma * (j < s->hn.dec_b ? sc : 1) * grad[j]);
    s->encoded = 0;
    free(grad);
    for (int k = 0; k < m; k++)
        free(g[k]);
    free(g);
    clear_round(s);
}

/* The live parameters of m in run order: what a test model's private state holds. */
static size_t live_floats(const nn_model *m)
{
    size_t n = 0;
    for (size_t r = 0; r < m->n_runs; r++)
        n += m->runs[r][1];
    return n;
}

/* Between m's live parameters and buf (live_floats of them, in run order): into m, or out of it. */
static void copy_live(nn_model *m, float *buf, int into_model)
{
    for (size_t r = 0, at = 0; r < m->n_runs; at += m->runs[r][1], r++) {
        float *p = m->params + m->runs[r][0];
        size_t bytes = sizeof(float) * m->runs[r][1];
        memcpy(into_model ? p : buf + at, into_model ? buf + at : p, bytes);
    }
}

static double pa3dfl_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    p3_server *s = p;
    const fl_p3_net *d = &s->net;
    const nn_arch *a = s->env->arch;
    if (client < 0) client = 0; /* no global model (has_global 0): never asked */
    int kb = server_blocks(s, client);
    narrow(m, kb, d->nb);
    memset(m->params, 0, sizeof(float) * a->layout.n_floats);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0, n = live_floats(m);
    float *w = sim_xmalloc(sizeof(float) * n);
    if (priv && !nn_msgpack_next(&u, priv, priv_len, &off, NULL, NULL) &&
        !unpack_key(w, n, &u.data, "w", "private state", NULL)) {
        copy_live(m, w, 1);
    } else { /* never trained: what it would receive now, through H_g */
        if (conf(s->env)->hn) {
            encode(s);
            fl_p3_hn_generate(&s->hn, client, s->gen);
        }
        fl_p3_compose(d, a, kb, s->u, s->gen, m->params);
        set_head(a, d, m->params, s->hg);
    }
    free(w);
    msgpack_unpacked_destroy(&u);
    return nn_model_unit_density(m);
}

/* [u, φ, u_sum, got, [[client, g], …]]: raw native-order bytes (read back by the same build). */
static void pa3dfl_save(void *p, msgpack_packer *pk)
{
    p3_server *s = p;
    const fl_p3_net *d = &s->net;
    msgpack_pack_array(pk, 5);
    nn_pack_f32(pk, s->u, d->n_u);
    nn_pack_f32(pk, s->hn.phi, s->hn.n_phi);
    msgpack_pack_bin(pk, sizeof(double) * d->n_u);
    msgpack_pack_bin_body(pk, s->u_sum, sizeof(double) * d->n_u);
    msgpack_pack_int(pk, s->got);
    msgpack_pack_array(pk, (uint32_t)s->n_pend);
    for (int k = 0; k < s->n_pend; k++) {
        msgpack_pack_array(pk, 2);
        msgpack_pack_int32(pk, s->pend[k]);
        nn_pack_f32(pk, s->pend_g[k], fl_p3_kept(d, server_blocks(s, s->pend[k])));
    }
}

static int pa3dfl_load(void *p, const msgpack_object *o, sim_err *err)
{
    p3_server *s = p;
    const fl_p3_net *d = &s->net;
    const msgpack_object *a =
            o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 5 ? o->via.array.ptr : NULL;
    const msgpack_object *pl = a && a[4].type == MSGPACK_OBJECT_ARRAY ? &a[4] : NULL;
    int N = s->env->part->n_clients;
    if (!a || !pl || pl->via.array.size > (uint32_t)N || a[2].type != MSGPACK_OBJECT_BIN ||
        a[2].via.bin.size != sizeof(double) * d->n_u ||
        a[3].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        nn_unpack_f32(s->u, d->n_u, &a[0], NULL, NULL) ||
        nn_unpack_f32(s->hn.phi, s->hn.n_phi, &a[1], NULL, NULL))
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "server state does not fit pa3dfl with this model and hyper-network");
    clear_round(s);
    memcpy(s->u_sum, a[2].via.bin.ptr, sizeof(double) * d->n_u);
    s->got = (int)a[3].via.u64;
    for (uint32_t k = 0; k < pl->via.array.size; k++) {
        const msgpack_object *e = &pl->via.array.ptr[k];
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2 ||
            e->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            e->via.array.ptr[0].via.u64 >= (uint64_t)N)
            return sim_fail(err, SIM_EFORMAT, NULL, 0, 0, "pa3dfl: a malformed pending reply");
        int32_t c = (int32_t)e->via.array.ptr[0].via.u64;
        size_t nk = fl_p3_kept(d, server_blocks(s, c));
        float *g = sim_xmalloc(sizeof(float) * nk);
        if (nn_unpack_f32(g, nk, &e->via.array.ptr[1], NULL, NULL)) {
            free(g);
            return sim_fail(err, SIM_EFORMAT, NULL, 0, 0, "pa3dfl: a pending reply's size");
        }
        s->pend[s->n_pend] = c;
        s->pend_g[s->n_pend++] = g;
    }
    s->encoded = 0;
    return SIM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* client */

/* FLOPs of one local step on nb samples beyond the model's own GEMMs: the recovery and its
 * backward, Eq. 32, and the local head's forward and weight gradient. */
static double extra_step_flops(const fl_p3_net *d, int kb, int nb, double lambda)
{
    return fl_p3_compose_flops(d, kb) + fl_p3_backward_flops(d, kb, nb) +
           (lambda > 0 ? fl_p3_orth_flops(d) : 0) + 4.0 * nb * (d->d_pen / d->nb * kb) * d->K;
}

/* Training samples held out to choose α: none where the partition has validation splits. */
static int val_count(const fl_env *env, int n)
{
    const fl_pa3dfl_config *c = conf(env);
    int nv = c->alphas > 1 && !env->part->val_idx ? (int)lround(c->val * n) : 0;
    return nv >= n ? (n > 0 ? n - 1 : 0) : nv;
}

/* The samples client c chooses α on: its validation split, or the training samples val_count
 * holds out (the last of its n). *n_out 0: α is 1. */
static const int32_t *alpha_samples(const fl_env *env, int c, const nn_dataset **d, int *n_out)
{
    const nn_partition *p = env->part;
    if (p->val_idx) {
        *d = p->test_from_train ? env->train : env->test;
        *n_out = conf(env)->alphas > 1 ? p->n_val[c] : 0;
        return p->val_idx[c];
    }
    int n = p->n[c], nv = val_count(env, n);
    *d = env->train;
    *n_out = nv;
    return p->idx[c] + (n - nv);
}

/* What a job costs without running it: the same schedule of batches as fl_loop. */
static void cost_only(const fl_env *env, const fl_job *job, const fl_p3_net *d, int kb, nn_model *m,
                      fl_result *res)
{
    const fl_config *cfg = env->cfg;
    int n = env->part->n[job->client], nt = n - val_count(env, n), B = cfg->batch_size, nv;
    const nn_dataset *vd;
    alpha_samples(env, job->client, &vd, &nv);
    int64_t steps = nt > 0 ? fl_job_steps(env, nt) : 0;
    float *take = sim_xmalloc(sizeof(float) * fl_p3_take_floats(d, m->max_batch));
    for (int64_t st = 0; st < steps; st++) {
        int nb = fl_job_batch(st, nt, B);
        nn_cost c;
        fl_p3_take(d, m, kb, nb, take); /* the layers in batch form compute no weight gradient */
        nn_model_step_cost(m, nb, &c);
        res->cost.flops += c.flops + extra_step_flops(d, kb, nb, conf(env)->lambda);
        res->cost.bytes += c.bytes;
        res->cost.samples += nb;
    }
    fl_p3_take(d, m, kb, 0, NULL);
    free(take);
    res->cost.flops += fl_p3_compose_flops(d, kb); /* the trained model, for the test model */
    if (nv > 0) {                                  /* the received one, and the α grid */
        nn_cost c;
        nn_model_forward_cost(m, nv, &c);
        res->cost.flops += fl_p3_compose_flops(d, kb) + conf(env)->alphas * c.flops;
        res->cost.bytes += conf(env)->alphas * c.bytes;
    }
    fl_count_steps(res, steps);
}

/* Without the hyper-network: the client's kept personal entries from its private state, or the
 * common initial ones before its first job. */
static int own_personal(const fl_env *env, const fl_p3_net *d, int kb, const fl_job *job,
                        float *kept, sim_err *err)
{
    if (!job->priv) {
        float *u = sim_xmalloc(sizeof(float) * d->n_u), *v = sim_xmalloc(sizeof(float) * d->n_gen);
        init_factors(d, env->seed, u, v);
        fl_p3_gather(d, kb, v, kept);
        free(u);
        free(v);
        return SIM_OK;
    }
    msgpack_unpacked m;
    msgpack_unpacked_init(&m);
    size_t off = 0;
    int rc = !nn_msgpack_next(&m, job->priv, job->priv_len, &off, NULL, NULL)
                     ? unpack_key(kept, fl_p3_kept(d, kb), &m.data, "v", "private state", err)
                     : sim_fail(err, SIM_EFORMAT, "private state", 0, 0, "not a msgpack map");
    msgpack_unpacked_destroy(&m);
    return rc;
}

/* Pick α on the held-out samples: m's live parameters become (1−α)·w0 + α·w1 for the best α of
 * the grid (the first best: ties go to the smaller α). Returns α. */
static double choose_alpha(const fl_env *env, nn_model *m, const float *w0, const float *w1,
                           const nn_dataset *d, const int32_t *val, int nv)
{
    int K = conf(env)->alphas;
    double best = -1, best_a = 1;
    for (int k = 0; k <= K; k++) {
        double al = k < K ? (K > 1 ? (double)k / (K - 1) : 1) : best_a; /* last: set the best */
        for (size_t r = 0; r < m->n_runs; r++)
            for (uint32_t j = 0; j < m->runs[r][1]; j++) {
                size_t o = m->runs[r][0] + j;
                m->params[o] = (float)((1 - al) * w0[o] + al * w1[o]);
            }
        if (k == K) break;
        double acc = nn_evaluate(m, d, val, nv, NULL);
        if (acc > best) best = acc, best_a = al;
    }
    return best_a;
}

static int pa3dfl_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                        sim_err *err)
{
    const fl_config *cfg = env->cfg;
    const nn_arch *a = env->arch;
    fl_p3_net net;
    int rc = fl_p3_net_build(&net, a, p_min_of(env), err);
    if (rc) return rc;
    const fl_p3_net *d = &net;
    int kb = client_blocks(env, d->nb, job->client), c = job->client;
    nn_model *m = fl_worker_model(w, env);
    narrow(m, kb, d->nb);
    res->up_bytes = msg_bytes(env, d, kb);
    if (env->cost_only) {
        cost_only(env, job, d, kb, m, res);
        return SIM_OK;
    }
    size_t nk = fl_p3_kept(d, kb), nf = a->layout.n_floats, nh = (size_t)d->K * d->d_pen + d->K;
    float *u0 = sim_xmalloc(sizeof(float) * d->n_u), *u = sim_xmalloc(sizeof(float) * d->n_u);
    float *du = sim_xcalloc(d->n_u, sizeof(float)), *kept = sim_xmalloc(sizeof(float) * nk);
    float *v0 = sim_xcalloc(d->n_gen, sizeof(float)), *v = sim_xcalloc(d->n_gen, sizeof(float));
    float *dv = sim_xcalloc(d->n_gen, sizeof(float)), *hg = sim_xmalloc(sizeof(float) * nh);
    int hn = conf(env)->hn;
    if ((rc = unpack_msg(job->down, job->down_len, d, kb, u0, hn ? kept : NULL, "down message",
                         err)) ||
        (!hn && (rc = own_personal(env, d, kb, job, kept, err))))
        goto done;
    fl_p3_scatter(d, kb, kept, v0);
    memcpy(u, u0, sizeof(float) * d->n_u);
    memcpy(v, v0, sizeof(float) * d->n_gen);
    global_head(d, env->seed, hg);
    memset(m->params, 0, sizeof(float) * nf); /* the decomposed layers' biases stay 0 */
    set_head(a, d, m->params, hg);

    /* train on all but the held-out samples (a view of the partition with fewer of them) */
    int n = env->part->n[c], nv = val_count(env, n);
    int *counts = sim_xmalloc(sizeof(int) * (size_t)env->part->n_clients);
    memcpy(counts, env->part->n, sizeof(int) * (size_t)env->part->n_clients);
    counts[c] = n - nv;
    nn_partition part = *env->part;
    part.n = counts;
    fl_env tenv = *env;
    tenv.part = &part;
    double extra = 0, lambda = conf(env)->lambda;
    int dk = d->d_pen / d->nb * kb, K = d->K;
    float *hl = v + d->n_v, *dhl = dv + d->n_v;
    float *logits = sim_xmalloc(sizeof(float) * 2 * (size_t)cfg->batch_size * K);
    float *dlogits = logits + (size_t)cfg->batch_size * K;
    float *take = sim_xmalloc(sizeof(float) * fl_p3_take_floats(d, m->max_batch));
    fl_loop L;
    int looped = fl_loop_start(&L, &tenv, job, m);
    for (int nb; looped && (nb = fl_loop_next(&L));) {
        fl_p3_compose(d, a, kb, u, v, m->params);
        fl_p3_take(d, m, kb, nb, take);
        nn_model_zero_grad(m);
        L.loss += nn_model_forward(m, L.b.x, L.b.y, nb, 1); /* L_g, through H_g */
        nn_model_backward(m);
        /* L_c: the local head on the detached features */
        const float *feat = nn_model_features(m);
        nn_linear_forward(logits, feat, hl, d->d_pen, hl + (size_t)K * d->d_pen, nb, dk, K);
        nn_softmax_xent(dlogits, logits, L.b.y, nb, K);
        nn_linear_backward(NULL, dhl, d->d_pen, dhl + (size_t)K * d->d_pen, dlogits, feat, hl,
                           d->d_pen, nb, dk, K);
        memset(du, 0, sizeof(float) * d->n_u);
        fl_p3_compose_backward(d, m, kb, nb, u, v, du, dv);
        if (lambda > 0) fl_p3_orth(d, lambda, u, du);
        extra += extra_step_flops(d, kb, nb, lambda);
        double lr = L.lr; /* algorithm.clip: on the joint norm of u's and the kept v's gradient */
        if (cfg->clip > 0) {
            double norm = sqrt(nn_sumsq(du, d->n_u) + fl_p3_kept_sumsq(d, kb, dv));
            if (norm > cfg->clip) lr *= cfg->clip / norm;
        }
        for (size_t j = 0; j < d->n_u; j++)
            u[j] -= (float)lr * du[j];
        fl_p3_sgd_kept(d, kb, (float)lr, v, dv);
    }
    fl_p3_take(d, m, kb, 0, NULL);
    free(take);
    free(logits);
    free(counts);

    /* the test model: M_1 (trained, local head) against M_0 (received, H_g) */
    float *w1 = sim_xmalloc(sizeof(float) * nf), *w0 = sim_xmalloc(sizeof(float) * nf);
    extra += fl_p3_compose(d, a, kb, u, v, m->params);
    set_head(a, d, m->params, hl);
    memcpy(w1, m->params, sizeof(float) * nf);
    double alpha = 1;
    const nn_dataset *vd;
    int na;
    const int32_t *vi = alpha_samples(env, c, &vd, &na);
    if (na > 0) {
        extra += fl_p3_compose(d, a, kb, u0, v0, m->params);
        set_head(a, d, m->params, hg);
        memcpy(w0, m->params, sizeof(float) * nf);
        alpha = choose_alpha(env, m, w0, w1, vd, vi, na);
    }
    if (looped) fl_loop_finish(&L, res);
    res->cost.flops += extra;

    size_t nl = live_floats(m);
    float *live = sim_xmalloc(sizeof(float) * nl);
    copy_live(m, live, 0);
    fl_p3_gather(d, kb, v, kept);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &res->priv, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, hn ? 2 : 3);
    nn_pack_str(&pk, "alpha");
    msgpack_pack_double(&pk, alpha);
    nn_pack_str(&pk, "w");
    nn_pack_f32(&pk, live, nl);
    if (!hn) { /* the personal part stays here */
        nn_pack_str(&pk, "v");
        nn_pack_f32(&pk, kept, nk);
    }
    free(live);
    free(w0);
    free(w1);

    pack_msg(&res->up, d, kb, u, hn ? kept : NULL);
    res->up_bytes = res->up.size;
done:
    free(u0);
    free(u);
    free(du);
    free(kept);
    free(v0);
    free(v);
    free(dv);
    free(hg);
    return rc;
}

const fl_algo fl_pa3dfl = {
        .version = FL_ALGO_VERSION,
        .name = "pa3dfl",
        .summary = "Pa3dFL: general factors averaged, personal ones from a hyper-network",
        .doc = "every layer factorized into a general part averaged over all clients and personal "
               "blocks, as many as the client's capacity affords, generated by a server-side "
               "hyper-network",
        .flags = FL_PLAIN_SGD | FL_FIXED_COST,
        .section = &fl_pa3dfl_section,
        .streams = STREAMS,
        .server_new = pa3dfl_new,
        .server_free = pa3dfl_free,
        .job_down = pa3dfl_down,
        .client_train = pa3dfl_train,
        .server_absorb = pa3dfl_absorb,
        .server_aggregate = pa3dfl_aggregate,
        .eval_params = pa3dfl_eval,
        .server_save = pa3dfl_save,
        .server_load = pa3dfl_load,
        .client_width = pa3dfl_width,
        .no_compress = "Pa3dFL's messages are its factors (u and the client's kept blocks of v), "
                       "whose changes its server's hyper-network learns from, and compressing them "
                       "is not implemented",
};
