/* algos/split.c -- the personalized baselines that split the model into a shared part, averaged
 * by FedAvg, and a personal part that never leaves the client (spec 001 §5):
 *   FedPer (Arivazhagan et al.): shared body, personal head (the last layer);
 *   LG-FedAvg (Liang et al.): personal body (the local representation), shared head: the
 *   convolutions stay local and every linear layer is shared, or, in a model without
 *   convolutions, every layer but the last stays local;
 *   FedRep (Collins et al., ICML 2021): FedPer's split, trained in two phases: the local epochs
 *   on the head alone with the body frozen (forward passes and the head's backward: a frozen
 *   body costs no backward, so a job costs ≈ 4/3 of FedPer's, spec 001's 131–135%), then the
 *   local epochs on the body with the head frozen. Its head epochs draw their batches from a
 *   stream of their own;
 *   pFedHN (Shamsian et al., ICML 2021) as FLGo runs it (the pFedHN of Pa3dFL's Table 1):
 *   FedPer's split, the shared part generated for each client by a hyper-network on the server
 *   from the client's embedding (embedding → encoder of `layers` + 1 linear layers, ReLU between
 *   → a linear generator; FLGo has one generator per tensor, which is the same map). The client
 *   trains what it receives with its own head and uploads the trained shared part; the server
 *   steps φ (plain SGD, `pfedhn.lr`, the mean gradient's norm clipped at `pfedhn.clip`) along
 *   the mean over the round's replies of ∂⟨generated − trained, generated⟩/∂φ, the pFedHN rule.
 *   Evaluated, as the paper does, on the shared part generated for the client now with its head;
 *   `pfedhn.eval: trained` evaluates the model its last job left, as FLGo's logger does.
 * A client trains its whole model (the received shared tensors and its own personal ones; FedRep
 * as above) for its local epochs and uploads the shared tensors, whose sample-weighted mean becomes
 * the global part (pFedHN: see above); its personal tensors are its private state (pFedHN's: its
 * whole model), starting from the common initial model. Messages are {"shared": float32 of the
 * shared tensors in layout order}.
 *
 * Under `compression:` a message is instead the compressed message of the shared tensors'
 * values (algos/compress.c, a slice of the layout): the download the global shared part
 * (pFedHN's: the one generated for the client), the upload its change, trained − received (what
 * the client decoded), with error feedback's residual over the shared part (after the client's
 * own private state). The server then adds the weighted mean change to its shared part where the
 * dense upload's weighted mean replaces it: the same model under sync federation and a dense
 * download (weight = mass), up to rounding. pFedHN's gradient takes received − trained, the
 * negated change, for generated − trained: the same floats when both ways are dense (a − b is
 * −(b − a) exactly), and under async the model the client was sent rather than the one φ
 * generates when its reply arrives.
 */
#include "algos/algo.h"

#include "nn/layers.h"
#include "nn/pack.h"
#include "sim/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* pFedHN's settings (`algorithm.pfedhn:`; FLGo's defaults, which Pa3dFL's Table 1 ran): the
 * hyper-network embedding → `layers` + 1 linear layers (ReLU between) of width `hidden` → the
 * generated shared part, its SGD step and gradient-norm clip, and the model evaluated. */
#define PFEDHN_MAX_LAYERS 8
typedef struct pfedhn_config {
    int embed;        /* d_e (the scenario's default: 1 + clients/4, at most 4096) */
    int hidden;       /* d_h */
    int layers;       /* hidden layers after the first, at most PFEDHN_MAX_LAYERS */
    double lr;        /* the hyper-network's SGD step */
    double clip;      /* its gradient-norm clip (0: none) */
    int eval_trained; /* evaluate the model the client's last job left (FLGo's logger) instead of
                         the one generated for it now */
} pfedhn_config;

static const char *const PFEDHN_EVAL[] = {"generated", "trained", NULL};

/* FLGo's 1 + clients/4, at most the key's bound (where it refused populations over 16,380) */
static void embed_default(const sim_key_ctx *ctx, char *buf, size_t n)
{
    int e = 1 + ctx->clients / 4;
    snprintf(buf, n, "%d", e < 4096 ? e : 4096);
}

#define K(field) .offset = offsetof(pfedhn_config, field)
static const sim_key PFEDHN_KEYS[] = {
        {"embed", SIM_KEY_INT, K(embed), .dflt = "1 + clients/4, at most 4096",
         .dflt_fn = embed_default, .lo = 1, .hi = 4096, .doc = "the embedding width"},
        {"hidden", SIM_KEY_INT, K(hidden), .dflt = "100", .lo = 1, .hi = 4096,
         .doc = "the encoder's width"},
        {"layers", SIM_KEY_INT, K(layers), .dflt = "1", .lo = 0, .hi = PFEDHN_MAX_LAYERS,
         .doc = "the encoder's (ReLU, linear) pairs after its first linear layer"},
        {"lr", SIM_KEY_DOUBLE, K(lr), .dflt = "0.1", .lo = 0, .hi = 1e3,
         .doc = "the hyper-network's plain SGD step on the mean over the round's replies of the "
                "pFedHN gradient (generated − trained body through the generator)"},
        {"clip", SIM_KEY_DOUBLE, K(clip), .dflt = "50", .lo = 0, .hi = 1e9,
         .doc = "that gradient's norm clipped to this (0: none)"},
        {"eval", SIM_KEY_CHOICE, K(eval_trained), .dflt = "generated", .words = PFEDHN_EVAL,
         .doc = "`generated`: a client is evaluated on the body generated for it now with its head "
                "(the pFedHN paper); `trained`: on the model its last job left (FLGo's logger)"},
        {0},
};
#undef K

