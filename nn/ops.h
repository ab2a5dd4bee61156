/* nn/ops.h -- the layer kernels: forward/backward pairs over raw float buffers, plus the naive
 * reference of each fast kernel, which the tests compare against.
 *
 * Dimensions: B batch, I input features, O output features (rows of a weight), C input channels,
 * H/W input height/width, OH/OW output height/width, k kernel size, s stride, p padding, K classes.
 * Convolutions work in channel-major "CBHW" layout, x[c][b][h][w]: then im2col over the whole
 * batch is one (C·k·k) × (B·OH·OW) matrix and the convolution one GEMM, whatever the batch size.
 * Weights are row-major with a leading dimension (ld) so a narrowed or row-masked layer can use a
 * sub-block of the full tensor in place. Backward kernels accumulate (+=) into weight and bias
 * gradients and write (=) the input gradient; a NULL dx skips it (the first layer needs none).
 */
#ifndef NN_OPS_H
#define NN_OPS_H

#include <stddef.h>
#include <stdint.h>

/* y (B,O) = x (B,I) · w (O,I; row stride ldw)ᵀ + b (O) [b may be NULL] */
void nn_linear_forward(float *y, const float *x, const float *w, int ldw, const float *b, int B,
                       int I, int O);
/* dx (B,I) = dy·w; dw (O,I; stride lddw) += dyᵀ·x; db (O) += Σ_b dy [dx, dw, db may be NULL] */
void nn_linear_backward(float *dx, float *dw, int lddw, float *db, const float *dy, const float *x,
                        const float *w, int ldw, int B, int I, int O);
/* Whether a linear layer of I → O at batch B takes its SGD step inside backward (nn_linear_step):
 * a big weight matrix at a batch of at most ten, where storing the gradient, zeroing it and
 * reading it back cost more than the product itself (cnn2's fc1 is 6.4 MB). */
int nn_linear_step_fuses(int B, int I, int O);
/* The weight half of that backward fused with plain SGD, for B ≤ 10: with g = dyᵀ·x, v (same
 * layout as w) = mu·v + g + wd·w and w −= lr·v, or w −= lr·(g + wd·w) leaving v alone when mu = 0
 * (nn_model_sgd_step's rule); g is never stored. Call it after the input gradient (it changes w).
 */
void nn_linear_step(float *w, float *v, int ldw, const float *dy, const float *x, int B, int I,
                    int O, float lr, float mu, float wd);
void nn_linear_forward_ref(float *y, const float *x, const float *w, int ldw, const float *b, int B,
                           int I, int O);
void nn_linear_backward_ref(float *dx, float *dw, int lddw, float *db, const float *dy,
                            const float *x, const float *w, int ldw, int B, int I, int O);

static inline int nn_conv_out(int n, int k, int s, int p)
{
    return (n + 2 * p - k) / s + 1;
}
/* Samples per im2col chunk for a batch of B: col scratch needs C·k·k × chunk·OH·OW floats. */
int nn_conv_chunk(int B, int C, int k, int OH, int OW);
/* Whether the conv runs as Winograd F(m×m, k×k) rather than im2col + GEMM: stride 1, k = 3 or 5,
 * p < k, and at least 8 input channels (below that the transforms cost more than they save). */
int nn_conv_winograd(int C, int k, int s, int p);
/* Floats of col scratch a conv of batch up to B needs; it only grows with B, C and O. */
size_t nn_conv_scratch(int B, int C, int H, int W, int O, int k, int s, int p);
/* Floats a forward keeps for backward when given a kept buffer: the batch's unfolding
 * (C·k·k × B·OH·OW) for im2col, its transformed input for Winograd. */
size_t nn_conv_kept(int B, int C, int H, int W, int k, int s, int p);
/* y (O,B,OH,OW) = w (O, C·k·k; stride ldw) ⊛ x (C,B,H,W) + b (O). kept: NULL, or nn_conv_kept
 * floats where the forward leaves what backward would otherwise recompute; col: scratch of
 * nn_conv_scratch floats. */
void nn_conv_forward(float *y, float *kept, float *col, const float *x, const float *w, int ldw,
                     const float *b, int B, int C, int H, int W, int O, int k, int s, int p);
