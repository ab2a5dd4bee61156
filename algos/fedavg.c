/* algos/fedavg.c -- FedAvg (McMahan et al.) and FedProx (Li et al.), which differs only in the
 * client's proximal term mu/2·||w − w_global||², FedAvg-FT, FedAvg whose clients are each
 * evaluated after fine-tuning the global model for finetune.epochs epochs on its training samples
 * (pFedGate's baseline: 1; DM-PFL's: E), and
 * Ditto (Li et al., 2021), FedAvg plus a personal model per client held near the global one, and
 * APFL (Deng et al., 2020), FedAvg plus a personal model per client mixed with the global one.
 *
 * Clients upload the change of their model (trained − received) rather than the model itself: the
 * same bytes, and the form the server needs both for plain FedAvg (the sample-weighted mean change
 * added to the global model equals the weighted mean of the client models) and for FedBuff-style
 * async aggregation, where updates computed from older global models are applied with a staleness
 * weight. Sums run in double, in the client-id order the engine calls absorb in.
 */
#include "algos/algo.h"

#include "nn/pack.h"
#include "nn/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct fedavg {
    const fl_env *env; /* borrowed */
    float *global;     /* n_floats: the global model */
    float *scratch;    /* n_floats: an unpacked update */
    double *acc;       /* n_floats: Σ weight·update since the last aggregation */
    double mass;       /* Σ mass */
    size_t msg_bytes;  /* encoded size of a dense parameter message (cost-only mode) */
    uint64_t version;  /* aggregations this process made (global changes) */
    /* FedAvg-FT: the last client this process fine-tuned and the global model's version it
     * started from, and the result: a pure function of the two, reused for that client's shifted
     * test sets (the engine evaluates a client's splits one after another) */
    int32_t ft_client;
    uint64_t ft_version;
    float *ft_params;
} fedavg;

static void *fedavg_new(const fl_env *env, sim_err *err)
{
    (void)err;
    fedavg *s = sim_xcalloc(1, sizeof *s);
    size_t nf = env->arch->layout.n_floats;
    s->env = env;
    s->global = fl_initial_params(env);
    s->scratch = sim_xcalloc(nf, sizeof(float));
    s->acc = sim_xcalloc(nf, sizeof(double));
    s->msg_bytes = fl_dense_msg_bytes(env->arch);
    s->ft_client = -1;
    return s;
}

static void fedavg_free(void *p)
{
    fedavg *s = p;
    if (!s) return;
    free(s->global);
    free(s->scratch);
    free(s->acc);
    free(s->ft_params);
    free(s);
}

static size_t fedavg_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    fedavg *s = p;
    (void)client, (void)round;
    if (!out) return s->msg_bytes;
    size_t before = out->size;
    nn_pack_params(out, s->env->arch, s->global);
    return out->size - before;
}

static int train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res, double mu,
                 sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    size_t nf = env->arch->layout.n_floats;
    if (env->cost_only) {
        fl_local_sgd(env, job, m, mu, NULL, res);
        if (!w->msg_bytes) w->msg_bytes = fl_dense_msg_bytes(env->arch);
        res->up_bytes = w->msg_bytes;
        return SIM_OK;
    }
    int rc = nn_unpack_params(m->params, env->arch, job->down, job->down_len, "down message", err);
    if (rc) return rc;
    if ((rc = fl_momentum_load(env, job, 0, m, err))) return rc;
    memcpy(w->ref, m->params, nf * sizeof(float));
    fl_local_sgd(env, job, m, mu, w->ref, res);
    for (size_t j = 0; j < nf; j++) /* the upload is the change, computed in place in ref */
        w->ref[j] = m->params[j] - w->ref[j];
    nn_pack_params(&res->up, env->arch, w->ref);
    res->up_bytes = res->up.size;
    fl_momentum_save(env, m, res);
    return SIM_OK;
}

static int fedavg_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                        sim_err *err)
{
    return train(env, job, w, res, 0, err);
}

static int fedprox_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                         sim_err *err)
{
    return train(env, job, w, res, env->cfg->mu, err);
}