const fl_section fl_pfedhn_section = {
        .name = "pfedhn",
        .keys = PFEDHN_KEYS,
        .size = sizeof(pfedhn_config),
        .doc = "pFedHN; checked for the others; defaults FLGo's, which Pa3dFL's Table 1 ran. The "
               "encoder "
               "is a linear layer from the embedding, then `layers` × (ReLU, linear) at width "
               "`hidden`; a "
               "linear generator maps its output to the body (every tensor but the last layer's). "
               "A job "
               "costs FedPer's FLOPs; both messages carry the body.",
};

/* pFedHN's hyper-network initialization (index 0), and each client's initial embedding (index:
 * the client), drawn when the client is first encoded */
enum { RNG_PFEDHN = 13 };
static const fl_stream STREAMS[] = {{"pfedhn.init", RNG_PFEDHN}, {"pfedhn.embed", 0}, {0}};

typedef struct split_server {
    const fl_env *env; /* borrowed */
    uint8_t personal[NN_MAX_TENSORS];
    uint8_t *shared;             /* n_floats: 1 in the shared tensors (a compressed slice) */
    size_t n_shared, n_personal; /* floats in each part */
    float *global;               /* n_floats: the shared part (and the initial personal one) */
    float *scratch;              /* n_floats: an unpacked upload (pFedHN: a generated part) */
    double *acc;                 /* n_floats: Σ weight · value */
    double mass;
    /* Σ weight: what a mean of models (dense uploads) is normalized by, so async staleness
     * weights (below the masses) shift the mean toward fresher models instead of shrinking it;
     * a mean of changes (compressed uploads) is normalized by mass, as FedAvg's. Zero at every
     * checkpoint (absorb and aggregate run in one event), so not saved. */
    double wsum;
} split_server;

/* Which tensors are personal under FedPer (head 1) or LG-FedAvg (head 0). */
static void split_parts(uint8_t *personal, const nn_arch *a, int head)
{
    int last = -1, convs = 0;
    memset(personal, 0, NN_MAX_TENSORS);
    for (int i = 0; i < a->n; i++) {
        if (a->l[i].op == NN_LINEAR || a->l[i].op == NN_CONV) last = i;
        convs += a->l[i].op == NN_CONV;
    }
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        if (l->op != NN_LINEAR && l->op != NN_CONV) continue;
        int mine = head ? i == last : convs ? l->op == NN_CONV : i != last;
        if (l->wt >= 0) personal[l->wt] = (uint8_t)mine;
        if (l->bt >= 0) personal[l->bt] = (uint8_t)mine;
    }
}

/* Gather (or scatter back, with put) the tensors of one part (personal 0: shared) of w into v. */
static size_t part_copy(float *w, float *v, const nn_layout *L, const uint8_t *personal, int which,
                        int put)
{
    size_t k = 0;
    for (int t = 0; t < L->n; t++) {
        if (personal[t] != which) continue;
        size_t n = (size_t)L->t[t].rows * L->t[t].cols;
        if (put)
            memcpy(w + L->t[t].off, v + k, n * sizeof(float));
        else
            memcpy(v + k, w + L->t[t].off, n * sizeof(float));
        k += n;
    }
    return k;
}

static size_t part_size(const nn_layout *L, const uint8_t *personal, int which)
{
    size_t k = 0;
    for (int t = 0; t < L->n; t++)
        k += personal[t] == which ? (size_t)L->t[t].rows * L->t[t].cols : 0;
    return k;
}

/* A fresh n_floats map of the shared tensors' parameters (fl_slice.keep). */
static uint8_t *shared_map(const nn_layout *L, const uint8_t *personal)
{
    uint8_t *keep = sim_xcalloc(L->n_floats + 1, 1);
    for (int t = 0; t < L->n; t++)
        if (!personal[t]) memset(keep + L->t[t].off, 1, (size_t)L->t[t].rows * L->t[t].cols);
    return keep;
}

/* {key: n floats of v} */
static void pack_vec(msgpack_sbuffer *sb, const char *key, const float *v, size_t n)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    nn_pack_str(&pk, key);
    nn_pack_f32(&pk, v, n);
}

