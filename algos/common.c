/* algos/common.c -- pieces every algorithm shares: results, worker scratch, the common initial
 * model, the dense message's length and the local SGD loop a client job runs. */
#include "algos/algo.h"

#include "nn/ops.h"
#include "nn/pack.h"
#include "nn/train.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int fl_row_get(const fl_env *env, int32_t client, void *row, size_t len)
{
    return env->rows ? env->rows->get(env->rows->ctx, client, row, len) : 0;
}

void fl_row_put(const fl_env *env, int32_t client, const void *row, size_t len)
{
    assert(env->rows && "a server with per-client rows absorbs only in a run");
    env->rows->put(env->rows->ctx, client, row, len);
}

void fl_row_bad(const fl_env *env, int32_t client, const char *what)
{
    if (env->rows) env->rows->bad(env->rows->ctx, client, what);
}

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
    nn_cost_job_start(&w->model.cost);
    return &w->model;
}

void fl_init_params(nn_model *m, const fl_env *env)
{
    sim_rng r;
    sim_rng_seed(&r, env->seed, SIM_RNG_INIT_WEIGHTS, 0);
    nn_model_init_params(m, &r);
}

size_t fl_dense_msg_bytes(const nn_arch *a)
{
    float *zero = sim_xcalloc(a->layout.n_floats, sizeof(float));
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    nn_pack_params(&sb, a, zero);
    size_t n = sb.size;
    msgpack_sbuffer_destroy(&sb);
    free(zero);
    return n;
}

float *fl_initial_params(const fl_env *env)
{
    size_t nf = env->arch->layout.n_floats;
    float *p = sim_xmalloc(nf * sizeof(float));
    nn_model m;
    nn_model_init(&m, env->arch, 1);
    fl_init_params(&m, env);
    memcpy(p, m.params, nf * sizeof(float));
    nn_model_destroy(&m);
    return p;
}

/* Cost of `steps` steps over n samples in batches of B, each epoch ending on a short batch. */
void fl_steps_cost(const nn_model *m, int n, int B, int64_t steps, nn_cost *to)
{
    int rem = n % B;
    nn_cost cb, cr = {0};
    nn_model_step_cost(m, B, &cb);
    if (rem) nn_model_step_cost(m, rem, &cr);
    int64_t n_short = fl_job_short_batches(steps, n, B);
    double n_full = (double)(steps - n_short), ns = (double)n_short;
    for (int i = 0; i < NN_COST_N; i++)
        *nn_cost_at(to, i) += n_full * nn_cost_get(&cb, i) + ns * nn_cost_get(&cr, i);
}

static void cost_only(const nn_model *m, int n, int B, int64_t steps, fl_result *res)
{
    fl_steps_cost(m, n, B, steps, &res->cost);
    fl_count_steps(res, steps);
}

void fl_count_steps(fl_result *res, int64_t steps)
{
    int64_t s = res->steps + steps;
    res->steps = s > INT32_MAX ? INT32_MAX : (int)s;
}

void fl_prox_grad(nn_model *m, double mu, const float *anchor)
{
    for (size_t k = 0; k < m->n_runs; k++) {
        size_t off = m->runs[k][0];
        for (uint32_t j = 0; j < m->runs[k][1]; j++)
            m->grads[off + j] += (float)mu * (m->params[off + j] - anchor[off + j]);
    }
}

int64_t fl_job_steps(const fl_env *env, int n)
{
    const fl_config *cfg = env->cfg;
    int B = cfg->batch_size;
    return cfg->local_steps > 0 ? cfg->local_steps : (int64_t)cfg->local_epochs * ((n + B - 1) / B);
}

int64_t fl_job_short_batches(int64_t steps, int n, int B)
{
    /* the short batch is step `full` of every epoch: steps s with s % per_epoch == full */
    int full = n / B, per_epoch = (n + B - 1) / B;
    return n % B && steps > full ? (steps - 1 - full) / per_epoch + 1 : 0;
}

