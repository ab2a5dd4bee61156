/* nn/pack.h -- model parameters to and from msgpack, the form in which models are saved, loaded
 * and sent (a message's encoded length is what the simulator charges as transfer).
 *
 * Format: a map {"model": name, "tensors": [[name, rows, cols], ...], "data": bin}, where data is
 * every tensor's rows·cols values as little-endian float32, in layout order, without the arena's
 * alignment padding. Unpacking checks the tensor list against the receiving architecture, so a
 * message for another model, or a truncated one, is an error rather than a silent misread.
 *
 * It also holds the guard every msgpack reader of the project goes through (nn_msgpack_next):
 * msgpack-c allocates an array's or a map's objects for the count its header declares before it
 * looks at the data, so five bytes declaring 2^32-1 elements cost it 64 GB. The guard walks the
 * encoding first, without allocating, and refuses any count or length larger than the bytes that
 * remain (every element takes at least one byte) and nesting deeper than msgpack-c's own stack;
 * what it accepts, msgpack-c unpacks in memory linear in its length.
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
/* *out = the integer o holds, if it is one in [lo, hi]: 0; else -1 (*out then unspecified). */
int nn_unpack_int(const msgpack_object *o, int64_t lo, int64_t hi, int64_t *out);
/* The value at string key k of map o; NULL when o is not a map or has no such key. */
const msgpack_object *nn_map_get(const msgpack_object *o, const char *k);

/* A float vector as one msgpack bin of little-endian float32: the form algorithms use for the
 * small vectors they send or keep (thresholds, scores, masks' values). */
void nn_pack_f32(msgpack_packer *pk, const float *v, size_t n);
/* Read exactly n floats from o, which must be a bin of n·4 bytes; returns SIM_EFORMAT otherwise
 * (naming what, and leaving v unchanged). */
int nn_unpack_f32(float *v, size_t n, const msgpack_object *o, const char *what, sim_err *err);

enum { NN_MSGPACK_DEPTH = 32 }; /* nested non-empty arrays and maps: msgpack-c's own limit */

/* Walk the one msgpack object at buf[0..len) without allocating: SIM_OK and *end its length in
 * bytes when it is well formed and every count and length it declares fits in what remains.
 * Otherwise SIM_EFORMAT naming what and the byte offset (base + the offset in buf, so a caller
 * reading a stream names the stream's offset), *end the offset of the offending header, and
 * *more (when non-NULL) 1 when more bytes after buf could complete the object (it is truncated,
 * or declares more than buf holds), 0 when none could (a byte msgpack never uses, nesting too
 * deep). */
int nn_msgpack_check(const void *buf, size_t len, size_t base, size_t *end, int *more,
                     const char *what, sim_err *err);

/* msgpack_unpack_next behind nn_msgpack_check: unpack the object at buf + *off (len bytes in all)
 * into u and advance *off past it; SIM_EFORMAT naming what and the byte offset when the check
 * refuses it (err may be NULL: callers that say what they expected write their own). */
int nn_msgpack_next(msgpack_unpacked *u, const void *buf, size_t len, size_t *off, const char *what,
                    sim_err *err);

#endif /* NN_PACK_H */