static int unpack_vec(float *v, size_t n, const void *buf, size_t len, const char *key,
                      const char *what, sim_err *err)
{
    size_t off = 0;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    const msgpack_object *o = NULL;
    int rc = buf && !nn_msgpack_next(&u, buf, len, &off, NULL, NULL) &&
                             (o = nn_map_get(&u.data, key))
                     ? nn_unpack_f32(v, n, o, what, err)
                     : sim_fail(err, SIM_EFORMAT, what, 0, 0, "no \"%s\"", key);
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* {key: the tensors of one part (personal 0: shared) of w} */
static void pack_part(msgpack_sbuffer *sb, const nn_layout *L, const uint8_t *personal, float *w,
                      const char *key, int which)
{
    size_t n = part_size(L, personal, which);
    float *v = sim_xmalloc(sizeof(float) * (n + 1));
    part_copy(w, v, L, personal, which, 0);
    pack_vec(sb, key, v, n);
    free(v);
}

static int unpack_part(float *w, const nn_layout *L, const uint8_t *personal, const void *buf,
                       size_t len, const char *key, int which, const char *what, sim_err *err)
{
    size_t n = part_size(L, personal, which);
    float *v = sim_xmalloc(sizeof(float) * (n + 1));
    int rc = unpack_vec(v, n, buf, len, key, what, err);
    if (!rc) part_copy(w, v, L, personal, which, 1);
    free(v);
    return rc;
}

static void split_init(split_server *s, const fl_env *env, int head)
{
    const nn_layout *L = &env->arch->layout;
    s->env = env;
    split_parts(s->personal, env->arch, head);
    s->n_shared = part_size(L, s->personal, 0);
    s->n_personal = part_size(L, s->personal, 1);
    s->shared = shared_map(L, s->personal);
    s->global = fl_initial_params(env);
    s->scratch = sim_xcalloc(L->n_floats, sizeof(float));
    s->acc = sim_xcalloc(L->n_floats, sizeof(double));
}

static void *split_new_with(const fl_env *env, int head)
{
    split_server *s = sim_xcalloc(1, sizeof *s);
    split_init(s, env, head);
    return s;
}

static void *fedper_new(const fl_env *env, sim_err *err)
{
    (void)err;
    return split_new_with(env, 1);
}

static void *lg_new(const fl_env *env, sim_err *err)
{
    (void)err;
    return split_new_with(env, 0);
}

static void split_release(split_server *s)
{
    free(s->shared);
    free(s->global);
    free(s->scratch);
    free(s->acc);
}

static void split_free(void *p)
{
    if (!p) return;
    split_release(p);
    free(p);
}

static size_t split_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    split_server *s = p;
    const nn_comp *c = fl_comp_down(s->env);
    if (!out) return c ? nn_comp_bytes(c, s->n_shared) : 1 + 7 + nn_bin_bytes(4 * s->n_shared);
    size_t before = out->size;
    fl_slice sl = {s->shared, s->shared};
    if (c)
        fl_down_encode(s->env, s->global, &sl, client, round, 0, out);
    else
        pack_part(out, &s->env->arch->layout, s->personal, s->global, "shared", 0);
    return out->size - before;
}

/* FedRep's body epochs: the head's gradient and momentum are dropped, so it does not move, and
 * the weight decay SGD would add to every tensor goes to the body's alone. */
typedef struct frozen_head {
    const uint8_t *personal;
    double weight_decay;
} frozen_head;

static void freeze_head(nn_model *m, void *ctx)
{
    const frozen_head *f = ctx;
    const nn_layout *L = &m->arch.layout;
    for (int t = 0; t < L->n; t++) {
        size_t off = L->t[t].off, n = (size_t)L->t[t].rows * L->t[t].cols;
        if (f->personal[t]) {
            memset(m->grads + off, 0, sizeof(float) * n);
            memset(m->mom + off, 0, sizeof(float) * n);
        } else if (L->t[t].trainable && f->weight_decay > 0) {
            for (size_t j = off; j < off + n; j++)
                m->grads[j] += (float)f->weight_decay * m->params[j];
        }
    }
}

/* FedRep's head epochs, then its body epochs. */
static void fedrep_sgd(const fl_env *env, const fl_job *job, nn_model *m, const uint8_t *personal,
                       fl_result *res)
{
    const fl_config *cfg = env->cfg;
    int n = env->part->n[job->client], B = cfg->batch_size;
    fl_job hj = *job;
    hj.stream |= (uint64_t)1 << 63; /* its own batches: client ids stay below 2^31 */
    if (env->cost_only) {
        int64_t steps = n > 0 ? fl_job_steps(env, n) : 0;
        for (int64_t st = 0; st < steps; st++) {
            int nb = fl_job_batch(st, n, B);
            nn_cost c;
            nn_model_forward_cost(m, nb, &c);
            res->cost.flops += c.flops + fl_head_step_flops(&m->arch, nb);
            res->cost.bytes += c.bytes;
            res->cost.samples += nb;
        }
        fl_count_steps(res, steps);
    } else {
        fl_loop L;
        if (fl_loop_start(&L, env, &hj, m)) {
            nn_sgd opt = {(float)L.lr, (float)cfg->momentum, (float)cfg->weight_decay, 0};
            memset(m->mom, 0, sizeof(float) * m->arch.layout.n_floats);
            for (int nb; (nb = fl_loop_next(&L));) {
                nn_model_forward(m, L.b.x, L.b.y, nb, 1);
                fl_head_step(m, L.b.y, nb, &opt);
            }
            fl_loop_finish(&L, res);
        }
    }
    frozen_head f = {personal, cfg->weight_decay};
    fl_local_sgd_with(env, job, m, 0, freeze_head, &f, res);
}

