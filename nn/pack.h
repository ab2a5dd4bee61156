/* nn/pack.h -- model parameters to and from msgpack, the form in which models are saved, loaded
 * and sent (a message's encoded length is what the simulator charges as transfer).
 *
 * Format: a map {"model": name, "tensors": [[name, rows, cols], ...], "data": bin}, where data is
 * every tensor's rows·cols values as little-endian float32, in layout order, without the arena's
 * alignment padding. Unpacking checks the tensor list against the receiving architecture, so a
 * message for another model, or a truncated one, is an error rather than a silent misread.
 */
#ifndef NN_PACK_H
#define NN_PACK_H

#include "nn/model.h"

#include <msgpack.h>

/* Append the packed parameters (one msgpack map) to sb. */
void nn_pack_params(msgpack_sbuffer *sb, const nn_arch *a, const float *params);
/* Read parameters of architecture a from one msgpack map in buf into params (n_floats); on error
 * returns SIM_EFORMAT naming what is wrong and leaves params unchanged. `what` names the source
 * (a file or a message) in the error. */
int nn_unpack_params(float *params, const nn_arch *a, const void *buf, size_t len, const char *what,
                     sim_err *err);

/* Bytes msgpack takes for a bin of n bytes: its bin8/16/32 header and the n bytes. Algorithms
 * compute their messages' lengths from it in cost-only mode, where nothing is packed. */
size_t nn_bin_bytes(size_t n);
/* A string (a map key) as messages write one. */
void nn_pack_str(msgpack_packer *pk, const char *s);
/* The value at string key k of map o; NULL when o is not a map or has no such key. */
const msgpack_object *nn_map_get(const msgpack_object *o, const char *k);

/* A float vector as one msgpack bin of little-endian float32: the form algorithms use for the
 * small vectors they send or keep (thresholds, scores, masks' values). */
void nn_pack_f32(msgpack_packer *pk, const float *v, size_t n);
/* Read exactly n floats from o, which must be a bin of n·4 bytes; returns SIM_EFORMAT otherwise
 * (naming what, and leaving v unchanged). */
int nn_unpack_f32(float *v, size_t n, const msgpack_object *o, const char *what, sim_err *err);

#endif /* NN_PACK_H */