static int fedavg_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                         double mass, sim_err *err)
{
    fedavg *s = p;
    (void)client;
    int rc = nn_unpack_params(s->scratch, s->env->arch, up, len, "up message", err);
    if (rc) return rc;
    size_t nf = s->env->arch->layout.n_floats;
    for (size_t j = 0; j < nf; j++)
        s->acc[j] += weight * (double)s->scratch[j];
    s->mass += mass;
    return SIM_OK;
}

static void fedavg_aggregate(void *p)
{
    fedavg *s = p;
    size_t nf = s->env->arch->layout.n_floats;
    if (s->mass > 0)
        for (size_t j = 0; j < nf; j++)
            s->global[j] += (float)(s->env->cfg->server_lr * s->acc[j] / s->mass);
    memset(s->acc, 0, nf * sizeof(double));
    s->mass = 0;
    s->version++;
}

static double fedavg_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    fedavg *s = p;
    (void)client, (void)priv, (void)priv_len;
    nn_model_reset_narrowing(m);
    memcpy(m->params, s->global, s->env->arch->layout.n_floats * sizeof(float));
    return 1.0;
}

/* FedAvg-FT's personalized accuracy: the global model after `finetune.epochs` epochs on the
 * client's training samples with the training's optimizer (batch size, base lr, momentum from
 * zero, weight decay, clip; batch order seeded per client). */
static double ft_eval_client(void *p, int32_t c, const void *priv, size_t priv_len,
                             const nn_dataset *d, const int32_t *idx, int n, nn_model *m,
                             double *density)
{
    fedavg *s = p;
    const fl_env *env = s->env;
    size_t nf = env->arch->layout.n_floats;
    (void)priv, (void)priv_len;
    *density = 1;
    if (s->ft_client == c && s->ft_version == s->version) { /* fine-tuned already */
        nn_model_reset_narrowing(m);
        memcpy(m->params, s->ft_params, nf * sizeof(float));
        return nn_evaluate(m, d, idx, n, NULL);
    }
    fedavg_eval(p, c, NULL, 0, m);
    int nc = env->part->n[c], B = env->cfg->batch_size;
    if (B > m->max_batch) B = m->max_batch;
    if (nc > 0) {
        sim_rng r;
        sim_rng_seed(&r, env->seed, SIM_RNG_BATCHES, (uint64_t)1 << 62 | (uint32_t)c);
        nn_batcher b;
        nn_batcher_init(&b, env->train, env->part->idx[c], nc, B, 0, &r);
        const fl_config *cfg = env->cfg;
        nn_sgd opt = {(float)cfg->lr, (float)cfg->momentum, (float)cfg->weight_decay,
                      (float)cfg->clip};
        memset(m->mom, 0, sizeof(float) * m->arch.layout.n_floats);
        for (int ep = 0; ep < cfg->ft_epochs; ep++)
            for (int nb; (nb = nn_batcher_next(&b));)
                nn_model_train_step(m, &opt, b.x, b.y, nb);
        nn_batcher_destroy(&b);
    }
    if (!s->ft_params) s->ft_params = sim_xmalloc(nf * sizeof(float));
    memcpy(s->ft_params, m->params, nf * sizeof(float));
    s->ft_client = c, s->ft_version = s->version;
    return nn_evaluate(m, d, idx, n, NULL);
}

/* Ditto: the FedAvg job on the global model, and E more epochs on the client's personal model v
 * (its private state, starting from the global model it first receives) with the proximal term
 * λ/2·||v − w_g||² toward the received global model; the personal model is the one evaluated. The
 * personal epochs come first so that the job's loss is the global model's, as FedAvg's is. */
static int ditto_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                       sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    size_t nf = env->arch->layout.n_floats;
    double lambda = env->cfg->ditto_lambda;
    if (env->cost_only) {
        fl_local_sgd(env, job, m, lambda, NULL, res);
        return train(env, job, w, res, 0, err);
    }
    int rc = nn_unpack_params(w->ref, env->arch, job->down, job->down_len, "down message", err);
    if (!rc && job->priv)
        rc = nn_unpack_params(m->params, env->arch, job->priv, job->priv_len, "private state", err);
    if (rc) return rc;
    if (!job->priv) memcpy(m->params, w->ref, nf * sizeof(float));
    fl_local_sgd(env, job, m, lambda, w->ref, res);
    nn_pack_params(&res->priv, env->arch, m->params);
    return train(env, job, w, res, 0, err);
}

