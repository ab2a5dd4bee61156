/* algos/compress.c -- the scenario's `compression:` as algorithms use it: a model or an update
 * sent as the dense parameter message (nn/pack.h) when the direction's scheme is none, else as
 * a compressed message (nn/compress.h) of its values; and error feedback's residual.
 *
 * A message carries the whole model (its n_params values) or a slice of it (fl_slice: the split
 * family's shared layers, the width family's sub-model), the values in layout order either way.
 *
 * Error feedback (Seide et al. 2014, Karimireddy et al. 2019): the client adds what its last
 * message left out (the residual e) to its new update before compressing, and keeps
 * e = (update + e) − decoded for the next job, so nothing is lost for ever, only delayed. The
 * residual lives in the client's private state as one map {"residual": bin of float32} after
 * whatever the algorithm keeps there (its own objects, then fl_momentum_save's momentum), found
 * by its key, so it coexists with both. A client's first job has none (zero). It holds the
 * values of the slice's `over` parameters (the whole model's when there is no slice), of which
 * a message sends `keep`: what it leaves out of the others waits for a job that sends them.
 *
 * A message may carry a second vector (SCAFFOLD's control variate and its change: part 1); its
 * residual is kept under "residual1".
 *
 * Random draws (randk's seed, qsgd's rounding) come from the stream (seed, SIM_RNG_COMPRESS,
 * the job's stream) for an upload's part 0, and for part p > 0 from a stream seeded by that
 * stream's p-th draw; a download's from (seed, SIM_RNG_COMPRESS, 1 << 62 | part << 60 | client
 * << 32 | round): a function of the job alone, so any worker count sends the same bytes.
 */
#include "algos/algo.h"

#include "nn/pack.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static const nn_comp *active(const nn_comp *c)
{
    return c && c->scheme != NN_COMP_NONE ? c : NULL;
}

const nn_comp *fl_comp_up(const fl_env *env)
{
    return active(env->comp_up);
}

const nn_comp *fl_comp_down(const fl_env *env)
{
    return active(env->comp_down);
}

/* The positions of a's parameters that mask selects (NULL: all), in layout order, into idx
 * (room for n_floats); returns how many. */
static size_t positions(const nn_arch *a, const uint8_t *mask, size_t *idx)
{
    const nn_layout *L = &a->layout;
    size_t n = 0;
    for (int t = 0; t < L->n; t++)
        for (size_t j = L->t[t].off, end = j + (size_t)L->t[t].rows * L->t[t].cols; j < end; j++)
            if (!mask || mask[j]) idx[n++] = j;
    return n;
}

/* The parameters sl keeps (sl NULL: the whole model) into a fresh index list; *n their count. */
static size_t *kept(const nn_arch *a, const fl_slice *sl, size_t *n)
{
    size_t *idx = sim_xmalloc((a->layout.n_floats + 1) * sizeof(size_t));
    *n = positions(a, sl ? sl->keep : NULL, idx);
    return idx;
}

size_t fl_down_bytes(const fl_env *env)
{
    const nn_comp *c = fl_comp_down(env);
    return c ? nn_comp_bytes(c, env->arch->layout.n_params) : fl_dense_msg_bytes(env->arch);
}

size_t fl_up_bytes(const fl_env *env)
{
    const nn_comp *c = fl_comp_up(env);
    return c ? nn_comp_bytes(c, env->arch->layout.n_params) : fl_dense_msg_bytes(env->arch);
}

void fl_down_encode(const fl_env *env, const float *params, const fl_slice *sl, int32_t client,
                    int32_t round, int part, msgpack_sbuffer *out)
{
    const nn_comp *c = fl_comp_down(env);
    assert(c);
    size_t n, *idx = kept(env->arch, sl, &n);
    float *v = sim_xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = params[idx[i]];
    sim_rng r;
    sim_rng_seed(&r, env->seed, SIM_RNG_COMPRESS,
                 1ull << 62 | (uint64_t)part << 60 | (uint64_t)(uint32_t)client << 32 |
                         (uint32_t)round);
    nn_comp_encode(out, c, v, n, &r, NULL);
    free(v);
    free(idx);
}

void fl_down_pack(const fl_env *env, const float *params, int32_t client, int32_t round, int part,
                  msgpack_sbuffer *out)
{
    if (fl_comp_down(env))
        fl_down_encode(env, params, NULL, client, round, part, out);
    else
        nn_pack_params(out, env->arch, params);
}

int fl_comp_decode(const fl_env *env, float *params, const fl_slice *sl, const msgpack_object *o,
                   const char *what, sim_err *err)
{
    size_t n, *idx = kept(env->arch, sl, &n);
    float *v = sim_xmalloc((n ? n : 1) * sizeof(float));
    int rc = nn_comp_decode(v, n, o, what, err);
    for (size_t i = 0; i < n && !rc; i++)
        params[idx[i]] = v[i];
    free(v);
    free(idx);
    return rc;
}

