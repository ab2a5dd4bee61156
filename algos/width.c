/* algos/width.c -- the width-scaling family: HeteroFL (Diao et al., ICLR 2021) trains each client
 * on the first ⌈p·C⌉ channels of every hidden layer at a fixed width p; FjORD (Horváth et al.,
 * NeurIPS 2021) draws a new width for every job (ordered dropout), here uniformly in [min, max] as
 * SpaFL's comparison does. The output layer and the input stay full.
 *
 * What a client really does is the narrowed model: the down message is the global model's
 * sub-model at the job's width, the client trains it (the kernels run the smaller GEMMs, so its
 * FLOPs and time fall roughly with p²), and the up message is the change of those parameters only.
 * Both messages are {"p": width, "data": the live float32 values in layout order}: the receiver
 * rebuilds which parameters they are from p, as the sender did. The server averages every global
 * parameter over the clients whose sub-model holds it (HeteroFL's rule), weighted as the engine
 * says (sample count, or 1 with `weighting: uniform`); a parameter nobody trained stays as it was.
 *
 * Widths are a pure function of (seed, client, round), so a cost-only job knows its size without
 * a message. Personalized evaluation runs each client at its own width (FjORD: at max); the
 * global model is evaluated at width.eval.
 */
#include "algos/algo.h"

#include "nn/pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct width_server {
    const fl_env *env; /* borrowed */
    int fjord;
    float *global;      /* n_floats */
    double *acc, *mass; /* n_floats: Σ weight·change and Σ mass per parameter */
    float *scratch;     /* n_floats: an unpacked message */
    nn_model m;         /* its live map tells which parameters a width holds */
} width_server;

/* The width of client's job in round (FjORD: a fresh draw per job). */
static double job_width(const fl_env *env, int fjord, int32_t client, int32_t round)
{
    const fl_width_config *w = &env->cfg->width;
    if (!fjord) return w->p;
    sim_rng r;
    sim_rng_seed(&r, env->seed, SIM_RNG_WIDTH, (uint64_t)(uint32_t)client << 32 | (uint32_t)round);
    return w->min + (w->max - w->min) * sim_rng_uniform(&r);
}

/* A message: p and the values of the parameters live at width p (m narrowed to p). */
static void pack_sub(msgpack_sbuffer *sb, const nn_model *m, double p, const float *v)
{
    size_t nf = m->arch.layout.n_floats, n = 0;
    float *buf = sim_xmalloc(sizeof(float) * (nn_model_live_count(m) + 1));
    for (size_t j = 0; j < nf; j++)
        if (m->live[j]) buf[n++] = v[j];
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str(&pk, 1);
    msgpack_pack_str_body(&pk, "p", 1);
    msgpack_pack_double(&pk, p);
    msgpack_pack_str(&pk, 4);
    msgpack_pack_str_body(&pk, "data", 4);
    nn_pack_f32(&pk, buf, n);
    free(buf);
}

/* The length pack_sub would produce for n live values. */
static size_t sub_bytes(size_t n)
{
    size_t bin = n * 4, hdr = bin < 256 ? 2 : bin < 65536 ? 3 : 5;
    return 1 + 2 + 9 + 5 + hdr + bin; /* map, "p", float64, "data", bin header, values */
}

/* Read a message into v at the parameters live at its width, narrowing m to it; returns p. */
static int unpack_sub(nn_model *m, float *v, const void *buf, size_t len, const char *what,
                      double *p_out, sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = SIM_OK;
    const msgpack_object *p = NULL, *data = NULL;
    if (buf && msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP)
        for (uint32_t i = 0; i < u.data.via.map.size; i++) {
            const msgpack_object_kv *kv = &u.data.via.map.ptr[i];
            if (kv->key.type != MSGPACK_OBJECT_STR) continue;
            if (kv->key.via.str.size == 1 && kv->key.via.str.ptr[0] == 'p') p = &kv->val;
            if (kv->key.via.str.size == 4 && !memcmp(kv->key.via.str.ptr, "data", 4))
                data = &kv->val;
        }
    if (!p || p->type != MSGPACK_OBJECT_FLOAT64 || !(p->via.f64 > 0 && p->via.f64 <= 1) || !data) {
        rc = sim_fail(err, SIM_EFORMAT, what, 0, 0, "not a sub-model message (p in (0, 1], data)");
        goto done;
    }
    nn_model_set_width(m, p->via.f64, 0);
    size_t n = nn_model_live_count(m), nf = m->arch.layout.n_floats;
    float *vals = sim_xmalloc(sizeof(float) * (n + 1));
    if (!(rc = nn_unpack_f32(vals, n, data, what, err))) {
        size_t k = 0;
        for (size_t j = 0; j < nf; j++)
            if (m->live[j]) v[j] = vals[k++];
        *p_out = p->via.f64;
    }
    free(vals);
done:
    msgpack_unpacked_destroy(&u);
    return rc;
}

static void *server_new(const fl_env *env, int fjord)
{
    width_server *s = sim_xcalloc(1, sizeof *s);
    size_t nf = env->arch->layout.n_floats;
    s->env = env;
    s->fjord = fjord;
    s->global = sim_xcalloc(nf, sizeof(float));
    s->scratch = sim_xcalloc(nf, sizeof(float));
    s->acc = sim_xcalloc(nf, sizeof(double));
    s->mass = sim_xcalloc(nf, sizeof(double));
    nn_model_init(&s->m, env->arch, 1);
    fl_init_params(&s->m, env);
    memcpy(s->global, s->m.params, nf * sizeof(float));
    return s;
}

