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
 *   stream of their own.
 * A client trains its whole model (the received shared tensors and its own personal ones; FedRep
 * as above) for its local epochs and uploads the shared tensors, whose sample-weighted mean becomes
 * the global part; its personal tensors are its private state, starting from the common initial
 * model. Messages are {"shared": float32 of the shared tensors in layout order}.
 */
#include "algos/algo.h"

#include "nn/pack.h"

#include <stdlib.h>
#include <string.h>

typedef struct split_server {
    const fl_env *env; /* borrowed */
    uint8_t personal[NN_MAX_TENSORS];
    size_t n_shared, n_personal; /* floats in each part */
    float *global;               /* n_floats: the shared part (and the initial personal one) */
    float *scratch;              /* n_shared: an unpacked upload */
    double *acc;                 /* n_floats: Σ weight · value */
    double mass;
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

/* {"shared": the shared tensors of w} */
static void pack_part(msgpack_sbuffer *sb, const nn_layout *L, const uint8_t *personal, float *w,
                      const char *key, int which)
{
    size_t n = part_size(L, personal, which);
    float *v = sim_xmalloc(sizeof(float) * (n + 1));
    part_copy(w, v, L, personal, which, 0);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    nn_pack_str(&pk, key);
    nn_pack_f32(&pk, v, n);
    free(v);
}

static int unpack_part(float *w, const nn_layout *L, const uint8_t *personal, const void *buf,
                       size_t len, const char *key, int which, const char *what, sim_err *err)
{
    size_t n = part_size(L, personal, which), off = 0;
    float *v = sim_xmalloc(sizeof(float) * (n + 1));
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    const msgpack_object *o = NULL;
    int rc = buf && msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS &&
                             (o = nn_map_get(&u.data, key))
                     ? nn_unpack_f32(v, n, o, what, err)
                     : sim_fail(err, SIM_EFORMAT, what, 0, 0, "no \"%s\"", key);
    if (!rc) part_copy(w, v, L, personal, which, 1);
    msgpack_unpacked_destroy(&u);
    free(v);
    return rc;
}

static void *split_new_with(const fl_env *env, int head)
{
    split_server *s = sim_xcalloc(1, sizeof *s);
    const nn_layout *L = &env->arch->layout;
    s->env = env;
    split_parts(s->personal, env->arch, head);
    s->n_shared = part_size(L, s->personal, 0);
    s->n_personal = part_size(L, s->personal, 1);
    s->global = fl_initial_params(env);
    s->scratch = sim_xcalloc(L->n_floats, sizeof(float));
    s->acc = sim_xcalloc(L->n_floats, sizeof(double));
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

static void split_free(void *p)
{
    split_server *s = p;
    if (!s) return;
    free(s->global);
    free(s->scratch);
    free(s->acc);
    free(s);
}

static size_t split_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    split_server *s = p;
    (void)client, (void)round;
    if (!out) return 1 + 7 + nn_bin_bytes(4 * s->n_shared);
    size_t before = out->size;
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
            res->cost.samples += nb;
        }
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

static int split_train_with(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                            int head, int rep, sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    const nn_layout *L = &env->arch->layout;
    uint8_t personal[NN_MAX_TENSORS];
    split_parts(personal, env->arch, head);
    if (env->cost_only) {
        if (rep)
            fedrep_sgd(env, job, m, personal, res);
        else
            fl_local_sgd(env, job, m, 0, NULL, res);
        res->up_bytes = 1 + 7 + nn_bin_bytes(4 * part_size(L, personal, 0));
        return SIM_OK;
    }
    fl_init_params(m, env); /* a first job's personal part */
    int rc = job->priv ? unpack_part(m->params, L, personal, job->priv, job->priv_len, "personal",
                                     1, "private state", err)
                       : SIM_OK;
    if (!rc)
        rc = unpack_part(m->params, L, personal, job->down, job->down_len, "shared", 0,
                         "down message", err);
    if (rc) return rc;
    if (rep)
        fedrep_sgd(env, job, m, personal, res);
    else
        fl_local_sgd(env, job, m, 0, NULL, res);
    pack_part(&res->up, L, personal, m->params, "shared", 0);
    res->up_bytes = res->up.size;
    pack_part(&res->priv, L, personal, m->params, "personal", 1);
    return SIM_OK;
}

static int fedper_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                        sim_err *err)
{
    return split_train_with(env, job, w, res, 1, 0, err);
}

static int fedrep_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                        sim_err *err)
{
    return split_train_with(env, job, w, res, 1, 1, err);
}

static int lg_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                    sim_err *err)
{
    return split_train_with(env, job, w, res, 0, 0, err);
}

static int split_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                        double mass, sim_err *err)
{
    split_server *s = p;
    const nn_layout *L = &s->env->arch->layout;
    (void)client;
    int rc = unpack_part(s->scratch, L, s->personal, up, len, "shared", 0, "up message", err);
    if (rc) return rc;
    for (int t = 0; t < L->n; t++)
        for (size_t j = L->t[t].off;
             !s->personal[t] && j < L->t[t].off + (size_t)L->t[t].rows * L->t[t].cols; j++)
            s->acc[j] += weight * (double)s->scratch[j];
    s->mass += mass;
    return SIM_OK;
}

static void split_aggregate(void *p)
{
    split_server *s = p;
    const nn_layout *L = &s->env->arch->layout;
    for (int t = 0; s->mass > 0 && t < L->n; t++)
        for (size_t j = L->t[t].off;
             !s->personal[t] && j < L->t[t].off + (size_t)L->t[t].rows * L->t[t].cols; j++)
            s->global[j] = (float)(s->acc[j] / s->mass);
    memset(s->acc, 0, L->n_floats * sizeof(double));
    s->mass = 0;
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

const fl_algo fl_fedper = {"fedper",
                           "FedPer: FedAvg of the body, a personal head per client",
                           1,
                           fedper_new,
                           split_free,
                           split_down,
                           fedper_train,
                           split_absorb,
                           split_aggregate,
                           split_eval,
                           split_save,
                           split_load,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL};
const fl_algo fl_lgfedavg = {"lg-fedavg",
                             "LG-FedAvg: a personal body (local representation) per client, "
                             "FedAvg of the head",
                             1,
                             lg_new,
                             split_free,
                             split_down,
                             lg_train,
                             split_absorb,
                             split_aggregate,
                             split_eval,
                             split_save,
                             split_load,
                             NULL,
                             NULL,
                             NULL,
                             NULL,
                             NULL,
                             NULL,
                             NULL};
const fl_algo fl_fedrep = {"fedrep",
                           "FedRep: FedPer's split; the head trained first with the body frozen, "
                           "then the body with the head frozen",
                           1,
                           fedper_new,
                           split_free,
                           split_down,
                           fedrep_train,
                           split_absorb,
                           split_aggregate,
                           split_eval,
                           split_save,
                           split_load,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL};
