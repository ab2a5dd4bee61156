/* nn/train.c -- minibatching and evaluation over datasets (see train.h). */
#include "nn/train.h"

#include <stdlib.h>
#include <string.h>

void nn_gather(float *x, int32_t *y, const nn_dataset *d, const int32_t *idx, int n)
{
    size_t f = (size_t)nn_dataset_features(d);
    for (int i = 0; i < n; i++) {
        size_t s = idx ? (size_t)idx[i] : (size_t)i;
        memcpy(x + (size_t)i * f, d->x + s * f, sizeof(float) * f);
        y[i] = d->y[s];
    }
}

void nn_batcher_init(nn_batcher *b, const nn_dataset *d, const int32_t *idx, int n, int batch,
                     int drop_last, const sim_rng *rng)
{
    memset(b, 0, sizeof *b);
    b->d = d;
    b->n = n;
    b->batch = batch;
    b->drop_last = drop_last;
    b->rng = *rng;
    b->idx = sim_xmalloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++)
        b->idx[i] = idx ? idx[i] : i;
    b->x = sim_xmalloc(sizeof(float) * (size_t)batch * (size_t)nn_dataset_features(d));
    b->y = sim_xmalloc(sizeof(int32_t) * (size_t)batch);
    sim_rng_shuffle_u32(&b->rng, (uint32_t *)b->idx, (size_t)n);
}

void nn_batcher_destroy(nn_batcher *b)
{
    if (!b) return;
    free(b->idx);
    free(b->x);
    free(b->y);
    memset(b, 0, sizeof *b);
}

int nn_batcher_next(nn_batcher *b)
{
    int left = b->n - b->pos;
    if (left <= 0 || (b->drop_last && left < b->batch)) {
        b->pos = 0;
        sim_rng_shuffle_u32(&b->rng, (uint32_t *)b->idx, (size_t)b->n);
        return 0;
    }
    int B = left < b->batch ? left : b->batch;
    nn_gather(b->x, b->y, b->d, b->idx + b->pos, B);
    b->pos += B;
    return B;
}

double nn_evaluate(nn_model *m, const nn_dataset *d, const int32_t *idx, int n, double *loss)
{
    int chunk = m->max_batch, f = nn_dataset_features(d);
    float *x = idx ? sim_xmalloc(sizeof(float) * (size_t)chunk * (size_t)f) : NULL;
    int32_t *y = idx ? sim_xmalloc(sizeof(int32_t) * (size_t)chunk) : NULL;
    long correct = 0;
    double sum = 0;
    for (int s = 0; s < n; s += chunk) {
        int B = n - s < chunk ? n - s : chunk;
        double l;
        if (idx) {
            nn_gather(x, y, d, idx + s, B);
            correct += nn_model_evaluate(m, x, y, B, &l);
        } else { /* contiguous samples need no copy */
            correct += nn_model_evaluate(m, d->x + (size_t)s * f, d->y + s, B, &l);
        }
        sum += l * B;
    }
    free(x);
    free(y);
    if (loss) *loss = n ? sum / n : 0;
    return n ? (double)correct / n : 0;
}