/* A job: the received shared part and the client's personal one (with whole, its private state
 * is its whole model as the last job left it, pFedHN's; else the personal part alone). */
static int split_train_with(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                            int head, int rep, int whole, sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    const nn_layout *L = &env->arch->layout;
    const nn_comp *cu = fl_comp_up(env), *cd = fl_comp_down(env);
    uint8_t personal[NN_MAX_TENSORS];
    split_parts(personal, env->arch, head);
    if (env->cost_only) {
        if (rep)
            fedrep_sgd(env, job, m, personal, res);
        else
            fl_local_sgd(env, job, m, 0, NULL, res);
        size_t n = part_size(L, personal, 0);
        res->up_bytes = cu ? nn_comp_bytes(cu, n) : 1 + 7 + nn_bin_bytes(4 * n);
        return SIM_OK;
    }
    uint8_t *shared = cu || cd ? shared_map(L, personal) : NULL;
    fl_slice sl = {shared, shared};
    fl_init_params(m, env); /* a first job's personal part */
    int rc = !job->priv ? SIM_OK
             : whole    ? nn_unpack_params(m->params, env->arch, job->priv, job->priv_len,
                                           "private state", err)
                     : unpack_part(m->params, L, personal, job->priv, job->priv_len, "personal", 1,
                                   "private state", err);
    if (!rc && cd)
        rc = fl_comp_decode_buf(env, m->params, &sl, job->down, job->down_len, "down message", err);
    else if (!rc)
        rc = unpack_part(m->params, L, personal, job->down, job->down_len, "shared", 0,
                         "down message", err);
    if (!rc && cu) /* what was received, for the change the upload is */
        memcpy(w->ref, m->params, L->n_floats * sizeof(float));
    if (!rc && rep)
        fedrep_sgd(env, job, m, personal, res);
    else if (!rc)
        fl_local_sgd(env, job, m, 0, NULL, res);
    if (!rc && whole) /* the private state first: fl_up_encode appends a residual after it */
        nn_pack_params(&res->priv, env->arch, m->params);
    else if (!rc)
        pack_part(&res->priv, L, personal, m->params, "personal", 1);
    if (!rc && cu) {
        for (size_t j = 0; j < L->n_floats; j++) /* the change, in place in ref */
            w->ref[j] = m->params[j] - w->ref[j];
        rc = fl_up_encode(env, job, w->ref, &sl, 0, res, err);
    } else if (!rc) {
        pack_part(&res->up, L, personal, m->params, "shared", 0);
    }
    res->up_bytes = res->up.size;
    free(shared);
    return rc;
}

static int fedper_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                        sim_err *err)
{
    return split_train_with(env, job, w, res, 1, 0, 0, err);
}

static int fedrep_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                        sim_err *err)
{
    return split_train_with(env, job, w, res, 1, 1, 0, err);
}

static int lg_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                    sim_err *err)
{
    return split_train_with(env, job, w, res, 0, 0, 0, err);
}

static int split_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                        double mass, sim_err *err)
{
    split_server *s = p;
    const nn_layout *L = &s->env->arch->layout;
    (void)client;
    fl_slice sl = {s->shared, s->shared};
    int rc = fl_comp_up(s->env)
                     ? fl_comp_decode_buf(s->env, s->scratch, &sl, up, len, "up message", err)
                     : unpack_part(s->scratch, L, s->personal, up, len, "shared", 0, "up message",
                                   err);
    if (rc) return rc;
    for (int t = 0; t < L->n; t++)
        for (size_t j = L->t[t].off;
             !s->personal[t] && j < L->t[t].off + (size_t)L->t[t].rows * L->t[t].cols; j++)
            s->acc[j] += weight * (double)s->scratch[j];
    s->mass += mass;
    s->wsum += weight;
    return SIM_OK;
}

static void split_aggregate(void *p)
{
    split_server *s = p;
    const nn_layout *L = &s->env->arch->layout;
    int delta = fl_comp_up(s->env) != NULL; /* compressed uploads are changes */
    for (int t = 0; s->mass > 0 && s->wsum > 0 && t < L->n; t++)
        for (size_t j = L->t[t].off;
             !s->personal[t] && j < L->t[t].off + (size_t)L->t[t].rows * L->t[t].cols; j++)
            s->global[j] = delta ? s->global[j] + (float)(s->acc[j] / s->mass)
                                 : (float)(s->acc[j] / s->wsum);
    memset(s->acc, 0, L->n_floats * sizeof(double));
    s->mass = s->wsum = 0;
}

