/* algos/ditto.c -- Ditto (Li et al., 2021): FedAvg (algos/fedavg.h) plus a personal model per
 * client held near the global one by a proximal term λ (`algorithm.ditto.lambda`). */
#include "algos/fedavg.h"

#include "nn/pack.h"

#include <string.h>

/* `algorithm.ditto:` */
typedef struct ditto_config {
    double lambda;
} ditto_config;

static const sim_key KEYS[] = {
        {"lambda", SIM_KEY_DOUBLE, offsetof(ditto_config, lambda), .dflt = "0.1", .lo = 0,
         .hi = 1e3, .doc = "the proximal weight λ/2·‖v − w_g‖² of the personal model v"},
        {0},
};

const fl_section fl_ditto_section = {
        .name = "ditto",
        .keys = KEYS,
        .size = sizeof(ditto_config),
        .doc = "Ditto; checked for the others.",
};

/* Ditto: the FedAvg job on the global model, and E more epochs on the client's personal model v
 * (its private state, starting from the global model it first receives) with the proximal term
 * λ/2·||v − w_g||² toward the received global model; the personal model is the one evaluated. The
 * personal epochs come first so that the job's loss is the global model's, as FedAvg's is. */
static int ditto_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                       sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    size_t nf = env->arch->layout.n_floats;
    double lambda = ((const ditto_config *)env->cfg->own)->lambda;
    if (env->cost_only) {
        fl_local_sgd(env, job, m, lambda, NULL, res);
        return fl_fedavg_train(env, job, w, res, 0, err);
    }
    int rc = fl_down_unpack(env, w->ref, job->down, job->down_len, err);
    if (!rc && job->priv)
        rc = nn_unpack_params(m->params, env->arch, job->priv, job->priv_len, "private state", err);
    if (rc) return rc;
    if (!job->priv) memcpy(m->params, w->ref, nf * sizeof(float));
    fl_local_sgd(env, job, m, lambda, w->ref, res);
    nn_pack_params(&res->priv, env->arch, m->params);
    return fl_fedavg_train(env, job, w, res, 0, err);
}

static double ditto_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    fl_fedavg_server *s = p;
    if (client >= 0 && priv &&
        nn_unpack_params(m->params, s->env->arch, priv, priv_len, "private state", NULL) == SIM_OK)
        return 1.0;
    return fl_fedavg_eval(p, client, NULL, 0, m);
}

const fl_algo fl_ditto = {
        .version = FL_ALGO_VERSION,
        .name = "ditto",
        .summary = "Ditto: FedAvg and a personal model per client with a proximal term "
                   "lambda to the global one",
        .doc = "FedAvg plus a personal model with a proximal term λ to the global one",
        .flags = FL_HAS_GLOBAL | FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST,
        .section = &fl_ditto_section,
        .server_new = fl_fedavg_new,
        .server_free = fl_fedavg_free,
        .job_down = fl_fedavg_down,
        .client_train = ditto_train,
        .server_absorb = fl_fedavg_absorb,
        .server_aggregate = fl_fedavg_aggregate,
        .eval_params = ditto_eval,
        .server_save = fl_fedavg_save,
        .server_load = fl_fedavg_load,
};
