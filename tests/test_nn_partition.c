/* tests/test_nn_partition.c -- client partitions and local test splits (nn/partition.h).
 *
 * Uses small label-only datasets built here (balanced and deliberately unbalanced), so every
 * scheme runs in milliseconds under the sanitizers. Each scheme is checked for coverage (every
 * index at most / exactly once), sizes, seed behaviour and its own label structure; the file
 * parser for its comment rules and file:line:col errors.
 */
#include "nn/data.h"
#include "nn/partition.h"
#include "sim/base.h"

#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Labels only: partitions never read x. class c has per_class[c] samples, interleaved. */
static nn_dataset make_labels(int classes, const int *per_class)
{
    nn_dataset d = {0};
    int n = 0;
    for (int c = 0; c < classes; c++)
        n += per_class[c];
    d.n = n;
    d.c = d.h = d.w = 1;
    d.classes = classes;
    d.x = calloc((size_t)n, sizeof(float));
    d.y = malloc((size_t)n * sizeof(int32_t));
    int *left = malloc((size_t)classes * sizeof *left);
    memcpy(left, per_class, (size_t)classes * sizeof *left);
    for (int i = 0, c = 0; i < n; c = (c + 1) % classes)
        if (left[c] > 0) {
            left[c]--;
            d.y[i++] = c;
        }
    free(left);
    return d;
}

static nn_dataset make_balanced(int classes, int each)
{
    int *pc = malloc((size_t)classes * sizeof *pc);
    for (int c = 0; c < classes; c++)
        pc[c] = each;
    nn_dataset d = make_labels(classes, pc);
    free(pc);
    return d;
}

/* Every train index in range and used at most once (exactly once when exact); sizes add up. */
static void check_cover(const nn_partition *p, int n, int exact, const char *what)
{
    int *used = calloc((size_t)n, sizeof *used);
    int bad = 0, dup = 0, total = 0, unsorted = 0;
    for (int k = 0; k < p->n_clients; k++) {
        total += p->n[k];
        for (int i = 0; i < p->n[k]; i++) {
            int32_t v = p->idx[k][i];
            if (v < 0 || v >= n) {
                bad++;
                continue;
            }
            if (used[v]++) dup++;
            if (i > 0 && v <= p->idx[k][i - 1]) unsorted++;
        }
    }
    int unused = 0;
    for (int i = 0; i < n; i++)
        if (!used[i]) unused++;
    CHECK_MSG(bad == 0 && dup == 0, "%s: %d out of range, %d duplicates", what, bad, dup);
    CHECK_MSG(unsorted == 0, "%s: %d index lists out of order", what, unsorted);
    if (exact) {
        CHECK_MSG(unused == 0 && total == n, "%s: %d unused, total %d of %d", what, unused, total,
                  n);
    }
    free(used);
}

static int same_partition(const nn_partition *a, const nn_partition *b)
{
    if (a->n_clients != b->n_clients) return 0;
    for (int k = 0; k < a->n_clients; k++) {
        if (a->n[k] != b->n[k] || a->n_test[k] != b->n_test[k]) return 0;
        if (memcmp(a->idx[k], b->idx[k], (size_t)a->n[k] * sizeof(int32_t))) return 0;
        if (a->n_test[k] &&
            memcmp(a->test_idx[k], b->test_idx[k], (size_t)a->n_test[k] * sizeof(int32_t)))
            return 0;
    }
    return 1;
}

