/* nn/model.h -- models: an architecture (layers + tensor layout), one float arena per instance,
 * forward/backward over a batch, SGD, and the structured narrowing that makes sparse clients cheap.
 *
 * Layout: every tensor (weights, biases, batch-norm statistics) is an offset into one arena of
 * n_floats; params, grads and momentum are three views of the same layout, so averaging, masking
 * and serialization are single loops over n_floats.
 *
 * Narrowing: each hidden conv/linear layer has an *active list* of output channels (all of them by
 * default). Width slicing (HeteroFL/FjORD prefix, FedRolex rolling window) and row masks (a pruned
 * neuron or filter, SpaFL) both set these lists; the kernels then run on compact activations and
 * on the matching sub-block of each weight (taken in place when the lists are contiguous ranges,
 * gathered otherwise), so a narrowed model does smaller GEMMs, not multiplications by zero.
 * Element masks (unstructured) keep dense shapes: weights are multiplied by the mask, FLOPs are
 * counted dense and the masked density is reported so a device's sparse efficiency can apply.
 * Parameters outside the active lists or masks are not "live": they get no gradient and SGD leaves
 * them (weights, momentum) untouched, exactly as if a submodel had been extracted and trained.
 */
#ifndef NN_MODEL_H
#define NN_MODEL_H

#include "sim/base.h"
#include "sim/rng.h"

#include <stddef.h>
#include <stdint.h>

#define NN_MAX_LAYERS  32
#define NN_MAX_TENSORS 64
#define NN_ALIGN       16 /* tensors start on 64-byte boundaries */

typedef struct nn_tensor {
    char name[24];  /* "fc1.w": stable, used in messages and checkpoints */
    int rows, cols; /* row-major; a conv weight is (out, in·k·k), a vector is (n, 1) */
    size_t off;     /* in floats from the arena start */
    int trainable;  /* 0 for running statistics: averaged and sent, never stepped by SGD */
} nn_tensor;

typedef struct nn_layout {
    nn_tensor t[NN_MAX_TENSORS];
    int n;           /* tensors */
    size_t n_floats; /* arena size, including alignment padding (kept zero) */
    size_t n_params; /* sum of rows·cols over all tensors (what a paper counts) */
} nn_layout;

typedef enum nn_op { NN_LINEAR, NN_CONV, NN_MAXPOOL, NN_RELU, NN_FLATTEN, NN_BATCHNORM } nn_op;

typedef struct nn_layer {
    nn_op op;
    int c, h, w;    /* input channels (features for linear/bn), height, width */
    int oc, oh, ow; /* output shape */
    int k, s, p;    /* conv kernel, stride, padding */
    int blk;        /* linear: input features per upstream channel (h·w after a flatten, else 1) */
    int wt, bt;     /* weight and bias tensors (bn: gamma, beta), -1 when absent */
    int rmt, rvt;   /* bn running mean and variance tensors, -1 otherwise */
    int narrow;     /* 1 when its output channels may be narrowed or row-masked (hidden layers) */
} nn_layer;

typedef struct nn_arch {
    char name[64];
    int in_c, in_h, in_w, classes;
    nn_layer l[NN_MAX_LAYERS];
    int n;
    nn_layout layout;
    double width; /* NAME@width: hidden layers were built with ceil(width·C) outputs (else 1) */
    int n_thin;   /* while building: how many conv/linear layers, from the first, get width */
} nn_arch;

