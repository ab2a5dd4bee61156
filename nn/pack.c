/* nn/pack.c -- msgpack (de)serialization of model parameters (see pack.h). */
#include "nn/pack.h"

#include <stdarg.h>
#include <stdio.h>
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
    if ((rc = nn_msgpack_next(&u, buf, len, &off, what, err))) goto done;
    if (u.data.type != MSGPACK_OBJECT_MAP) {
        rc = sim_fail(err, SIM_EFORMAT, what, 0, 0, "not a msgpack map");
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

int nn_unpack_int(const msgpack_object *o, int64_t lo, int64_t hi, int64_t *out)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= (uint64_t)INT64_MAX)
        *out = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = o->via.i64;
    else
        return -1;
    return *out >= lo && *out <= hi ? 0 : -1;
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

/* ---------------------------------------------------------------------------------------- */
/* the guard in front of msgpack-c (pack.h) */

enum { MP_SCALAR, MP_BYTES, MP_ARRAY, MP_MAP };

/* The n-byte big-endian unsigned at p (n <= 4). */
static uint64_t get_be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int k = 0; k < n; k++)
        v = v << 8 | p[k];
    return v;
}

/* What the header byte c starts: its kind, the bytes of its header before any payload (*hdr,
 * including a length field of *lenb bytes after c), and for fix types the count or length c
 * holds (*fix). 0 when c is the one byte msgpack never uses. */
static int mp_header(unsigned c, int *kind, size_t *hdr, int *lenb, uint64_t *fix)
{
    *kind = MP_SCALAR, *hdr = 1, *lenb = 0, *fix = 0;
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) return 1;
    if (c <= 0x8f) return *kind = MP_MAP, *fix = c & 15, 1;
    if (c <= 0x9f) return *kind = MP_ARRAY, *fix = c & 15, 1;
    if (c <= 0xbf) return *kind = MP_BYTES, *fix = c & 31, 1;
    switch (c) {
    case 0xc4: /* bin 8, 16, 32 */
    case 0xd9: /* str 8, 16, 32 */
        return *kind = MP_BYTES, *lenb = 1, *hdr = 2, 1;
    case 0xc5:
    case 0xda:
        return *kind = MP_BYTES, *lenb = 2, *hdr = 3, 1;
    case 0xc6:
    case 0xdb:
        return *kind = MP_BYTES, *lenb = 4, *hdr = 5, 1;
    case 0xc7: /* ext 8, 16, 32: the length, then a type byte */
        return *kind = MP_BYTES, *lenb = 1, *hdr = 3, 1;
    case 0xc8:
        return *kind = MP_BYTES, *lenb = 2, *hdr = 4, 1;
    case 0xc9:
        return *kind = MP_BYTES, *lenb = 4, *hdr = 6, 1;
    case 0xcc: /* uint 8, int 8 */
    case 0xd0:
        return *hdr = 2, 1;
    case 0xcd:
    case 0xd1:
        return *hdr = 3, 1;
    case 0xca: /* float 32, uint 32, int 32 */
    case 0xce:
    case 0xd2:
        return *hdr = 5, 1;
    case 0xcb:
    case 0xcf:
    case 0xd3:
        return *hdr = 9, 1;
    case 0xd4: /* fixext 1, 2, 4, 8, 16: type byte and data */
        return *hdr = 3, 1;
    case 0xd5:
        return *hdr = 4, 1;
    case 0xd6:
        return *hdr = 6, 1;
    case 0xd7:
        return *hdr = 10, 1;
    case 0xd8:
        return *hdr = 18, 1;
    case 0xdc: /* array 16, 32 */
        return *kind = MP_ARRAY, *lenb = 2, *hdr = 3, 1;
    case 0xdd:
        return *kind = MP_ARRAY, *lenb = 4, *hdr = 5, 1;
    case 0xde: /* map 16, 32 */
        return *kind = MP_MAP, *lenb = 2, *hdr = 3, 1;
    case 0xdf:
        return *kind = MP_MAP, *lenb = 4, *hdr = 5, 1;
    default: /* 0xc1 */
        return 0;
    }
}

