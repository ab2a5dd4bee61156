/* nn/layers.h -- layers in double precision, for the small networks an algorithm keeps beside the
 * model (pFedHN's hyper-network): float parameters, double activations and gradients, every sum
 * a plain loop in index order. Such a network runs one sample at a time on the server, where
 * sgemm buys nothing, and its results then do not depend on the BLAS kernels or threads.
 *
 * Shapes as in nn/ops.h: B batch, I input features, O output features (rows of a weight). As there,
 * backward writes (=) the input gradient and accumulates (+=) into the weight and bias gradients;
 * a NULL gradient is skipped.
 */
#ifndef NN_LAYERS_H
#define NN_LAYERS_H

/* y (B,O) = b (O) + x (B,I) · w (O,I)ᵀ, each output's sum started at its bias (0 when b is NULL)
 * and taken over the inputs in order */
void nn_linear64_forward(double *y, const double *x, const float *w, const float *b, int B, int I,
                         int O);
/* dx (B,I) = dy·w; dw (O,I) += dyᵀ·x; db (O) += Σ_b dy: sample by sample, and within a sample
 * output by output (dx's sums over the outputs start at 0) */
void nn_linear64_backward(double *dx, double *dw, double *db, const double *dy, const double *x,
                          const float *w, int B, int I, int O);

void nn_relu64_forward(double *y, const double *x, long n);
/* dx = dy where the forward output y was positive; dx may alias dy */
void nn_relu64_backward(double *dx, const double *dy, const double *y, long n);

#endif /* NN_LAYERS_H */
