/* algos/compress.c -- the scenario's `compression:` as algorithms use it: a model or an update
 * sent as the dense parameter message (nn/pack.h) when the direction's scheme is none, else as
 * a compressed message (nn/compress.h) of its n_params values; and error feedback's residual.
 *
 * Error feedback (Seide et al. 2014, Karimireddy et al. 2019): the client adds what its last
 * message left out (the residual e) to its new update before compressing, and keeps
 * e = (update + e) − decoded for the next job, so nothing is lost for ever, only delayed. The
 * residual lives in the client's private state as one map {"residual": bin of float32} after
 * whatever the algorithm keeps there (its own objects, then fl_momentum_save's momentum), found
 * by its key, so it coexists with both. A client's first job has none (zero).
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

#include <stdlib.h>
#include <string.h>

static const nn_comp *active(const nn_comp *c)
{
    return c && c->scheme != NN_COMP_NONE ? c : NULL;
}

size_t fl_down_bytes(const fl_env *env)
{
    const nn_comp *c = active(env->comp_down);
    return c ? nn_comp_bytes(c, env->arch->layout.n_params) : fl_dense_msg_bytes(env->arch);
}

size_t fl_up_bytes(const fl_env *env)
{
    const nn_comp *c = active(env->comp_up);
    return c ? nn_comp_bytes(c, env->arch->layout.n_params) : fl_dense_msg_bytes(env->arch);
}

void fl_down_pack(const fl_env *env, const float *params, int32_t client, int32_t round, int part,
                  msgpack_sbuffer *out)
{
    const nn_comp *c = active(env->comp_down);
    if (!c) {
        nn_pack_params(out, env->arch, params);
        return;
    }
    size_t n = env->arch->layout.n_params;
    float *v = sim_xmalloc((n ? n : 1) * sizeof(float));
    nn_comp_gather(env->arch, params, v);
    sim_rng r;
    sim_rng_seed(&r, env->seed, SIM_RNG_COMPRESS,
                 1ull << 62 | (uint64_t)part << 60 | (uint64_t)(uint32_t)client << 32 |
                         (uint32_t)round);
    nn_comp_encode(out, c, v, n, &r, NULL);
    free(v);
}

/* Decode a model or update of direction c (NULL: dense) into params (n_floats, padding left). */
static int unpack(const fl_env *env, const nn_comp *c, float *params, const void *buf, size_t len,
                  const char *what, sim_err *err)
{
    if (!c) return nn_unpack_params(params, env->arch, buf, len, what, err);
    size_t n = env->arch->layout.n_params;
    float *v = sim_xmalloc((n ? n : 1) * sizeof(float));
    int rc = nn_comp_decode_buf(v, n, buf, len, NULL, what, err);
    if (!rc) nn_comp_scatter(env->arch, v, params);
    free(v);
    return rc;
}

int fl_down_unpack(const fl_env *env, float *params, const void *buf, size_t len, sim_err *err)
{
    return unpack(env, active(env->comp_down), params, buf, len, "down message", err);
}

int fl_up_unpack(const fl_env *env, float *params, const void *buf, size_t len, sim_err *err)
{
    return unpack(env, active(env->comp_up), params, buf, len, "up message", err);
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

int fl_up_pack(const fl_env *env, const fl_job *job, const float *delta, int part, fl_result *res,
               sim_err *err)
{
    const nn_comp *c = active(env->comp_up);
    if (!c) {
        nn_pack_params(&res->up, env->arch, delta);
        res->up_bytes = res->up.size;
        return SIM_OK;
    }
    size_t n = env->arch->layout.n_params;
    float *v = sim_xmalloc(3 * (n ? n : 1) * sizeof(float)), *e = v + n, *sent = e + n;
    nn_comp_gather(env->arch, delta, v);
    int rc = SIM_OK;
    const char *key = part ? "residual1" : "residual";
    if (c->error_feedback) {
        rc = residual_load(job->priv, job->priv_len, key, e, n, err);
        for (size_t i = 0; i < n && !rc; i++)
            v[i] += e[i];
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
        res->up_bytes = res->up.size;
    }
    if (!rc && c->error_feedback) {
        for (size_t i = 0; i < n; i++)
            e[i] = v[i] - sent[i];
        msgpack_packer pk;
        msgpack_packer_init(&pk, &res->priv, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 1);
        nn_pack_str(&pk, key);
        nn_pack_f32(&pk, e, n);
    }
    free(v);
    return rc;
}