/* The client's model: the global shared part and its personal part (the initial one before its
 * first job); client −1, the shared part with the initial personal one. */
static double split_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    split_server *s = p;
    const nn_layout *L = &s->env->arch->layout;
    nn_model_reset_narrowing(m);
    memcpy(m->params, s->global, L->n_floats * sizeof(float));
    if (client >= 0 && priv)
        unpack_part(m->params, L, s->personal, priv, priv_len, "personal", 1, "private state",
                    NULL);
    return 1.0;
}

/* acc and mass are zero at every point the engine checkpoints, but saving them keeps this exact
 * anywhere. */
static void split_save(void *p, msgpack_packer *pk)
{
    split_server *s = p;
    fl_save_sums(pk, s->global, s->acc, s->mass, s->env->arch->layout.n_floats);
}

static int split_load(void *p, const msgpack_object *o, sim_err *err)
{
    split_server *s = p;
    return fl_load_sums(o, s->global, s->acc, &s->mass, s->env->arch->layout.n_floats,
                        s->env->cfg->name, err);
}

/* pFedHN: FedPer's split, whose shared part a hyper-network on the server generates for each
 * client from the client's embedding (d_e floats). The embeddings are the server's per-client
 * rows (fl_rows: out of core with the clients' states, so the server does not grow with the
 * population); a client that has none yet starts from N(0, 1) draws of its own stream. φ is
 * the rest, one flat array: each encoder layer's W (d_h × its inputs) and b (d_h) | the
 * generator's W (shared floats × d_h) and b. */
typedef struct pfedhn {
    split_server sp; /* sp.global: the initial model, whose head a client starts from */
    int de, dh, nl;  /* embedding and hidden widths, encoder layers */
    size_t w_off[PFEDHN_MAX_LAYERS + 1], b_off[PFEDHN_MAX_LAYERS + 1], gw, gb, n_phi;
    float *phi;
    double *grad; /* n_phi: Σ over the round's replies of each one's gradient */
    double got;   /* replies absorbed since the last aggregation */
    float *emb;   /* de: the embedding of the last client encoded */
    /* the embeddings' part of grad: the clients absorbed since the last aggregation, in the
     * order first absorbed, and each one's Σ gradient (de doubles) */
    int32_t *tc;
    double *tg;
    int nt, cap_t;
    double *z;   /* nl × dh: the last encoding's pre-activations (its output is the last row) */
    double *dz;  /* 2 × dh: backward scratch */
    float *gen;  /* n_shared: a generated shared part */
    double *out; /* n_shared: the generator's output, or the gradient it gets */
} pfedhn;

/* Client i's embedding into e: its row, or its initial draws. */
static void load_embedding(const pfedhn *h, int32_t i, float *e)
{
    if (fl_row_get(h->sp.env, i, e, sizeof(float) * (size_t)h->de)) return;
    sim_rng r;
    sim_rng_seed(&r, h->sp.env->seed, fl_stream_id(&STREAMS[1]), (uint64_t)i);
    for (int k = 0; k < h->de; k++)
        e[k] = (float)sim_rng_normal(&r);
}

/* An input of encoder layer l for the last encoded client: its embedding, or the ReLU of the
 * layer before (into x, dh). */
static const double *enc_input(const pfedhn *h, int l, double *x)
{
    if (l == 0) {
        for (int k = 0; k < h->de; k++)
            x[k] = h->emb[k];
        return x;
    }
    nn_relu64_forward(x, h->z + (size_t)(l - 1) * h->dh, h->dh);
    return x;
}

/* Encode client i (h->z); its generated shared part into h->gen. nn/layers.h's sums in double:
 * small next to a round's training, and the same floats whatever the BLAS threads. */
static void hn_generate(pfedhn *h, int i)
{
    double x[4096];
    load_embedding(h, i, h->emb);
    for (int l = 0; l < h->nl; l++)
        nn_linear64_forward(h->z + (size_t)l * h->dh, enc_input(h, l, x), h->phi + h->w_off[l],
                            h->phi + h->b_off[l], 1, l ? h->dh : h->de, h->dh);
    const double *e = h->z + (size_t)(h->nl - 1) * h->dh;
    int n = (int)h->sp.n_shared;
    nn_linear64_forward(h->out, e, h->phi + h->gw, h->phi + h->gb, 1, h->dh, n);
    for (int j = 0; j < n; j++)
        h->gen[j] = (float)h->out[j];
}

/* Client i's Σ gradient of its embedding (a zero one when it is new since the aggregation). */
static double *embedding_grad(pfedhn *h, int32_t i)
{
    for (int k = 0; k < h->nt; k++)
        if (h->tc[k] == i) return h->tg + (size_t)k * h->de;
    if (h->nt == h->cap_t) {
        h->cap_t = h->cap_t ? 2 * h->cap_t : 16;
        h->tc = sim_xrealloc(h->tc, sizeof(int32_t) * (size_t)h->cap_t);
        h->tg = sim_xrealloc(h->tg, sizeof(double) * (size_t)h->cap_t * (size_t)h->de);
    }
    h->tc[h->nt] = i;
    double *g = h->tg + (size_t)h->nt++ * h->de;
    memset(g, 0, sizeof(double) * (size_t)h->de);
    return g;
}