int fl_job_batch(int64_t step, int n, int B)
{
    int per_epoch = (n + B - 1) / B;
    return step % per_epoch == n / B ? n % B : B;
}

double fl_job_lr(const fl_env *env, const fl_job *job)
{
    double lr = env->cfg->lr;
    for (int r = 0; r < job->round; r++) /* multiplied round by round, as it always was */
        lr *= env->cfg->lr_decay;
    return lr;
}

int fl_loop_start(fl_loop *L, const fl_env *env, const fl_job *job, nn_model *m)
{
    const fl_config *cfg = env->cfg;
    int n = env->part->n[job->client];
    memset(L, 0, sizeof *L);
    if (n <= 0) return 0;
    L->m = m;
    L->steps = fl_job_steps(env, n);
    L->lr = fl_job_lr(env, job);
    sim_rng r;
    sim_rng_seed(&r, env->seed, SIM_RNG_BATCHES, job->stream);
    nn_batcher_init(&L->b, env->train, env->part->idx[job->client], n, cfg->batch_size, 0, &r);
    nn_cost_job_start(&m->cost);
    L->before = m->cost;
    return 1;
}

int fl_loop_next(fl_loop *L)
{
    if (L->step == L->steps) return 0;
    int nb = nn_batcher_next(&L->b);
    if (!nb) nb = nn_batcher_next(&L->b);
    L->step++;
    L->m->cost.samples += nb;
    return nb;
}

void fl_loop_finish(fl_loop *L, fl_result *res)
{
    nn_cost_add_diff(&res->cost, &L->m->cost, &L->before);
    res->loss = L->steps ? L->loss / L->steps : 0;
    fl_count_steps(res, L->steps);
    nn_batcher_destroy(&L->b);
}

double fl_head_step_flops(const nn_arch *a, int B)
{
    const nn_layer *l = &a->l[a->n - 1];
    /* the logits' gradient, the weight's (B·K·d multiply-adds) and the bias's */
    return 3.0 * B * l->oc + 2.0 * B * l->oc * l->c + (double)B * l->oc;
}

void fl_head_step(nn_model *m, const int32_t *y, int B, const nn_sgd *opt)
{
    const nn_arch *a = &m->arch;
    const nn_layer *l = &a->l[a->n - 1];
    int K = l->oc, d = l->c;
    size_t ow = a->layout.t[l->wt].off, nw = (size_t)K * d, ob = 0;
    float *dlog = sim_xmalloc(sizeof(float) * (size_t)B * K), *gw = m->grads + ow, *gb = NULL;
    memset(gw, 0, sizeof(float) * nw);
    if (l->bt >= 0) {
        ob = a->layout.t[l->bt].off;
        gb = m->grads + ob;
        memset(gb, 0, sizeof(float) * (size_t)K);
    }
    nn_softmax_xent(dlog, m->logits, y, B, K);
    nn_linear_backward(NULL, gw, d, gb, dlog, nn_model_features(m), m->params + ow, d, B, d, K);
    for (int t = 0; t < 2; t++) { /* weight, then bias: v = μv + g + λw, w −= lr·v */
        size_t off = t ? ob : ow, n = t ? (gb ? (size_t)K : 0) : nw;
        for (size_t j = off; j < off + n; j++) {
            float g = m->grads[j] + opt->weight_decay * m->params[j];
            m->mom[j] = opt->momentum > 0 ? opt->momentum * m->mom[j] + g : g;
            m->params[j] -= opt->lr * m->mom[j];
        }
    }
    m->cost.flops += fl_head_step_flops(a, B);
    free(dlog);
}