static double ditto_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    fedavg *s = p;
    if (client >= 0 && priv &&
        nn_unpack_params(m->params, s->env->arch, priv, priv_len, "private state", NULL) == SIM_OK)
        return 1.0;
    return fedavg_eval(p, client, NULL, 0, m);
}

/* APFL's private state: the client's local model v (a parameter message) and its mixing weight
 * α (a float64 after it), read into v and *alpha. */
static int apfl_read(const nn_arch *a, const void *priv, size_t len, float *v, double *alpha,
                     sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = SIM_OK;
    if (nn_msgpack_next(&u, priv, len, &off, NULL, NULL) ||
        nn_msgpack_next(&u, priv, len, &off, NULL, NULL) || u.data.type != MSGPACK_OBJECT_FLOAT64 ||
        !(u.data.via.f64 >= 0 && u.data.via.f64 <= 1))
        rc = sim_fail(err, SIM_EFORMAT, "private state", 0, 0, "no APFL mixing weight in [0, 1]");
    else
        *alpha = u.data.via.f64;
    msgpack_unpacked_destroy(&u);
    if (!rc) rc = nn_unpack_params(v, a, priv, len, "private state", err);
    return rc;
}

/* APFL (Algorithm 1 of the paper): each local step trains the client's copy w of the global model
 * on a minibatch, as FedAvg's does, and on the same minibatch the personal model v̄ = αv + (1 − α)w
 * (w, v, α of the step's start): v moves along α·∇f(v̄) (with the job's lr, momentum, weight decay
 * and clip) and, with adapt, α along ⟨v − w, ∇f(v̄)⟩ at the same lr, kept in [0, 1]. v starts as
 * the first global model the client receives. Two forward/backward passes a step: twice FedAvg's
 * FLOPs. The upload is FedAvg's; the job's loss is the global model's. */
static int apfl_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                      sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    const fl_config *cfg = env->cfg;
    size_t nf = env->arch->layout.n_floats;
    if (env->cost_only) {
        fl_local_sgd(env, job, m, 0, NULL, res);
        return train(env, job, w, res, 0, err);
    }
    double alpha = cfg->apfl_alpha;
    int rc = nn_unpack_params(m->params, env->arch, job->down, job->down_len, "down message", err);
    nn_model pm; /* v̄'s forward and backward, then v's step (its momentum in pm.mom) */
    nn_model_init(&pm, env->arch, cfg->batch_size);
    float *v = sim_xmalloc(nf * sizeof(float));
    if (!rc && job->priv)
        rc = apfl_read(env->arch, job->priv, job->priv_len, v, &alpha, err);
    else if (!rc)
        memcpy(v, m->params, nf * sizeof(float));
    fl_loop L;
    if (!rc && fl_loop_start(&L, env, job, m)) {
        nn_sgd opt = {(float)L.lr, (float)cfg->momentum, (float)cfg->weight_decay,
                      (float)cfg->clip};
        memset(m->mom, 0, nf * sizeof(float));
        memcpy(w->ref, m->params, nf * sizeof(float));
        for (int nb; (nb = fl_loop_next(&L));) {
            float a = (float)alpha;
            for (size_t j = 0; j < nf; j++)
                pm.params[j] = a * v[j] + (1 - a) * m->params[j];
            nn_model_forward(&pm, L.b.x, L.b.y, nb, 1);
            nn_model_zero_grad(&pm);
            nn_model_backward(&pm);
            pm.cost.samples += nb;
            double ga = 0;
            for (size_t j = 0; j < nf; j++) {
                ga += (double)(v[j] - m->params[j]) * pm.grads[j];
                pm.grads[j] *= a;
            }
            L.loss += nn_model_forward(m, L.b.x, L.b.y, nb, 1);
            nn_model_backward_step(m, &opt);
            memcpy(pm.params, v, nf * sizeof(float));
            nn_model_sgd_step(&pm, &opt);
            memcpy(v, pm.params, nf * sizeof(float));
            if (cfg->apfl_adapt) alpha = fmin(1, fmax(0, alpha - L.lr * ga));
        }
        int64_t steps = L.steps;
        fl_loop_finish(&L, res);
        fl_count_steps(res, steps); /* v's: a step of its own on every minibatch */
        nn_cost_add(&res->cost, &pm.cost, 1);
        res->cost.samples += pm.cost.samples;
        for (size_t j = 0; j < nf; j++) /* the upload is the change, as FedAvg's */
            w->ref[j] = m->params[j] - w->ref[j];
    } else if (!rc) {
        memset(w->ref, 0, nf * sizeof(float)); /* no samples: no change */
    }
    if (!rc) {
        nn_pack_params(&res->up, env->arch, w->ref);
        res->up_bytes = res->up.size;
        nn_pack_params(&res->priv, env->arch, v);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &res->priv, msgpack_sbuffer_write);
        msgpack_pack_double(&pk, alpha);
    }
    free(v);
    nn_model_destroy(&pm);
    return rc;
}

