/* algos/spafl.h -- the pieces of SpaFL (algos/spafl.c) that tests check on their own: its settings,
 * threshold count, the masks of Eq. 1 and the weight shift of Eq. 13. The algorithm itself is used
 * through the registry (spafl, spafl-local). */
#ifndef FL_SPAFL_H
#define FL_SPAFL_H

#include "nn/model.h"

#include <stdint.h>

/* SpaFL's Δτ for Eq. 13 (`spafl.delta`): the change since the client's last round
 * (accumulated), the server's last change, sent along with τ (latest: the code; the down message
 * doubles), or the accumulated change divided by the rounds it spans (mean: τ alone travels). */
enum { FL_DELTA_ACCUMULATED, FL_DELTA_LATEST, FL_DELTA_MEAN };

/* SpaFL's switches (`algorithm.spafl:`; spec 003 §7 and §8), fl_config.own for spafl and
 * spafl-local. Defaults follow the released FMNIST code (the key table in spafl.c). */
typedef struct fl_spafl_config {
    double alpha; /* α of the regulariser α·Σexp(−τ) */
    int warmup;   /* use α·σ(10r − 5) in round r, as the code does (1) or α throughout (0) */
    int eq13;     /* shift weights by the global threshold change before training */
    int eq13_nin; /* Eq. 13 divides by n_in (paper) instead of k·k for convs (code) */
    int delta;    /* the Δτ Eq. 13 uses: FL_DELTA_* */
    int momentum_reset; /* momentum restarts every job (CIFAR code) instead of persisting */
    int ste_weight;     /* the code's straight-through gradient into w through mean|w| */
    int freeze_weights; /* train thresholds only (Table 1); implies no Eq. 13 */
    int clamp;          /* keep w in [−1, 1] and τ in [0, 1] (the paper's text) */
    double collapse;    /* a layer whose keep ratio is at most this resets its thresholds to 0 */
} fl_spafl_config;

/* One threshold per output unit of every conv/linear layer (580 for LeNet-5-Caffe). */
int fl_spafl_n_thresholds(const nn_arch *a);
/* Eq. 1 after the collapse guard (see spafl.c): keep (n_thresholds) from params and tau; ratio
 * (one per conv/linear layer) holds the previous keep ratios and gets the new ones. Returns the
 * number of layers whose thresholds were reset. */
int fl_spafl_masks(const nn_arch *a, const float *params, float *tau, float *ratio, uint8_t *keep,
                   double collapse);
/* Eq. 13 on params with threshold change delta; nin selects the paper's divisor for convs. */
void fl_spafl_eq13(const nn_arch *a, float *params, const float *delta, int nin);

#endif /* FL_SPAFL_H */
