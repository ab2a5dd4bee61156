/* nn/partition.h -- splitting a training set across clients: IID, Dirichlet label skew, McMahan
 * shards, explicit label groups, natural (LEAF) groups, or a file; plus local test splits.
 *
 * A partition holds index lists into the dataset (nn/data.h), never copies of samples. Every
 * scheme is a pure function of (dataset labels, arguments, seed): randomness comes from the
 * stream (seed, SIM_RNG_DATA_SPLIT, 0), local test splits from (seed, SIM_RNG_DATA_SPLIT, 1) and
 * validation splits from (seed, SIM_RNG_DATA_SPLIT, 2), so drawing a test split never changes the
 * training partition, nor a validation split the training one. Each client's index list is
 * sorted ascending (canonical, cache-friendly); minibatch order is the batch stream's job.
 * All builders are all-or-nothing: on error *p is zeroed and err names the problem.
 */
#ifndef NN_PARTITION_H
#define NN_PARTITION_H

#include "nn/data.h"
#include "sim/base.h"

#include <stdint.h>

typedef struct nn_partition {
    int n_clients;
    int32_t **idx;      /* idx[k] (n[k]): training-set indices of client k's train samples, owned */
    int *n;             /* (n_clients) */
    int32_t **test_idx; /* test_idx[k] (n_test[k]): client k's local test split, owned; NULL
                         * with n_test[k] = 0 until nn_partition_local_test fills it */
    int *n_test;        /* (n_clients) */
    int test_from_train; /* 1: test_idx index the training set (holdout); 0: the test set */
    int32_t **val_idx;   /* val_idx[k] (n_val[k]): client k's validation split, taken out of its
                          * local test split (same set as test_idx), owned; NULL (and n_val NULL)
                          * until nn_partition_local_val gives the partition one */
    int *n_val;          /* (n_clients) */
} nn_partition;

/* Frees what p owns. Accepts NULL or a zeroed partition and leaves p zeroed. */
void nn_partition_destroy(nn_partition *p);

/* Shuffle, then contiguous slices: sizes differ by at most 1. Needs clients <= train->n. */
int nn_partition_iid(nn_partition *p, const nn_dataset *train, int clients, uint64_t seed,
                     sim_err *err);

/* Per class c: q ~ Dir(alpha * 1_clients), and c's shuffled samples are cut at
 * round(cumsum(q) * n_c). Whole draws repeat (same stream) until every client has at least
 * min_size samples; after 1000 tries it fails with SIM_EINVAL. min_size 0 allows empty clients. */
int nn_partition_dirichlet(nn_partition *p, const nn_dataset *train, int clients, double alpha,
                           int min_size, uint64_t seed, sim_err *err);

/* McMahan et al. shards: samples sorted by (label, index) are cut into
 * clients * shards_per_client contiguous shards whose sizes differ by at most 1 (all samples are
 * used; with n divisible by the shard count they are equal), and each client gets
 * shards_per_client shards chosen by a random permutation. */
int nn_partition_shards(nn_partition *p, const nn_dataset *train, int clients,
                        int shards_per_client, uint64_t seed, sim_err *err);

/* Client k gets the n_classes_of[k] classes classes_of[k][...]. A class listed by m clients is
 * shuffled and cut into m contiguous slices (sizes differ by at most 1), in client order.
 * Classes nobody lists are unused. Errors: a class out of range or listed twice by one client,
 * a client with no classes or no samples. */
int nn_partition_groups(nn_partition *p, const nn_dataset *train, int clients,
                        const int *const *classes_of, const int *n_classes_of, uint64_t seed,
                        sim_err *err);

/* One client per natural group (train->group, train->n_groups); every group must be non-empty. */
int nn_partition_natural(nn_partition *p, const nn_dataset *train, sim_err *err);

/* One client per line: space- or tab-separated 0-based training indices. '#' starts a comment
 * that runs to the end of the line; a line that is blank or only a comment is skipped and makes
 * no client (so a client can never be empty). Errors name path:line:col for a token that is not
 * a non-negative integer, an index >= train->n, and an index used a second time. */
int nn_partition_file(nn_partition *p, const nn_dataset *train, const char *path, sim_err *err);

/* Gives every client a local test split with its own label mix; replaces any earlier one.
 * holdout = 1: moves round(frac * n[k]) (at most n[k] - 1) of client k's train samples into
 *   test_idx (training-set indices), per class by largest-remainder rounding of the client's
 *   class counts; frac in [0, 1).
 * holdout = 0: test_idx[k] gets round(frac * n[k]) test-set indices, per class in proportion to
 *   client k's train label counts (largest remainder), taken from a shuffled per-class pool of
 *   the test set with a cursor shared by all clients, so clients overlap as little as the pool
 *   allows and a client never gets a sample twice. A class's count is capped at its pool size
 *   (fewer samples, never repeats). frac >= 0.
 * A validation split (nn_partition_local_val) goes back first and is dropped.
 * On error p is left as it was. */
int nn_partition_local_test(nn_partition *p, const nn_dataset *train, const nn_dataset *test,
                            double frac, int holdout, uint64_t seed, sim_err *err);

/* Moves round(frac * n_test[k]) of client k's local test samples into its validation split,
 * per class by largest-remainder rounding of the split's class counts, chosen at random within
 * each class: what a client selects models on (the round to report, Pa3dFL's interpolation),
 * kept apart from what it is tested on. d is the dataset the local test splits index
 * (test_from_train ? train : test). frac in [0, 1); needs local test splits (SIM_EINVAL).
 * Replaces an earlier validation split (its samples go back to the test split first). */
int nn_partition_local_val(nn_partition *p, const nn_dataset *d, double frac, uint64_t seed,
                           sim_err *err);

/* counts (train->classes) = label histogram of client k's training samples. */
void nn_partition_label_counts(const nn_partition *p, const nn_dataset *train, int k, int *counts);

#endif /* NN_PARTITION_H */
