/* nn/partition.c -- client partitions of a training set (see partition.h).
 *
 * Every scheme first decides an owner client per training sample (-1: unused) and then builds
 * the index lists from that array in one ascending pass, so lists come out sorted and "each
 * index used at most once" holds by construction. Sizes are at most a few hundred thousand
 * samples and a few thousand clients, so plain O(n + clients * classes) passes are enough.
 */
#include "nn/partition.h"

#include "sim/rng.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIRICHLET_TRIES 1000

/* Frees K per-client index lists and their counts (either may be NULL). */
static void free_lists(int32_t **lists, int *counts, int K)
{
    for (int k = 0; lists && k < K; k++)
        free(lists[k]);
    free(lists);
    free(counts);
}

void nn_partition_destroy(nn_partition *p)
{
    if (!p) return;
    free_lists(p->idx, p->n, p->n_clients);
    free_lists(p->test_idx, p->n_test, p->n_clients);
    free_lists(p->val_idx, p->n_val, p->n_clients);
    memset(p, 0, sizeof *p);
}

void nn_partition_label_counts(const nn_partition *p, const nn_dataset *train, int k, int *counts)
{
    assert(k >= 0 && k < p->n_clients);
    memset(counts, 0, (size_t)train->classes * sizeof *counts);
    for (int i = 0; i < p->n[k]; i++)
        counts[train->y[p->idx[k][i]]]++;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Shuffles int32 indices with the u32 Fisher-Yates: signed and unsigned variants of one type
 * may alias, and every index is non-negative, so the values are unchanged. */
static void shuffle_i32(sim_rng *r, int32_t *a, size_t n)
{
    sim_rng_shuffle_u32(r, (uint32_t *)a, n);
}

/* Builds p from owner (n): client k gets every i with owner[i] == k, ascending. */
static void build_from_owner(nn_partition *p, int clients, const int32_t *owner, int n)
{
    memset(p, 0, sizeof *p);
    p->n_clients = clients;
    p->n = sim_xcalloc((size_t)clients, sizeof *p->n);
    p->idx = sim_xcalloc((size_t)clients, sizeof *p->idx);
    p->n_test = sim_xcalloc((size_t)clients, sizeof *p->n_test);
    p->test_idx = sim_xcalloc((size_t)clients, sizeof *p->test_idx);
    for (int i = 0; i < n; i++)
        if (owner[i] >= 0) p->n[owner[i]]++;
    for (int k = 0; k < clients; k++)
        p->idx[k] = sim_xmalloc((size_t)p->n[k] * sizeof **p->idx);
    int *fill = sim_xcalloc((size_t)clients, sizeof *fill);
    for (int i = 0; i < n; i++)
        if (owner[i] >= 0) p->idx[owner[i]][fill[owner[i]]++] = i;
    free(fill);
}

static int32_t *owner_new(int n)
{
    int32_t *owner = sim_xmalloc((size_t)n * sizeof *owner);
    for (int i = 0; i < n; i++)
        owner[i] = -1;
    return owner;
}

/* Counting sort by label: class c's indices are list[start[c] .. start[c+1]), ascending. */
static void class_lists(const nn_dataset *d, int32_t **start_out, int32_t **list_out)
{
    int32_t *start = sim_xcalloc((size_t)d->classes + 1, sizeof *start);
    int32_t *list = sim_xmalloc((size_t)d->n * sizeof *list);
    for (int i = 0; i < d->n; i++) {
        assert(d->y[i] >= 0 && d->y[i] < d->classes && "labels are checked by the loaders");
        start[d->y[i] + 1]++;
    }
    for (int c = 0; c < d->classes; c++)
        start[c + 1] += start[c];
    int32_t *fill = sim_xmalloc((size_t)d->classes * sizeof *fill);
    memcpy(fill, start, (size_t)d->classes * sizeof *fill);
    for (int i = 0; i < d->n; i++)
        list[fill[d->y[i]]++] = i;
    free(fill);
    *start_out = start;
    *list_out = list;
}

static int check_common(const nn_dataset *train, int clients, const char *scheme, sim_err *err)
{
    if (train->n < 1 || train->classes < 1 || !train->y)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "%s partition: the training set is empty",
                        scheme);
    if (clients < 1 || clients > train->n)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "%s partition: clients must be in [1, %d] (training samples), got %d",
                        scheme, train->n, clients);
    return SIM_OK;
}