/* Refuse the object at byte `at`: *more says whether more bytes could complete it. */
static int mp_refuse(int *more, int can_grow, sim_err *err, const char *what, size_t at,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int mp_refuse(int *more, int can_grow, sim_err *err, const char *what, size_t at,
                     const char *fmt, ...)
{
    if (more) *more = can_grow;
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return sim_fail(err, SIM_EFORMAT, what, 0, 0, "byte %zu: %s", at, why);
}

int nn_msgpack_check(const void *buf, size_t len, size_t base, size_t *end, int *more,
                     const char *what, sim_err *err)
{
    const unsigned char *p = buf;
    uint64_t left[NN_MSGPACK_DEPTH]; /* objects still to read in each open container */
    uint64_t pending = 1;            /* objects still to read in all, each at least one byte */
    int depth = 0;
    size_t i = 0;
    if (more) *more = 0;
    if (!p) len = 0;
    do {
        size_t rem = len - i; /* >= pending: checked when they were declared */
        *end = i;
        if (!rem)
            return mp_refuse(more, 1, err, what, base + i,
                             "the data ends with %llu msgpack object(s) missing (truncated)",
                             (unsigned long long)pending);
        int kind, lenb;
        size_t hdr;
        uint64_t n;
        if (!mp_header(p[i], &kind, &hdr, &lenb, &n))
            return mp_refuse(more, 0, err, what, base + i, "0x%02x starts no msgpack object", p[i]);
        pending--;
        if (hdr > rem - pending)
            return mp_refuse(more, 1, err, what, base + i,
                             "the data ends inside a msgpack header (truncated)");
        if (lenb) n = get_be(p + i + 1, lenb);
        uint64_t items = kind == MP_ARRAY ? n : kind == MP_MAP ? 2 * n : 0;
        size_t avail = rem - pending - hdr; /* bytes this object's contents may take */
        if (kind == MP_BYTES && n > avail)
            return mp_refuse(more, 1, err, what, base + i,
                             "a string or bin declares %llu bytes, more than the %zu that remain",
                             (unsigned long long)n, avail);
        if (items > avail)
            return mp_refuse(more, 1, err, what, base + i,
                             "%s declares %llu %s, more than the %zu bytes that remain can hold",
                             kind == MP_MAP ? "a map" : "an array", (unsigned long long)n,
                             kind == MP_MAP ? "entries" : "elements", avail);
        if (depth) left[depth - 1]--;
        if (items) {
            if (depth == NN_MSGPACK_DEPTH)
                return mp_refuse(more, 0, err, what, base + i,
                                 "arrays and maps nested deeper than %d", NN_MSGPACK_DEPTH);
            left[depth++] = items;
            pending += items;
        }
        while (depth && !left[depth - 1])
            depth--;
        i += hdr + (kind == MP_BYTES ? (size_t)n : 0);
    } while (depth);
    *end = i;
    return SIM_OK;
}

int nn_msgpack_next(msgpack_unpacked *u, const void *buf, size_t len, size_t *off, const char *what,
                    sim_err *err)
{
    size_t n, o = *off;
    int rc = nn_msgpack_check(buf ? (const char *)buf + o : NULL, buf ? len - o : 0, o, &n, NULL,
                              what, err);
    if (rc) return rc;
    /* msgpack-c sees only the checked bytes; it unpacks them, unless it runs out of memory */
    if (msgpack_unpack_next(u, buf, o + n, &o) != MSGPACK_UNPACK_SUCCESS)
        return sim_fail(err, SIM_EFORMAT, what, 0, 0, "byte %zu: msgpack-c cannot unpack it", *off);
    *off = o;
    return SIM_OK;
}
