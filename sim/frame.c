/* sim/frame.c -- encode, decode and validate job/result frames; serve one job (see frame.h). */
#include "sim/frame.h"

#include "nn/pack.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A result's fields: status, client, round, up, up_bytes, priv, then the cost terms from COST on,
 * then the loss (LOSS) and steps. */
enum {
    RESULT_OK = 0,
    RESULT_ERR = 1,
    RESULT_COST = 6,
    RESULT_LOSS = RESULT_COST + NN_COST_N,
    RESULT_OK_FIELDS = RESULT_LOSS + 2,
    RESULT_ERR_FIELDS = 5,
};

uint32_t sim_frame_len(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The length prefix is reserved first and filled in by frame_end, so a frame is one buffer. */
static void frame_begin(msgpack_sbuffer *sb, msgpack_packer *pk)
{
    msgpack_sbuffer_clear(sb);
    msgpack_sbuffer_write(sb, "\0\0\0\0", SIM_FRAME_PREFIX);
    msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
}

static void frame_end(msgpack_sbuffer *sb)
{
    uint32_t n = (uint32_t)(sb->size - SIM_FRAME_PREFIX);
    unsigned char *p = (unsigned char *)sb->data;
    p[0] = (unsigned char)(n >> 24), p[1] = (unsigned char)(n >> 16);
    p[2] = (unsigned char)(n >> 8), p[3] = (unsigned char)n;
}

static void pack_bin(msgpack_packer *pk, const void *p, size_t n)
{
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, p, n);
}

/* bin of n bytes at p, or nil when p is NULL */
static void pack_bin_or_nil(msgpack_packer *pk, const void *p, size_t n)
{
    if (p)
        pack_bin(pk, p, n);
    else
        msgpack_pack_nil(pk);
}

/* Every cost term from a[0] on, in nn_cost_terms order: finite floats >= 0. */
static int get_cost(const msgpack_object *a, nn_cost *out)
{
    for (int i = 0; i < NN_COST_N; i++) {
        if (a[i].type != MSGPACK_OBJECT_FLOAT64 && a[i].type != MSGPACK_OBJECT_FLOAT32) return -1;
        double *x = nn_cost_at(out, i);
        *x = a[i].via.f64;
        if (!(isfinite(*x) && *x >= 0)) return -1;
    }
    return 0;
}

/* bin, or nil (allow_nil) for none */
static int get_bin(const msgpack_object *o, int allow_nil, const void **p, size_t *n)
{
    if (allow_nil && o->type == MSGPACK_OBJECT_NIL) {
        *p = NULL, *n = 0;
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_BIN) return -1;
    *p = o->via.bin.ptr, *n = o->via.bin.size;
    return 0;
}

int sim_frame_job(msgpack_sbuffer *sb, const fl_job *job, sim_err *err)
{
    msgpack_packer pk;
    frame_begin(sb, &pk);
    msgpack_pack_array(&pk, 5);
    msgpack_pack_int32(&pk, job->client);
    msgpack_pack_int32(&pk, job->round);
    pack_bin_or_nil(&pk, job->down, job->down_len);
    pack_bin_or_nil(&pk, job->priv, job->priv_len);
    msgpack_pack_uint64(&pk, job->stream);
    frame_end(sb);
    if (sb->size - SIM_FRAME_PREFIX > SIM_FRAME_MAX)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "client %d round %d: the job frame (%zu bytes) exceeds the limit",
                        job->client, job->round, sb->size);
    return SIM_OK;
}