void fl_local_sgd_with(const fl_env *env, const fl_job *job, nn_model *m, double weight_decay,
                       fl_grad_fn *fn, void *ctx, fl_result *res)
{
    const fl_config *cfg = env->cfg;
    int n = env->part->n[job->client];
    if (n <= 0) return;
    if (env->cost_only) {
        cost_only(m, n, cfg->batch_size, fl_job_steps(env, n), res);
        return;
    }
    fl_loop L;
    fl_loop_start(&L, env, job, m);
    nn_sgd opt = {(float)L.lr, (float)cfg->momentum, (float)weight_decay, (float)cfg->clip};
    if (!cfg->persistent_momentum) /* else the caller loaded it: fl_momentum_load */
        memset(m->mom, 0, sizeof(float) * m->arch.layout.n_floats);
    for (int nb; (nb = fl_loop_next(&L));) {
        L.loss += nn_model_forward(m, L.b.x, L.b.y, nb, 1);
        if (!fn) {
            nn_model_backward_step(m, &opt);
            continue;
        }
        nn_model_zero_grad(m);
        nn_model_backward(m);
        fn(m, ctx);
        nn_model_sgd_step(m, &opt);
    }
    fl_loop_finish(&L, res);
}

int fl_momentum_load(const fl_env *env, const fl_job *job, int skip, nn_model *m, sim_err *err)
{
    size_t nf = m->arch.layout.n_floats, off = 0;
    memset(m->mom, 0, sizeof(float) * nf);
    if (!env->cfg->persistent_momentum || !job->priv) return SIM_OK;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    int rc = SIM_OK, k = 0;
    for (; k <= skip && off < job->priv_len; k++)
        if (nn_msgpack_next(&u, job->priv, job->priv_len, &off, NULL, NULL)) {
            rc = sim_fail(err, SIM_EFORMAT, "private state", 0, 0, "not msgpack");
            break;
        }
    if (!rc && k == skip + 1) /* else a state kept without momentum: zero */
        rc = nn_unpack_f32(m->mom, nf, &u.data, "kept momentum", err);
    msgpack_unpacked_destroy(&u);
    return rc;
}

void fl_momentum_save(const fl_env *env, const nn_model *m, fl_result *res)
{
    if (!env->cfg->persistent_momentum) return;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &res->priv, msgpack_sbuffer_write);
    nn_pack_f32(&pk, m->mom, m->arch.layout.n_floats);
}

typedef struct prox_ctx {
    double mu;
    const float *anchor;
} prox_ctx;

static void prox_fn(nn_model *m, void *ctx)
{
    const prox_ctx *p = ctx;
    fl_prox_grad(m, p->mu, p->anchor);
}

void fl_local_sgd(const fl_env *env, const fl_job *job, nn_model *m, double mu, const float *anchor,
                  fl_result *res)
{
    prox_ctx p = {mu, anchor};
    fl_local_sgd_with(env, job, m, env->cfg->weight_decay, mu > 0 && anchor ? prox_fn : NULL, &p,
                      res);
}

void fl_save_sums(msgpack_packer *pk, const float *global, const double *acc, double mass,
                  size_t nf)
{
    msgpack_pack_array(pk, 3);
    msgpack_pack_bin(pk, nf * sizeof(float));
    msgpack_pack_bin_body(pk, global, nf * sizeof(float));
    msgpack_pack_bin(pk, nf * sizeof(double));
    msgpack_pack_bin_body(pk, acc, nf * sizeof(double));
    msgpack_pack_double(pk, mass);
}

int fl_load_sums(const msgpack_object *o, float *global, double *acc, double *mass, size_t nf,
                 const char *name, sim_err *err)
{
    const msgpack_object *a =
            o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 3 ? o->via.array.ptr : NULL;
    if (!a || a[0].type != MSGPACK_OBJECT_BIN || a[0].via.bin.size != nf * sizeof(float) ||
        a[1].type != MSGPACK_OBJECT_BIN || a[1].via.bin.size != nf * sizeof(double) ||
        a[2].type != MSGPACK_OBJECT_FLOAT64)
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "server state does not fit %s with a %zu-parameter model", name, nf);
    memcpy(global, a[0].via.bin.ptr, nf * sizeof(float));
    memcpy(acc, a[1].via.bin.ptr, nf * sizeof(double));
    *mass = a[2].via.f64;
    return SIM_OK;
}
