/* algos/dmpfl_masks.c -- DM-PFL's masks (dmpfl.h; spec 001): which tensors carry them, Eq. 4's
 * composition of a personalized model from the global and private weights under their masks, the
 * prune-by-magnitude / regrow-by-gradient readjustment (an exact top-k), and the message format
 * that carries a mask and the weights under it. The algorithm itself (schedule, server, jobs,
 * evaluation) is algos/dmpfl.c; everything here is a pure function of its arguments.
 */
#include "algos/dmpfl.h"

#include "nn/pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* shapes, composition, readjustment */

void fl_dm_shape_init(fl_dm_shape *s, const nn_arch *a, double density, int skip_first)
{
    memset(s, 0, sizeof *s);
    s->a = a;
    int first = 1;
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        if ((l->op != NN_LINEAR && l->op != NN_CONV) || l->wt < 0) continue;
        int skip = skip_first < 0 ? l->op == NN_CONV : skip_first;
        if (!(first && skip)) {
            size_t n = fl_dm_numel(&a->layout.t[l->wt]);
            size_t k = (size_t)ceil(density * (double)n - 1e-9);
            s->masked[l->wt] = 1;
            s->keep[l->wt] = k < 1 ? 1 : k > n ? n : k;
        }
        first = 0;
    }
    for (int t = 0; t < a->layout.n; t++) {
        size_t n = fl_dm_numel(&a->layout.t[t]);
        if (s->masked[t]) {
            s->n_masked += n;
            s->n_keep += s->keep[t];
        } else {
            s->n_dense += n;
        }
    }
}

void fl_dm_compose(float *theta, const fl_dm_shape *s, const float *wg, const uint8_t *mg,
                   const float *wc, const uint8_t *mc)
{
    const nn_layout *L = &s->a->layout;
    memset(theta, 0, L->n_floats * sizeof(float));
    for (int t = 0; t < L->n; t++) {
        size_t off = L->t[t].off, n = fl_dm_numel(&L->t[t]);
        if (!s->masked[t]) {
            memcpy(theta + off, wg + off, n * sizeof(float));
            continue;
        }
        for (size_t j = off; j < off + n; j++)
            theta[j] = !mc[j] ? 0.0f : mg[j] ? wg[j] : wc[j];
    }
}

typedef struct keyed {
    float v;
    uint32_t i;
} keyed;

/* The order of fl_dm_topk: larger |key| first, ties to the lower index (a strict total order,
 * so the k first are one set whatever the algorithm that finds them). */
static int before(keyed x, keyed y)
{
    return x.v > y.v || (x.v == y.v && x.i < y.i);
}

static void swap_keyed(keyed *a, keyed *b)
{
    keyed t = *a;
    *a = *b;
    *b = t;
}

/* Rearrange v so that v[0..k) are its k first elements (in no particular order): quickselect with
 * a median-of-three pivot, O(m) on average where sorting took O(m log m) and ~8% of a cnn2
 * DM-PFL run (its 1.6M-weight layer's masks are re-chosen after every job and every round). */
static void select_first(keyed *v, size_t m, size_t k)
{
    size_t lo = 0, hi = m;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        if (before(v[mid], v[lo])) swap_keyed(&v[mid], &v[lo]);
        if (before(v[last], v[mid])) swap_keyed(&v[last], &v[mid]);
        if (before(v[mid], v[lo])) swap_keyed(&v[mid], &v[lo]);
        swap_keyed(&v[mid], &v[last]); /* the median of the three is the pivot, kept at the end */
        keyed pivot = v[last];
        size_t store = lo;
        for (size_t j = lo; j < last; j++)
            if (before(v[j], pivot)) {
                swap_keyed(&v[store], &v[j]);
                store++;
            }
        swap_keyed(&v[store], &v[last]);
        if (store == k || store + 1 == k) return;
        if (k < store)
            hi = store;
        else
            lo = store + 1;
    }
}

void fl_dm_topk(uint8_t *out, const float *key, const uint8_t *cand, size_t n, size_t k)
{
    keyed *v = sim_xmalloc(sizeof *v * (n ? n : 1));
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!cand || cand[i]) v[m++] = (keyed){fabsf(key[i]), (uint32_t)i};
    if (k > m) k = m;
    if (k < m) select_first(v, m, k);
    for (size_t j = 0; j < k; j++)
        out[v[j].i] = 1;
    free(v);
}

