/* algos/local.c -- Local-only training: every client trains its own model on its own data and
 * never communicates. The baseline personalized methods must beat; its messages are empty, so its
 * simulated time is pure computation. A client's model is its private state, starting from the
 * common initial model (narrowed: rescaled to its own width's fan-in, nn_model_init_fit_live).
 * There is no global model. With `algorithm.width: {by: capacity}` each
 * client trains (and is evaluated at) the widest model its capacity affords, as the width
 * family does: Pa3dFL's Table 1 LocalOnly. */
#include "algos/width.h"

#include "nn/pack.h"

#include <stdlib.h>
#include <string.h>

typedef struct local_server {
    const fl_env *env; /* borrowed */
    float *init;       /* the common initial model */
} local_server;

static void *local_new(const fl_env *env, sim_err *err)
{
    (void)err;
    local_server *s = sim_xcalloc(1, sizeof *s);
    s->env = env;
    s->init = fl_initial_params(env);
    return s;
}

static void local_free(void *p)
{
    local_server *s = p;
    if (!s) return;
    free(s->init);
    free(s);
}

/* The width client trains: its capacity's grid width with `width.by: capacity`, else full. */
static double local_width(const fl_env *env, int32_t client)
{
    return fl_width_by_capacity(env, client);
}

static size_t local_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    (void)p, (void)client, (void)round, (void)out;
    return 0;
}

static int local_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                       sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    double p = local_width(env, job->client);
    if (p < 1) nn_model_set_width(m, p, 0);
    if (env->cost_only) {
        fl_local_sgd(env, job, m, 0, NULL, res);
        return SIM_OK;
    }
    if (job->priv) {
        int rc = nn_unpack_params(m->params, env->arch, job->priv, job->priv_len, "private state",
                                  err);
        if (rc) return rc;
    } else { /* the common initial model, scaled as a model of the client's width would be */
        fl_init_params(m, env);
        nn_model_init_fit_live(m);
    }
    int rc = fl_momentum_load(env, job, 1, m, err);
    if (rc) return rc;
    fl_local_sgd(env, job, m, 0, NULL, res);
    nn_pack_params(&res->priv, env->arch, m->params);
    fl_momentum_save(env, m, res);
    return SIM_OK;
}

static int local_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                        double mass, sim_err *err)
{
    (void)p, (void)client, (void)up, (void)len, (void)weight, (void)mass, (void)err;
    return SIM_OK;
}

static void local_aggregate(void *p)
{
    (void)p;
}

/* A client's own model at its width; one that has not trained yet holds the model it would
 * start from (local_train's). */
static double local_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    local_server *s = p;
    nn_model_reset_narrowing(m);
    int own = client >= 0 && priv &&
              nn_unpack_params(m->params, s->env->arch, priv, priv_len, "private state", NULL) ==
                      SIM_OK;
    if (!own) memcpy(m->params, s->init, s->env->arch->layout.n_floats * sizeof(float));
    double w = client >= 0 ? local_width(s->env, client) : 1;
    if (w < 1) nn_model_set_width(m, w, 0);
    if (!own) nn_model_init_fit_live(m);
    return nn_model_unit_density(m);
}

/* The server holds only the initial model, which local_new rebuilds from the seed; the clients'
 * models are their private states, which the engine saves. */
static void local_save(void *p, msgpack_packer *pk)
{
    (void)p;
    msgpack_pack_nil(pk);
}

static int local_load(void *p, const msgpack_object *o, sim_err *err)
{
    (void)p;
    if (o->type != MSGPACK_OBJECT_NIL)
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0, "server state does not fit local");
    return SIM_OK;
}

const fl_algo fl_local = {
        .version = FL_ALGO_VERSION,
        .name = "local",
        .summary = "Local-only: each client trains alone, nothing is sent",
        .doc = "local-only, no communication; with `width.by: capacity` each client trains its own "
               "width's model",
        .flags = FL_KEEPS_MOMENTUM | FL_FIXED_COST,
        .server_new = local_new,
        .server_free = local_free,
        .job_down = local_down,
        .client_train = local_train,
        .server_absorb = local_absorb,
        .server_aggregate = local_aggregate,
        .eval_params = local_eval,
        .server_save = local_save,
        .server_load = local_load,
        .client_width = local_width,
        .no_compress = "LocalOnly sends nothing",
};