static void *heterofl_new(const fl_env *env, sim_err *err)
{
    (void)err;
    return server_new(env, 0);
}

static void *fjord_new(const fl_env *env, sim_err *err)
{
    (void)err;
    return server_new(env, 1);
}

static void width_free(void *p)
{
    width_server *s = p;
    if (!s) return;
    nn_model_destroy(&s->m);
    free(s->global);
    free(s->scratch);
    free(s->acc);
    free(s->mass);
    free(s);
}

static size_t width_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    width_server *s = p;
    double w = job_width(s->env, s->fjord, client, round);
    nn_model_set_width(&s->m, w, 0);
    if (!out) return sub_bytes(nn_model_live_count(&s->m));
    size_t before = out->size;
    pack_sub(out, &s->m, w, s->global);
    return out->size - before;
}

static int width_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                       int fjord, sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    size_t nf = env->arch->layout.n_floats;
    if (env->cost_only) {
        nn_model_set_width(m, job_width(env, fjord, job->client, job->round), 0);
        fl_local_sgd(env, job, m, 0, NULL, res);
        res->up_bytes = sub_bytes(nn_model_live_count(m));
        return SIM_OK;
    }
    double p;
    int rc = unpack_sub(m, m->params, job->down, job->down_len, "down message", &p, err);
    if (rc) return rc;
    memcpy(w->ref, m->params, nf * sizeof(float));
    fl_local_sgd(env, job, m, 0, NULL, res);
    for (size_t j = 0; j < nf; j++) /* the upload is the change of the live parameters */
        w->ref[j] = m->params[j] - w->ref[j];
    pack_sub(&res->up, m, p, w->ref);
    res->up_bytes = res->up.size;
    return SIM_OK;
}

static int heterofl_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                          sim_err *err)
{
    return width_train(env, job, w, res, 0, err);
}

static int fjord_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                       sim_err *err)
{
    return width_train(env, job, w, res, 1, err);
}

static int width_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                        double mass, sim_err *err)
{
    width_server *s = p;
    (void)client;
    double pw;
    int rc = unpack_sub(&s->m, s->scratch, up, len, "up message", &pw, err);
    if (rc) return rc;
    size_t nf = s->env->arch->layout.n_floats;
    for (size_t j = 0; j < nf; j++)
        if (s->m.live[j]) {
            s->acc[j] += weight * (double)s->scratch[j];
            s->mass[j] += mass;
        }
    return SIM_OK;
}

static void width_aggregate(void *p)
{
    width_server *s = p;
    size_t nf = s->env->arch->layout.n_floats;
    for (size_t j = 0; j < nf; j++)
        if (s->mass[j] > 0)
            s->global[j] += (float)(s->env->cfg->server_lr * s->acc[j] / s->mass[j]);
    memset(s->acc, 0, nf * sizeof(double));
    memset(s->mass, 0, nf * sizeof(double));
}

static double width_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    width_server *s = p;
    (void)priv, (void)priv_len;
    const fl_width_config *w = &s->env->cfg->width;
    double at = client < 0 ? w->eval : s->fjord ? w->max : w->p;
    memcpy(m->params, s->global, s->env->arch->layout.n_floats * sizeof(float));
    nn_model_set_width(m, at, 0);
    return nn_model_unit_density(m);
}

/* [global floats, acc doubles, mass doubles], arrays as raw native-order bytes. */
static void width_save(void *p, msgpack_packer *pk)
{
    width_server *s = p;
    size_t nf = s->env->arch->layout.n_floats;
    msgpack_pack_array(pk, 3);
    msgpack_pack_bin(pk, nf * sizeof(float));
    msgpack_pack_bin_body(pk, s->global, nf * sizeof(float));
    msgpack_pack_bin(pk, nf * sizeof(double));
    msgpack_pack_bin_body(pk, s->acc, nf * sizeof(double));
    msgpack_pack_bin(pk, nf * sizeof(double));
    msgpack_pack_bin_body(pk, s->mass, nf * sizeof(double));
}

static int width_load(void *p, const msgpack_object *o, sim_err *err)
{
    width_server *s = p;
    size_t nf = s->env->arch->layout.n_floats;
    const msgpack_object *a =
            o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 3 ? o->via.array.ptr : NULL;
    if (!a || a[0].type != MSGPACK_OBJECT_BIN || a[0].via.bin.size != nf * sizeof(float) ||
        a[1].type != MSGPACK_OBJECT_BIN || a[1].via.bin.size != nf * sizeof(double) ||
        a[2].type != MSGPACK_OBJECT_BIN || a[2].via.bin.size != nf * sizeof(double))
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "server state does not fit %s with a %zu-parameter model",
                        s->env->cfg->name, nf);
    memcpy(s->global, a[0].via.bin.ptr, nf * sizeof(float));
    memcpy(s->acc, a[1].via.bin.ptr, nf * sizeof(double));
    memcpy(s->mass, a[2].via.bin.ptr, nf * sizeof(double));
    return SIM_OK;
}

const fl_algo fl_heterofl = {"heterofl",
                             "HeteroFL: each client trains the width-p sub-model (first channels)",
                             1,
                             heterofl_new,
                             width_free,
                             width_down,
                             heterofl_train,
                             width_absorb,
                             width_aggregate,
                             width_eval,
                             width_save,
                             width_load};
const fl_algo fl_fjord = {"fjord",
                          "FjORD: ordered dropout, a fresh width in [min, max] every job",
                          1,
                          fjord_new,
                          width_free,
                          width_down,
                          fjord_train,
                          width_absorb,
                          width_aggregate,
                          width_eval,
                          width_save,
                          width_load};
