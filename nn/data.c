/* nn/data.c -- dataset loaders and synthetic generators (see data.h).
 *
 * File readers never trust a header's sizes for allocation: pixel bytes are read into a buffer
 * that grows with what the file actually holds, so a corrupt count fails as "truncated" instead
 * of aborting in sim_xmalloc on a terabyte request. Generators compute in double and store
 * float; every draw comes from a sim_rng stream keyed by (seed, SIM_RNG_DATA_GEN, index).
 */
#include "nn/data.h"

#include "sim/rng.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_MAGIC_U8_1D 0x00000801u /* unsigned bytes, 1 dimension: labels */
#define IDX_MAGIC_U8_3D 0x00000803u /* unsigned bytes, 3 dimensions: images */
#define CIFAR_PIXELS    3072        /* 3 x 32 x 32 */
#define CIFAR_RECORD    (1 + CIFAR_PIXELS)
#define FMNIST_DIR      "/usr/share/datasets/fashion-mnist"

void nn_dataset_destroy(nn_dataset *d)
{
    if (!d) return;
    free(d->x);
    free(d->y);
    free(d->group);
    memset(d, 0, sizeof *d);
}

int nn_dataset_features(const nn_dataset *d)
{
    return d->c * d->h * d->w;
}

void nn_dataset_col_stats(const nn_dataset *d, double *mean, double *std)
{
    int f = nn_dataset_features(d);
    for (int j = 0; j < f; j++) {
        double s = 0;
        for (int i = 0; i < d->n; i++)
            s += (double)d->x[(size_t)i * (size_t)f + (size_t)j];
        mean[j] = d->n > 0 ? s / d->n : 0.0;
        /* Second pass about the mean: the one-pass sum-of-squares form cancels badly for the
         * x^2 columns of the PeWS set, whose mean is ~20 and spread ~1. */
        double ss = 0;
        for (int i = 0; i < d->n; i++) {
            double v = (double)d->x[(size_t)i * (size_t)f + (size_t)j] - mean[j];
            ss += v * v;
        }
        std[j] = d->n > 1 ? sqrt(ss / (d->n - 1)) : 0.0;
    }
}

void nn_dataset_normalize(nn_dataset *d, const double *mean, const double *std)
{
    int f = nn_dataset_features(d);
    for (int i = 0; i < d->n; i++) {
        float *row = d->x + (size_t)i * (size_t)f;
        for (int j = 0; j < f; j++) {
            double v = (double)row[j] - mean[j];
            row[j] = (float)(std[j] > 0 ? v / std[j] : v);
        }
    }
}

/* Allocates the arrays of a dataset whose shape is known; x and y are left uninitialised. */
static void dataset_alloc(nn_dataset *d, int n, int c, int h, int w, int classes, int with_group)
{
    memset(d, 0, sizeof *d);
    d->n = n;
    d->c = c;
    d->h = h;
    d->w = w;
    d->classes = classes;
    d->x = sim_xmalloc((size_t)n * (size_t)c * (size_t)h * (size_t)w * sizeof(float));
    d->y = sim_xmalloc((size_t)n * sizeof(int32_t));
    if (with_group) d->group = sim_xmalloc((size_t)n * sizeof(int32_t));
}

/* ---- IDX files ------------------------------------------------------------------------- */

static int gz_open(gzFile *f, const char *path, sim_err *err)
{
    errno = 0;
    *f = gzopen(path, "rb");
    if (!*f)
        return sim_fail(err, SIM_EIO, path, 0, 0, "cannot open: %s",
                        errno ? strerror(errno) : "zlib could not allocate its state");
    return SIM_OK;
}

/* Reads up to want bytes into a buffer grown as data arrives; *got < want means the file ended
 * early (a truncated gzip member counts as ending early, so both forms report "truncated"). */