/* Fails when a scheme left some client without samples. */
static int check_nonempty(nn_partition *p, const char *scheme, const char *why, sim_err *err)
{
    for (int k = 0; k < p->n_clients; k++) {
        if (p->n[k] == 0) {
            nn_partition_destroy(p);
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                            "%s partition: client %d gets no samples%s", scheme, k, why);
        }
    }
    return SIM_OK;
}

int nn_partition_iid(nn_partition *p, const nn_dataset *train, int clients, uint64_t seed,
                     sim_err *err)
{
    memset(p, 0, sizeof *p);
    int rc = check_common(train, clients, "IID", err);
    if (rc < 0) return rc;
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_DATA_SPLIT, 0);
    int n = train->n;
    int32_t *perm = sim_xmalloc((size_t)n * sizeof *perm);
    for (int i = 0; i < n; i++)
        perm[i] = i;
    shuffle_i32(&r, perm, (size_t)n);
    int32_t *owner = owner_new(n);
    for (int k = 0; k < clients; k++) {
        long long lo = (long long)k * n / clients, hi = (long long)(k + 1) * n / clients;
        for (long long j = lo; j < hi; j++)
            owner[perm[j]] = k;
    }
    build_from_owner(p, clients, owner, n);
    free(owner);
    free(perm);
    return SIM_OK;
}

int nn_partition_dirichlet(nn_partition *p, const nn_dataset *train, int clients, double alpha,
                           int min_size, uint64_t seed, sim_err *err)
{
    memset(p, 0, sizeof *p);
    int rc = check_common(train, clients, "Dirichlet", err);
    if (rc < 0) return rc;
    if (!(alpha > 0 && isfinite(alpha)))
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "Dirichlet partition: alpha must be > 0, got %g", alpha);
    if (min_size < 0 || (long long)min_size * clients > train->n)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "Dirichlet partition: %d clients with at least %d samples each need %lld "
                        "samples, the training set has %d",
                        clients, min_size, (long long)min_size * clients, train->n);

    int C = train->classes;
    int32_t *start, *list;
    class_lists(train, &start, &list);
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_DATA_SPLIT, 0);
    double *q = sim_xmalloc((size_t)clients * sizeof *q);
    int *cnt = sim_xmalloc((size_t)C * (size_t)clients * sizeof *cnt); /* (C, clients) */
    int *size = sim_xmalloc((size_t)clients * sizeof *size);

    /* Only the proportions decide whether a draw is acceptable, so a rejected try costs
     * O(C * clients) and the per-class shuffles are drawn once, after acceptance. */
    int ok = 0;
    for (int t = 0; t < DIRICHLET_TRIES && !ok; t++) {
        memset(size, 0, (size_t)clients * sizeof *size);
        for (int c = 0; c < C; c++) {
            int nc = start[c + 1] - start[c], prev = 0;
            double cum = 0;
            sim_rng_dirichlet(&r, q, clients, alpha);
            for (int k = 0; k < clients; k++) {
                cum += q[k];
                /* Cumulative rounding: cut points, not per-client counts, are rounded, so the
                 * counts always sum to n_c and each is within 1 of q_k * n_c. */
                int cut = k == clients - 1 ? nc : (int)floor(cum * nc + 0.5);
                if (cut > nc) cut = nc;
                if (cut < prev) cut = prev;
                cnt[(size_t)c * (size_t)clients + (size_t)k] = cut - prev;
                size[k] += cut - prev;
                prev = cut;
            }
        }
        ok = 1;
        for (int k = 0; k < clients; k++)
            if (size[k] < min_size) ok = 0;
    }
    if (!ok) {
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                      "Dirichlet partition: no draw in %d tries gave each of %d clients at least "
                      "%d samples (alpha %g); use a larger alpha, fewer clients or a smaller "
                      "minimum size",
                      DIRICHLET_TRIES, clients, min_size, alpha);
    } else {
        int32_t *owner = owner_new(train->n);
        for (int c = 0; c < C; c++) {
            int32_t *seg = list + start[c];
            shuffle_i32(&r, seg, (size_t)(start[c + 1] - start[c]));
            int at = 0;
            for (int k = 0; k < clients; k++)
                for (int j = 0; j < cnt[(size_t)c * (size_t)clients + (size_t)k]; j++)
                    owner[seg[at++]] = k;
        }
        build_from_owner(p, clients, owner, train->n);
        free(owner);
    }
    free(q);
    free(cnt);
    free(size);
    free(start);
    free(list);
    return rc;
}

