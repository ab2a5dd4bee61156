/* algos/pa3dfl.h -- the two pieces of Pa3dFL (spec 004) that algos/pa3dfl.c builds on and the
 * tests check on their own: the channel-aware layer decomposition (Eq. 4/5/10/14) and the
 * server's hyper-network (Eq. 7–9).
 *
 * Decomposition. Every conv/linear layer but the head, with S inputs (channels; features for a
 * linear layer), T outputs and k·k kernel positions (kk = 1 for linear), is W = recover(u, v):
 * u = [u_1; …; u_R1] (kk·R1 × R2, the general factor, the same for every client) and
 * v = [v_1 … v_nb] (R2 × nb·S, the personal factor), output channel c = j·R1 + i holding the
 * filter u_i·v_j (kk × S), so pruning whole blocks v_j (j ≥ kb) removes a prefix-complement of
 * channels (spec §8 A1) and a client of width p = kb·p_min trains the nn model narrowed to p.
 * R1 = T·p_min, nb = 1/p_min, R2 = max(min(S, T), kk) for convs and R1 for linear layers. A
 * personal vector ("gen space", what the hyper-network outputs) is every layer's full v, then the
 * local head (K × d_pen weights, row-major, then K biases). The input of a layer after the first
 * is pruned with the previous layer's channels: a p-wide client keeps S·kb/nb of it.
 *
 * Hyper-network. Client embeddings E (N × d_e) → an encoder of D linear layers (ReLU between) →
 * for client i and generated tensor t (every layer's v, then the local head): a = softmax(E'e'_i
 * / τ_t), ê = E'ᵀa, θ_t = W_t ê + b_t, with τ_t = exp(ρ_t). Its parameters φ are one flat array
 * in the order E | encoder (W, b per layer) | ρ | decoder biases | decoder weights, so the small
 * part (all but the decoder weights, which hold nearly all of φ) has its own gradient buffer and
 * the decoder weights can take their rank-1 updates in place (spec §2.9).
 */
#ifndef FL_PA3DFL_H
#define FL_PA3DFL_H

#include "algos/algo.h"
#include "nn/model.h"
#include "sim/base.h"
#include "sim/rng.h"

#include <stddef.h>
#include <stdint.h>

/* Pa3dFL's settings (`algorithm.pa3dfl:`; spec 004, defaults its Fashion Hetero column),
 * fl_config.own for pa3dfl. */
#define FL_PA3DFL_MAX_DEPTH 4
typedef struct fl_pa3dfl_config {
    double lambda;  /* λ of the orthogonality penalty (Eq. 32) */
    double hn_lr;   /* γ, the hyper-network's SGD step */
    double hn_clip; /* gradient-norm clip of the embeddings, encoder and temperatures (0: none) */
    int hn_nlms;    /* decoder steps normalized by 1 + ‖ê‖² (fl_p3_hn_backward) */
    int hn_unit;    /* encoded embeddings scaled to unit norm (fl_p3_hn.unit) */
    int embed;      /* d_e */
    int hidden;     /* d_h */
    int depth;      /* encoder layers D, at most FL_PA3DFL_MAX_DEPTH */
    double p_min; /* width quantum; 0: the largest 1/2^k with (1/2^k)² ≤ min capacity (§2.4) */
    double val;   /* share of a client's training samples held out to choose α */
    int alphas;   /* points of the α grid on [0, 1]; 1: no search, the trained model (α = 1) */
    int hn;       /* 0: Table 3's "w.o. HN-based Agg." (personal parts stay on the clients) */
    char p_min_text[32]; /* `p_min` as given: auto or 1/2^k */
} fl_pa3dfl_config;

typedef struct fl_p3_layer {
    int li;         /* its layer in the nn_arch */
    int S, T, kk;   /* inputs, outputs, kernel positions */
    int R1, R2, nb; /* Eq. 14; nb = T/R1 blocks */
    int first;      /* the input layer: its inputs are never pruned */
    int lin;        /* a linear layer (its factor gradients may come in batch form) */
    size_t u_off;   /* in the general vector */
    size_t v_off;   /* in the personal (gen-space) vector */
} fl_p3_layer;

typedef struct fl_p3_net {
    int n; /* decomposed layers */
    fl_p3_layer l[NN_MAX_LAYERS];
    int head_li, d_pen, K; /* the head layer, its input features, classes */
    size_t n_u;            /* floats of all general factors */
    size_t n_v;            /* floats of all full personal factors */
    size_t n_gen;          /* n_v + the local head (K·d_pen + K) */
    int nb;                /* blocks per layer, 1/p_min */
} fl_p3_net;

/* Decompose architecture a at width quantum p_min (1/n): SIM_EINVAL when a layer's channels do
 * not split into 1/p_min blocks, the last layer is not linear, or a has batch norm. */