static int gz_read_all(gzFile f, const char *path, size_t want, unsigned char **out, size_t *got,
                       sim_err *err)
{
    size_t cap = want < ((size_t)1 << 20) ? want : ((size_t)1 << 20);
    size_t n = 0;
    unsigned char *buf = sim_xmalloc(cap);
    while (n < want) {
        if (n == cap) {
            cap = cap > want / 2 ? want : cap * 2;
            buf = sim_xrealloc(buf, cap);
        }
        size_t chunk = cap - n;
        if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30; /* gzread takes unsigned */
        int r = gzread(f, buf + n, (unsigned)chunk);
        if (r < 0) {
            int code;
            const char *msg = gzerror(f, &code);
            if (code == Z_BUF_ERROR) break; /* input ended inside the gzip stream */
            free(buf);
            return sim_fail(err, code == Z_DATA_ERROR ? SIM_EFORMAT : SIM_EIO, path, 0, 0,
                            "read error: %s", msg);
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    *out = buf;
    *got = n;
    return SIM_OK;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads the magic and the ndims sizes of an IDX header into dims. */
static int idx_header(gzFile f, const char *path, uint32_t magic, int ndims, uint32_t *dims,
                      sim_err *err)
{
    size_t want = 4 + 4 * (size_t)ndims, got;
    unsigned char *buf;
    int rc = gz_read_all(f, path, want, &buf, &got, err);
    if (rc < 0) return rc;
    if (got >= 4 && be32(buf) != magic) {
        uint32_t m = be32(buf);
        free(buf);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "bad magic 0x%08x: expected 0x%08x (IDX unsigned bytes, %d dimension%s)", m,
                        magic, ndims, ndims == 1 ? "" : "s");
    }
    if (got < want) {
        free(buf);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "truncated: expected a %zu-byte IDX header, got %zu bytes", want, got);
    }
    for (int i = 0; i < ndims; i++)
        dims[i] = be32(buf + 4 + 4 * i);
    free(buf);
    return SIM_OK;
}

int nn_idx_load(nn_dataset *d, const char *images_path, const char *labels_path, int classes,
                sim_err *err)
{
    memset(d, 0, sizeof *d);
    gzFile fi = NULL, fl = NULL;
    unsigned char *pix = NULL, *lab = NULL;
    uint32_t idim[3] = {0}, ldim[1] = {0};
    size_t got;
    int rc;

    if ((rc = gz_open(&fi, images_path, err)) < 0) goto out;
    if ((rc = gz_open(&fl, labels_path, err)) < 0) goto out;
    if ((rc = idx_header(fi, images_path, IDX_MAGIC_U8_3D, 3, idim, err)) < 0) goto out;
    if ((rc = idx_header(fl, labels_path, IDX_MAGIC_U8_1D, 1, ldim, err)) < 0) goto out;

    /* Sizes are bounded so that n * rows * cols fits comfortably in size_t and n in int. */
    if (idim[0] == 0 || idim[0] > INT_MAX / 2 || idim[1] == 0 || idim[2] == 0 || idim[1] > 65536 ||
        idim[2] > 65536) {
        rc = sim_fail(err, SIM_EFORMAT, images_path, 0, 0,
                      "implausible image dimensions %u x %u x %u", idim[0], idim[1], idim[2]);
        goto out;
    }
    if (ldim[0] != idim[0]) {
        rc = sim_fail(err, SIM_EFORMAT, labels_path, 0, 0,
                      "count mismatch: %u labels, but %s holds %u images", ldim[0], images_path,
                      idim[0]);
        goto out;
    }

    int n = (int)idim[0], h = (int)idim[1], w = (int)idim[2];
    size_t npix = (size_t)n * (size_t)h * (size_t)w;
    if ((rc = gz_read_all(fi, images_path, npix, &pix, &got, err)) < 0) goto out;
    if (got < npix) {
        rc = sim_fail(err, SIM_EFORMAT, images_path, 0, 0,
                      "truncated: expected %zu bytes of pixels, got %zu", npix, got);
        goto out;
    }
    if ((rc = gz_read_all(fl, labels_path, (size_t)n, &lab, &got, err)) < 0) goto out;
    if (got < (size_t)n) {
        rc = sim_fail(err, SIM_EFORMAT, labels_path, 0, 0,
                      "truncated: expected %d bytes of labels, got %zu", n, got);
        goto out;
    }

    int maxlab = 0;
    for (int i = 0; i < n; i++) {
        if (classes > 0 && lab[i] >= classes) {
            rc = sim_fail(err, SIM_EINVAL, labels_path, 0, 0,
                          "label %d of sample %d is out of range: expected < %d classes", lab[i], i,
                          classes);
            goto out;
        }
        if (lab[i] > maxlab) maxlab = lab[i];
    }

    dataset_alloc(d, n, 1, h, w, classes > 0 ? classes : maxlab + 1, 0);
    for (size_t i = 0; i < npix; i++)
        d->x[i] = (float)pix[i] / 255.0f;
    for (int i = 0; i < n; i++)
        d->y[i] = lab[i];
    rc = SIM_OK;

out:
    free(pix);
    free(lab);
    if (fi) gzclose(fi);
    if (fl) gzclose(fl);
    return rc;
}

int nn_fmnist_load(nn_dataset *train, nn_dataset *test, const char *dir, sim_err *err)
{
    static const char *const names[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    char path[4][4096];
    if (!dir) dir = FMNIST_DIR;
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    for (int i = 0; i < 4; i++) {
        int len = snprintf(path[i], sizeof path[i], "%s/%s", dir, names[i]);
        if (len < 0 || (size_t)len >= sizeof path[i])
            return sim_fail(err, SIM_EINVAL, dir, 0, 0, "directory name too long");
    }
    int rc = nn_idx_load(train, path[0], path[1], 10, err);
    if (rc < 0) return rc;
    rc = nn_idx_load(test, path[2], path[3], 10, err);
    if (rc < 0) nn_dataset_destroy(train);
    return rc;
}

/* ---- CIFAR-10 ---------------------------------------------------------------------------- */

/* Opens a CIFAR batch and checks its size; *records is its record count. */
static int cifar_open(FILE **f, const char *path, long *records, sim_err *err)
{
    struct stat st;
    *f = fopen(path, "rb");
    if (!*f) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot open: %s", strerror(errno));
    if (fstat(fileno(*f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(*f);
        *f = NULL;
        return sim_fail(err, SIM_EIO, path, 0, 0, "not a regular file");
    }
    if (st.st_size <= 0 || st.st_size % CIFAR_RECORD != 0) {
        fclose(*f);
        *f = NULL;
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "size %lld bytes is not a nonzero multiple of %d (1 label byte + %d "
                        "pixel bytes per record)",
                        (long long)st.st_size, CIFAR_RECORD, CIFAR_PIXELS);
    }
    *records = (long)(st.st_size / CIFAR_RECORD);
    return SIM_OK;
}

int nn_cifar10_load(nn_dataset *d, const char *const *paths, int n_paths, sim_err *err)
{
    memset(d, 0, sizeof *d);
    if (n_paths <= 0) return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "CIFAR-10: no batch files");

    /* First pass: sizes only, so a bad file is reported before anything is allocated. */
    long total = 0;
    for (int i = 0; i < n_paths; i++) {
        FILE *f;
        long records;
        int rc = cifar_open(&f, paths[i], &records, err);
        if (rc < 0) return rc;
        fclose(f);
        if (records > INT_MAX - total)
            return sim_fail(err, SIM_EINVAL, paths[i], 0, 0, "too many records in total");
        total += records;
    }

    nn_dataset tmp;
    dataset_alloc(&tmp, (int)total, 3, 32, 32, 10, 0);
    unsigned char *rec = sim_xmalloc(CIFAR_RECORD);
    long at = 0;
    int rc = SIM_OK;
    for (int i = 0; i < n_paths && rc == SIM_OK; i++) {
        FILE *f;
        long records;
        /* Reopened: the file may have changed since the first pass, so check it again. */
        if ((rc = cifar_open(&f, paths[i], &records, err)) < 0) break;
        if (records > total - at) {
            rc = sim_fail(err, SIM_EIO, paths[i], 0, 0, "file grew while reading");
            fclose(f);
            break;
        }
        for (long r = 0; r < records; r++, at++) {
            if (fread(rec, 1, CIFAR_RECORD, f) != CIFAR_RECORD) {
                rc = sim_fail(err, SIM_EIO, paths[i], 0, 0, "read error in record %ld", r);
                break;
            }
            if (rec[0] >= 10) {
                rc = sim_fail(err, SIM_EFORMAT, paths[i], 0, 0,
                              "record %ld has label %d: expected < 10", r, rec[0]);
                break;
            }
            tmp.y[at] = rec[0];
            float *x = tmp.x + (size_t)at * CIFAR_PIXELS;
            for (int j = 0; j < CIFAR_PIXELS; j++)
                x[j] = (float)rec[1 + j] / 255.0f;
        }
        fclose(f);
    }
    free(rec);
    if (rc == SIM_OK && at != total)
        rc = sim_fail(err, SIM_EIO, paths[n_paths - 1], 0, 0, "files shrank while reading");
    if (rc < 0) {
        nn_dataset_destroy(&tmp);
        return rc;
    }
    *d = tmp;
    return SIM_OK;
}

/* ---- FedPeWS synthetic clusters (spec 002 section 4.1) --------------------------------- */

int nn_synth_pews_split(nn_dataset *d, int per_cluster, uint64_t seed, uint64_t index, sim_err *err)
{
    /* Primary centres P_p and the linear maps M_p (point = z @ M_p + P_p + O_j, z a row). */
    static const double P[4][2] = {{-4, 4}, {4, 4}, {-4, -4}, {4, -4}};
    static const double M[4][2][2] = {{{0.05, 0}, {0, 0.45}},
                                      {{0.25, 0.15}, {0.15, 0.25}},
                                      {{0.25, 0.15}, {0.15, 0.25}},
                                      {{0.25, 0}, {0, 0.05}}};
    memset(d, 0, sizeof *d);
    if (per_cluster < 1 || per_cluster > INT_MAX / 16)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "synthetic PeWS: points per cluster must be in [1, %d], got %d",
                        INT_MAX / 16, per_cluster);

    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_DATA_GEN, index);
    dataset_alloc(d, 16 * per_cluster, 5, 1, 1, 4, 0);
    size_t i = 0;
    for (int p = 0; p < 4; p++) {
        for (int j = 0; j < 4; j++) {
            /* Classes alternate along each diagonal: {0,1} in the top quadrants, {2,3} below. */
            int32_t label = (p < 2 ? 0 : 2) + (j % 2);
            double cx = P[p][0] + j, cy = P[p][1] - j;
            for (int k = 0; k < per_cluster; k++, i++) {
                double z1 = sim_rng_normal(&r), z2 = sim_rng_normal(&r);
                double x = z1 * M[p][0][0] + z2 * M[p][1][0] + cx;
                double y = z1 * M[p][0][1] + z2 * M[p][1][1] + cy;
                float *row = d->x + i * 5;
                row[0] = (float)x;
                row[1] = (float)y;
                row[2] = (float)(x * x);
                row[3] = (float)(y * y);
                row[4] = (float)(x * y);
                d->y[i] = label;
            }
        }
    }
    return SIM_OK;
}

