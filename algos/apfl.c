/* algos/apfl.c -- APFL (Deng et al., 2020): FedAvg (algos/fedavg.h) plus a personal model per
 * client mixed with the global one by a weight α, learned by gradient or kept
 * (`algorithm.apfl:`). */
#include "algos/fedavg.h"

#include "nn/pack.h"
#include "nn/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* `algorithm.apfl:` */
typedef struct apfl_config {
    double alpha; /* the initial mixing weight α */
    int adapt;    /* α learned by gradient (1) or kept */
} apfl_config;

static const sim_key KEYS[] = {
        {"alpha", SIM_KEY_DOUBLE, offsetof(apfl_config, alpha), .dflt = "0.5", .lo = 0, .hi = 1,
         .doc = "the initial mixing weight α of the personal model αv + (1 − α)w (the paper's and "
                "DM-PFL's setting)"},
        {"adapt", SIM_KEY_BOOL, offsetof(apfl_config, adapt), .dflt = "true",
         .doc = "α learned by gradient at the job's learning rate and kept in [0, 1] (`false`: "
                "fixed, the paper's fixed-α variant)"},
        {0},
};

const fl_section fl_apfl_section = {
        .name = "apfl",
        .keys = KEYS,
        .size = sizeof(apfl_config),
        .doc = "APFL; checked for the others. A job costs twice FedAvg's "
               "FLOPs (two forward/backward passes a step).",
};

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
        return fl_fedavg_train(env, job, w, res, 0, err);
    }
    const apfl_config *ac = cfg->own;
    double alpha = ac->alpha;
    int rc = fl_down_unpack(env, m->params, job->down, job->down_len, err);
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
            if (ac->adapt) alpha = fmin(1, fmax(0, alpha - L.lr * ga));
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
    if (!rc) { /* the private state first: fl_up_pack appends a residual after it */
        nn_pack_params(&res->priv, env->arch, v);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &res->priv, msgpack_sbuffer_write);
        msgpack_pack_double(&pk, alpha);
        rc = fl_up_pack(env, job, w->ref, 0, res, err);
    }
    free(v);
    nn_model_destroy(&pm);
    return rc;
}

/* APFL's personalized model: αv + (1 − α)w with the current global model w. */
static double apfl_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    fl_fedavg_server *s = p;
    double alpha;
    fl_fedavg_eval(p, client, NULL, 0, m);
    if (client < 0 || !priv ||
        apfl_read(s->env->arch, priv, priv_len, s->scratch, &alpha, NULL) != SIM_OK)
        return 1.0;
    float a = (float)alpha;
    for (size_t j = 0; j < s->env->arch->layout.n_floats; j++)
        m->params[j] = a * s->scratch[j] + (1 - a) * m->params[j];
    return 1.0;
}

const fl_algo fl_apfl = {
        .version = FL_ALGO_VERSION,
        .name = "apfl",
        .summary = "APFL: FedAvg and a personal model per client mixed with the global one "
                   "by a learned weight alpha",
        .doc = "FedAvg plus a personal model v trained, step by step beside the global one, as the "
               "mix αv + (1 − α)w that it is evaluated as; α learned",
        .flags = FL_HAS_GLOBAL | FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST,
        .section = &fl_apfl_section,
        .server_new = fl_fedavg_new,
        .server_free = fl_fedavg_free,
        .job_down = fl_fedavg_down,
        .client_train = apfl_train,
        .server_absorb = fl_fedavg_absorb,
        .server_aggregate = fl_fedavg_aggregate,
        .eval_params = apfl_eval,
        .server_save = fl_fedavg_save,
        .server_load = fl_fedavg_load,
};
