/* algos/pfedgate.h -- pFedGate's pieces that tests reach directly (spec 000): the block table of a
 * model and the budgeted block selection of Eq. 6 (algos/pfedgate.c, with the algorithm), and the
 * gating layer (algos/pfedgate_gate.c).
 *
 * Blocks (§2.3): every trainable weight and bias tensor, flattened row-major, is cut into a first
 * sub-block of ⌈n·s_min⌉ elements, which is always kept, and B − 1 equal sub-blocks of the rest
 * (the paper's rule; `code` cuts B equal chunks, as the released code does, the same for the
 * default B = 5). A block of a linear or conv weight is a run of whole rows (neurons, filters)
 * give or take one cut row. Blocks are grouped as the code does: linear layers' tensors, and the
 * rest (convolutions, norms).
 *
 * Selection (§2.5, the code's procedure, which reproduces the paper's achieved densities 0.43 at
 * s = 0.5 and 0.25 at s = 0.3): per group, the blocks other than the first ones are items worth
 * round-half-even(10·G_b) and weighing their size; a greedy pass in value order (ties by block
 * index) takes every item that still fits a capacity of round((s − s_min)·their total size).
 */
#ifndef FL_PFEDGATE_H
#define FL_PFEDGATE_H

#include "nn/model.h"
#include "sim/rng.h"

#include <stdint.h>

typedef struct fl_pg_blocks {
    int n;           /* L */
    size_t *off;     /* first float of block b in the arena */
    size_t *len;     /* its size W_b */
    uint8_t *first;  /* 1 for the first (always kept) block of a tensor */
    uint8_t *linear; /* 1 for the blocks of a linear layer's tensors */
    size_t d;        /* parameters in all blocks */
} fl_pg_blocks;

/* s_min for budget s and split factor B: min(max(1/B, 0.1), s) (the code's). */
double fl_pg_s_min(int B, double s);
/* The block table of a's trainable tensors for split factor B and first-block share s_min
 * (code_rule: B equal chunks instead). */
void fl_pg_blocks_build(fl_pg_blocks *b, const nn_arch *a, int B, double s_min, int code_rule);
void fl_pg_blocks_free(fl_pg_blocks *b);
/* I[b] = 1 for the blocks kept under density budget s given importance G (L values, already
 * clipped at s_min); s = 1 keeps everything. Returns the kept share of the parameters. order is
 * scratch of L ints. */
double fl_pg_select(const fl_pg_blocks *b, const float *G, double s, double s_min, uint8_t *I,
                    int *order);
/* pFedGate's settings (`algorithm.pfedgate:`; spec 000), fl_config.own for pfedgate: a density
 * budget s per client (one for all, or its capacity), B blocks per tensor, the gate's paths and
 * lr, gradient-norm clipping, and the server's rule (per block over the clients that sent it, or
 * the code's dense one). */
typedef struct fl_pfedgate_config {
    char s_text[32];    /* `s` as given: a number or `capacity` */
    double s;           /* the budget when not by capacity */
    int by_capacity;    /* s_i = the client's capacity r_i */
    int blocks;         /* B */
    int code_split;     /* B equal chunks per tensor instead of the paper's first-block rule */
    int paths;          /* 2 (paper) or 1 (the code's default) */
    double gate_lr;     /* η of the gating layer (the model's is algorithm.lr) */
    double clip;        /* gradient-norm clip, model and gate separately (0: none) */
    int code_aggregate; /* Σ_i p_i Δ_i with p over all clients, instead of per-block means */
    int eval_global;    /* every client evaluated on the new global model, instead of a client
                           the aggregation just absorbed on its own trained copy (the code) */
} fl_pfedgate_config;
/* How many of a's classes the output layer can reach at budget s under g's split: all, unless
 * s ≤ s_min leaves the gate nothing to choose and the layer's first block (its first rows)
 * covers fewer. */
int fl_pg_classes_reached(const nn_arch *a, const fl_pfedgate_config *g, double s);

/* A client's gating layer (§2.4, its private state) for inputs of C channels of HW pixels and L
 * blocks: SwitchNorm over the input channels (the gate's own normalization; the model sees the
 * raw input), then `paths` (2, the paper's; or 1 shared, the code's default) of FC(C·HW → L) +
 * BatchNorm1d(L) + sigmoid, averaged over the batch: G (importance, clipped below at s_min, no
 * gradient where clipped) and M (block scales). With one path M and G share it. */
typedef struct fl_pg_gate {
    int C, HW, L, paths, max_batch;
    size_t n_params; /* trainable floats, at the start of p */
    size_t n_state;  /* the parameters, then the running statistics */
    size_t n_saved;  /* all of p, what the private state holds: n_state, then v */
    float *p, *g;    /* p: n_saved floats; g: n_params gradients (backward adds) */
    float *v;        /* p + n_state: the parameters' SGD momentum */
    float *G, *M;    /* L each: the last forward's outputs */
    float *Gsum;     /* L: G before the clip */
    int B;           /* the last forward's batch, and its clip */
    double s_min;
    float *work; /* batch-sized buffers (pfedgate_gate.c) */
} fl_pg_gate;

/* Fresh parameters as PyTorch initializes them (FC U(±1/√fan_in), norms γ = 1, β = 0), the
 * second path a copy of the first (the code's deepcopy). */
void fl_pg_gate_init(fl_pg_gate *g, int C, int HW, int L, int paths, int max_batch, sim_rng *r);
void fl_pg_gate_free(fl_pg_gate *g);
/* G and M for the batch x (B, C·HW); train: batch statistics (and running ones updated), else
 * the running ones. */
void fl_pg_gate_forward(fl_pg_gate *g, const float *x, int B, int train, double s_min);
/* g->g += ∂/∂parameters given dG and dM (L each) of the last (training) forward. */
void fl_pg_gate_backward(fl_pg_gate *g, const float *dG, const float *dM);
/* A gate that ignores its input: FC weights and BN scales 0, BN shifts logit(v), so G = M = v
 * for every batch (tests; v in (0, 1]). */
void fl_pg_gate_fix(fl_pg_gate *g, double v);

#endif /* FL_PFEDGATE_H */