int fl_p3_net_build(fl_p3_net *d, const nn_arch *a, double p_min, sim_err *err);
/* Blocks a client of width p keeps: p/p_min rounded. */
int fl_p3_blocks(const fl_p3_net *d, double p);
/* Personal floats a client keeping kb blocks holds: its v blocks and its local head slice. */
size_t fl_p3_kept(const fl_p3_net *d, int kb);
/* Between a full personal vector and the kb-block client's compact one (kept entries in order). */
void fl_p3_gather(const fl_p3_net *d, int kb, const float *full, float *kept);
void fl_p3_scatter(const fl_p3_net *d, int kb, const float *kept, float *full);
/* SGD on the kept entries of a full personal vector: v −= lr·dv there, and dv = 0 there. */
void fl_p3_sgd_kept(const fl_p3_net *d, int kb, float lr, float *v, float *dv);
/* Σ dv² over the kept entries of a gen-space gradient. */
double fl_p3_kept_sumsq(const fl_p3_net *d, int kb, const float *dv);
/* FLOPs of one recovery at kb blocks (its backward from the weight gradient, twice as much). */
double fl_p3_compose_flops(const fl_p3_net *d, int kb);
/* Write the recovered weights of every decomposed layer, for kb blocks, into the live block of
 * the model arena params (layout of the architecture d was built from). Returns the FLOPs. */
double fl_p3_compose(const fl_p3_net *d, const nn_arch *a, int kb, const float *u, const float *v,
                     float *params);
/* Whether linear layer q's factor gradients at kb blocks and batch B cost less in batch form,
 * from the layer's input x and output gradient dy (dU = Σ_j dy_jᵀ·(x·v_jᵀ), dv_j = (dy_j·u)ᵀ·x:
 * O(B·R2·(S' + R1)) a block, and no weight gradient), than from the weight gradient (O(R1·R2·S')
 * a block, after the O(B·R1·S') of dW): when R1 ≫ B, as with p_min = 1. */
int fl_p3_batch_form(const fl_p3_layer *q, int kb, int B);
/* Floats of the output gradients fl_p3_take lends a model of max_batch B. */
size_t fl_p3_take_floats(const fl_p3_net *d, int B);
/* Before a forward of B samples at kb blocks: the layers in batch form hand their output gradient
 * to arena (fl_p3_take_floats(d, m->max_batch) floats) instead of computing a weight gradient
 * (nn_model_take_grad_out); arena NULL gives every layer back its weight gradient. */
void fl_p3_take(const fl_p3_net *d, nn_model *m, int kb, int B, float *arena);
/* After the backward of that forward: chain the gradients into du (n_u) and dv (gen space, kept
 * entries only) by +=, from m's weight gradients (m->grads) or, for the layers in batch form,
 * from their inputs and the output gradients m->grad_out holds. Returns the FLOPs. */
double fl_p3_compose_backward(const fl_p3_net *d, const nn_model *m, int kb, int B, const float *u,
                              const float *v, float *du, float *dv);
/* What fl_p3_compose_backward costs at kb blocks and batch B. */
double fl_p3_backward_flops(const fl_p3_net *d, int kb, int B);
/* Eq. 32 over the conv layers: returns λ·Σ‖uᵀu − diag(uᵀu)‖²_F and adds its gradient to du. */
double fl_p3_orth(const fl_p3_net *d, double lambda, const float *u, float *du);
/* What fl_p3_orth costs. */
double fl_p3_orth_flops(const fl_p3_net *d);

typedef struct fl_p3_hn {
    int N, de, dh, D, nt;          /* clients, embedding and hidden dims, encoder layers, tensors */
    size_t out[NN_MAX_LAYERS + 1]; /* floats each generated tensor has */
    size_t gen_off[NN_MAX_LAYERS + 1];
    size_t n_gen;
    float *phi;     /* n_phi, owned */
    size_t n_phi;   /* all parameters */
    size_t n_small; /* those before the decoder weights */
    size_t E, enc[2 * FL_PA3DFL_MAX_DEPTH], rho, dec_b,
            dec_w; /* offsets into phi (enc: W then b of each layer) */
    float *act;    /* (D + 1) × N × max(de, dh): the last encoding */
    int unit;      /* the encoder's outputs E' are scaled to unit norm (set after init) */
    double *nrm;   /* N: with unit, their norms before scaling */
} fl_p3_hn;

/* Initialise as spec §2.8: E ~ N(0, 1), the encoder U(±1/√fan_in), ρ = 0, decoder weights 0 and
 * biases bias0 (n_gen floats: the personal vector every client starts from). */
void fl_p3_hn_init(fl_p3_hn *h, const fl_p3_net *d, int N, int de, int dh, int D,
                   const float *bias0, sim_rng *r);
void fl_p3_hn_destroy(fl_p3_hn *h);
/* Encode every embedding (needed before generate/backward after φ changes). */
void fl_p3_hn_encode(fl_p3_hn *h);
/* Client i's full personal vector gen (n_gen floats). Returns the FLOPs. */
double fl_p3_hn_generate(const fl_p3_hn *h, int i, float *gen);
/* Gradients of Σ_k ⟨g[k], gen(clients[k])⟩ (g in gen space): the small part into grad_small
 * (n_small, +=); the decoder weights' into grad_dec (n_phi − n_small, +=), or, when grad_dec is
 * NULL, applied in place as W −= gamma·grad after every other gradient is taken. Needs a current
 * encoding. nlms: client k's share of tensor t's decoder gradient (bias and weights) is divided
 * by 1 + ‖ê_kt‖², the normalized-LMS step: the generated vector then moves by exactly γ·g when one
 * client is absorbed, whatever the scale of its mixed embedding ê (plain SGD moves it by
 * γ·(1 + ‖ê‖²)·g). */
void fl_p3_hn_backward(fl_p3_hn *h, int m, const int32_t *clients, float *const *g,
                       float *grad_small, float *grad_dec, double gamma, int nlms);

#endif /* FL_PA3DFL_H */