int fl_comp_decode_buf(const fl_env *env, float *params, const fl_slice *sl, const void *buf,
                       size_t len, const char *what, sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = nn_msgpack_next(&u, buf, len, &off, what, err);
    if (!rc) rc = fl_comp_decode(env, params, sl, &u.data, what, err);
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* Decode a model or update of direction c (NULL: dense) into params (n_floats, padding left). */
static int unpack(const fl_env *env, const nn_comp *c, float *params, const void *buf, size_t len,
                  const char *what, sim_err *err)
{
    if (!c) return nn_unpack_params(params, env->arch, buf, len, what, err);
    return fl_comp_decode_buf(env, params, NULL, buf, len, what, err);
}

int fl_down_unpack(const fl_env *env, float *params, const void *buf, size_t len, sim_err *err)
{
    return unpack(env, fl_comp_down(env), params, buf, len, "down message", err);
}

int fl_up_unpack(const fl_env *env, float *params, const void *buf, size_t len, sim_err *err)
{
    return unpack(env, fl_comp_up(env), params, buf, len, "up message", err);
}

/* The residual of part kept in priv (n values) into e; zero when there is none. */
static int residual_load(const void *priv, size_t len, const char *key, float *e, size_t n,
                         sim_err *err)
{
    memset(e, 0, n * sizeof(float));
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    int rc = SIM_OK;
    for (size_t off = 0; priv && off < len && !rc;) {
        if (nn_msgpack_next(&u, priv, len, &off, "private state", err)) {
            rc = SIM_EFORMAT;
            break;
        }
        const msgpack_object *v = nn_map_get(&u.data, key);
        if (v) rc = nn_unpack_f32(e, n, v, "kept residual", err);
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* With error feedback the residual is held in model coordinates (E, n_floats) between its
 * load and its save, so a slice gathers and scatters it through its own positions; the sums
 * are those of the whole-model message, value by value. */
int fl_up_encode(const fl_env *env, const fl_job *job, const float *delta, const fl_slice *sl,
                 int part, fl_result *res, sim_err *err)
{
    const nn_comp *c = fl_comp_up(env);
    assert(c);
    size_t n, *idx = kept(env->arch, sl, &n), m = 0, *ov = NULL;
    float *v = sim_xmalloc(2 * (n ? n : 1) * sizeof(float)), *sent = v + n, *e = NULL, *E = NULL;
    for (size_t i = 0; i < n; i++)
        v[i] = delta[idx[i]];
    int rc = SIM_OK;
    const char *key = part ? "residual1" : "residual";
    if (c->error_feedback) {
        size_t nf = env->arch->layout.n_floats;
        ov = sim_xmalloc((nf + 1) * sizeof(size_t));
        m = positions(env->arch, sl ? sl->over : NULL, ov);
        e = sim_xmalloc((m ? m : 1) * sizeof(float));
        E = sim_xcalloc(nf + 1, sizeof(float));
        rc = residual_load(job->priv, job->priv_len, key, e, m, err);
        for (size_t i = 0; i < m; i++)
            E[ov[i]] = e[i];
        for (size_t i = 0; i < n && !rc; i++) {
            assert(!sl || !sl->over || sl->over[idx[i]]); /* keep within over */
            v[i] += E[idx[i]];
        }
    }
    if (!rc) {
        sim_rng r;
        sim_rng_seed(&r, env->seed, SIM_RNG_COMPRESS, job->stream);
        if (part) {
            uint64_t sub = 0;
            for (int p = 0; p < part; p++)
                sub = sim_rng_u64(&r);
            sim_rng_seed(&r, sub, SIM_RNG_COMPRESS, (uint64_t)part);
        }
        nn_comp_encode(&res->up, c, v, n, &r, sent);
    }
    if (!rc && c->error_feedback) {
        for (size_t i = 0; i < n; i++)
            E[idx[i]] = v[i] - sent[i];
        for (size_t i = 0; i < m; i++)
            e[i] = E[ov[i]];
        msgpack_packer pk;
        msgpack_packer_init(&pk, &res->priv, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 1);
        nn_pack_str(&pk, key);
        nn_pack_f32(&pk, e, m);
    }
    free(v);
    free(idx);
    free(ov);
    free(e);
    free(E);
    return rc;
}

int fl_up_pack(const fl_env *env, const fl_job *job, const float *delta, int part, fl_result *res,
               sim_err *err)
{
    int rc = SIM_OK;
    if (fl_comp_up(env))
        rc = fl_up_encode(env, job, delta, NULL, part, res, err);
    else
        nn_pack_params(&res->up, env->arch, delta);
    res->up_bytes = res->up.size;
    return rc;
}