int nn_partition_shards(nn_partition *p, const nn_dataset *train, int clients,
                        int shards_per_client, uint64_t seed, sim_err *err)
{
    memset(p, 0, sizeof *p);
    int rc = check_common(train, clients, "shards", err);
    if (rc < 0) return rc;
    long long S = (long long)clients * shards_per_client;
    if (shards_per_client < 1 || S > train->n)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "shards partition: %d clients x %d shards need 1 to %d shards (one "
                        "sample each at least), got %lld",
                        clients, shards_per_client, train->n, S);
    int32_t *start, *sorted;
    class_lists(train, &start, &sorted); /* (label, index) order: a stable sort by label */
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_DATA_SPLIT, 0);
    int32_t *perm = sim_xmalloc((size_t)S * sizeof *perm);
    for (long long s = 0; s < S; s++)
        perm[s] = (int32_t)s;
    shuffle_i32(&r, perm, (size_t)S);
    int32_t *owner = owner_new(train->n);
    for (long long j = 0; j < S; j++) {
        long long s = perm[j], lo = s * train->n / S, hi = (s + 1) * train->n / S;
        for (long long i = lo; i < hi; i++)
            owner[sorted[i]] = (int32_t)(j / shards_per_client);
    }
    build_from_owner(p, clients, owner, train->n);
    free(owner);
    free(perm);
    free(start);
    free(sorted);
    return SIM_OK;
}

int nn_partition_groups(nn_partition *p, const nn_dataset *train, int clients,
                        const int *const *classes_of, const int *n_classes_of, uint64_t seed,
                        sim_err *err)
{
    memset(p, 0, sizeof *p);
    int rc = check_common(train, clients, "label-group", err);
    if (rc < 0) return rc;
    int C = train->classes;
    /* takers[c * clients + k]: client k lists class c; validated before anything is drawn. */
    unsigned char *takers = sim_xcalloc((size_t)C * (size_t)clients, 1);
    for (int k = 0; k < clients && rc == SIM_OK; k++) {
        if (n_classes_of[k] < 1)
            rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                          "label-group partition: client %d lists no classes", k);
        for (int i = 0; i < n_classes_of[k] && rc == SIM_OK; i++) {
            int c = classes_of[k][i];
            if (c < 0 || c >= C)
                rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                              "label-group partition: client %d lists class %d, expected 0 to %d",
                              k, c, C - 1);
            else if (takers[(size_t)c * (size_t)clients + (size_t)k])
                rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                              "label-group partition: client %d lists class %d twice", k, c);
            else
                takers[(size_t)c * (size_t)clients + (size_t)k] = 1;
        }
    }
    if (rc < 0) {
        free(takers);
        return rc;
    }

    int32_t *start, *list;
    class_lists(train, &start, &list);
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_DATA_SPLIT, 0);
    int32_t *owner = owner_new(train->n);
    int *who = sim_xmalloc((size_t)clients * sizeof *who);
    for (int c = 0; c < C; c++) {
        int m = 0;
        for (int k = 0; k < clients; k++)
            if (takers[(size_t)c * (size_t)clients + (size_t)k]) who[m++] = k;
        if (m == 0) continue;
        int nc = start[c + 1] - start[c];
        int32_t *seg = list + start[c];
        shuffle_i32(&r, seg, (size_t)nc);
        for (int s = 0; s < m; s++) {
            long long lo = (long long)s * nc / m, hi = (long long)(s + 1) * nc / m;
            for (long long i = lo; i < hi; i++)
                owner[seg[i]] = who[s];
        }
    }
    build_from_owner(p, clients, owner, train->n);
    free(who);
    free(owner);
    free(start);
    free(list);
    free(takers);
    return check_nonempty(p, "label-group",
                          " (its classes have fewer samples than the clients sharing them)", err);
}