static void test_iid(void)
{
    int pc[10] = {1003, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000};
    nn_dataset d = make_labels(10, pc); /* 10003 samples: 7 clients cannot split it evenly */
    nn_partition p, q;
    sim_err e = {0};
    CHECK_EQ_I64(nn_partition_iid(&p, &d, 7, 1, &e), SIM_OK);
    CHECK_EQ_I64(p.n_clients, 7);
    check_cover(&p, d.n, 1, "iid");
    int lo = d.n, hi = 0;
    for (int k = 0; k < 7; k++) {
        if (p.n[k] < lo) lo = p.n[k];
        if (p.n[k] > hi) hi = p.n[k];
        CHECK(p.n_test[k] == 0 && p.test_idx[k] == NULL);
    }
    CHECK_MSG(hi - lo <= 1, "iid sizes %d..%d", lo, hi);
    CHECK_EQ_I64(nn_partition_iid(&q, &d, 7, 1, &e), SIM_OK);
    CHECK(same_partition(&p, &q));
    nn_partition_destroy(&q);
    CHECK_EQ_I64(nn_partition_iid(&q, &d, 7, 2, &e), SIM_OK);
    CHECK(!same_partition(&p, &q));
    nn_partition_destroy(&q);
    nn_partition_destroy(&p);
    nn_partition_destroy(&p); /* idempotent */
    nn_partition_destroy(NULL);

    CHECK_EQ_I64(nn_partition_iid(&p, &d, 0, 1, &e), SIM_EINVAL);
    CHECK_EQ_I64(nn_partition_iid(&p, &d, d.n + 1, 1, &e), SIM_EINVAL);
    CHECK(p.n_clients == 0 && p.idx == NULL);
    nn_dataset_destroy(&d);
}

/* Fraction of client k's samples in its two largest classes. */
static double top2_share(const nn_partition *p, const nn_dataset *d, int k)
{
    int counts[64];
    nn_partition_label_counts(p, d, k, counts);
    int a = 0, b = 0;
    for (int c = 0; c < d->classes; c++) {
        if (counts[c] > a) {
            b = a;
            a = counts[c];
        } else if (counts[c] > b) {
            b = counts[c];
        }
    }
    return p->n[k] ? (double)(a + b) / p->n[k] : 1.0;
}

static void test_dirichlet(void)
{
    nn_dataset d = make_balanced(10, 1000);
    nn_partition p, q;
    sim_err e = {0};

    CHECK_EQ_I64(nn_partition_dirichlet(&p, &d, 20, 0.5, 10, 3, &e), SIM_OK);
    check_cover(&p, d.n, 1, "dirichlet 0.5");
    int small = 0;
    for (int k = 0; k < 20; k++)
        if (p.n[k] < 10) small++;
    CHECK_EQ_I64(small, 0);
    CHECK_EQ_I64(nn_partition_dirichlet(&q, &d, 20, 0.5, 10, 3, &e), SIM_OK);
    CHECK(same_partition(&p, &q));
    nn_partition_destroy(&q);
    CHECK_EQ_I64(nn_partition_dirichlet(&q, &d, 20, 0.5, 10, 4, &e), SIM_OK);
    CHECK(!same_partition(&p, &q));
    nn_partition_destroy(&q);
    nn_partition_destroy(&p);

    /* A min_size that a typical draw misses (half the mean client size at alpha 0.3): the
     * retry loop must still meet it. */
    CHECK_EQ_I64(nn_partition_dirichlet(&p, &d, 30, 0.3, 150, 5, &e), SIM_OK);
    check_cover(&p, d.n, 1, "dirichlet min_size");
    small = 0;
    for (int k = 0; k < 30; k++)
        if (p.n[k] < 150) small++;
    CHECK_EQ_I64(small, 0);
    nn_partition_destroy(&p);

    /* alpha 1000: q_k ~ Beta(1000, 9000) has sd sqrt(0.09 / 10001) = 0.003 around 0.1, i.e. 3%
     * relative, so a client's share of each class is 0.1 +- 0.0032 (1 sd) after normalising over
     * its 10 classes; 0.02 is over 6 sd, and rounding adds at most 1/1000. */
    CHECK_EQ_I64(nn_partition_dirichlet(&p, &d, 10, 1000, 10, 6, &e), SIM_OK);
    check_cover(&p, d.n, 1, "dirichlet 1000");
    double worst = 0;
    for (int k = 0; k < 10; k++) {
        int counts[10];
        nn_partition_label_counts(&p, &d, k, counts);
        for (int c = 0; c < 10; c++) {
            double dev = fabs((double)counts[c] / p.n[k] - 0.1);
            if (dev > worst) worst = dev;
        }
    }
    CHECK_MSG(worst < 0.02, "alpha 1000: worst class-share deviation %.4f", worst);
    nn_partition_destroy(&p);

    /* alpha 0.05: each class lands almost whole on one client, so nearly every client's two
     * largest classes hold >= 80% of its samples; require it of at least 8 of the 10. */
    CHECK_EQ_I64(nn_partition_dirichlet(&p, &d, 10, 0.05, 1, 7, &e), SIM_OK);
    check_cover(&p, d.n, 1, "dirichlet 0.05");
    int dominated = 0;
    for (int k = 0; k < 10; k++)
        if (top2_share(&p, &d, k) >= 0.8) dominated++;
    CHECK_MSG(dominated >= 8, "alpha 0.05: only %d of 10 clients dominated by 2 classes",
              dominated);
    nn_partition_destroy(&p);

    /* Impossible (by arithmetic) and improbable (by retries) demands fail cleanly. */
    CHECK_EQ_I64(nn_partition_dirichlet(&p, &d, 100, 0.5, 101, 1, &e), SIM_EINVAL);
    CHECK(strstr(e.msg, "need 10100 samples") != NULL);
    nn_dataset tiny = make_balanced(2, 50);
    CHECK_EQ_I64(nn_partition_dirichlet(&p, &tiny, 40, 0.01, 2, 1, &e), SIM_EINVAL);
    CHECK_MSG(strstr(e.msg, "larger alpha") != NULL, "msg: %s", e.msg);
    CHECK(p.n_clients == 0 && p.idx == NULL);
    CHECK_EQ_I64(nn_partition_dirichlet(&p, &d, 10, 0, 1, 1, &e), SIM_EINVAL);
    nn_dataset_destroy(&tiny);
    nn_dataset_destroy(&d);
}