/* grad += ∂⟨g, gen(i)⟩/∂φ and client i's embedding's, with h->z and h->emb client i's
 * encoding. */
static void hn_backward(pfedhn *h, int i, const float *g)
{
    double x[4096], *dz = h->dz, *da = h->dz + h->dh;
    const double *e = h->z + (size_t)(h->nl - 1) * h->dh;
    int n = (int)h->sp.n_shared;
    for (int j = 0; j < n; j++)
        h->out[j] = g[j];
    nn_linear64_backward(NULL, h->grad + h->gw, h->grad + h->gb, h->out, e, h->phi + h->gw, 1,
                         h->dh, n);
    /* the generator's input gradient stays here: its terms g·W are float products (rounded to
     * float, then summed in double), where nn_linear64_backward multiplies in double */
    memset(dz, 0, sizeof(double) * (size_t)h->dh);
    for (int j = 0; j < n; j++) {
        const float *W = h->phi + h->gw + (size_t)j * h->dh;
        for (int k = 0; k < h->dh; k++)
            dz[k] += g[j] * W[k];
    }
    for (int l = h->nl - 1; l >= 0; l--) {
        int in = l ? h->dh : h->de;
        const double *a = enc_input(h, l, x);
        nn_linear64_backward(da, h->grad + h->w_off[l], h->grad + h->b_off[l], dz, a,
                             h->phi + h->w_off[l], 1, in, h->dh);
        if (l == 0) {
            double *ge = embedding_grad(h, i);
            for (int k = 0; k < h->de; k++)
                ge[k] += da[k];
        } else {
            nn_relu64_backward(dz, da, a, h->dh); /* a: layer l − 1's ReLU output */
        }
    }
}

/* PyTorch's initialization, as FLGo's hyper-network has it: E ~ N(0, 1) (load_embedding), every
 * linear layer's weights and biases U(±1/√its inputs). */
static void *pfedhn_new(const fl_env *env, sim_err *err)
{
    const pfedhn_config *c = env->cfg->own;
    if (c->embed > 4096 || c->hidden > 4096) {
        sim_fail(err, SIM_EINVAL, "algorithm.pfedhn", 0, 0, "embed and hidden are at most 4096");
        return NULL;
    }
    pfedhn *h = sim_xcalloc(1, sizeof *h);
    split_init(&h->sp, env, 1);
    h->de = c->embed, h->dh = c->hidden, h->nl = 1 + c->layers;
    size_t at = 0;
    for (int l = 0; l < h->nl; l++) {
        h->w_off[l] = at, at += (size_t)h->dh * (l ? h->dh : h->de);
        h->b_off[l] = at, at += (size_t)h->dh;
    }
    h->gw = at, at += h->sp.n_shared * (size_t)h->dh;
    h->gb = at, at += h->sp.n_shared;
    h->n_phi = at;
    h->phi = sim_xmalloc(sizeof(float) * h->n_phi);
    h->grad = sim_xcalloc(h->n_phi, sizeof(double));
    h->z = sim_xcalloc((size_t)h->nl * h->dh, sizeof(double));
    h->dz = sim_xcalloc(2 * (size_t)(h->dh > h->de ? h->dh : h->de), sizeof(double));
    h->gen = sim_xcalloc(h->sp.n_shared + 1, sizeof(float));
    h->out = sim_xcalloc(h->sp.n_shared + 1, sizeof(double));
    h->emb = sim_xcalloc((size_t)h->de, sizeof(float));
    sim_rng r;
    sim_rng_seed(&r, env->seed, RNG_PFEDHN, 0);
    for (int l = 0; l <= h->nl; l++) { /* l = nl: the generator */
        size_t w0 = l < h->nl ? h->w_off[l] : h->gw,
               b1 = l < h->nl ? h->b_off[l] + h->dh : h->n_phi;
        double bound = 1 / sqrt(l == 0 ? h->de : h->dh);
        for (size_t j = w0; j < b1; j++)
            h->phi[j] = (float)(bound * (2 * sim_rng_uniform(&r) - 1));
    }
    return h;
}

static void pfedhn_free(void *p)
{
    pfedhn *h = p;
    if (!h) return;
    split_release(&h->sp);
    free(h->phi);
    free(h->grad);
    free(h->z);
    free(h->dz);
    free(h->gen);
    free(h->out);
    free(h->emb);
    free(h->tc);
    free(h->tg);
    free(h);
}