size_t fl_dm_count(const fl_dm_shape *s, const uint8_t *mask)
{
    const nn_layout *L = &s->a->layout;
    size_t c = 0;
    for (int t = 0; t < L->n; t++)
        for (size_t j = L->t[t].off; s->masked[t] && j < L->t[t].off + fl_dm_numel(&L->t[t]); j++)
            c += mask[j] != 0;
    return c;
}

void fl_dm_readjust(const fl_dm_shape *s, float *w, uint8_t *mask, const float *grad, double alpha)
{
    const nn_layout *L = &s->a->layout;
    for (int t = 0; t < L->n; t++) {
        if (!s->masked[t]) continue;
        size_t off = L->t[t].off, n = fl_dm_numel(&L->t[t]), nnz = 0;
        uint8_t *m = mask + off, *old = sim_xmalloc(n), *free_pos = sim_xmalloc(n);
        for (size_t j = 0; j < n; j++)
            nnz += (m[j] = m[j] != 0);
        memcpy(old, m, n);
        size_t k = (size_t)ceil(alpha * (double)nnz - 1e-9);
        if (k > nnz) k = nnz;
        memset(m, 0, n); /* prune: keep the nnz − k largest |w| of the active */
        fl_dm_topk(m, w + off, old, n, nnz - k);
        size_t kept = nnz - k, grow = s->keep[t] > kept ? s->keep[t] - kept : 0;
        for (size_t j = 0; j < n; j++)
            free_pos[j] = !m[j];
        fl_dm_topk(m, grad + off, free_pos, n, grow); /* regrow, the just-pruned included */
        for (size_t j = 0; j < n; j++)
            if (!m[j] || !old[j]) w[off + j] = 0;
        free(old);
        free(free_pos);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* messages */

static void pack_bitmap(msgpack_packer *pk, const fl_dm_shape *s, const uint8_t *mask)
{
    const nn_layout *L = &s->a->layout;
    size_t nb = (s->n_masked + 7) / 8, b = 0;
    unsigned char *bits = sim_xcalloc(nb + 1, 1);
    for (int t = 0; t < L->n; t++)
        for (size_t j = L->t[t].off; s->masked[t] && j < L->t[t].off + fl_dm_numel(&L->t[t]);
             j++, b++)
            if (mask[j]) bits[b / 8] |= (unsigned char)(1u << (b % 8));
    msgpack_pack_bin(pk, nb);
    msgpack_pack_bin_body(pk, bits, nb);
    free(bits);
}

/* The masked positions set in mask (dense 0) or the dense tensors (dense 1), gathered in layout
 * order into v; returns their count. */
static size_t gather(float *v, const fl_dm_shape *s, const uint8_t *mask, const float *w, int dense)
{
    const nn_layout *L = &s->a->layout;
    size_t k = 0;
    for (int t = 0; t < L->n; t++) {
        size_t off = L->t[t].off, n = fl_dm_numel(&L->t[t]);
        if (dense && !s->masked[t]) {
            memcpy(v + k, w + off, n * sizeof(float));
            k += n;
        }
        for (size_t j = off; !dense && s->masked[t] && j < off + n; j++)
            if (mask[j]) v[k++] = w[j];
    }
    return k;
}

static void scatter(float *w, const fl_dm_shape *s, const uint8_t *mask, const float *v, int dense)
{
    const nn_layout *L = &s->a->layout;
    size_t k = 0;
    for (int t = 0; t < L->n; t++) {
        size_t off = L->t[t].off, n = fl_dm_numel(&L->t[t]);
        if (dense && !s->masked[t]) {
            memcpy(w + off, v + k, n * sizeof(float));
            k += n;
        }
        for (size_t j = off; !dense && s->masked[t] && j < off + n; j++)
            if (mask[j]) w[j] = v[k++];
    }
}

static void pack_vals(msgpack_packer *pk, const fl_dm_shape *s, const uint8_t *mask, const float *w,
                      int dense)
{
    float *v = sim_xmalloc(sizeof(float) * ((dense ? s->n_dense : s->n_masked) + 1));
    size_t k = gather(v, s, mask, w, dense);
    nn_pack_f32(pk, v, k);
    free(v);
}

void fl_dm_pack(msgpack_sbuffer *sb, const fl_dm_shape *s, int with_mask, const uint8_t *mask,
                const float *w)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, with_mask ? 3 : 2);
    if (with_mask) {
        nn_pack_str(&pk, "mask");
        pack_bitmap(&pk, s, mask);
    }
    nn_pack_str(&pk, "vals");
    pack_vals(&pk, s, mask, w, 0);
    nn_pack_str(&pk, "dense");
    pack_vals(&pk, s, mask, w, 1);
}