static void test_shards(void)
{
    nn_dataset d = make_balanced(10, 1000);
    nn_partition p, q;
    sim_err e = {0};
    CHECK_EQ_I64(nn_partition_shards(&p, &d, 100, 2, 8, &e), SIM_OK);
    check_cover(&p, d.n, 1, "shards");
    int over = 0, wrong_size = 0;
    for (int k = 0; k < 100; k++) {
        int counts[10], distinct = 0;
        nn_partition_label_counts(&p, &d, k, counts);
        for (int c = 0; c < 10; c++) {
            distinct += counts[c] > 0;
            if (counts[c] % 50) wrong_size++; /* whole shards of 50 from one class */
        }
        if (distinct > 2) over++;
        if (p.n[k] != 100) wrong_size++;
    }
    CHECK_EQ_I64(over, 0);
    CHECK_EQ_I64(wrong_size, 0);
    CHECK_EQ_I64(nn_partition_shards(&q, &d, 100, 2, 8, &e), SIM_OK);
    CHECK(same_partition(&p, &q));
    nn_partition_destroy(&q);
    CHECK_EQ_I64(nn_partition_shards(&q, &d, 100, 2, 9, &e), SIM_OK);
    CHECK(!same_partition(&p, &q));
    nn_partition_destroy(&q);
    nn_partition_destroy(&p);

    /* n not divisible by the shard count: still every sample once, client sizes within 2. */
    int pc[3] = {333, 500, 168};
    nn_dataset u = make_labels(3, pc);
    CHECK_EQ_I64(nn_partition_shards(&p, &u, 7, 3, 8, &e), SIM_OK);
    check_cover(&p, u.n, 1, "shards uneven");
    for (int k = 0; k < 7; k++)
        CHECK(abs(p.n[k] - u.n / 7) <= 3);
    nn_partition_destroy(&p);
    CHECK_EQ_I64(nn_partition_shards(&p, &u, 1000, 2, 8, &e), SIM_EINVAL);
    CHECK_EQ_I64(nn_partition_shards(&p, &u, 10, 0, 8, &e), SIM_EINVAL);
    nn_dataset_destroy(&u);
    nn_dataset_destroy(&d);
}

