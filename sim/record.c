/* sim/record.c -- structs to and from msgpack arrays by field tables (see record.h). */
#include "sim/record.h"

#include "nn/pack.h"
#include "sim/base.h"

#include <assert.h>
#include <string.h>

/* msgpack elements a record of table t takes */
uint32_t sim_record_len(const sim_field *t, size_t n)
{
    uint32_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += 1 + (t[i].kind == SIM_F_MSG);
    return len;
}

void sim_record_pack_blob(msgpack_packer *pk, const void *p, size_t n)
{
    if (!p) {
        msgpack_pack_nil(pk);
        return;
    }
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, p, n);
}

void sim_record_pack_words(msgpack_packer *pk, const uint64_t *w, size_t n)
{
    msgpack_pack_array(pk, n);
    for (size_t k = 0; k < n; k++)
        msgpack_pack_uint64(pk, w[k]);
}

/* One record: the members of table t at base, as one array. */
void sim_record_pack(msgpack_packer *pk, const sim_field *t, size_t n, const void *base)
{
    msgpack_pack_array(pk, sim_record_len(t, n));
    for (size_t i = 0; i < n; i++) {
        const sim_field *f = &t[i];
        const char *p = (const char *)base + f->off;
        void *blob;
        size_t len;
        switch (f->kind) {
        case SIM_F_INT:
            if (f->size == 4) {
                int32_t v;
                memcpy(&v, p, 4);
                msgpack_pack_int64(pk, v);
            } else {
                int64_t v;
                memcpy(&v, p, 8);
                msgpack_pack_int64(pk, v);
            }
            break;
        case SIM_F_U64: {
            uint64_t v;
            memcpy(&v, p, 8);
            msgpack_pack_uint64(pk, v);
            break;
        }
        case SIM_F_F64: {
            double v;
            memcpy(&v, p, 8);
            msgpack_pack_double(pk, v);
            break;
        }
        case SIM_F_WORDS:
            sim_record_pack_words(pk, (const uint64_t *)(const void *)p, f->size / 8);
            break;
        default: /* SIM_F_BLOB, SIM_F_MSG; a message, when present, holds len bytes */
            memcpy(&blob, p, sizeof blob);
            memcpy(&len, (const char *)base + f->len, sizeof len);
            sim_record_pack_blob(pk, blob, len);
            if (f->kind == SIM_F_MSG) msgpack_pack_uint64(pk, len);
        }
    }
}

/* count records of table t from base (stride bytes apart), as one array */
void sim_record_pack_list(msgpack_packer *pk, const sim_field *t, size_t n, const void *base,
                          size_t stride, size_t count)
{
    msgpack_pack_array(pk, count);
    for (size_t i = 0; i < count; i++)
        sim_record_pack(pk, t, n, (const char *)base + i * stride);
}

/* A bin (copied, owned by the caller) or nil (NULL) into *p, its size into *len; -1 if o is
 * neither. */
static int read_blob(const msgpack_object *o, void **p, size_t *len)
{
    *p = NULL;
    *len = 0;
    if (o->type == MSGPACK_OBJECT_NIL) return 0;
    if (o->type != MSGPACK_OBJECT_BIN) return -1;
    *len = o->via.bin.size;
    *p = sim_xmalloc(*len ? *len : 1);
    memcpy(*p, o->via.bin.ptr, *len);
    return 0;
}

int sim_record_read_u64(const msgpack_object *o, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return -1;
    *v = o->via.u64;
    return 0;
}

/* exactly n words from the array o */
int sim_record_read_words(const msgpack_object *o, uint64_t *w, size_t n)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n) return -1;
    for (size_t k = 0; k < n; k++)
        if (sim_record_read_u64(&o->via.array.ptr[k], &w[k])) return -1;
    return 0;
}

const char *sim_record_read(const msgpack_object *o, const sim_field *t, size_t n, void *base,
                            const int64_t *lim)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != sim_record_len(t, n))
        return "the field count";
    const msgpack_object *v = o->via.array.ptr;
    for (size_t i = 0; i < n; i++, v++) {
        const sim_field *f = &t[i];
        char *p = (char *)base + f->off;
        switch (f->kind) {
        case SIM_F_INT: {
            int64_t x, lo = (f->lo.by ? lim[f->lo.by] : 0) + f->lo.plus,
                       hi = (f->hi.by ? lim[f->hi.by] : 0) + f->hi.plus;
            assert((f->size == 8 || (lo >= INT32_MIN && hi <= INT32_MAX)) && "range fits");
            if (nn_unpack_int(v, lo, hi, &x)) return f->name;
            if (f->size == 4) {
                int32_t x32 = (int32_t)x;
                memcpy(p, &x32, 4);
            } else {
                memcpy(p, &x, 8);
            }
            break;
        }
        case SIM_F_U64: {
            uint64_t x;
            if (sim_record_read_u64(v, &x)) return f->name;
            memcpy(p, &x, 8);
            break;
        }
        case SIM_F_F64:
            if (v->type != MSGPACK_OBJECT_FLOAT64 && v->type != MSGPACK_OBJECT_FLOAT32)
                return f->name;
            memcpy(p, &v->via.f64, 8);
            break;
        case SIM_F_WORDS:
            if (sim_record_read_words(v, (uint64_t *)(void *)p, f->size / 8)) return f->name;
            break;
        default: { /* SIM_F_BLOB, SIM_F_MSG */
            void *blob;
            size_t got;
            int bad = read_blob(v, &blob, &got);
            memcpy(p, &blob, sizeof blob);
            if (f->kind == SIM_F_MSG) {
                uint64_t len = 0;
                bad = bad || sim_record_read_u64(++v, &len) || (blob && got != len);
                got = (size_t)len;
            }
            if (bad) return f->name;
            memcpy((char *)base + f->len, &got, sizeof got);
        }
        }
    }
    return NULL;
}