/* dx (C,B,H,W) = ∂/∂x; dw (O, C·k·k; stride lddw) +=; db (O) +=. kept: what the forward left
 * there, or NULL to recompute it; col: scratch of nn_conv_scratch floats. */
void nn_conv_backward(float *dx, float *dw, int lddw, float *db, const float *kept, float *col,
                      const float *dy, const float *x, const float *w, int ldw, int B, int C, int H,
                      int W, int O, int k, int s, int p);
void nn_conv_forward_ref(float *y, const float *x, const float *w, int ldw, const float *b, int B,
                         int C, int H, int W, int O, int k, int s, int p);
void nn_conv_backward_ref(float *dx, float *dw, int lddw, float *db, const float *dy,
                          const float *x, const float *w, int ldw, int B, int C, int H, int W,
                          int O, int k, int s, int p);

/* 2×2 max-pool, stride 2, floor: y (P,H/2,W/2) from x (P,H,W), P planes */
void nn_maxpool2_forward(float *y, const float *x, int P, int H, int W);
/* Offset (0, 1, W or W+1) of the element a window starting at x chose for its maximum y: the
 * first one equal to y, which is the one a strict '>' scan keeps. */
int nn_maxpool2_argmax(const float *x, float y, int W);
/* dx (P,H,W) = dy routed to each window's chosen element (zero elsewhere); x, y from forward */
void nn_maxpool2_backward(float *dx, const float *dy, const float *x, const float *y, int P, int H,
                          int W);

/* Σ a_j·b_j and Σ x_j², accumulated in double in 8 interleaved partial sums added up in a fixed
 * order at the end: the same bits on every run (the order depends only on n), and a loop the
 * compiler vectorizes, where one running sum is a chain of dependent adds (a gradient norm over a
 * 2-million-parameter model per batch showed in profiles). */
double nn_dot(const float *a, const float *b, size_t n);
double nn_sumsq(const float *x, size_t n);

void nn_relu_forward(float *y, const float *x, long n);
/* dx = dy where the forward output y was positive; dx may alias dy */
void nn_relu_backward(float *dx, const float *dy, const float *y, long n);

/* y = 1/(1 + e^−x) in float (expf) */
void nn_sigmoid_forward(float *y, const float *x, long n);
/* dx = dy·y·(1 − y), multiplied left to right, from the forward output y; dx may alias dy */
void nn_sigmoid_backward(float *dx, const float *dy, const float *y, long n);

/* Batch norm over features, x (B,C). train: batch statistics (biased variance), running stats
 * updated with momentum (unbiased variance, as PyTorch); eval: running statistics. Saves xhat
 * (B,C) and invstd (C) for backward. gamma/beta/rmean/rvar are (C). y may alias x. */
void nn_bn_forward(float *y, float *xhat, float *invstd, const float *x, const float *gamma,
                   const float *beta, float *rmean, float *rvar, int B, int C, int train,
                   float momentum, float eps);
/* dx (B,C) = ∂/∂x of the training-mode forward (dx may alias dy); dgamma, dbeta (C) += */
void nn_bn_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *xhat,
                    const float *invstd, const float *gamma, int B, int C);

/* Mean softmax cross-entropy of logits (B,K) against labels y (B); writes dlogits (B,K) =
 * (softmax − onehot)/B when dlogits is non-NULL. Returns the mean loss. */
float nn_softmax_xent(float *dlogits, const float *logits, const int32_t *y, int B, int K);
/* The same, and into *sq the sum over the B samples of each one's squared cross-entropy (Oort's
 * utility), from the same per-sample losses. */
float nn_softmax_xent_sq(float *dlogits, const float *logits, const int32_t *y, int B, int K,
                         double *sq);
/* The same against soft targets q (B,K), each row a distribution (self-distillation):
 * −Σ_j q_j·log softmax(z)_j, and dlogits = (softmax − q)/B when non-NULL. */
float nn_softmax_xent_soft(float *dlogits, const float *logits, const float *q, int B, int K);
/* p (B,K) = softmax of each row of logits. */
void nn_softmax(float *p, const float *logits, int B, int K);

/* b (C,B,N) from a (B,C,N) and back: the layout changes at a CNN's input and flatten. */
void nn_transpose_bcn(float *b, const float *a, int B, int C, int N);

#endif /* NN_OPS_H */