static void test_groups(void)
{
    int pc[4] = {101, 80, 60, 40};
    nn_dataset d = make_labels(4, pc);
    nn_partition p, q;
    sim_err e = {0};
    static const int c0[] = {0, 2}, c1[] = {3, 1}, c2[] = {0};
    const int *of[] = {c0, c1, c2};
    const int nof[] = {2, 2, 1};
    CHECK_EQ_I64(nn_partition_groups(&p, &d, 3, of, nof, 9, &e), SIM_OK);
    check_cover(&p, d.n, 1, "groups");
    int a[4], b[4], c[4];
    nn_partition_label_counts(&p, &d, 0, a);
    nn_partition_label_counts(&p, &d, 1, b);
    nn_partition_label_counts(&p, &d, 2, c);
    CHECK(a[1] == 0 && a[3] == 0 && b[0] == 0 && b[2] == 0 && c[1] == 0 && c[2] == 0 && c[3] == 0);
    CHECK(a[0] + c[0] == 101 && abs(a[0] - c[0]) <= 1); /* class 0 shared evenly */
    CHECK(a[2] == 60 && b[1] == 80 && b[3] == 40);
    CHECK_EQ_I64(nn_partition_groups(&q, &d, 3, of, nof, 9, &e), SIM_OK);
    CHECK(same_partition(&p, &q));
    nn_partition_destroy(&q);
    nn_partition_destroy(&p);

    /* Unlisted classes are unused. */
    const int *of2[] = {c2};
    const int nof2[] = {1};
    CHECK_EQ_I64(nn_partition_groups(&p, &d, 1, of2, nof2, 9, &e), SIM_OK);
    check_cover(&p, d.n, 0, "groups unused");
    CHECK_EQ_I64(p.n[0], 101);
    nn_partition_destroy(&p);

    static const int bad[] = {1, 4}, twice[] = {2, 2};
    const int *of3[] = {c0, bad};
    CHECK_EQ_I64(nn_partition_groups(&p, &d, 2, of3, nof, 9, &e), SIM_EINVAL);
    CHECK_MSG(strstr(e.msg, "client 1 lists class 4") != NULL, "msg: %s", e.msg);
    const int *of4[] = {twice, c0};
    CHECK_EQ_I64(nn_partition_groups(&p, &d, 2, of4, nof, 9, &e), SIM_EINVAL);
    CHECK(strstr(e.msg, "twice") != NULL);
    const int nof0[] = {2, 0};
    CHECK_EQ_I64(nn_partition_groups(&p, &d, 2, of, nof0, 9, &e), SIM_EINVAL);
    CHECK(strstr(e.msg, "no classes") != NULL);
    CHECK(p.n_clients == 0 && p.idx == NULL);
    nn_dataset_destroy(&d);
}

static void test_natural(void)
{
    nn_dataset tr, te;
    nn_partition p;
    sim_err e = {0};
    CHECK_EQ_I64(nn_synth_leaf_make(&tr, &te, 6, 0.5, 0.5, 20, 5, 11, 0.2, &e), SIM_OK);
    CHECK_EQ_I64(nn_partition_natural(&p, &tr, &e), SIM_OK);
    CHECK_EQ_I64(p.n_clients, 6);
    check_cover(&p, tr.n, 1, "natural");
    int wrong = 0;
    for (int k = 0; k < 6; k++)
        for (int i = 0; i < p.n[k]; i++)
            if (tr.group[p.idx[k][i]] != k) wrong++;
    CHECK_EQ_I64(wrong, 0);
    nn_partition_destroy(&p);
    nn_dataset_destroy(&tr);
    nn_dataset_destroy(&te);

    nn_dataset d = make_balanced(2, 10);
    CHECK_EQ_I64(nn_partition_natural(&p, &d, &e), SIM_EINVAL);
    CHECK(strstr(e.msg, "no natural groups") != NULL);
    nn_dataset_destroy(&d);
}

static char tmpdir[64];