size_t fl_dm_msg_bytes(const fl_dm_shape *s, int with_mask, size_t nnz)
{
    /* fixmap, then each key as a fixstr (1 + its length) and its bin */
    size_t n = 1 + 5 + nn_bin_bytes(4 * nnz) + 6 + nn_bin_bytes(4 * s->n_dense);
    return n + (with_mask ? 5 + nn_bin_bytes((s->n_masked + 7) / 8) : 0);
}

static int read_bitmap(const fl_dm_shape *s, const msgpack_object *o, uint8_t *mask,
                       const char *what, sim_err *err)
{
    const nn_layout *L = &s->a->layout;
    size_t nb = (s->n_masked + 7) / 8, b = 0;
    if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != nb)
        return sim_fail(err, SIM_EFORMAT, what, 0, 0, "mask is not a bitmap of %zu bytes", nb);
    const unsigned char *bits = (const unsigned char *)o->via.bin.ptr;
    for (int t = 0; t < L->n; t++)
        for (size_t j = L->t[t].off; s->masked[t] && j < L->t[t].off + fl_dm_numel(&L->t[t]);
             j++, b++)
            mask[j] = (bits[b / 8] >> (b % 8)) & 1;
    return SIM_OK;
}

static int read_vals(const fl_dm_shape *s, const msgpack_object *o, const uint8_t *mask, float *w,
                     int dense, const char *what, sim_err *err)
{
    size_t n = dense ? s->n_dense : fl_dm_count(s, mask);
    float *v = sim_xmalloc(sizeof(float) * (n + 1));
    int rc = o ? nn_unpack_f32(v, n, o, what, err)
               : sim_fail(err, SIM_EFORMAT, what, 0, 0, "no \"%s\"", dense ? "dense" : "vals");
    if (!rc) scatter(w, s, mask, v, dense);
    free(v);
    return rc;
}

int fl_dm_unpack(const fl_dm_shape *s, const void *buf, size_t len, uint8_t *mask, int *got_mask,
                 float *w, const char *what, sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = SIM_OK;
    *got_mask = 0;
    if (!buf || nn_msgpack_next(&u, buf, len, &off, NULL, NULL) ||
        u.data.type != MSGPACK_OBJECT_MAP)
        rc = sim_fail(err, SIM_EFORMAT, what, 0, 0, "not a DM-PFL message");
    const msgpack_object *mo = rc ? NULL : nn_map_get(&u.data, "mask");
    if (mo && !(rc = read_bitmap(s, mo, mask, what, err))) *got_mask = 1;
    if (!rc) rc = read_vals(s, nn_map_get(&u.data, "vals"), mask, w, 0, what, err);
    if (!rc) rc = read_vals(s, nn_map_get(&u.data, "dense"), mask, w, 1, what, err);
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* a client's private state: a message with m_g as one more key */

void fl_dm_pack_state(msgpack_sbuffer *sb, const fl_dm_shape *s, const uint8_t *mc,
                      const uint8_t *mg, const float *wc)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    nn_pack_str(&pk, "mask");
    pack_bitmap(&pk, s, mc);
    nn_pack_str(&pk, "mg");
    pack_bitmap(&pk, s, mg);
    nn_pack_str(&pk, "vals");
    pack_vals(&pk, s, mc, wc, 0);
    nn_pack_str(&pk, "dense");
    pack_vals(&pk, s, mc, wc, 1);
}

int fl_dm_unpack_state(const fl_dm_shape *s, const void *buf, size_t len, uint8_t *mc, uint8_t *mg,
                       float *wc, sim_err *err)
{
    int got, rc = fl_dm_unpack(s, buf, len, mc, &got, wc, "private state", err);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    const msgpack_object *o = NULL;
    if (!rc && (!got || nn_msgpack_next(&u, buf, len, &off, NULL, NULL) ||
                !(o = nn_map_get(&u.data, "mg"))))
        rc = sim_fail(err, SIM_EFORMAT, "private state", 0, 0, "not a DM-PFL client state");
    if (!rc) rc = read_bitmap(s, o, mg, "private state", err);
    msgpack_unpacked_destroy(&u);
    return rc;
}