int nn_partition_natural(nn_partition *p, const nn_dataset *train, sim_err *err)
{
    memset(p, 0, sizeof *p);
    if (!train->group || train->n_groups < 1)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "natural partition: the dataset has no natural groups (only LEAF "
                        "synthetic data has them)");
    for (int i = 0; i < train->n; i++)
        if (train->group[i] < 0 || train->group[i] >= train->n_groups)
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                            "natural partition: sample %d has group %d, expected 0 to %d", i,
                            train->group[i], train->n_groups - 1);
    build_from_owner(p, train->n_groups, train->group, train->n);
    return check_nonempty(p, "natural", " (its group has no training samples)", err);
}

/* ---- partition files --------------------------------------------------------------------- */

int nn_partition_file(nn_partition *p, const nn_dataset *train, const char *path, sim_err *err)
{
    memset(p, 0, sizeof *p);
    const char *why;
    FILE *f = sim_open_input(path, &why);
    if (!f) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot open: %s", why);
    int32_t *owner = owner_new(train->n > 0 ? train->n : 1);
    int *first_line = sim_xmalloc((size_t)(train->n > 0 ? train->n : 1) * sizeof *first_line);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, clients = 0, rc = SIM_OK;

    while (rc == SIM_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        char *hash = memchr(line, '#', (size_t)len);
        if (hash) len = hash - line;
        int tokens = 0;
        for (ssize_t i = 0; i < len && rc == SIM_OK;) {
            if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n') {
                i++;
                continue;
            }
            ssize_t tok = i;
            long long v = 0;
            int digits = 1;
            for (;
                 i < len && line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '\n';
                 i++) {
                if (line[i] < '0' || line[i] > '9')
                    digits = 0;
                else if (v <= INT_MAX)
                    v = v * 10 + (line[i] - '0'); /* saturates past INT_MAX */
            }
            int col = (int)(tok + 1), toklen = (int)(i - tok);
            if (!digits) {
                rc = sim_fail(err, SIM_EFORMAT, path, lineno, col,
                              "'%.*s' is not a sample index (a non-negative integer)",
                              toklen > 40 ? 40 : toklen, line + tok);
            } else if (v >= train->n) {
                rc = sim_fail(err, SIM_EINVAL, path, lineno, col,
                              "index %.*s is out of range: the training set has %d samples",
                              toklen > 40 ? 40 : toklen, line + tok, train->n);
            } else if (owner[v] >= 0) {
                rc = sim_fail(err, SIM_EINVAL, path, lineno, col,
                              "index %lld is used twice: first on line %d", v, first_line[v]);
            } else {
                owner[v] = clients;
                first_line[v] = lineno;
                tokens++;
            }
        }
        if (tokens > 0) clients++;
    }
    if (rc == SIM_OK && ferror(f))
        rc = sim_fail(err, SIM_EIO, path, lineno, 0, "read error: %s", strerror(errno));
    if (rc == SIM_OK && clients == 0)
        rc = sim_fail(err, SIM_EFORMAT, path, 0, 0, "no clients: every line is blank or a comment");
    if (rc == SIM_OK) build_from_owner(p, clients, owner, train->n);
    free(line);
    free(owner);
    free(first_line);
    fclose(f);
    return rc;
}

/* ---- local test splits ------------------------------------------------------------------- */

/* want (C) = T split over classes in proportion to counts (C, summing to n > 0) by largest
 * remainder, in exact integer arithmetic; equal remainders go to the lower class. */
static void largest_remainder(int *want, const int *counts, int C, int n, int T)
{
    long long *rem = sim_xmalloc((size_t)C * sizeof *rem);
    int left = T;
    for (int c = 0; c < C; c++) {
        long long a = (long long)T * counts[c];
        want[c] = (int)(a / n);
        rem[c] = a % n;
        left -= want[c];
    }
    for (; left > 0; left--) {
        int best = -1;
        for (int c = 0; c < C; c++)
            if (rem[c] > 0 && (best < 0 || rem[c] > rem[best])) best = c;
        assert(best >= 0 && "floors fall short of T by fewer than the nonzero remainders");
        want[best]++;
        rem[best] = 0;
    }
    free(rem);
}

/* Split all[0..n) (sorted; labels y, class counts counts) per class: each class's samples,
 * shuffled with r class by class, give their first want[c] to take and the rest to rest. */
