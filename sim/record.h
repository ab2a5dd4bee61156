/* sim/record.h -- C structs to and from msgpack arrays, described by field tables.
 *
 * A record is one msgpack array holding a struct's fields in the order of a table that names
 * each field, its kind and its member (offsetof, sizeof), and for an integer the range it is read
 * back in. The one table writes the record and reads it back, so the writer and the reader cannot
 * drift apart; reading refuses, naming the field, anything missing, of another type or out of its
 * range. The engine's checkpoints (sim/engine_ckpt.c) are made of such records.
 */
#ifndef SIM_RECORD_H
#define SIM_RECORD_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

enum {
    SIM_F_INT,   /* a signed integer member (4 or 8 bytes), read back in [lo, hi] */
    SIM_F_U64,   /* a uint64_t or size_t member */
    SIM_F_F64,   /* a double member */
    SIM_F_BLOB,  /* a void * member (owned, malloc'ed) and its size_t length at len: bin, or nil
                    for NULL */
    SIM_F_MSG,   /* SIM_F_BLOB followed by the length as u64 (two elements): a message's length
                    exists without its content (cost-only runs), and must match it otherwise */
    SIM_F_WORDS, /* a uint64_t array member, as one msgpack array */
};

/* A bound of an integer's range: plus, plus lim[by] of the reader's lim (by 0: a constant), for
 * bounds known only when reading (a count read earlier, a time). */
typedef struct sim_bound {
    int by;
    int64_t plus;
} sim_bound;

typedef struct sim_field {
    const char *name;
    int kind;         /* SIM_F_* */
    size_t off, size; /* the member */
    size_t len;       /* SIM_F_BLOB, SIM_F_MSG: offsetof its length member (a size_t) */
    sim_bound lo, hi; /* SIM_F_INT */
} sim_field;

/* msgpack elements a record of table t (n fields) takes: one a field, two a SIM_F_MSG. */
uint32_t sim_record_len(const sim_field *t, size_t n);
/* The members of table t at base, as one array. */
void sim_record_pack(msgpack_packer *pk, const sim_field *t, size_t n, const void *base);
/* count records of table t from base, stride bytes apart, as one array of them. */
void sim_record_pack_list(msgpack_packer *pk, const sim_field *t, size_t n, const void *base,
                          size_t stride, size_t count);
/* Read one record of table t from o into the members at base (the blobs it read are then owned
 * there, even when a later field is refused); NULL, or the name of the first field that is
 * missing, of another type or out of its range ("the field count" when the array's length is
 * not the table's). lim: the values of the bounds' by (NULL when every bound is a constant). */
const char *sim_record_read(const msgpack_object *o, const sim_field *t, size_t n, void *base,
                            const int64_t *lim);

/* The pieces records are made of, for the parts of a payload that are not records: a blob (bin,
 * or nil for NULL), n words as an array; reading a u64 or exactly n words: 0, or -1. */
void sim_record_pack_blob(msgpack_packer *pk, const void *p, size_t n);
void sim_record_pack_words(msgpack_packer *pk, const uint64_t *w, size_t n);
int sim_record_read_u64(const msgpack_object *o, uint64_t *v);
int sim_record_read_words(const msgpack_object *o, uint64_t *w, size_t n);

#endif /* SIM_RECORD_H */
