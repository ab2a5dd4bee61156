/* algos/pfedgate.c -- pFedGate (Chen et al., ICML 2023; spec 000): a shared global model and, per
 * client, a private gating layer that reads each batch and picks the blocks of the model to keep
 * under the client's density budget s_i (pfedgate.h: the block table and the selection).
 */
#include "algos/pfedgate.h"

#include "sim/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double fl_pg_s_min(int B, double s)
{
    double m = 1.0 / B > 0.1 ? 1.0 / B : 0.1;
    return m < s ? m : s;
}

static size_t cdiv(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

void fl_pg_blocks_build(fl_pg_blocks *b, const nn_arch *a, int B, double s_min, int code_rule)
{
    memset(b, 0, sizeof *b);
    const nn_layout *L = &a->layout;
    size_t cap = (size_t)L->n * (size_t)B;
    b->off = sim_xmalloc(cap * sizeof(size_t));
    b->len = sim_xmalloc(cap * sizeof(size_t));
    b->first = sim_xmalloc(cap);
    b->linear = sim_xmalloc(cap);
    for (int ti = 0; ti < L->n; ti++) {
        const nn_tensor *t = &L->t[ti];
        if (!t->trainable) continue;
        int lin = 0;
        for (int i = 0; i < a->n; i++)
            if ((a->l[i].wt == ti || a->l[i].bt == ti) && a->l[i].op == NN_LINEAR) lin = 1;
        size_t n = (size_t)t->rows * t->cols, pos = 0;
        /* the first chunk and the size of the others */
        size_t first, rest;
        if (code_rule) {
            size_t k = n < (size_t)B ? n : (size_t)B;
            first = rest = cdiv(n, k);
        } else {
            first = (size_t)ceil((double)n * s_min - 1e-9);
            if (first < 1) first = 1;
            if (first > n) first = n;
            rest = B > 1 && n > first ? cdiv(n - first, (size_t)B - 1) : 1;
        }
        for (int j = 0; pos < n; j++) {
            size_t len = j == 0 ? first : rest;
            if (len > n - pos) len = n - pos;
            b->off[b->n] = t->off + pos;
            b->len[b->n] = len;
            b->first[b->n] = j == 0;
            b->linear[b->n] = (uint8_t)lin;
            b->n++;
            pos += len;
        }
        b->d += n;
    }
}

void fl_pg_blocks_free(fl_pg_blocks *b)
{
    free(b->off);
    free(b->len);
    free(b->first);
    free(b->linear);
    memset(b, 0, sizeof *b);
}

/* Items in value order, ties by block index: a stable insertion sort on small L. */
static void sort_items(int *order, int n, const int *value)
{
    for (int i = 1; i < n; i++) {
        int k = order[i], j = i;
        for (; j > 0 && value[order[j - 1]] < value[k]; j--)
            order[j] = order[j - 1];
        order[j] = k;
    }
}

double fl_pg_select(const fl_pg_blocks *b, const float *G, double s, double s_min, uint8_t *I,
                    int *order)
{
    size_t kept = 0;
    if (s >= 1) {
        memset(I, 1, (size_t)b->n);
        return 1.0;
    }
    int *value = sim_xmalloc(sizeof(int) * (size_t)(b->n > 0 ? b->n : 1));
    for (int i = 0; i < b->n; i++) {
        value[i] = (int)nearbyint(10.0 * G[i]); /* the default rounding: half to even */
        I[i] = b->first[i];
        if (b->first[i]) kept += b->len[i];
    }
    for (int group = 0; group < 2; group++) {
        int n = 0;
        size_t total = 0;
        for (int i = 0; i < b->n; i++)
            if (!b->first[i] && b->linear[i] == group) {
                order[n++] = i;
                total += b->len[i];
            }
        double c = nearbyint((double)total * (s - s_min));
        size_t cap = c > 0 ? (size_t)c : 0, used = 0;
        sort_items(order, n, value);
        for (int k = 0; k < n; k++) /* take what fits, and go on: a later item may still fit */
            if (used + b->len[order[k]] <= cap) {
                used += b->len[order[k]];
                I[order[k]] = 1;
            }
        kept += used;
    }
    free(value);
    return b->d ? (double)kept / (double)b->d : 1.0;
}