static void split_by_class(sim_rng *r, const int32_t *all, int n, const int32_t *y, int C,
                           const int *counts, const int *want, int32_t *take, int *n_take,
                           int32_t *rest, int *n_rest)
{
    int32_t *byc = sim_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *byc);
    int *off = sim_xmalloc(((size_t)C + 1) * sizeof *off),
        *fill = sim_xmalloc((size_t)C * sizeof *fill);
    off[0] = 0;
    for (int c = 0; c < C; c++)
        off[c + 1] = off[c] + counts[c];
    memcpy(fill, off, (size_t)C * sizeof *fill);
    for (int i = 0; i < n; i++)
        byc[fill[y[all[i]]]++] = all[i];
    for (int c = 0; c < C; c++) {
        assert(want[c] <= counts[c]);
        shuffle_i32(r, byc + off[c], (size_t)counts[c]);
        for (int j = 0; j < counts[c]; j++) {
            if (j < want[c])
                take[(*n_take)++] = byc[off[c] + j];
            else
                rest[(*n_rest)++] = byc[off[c] + j];
        }
    }
    free(byc);
    free(off);
    free(fill);
}

int nn_partition_local_test(nn_partition *p, const nn_dataset *train, const nn_dataset *test,
                            double frac, int holdout, uint64_t seed, sim_err *err)
{
    if (p->n_clients < 1)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "local test split: the partition is empty");
    if (holdout && !(frac >= 0 && frac < 1))
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "local test split: holdout fraction must be in [0, 1), got %g", frac);
    if (!holdout && !(frac >= 0 && isfinite(frac)))
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "local test split: fraction must be >= 0, got %g", frac);
    if (!holdout && (!test || test->n < 1 || !test->y))
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "local test split: no test set to draw from (use holdout instead)");

    int K = p->n_clients, C = train->classes;
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_DATA_SPLIT, 1);
    int32_t **new_idx = sim_xcalloc((size_t)K, sizeof *new_idx);
    int *new_n = sim_xcalloc((size_t)K, sizeof *new_n);
    int32_t **new_test = sim_xcalloc((size_t)K, sizeof *new_test);
    int *new_nt = sim_xcalloc((size_t)K, sizeof *new_nt);
    int *counts = sim_xmalloc((size_t)C * sizeof *counts);
    int *want = sim_xmalloc((size_t)C * sizeof *want);

    /* Test-set pools: shuffled once per class, then consumed round-robin by all clients. */
    int32_t *pool_start = NULL, *pool = NULL;
    int *cursor = NULL;
    int pool_classes = 0;
    if (!holdout) {
        class_lists(test, &pool_start, &pool);
        pool_classes = test->classes < C ? test->classes : C;
        for (int c = 0; c < test->classes; c++)
            shuffle_i32(&r, pool + pool_start[c], (size_t)(pool_start[c + 1] - pool_start[c]));
        cursor = sim_xcalloc((size_t)C, sizeof *cursor);
    }

    for (int k = 0; k < K; k++) {
        /* The client's full training set: an earlier holdout split (and its validation part)
         * goes back in first. */
        int back = p->test_from_train ? p->n_test[k] : 0;
        int bv = p->test_from_train && p->n_val ? p->n_val[k] : 0, n = p->n[k] + back + bv;
        int32_t *all = sim_xmalloc((size_t)n * sizeof *all);
        memcpy(all, p->idx[k], (size_t)p->n[k] * sizeof *all);
        if (back) memcpy(all + p->n[k], p->test_idx[k], (size_t)back * sizeof *all);
        if (bv) memcpy(all + p->n[k] + back, p->val_idx[k], (size_t)bv * sizeof *all);
        qsort(all, (size_t)n, sizeof *all, cmp_i32);
        memset(counts, 0, (size_t)C * sizeof *counts);
        for (int i = 0; i < n; i++)
            counts[train->y[all[i]]]++;

        double Td = floor(frac * n + 0.5);
        if (!holdout && Td > test->n) Td = test->n; /* more would need repeats anyway */
        int T = (int)Td;
        if (holdout && T > n - 1) T = n > 0 ? n - 1 : 0;
        if (n > 0)
            largest_remainder(want, counts, C, n, T);
        else
            memset(want, 0, (size_t)C * sizeof *want);

        if (holdout) {
            /* the head of each class's shuffled samples is held out */
            new_test[k] = sim_xmalloc((size_t)T * sizeof **new_test);
            new_idx[k] = sim_xmalloc((size_t)(n - T) * sizeof **new_idx);
            split_by_class(&r, all, n, train->y, C, counts, want, new_test[k], &new_nt[k],
                           new_idx[k], &new_n[k]);
            free(all);
            qsort(new_idx[k], (size_t)new_n[k], sizeof **new_idx, cmp_i32);
        } else {
            new_idx[k] = all;
            new_n[k] = n;
            new_test[k] = sim_xmalloc((size_t)T * sizeof **new_test);
            for (int c = 0; c < pool_classes; c++) {
                int size = pool_start[c + 1] - pool_start[c];
                int take = want[c] < size ? want[c] : size;
                for (int j = 0; j < take; j++) {
                    new_test[k][new_nt[k]++] = pool[pool_start[c] + cursor[c]];
                    cursor[c] = (cursor[c] + 1) % size;
                }
            }
        }
        qsort(new_test[k], (size_t)new_nt[k], sizeof **new_test, cmp_i32);
    }

    free_lists(p->idx, p->n, K);
    free_lists(p->test_idx, p->n_test, K);
    free_lists(p->val_idx, p->n_val, K);
    p->val_idx = NULL;
    p->n_val = NULL;
    p->idx = new_idx;
    p->n = new_n;
    p->test_idx = new_test;
    p->n_test = new_nt;
    p->test_from_train = holdout ? 1 : 0;
    free(counts);
    free(want);
    free(pool_start);
    free(pool);
    free(cursor);
    return SIM_OK;
}