int sim_frame_take_result(const void *body, size_t len, int32_t client, int32_t round,
                          sim_job_out *o, const char **why)
{
    *why = NULL;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    const msgpack_object *a = NULL;
    int64_t kind = -1, c, r, up_bytes = 0, steps = 0, code = 0;
    const void *up = NULL, *priv = NULL;
    size_t up_len = 0, priv_len = 0;
    nn_cost cost = {0};
    if (nn_msgpack_next(&u, body, len, &off, NULL, NULL) || off != len)
        *why = "not one msgpack object, or one declaring more than the frame holds";
    else if (u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size < 3)
        *why = "not an array of at least 3 fields";
    else if (a = u.data.via.array.ptr, nn_unpack_int(&a[0], RESULT_OK, RESULT_ERR, &kind))
        *why = "bad status field";
    else if (nn_unpack_int(&a[1], INT32_MIN, INT32_MAX, &c) || c != client ||
             nn_unpack_int(&a[2], INT32_MIN, INT32_MAX, &r) || r != round)
        *why = "client or round does not match the job";
    else if (kind == RESULT_ERR &&
             (u.data.via.array.size != RESULT_ERR_FIELDS ||
              nn_unpack_int(&a[3], -1000, -1, &code) || a[4].type != MSGPACK_OBJECT_STR ||
              a[4].via.str.size >= sizeof o->err.msg))
        *why = "malformed error result";
    else if (kind == RESULT_OK &&
             (u.data.via.array.size != RESULT_OK_FIELDS || get_bin(&a[3], 0, &up, &up_len) ||
              nn_unpack_int(&a[4], 0, SIM_FRAME_MAX, &up_bytes) ||
              get_bin(&a[5], 0, &priv, &priv_len) || get_cost(&a[RESULT_COST], &cost) ||
              (a[RESULT_LOSS].type != MSGPACK_OBJECT_FLOAT64 &&
               a[RESULT_LOSS].type != MSGPACK_OBJECT_FLOAT32) ||
              nn_unpack_int(&a[RESULT_LOSS + 1], 0, INT32_MAX, &steps)))
        *why = "missing field, wrong type or value out of range";
    else if (kind == RESULT_OK && (size_t)up_bytes != up_len)
        *why = "up_bytes does not match the up message's length";
    if (*why) {
        msgpack_unpacked_destroy(&u);
        return SIM_EFORMAT;
    }
    if (kind == RESULT_ERR) {
        o->rc = (int)code;
        snprintf(o->err.msg, sizeof o->err.msg, "%.*s", (int)a[4].via.str.size, a[4].via.str.ptr);
    } else {
        if (up_len) msgpack_sbuffer_write(&o->res.up, up, up_len);
        if (priv_len) msgpack_sbuffer_write(&o->res.priv, priv, priv_len);
        o->res.up_bytes = (size_t)up_bytes;
        o->res.cost = cost;
        o->res.loss = a[RESULT_LOSS].via.f64;
        o->res.steps = (int)steps;
    }
    msgpack_unpacked_destroy(&u);
    return SIM_OK;
}

/* "K:J" from the environment: 1 when this is worker K's first process and its J-th job. */
static int test_hook(const char *name, int slot, int gen, int job_no)
{
    const char *v = getenv(name);
    int k, j;
    return v && gen == 0 && sscanf(v, "%d:%d", &k, &j) == 2 && k == slot && j == job_no;
}

int sim_frame_serve(const fl_algo *algo, const fl_env *env, fl_worker *w, int slot, int gen,
                    int job_no, const void *body, size_t len, msgpack_sbuffer *out)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    const msgpack_object *a = NULL;
    int64_t client, round;
    fl_job job;
    /* client indexes the partition: one the environment does not have is a malformed frame */
    if (nn_msgpack_next(&u, body, len, &off, NULL, NULL) || off != len ||
        u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size != 5 ||
        !(a = u.data.via.array.ptr) || nn_unpack_int(&a[0], 0, env->part->n_clients - 1, &client) ||
        nn_unpack_int(&a[1], INT32_MIN, INT32_MAX, &round) ||
        get_bin(&a[2], 1, &job.down, &job.down_len) ||
        get_bin(&a[3], 1, &job.priv, &job.priv_len) ||
        a[4].type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        msgpack_unpacked_destroy(&u);
        return SIM_EFORMAT;
    }
    job.client = (int32_t)client;
    job.round = (int32_t)round;
    job.stream = a[4].via.u64;
    if (test_hook("FEDSIM_TEST_WORKER_KILL", slot, gen, job_no)) raise(SIGKILL);
    if (test_hook("FEDSIM_TEST_WORKER_HANG", slot, gen, job_no))
        for (;;) /* a stuck job: only the coordinator's SIGKILL ends it */
            pause();
    fl_result res;
    fl_result_init(&res);
    sim_err err = {0};
    int rc = algo->client_train(env, &job, w, &res, &err);
    msgpack_packer pk;
    frame_begin(out, &pk);
    if (test_hook("FEDSIM_TEST_WORKER_GARBAGE", slot, gen, job_no)) {
        msgpack_sbuffer_write(out, "\xc1 not msgpack", 13); /* 0xc1 is never valid */
    } else if (rc) {
        msgpack_pack_array(&pk, RESULT_ERR_FIELDS);
        msgpack_pack_int(&pk, RESULT_ERR);
        msgpack_pack_int32(&pk, job.client);
        msgpack_pack_int32(&pk, job.round);
        msgpack_pack_int(&pk, rc);
        size_t n = strnlen(err.msg, sizeof err.msg - 1);
        msgpack_pack_str(&pk, n);
        msgpack_pack_str_body(&pk, err.msg, n);
    } else {
        msgpack_pack_array(&pk, RESULT_OK_FIELDS);
        msgpack_pack_int(&pk, RESULT_OK);
        msgpack_pack_int32(&pk, job.client);
        msgpack_pack_int32(&pk, job.round);
        pack_bin(&pk, res.up.data, res.up.size);
        msgpack_pack_uint64(&pk, res.up_bytes);
        pack_bin(&pk, res.priv.data, res.priv.size);
        for (int i = 0; i < NN_COST_N; i++)
            msgpack_pack_double(&pk, nn_cost_get(&res.cost, i));
        msgpack_pack_double(&pk, res.loss);
        msgpack_pack_int(&pk, res.steps);
    }
    frame_end(out);
    fl_result_destroy(&res);
    msgpack_unpacked_destroy(&u);
    return SIM_OK;
}
