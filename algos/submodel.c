/* algos/submodel.c -- sub-model messages and per-parameter averaging (see submodel.h). */
#include "algos/submodel.h"

#include "nn/pack.h"

#include <stdlib.h>
#include <string.h>

int fl_sub_units(const nn_arch *a)
{
    int h = 0;
    for (int i = 0; i < a->n; i++)
        if (a->l[i].narrow) h += a->l[i].oc;
    return h;
}

size_t fl_sub_head_bytes(const nn_arch *a)
{
    size_t ub = ((size_t)fl_sub_units(a) + 7) / 8;
    return 6 + nn_bin_bytes(ub) + 5; /* "units" and its bin, "data" */
}

size_t fl_sub_bytes(const nn_arch *a, size_t n_live)
{
    return fl_sub_head_bytes(a) + nn_bin_bytes(4 * n_live);
}

void fl_sub_pack_units(msgpack_packer *pk, const nn_model *m)
{
    const nn_arch *a = &m->arch;
    size_t ub = ((size_t)fl_sub_units(a) + 7) / 8;
    unsigned char *bits = sim_xcalloc(ub + 1, 1);
    int u = 0;
    for (int i = 0; i < a->n; i++) {
        if (!a->l[i].narrow) continue;
        for (int j = 0; j < (m->list[i] ? m->nlist[i] : a->l[i].oc); j++) {
            int b = u + (m->list[i] ? m->list[i][j] : j);
            bits[b / 8] |= (unsigned char)(1u << (b % 8));
        }
        u += a->l[i].oc;
    }
    nn_pack_str(pk, "units");
    msgpack_pack_bin(pk, ub);
    msgpack_pack_bin_body(pk, bits, ub);
    free(bits);
}

void fl_sub_pack(msgpack_packer *pk, const nn_model *m, const float *v)
{
    size_t nf = m->arch.layout.n_floats, n = 0;
    fl_sub_pack_units(pk, m);
    float *buf = sim_xmalloc(sizeof(float) * (nf + 1));
    for (size_t j = 0; j < nf; j++)
        if (m->live[j]) buf[n++] = v[j];
    nn_pack_str(pk, "data");
    nn_pack_f32(pk, buf, n);
    free(buf);
}

const msgpack_object *fl_sub_unpack_units(nn_model *m, const msgpack_object *o, const char *what,
                                          sim_err *err)
{
    const nn_arch *a = &m->arch;
    int h = fl_sub_units(a);
    size_t ub = ((size_t)h + 7) / 8;
    const msgpack_object *units = nn_map_get(o, "units"), *data = nn_map_get(o, "data");
    if (!units || units->type != MSGPACK_OBJECT_BIN || units->via.bin.size != ub || !data) {
        sim_fail(err, SIM_EFORMAT, what, 0, 0,
                 "not a sub-model message (\"units\": %zu bytes, \"data\")", ub);
        return NULL;
    }
    const unsigned char *bits = (const unsigned char *)units->via.bin.ptr;
    uint8_t *keep = sim_xmalloc((size_t)h + 1);
    for (int b = 0; b < h; b++)
        keep[b] = (bits[b / 8] >> (b % 8)) & 1;
    const uint8_t *rows[NN_MAX_LAYERS] = {0};
    for (int i = 0, u = 0; i < a->n; i++)
        if (a->l[i].narrow) {
            rows[i] = keep + u;
            u += a->l[i].oc;
        }
    nn_model_set_row_masks(m, rows);
    free(keep);
    return data;
}

int fl_sub_unpack(nn_model *m, float *v, const msgpack_object *o, const char *what, sim_err *err)
{
    size_t nf = m->arch.layout.n_floats;
    const msgpack_object *data = fl_sub_unpack_units(m, o, what, err);
    if (!data) return SIM_EFORMAT;
    size_t n = nn_model_live_count(m);
    float *vals = sim_xmalloc(sizeof(float) * (n + 1));
    int rc = nn_unpack_f32(vals, n, data, what, err);
    if (!rc)
        for (size_t j = 0, k = 0; j < nf; j++)
            if (m->live[j]) v[j] = vals[k++];
    free(vals);
    return rc;
}

void fl_sub_acc_init(fl_sub_acc *s, size_t n_floats)
{
    s->n = n_floats;
    s->acc = sim_xcalloc(n_floats, sizeof(double));
    s->mass = sim_xcalloc(n_floats, sizeof(double));
}

void fl_sub_acc_free(fl_sub_acc *s)
{
    free(s->acc);
    free(s->mass);
    memset(s, 0, sizeof *s);
}

void fl_sub_acc_add(fl_sub_acc *s, const nn_model *m, const float *delta, double weight,
                    double mass)
{
    for (size_t j = 0; j < s->n; j++)
        if (m->live[j]) {
            s->acc[j] += weight * (double)delta[j];
            s->mass[j] += mass;
        }
}

void fl_sub_acc_apply(fl_sub_acc *s, float *global, double server_lr)
{
    for (size_t j = 0; j < s->n; j++)
        if (s->mass[j] > 0) global[j] += (float)(server_lr * s->acc[j] / s->mass[j]);
    memset(s->acc, 0, s->n * sizeof(double));
    memset(s->mass, 0, s->n * sizeof(double));
}

void fl_sub_acc_save(const fl_sub_acc *s, msgpack_packer *pk)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_bin(pk, s->n * sizeof(double));
    msgpack_pack_bin_body(pk, s->acc, s->n * sizeof(double));
    msgpack_pack_bin(pk, s->n * sizeof(double));
    msgpack_pack_bin_body(pk, s->mass, s->n * sizeof(double));
}

int fl_sub_acc_load(fl_sub_acc *s, const msgpack_object *o)
{
    const msgpack_object *a =
            o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 2 ? o->via.array.ptr : NULL;
    if (!a || a[0].type != MSGPACK_OBJECT_BIN || a[0].via.bin.size != s->n * sizeof(double) ||
        a[1].type != MSGPACK_OBJECT_BIN || a[1].via.bin.size != s->n * sizeof(double))
        return SIM_EFORMAT;
    memcpy(s->acc, a[0].via.bin.ptr, s->n * sizeof(double));
    memcpy(s->mass, a[1].via.bin.ptr, s->n * sizeof(double));
    return SIM_OK;
}