static void standardize_own(nn_dataset *d)
{
    double mean[5], std[5];
    nn_dataset_col_stats(d, mean, std);
    nn_dataset_normalize(d, mean, std);
}

int nn_synth_pews_make(nn_dataset *train, nn_dataset *test, int per_cluster_train, uint64_t seed,
                       sim_err *err)
{
    memset(test, 0, sizeof *test);
    int rc = nn_synth_pews_split(train, per_cluster_train, seed, 0, err);
    if (rc < 0) return rc;
    rc = nn_synth_pews_split(test, 400, seed, 1, err);
    if (rc < 0) {
        nn_dataset_destroy(train);
        return rc;
    }
    standardize_own(train);
    standardize_own(test);
    return SIM_OK;
}

/* ---- LEAF Synthetic(alpha, beta) ------------------------------------------------------- */

#define LEAF_MIN_SAMPLES 50
#define LEAF_MAX_SAMPLES 2000

int nn_synth_leaf_make(nn_dataset *train, nn_dataset *test, int n_clients, double alpha,
                       double beta, int dim, int classes, uint64_t seed, double test_frac,
                       sim_err *err)
{
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (n_clients < 1 || n_clients > 1000000)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "synthetic LEAF: clients must be in [1, 1000000], got %d", n_clients);
    if (dim < 1 || dim > 100000 || classes < 2 || classes > 100000)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "synthetic LEAF: need dim in [1, 100000] and classes in [2, 100000], "
                        "got dim %d, classes %d",
                        dim, classes);
    if (!(alpha >= 0 && isfinite(alpha)) || !(beta >= 0 && isfinite(beta)))
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "synthetic LEAF: alpha and beta are variances, need finite >= 0, got "
                        "%g, %g",
                        alpha, beta);
    if (!(test_frac >= 0 && test_frac < 1))
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "synthetic LEAF: test fraction must be in [0, 1), got %g", test_frac);

    /* Pass 1 draws each client's means and size, keeping its stream to continue in pass 2:
     * the dataset must be sized before any sample is drawn. */
    sim_rng *rng = sim_xmalloc((size_t)n_clients * sizeof *rng);
    double *u = sim_xmalloc((size_t)n_clients * sizeof *u);
    double *bm = sim_xmalloc((size_t)n_clients * sizeof *bm);
    int *ntr = sim_xmalloc((size_t)n_clients * sizeof *ntr);
    int *nte = sim_xmalloc((size_t)n_clients * sizeof *nte);
    long long tot_tr = 0, tot_te = 0;
    for (int k = 0; k < n_clients; k++) {
        sim_rng_seed(&rng[k], seed, SIM_RNG_DATA_GEN, (uint64_t)k);
        u[k] = sqrt(alpha) * sim_rng_normal(&rng[k]);
        bm[k] = sqrt(beta) * sim_rng_normal(&rng[k]);
        double s = LEAF_MIN_SAMPLES + floor(exp(4.0 + 2.0 * sim_rng_normal(&rng[k])));
        int nk = s > LEAF_MAX_SAMPLES ? LEAF_MAX_SAMPLES : (int)s;
        int te = (int)floor(test_frac * nk + 0.5);
        if (te > nk - 1) te = nk - 1;
        ntr[k] = nk - te;
        nte[k] = te;
        tot_tr += ntr[k];
        tot_te += te;
    }
    int rc = SIM_OK;
    if (tot_tr * dim > INT_MAX || tot_te * dim > INT_MAX) {
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                      "synthetic LEAF: %lld samples of dimension %d is too large", tot_tr + tot_te,
                      dim);
        goto done;
    }

    dataset_alloc(train, (int)tot_tr, dim, 1, 1, classes, 1);
    dataset_alloc(test, (int)tot_te, dim, 1, 1, classes, 1);
    train->n_groups = test->n_groups = n_clients;
    double *W = sim_xmalloc((size_t)classes * (size_t)dim * sizeof *W);
    double *b = sim_xmalloc((size_t)classes * sizeof *b);
    double *v = sim_xmalloc((size_t)dim * sizeof *v);
    double *sd = sim_xmalloc((size_t)dim * sizeof *sd);
    double *x = sim_xmalloc((size_t)dim * sizeof *x);
    for (int j = 0; j < dim; j++)
        sd[j] = pow(j + 1, -0.6); /* sqrt of Sigma_jj = (j+1)^-1.2 */
    int at_tr = 0, at_te = 0;
    for (int k = 0; k < n_clients; k++) {
        sim_rng *r = &rng[k];
        for (size_t i = 0; i < (size_t)classes * (size_t)dim; i++)
            W[i] = u[k] + sim_rng_normal(r);
        for (int c = 0; c < classes; c++)
            b[c] = u[k] + sim_rng_normal(r);
        for (int j = 0; j < dim; j++)
            v[j] = bm[k] + sim_rng_normal(r);
        for (int s = 0; s < ntr[k] + nte[k]; s++) {
            nn_dataset *d = s < ntr[k] ? train : test;
            int at = s < ntr[k] ? at_tr++ : at_te++;
            float *row = d->x + (size_t)at * (size_t)dim;
            for (int j = 0; j < dim; j++) {
                x[j] = v[j] + sd[j] * sim_rng_normal(r);
                row[j] = (float)x[j];
            }
            /* argmax of softmax(Wx + b) is argmax of Wx + b; ties go to the lowest class. */
            int best = 0;
            double best_z = -HUGE_VAL;
            for (int c = 0; c < classes; c++) {
                double z = b[c];
                for (int j = 0; j < dim; j++)
                    z += W[(size_t)c * (size_t)dim + (size_t)j] * x[j];
                if (z > best_z) {
                    best_z = z;
                    best = c;
                }
            }
            d->y[at] = best;
            d->group[at] = k;
        }
    }
    free(W);
    free(b);
    free(v);
    free(sd);
    free(x);
done:
    free(rng);
    free(u);
    free(bm);
    free(ntr);
    free(nte);
    return rc;
}
