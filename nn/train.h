/* nn/train.h -- minibatches over a dataset (or a client's index list) and evaluation over one,
 * the loop pieces a centralized run and every federated client job share.
 *
 * The batcher owns a copy of the index list and reshuffles it at the start of every epoch from its
 * own RNG stream, so a client's batch order depends only on (seed, client, round), never on what
 * other clients did. Batches are gathered into one contiguous buffer for the kernels.
 */
#ifndef NN_TRAIN_H
#define NN_TRAIN_H

#include "nn/data.h"
#include "nn/model.h"

typedef struct nn_batcher {
    const nn_dataset *d; /* borrowed */
    int32_t *idx;        /* owned copy of the sample indices, shuffled per epoch */
    int n;               /* samples */
    int batch;           /* batch size */
    int pos;             /* next position in idx; n means the epoch is over */
    int drop_last;       /* skip a final short batch */
    sim_rng rng;         /* shuffling stream */
    float *x;            /* (batch, features) gathered samples */
    int32_t *y;          /* (batch) labels */
} nn_batcher;

/* idx NULL means all samples of d. The first epoch is shuffled too. */
void nn_batcher_init(nn_batcher *b, const nn_dataset *d, const int32_t *idx, int n, int batch,
                     int drop_last, const sim_rng *rng);
void nn_batcher_destroy(nn_batcher *b);
/* Gather the next batch into b->x, b->y and return its size; at the end of an epoch return 0
 * once and reshuffle, so `while ((B = nn_batcher_next(&b)))` runs exactly one epoch. */
int nn_batcher_next(nn_batcher *b);

/* Gather samples idx[0..n) (idx NULL: samples 0..n) into x (n, features) and y (n). */
void nn_gather(float *x, int32_t *y, const nn_dataset *d, const int32_t *idx, int n);

/* Accuracy of m on samples idx[0..n) of d (idx NULL: the first n), in eval mode; *loss (may be
 * NULL) gets the mean cross-entropy. */
double nn_evaluate(nn_model *m, const nn_dataset *d, const int32_t *idx, int n, double *loss);

#endif /* NN_TRAIN_H */
