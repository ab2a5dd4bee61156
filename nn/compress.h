/* nn/compress.h -- update compression (issue 42): a float vector encoded into a smaller msgpack
 * message, and decoded back to exactly the values the encoder says it sent.
 *
 * Schemes (nn_comp.scheme; NN_COMP_NONE is no message of this module: callers send the dense
 * parameter message of nn/pack.h):
 *   topk   the k = ceil(ratio·n) values largest in magnitude (ties: the lower index), exact
 *          float32, and their indices as delta varints (LEB128: the first index, then the gaps)
 *          or as an n-bit bitmap, whichever is smaller for this message (a tie: the bitmap)
 *   randk  k values at indices drawn from a seed the message carries (no indices sent); the
 *          decoder scales them by n/k, so the decoded vector is an unbiased estimate of x
 *   qsgd   QSGD (Alistarh et al. 2017): the vector's norm ‖x‖₂ (float32, rounded up) and per
 *          element a level q in [−s, s] drawn by stochastic rounding of s·|x_i|/‖x‖ (unbiased),
 *          each packed as q + s in ceil(log2(2s+1)) bits (no Elias coding); x_i = ‖x‖·q/s, so the
 *          error of each element is below ‖x‖/s
 *   sign   one bit per element (x_i >= 0) and a scale, the mean |x_i| (float32): x_i = ±scale
 *   fp16, bf16   each value cast with round-to-nearest-even (fp16: subnormals, overflow to inf;
 *          NaN stays NaN), 2 bytes each; the round trip is exact for the cast values
 *
 * Message: a msgpack map {"scheme": name, "n": n, ...its own fields..., "data": bin}, the
 * fields being "k", "index" ("delta" or "bitmap") and "idx" (topk), "k" and "seed" (randk, the
 * seed a fixed 9-byte uint64), "s" and "norm" (qsgd), "scale" (sign); bit-packed payloads are
 * least significant bit first. Every length the decoder reads is checked against what the
 * message holds, and nothing it declares is trusted: a malformed message is SIM_EFORMAT naming
 * what is wrong.
 */
#ifndef NN_COMPRESS_H
#define NN_COMPRESS_H

#include "nn/model.h"
#include "sim/rng.h"

#include <msgpack.h>

enum {
    NN_COMP_NONE,
    NN_COMP_TOPK,
    NN_COMP_RANDK,
    NN_COMP_QSGD,
    NN_COMP_SIGN,
    NN_COMP_FP16,
    NN_COMP_BF16,
};
extern const char *const nn_comp_names[]; /* by scheme, NULL-ended: "none", "topk", ... */

enum { NN_COMP_MAX_LEVELS = 1 << 20 }; /* qsgd's s: levels packed in at most 22 bits */

typedef struct nn_comp {
    int scheme;         /* NN_COMP_* */
    double ratio;       /* topk, randk: the share of values kept, in (0, 1] */
    int levels;         /* qsgd: s, 1 to NN_COMP_MAX_LEVELS */
    int error_feedback; /* what the message left out is added to the next one (the caller's) */
} nn_comp;

/* The values topk and randk keep of n: ceil(ratio·n), at least 1 (0 when n is 0). */
size_t nn_comp_k(const nn_comp *c, size_t n);
/* Bits qsgd packs a level in for s levels: ceil(log2(2s + 1)). */
int nn_comp_level_bits(int s);

/* Append x (n values) encoded by c (not NN_COMP_NONE) to sb, drawing randk's seed and qsgd's
 * rounding from r; when sent is non-NULL, write into it (n) what the decoder will read back. */
void nn_comp_encode(msgpack_sbuffer *sb, const nn_comp *c, const float *x, size_t n, sim_rng *r,
                    float *sent);
/* The message's length without encoding anything: exact for every scheme but topk, whose
 * indices' length depends on the data, and for which it is the most its message can take (the
 * bitmap's, or the longest delta varints k indices below n can need, whichever is less). */
size_t nn_comp_bytes(const nn_comp *c, size_t n);
/* Decode the message o into x (n values, which the message must declare); SIM_EFORMAT naming
 * what (and what is wrong) otherwise, x then unspecified. */
int nn_comp_decode(float *x, size_t n, const msgpack_object *o, const char *what, sim_err *err);
/* The same from the one msgpack object at buf[0..len) (nn_msgpack_next's guard first); *used
 * (when non-NULL) gets its length. */
int nn_comp_decode_buf(float *x, size_t n, const void *buf, size_t len, size_t *used,
                       const char *what, sim_err *err);

/* A model's parameters (n_floats, with the layout's padding) to and from the n_params values a
 * message carries, in layout order. */
void nn_comp_gather(const nn_arch *a, const float *params, float *v);
void nn_comp_scatter(const nn_arch *a, const float *v, float *params);

/* The casts on their own (exposed for tests): float32 to IEEE half or bfloat16 with
 * round-to-nearest-even, and back (exact). */
uint16_t nn_f32_to_f16(float f);
float nn_f16_to_f32(uint16_t h);
uint16_t nn_f32_to_bf16(float f);
float nn_bf16_to_f32(uint16_t h);

#endif /* NN_COMPRESS_H */
