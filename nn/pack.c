/* nn/pack.c -- msgpack (de)serialization of model parameters (see pack.h). */
#include "nn/pack.h"

#include <stdlib.h>
#include <string.h>

void nn_pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* float32 → 4 little-endian bytes, whatever the host order */
static void put_le(unsigned char *dst, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    dst[0] = (unsigned char)u;
    dst[1] = (unsigned char)(u >> 8);
    dst[2] = (unsigned char)(u >> 16);
    dst[3] = (unsigned char)(u >> 24);
}

static float get_le(const unsigned char *src)
{
    uint32_t u = (uint32_t)src[0] | (uint32_t)src[1] << 8 | (uint32_t)src[2] << 16 |
                 (uint32_t)src[3] << 24;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

void nn_pack_params(msgpack_sbuffer *sb, const nn_arch *a, const float *params)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    const nn_layout *L = &a->layout;
    msgpack_pack_map(&pk, 3);
    nn_pack_str(&pk, "model");
    nn_pack_str(&pk, a->name);
    nn_pack_str(&pk, "tensors");
    msgpack_pack_array(&pk, (size_t)L->n);
    for (int t = 0; t < L->n; t++) {
        msgpack_pack_array(&pk, 3);
        nn_pack_str(&pk, L->t[t].name);
        msgpack_pack_int(&pk, L->t[t].rows);
        msgpack_pack_int(&pk, L->t[t].cols);
    }
    nn_pack_str(&pk, "data");
    size_t bytes = L->n_params * 4;
    unsigned char *buf = sim_xmalloc(bytes), *p = buf;
    for (int t = 0; t < L->n; t++)
        for (size_t j = 0; j < (size_t)L->t[t].rows * L->t[t].cols; j++, p += 4)
            put_le(p, params[L->t[t].off + j]);
    msgpack_pack_bin(&pk, bytes);
    msgpack_pack_bin_body(&pk, buf, bytes);
    free(buf);
}

static int key_is(const msgpack_object *k, const char *s)
{
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(s) &&
           !memcmp(k->via.str.ptr, s, k->via.str.size);
}

const msgpack_object *nn_map_get(const msgpack_object *o, const char *k)
{
    for (uint32_t i = 0; o->type == MSGPACK_OBJECT_MAP && i < o->via.map.size; i++)
        if (key_is(&o->via.map.ptr[i].key, k)) return &o->via.map.ptr[i].val;
    return NULL;
}

static int check_tensors(const msgpack_object *o, const nn_layout *L, const char *what,
                         sim_err *err)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != (uint32_t)L->n)
        return sim_fail(err, SIM_EFORMAT, what, 0, 0,
                        "expected %d tensors, the message has a different tensor list", L->n);
    for (int t = 0; t < L->n; t++) {
        const msgpack_object *e = &o->via.array.ptr[t];
        const nn_tensor *T = &L->t[t];
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 3 ||
            !key_is(&e->via.array.ptr[0], T->name) ||
            e->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            e->via.array.ptr[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            e->via.array.ptr[1].via.u64 != (uint64_t)T->rows ||
            e->via.array.ptr[2].via.u64 != (uint64_t)T->cols)
            return sim_fail(err, SIM_EFORMAT, what, 0, 0,
                            "tensor %d is not %s (%dx%d) as the model expects", t, T->name, T->rows,
                            T->cols);
    }
    return SIM_OK;
}

int nn_unpack_params(float *params, const nn_arch *a, const void *buf, size_t len, const char *what,
                     sim_err *err)
{
    const nn_layout *L = &a->layout;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = SIM_OK;
    if (msgpack_unpack_next(&u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        u.data.type != MSGPACK_OBJECT_MAP) {
        rc = sim_fail(err, SIM_EFORMAT, what, 0, 0, "not a msgpack map (truncated or corrupt)");
        goto done;
    }
    const msgpack_object *tensors = nn_map_get(&u.data, "tensors"),
                         *data = nn_map_get(&u.data, "data");
    if (!tensors || !data) {
        rc = sim_fail(err, SIM_EFORMAT, what, 0, 0, "missing \"%s\"", tensors ? "data" : "tensors");
        goto done;
    }
    if ((rc = check_tensors(tensors, L, what, err)) != SIM_OK) goto done;
    if (data->type != MSGPACK_OBJECT_BIN || data->via.bin.size != L->n_params * 4) {
        rc = sim_fail(err, SIM_EFORMAT, what, 0, 0, "\"data\" should be %zu bytes of float32",
                      L->n_params * 4);
        goto done;
    }
    const unsigned char *p = (const unsigned char *)data->via.bin.ptr;
    for (int t = 0; t < L->n; t++)
        for (size_t j = 0; j < (size_t)L->t[t].rows * L->t[t].cols; j++, p += 4)
            params[L->t[t].off + j] = get_le(p);
done:
    msgpack_unpacked_destroy(&u);
    return rc;
}

size_t nn_bin_bytes(size_t n)
{
    return (n < 256 ? 2 : n < 65536 ? 3 : 5) + n;
}

void nn_pack_f32(msgpack_packer *pk, const float *v, size_t n)
{
    unsigned char *buf = sim_xmalloc(n * 4 + 1);
    for (size_t j = 0; j < n; j++)
        put_le(buf + 4 * j, v[j]);
    msgpack_pack_bin(pk, n * 4);
    msgpack_pack_bin_body(pk, buf, n * 4);
    free(buf);
}

int nn_unpack_f32(float *v, size_t n, const msgpack_object *o, const char *what, sim_err *err)
{
    if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != n * 4)
        return sim_fail(err, SIM_EFORMAT, what, 0, 0, "expected %zu bytes of float32", n * 4);
    const unsigned char *p = (const unsigned char *)o->via.bin.ptr;
    for (size_t j = 0; j < n; j++)
        v[j] = get_le(p + 4 * j);
    return SIM_OK;
}