static size_t pfedhn_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    pfedhn *h = p;
    if (!out) return split_down(&h->sp, client, round, NULL);
    size_t before = out->size;
    hn_generate(h, client);
    if (fl_comp_down(h->sp.env)) { /* the generated part at its place in the layout */
        fl_slice sl = {h->sp.shared, h->sp.shared};
        part_copy(h->sp.scratch, h->gen, &h->sp.env->arch->layout, h->sp.personal, 0, 1);
        fl_down_encode(h->sp.env, h->sp.scratch, &sl, client, round, 0, out);
    } else {
        pack_vec(out, "shared", h->gen, h->sp.n_shared);
    }
    return out->size - before;
}

static int pfedhn_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                        sim_err *err)
{
    return split_train_with(env, job, w, res, 1, 0, 1, err);
}

/* The gradient needs what the client was sent, which φ (unchanged until aggregation in sync
 * rounds) regenerates; under async federation it is taken at φ as the reply finds it. Every
 * reply counts alike (FLGo's mean over the round's models). */
static int pfedhn_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                         double mass, sim_err *err)
{
    pfedhn *h = p;
    (void)weight, (void)mass;
    size_t n = h->sp.n_shared;
    float *g = sim_xmalloc(sizeof(float) * (n + 1));
    fl_slice sl = {h->sp.shared, h->sp.shared};
    int delta = fl_comp_up(h->sp.env) != NULL; /* trained − received */
    int rc = delta ? fl_comp_decode_buf(h->sp.env, h->sp.scratch, &sl, up, len, "up message", err)
                   : unpack_vec(g, n, up, len, "shared", "up message", err);
    if (!rc && delta) part_copy(h->sp.scratch, g, &h->sp.env->arch->layout, h->sp.personal, 0, 0);
    if (!rc) {
        hn_generate(h, client);
        for (size_t j = 0; j < n; j++) /* generated − trained */
            g[j] = delta ? -g[j] : h->gen[j] - g[j];
        hn_backward(h, client, g);
        h->got++;
    }
    free(g);
    return rc;
}

/* One SGD step on the mean gradient, its norm clipped. The norm sums the embeddings' squares
 * first, by client id, then φ's: the order of one flat array of all embeddings then φ, where
 * an embedding without a gradient adds nothing. */
static void pfedhn_aggregate(void *p)
{
    pfedhn *h = p;
    const pfedhn_config *c = h->sp.env->cfg->own;
    if (h->got > 0) {
        int *ord = sim_xmalloc(sizeof(int) * (size_t)(h->nt + 1));
        for (int k = 0; k < h->nt; k++)
            ord[k] = k;
        for (int k = 1; k < h->nt; k++) /* insertion sort by client id: a round's clients */
            for (int j = k; j > 0 && h->tc[ord[j - 1]] > h->tc[ord[j]]; j--) {
                int t = ord[j];
                ord[j] = ord[j - 1], ord[j - 1] = t;
            }
        double nrm = 0, sc = 1 / h->got;
        for (int k = 0; k < h->nt; k++)
            for (int j = 0; j < h->de; j++) {
                double v = h->tg[(size_t)ord[k] * h->de + j];
                nrm += v * v;
            }
        for (size_t j = 0; j < h->n_phi; j++)
            nrm += h->grad[j] * h->grad[j];
        nrm = sqrt(nrm) * sc;
        if (c->clip > 0 && nrm > c->clip) sc *= c->clip / nrm;
        for (int k = 0; k < h->nt; k++) {
            const double *ge = h->tg + (size_t)k * h->de;
            load_embedding(h, h->tc[k], h->emb);
            for (int j = 0; j < h->de; j++)
                h->emb[j] -= (float)(c->lr * sc * ge[j]);
            fl_row_put(h->sp.env, h->tc[k], h->emb, sizeof(float) * (size_t)h->de);
        }
        for (size_t j = 0; j < h->n_phi; j++)
            h->phi[j] -= (float)(c->lr * sc * h->grad[j]);
        free(ord);
    }
    memset(h->grad, 0, sizeof(double) * h->n_phi);
    h->got = 0;
    h->nt = 0;
}

/* The client's model: the shared part generated for it now with the head its last job left (the
 * initial head before its first job), or, with eval: trained, that job's whole model. */
static double pfedhn_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    pfedhn *h = p;
    const nn_arch *a = h->sp.env->arch;
    nn_model_reset_narrowing(m);
    int kept = client >= 0 && priv &&
               nn_unpack_params(m->params, a, priv, priv_len, "private state", NULL) == SIM_OK;
    if (kept && ((const pfedhn_config *)h->sp.env->cfg->own)->eval_trained) return 1.0;
    if (!kept) memcpy(m->params, h->sp.global, a->layout.n_floats * sizeof(float));
    hn_generate(h, client < 0 ? 0 : client); /* no global model (has_global 0): never asked */
    part_copy(m->params, h->gen, &a->layout, h->sp.personal, 0, 1);
    return 1.0;
}

/* [[φ, Σ gradient, replies] (fl_save_sums), the clients absorbed since the last aggregation
 * (int32), their embeddings' Σ gradients (double)], arrays as raw native-order bytes; the
 * embeddings themselves are rows. */
