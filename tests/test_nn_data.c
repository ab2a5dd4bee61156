/* tests/test_nn_data.c -- dataset loaders and synthetic generators (nn/data.h).
 *
 * Loads the real Fashion-MNIST once (Debian package dataset-fashion-mnist), then feeds the IDX
 * and CIFAR readers small hand-made files in a mkdtemp directory, one per error they must
 * catch, checking the code, the file named and the problem stated. The generators are checked
 * for sizes, balance, standardisation, cluster geometry and seed behaviour.
 */
#include "nn/data.h"
#include "sim/base.h"

#include "tests/check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[64];
static char made[32][128]; /* files written, removed at the end */
static int n_made;

static const char *tmp_path(const char *name)
{
    if (n_made == (int)(sizeof made / sizeof made[0])) abort(); /* raise the table size */
    snprintf(made[n_made], sizeof made[n_made], "%s/%s", tmpdir, name);
    return made[n_made++];
}

/* Writes bytes to a new file under tmpdir, gzip'd when gz; returns its path. */
static const char *write_tmp(const char *name, const unsigned char *buf, size_t len, int gz)
{
    const char *path = tmp_path(name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        CHECK(f != NULL);
        if (!f) return path;
        if (len) CHECK(gzwrite(f, buf, (unsigned)len) == (int)len);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        if (!f) return path;
        CHECK(fwrite(buf, 1, len, f) == len);
        fclose(f);
    }
    return path;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* An IDX image file of n images rows x cols (magic given), cut to keep bytes when keep >= 0. */
static const char *idx_images(const char *name, uint32_t magic, int n, int rows, int cols,
                              long keep, int gz)
{
    size_t len = 16 + (size_t)n * (size_t)rows * (size_t)cols;
    if (keep >= 0 && (size_t)keep < len) len = (size_t)keep; /* only what is written */
    unsigned char *buf = malloc(len < 16 ? 16 : len);
    put_be32(buf, magic);
    put_be32(buf + 4, (uint32_t)n);
    put_be32(buf + 8, (uint32_t)rows);
    put_be32(buf + 12, (uint32_t)cols);
    for (size_t i = 16; i < len; i++)
        buf[i] = (unsigned char)((i * 37u) % 256u);
    const char *path = write_tmp(name, buf, len, gz);
    free(buf);
    return path;
}

static const char *idx_labels(const char *name, uint32_t magic, int n, const unsigned char *lab,
                              int gz)
{
    unsigned char *buf = malloc(8 + (size_t)n);
    put_be32(buf, magic);
    put_be32(buf + 4, (uint32_t)n);
    memcpy(buf + 8, lab, (size_t)n);
    const char *path = write_tmp(name, buf, 8 + (size_t)n, gz);
    free(buf);
    return path;
}

static int is_zeroed(const nn_dataset *d)
{
    return d->n == 0 && d->x == NULL && d->y == NULL && d->group == NULL && d->classes == 0;
}

/* Checks one failing load: its code, that err names the file, and a phrase of the message. */
#define CHECK_LOAD_ERR(call, d, code, want_file, phrase)                                           \
    do {                                                                                           \
        sim_err e_ = {0};                                                                          \
        int rc_ = call(&(d), &e_);                                                                 \
        CHECK_EQ_I64(rc_, code);                                                                   \
        CHECK_MSG(strcmp(e_.file, (want_file)) == 0, "err.file '%s' != '%s'", e_.file,             \
                  (want_file));                                                                    \
        CHECK_MSG(strstr(e_.msg, (phrase)) != NULL, "msg '%s' lacks '%s'", e_.msg, (phrase));      \
        CHECK(is_zeroed(&(d)));                                                                    \
    } while (0)

static void test_fmnist(void)
{
    nn_dataset tr, te;
    sim_err err = {0};
    int rc = nn_fmnist_load(&tr, &te, NULL, &err);
    CHECK_MSG(rc == SIM_OK, "fmnist load: %s: %s", err.file, err.msg);
    if (rc != SIM_OK) return;
    CHECK_EQ_I64(tr.n, 60000);
    CHECK_EQ_I64(te.n, 10000);
    CHECK(tr.c == 1 && tr.h == 28 && tr.w == 28 && te.h == 28 && te.w == 28);
    CHECK_EQ_I64(nn_dataset_features(&tr), 784);
    CHECK_EQ_I64(tr.classes, 10);
    CHECK(tr.group == NULL && tr.n_groups == 0);
    int cnt_tr[10] = {0}, cnt_te[10] = {0}, bad = 0;
    for (int i = 0; i < tr.n; i++) {
        if (tr.y[i] < 0 || tr.y[i] > 9)
            bad++;
        else
            cnt_tr[tr.y[i]]++;
    }
    for (int i = 0; i < te.n; i++) {
        if (te.y[i] < 0 || te.y[i] > 9)
            bad++;
        else
            cnt_te[te.y[i]]++;
    }
    CHECK_EQ_I64(bad, 0);
    for (int c = 0; c < 10; c++) {
        CHECK_EQ_I64(cnt_tr[c], 6000);
        CHECK_EQ_I64(cnt_te[c], 1000);
    }
    float lo = 1, hi = 0;
    size_t nf = (size_t)tr.n * 784;
    int off_grid = 0;
    for (size_t i = 0; i < nf; i++) {
        float v = tr.x[i];
        if (v < lo) lo = v;
        if (v > hi) hi = v;
        /* Every value must be some byte / 255. */
        float b = v * 255.0f;
        if (fabsf(b - roundf(b)) > 1e-3f) off_grid++;
    }
    CHECK_NEAR(lo, 0.0, 0.0);
    CHECK_NEAR(hi, 1.0, 0.0);
    CHECK_EQ_I64(off_grid, 0);
    /* The first training image is an ankle boot (label 9) in the published files. */
    CHECK_EQ_I64(tr.y[0], 9);
    nn_dataset_destroy(&tr);
    nn_dataset_destroy(&te);
    CHECK(is_zeroed(&tr));
    nn_dataset_destroy(&tr); /* a second destroy is harmless */
    nn_dataset_destroy(NULL);

    /* A directory without the files: both outputs stay zeroed, and the first missing file is named.
     */
    rc = nn_fmnist_load(&tr, &te, tmpdir, &err);
    CHECK_EQ_I64(rc, SIM_EIO);
    CHECK(strstr(err.file, "train-images-idx3-ubyte.gz") != NULL);
    CHECK(is_zeroed(&tr) && is_zeroed(&te));
}

/* Loader wrappers for CHECK_LOAD_ERR, which passes (dataset, err). */
static const char *g_img, *g_lab;
static int g_classes;
static int load_idx(nn_dataset *d, sim_err *e)
{
    return nn_idx_load(d, g_img, g_lab, g_classes, e);
}

static void test_idx_small(void)
{
    unsigned char lab5[5] = {0, 2, 1, 2, 0};
    for (int gz = 0; gz < 2; gz++) {
        g_img = idx_images(gz ? "ok-img.gz" : "ok-img", 0x803, 5, 3, 4, -1, gz);
        g_lab = idx_labels(gz ? "ok-lab.gz" : "ok-lab", 0x801, 5, lab5, gz);
        g_classes = 0;
        nn_dataset d;
        sim_err e = {0};
        int rc = load_idx(&d, &e);
        CHECK_MSG(rc == SIM_OK, "small idx (gz %d): %s", gz, e.msg);
        if (rc != SIM_OK) continue;
        CHECK(d.n == 5 && d.c == 1 && d.h == 3 && d.w == 4);
        CHECK_EQ_I64(d.classes, 3); /* inferred: max label + 1 */
        for (int i = 0; i < 5; i++)
            CHECK_EQ_I64(d.y[i], lab5[i]);
        int wrong = 0;
        for (int i = 0; i < 60; i++)
            if (d.x[i] != (float)(((16 + i) * 37) % 256) / 255.0f) wrong++;
        CHECK_EQ_I64(wrong, 0);
        nn_dataset_destroy(&d);
        g_classes = 10; /* explicit classes are kept */
        CHECK_EQ_I64(load_idx(&d, &e), SIM_OK);
        CHECK_EQ_I64(d.classes, 10);
        nn_dataset_destroy(&d);
    }
}

static void test_idx_errors(void)
{
    unsigned char lab5[5] = {0, 2, 1, 2, 0}, lab4[4] = {0, 1, 2, 3}, lab_bad[5] = {0, 1, 7, 2, 0};
    const char *img = idx_images("img", 0x803, 5, 4, 4, -1, 1);
    const char *lab = idx_labels("lab", 0x801, 5, lab5, 1);
    nn_dataset d;

    /* Missing file, either one. */
    g_img = tmp_path("no-such-images.gz");
    g_lab = lab;
    g_classes = 10;
    CHECK_LOAD_ERR(load_idx, d, SIM_EIO, g_img, "cannot open");
    g_img = img;
    g_lab = tmp_path("no-such-labels.gz");
    CHECK_LOAD_ERR(load_idx, d, SIM_EIO, g_lab, "cannot open");

    /* Wrong magic: a label file given as images, and an image file given as labels. */
    g_img = lab;
    g_lab = lab;
    CHECK_LOAD_ERR(load_idx, d, SIM_EFORMAT, lab, "bad magic 0x00000801");
    g_img = img;
    g_lab = img;
    CHECK_LOAD_ERR(load_idx, d, SIM_EFORMAT, img, "bad magic 0x00000803");

    /* Truncated pixels: plain, gzip with a short payload, and a gzip stream cut in the middle. */
    g_lab = lab;
    g_img = idx_images("trunc-img", 0x803, 5, 4, 4, 16 + 30, 0);
    CHECK_LOAD_ERR(load_idx, d, SIM_EFORMAT, g_img,
                   "truncated: expected 80 bytes of pixels, got 30");
    g_img = idx_images("trunc-img.gz", 0x803, 5, 4, 4, 16 + 30, 1);
    CHECK_LOAD_ERR(load_idx, d, SIM_EFORMAT, g_img,
                   "truncated: expected 80 bytes of pixels, got 30");
    {
        /* Cut a compressed file of 2000 images short: its data ends inside the gzip stream. */
        const char *full = idx_images("big-img.gz", 0x803, 2000, 8, 8, -1, 1);
        FILE *f = fopen(full, "rb");
        unsigned char *buf = malloc(1 << 20);
        size_t len = fread(buf, 1, 1 << 20, f);
        fclose(f);
        CHECK(len > 200);
        g_img = write_tmp("cut-img.gz", buf, len / 2, 0);
        free(buf);
        unsigned char lab2000[2000] = {0};
        g_lab = idx_labels("lab2000", 0x801, 2000, lab2000, 0);
        CHECK_LOAD_ERR(load_idx, d, SIM_EFORMAT, g_img, "truncated: expected 128000 bytes");
        g_lab = lab;
    }
    /* Truncated header, and truncated labels. */
    g_img = idx_images("short-header", 0x803, 5, 4, 4, 10, 0);
    CHECK_LOAD_ERR(load_idx, d, SIM_EFORMAT, g_img, "truncated: expected a 16-byte IDX header");
    g_img = img;
    {
        unsigned char buf[8 + 3];
        put_be32(buf, 0x801);
        put_be32(buf + 4, 5);
        memcpy(buf + 8, lab5, 3);
        g_lab = write_tmp("trunc-lab", buf, sizeof buf, 0);
    }
    CHECK_LOAD_ERR(load_idx, d, SIM_EFORMAT, g_lab, "truncated: expected 5 bytes of labels, got 3");

    /* Count mismatch between the files. */
    g_lab = idx_labels("lab4.gz", 0x801, 4, lab4, 1);
    CHECK_LOAD_ERR(load_idx, d, SIM_EFORMAT, g_lab, "count mismatch: 4 labels");

    /* Label out of range for the classes asked for. */
    g_lab = idx_labels("lab-bad", 0x801, 5, lab_bad, 0);
    g_classes = 5;
    CHECK_LOAD_ERR(load_idx, d, SIM_EINVAL, g_lab, "label 7 of sample 2 is out of range");
    g_classes = 7; /* the boundary: label == classes is out of range */
    CHECK_LOAD_ERR(load_idx, d, SIM_EINVAL, g_lab, "label 7 of sample 2 is out of range");
    g_classes = 8; /* 7 fits in 8 classes */
    sim_err e = {0};
    CHECK_EQ_I64(load_idx(&d, &e), SIM_OK);
    nn_dataset_destroy(&d);

    /* A corrupt header count must fail as truncated, not try to allocate terabytes. */
    g_img = idx_images("huge-count", 0x803, 1000000000, 28, 28, 16 + 100, 0);
    {
        unsigned char buf[8];
        put_be32(buf, 0x801);
        put_be32(buf + 4, 1000000000);
        g_lab = write_tmp("huge-lab", buf, 8, 0);
    }
    CHECK_LOAD_ERR(load_idx, d, SIM_EFORMAT, g_img, "truncated: expected 784000000000 bytes");

    /* The formatted error reads "file: problem". */
    char line[1024];
    g_img = img;
    g_lab = idx_labels("lab4b", 0x801, 4, lab4, 0);
    g_classes = 10;
    CHECK(load_idx(&d, &e) < 0);
    sim_err_format(&e, line, sizeof line);
    CHECK_MSG(strncmp(line, g_lab, strlen(g_lab)) == 0 && strstr(line, ": count mismatch"),
              "formatted: %s", line);
}

static const char *g_cifar[2];
static int g_ncifar;
static int load_cifar(nn_dataset *d, sim_err *e)
{
    return nn_cifar10_load(d, g_cifar, g_ncifar, e);
}

static void test_cifar(void)
{
    enum { R = 3, REC = 3073 };
    static unsigned char buf[R * REC + 5];
    static const unsigned char labels[R] = {0, 5, 9};
    for (int r = 0; r < R; r++) {
        buf[r * REC] = labels[r];
        for (int j = 0; j < 3072; j++)
            buf[r * REC + 1 + j] = (unsigned char)((r * 7 + j) % 256);
    }
    g_cifar[0] = write_tmp("data_batch_1.bin", buf, R * REC, 0);
    g_cifar[1] = g_cifar[0];
    g_ncifar = 2;
    nn_dataset d;
    sim_err e = {0};
    int rc = load_cifar(&d, &e);
    CHECK_MSG(rc == SIM_OK, "cifar: %s", e.msg);
    if (rc == SIM_OK) {
        CHECK(d.n == 2 * R && d.c == 3 && d.h == 32 && d.w == 32 && d.classes == 10);
        int wrong = 0;
        for (int i = 0; i < d.n; i++) {
            int r = i % R;
            if (d.y[i] != labels[r]) wrong++;
            for (int j = 0; j < 3072; j++)
                if (d.x[(size_t)i * 3072 + j] != (float)((r * 7 + j) % 256) / 255.0f) wrong++;
        }
        CHECK_EQ_I64(wrong, 0);
        nn_dataset_destroy(&d);
    }

    g_ncifar = 1;
    g_cifar[0] = write_tmp("bad_size.bin", buf, R * REC + 5, 0);
    CHECK_LOAD_ERR(load_cifar, d, SIM_EFORMAT, g_cifar[0],
                   "size 9224 bytes is not a nonzero multiple of 3073");
    g_cifar[0] = write_tmp("empty.bin", buf, 0, 0);
    CHECK_LOAD_ERR(load_cifar, d, SIM_EFORMAT, g_cifar[0], "size 0 bytes");
    buf[REC] = 10; /* second record's label */
    g_cifar[0] = write_tmp("bad_label.bin", buf, R * REC, 0);
    CHECK_LOAD_ERR(load_cifar, d, SIM_EFORMAT, g_cifar[0], "record 1 has label 10");
    g_cifar[0] = tmp_path("missing.bin");
    CHECK_LOAD_ERR(load_cifar, d, SIM_EIO, g_cifar[0], "cannot open");
    g_ncifar = 0;
    CHECK_EQ_I64(load_cifar(&d, &e), SIM_EINVAL);
}

static int same_dataset(const nn_dataset *a, const nn_dataset *b)
{
    if (a->n != b->n || nn_dataset_features(a) != nn_dataset_features(b)) return 0;
    size_t nf = (size_t)a->n * (size_t)nn_dataset_features(a);
    if (memcmp(a->x, b->x, nf * sizeof(float)) || memcmp(a->y, b->y, (size_t)a->n * 4)) return 0;
    if (!a->group != !b->group) return 0;
    return !a->group || !memcmp(a->group, b->group, (size_t)a->n * 4);
}

static void check_standardised(const nn_dataset *d)
{
    double mean[5], std[5];
    nn_dataset_col_stats(d, mean, std);
    for (int j = 0; j < 5; j++) {
        CHECK_NEAR(mean[j], 0.0, 1e-3);
        CHECK_NEAR(std[j], 1.0, 1e-3);
    }
}

/* nn_dataset_col_stats on known columns: the std must be the unbiased (n - 1) one. */
static void test_col_stats(void)
{
    float x[8] = {1, 10, 2, 10, 3, 10, 4, 10}; /* (4, 2) */
    nn_dataset d = {.n = 4, .c = 2, .h = 1, .w = 1, .classes = 1, .x = x};
    double mean[2], std[2];
    nn_dataset_col_stats(&d, mean, std);
    CHECK_NEAR(mean[0], 2.5, 1e-12);
    CHECK_NEAR(std[0], sqrt(5.0 / 3.0), 1e-12);
    CHECK_NEAR(mean[1], 10.0, 1e-12);
    CHECK_NEAR(std[1], 0.0, 0.0);
    nn_dataset_normalize(&d, mean, std);
    CHECK_NEAR(x[0], -1.5 / sqrt(5.0 / 3.0), 1e-6);
    CHECK_NEAR(x[1], 0.0, 0.0); /* zero-spread column: centred only */
}

static void test_pews(void)
{
    nn_dataset tr, te, tr2, te2;
    sim_err e = {0};
    CHECK_EQ_I64(nn_synth_pews_make(&tr, &te, 2000, 42, &e), SIM_OK);
    CHECK_EQ_I64(tr.n, 32000);
    CHECK_EQ_I64(te.n, 6400);
    CHECK(tr.c == 5 && tr.h == 1 && tr.w == 1 && tr.classes == 4 && te.classes == 4);
    int cnt_tr[4] = {0}, cnt_te[4] = {0};
    for (int i = 0; i < tr.n; i++)
        cnt_tr[tr.y[i]]++;
    for (int i = 0; i < te.n; i++)
        cnt_te[te.y[i]]++;
    for (int c = 0; c < 4; c++) {
        CHECK_EQ_I64(cnt_tr[c], 8000);
        CHECK_EQ_I64(cnt_te[c], 1600);
    }
    check_standardised(&tr);
    check_standardised(&te);

    /* Same seed, same data; another seed, other data. */
    CHECK_EQ_I64(nn_synth_pews_make(&tr2, &te2, 2000, 42, &e), SIM_OK);
    CHECK(same_dataset(&tr, &tr2) && same_dataset(&te, &te2));
    nn_dataset_destroy(&tr2);
    nn_dataset_destroy(&te2);
    CHECK_EQ_I64(nn_synth_pews_make(&tr2, &te2, 2000, 43, &e), SIM_OK);
    CHECK(!same_dataset(&tr, &tr2) && !same_dataset(&te, &te2));
    nn_dataset_destroy(&tr2);
    nn_dataset_destroy(&te2);

    /* make = raw split 0 standardised with its own statistics. */
    nn_dataset raw;
    CHECK_EQ_I64(nn_synth_pews_split(&raw, 2000, 42, 0, &e), SIM_OK);
    double mean[5], std[5];
    nn_dataset_col_stats(&raw, mean, std);
    nn_dataset_normalize(&raw, mean, std);
    CHECK(same_dataset(&raw, &tr));
    nn_dataset_destroy(&raw);
    /* and the test set is stream 1, standardised with its own statistics. */
    CHECK_EQ_I64(nn_synth_pews_split(&raw, 400, 42, 1, &e), SIM_OK);
    nn_dataset_col_stats(&raw, mean, std);
    nn_dataset_normalize(&raw, mean, std);
    CHECK(same_dataset(&raw, &te));
    nn_dataset_destroy(&raw);
    nn_dataset_destroy(&tr);
    nn_dataset_destroy(&te);

    /* Raw geometry: each cluster (p, j) is centred at P_p + (j, -j) with the spec's label. */
    static const double P[4][2] = {{-4, 4}, {4, 4}, {-4, -4}, {4, -4}};
    static const int label[4][4] = {{0, 1, 0, 1}, {0, 1, 0, 1}, {2, 3, 2, 3}, {2, 3, 2, 3}};
    CHECK_EQ_I64(nn_synth_pews_split(&raw, 2000, 7, 0, &e), SIM_OK);
    int bad_label = 0, bad_feat = 0;
    for (int p = 0; p < 4; p++) {
        for (int j = 0; j < 4; j++) {
            double sx = 0, sy = 0, sxy = 0;
            int base = (p * 4 + j) * 2000;
            for (int i = base; i < base + 2000; i++) {
                const float *row = raw.x + (size_t)i * 5;
                sx += (double)row[0];
                sy += (double)row[1];
                if (raw.y[i] != label[p][j]) bad_label++;
                if (fabs((double)row[2] - (double)row[0] * (double)row[0]) >
                            1e-4 * (double)row[2] ||
                    fabs((double)row[4] - (double)row[0] * (double)row[1]) > 1e-3)
                    bad_feat++;
            }
            double mx = sx / 2000, my = sy / 2000;
            /* Per-coordinate std is at most 0.45, so the mean of 2000 is within 0.05 (5 sigma). */
            CHECK_NEAR(mx, P[p][0] + j, 0.05);
            CHECK_NEAR(my, P[p][1] - j, 0.05);
            for (int i = base; i < base + 2000; i++) {
                const float *row = raw.x + (size_t)i * 5;
                sxy += ((double)row[0] - mx) * ((double)row[1] - my);
            }
            /* Covariance M^T M: 0.075 off-diagonal for p = 1, 2, zero for the diagonal maps. */
            CHECK_NEAR(sxy / 1999, (p == 1 || p == 2) ? 0.075 : 0.0, 0.01);
        }
    }
    CHECK_EQ_I64(bad_label, 0);
    CHECK_EQ_I64(bad_feat, 0);
    nn_dataset_destroy(&raw);

    CHECK_EQ_I64(nn_synth_pews_make(&tr, &te, 200, 1, &e), SIM_OK);
    CHECK_EQ_I64(tr.n, 3200);
    CHECK_EQ_I64(te.n, 6400);
    int c800[4] = {0};
    for (int i = 0; i < tr.n; i++)
        c800[tr.y[i]]++;
    for (int c = 0; c < 4; c++)
        CHECK_EQ_I64(c800[c], 800);
    check_standardised(&tr);
    check_standardised(&te);
    nn_dataset_destroy(&tr);
    nn_dataset_destroy(&te);

    CHECK_EQ_I64(nn_synth_pews_make(&tr, &te, 0, 1, &e), SIM_EINVAL);
    CHECK(is_zeroed(&tr) && is_zeroed(&te));
}

static void test_leaf(void)
{
    nn_dataset tr, te, tr2, te2;
    sim_err e = {0};
    int K = 30;
    CHECK_EQ_I64(nn_synth_leaf_make(&tr, &te, K, 1.0, 1.0, 60, 10, 5, 0.1, &e), SIM_OK);
    CHECK(tr.c == 60 && tr.h == 1 && tr.w == 1 && tr.classes == 10);
    CHECK(tr.group != NULL && te.group != NULL && tr.n_groups == K && te.n_groups == K);
    int *ntr = calloc((size_t)K, sizeof *ntr), *nte = calloc((size_t)K, sizeof *nte);
    int bad = 0, seen[10] = {0};
    for (int i = 0; i < tr.n; i++) {
        if (tr.y[i] < 0 || tr.y[i] >= 10 || tr.group[i] < 0 || tr.group[i] >= K)
            bad++;
        else {
            ntr[tr.group[i]]++;
            seen[tr.y[i]] = 1;
        }
        if (i > 0 && tr.group[i] < tr.group[i - 1]) bad++; /* clients in order */
    }
    for (int i = 0; i < te.n; i++) {
        if (te.y[i] < 0 || te.y[i] >= 10 || te.group[i] < 0 || te.group[i] >= K)
            bad++;
        else
            nte[te.group[i]]++;
    }
    CHECK_EQ_I64(bad, 0);
    int classes_seen = 0, sum = 0;
    for (int c = 0; c < 10; c++)
        classes_seen += seen[c];
    CHECK_MSG(classes_seen >= 3, "only %d classes present", classes_seen);
    int bad_size = 0, distinct = 0;
    for (int k = 0; k < K; k++) {
        int nk = ntr[k] + nte[k];
        sum += nk;
        if (nk < 50 || nk > 2000 || ntr[k] < 1) bad_size++;
        if (nte[k] != (int)floor(0.1 * nk + 0.5)) bad_size++;
        if (k > 0 && nk != ntr[k - 1] + nte[k - 1]) distinct++;
    }
    CHECK_EQ_I64(bad_size, 0);
    CHECK_EQ_I64(sum, tr.n + te.n);
    CHECK_MSG(distinct >= K / 2, "client sizes look constant (%d changes)", distinct);

    /* Within a client x ~ N(v_k, diag(j^-1.2)): the pooled within-client variance of feature j
     * (1-based) is j^-1.2, 1 for the first and 60^-1.2 = 0.0074 for the last. With ~5000
     * samples each estimate is within 3% (1 sd = sqrt(2/5000) = 2%); allow 10%. */
    for (int j = 1; j <= 60; j += 59) {
        double *gsum = calloc((size_t)K, sizeof *gsum), ss = 0;
        for (int i = 0; i < tr.n; i++)
            gsum[tr.group[i]] += (double)tr.x[(size_t)i * 60 + (size_t)(j - 1)];
        for (int i = 0; i < tr.n; i++) {
            double dv = (double)tr.x[(size_t)i * 60 + (size_t)(j - 1)] -
                        gsum[tr.group[i]] / ntr[tr.group[i]];
            ss += dv * dv;
        }
        double var = ss / (tr.n - K), want = pow(j, -1.2);
        CHECK_MSG(fabs(var / want - 1) < 0.1, "feature %d: within-client variance %g, want %g", j,
                  var, want);
        free(gsum);
    }

    CHECK_EQ_I64(nn_synth_leaf_make(&tr2, &te2, K, 1.0, 1.0, 60, 10, 5, 0.1, &e), SIM_OK);
    CHECK(same_dataset(&tr, &tr2) && same_dataset(&te, &te2));
    nn_dataset_destroy(&tr2);
    nn_dataset_destroy(&te2);
    CHECK_EQ_I64(nn_synth_leaf_make(&tr2, &te2, K, 1.0, 1.0, 60, 10, 6, 0.1, &e), SIM_OK);
    CHECK(!same_dataset(&tr, &tr2));
    nn_dataset_destroy(&tr2);
    nn_dataset_destroy(&te2);

    /* Fewer clients: the first clients' samples are unchanged (one stream per client). */
    CHECK_EQ_I64(nn_synth_leaf_make(&tr2, &te2, 10, 1.0, 1.0, 60, 10, 5, 0.1, &e), SIM_OK);
    int prefix = 0;
    for (int k = 0; k < 10; k++)
        prefix += ntr[k];
    CHECK_EQ_I64(tr2.n, prefix);
    CHECK(tr2.n == prefix && !memcmp(tr2.x, tr.x, (size_t)prefix * 60 * sizeof(float)) &&
          !memcmp(tr2.y, tr.y, (size_t)prefix * 4));
    nn_dataset_destroy(&tr2);
    nn_dataset_destroy(&te2);

    /* alpha = beta = 0 (Synthetic(0,0)) is allowed; test_frac 0 gives an empty test set. */
    CHECK_EQ_I64(nn_synth_leaf_make(&tr2, &te2, 3, 0, 0, 60, 10, 5, 0, &e), SIM_OK);
    CHECK_EQ_I64(te2.n, 0);
    nn_dataset_destroy(&tr2);
    nn_dataset_destroy(&te2);

    CHECK_EQ_I64(nn_synth_leaf_make(&tr2, &te2, 0, 1, 1, 60, 10, 5, 0.1, &e), SIM_EINVAL);
    CHECK_EQ_I64(nn_synth_leaf_make(&tr2, &te2, 3, -1, 1, 60, 10, 5, 0.1, &e), SIM_EINVAL);
    CHECK_EQ_I64(nn_synth_leaf_make(&tr2, &te2, 3, 1, 1, 60, 10, 5, 1.0, &e), SIM_EINVAL);
    CHECK(strstr(e.msg, "test fraction") != NULL);
    CHECK(is_zeroed(&tr2) && is_zeroed(&te2));
    free(ntr);
    free(nte);
    nn_dataset_destroy(&tr);
    nn_dataset_destroy(&te);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* keep FAIL lines even if LeakSanitizer ends the run */
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fedsim-test-data-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_fmnist();
    test_idx_small();
    test_idx_errors();
    test_cifar();
    test_col_stats();
    test_pews();
    test_leaf();
    for (int i = 0; i < n_made; i++)
        unlink(made[i]);
    CHECK_MSG(rmdir(tmpdir) == 0, "temp dir %s not empty", tmpdir);
    return CHECK_DONE();
}