int nn_partition_local_val(nn_partition *p, const nn_dataset *d, double frac, uint64_t seed,
                           sim_err *err)
{
    int any = 0;
    for (int k = 0; p->test_idx && k < p->n_clients; k++)
        any |= p->n_test[k] > 0;
    if (!any)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "validation split: the partition has no local test splits to take it from");
    if (!(frac >= 0 && frac < 1))
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "validation split: fraction must be in [0, 1), got %g", frac);
    int K = p->n_clients, C = d->classes;
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_DATA_SPLIT, 2);
    int32_t **val = sim_xcalloc((size_t)K, sizeof *val),
            **test = sim_xcalloc((size_t)K, sizeof *test);
    int *nv = sim_xcalloc((size_t)K, sizeof *nv), *nt = sim_xcalloc((size_t)K, sizeof *nt);
    int *counts = sim_xmalloc((size_t)C * sizeof *counts);
    int *want = sim_xmalloc((size_t)C * sizeof *want);
    for (int k = 0; k < K; k++) {
        /* the whole local split (an earlier validation part back in), in canonical order */
        int back = p->n_val ? p->n_val[k] : 0, n = p->n_test[k] + back;
        int32_t *all = sim_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *all);
        if (p->n_test[k]) memcpy(all, p->test_idx[k], (size_t)p->n_test[k] * sizeof *all);
        if (back) memcpy(all + p->n_test[k], p->val_idx[k], (size_t)back * sizeof *all);
        qsort(all, (size_t)n, sizeof *all, cmp_i32);
        memset(counts, 0, (size_t)C * sizeof *counts);
        for (int i = 0; i < n; i++)
            counts[d->y[all[i]]]++;
        int V = (int)floor(frac * n + 0.5);
        if (V > n - 1) V = n > 0 ? n - 1 : 0; /* a client keeps a sample to be tested on */
        if (n > 0)
            largest_remainder(want, counts, C, n, V);
        else
            memset(want, 0, (size_t)C * sizeof *want);
        /* the head of each class's shuffled samples validates, the rest tests */
        val[k] = sim_xmalloc((size_t)(V > 0 ? V : 1) * sizeof **val);
        int32_t *rest = sim_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *rest);
        split_by_class(&r, all, n, d->y, C, counts, want, val[k], &nv[k], rest, &nt[k]);
        free(all);
        test[k] = rest;
        qsort(val[k], (size_t)nv[k], sizeof **val, cmp_i32);
        qsort(test[k], (size_t)nt[k], sizeof **test, cmp_i32);
    }
    free_lists(p->test_idx, p->n_test, K);
    free_lists(p->val_idx, p->n_val, K);
    p->test_idx = test;
    p->n_test = nt;
    p->val_idx = val;
    p->n_val = nv;
    free(counts);
    free(want);
    return SIM_OK;
}