/* Build an architecture by name for inputs of shape (c, h, w) and `classes` outputs:
 *   mlp:784-200-200-10   fully connected widths, input first, output last (ReLU between)
 *   mlpbn:784-200-10     the same with 1-D batch norm before every hidden ReLU
 *   cnn2                 McMahan et al.: conv5x5 32 + pool, conv5x5 64 + pool, fc 512, fc classes
 *   lenet5-caffe         SpaFL: conv5x5 20 + pool, conv5x5 50 + pool, fc 500, fc classes, no bias
 *   lenet-mnn            the LeNet of the phone measurements (devices/phones/README.md): conv5x5
 *                        20 + pool, conv5x5 50 + pool (no ReLU), fc 400, fc classes, biases
 *   pa3dfl-cnn           Pa3dFL Fashion CNN: cnn2 with fc 512, fc 128 before the head
 *   leaf-cnn             LEAF/FedEM CNN (pFedGate's (F)EMNIST model): conv5x5 32 + pool, conv5x5
 *                        64 + pool (no padding), fc 2048, fc classes
 *   fedpews-mlp          FedPeWS: mlp 5-32-64-128-32-4
 *   fedpews-cnn          FedPeWS Table 5: 3 × (conv3x3 p1 32/64/128 + pool), fc classes
 *   NAME@p               any of these with ⌈p·C⌉ outputs in every hidden conv/linear layer, as a
 *                        model of its own (initialized for its own fan-in): the model the
 *                        weakest client can hold, for FedAvg at the weakest width
 * Returns SIM_EINVAL with a message for unknown names or shapes that do not fit. */
int nn_arch_build(nn_arch *a, const char *name, int c, int h, int w, int classes, sim_err *err);

/* What one job cost, as the kernels executed it. flops counts 2·MACs of every GEMM actually run
 * (narrowed layers count their reduced sizes). Of those, flops_masked were run dense on
 * element-masked weights, and flops_masked_nnz is the same work scaled by the masks' density.
 * bytes counts the activations the passes wrote, 4 bytes a float, at the widths run: forward,
 * each layer's output and a convolution's input unfolded into k·k-long columns; backward, each
 * layer's input gradient (unfolded too for a convolution) except the data's, and ReLU's in
 * place. It grows with width where FLOPs grow with its square: the memory traffic that makes a
 * narrow model slower than its FLOPs say (devices/profile.h, mem_bandwidth).
 * samples counts the training samples processed. loss_sq sums each training sample's squared
 * cross-entropy loss against its label over the loss_n samples it was counted on (forward passes
 * in training mode with labels): Oort's statistical utility reads sqrt(loss_sq / loss_n).
 *
 * NN_COST_TERMS lists the terms once, as X(name, work): the struct, nn_cost_terms[] and every walk
 * over the terms (nn_cost_add, the result frame in sim/frame.c, a job's device work in sim/cost.c)
 * come from it, so a new term is a line here plus the code that produces it. work 1 marks a count
 * of work that nn_cost_add scales and adds; samples (0) are the caller's to count. */
#define NN_COST_TERMS(X)                                                                           \
    X(flops, 1)                                                                                    \
    X(flops_masked, 1)                                                                             \
    X(flops_masked_nnz, 1)                                                                         \
    X(bytes, 1)                                                                                    \
    X(samples, 0)                                                                                  \
    X(loss_sq, 0)                                                                                  \
    X(loss_n, 0)

#define NN_COST_MEMBER(name, work) double name;
typedef struct nn_cost {
    NN_COST_TERMS(NN_COST_MEMBER)
} nn_cost;
#undef NN_COST_MEMBER

#define NN_COST_ONE(name, work) +1
enum { NN_COST_N = 0 NN_COST_TERMS(NN_COST_ONE) }; /* the number of terms */
#undef NN_COST_ONE

/* One term: its name (the member's), where it sits in nn_cost, and its work flag. */
typedef struct nn_cost_term {
    const char *name;
    size_t off;
    int work;
} nn_cost_term;
extern const nn_cost_term nn_cost_terms[NN_COST_N]; /* in NN_COST_TERMS order */

/* Zero c's loss sums (loss_sq, loss_n) as a job starts: unlike the integral terms, a
 * fractional sum's difference over a job depends on what the sum held before it (rounding), so
 * a job that read it off an accumulator kept across jobs would report bits that depend on the
 * worker's history. Counted from 0, a job's sums are a function of the job alone. */
static inline void nn_cost_job_start(nn_cost *c)
{
    c->loss_sq = c->loss_n = 0;
}

/* Term i (< NN_COST_N) of c. */
static inline double *nn_cost_at(nn_cost *c, int i)
{
    return (double *)((char *)c + nn_cost_terms[i].off);
}
static inline double nn_cost_get(const nn_cost *c, int i)
{
    return *(const double *)((const char *)c + nn_cost_terms[i].off);
}

