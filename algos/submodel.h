/* algos/submodel.h -- sub-models: a model narrowed by row masks on its hidden layers (a width, a
 * neuron mask), sent as the units it keeps plus the values of the parameters those units leave
 * live, and averaged on the server parameter by parameter over the clients that hold it.
 *
 * Message fields: "units" is a bitmap over the output units of every narrowable layer, in layer
 * order (bit u of byte u/8, least significant first), and "data" the live parameters' float32
 * values in layout order. The receiver narrows its own model by the bitmap and so knows which
 * parameters the values are: the bitmap costs ⌈h/8⌉ bytes for h hidden units, less than a
 * parameter bitmap or index list would. Used by HeteroFL/FjORD/FedRolex (width.c) and FedPeWS
 * (fedpews.c); under `compression:` the width family's "data" is instead the compressed message
 * of the same values (nn/compress.h).
 */
#ifndef FL_SUBMODEL_H
#define FL_SUBMODEL_H

#include "nn/model.h"

#include <msgpack.h>

/* Hidden units of an architecture: the length of a units bitmap in bits. */
int fl_sub_units(const nn_arch *a);
/* Pack "units" and "data" (two map entries; the caller opened the map) for m as narrowed now,
 * taking the values from v (n_floats). */
void fl_sub_pack(msgpack_packer *pk, const nn_model *m, const float *v);
/* Bytes fl_sub_pack writes for a model with n live parameters; of those, the "units" entry and
 * the "data" key (the rest is data's value). */
size_t fl_sub_bytes(const nn_arch *a, size_t n_live);
size_t fl_sub_head_bytes(const nn_arch *a);
/* The "units" entry alone (one map entry), for a message whose "data" is the caller's (a
 * compressed one: width.c). */
void fl_sub_pack_units(msgpack_packer *pk, const nn_model *m);
/* Narrow m by the "units" bitmap of map o and scatter its "data" into v at the live parameters
 * (other entries of v untouched). SIM_EFORMAT, naming what, for a missing or malformed field. */
int fl_sub_unpack(nn_model *m, float *v, const msgpack_object *o, const char *what, sim_err *err);
/* Narrow m by the "units" bitmap of map o; returns its "data" entry for the caller to read, or
 * NULL (SIM_EFORMAT in err, naming what) when either is missing or the bitmap malformed. */
const msgpack_object *fl_sub_unpack_units(nn_model *m, const msgpack_object *o, const char *what,
                                          sim_err *err);

/* Per-parameter weighted sums of the changes clients sent since the last aggregation. */
typedef struct fl_sub_acc {
    double *acc, *mass; /* n_floats each */
    size_t n;
} fl_sub_acc;

void fl_sub_acc_init(fl_sub_acc *s, size_t n_floats);
void fl_sub_acc_free(fl_sub_acc *s);
/* Add weight·delta[j] and mass at every parameter live in m. */
void fl_sub_acc_add(fl_sub_acc *s, const nn_model *m, const float *delta, double weight,
                    double mass);
/* global[j] += server_lr·acc[j]/mass[j] where some client held j (others stay), then reset. */
void fl_sub_acc_apply(fl_sub_acc *s, float *global, double server_lr);
/* Checkpoint: [acc, mass] as raw native-order bytes; load checks the sizes. */
void fl_sub_acc_save(const fl_sub_acc *s, msgpack_packer *pk);
int fl_sub_acc_load(fl_sub_acc *s, const msgpack_object *o);

#endif /* FL_SUBMODEL_H */