static void pfedhn_save(void *p, msgpack_packer *pk)
{
    pfedhn *h = p;
    size_t nc = sizeof(int32_t) * (size_t)h->nt, ng = sizeof(double) * (size_t)h->nt * h->de;
    msgpack_pack_array(pk, 3);
    fl_save_sums(pk, h->phi, h->grad, h->got, h->n_phi);
    msgpack_pack_bin(pk, nc);
    msgpack_pack_bin_body(pk, h->tc, nc);
    msgpack_pack_bin(pk, ng);
    msgpack_pack_bin_body(pk, h->tg, ng);
}

static int pfedhn_load(void *p, const msgpack_object *o, sim_err *err)
{
    pfedhn *h = p;
    const msgpack_object *a =
            o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 3 ? o->via.array.ptr : NULL;
    size_t n = a && a[1].type == MSGPACK_OBJECT_BIN ? a[1].via.bin.size / sizeof(int32_t) : 0;
    if (!a || a[1].type != MSGPACK_OBJECT_BIN || a[1].via.bin.size % sizeof(int32_t) ||
        n > INT32_MAX / 2 || a[2].type != MSGPACK_OBJECT_BIN ||
        a[2].via.bin.size != n * sizeof(double) * (size_t)h->de)
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "server state does not fit pfedhn with embeddings of %d", h->de);
    int rc = fl_load_sums(&a[0], h->phi, h->grad, &h->got, h->n_phi, "pfedhn", err);
    if (rc) return rc;
    h->nt = 0;
    for (size_t k = 0; k < n; k++) {
        int32_t c;
        memcpy(&c, (const char *)a[1].via.bin.ptr + k * sizeof c, sizeof c);
        if (c < 0 || c >= h->sp.env->part->n_clients)
            return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                            "server state names client %d of %d in pfedhn's gradients", c,
                            h->sp.env->part->n_clients);
        double *g = embedding_grad(h, c);
        memcpy(g, (const char *)a[2].via.bin.ptr + k * h->de * sizeof(double),
               sizeof(double) * (size_t)h->de);
    }
    return SIM_OK;
}

const fl_algo fl_fedper = {
        .version = FL_ALGO_VERSION,
        .name = "fedper",
        .summary = "FedPer: FedAvg of the body, a personal head per client",
        .doc = "FedAvg of the body, personal head",
        .flags = FL_HAS_GLOBAL | FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST,
        .server_new = fedper_new,
        .server_free = split_free,
        .job_down = split_down,
        .client_train = fedper_train,
        .server_absorb = split_absorb,
        .server_aggregate = split_aggregate,
        .eval_params = split_eval,
        .server_save = split_save,
        .server_load = split_load,
};
const fl_algo fl_lgfedavg = {
        .version = FL_ALGO_VERSION,
        .name = "lg-fedavg",
        .summary = "LG-FedAvg: a personal body (local representation) per client, "
                   "FedAvg of the head",
        .doc = "personal body, FedAvg of the head: the linear layers of a CNN, the last layer of "
               "an MLP",
        .flags = FL_HAS_GLOBAL | FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST,
        .server_new = lg_new,
        .server_free = split_free,
        .job_down = split_down,
        .client_train = lg_train,
        .server_absorb = split_absorb,
        .server_aggregate = split_aggregate,
        .eval_params = split_eval,
        .server_save = split_save,
        .server_load = split_load,
};
const fl_algo fl_fedrep = {
        .version = FL_ALGO_VERSION,
        .name = "fedrep",
        .summary = "FedRep: FedPer's split; the head trained first with the body frozen, "
                   "then the body with the head frozen",
        .doc = "FedPer's split; each job trains the head for the local epochs with the body "
               "frozen, then the body with the head frozen: ≈ 4/3 of FedPer's FLOPs",
        .flags = FL_HAS_GLOBAL | FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST,
        .server_new = fedper_new,
        .server_free = split_free,
        .job_down = split_down,
        .client_train = fedrep_train,
        .server_absorb = split_absorb,
        .server_aggregate = split_aggregate,
        .eval_params = split_eval,
        .server_save = split_save,
        .server_load = split_load,
};
const fl_algo fl_pfedhn = {
        .version = FL_ALGO_VERSION,
        .name = "pfedhn",
        .summary = "pFedHN: a server hyper-network generates each client's body from its "
                   "embedding; personal head",
        .doc = "pFedHN: a server-side hyper-network generates each client's body from its "
               "embedding; the head stays with the client; no global model",
        .flags = FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST | FL_EVAL_ROWS,
        .section = &fl_pfedhn_section,
        .streams = STREAMS,
        .server_new = pfedhn_new,
        .server_free = pfedhn_free,
        .job_down = pfedhn_down,
        .client_train = pfedhn_train,
        .server_absorb = pfedhn_absorb,
        .server_aggregate = pfedhn_aggregate,
        .eval_params = pfedhn_eval,
        .server_save = pfedhn_save,
        .server_load = pfedhn_load,
};