/* to's work counts (FLOPs, masked FLOPs, bytes) += k × c's; samples are the caller's to count. */
void nn_cost_add(nn_cost *to, const nn_cost *c, double k);
/* Every term of to += now's - before's: what a model's running count grew by (samples too). */
void nn_cost_add_diff(nn_cost *to, const nn_cost *now, const nn_cost *before);

typedef struct nn_sgd {
    float lr;
    float momentum;     /* 0 for plain SGD; PyTorch form v = μv + g, w −= lr·v */
    float weight_decay; /* L2 added to the gradient of trainable tensors */
    float clip_norm;    /* clip the global gradient norm to this when > 0 */
} nn_sgd;

typedef struct nn_model {
    nn_arch arch;        /* copied: a model owns its description */
    int max_batch;       /* workspace is sized for this */
    float *params;       /* n_floats; owns the block holding params, grads and momentum */
    float *grads;        /* n_floats, same block */
    float *mom;          /* n_floats, same block */
    uint8_t *live;       /* n_floats: 1 where the current lists/masks train the parameter */
    uint32_t (*runs)[2]; /* maximal live stretches of trainable tensors: {offset, length};
                            SGD and zero_grad visit only these, so a narrowed model's update
                            costs what its live parameters cost */
    size_t n_runs;
    int *list[NN_MAX_LAYERS]; /* narrowable layers: active output channels, ascending order
                                 not required; NULL for other layers */
    int nlist[NN_MAX_LAYERS]; /* their lengths */
    const uint8_t *emask[NN_MAX_TENSORS]; /* borrowed element masks (n = rows·cols) or NULL */
    float *grad_out[NN_MAX_LAYERS];       /* borrowed (nn_model_take_grad_out) or NULL */
    nn_cost cost;                         /* accumulated by forward/backward; reset by the caller */
    float narrow_scale;   /* HeteroFL's Scaler: every forward multiplies the conv/linear output of
                             each narrowable layer by this (1/p for a p-wide sub-model, so its
                             thinner sums keep the full model's scale), and backward follows.
                             1 (none) unless an algorithm sets it */
    float loss;           /* of the last forward with labels */
    float *logits;        /* (B, classes) of the last forward, inside the workspace */
    struct nn_work *work; /* activations and scratch, private to model.c */
} nn_model;

void nn_model_init(nn_model *m, const nn_arch *a, int max_batch);
void nn_model_destroy(nn_model *m);
/* PyTorch's default init: weights and biases U(−1/√fan_in, 1/√fan_in); bn γ=1, β=0, var=1. */
void nn_model_init_params(nn_model *m, sim_rng *r);
/* After nn_model_init_params on a narrowed model: rescale each conv/linear output row's live
 * weights and its bias so they are uniform in ±1/√(its live inputs), the bound a model built at
 * that width draws from, instead of ±1/√(all inputs) (a narrow corner of the full model's
 * initialization is too small to train on its own). */
void nn_model_init_fit_live(nn_model *m);
/* Zero the gradients of live parameters; the others are always zero (narrowing zeroes them). */
void nn_model_zero_grad(nn_model *m);

/* Forward a batch x (B, c·h·w). With labels y, returns the mean cross-entropy (and remembers
 * what backward needs); without, returns 0. train selects batch-norm batch statistics. */
float nn_model_forward(nn_model *m, const float *x, const int32_t *y, int B, int train);
/* Training-mode forward against soft targets q (B, classes), for self-distillation: returns
 * the mean soft cross-entropy and remembers what backward needs, as a forward with labels. */
float nn_model_forward_soft(nn_model *m, const float *x, const float *q, int B);
/* Backward of the last forward with labels: accumulates into grads of live parameters. */
void nn_model_backward(nn_model *m);
/* One SGD step over live trainable parameters. Returns the gradient norm before clipping when
 * clipping is on (it costs a pass over the gradients), 0 otherwise. */
float nn_model_sgd_step(nn_model *m, const nn_sgd *opt);
/* zero_grad + backward + SGD step of the last forward with labels, for callers with nothing to
 * add between backward and the step: a big linear layer at a small batch then takes its step
 * inside backward (nn_linear_step_fuses), its weight gradient never stored, zeroed or read back;
 * the gradients of such layers are left as they were. */