/* APFL's personalized model: αv + (1 − α)w with the current global model w. */
static double apfl_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    fedavg *s = p;
    double alpha;
    fedavg_eval(p, client, NULL, 0, m);
    if (client < 0 || !priv ||
        apfl_read(s->env->arch, priv, priv_len, s->scratch, &alpha, NULL) != SIM_OK)
        return 1.0;
    float a = (float)alpha;
    for (size_t j = 0; j < s->env->arch->layout.n_floats; j++)
        m->params[j] = a * s->scratch[j] + (1 - a) * m->params[j];
    return 1.0;
}

/* acc and mass are zero at every point the engine checkpoints, but saving them keeps this exact
 * anywhere. */
static void fedavg_save(void *p, msgpack_packer *pk)
{
    fedavg *s = p;
    fl_save_sums(pk, s->global, s->acc, s->mass, s->env->arch->layout.n_floats);
}

static int fedavg_load(void *p, const msgpack_object *o, sim_err *err)
{
    fedavg *s = p;
    s->version++; /* a new global model */
    return fl_load_sums(o, s->global, s->acc, &s->mass, s->env->arch->layout.n_floats,
                        s->env->cfg->name, err);
}

const fl_algo fl_fedavg = {"fedavg",
                           "FedAvg: sample-weighted mean of client updates",
                           1,
                           fedavg_new,
                           fedavg_free,
                           fedavg_down,
                           fedavg_train,
                           fedavg_absorb,
                           fedavg_aggregate,
                           fedavg_eval,
                           fedavg_save,
                           fedavg_load,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL};
const fl_algo fl_fedprox = {"fedprox",
                            "FedProx: FedAvg with a proximal term mu on clients",
                            1,
                            fedavg_new,
                            fedavg_free,
                            fedavg_down,
                            fedprox_train,
                            fedavg_absorb,
                            fedavg_aggregate,
                            fedavg_eval,
                            fedavg_save,
                            fedavg_load,
                            NULL,
                            NULL,
                            NULL,
                            NULL,
                            NULL,
                            NULL,
                            NULL};
const fl_algo fl_fedavg_ft = {"fedavg-ft",
                              "FedAvg-FT: FedAvg, each client evaluated after local epochs of "
                              "fine-tuning",
                              1,
                              fedavg_new,
                              fedavg_free,
                              fedavg_down,
                              fedavg_train,
                              fedavg_absorb,
                              fedavg_aggregate,
                              fedavg_eval,
                              fedavg_save,
                              fedavg_load,
                              NULL,
                              NULL,
                              NULL,
                              ft_eval_client,
                              NULL,
                              "fedavg",
                              NULL};
const fl_algo fl_ditto = {"ditto",
                          "Ditto: FedAvg and a personal model per client with a proximal term "
                          "lambda to the global one",
                          1,
                          fedavg_new,
                          fedavg_free,
                          fedavg_down,
                          ditto_train,
                          fedavg_absorb,
                          fedavg_aggregate,
                          ditto_eval,
                          fedavg_save,
                          fedavg_load,
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          NULL};
const fl_algo fl_apfl = {"apfl",
                         "APFL: FedAvg and a personal model per client mixed with the global one "
                         "by a learned weight alpha",
                         1,
                         fedavg_new,
                         fedavg_free,
                         fedavg_down,
                         apfl_train,
                         fedavg_absorb,
                         fedavg_aggregate,
                         apfl_eval,
                         fedavg_save,
                         fedavg_load,
                         NULL,
                         NULL,
                         NULL,
                         NULL,
                         NULL,
                         NULL,
                         NULL};
