/* nn/data.h -- datasets in memory: IDX (Fashion-MNIST) and CIFAR-10 loaders, and the two
 * synthetic generators (FedPeWS 2-D clusters, LEAF Synthetic(alpha, beta)).
 *
 * A dataset is one flat float matrix x (n, c*h*w) plus int32 labels, loaded whole: the largest
 * one fedsim uses (Fashion-MNIST train, 60000 x 784 floats) is 188 MB, and every client reads
 * its samples through index lists (nn/partition.h), so nothing is copied per client. Images
 * are stored as uint8/255 in [0, 1]; any further normalisation is the caller's choice.
 * Loaders are all-or-nothing: on error they return a negative SIM_E* code, fill err with the
 * file and the problem, and leave the output zeroed with nothing allocated.
 */
#ifndef NN_DATA_H
#define NN_DATA_H

#include "sim/base.h"

#include <stdint.h>

typedef struct nn_dataset {
    int n;          /* samples */
    int c, h, w;    /* sample shape; features = c*h*w (h = w = 1 for vector data) */
    int classes;    /* labels are in [0, classes) */
    float *x;       /* (n, c*h*w) row-major, owned */
    int32_t *y;     /* (n) labels, owned */
    int32_t *group; /* (n) natural client id (LEAF synthetic) or NULL, owned */
    int n_groups;   /* number of natural groups, 0 if none */
} nn_dataset;

/* Frees what d owns. Accepts NULL or a zeroed dataset and leaves d zeroed. */
void nn_dataset_destroy(nn_dataset *d);
int nn_dataset_features(const nn_dataset *d);

/* Column statistics of x: mean (features) and unbiased standard deviation (features), computed
 * in double. Splitting this from nn_dataset_normalize lets a caller standardise a test set with
 * the training set's statistics (FedPeWS option --test-norm=train). */
void nn_dataset_col_stats(const nn_dataset *d, double *mean, double *std);
/* x[:, j] = (x[:, j] - mean[j]) / std[j]; a column with std 0 is only centred. */
void nn_dataset_normalize(nn_dataset *d, const double *mean, const double *std);

/* IDX image/label files (LeCun's MNIST format), gzip'd or plain. classes <= 0 infers
 * max label + 1. Errors: SIM_EIO (open/read), SIM_EFORMAT (magic, truncation, count mismatch,
 * corrupt gzip), SIM_EINVAL (a label >= classes). */
int nn_idx_load(nn_dataset *d, const char *images_path, const char *labels_path, int classes,
                sim_err *err);

/* Both Fashion-MNIST splits from dir (NULL: /usr/share/datasets/fashion-mnist, Debian package
 * dataset-fashion-mnist). On error both outputs are zeroed. */
int nn_fmnist_load(nn_dataset *train, nn_dataset *test, const char *dir, sim_err *err);

/* CIFAR-10 binary batches (data_batch_N.bin, test_batch.bin) concatenated in the order given:
 * records of 1 label byte + 3072 pixel bytes (3x32x32, channel-major). */
int nn_cifar10_load(nn_dataset *d, const char *const *paths, int n_paths, sim_err *err);

/* One split of the FedPeWS synthetic set (spec 002 section 4.1): 16 clusters of per_cluster points,
 * p-major then j, features [x, y, x^2, y^2, xy] (c = 5, classes 4), NOT standardised. The rng
 * stream is (seed, SIM_RNG_DATA_GEN, index); nn_synth_pews_make uses index 0 for train and 1
 * for test. Exposed so that tests can check raw cluster geometry and callers can pick the
 * normalisation. */
int nn_synth_pews_split(nn_dataset *d, int per_cluster, uint64_t seed, uint64_t index,
                        sim_err *err);

/* Synthetic-32K (per_cluster_train 2000) or -3.2K (200): train with per_cluster_train points per
 * cluster, an independent test set with 400 per cluster, each split standardised with its own
 * column mean and unbiased std, as the ShapFed code does. */
int nn_synth_pews_make(nn_dataset *train, nn_dataset *test, int per_cluster_train, uint64_t seed,
                       sim_err *err);

/* LEAF / FedProx Synthetic(alpha, beta) with n_clients natural groups (group[i] = client).
 * alpha and beta are variances, as in the paper ("u_k ~ N(0, alpha)"); the FedProx script passes
 * them to numpy as standard deviations, which differs for values other than 0 and 1.
 * Client k draws n_k = min(50 + floor(exp(N(4, 2^2))), 2000) samples (the FedProx script's
 * lognormal(4, 2) + 50, capped so one client cannot hold most of the data) from its own stream
 * (seed, SIM_RNG_DATA_GEN, k), so adding clients does not change the existing ones. The last
 * round(test_frac * n_k) samples of client k go to test, keeping at least one in train.
 * Callers use dim 60, classes 10. */
int nn_synth_leaf_make(nn_dataset *train, nn_dataset *test, int n_clients, double alpha,
                       double beta, int dim, int classes, uint64_t seed, double test_frac,
                       sim_err *err);

#endif /* NN_DATA_H */