void nn_model_backward_step(nn_model *m, const nn_sgd *opt);
/* forward + nn_model_backward_step, counting the samples; returns the batch loss. */
float nn_model_train_step(nn_model *m, const nn_sgd *opt, const float *x, const int32_t *y, int B);
/* Correct predictions over n samples, evaluated in eval mode in batches; *loss gets the mean. */
int nn_model_evaluate(nn_model *m, const float *x, const int32_t *y, int n, double *loss);

/* Narrowing. A width p in (0,1] keeps ceil(p·C) channels of every narrowable layer: the first
 * ones (shift 0) or a window starting at channel shift mod C, wrapping around (FedRolex). */
void nn_model_set_width(nn_model *m, double p, long shift);
/* Width p (first channels) for one more forward/backward inside the same step, keeping the
 * gradients so far (FjORD trains a nested sub-model on top of the full one): the gradients then
 * sum both. Go back to the outer width the same way before the SGD step, so that every non-zero
 * gradient is live again when zero_grad runs. */
void nn_model_nest_width(nn_model *m, double p);
/* Keep the channels of layer li whose keep[] is non-zero (a row mask over its outputs). */
void nn_model_set_rows(nn_model *m, int li, const uint8_t *keep);
/* Row masks for every narrowable layer at once: keep[li] (indexed by layer, NULL = all channels)
 * for each layer with `narrow`; other entries are ignored. Refreshes the live map only when a
 * list changed, so masks recomputed every step (SpaFL) cost O(channels) while they hold still.
 * A layer may keep no channel at all: it then outputs zeros. */
void nn_model_set_row_masks(nn_model *m, const uint8_t *const *keep);
/* Borrow an element mask for tensor ti (NULL removes it). */
void nn_model_set_mask(nn_model *m, int ti, const uint8_t *mask);
/* Borrow the element masks of every tensor at once (masks[t], NULL for none): one refresh. */
void nn_model_set_masks(nn_model *m, const uint8_t *const *masks);
/* For a linear layer li: every backward writes dL/d(output), (B, active outputs), into buf (NULL:
 * no more) and computes no weight gradient for it, for callers that hold the weight in factored
 * form and get its factors' gradients cheaper from the layer's input and output gradient. */
void nn_model_take_grad_out(nn_model *m, int li, float *buf);
/* The input of linear layer li in the last forward, (B, *cols): its active input features. */
const float *nn_model_layer_input(const nn_model *m, int li, int *cols);
/* Back to the full dense model. */
void nn_model_reset_narrowing(nn_model *m);

/* What one training step at batch B costs under the current narrowing and masks, computed from
 * the shapes without running anything (the same counts forward + backward add): for cost-only
 * simulation and for predicting a scenario's cost before running it. */
void nn_model_step_cost(const nn_model *m, int B, nn_cost *c);
/* The same for one forward pass (an evaluation) of B samples. */
void nn_model_forward_cost(const nn_model *m, int B, nn_cost *c);

/* A fingerprint of the last forward's piecewise-linear region: which ReLU outputs were positive
 * and which inputs each max-pool picked. Gradient checks use it to skip steps that cross a kink. */
uint64_t nn_model_pattern(const nn_model *m);

/* Peak training memory in bytes at batch B for the current narrowing: live parameters with
 * their gradients and momentum, running statistics, activations kept for backward, the input
 * gradient buffers, and the convolutions' scratch. */
size_t nn_model_memory_bytes(const nn_model *m, int B);
/* Number of live parameters (what a narrowed client trains and sends). */
size_t nn_model_live_count(const nn_model *m);
/* Fraction of output units kept, as the unweighted mean over the conv/linear layers (the
 * density SpaFL and the width papers report; 1 for the full model). */
double nn_model_unit_density(const nn_model *m);
/* The input of the last layer in the last forward, (B, live features): the penultimate features a
 * second head can read (Pa3dFL's local head). The last layer must be linear. */
const float *nn_model_features(const nn_model *m);

#endif /* NN_MODEL_H */
