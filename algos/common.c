/* algos/common.c -- pieces every algorithm shares: results, worker scratch, the common initial
 * model and the local SGD loop a client job runs. */
#include "algos/algo.h"

#include "nn/train.h"

#include <stdlib.h>
#include <string.h>

void fl_result_init(fl_result *r)
{
    memset(r, 0, sizeof *r);
    msgpack_sbuffer_init(&r->up);
    msgpack_sbuffer_init(&r->priv);
}

void fl_result_destroy(fl_result *r)
{
    if (!r) return;
    msgpack_sbuffer_destroy(&r->up);
    msgpack_sbuffer_destroy(&r->priv);
    memset(r, 0, sizeof *r);
}

void fl_worker_init(fl_worker *w)
{
    memset(w, 0, sizeof *w);
}

void fl_worker_destroy(fl_worker *w)
{
    if (!w) return;
    if (w->ready) nn_model_destroy(&w->model);
    free(w->ref);
    memset(w, 0, sizeof *w);
}

nn_model *fl_worker_model(fl_worker *w, const fl_env *env)
{
    if (!w->ready) {
        nn_model_init(&w->model, env->arch, env->cfg->batch_size);
        w->ref = sim_xcalloc(env->arch->layout.n_floats, sizeof(float));
        w->ready = 1;
    }
    nn_model_reset_narrowing(&w->model);
    return &w->model;
}

void fl_init_params(nn_model *m, const fl_env *env)
{
    sim_rng r;
    sim_rng_seed(&r, env->seed, SIM_RNG_INIT_WEIGHTS, 0);
    nn_model_init_params(m, &r);
}

/* Cost of `steps` steps over n samples in batches of B, each epoch ending on a short batch. */
static void cost_only(const nn_model *m, int n, int B, int64_t steps, fl_result *res)
{
    int full = n / B, rem = n % B, per_epoch = full + (rem > 0);
    nn_cost cb, cr = {0};
    nn_model_step_cost(m, B, &cb);
    if (rem) nn_model_step_cost(m, rem, &cr);
    /* the short batch is step `full` of every epoch: steps s with s % per_epoch == full */
    int64_t n_short = rem && steps > full ? (steps - 1 - full) / per_epoch + 1 : 0;
    double n_full = (double)(steps - n_short), ns = (double)n_short;
    res->cost.flops += n_full * cb.flops + ns * cr.flops;
    res->cost.flops_masked += n_full * cb.flops_masked + ns * cr.flops_masked;
    res->cost.flops_masked_nnz += n_full * cb.flops_masked_nnz + ns * cr.flops_masked_nnz;
    res->cost.samples += n_full * cb.samples + ns * cr.samples;
    res->steps = steps > INT32_MAX ? INT32_MAX : (int)steps;
}

void fl_local_sgd(const fl_env *env, const fl_job *job, nn_model *m, double mu, const float *anchor,
                  fl_result *res)
{
    const fl_config *cfg = env->cfg;
    int n = env->part->n[job->client], B = cfg->batch_size;
    if (n <= 0) return;
    int per_epoch = (n + B - 1) / B;
    int64_t steps =
            cfg->local_steps > 0 ? cfg->local_steps : (int64_t)cfg->local_epochs * per_epoch;
    if (env->cost_only) {
        cost_only(m, n, B, steps, res);
        return;
    }
    double lr = cfg->lr;
    for (int r = 0; r < job->round; r++)
        lr *= cfg->lr_decay;
    nn_sgd opt = {(float)lr, (float)cfg->momentum, (float)cfg->weight_decay, (float)cfg->clip};
    memset(m->mom, 0, sizeof(float) * m->arch.layout.n_floats); /* momentum is per job */
    sim_rng r;
    sim_rng_seed(&r, env->seed, SIM_RNG_BATCHES, job->stream);
    nn_batcher b;
    nn_batcher_init(&b, env->train, env->part->idx[job->client], n, B, 0, &r);
    nn_cost before = m->cost;
    double loss = 0;
    for (int64_t s = 0; s < steps; s++) {
        int nb = nn_batcher_next(&b);
        if (!nb) nb = nn_batcher_next(&b);
        nn_model_zero_grad(m);
        loss += nn_model_forward(m, b.x, b.y, nb, 1);
        nn_model_backward(m);
        if (mu > 0 && anchor)
            for (size_t k = 0; k < m->n_runs; k++) {
                size_t off = m->runs[k][0];
                for (uint32_t j = 0; j < m->runs[k][1]; j++)
                    m->grads[off + j] += (float)mu * (m->params[off + j] - anchor[off + j]);
            }
        nn_model_sgd_step(m, &opt);
        m->cost.samples += nb;
    }
    res->cost.flops += m->cost.flops - before.flops;
    res->cost.flops_masked += m->cost.flops_masked - before.flops_masked;
    res->cost.flops_masked_nnz += m->cost.flops_masked_nnz - before.flops_masked_nnz;
    res->cost.samples += m->cost.samples - before.samples;
    res->loss = steps ? loss / steps : 0;
    res->steps = steps > INT32_MAX ? INT32_MAX : (int)steps;
    nn_batcher_destroy(&b);
}
