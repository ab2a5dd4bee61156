/* sim/select_uniform.c -- `uniform`, the default selection policy: up to k of the clients that
 * can take a job now, uniformly at random.
 *
 * A partial Fisher-Yates over a permutation of all clients kept from one selection to the next
 * (any starting order gives a uniform sample), each client drawn tested as it comes (online,
 * idle, eligible), so a selection among a million clients asks only those it draws. Stream
 * SIM_RNG_SELECT; the permutation is the policy's state, saved as the bin of its n native-order
 * uint32 (the checkpoint's "selection permutation", as before policies existed). The sample is
 * returned in client-id order, so a round's event order does not depend on the sample's.
 */
#include "sim/select.h"

#include <stdlib.h>
#include <string.h>

typedef struct uniform_state {
    uint32_t *perm;
    int n;
} uniform_state;

static void *uniform_new(const void *cfg, int n)
{
    (void)cfg;
    uniform_state *s = sim_xcalloc(1, sizeof *s);
    s->n = n;
    s->perm = sim_xmalloc(sizeof(uint32_t) * (size_t)(n > 0 ? n : 1));
    for (int c = 0; c < n; c++)
        s->perm[c] = (uint32_t)c;
    return s;
}

static void uniform_free(void *st)
{
    uniform_state *s = st;
    if (!s) return;
    free(s->perm);
    free(s);
}

static void uniform_save(const void *st, msgpack_packer *pk)
{
    const uniform_state *s = st;
    size_t len = sizeof(uint32_t) * (size_t)s->n;
    msgpack_pack_bin(pk, len);
    msgpack_pack_bin_body(pk, s->perm, len);
}

/* a permutation of 0..n-1: seen[] marks each value once */
static int uniform_load(void *st, const msgpack_object *o, sim_err *err)
{
    uniform_state *s = st;
    size_t len = sizeof(uint32_t) * (size_t)s->n;
    if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != len)
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0, "its length");
    memcpy(s->perm, o->via.bin.ptr, len);
    char *seen = sim_xcalloc((size_t)s->n + 1, 1);
    int ok = 1;
    for (int i = 0; i < s->n && ok; i++)
        ok = s->perm[i] < (uint32_t)s->n && !seen[s->perm[i]]++;
    free(seen);
    return ok ? SIM_OK : sim_fail(err, SIM_EFORMAT, NULL, 0, 0, "not a permutation");
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int uniform_pick(void *st, const void *cfg, const sim_sel_view *v, int k, int32_t *out,
                        sim_rng *r)
{
    (void)cfg;
    uniform_state *s = st;
    int got = 0;
    for (int i = 0; i < v->n && got < k; i++) {
        uint32_t j = (uint32_t)(i + (int)sim_rng_below(r, (uint64_t)(v->n - i)));
        uint32_t t = s->perm[i];
        s->perm[i] = s->perm[j];
        s->perm[j] = t;
        int32_t c = (int32_t)s->perm[i];
        if (!v->eligible(v->ctx, c)) continue;
        out[got++] = c;
    }
    qsort(out, (size_t)got, sizeof *out, cmp_i32);
    return got;
}

const sim_sel_policy sim_sel_uniform = {
        .name = "uniform",
        .doc = "each client that can take a job now equally likely (the default); knows nothing "
               "of the clients",
        .purpose = SIM_RNG_SELECT,
        .state_new = uniform_new,
        .state_free = uniform_free,
        .save = uniform_save,
        .load = uniform_load,
        .pick = uniform_pick,
};
