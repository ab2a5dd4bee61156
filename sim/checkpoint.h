/* sim/checkpoint.h -- checkpoint files: a payload written atomically behind a checksum trailer.
 *
 * The engine serializes its state as one msgpack payload (engine_ckpt.c says what is in it);
 * this file only frames it, so that a truncated, corrupted or foreign file is detected before a
 * byte of it is parsed. The file is the payload followed by a 24-byte trailer:
 *   u64 payload length, u64 FNV-1a 64 of the payload, the 8 bytes "FSCKPT01" (little-endian).
 * Writing goes to PATH.tmp in the same folder, is fsync'ed, then renamed over PATH (and the folder
 * fsync'ed), so PATH is always either the old checkpoint or the new one, never a mix.
 */
#ifndef SIM_CHECKPOINT_H
#define SIM_CHECKPOINT_H

#include "sim/base.h"

#include <stddef.h>
#include <stdint.h>

enum { SIM_CHECKPOINT_TRAILER = 24 };

/* FNV-1a 64 of n bytes (the checksum, and the scenario hash a checkpoint is tied to). */
uint64_t sim_checkpoint_hash(const void *p, size_t n);
/* The hash of a whole file's bytes; SIM_EIO naming the file when it cannot be read. */
int sim_checkpoint_hash_file(const char *path, uint64_t *out, sim_err *err);

/* What the numbers a run computes depend on beyond its scenario: "exe HASH, KERNELS kernels,
 * CONFIG", the FNV-1a 64 of this program's file, the OpenBLAS kernels in use and the library's
 * configuration string (its version); computed once a process. Under MPI it is the
 * coordinator's. A run resumed under another build goes on correctly, but its remaining rounds
 * can round differently from an uninterrupted run's. */
const char *sim_checkpoint_build(void);

/* Atomically replace path by payload + trailer. On error path is untouched and err names it. */
int sim_checkpoint_write(const char *path, const void *payload, size_t len, sim_err *err);
/* Read path and verify its trailer; on success *payload (caller frees) holds the payload bytes.
 * A missing, short, truncated or corrupted file is SIM_EIO / SIM_EFORMAT naming path, with
 * *payload NULL. */
int sim_checkpoint_read(const char *path, void **payload, size_t *len, sim_err *err);

#endif /* SIM_CHECKPOINT_H */
