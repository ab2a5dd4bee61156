/* algos/fedavg.c -- the FedAvg family: FedAvg (McMahan et al.) and FedProx (Li et al.), which
 * differs only in the client's proximal term mu/2·||w − w_global||², and the FedAvg server and
 * client job that FedAvg-FT, Ditto and APFL (their own files) build on (algos/fedavg.h).
 *
 * Clients upload the change of their model (trained − received) rather than the model itself: the
 * same bytes, and the form the server needs both for plain FedAvg (the sample-weighted mean change
 * added to the global model equals the weighted mean of the client models) and for FedBuff-style
 * async aggregation, where updates computed from older global models are applied with a staleness
 * weight. Sums run in double, in the client-id order the engine calls absorb in.
 */
#include "algos/fedavg.h"

#include "nn/pack.h"
#include "nn/train.h"

#include <stdlib.h>
#include <string.h>

typedef fl_fedavg_server fedavg;

void fl_fedavg_init(fedavg *s, const fl_env *env)
{
    size_t nf = env->arch->layout.n_floats;
    s->env = env;
    s->global = fl_initial_params(env);
    s->scratch = sim_xcalloc(nf, sizeof(float));
    s->acc = sim_xcalloc(nf, sizeof(double));
    s->msg_bytes = fl_down_bytes(env);
}

void fl_fedavg_destroy(fedavg *s)
{
    free(s->global);
    free(s->scratch);
    free(s->acc);
}

void *fl_fedavg_new(const fl_env *env, sim_err *err)
{
    (void)err;
    fedavg *s = sim_xcalloc(1, sizeof *s);
    fl_fedavg_init(s, env);
    return s;
}

void fl_fedavg_free(void *p)
{
    if (!p) return;
    fl_fedavg_destroy(p);
    free(p);
}

size_t fl_fedavg_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    fedavg *s = p;
    if (!out) return s->msg_bytes;
    size_t before = out->size;
    fl_down_pack(s->env, s->global, client, round, 0, out);
    return out->size - before;
}

int fl_fedavg_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res, double mu,
                    sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    size_t nf = env->arch->layout.n_floats;
    if (env->cost_only) {
        fl_local_sgd(env, job, m, mu, NULL, res);
        if (env->comp_up && env->comp_up->scheme != NN_COMP_NONE) {
            res->up_bytes = fl_up_bytes(env);
            return SIM_OK;
        }
        if (!w->msg_bytes) w->msg_bytes = fl_dense_msg_bytes(env->arch);
        res->up_bytes = w->msg_bytes;
        return SIM_OK;
    }
    int rc = fl_down_unpack(env, m->params, job->down, job->down_len, err);
    if (rc) return rc;
    if ((rc = fl_momentum_load(env, job, 0, m, err))) return rc;
    memcpy(w->ref, m->params, nf * sizeof(float));
    fl_local_sgd(env, job, m, mu, w->ref, res);
    for (size_t j = 0; j < nf; j++) /* the upload is the change, computed in place in ref */
        w->ref[j] = m->params[j] - w->ref[j];
    fl_momentum_save(env, m, res); /* before fl_up_pack's residual: fl_momentum_load's place */
    return fl_up_pack(env, job, w->ref, 0, res, err);
}

static int fedavg_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                        sim_err *err)
{
    return fl_fedavg_train(env, job, w, res, 0, err);
}

static int fedprox_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                         sim_err *err)
{
    return fl_fedavg_train(env, job, w, res, env->cfg->mu, err);
}

int fl_fedavg_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                     double mass, sim_err *err)
{
    fedavg *s = p;
    (void)client;
    int rc = fl_up_unpack(s->env, s->scratch, up, len, err);
    if (rc) return rc;
    size_t nf = s->env->arch->layout.n_floats;
    for (size_t j = 0; j < nf; j++)
        s->acc[j] += weight * (double)s->scratch[j];
    s->mass += mass;
    return SIM_OK;
}

void fl_fedavg_aggregate(void *p)
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

double fl_fedavg_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    fedavg *s = p;
    (void)client, (void)priv, (void)priv_len;
    nn_model_reset_narrowing(m);
    memcpy(m->params, s->global, s->env->arch->layout.n_floats * sizeof(float));
    return 1.0;
}

/* acc and mass are zero at every point the engine checkpoints, but saving them keeps this exact
 * anywhere. */
void fl_fedavg_save(void *p, msgpack_packer *pk)
{
    fedavg *s = p;
    fl_save_sums(pk, s->global, s->acc, s->mass, s->env->arch->layout.n_floats);
}

int fl_fedavg_load(void *p, const msgpack_object *o, sim_err *err)
{
    fedavg *s = p;
    s->version++; /* a new global model */
    return fl_load_sums(o, s->global, s->acc, &s->mass, s->env->arch->layout.n_floats,
                        s->env->cfg->name, err);
}

const fl_algo fl_fedavg = {
        .version = FL_ALGO_VERSION,
        .name = "fedavg",
        .summary = "FedAvg: sample-weighted mean of client updates",
        .flags = FL_HAS_GLOBAL | FL_KEEPS_MOMENTUM | FL_COMPRESS_UP | FL_COMPRESS_DOWN |
                 FL_FIXED_COST,
        .server_new = fl_fedavg_new,
        .server_free = fl_fedavg_free,
        .job_down = fl_fedavg_down,
        .client_train = fedavg_train,
        .server_absorb = fl_fedavg_absorb,
        .server_aggregate = fl_fedavg_aggregate,
        .eval_params = fl_fedavg_eval,
        .server_save = fl_fedavg_save,
        .server_load = fl_fedavg_load,
};
const fl_algo fl_fedprox = {
        .version = FL_ALGO_VERSION,
        .name = "fedprox",
        .summary = "FedProx: FedAvg with a proximal term mu on clients",
        .flags = FL_HAS_GLOBAL | FL_KEEPS_MOMENTUM | FL_COMPRESS_UP | FL_COMPRESS_DOWN |
                 FL_FIXED_COST,
        .server_new = fl_fedavg_new,
        .server_free = fl_fedavg_free,
        .job_down = fl_fedavg_down,
        .client_train = fedprox_train,
        .server_absorb = fl_fedavg_absorb,
        .server_aggregate = fl_fedavg_aggregate,
        .eval_params = fl_fedavg_eval,
        .server_save = fl_fedavg_save,
        .server_load = fl_fedavg_load,
};
