/* algos/dmpfl.h -- the parts of DM-PFL (spec 001) shared by its two files and reached by tests:
 * the phase schedule (algos/dmpfl.c, the algorithm), and which tensors carry masks, Eq. 4's
 * composition of a personalized model, the prune-by-magnitude / regrow-by-gradient readjustment
 * and the message format (algos/dmpfl_masks.c).
 *
 * Masks are arrays of one byte per float of the model's arena (like the model's own element
 * masks), meaningful on masked tensors only: the other tensors (biases, and the first layer under
 * skip_first) are dense and shared, in both m_g and every m_c. A message is the msgpack map
 * {"mask": bitmap over the masked tensors' positions in layout order (left out when the receiver
 * has it), "vals": float32 of the masked positions set in the mask, in the same order, "dense":
 * float32 of every dense tensor}; its encoded length is what the simulator charges.
 */
#ifndef FL_DMPFL_H
#define FL_DMPFL_H

#include "algos/algo.h"

#include <msgpack.h>
#include <stdint.h>

/* DM-PFL's settings (`algorithm.dmpfl:`; spec 001 §2 and §8; defaults there), fl_config.own for
 * dmpfl and dmpfl+. The schedule: `iterations` I repeats of (phase 1: mask training, 2a: federated
 * refinement of w_g under a fixed m_g, 2b: local refinement of the private weights) over `rounds`
 * T, split phase1 / phase2a / rest of each iteration's T/I rounds; I = 0 is phase 1 throughout
 * (the iter = 0 ablation). */
typedef struct fl_dmpfl_config {
    double sparsity;    /* S, as given */
    int policy;         /* density_policy: auto, uniform, uniform_skip_first */
    double density;     /* 1 − S: the share of each masked tensor's weights kept */
    int skip_first;     /* the first conv/linear layer stays dense (uniform_skip_first) */
    int iterations;     /* I */
    int rounds;         /* T, the scenario's rounds */
    double phase1;      /* share of an iteration in phase 1 */
    double phase2a;     /* share in phase 2a (phase 2b gets the rest) */
    double alpha;       /* α_0, the readjust share of a layer's kept weights */
    int anneal;         /* α_t = α_0/2·(1 + cos(π t/T)) (1) or α_0 throughout (0) */
    int readjust_every; /* readjust on every this many phase-1 rounds (by round number) */
    double vote;        /* m_g keeps positions chosen by more than this share of the clients */
    int reset_private;  /* phase 2b starts from zero private weights (Algorithm 3 literally) */
} fl_dmpfl_config;

typedef enum fl_dm_phase { FL_DM_P1, FL_DM_P2A, FL_DM_P2B } fl_dm_phase;

typedef struct fl_dm_shape {
    const nn_arch *a;               /* borrowed */
    uint8_t masked[NN_MAX_TENSORS]; /* 1: the tensor is a masked conv/linear weight */
    size_t keep[NN_MAX_TENSORS];    /* its target kept count ⌈(1 − S)·n⌉ */
    size_t n_masked;                /* Σ n over masked tensors: the bitmap's bits */
    size_t n_dense;                 /* Σ n over the other tensors */
    size_t n_keep;                  /* Σ keep */
} fl_dm_shape;

/* skip_first < 0: dense first layer when it is a convolution (the spec's policy: uniform with
 * the first layer dense for CNNs, uniform for MLPs). */
void fl_dm_shape_init(fl_dm_shape *s, const nn_arch *a, double density, int skip_first);
/* The elements of tensor t. */
static inline size_t fl_dm_numel(const nn_tensor *t)
{
    return (size_t)t->rows * (size_t)t->cols;
}

/* The phase of a round under c's schedule (spec §2.3), and α_t for the readjustment. */
fl_dm_phase fl_dm_phase_of(const fl_dmpfl_config *c, int round);
double fl_dm_alpha(const fl_dmpfl_config *c, int round);

/* Eq. 4: θ = w_g ⊙ (m_g ∩ m_c) + w_c ⊙ (m_c − m_g) on masked tensors, w_g on dense ones. */
void fl_dm_compose(float *theta, const fl_dm_shape *s, const float *wg, const uint8_t *mg,
                   const float *wc, const uint8_t *mc);

/* Set out[i] = 1 for the k largest |key[i]| among i with cand[i] (cand NULL: all), ties to the
 * lower index; the other out[i] are left alone. n entries. */
void fl_dm_topk(uint8_t *out, const float *key, const uint8_t *cand, size_t n, size_t k);

/* Readjust every masked tensor of mask (and w) in place: prune the ⌈α·nnz⌉ active weights of
 * least magnitude, then regrow, among the inactive positions including those just pruned, the
 * largest |grad| up to the tensor's target count. Regrown positions that were not active before
 * start at 0; pruned positions become 0. */
void fl_dm_readjust(const fl_dm_shape *s, float *w, uint8_t *mask, const float *grad, double alpha);

/* Kept positions of the masked tensors. */
size_t fl_dm_count(const fl_dm_shape *s, const uint8_t *mask);

/* Pack a message: with_mask sends the bitmap of mask, vals are w at mask, dense are w's dense
 * tensors. */
void fl_dm_pack(msgpack_sbuffer *sb, const fl_dm_shape *s, int with_mask, const uint8_t *mask,
                const float *w);
/* Its encoded length, for nnz masked positions sent, without packing (cost-only mode). */
size_t fl_dm_msg_bytes(const fl_dm_shape *s, int with_mask, size_t nnz);
/* Read a message into mask (when it holds one; *got_mask says) and w (positions set in the mask
 * then, and the dense tensors). SIM_EFORMAT names what is wrong. */
int fl_dm_unpack(const fl_dm_shape *s, const void *buf, size_t len, uint8_t *mask, int *got_mask,
                 float *w, const char *what, sim_err *err);
/* A client's private state: a message of w_c under m_c (mask), with its cached m_g as the key
 * "mg"; unpack returns SIM_EFORMAT naming "private state" when buf is not one. */
void fl_dm_pack_state(msgpack_sbuffer *sb, const fl_dm_shape *s, const uint8_t *mc,
                      const uint8_t *mg, const float *wc);
int fl_dm_unpack_state(const fl_dm_shape *s, const void *buf, size_t len, uint8_t *mc, uint8_t *mg,
                       float *wc, sim_err *err);

#endif /* FL_DMPFL_H */