static const char *write_text(const char *name, const char *text)
{
    static char path[4][128];
    static int slot;
    char *pth = path[slot++ % 4];
    snprintf(pth, sizeof path[0], "%s/%s", tmpdir, name);
    FILE *f = fopen(pth, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return pth;
}

/* Parses text as a partition file over d and checks the error: code, line, col and a phrase. */
static void check_file_err(const nn_dataset *d, const char *text, int code, int line, int col,
                           const char *phrase)
{
    const char *path = write_text("bad.part", text);
    nn_partition p;
    sim_err e = {0};
    CHECK_EQ_I64(nn_partition_file(&p, d, path, &e), code);
    CHECK_EQ_I64(e.line, line);
    CHECK_EQ_I64(e.col, col);
    CHECK_MSG(strcmp(e.file, path) == 0, "file '%s'", e.file);
    CHECK_MSG(strstr(e.msg, phrase) != NULL, "msg '%s' lacks '%s'", e.msg, phrase);
    CHECK(p.n_clients == 0 && p.idx == NULL);
    char buf[1024], want[256];
    sim_err_format(&e, buf, sizeof buf);
    snprintf(want, sizeof want, "%s:%d:%d: ", path, line, col);
    if (line > 0) CHECK_MSG(strncmp(buf, want, strlen(want)) == 0, "formatted: %s", buf);
    unlink(path);
}

static void test_file(void)
{
    nn_dataset d = make_balanced(2, 10); /* 20 samples */
    nn_partition p;
    sim_err e = {0};
    const char *path = write_text("ok.part", "# clients for the test\n"
                                             "0 1 2   # trailing comment\n"
                                             "   \n"
                                             "\t9\t3 4\r\n"
                                             "# a comment-only line is not a client\n"
                                             "\n"
                                             "19");
    CHECK_EQ_I64(nn_partition_file(&p, &d, path, &e), SIM_OK);
    CHECK_EQ_I64(p.n_clients, 3);
    if (p.n_clients == 3) {
        CHECK(p.n[0] == 3 && p.idx[0][0] == 0 && p.idx[0][1] == 1 && p.idx[0][2] == 2);
        CHECK(p.n[1] == 3 && p.idx[1][0] == 3 && p.idx[1][1] == 4 && p.idx[1][2] == 9);
        CHECK(p.n[2] == 1 && p.idx[2][0] == 19);
    }
    check_cover(&p, d.n, 0, "file");
    nn_partition_destroy(&p);
    unlink(path);

    check_file_err(&d, "0 1 2\n3 x4 5\n", SIM_EFORMAT, 2, 3, "'x4' is not a sample index");
    check_file_err(&d, "0 -1\n", SIM_EFORMAT, 1, 3, "'-1' is not a sample index");
    check_file_err(&d, "0 1.5\n", SIM_EFORMAT, 1, 3, "'1.5'");
    check_file_err(&d, "# c\n\n  0 20\n", SIM_EINVAL, 3, 5, "index 20 is out of range");
    check_file_err(&d, "0 99999999999999999999\n", SIM_EINVAL, 1, 3, "out of range");
    check_file_err(&d, "0 1\n2 3\n4 1 # again\n", SIM_EINVAL, 3, 3,
                   "index 1 is used twice: first on line 1");
    check_file_err(&d, "# nothing\n\n   # here\n", SIM_EFORMAT, 0, 0, "no clients");

    CHECK_EQ_I64(nn_partition_file(&p, &d, "/nonexistent/dir/x.part", &e), SIM_EIO);
    CHECK(strcmp(e.file, "/nonexistent/dir/x.part") == 0 && strstr(e.msg, "cannot open"));
    nn_dataset_destroy(&d);
}

/* For every client: test count per class within 1 of its share of T = n_test by the client's
 * train label mix (counts), no duplicates, labels as the split claims. */
static void check_stratified(const nn_partition *p, const nn_dataset *train,
                             const nn_dataset *test_src, int k, const int *counts, int n,
                             const char *what)
{
    int C = train->classes;
    int *tc = calloc((size_t)C, sizeof *tc);
    int dup = 0;
    for (int i = 0; i < p->n_test[k]; i++) {
        tc[test_src->y[p->test_idx[k][i]]]++;
        if (i > 0 && p->test_idx[k][i] <= p->test_idx[k][i - 1]) dup++;
    }
    int off = 0;
    for (int c = 0; c < C; c++) {
        double share = (double)p->n_test[k] * counts[c] / n;
        if (fabs(tc[c] - share) >= 1.0) off++;
    }
    CHECK_MSG(off == 0 && dup == 0, "%s client %d: %d classes off by >= 1, %d repeats", what, k,
              off, dup);
    free(tc);
}

static void test_local_test(void)
{
    int pc[5] = {200, 400, 600, 800, 1000};
    nn_dataset tr = make_labels(5, pc);
    nn_dataset te = make_balanced(5, 400);
    nn_partition p, q;
    sim_err e = {0};
    CHECK_EQ_I64(nn_partition_dirichlet(&p, &tr, 10, 0.5, 20, 12, &e), SIM_OK);
    int K = p.n_clients;
    int(*counts)[5] = malloc((size_t)K * sizeof *counts);
    int *n0 = malloc((size_t)K * sizeof *n0);
    int32_t **orig = malloc((size_t)K * sizeof *orig);
    for (int k = 0; k < K; k++) {
        nn_partition_label_counts(&p, &tr, k, counts[k]);
        n0[k] = p.n[k];
        orig[k] = malloc((size_t)p.n[k] * sizeof(int32_t));
        memcpy(orig[k], p.idx[k], (size_t)p.n[k] * sizeof(int32_t));
    }

    /* Holdout: train and test disjoint, together the client's original samples. */
    CHECK_EQ_I64(nn_partition_local_test(&p, &tr, NULL, 0.2, 1, 5, &e), SIM_OK);
    CHECK_EQ_I64(p.test_from_train, 1);
    check_cover(&p, tr.n, 0, "holdout train");
    for (int k = 0; k < K; k++) {
        CHECK_EQ_I64(p.n_test[k], (int)floor(0.2 * n0[k] + 0.5));
        CHECK_EQ_I64(p.n[k] + p.n_test[k], n0[k]);
        int *mark = calloc((size_t)tr.n, sizeof *mark), clash = 0, lost = 0;
        for (int i = 0; i < p.n[k]; i++)
            mark[p.idx[k][i]] = 1;
        for (int i = 0; i < p.n_test[k]; i++)
            if (mark[p.test_idx[k][i]]++) clash++;
        for (int i = 0; i < n0[k]; i++)
            if (!mark[orig[k][i]]) lost++;
        CHECK_EQ_I64(clash, 0);
        CHECK_EQ_I64(lost, 0);
        free(mark);
        check_stratified(&p, &tr, &tr, k, counts[k], n0[k], "holdout");
    }
    /* Same seed, same split. */
    CHECK_EQ_I64(nn_partition_dirichlet(&q, &tr, 10, 0.5, 20, 12, &e), SIM_OK);
    CHECK_EQ_I64(nn_partition_local_test(&q, &tr, NULL, 0.2, 1, 5, &e), SIM_OK);
    CHECK(same_partition(&p, &q));
    nn_partition_destroy(&q);

    /* From the test set; first returns the held-out samples to training. */
    CHECK_EQ_I64(nn_partition_local_test(&p, &tr, &te, 0.1, 0, 5, &e), SIM_OK);
    CHECK_EQ_I64(p.test_from_train, 0);
    check_cover(&p, tr.n, 1, "after holdout undone");
    for (int k = 0; k < K; k++) {
        CHECK(p.n[k] == n0[k] && !memcmp(p.idx[k], orig[k], (size_t)n0[k] * sizeof(int32_t)));
        CHECK_EQ_I64(p.n_test[k], (int)floor(0.1 * n0[k] + 0.5));
        int range = 0;
        for (int i = 0; i < p.n_test[k]; i++)
            if (p.test_idx[k][i] < 0 || p.test_idx[k][i] >= te.n) range++;
        CHECK_EQ_I64(range, 0);
        if (!range) check_stratified(&p, &tr, &te, k, counts[k], n0[k], "from test");
    }
    /* Clients share a cursor over the pools, so overlap appears only once a pool wraps. */
    int *hits = calloc((size_t)te.n, sizeof *hits), total = 0, multi = 0;
    for (int k = 0; k < K; k++)
        for (int i = 0; i < p.n_test[k]; i++)
            hits[p.test_idx[k][i]]++;
    for (int i = 0; i < te.n; i++) {
        total += hits[i];
        if (hits[i] > 1) multi++;
    }
    CHECK_MSG(total > te.n || multi == 0, "%d test samples repeated before any pool wrapped",
              multi);
    free(hits);

    /* Pools smaller than the demand: counts cap at the pool size, never repeat in a client. */
    nn_dataset small = make_balanced(5, 3);
    CHECK_EQ_I64(nn_partition_local_test(&p, &tr, &small, 0.5, 0, 5, &e), SIM_OK);
    for (int k = 0; k < K; k++) {
        CHECK(p.n_test[k] <= small.n);
        for (int i = 1; i < p.n_test[k]; i++)
            CHECK(p.test_idx[k][i] > p.test_idx[k][i - 1]);
    }
    nn_dataset_destroy(&small);

    CHECK_EQ_I64(nn_partition_local_test(&p, &tr, NULL, 1.0, 1, 5, &e), SIM_EINVAL);
    CHECK_EQ_I64(nn_partition_local_test(&p, &tr, NULL, 0.1, 0, 5, &e), SIM_EINVAL);
    CHECK(strstr(e.msg, "no test set") != NULL);
    CHECK_EQ_I64(p.n_clients, K); /* errors leave p as it was */

    for (int k = 0; k < K; k++)
        free(orig[k]);
    free(orig);
    free(n0);
    free(counts);
    nn_partition_destroy(&p);

    /* Holdout keeps at least one training sample: a one-sample client keeps it. */
    nn_dataset d = make_balanced(2, 10);
    const char *path = write_text("one.part", "0\n1 2 3 4 5 6 7 8 9 10\n");
    CHECK_EQ_I64(nn_partition_file(&p, &d, path, &e), SIM_OK);
    CHECK_EQ_I64(nn_partition_local_test(&p, &d, NULL, 0.9, 1, 5, &e), SIM_OK);
    CHECK(p.n[0] == 1 && p.n_test[0] == 0);
    CHECK(p.n[1] == 1 && p.n_test[1] == 9);
    nn_partition_destroy(&p);
    unlink(path);
    nn_dataset_destroy(&d);
    nn_dataset_destroy(&tr);
    nn_dataset_destroy(&te);
}

/* A validation split comes out of the local test split: the two are disjoint, together the
 * old split, the validation share per class within one sample of frac; training is untouched;
 * the same seed draws it again, another seed another; a new local test split drops it and
 * gives its held-out samples back to training. */
static void test_local_val(void)
{
    int pc[5] = {200, 400, 600, 800, 1000};
    nn_dataset tr = make_labels(5, pc);
    nn_partition p, q;
    sim_err e = {0};
    CHECK_EQ_I64(nn_partition_dirichlet(&p, &tr, 10, 0.5, 20, 12, &e), SIM_OK);
    int K = p.n_clients, *n0 = malloc((size_t)K * sizeof *n0);
    for (int k = 0; k < K; k++)
        n0[k] = p.n[k];
    CHECK_EQ_I64(nn_partition_local_val(&p, &tr, 0.5, 5, &e), SIM_EINVAL); /* no test split */
    CHECK(strstr(e.msg, "no local test splits") != NULL);
    CHECK_EQ_I64(nn_partition_local_test(&p, &tr, NULL, 0.2, 1, 5, &e), SIM_OK);
    CHECK_EQ_I64(nn_partition_dirichlet(&q, &tr, 10, 0.5, 20, 12, &e), SIM_OK);
    CHECK_EQ_I64(nn_partition_local_test(&q, &tr, NULL, 0.2, 1, 5, &e), SIM_OK);
    CHECK_EQ_I64(nn_partition_local_val(&p, &tr, 1.0, 5, &e), SIM_EINVAL);
    CHECK(p.val_idx == NULL);
    CHECK_EQ_I64(nn_partition_local_val(&p, &tr, 0.5, 5, &e), SIM_OK);
    for (int k = 0; k < K; k++) {
        int n = q.n_test[k], *mark = calloc((size_t)tr.n, sizeof *mark), bad = 0;
        int cv[5] = {0}, ct[5] = {0};
        CHECK_EQ_I64(p.n_val[k], (int)floor(0.5 * n + 0.5));
        CHECK_EQ_I64(p.n_val[k] + p.n_test[k], n);
        CHECK(p.n[k] == q.n[k] && !memcmp(p.idx[k], q.idx[k], sizeof(int32_t) * (size_t)q.n[k]));
        for (int i = 0; i < n; i++)
            mark[q.test_idx[k][i]] = 1, ct[tr.y[q.test_idx[k][i]]]++;
        for (int i = 0; i < p.n_val[k]; i++) {
            bad += mark[p.val_idx[k][i]]++ != 1; /* in the old split, once */
            cv[tr.y[p.val_idx[k][i]]]++;
            bad += i > 0 && p.val_idx[k][i] <= p.val_idx[k][i - 1];
        }
        for (int i = 0; i < p.n_test[k]; i++) {
            bad += mark[p.test_idx[k][i]]++ != 1;
            bad += i > 0 && p.test_idx[k][i] <= p.test_idx[k][i - 1];
        }
        for (int c = 0; c < 5; c++)
            bad += fabs(cv[c] - 0.5 * ct[c]) >= 1.0;
        CHECK_MSG(bad == 0, "client %d: %d misplaced samples or classes off", k, bad);
        free(mark);
    }
    nn_partition r;
    CHECK_EQ_I64(nn_partition_dirichlet(&r, &tr, 10, 0.5, 20, 12, &e), SIM_OK);
    CHECK_EQ_I64(nn_partition_local_test(&r, &tr, NULL, 0.2, 1, 5, &e), SIM_OK);
    CHECK_EQ_I64(nn_partition_local_val(&r, &tr, 0.5, 5, &e), SIM_OK);
    int same = same_partition(&p, &r), other = 0;
    for (int k = 0; k < K; k++)
        same &= r.n_val[k] == p.n_val[k] &&
                !memcmp(r.val_idx[k], p.val_idx[k], sizeof(int32_t) * (size_t)p.n_val[k]);
    CHECK(same);
    CHECK_EQ_I64(nn_partition_local_val(&r, &tr, 0.5, 6, &e), SIM_OK); /* redrawn: all back first */
    for (int k = 0; k < K; k++)
        other |= r.n_val[k] != p.n_val[k] ||
                 memcmp(r.val_idx[k], p.val_idx[k], sizeof(int32_t) * (size_t)p.n_val[k]);
    CHECK(other);
    /* a new holdout split: the validation samples go back to training first */
    CHECK_EQ_I64(nn_partition_local_test(&p, &tr, NULL, 0.1, 1, 5, &e), SIM_OK);
    CHECK(p.val_idx == NULL && p.n_val == NULL);
    check_cover(&p, tr.n, 0, "holdout after validation");
    for (int k = 0; k < K; k++)
        CHECK_EQ_I64(p.n[k] + p.n_test[k], n0[k]);
    free(n0);
    nn_partition_destroy(&p);
    nn_partition_destroy(&q);
    nn_partition_destroy(&r);
    nn_dataset_destroy(&tr);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* keep FAIL lines even if LeakSanitizer ends the run */
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fedsim-test-part-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_iid();
    test_dirichlet();
    test_shards();
    test_groups();
    test_natural();
    test_file();
    test_local_test();
    test_local_val();
    CHECK_MSG(rmdir(tmpdir) == 0, "temp dir %s not empty", tmpdir);
    return CHECK_DONE();
}
