/* algos/spafl.h -- the pieces of SpaFL (algos/spafl.c) that tests check on their own: threshold
 * count, the masks of Eq. 1 and the weight shift of Eq. 13. The algorithm itself is used through
 * fl_spafl / fl_spafl_local (algo.h). */
#ifndef FL_SPAFL_H
#define FL_SPAFL_H

#include "nn/model.h"

#include <stdint.h>

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
