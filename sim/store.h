/* sim/store.h -- the client state store: each client's private state (an opaque msgpack blob) by
 * client id, out of core (issue 41).
 *
 * Behind get, put and drop sits a bounded in-memory cache in front of an LMDB database,
 * DIR/state.mdb. The cache is write-back: a put stays in memory, dirty, and reaches the database
 * only in sim_store_commit(), one write transaction holding every state changed since the last
 * commit and the caller's tag (the engine's checkpoint). So the database always holds the states
 * as of one commit, and a resumed run checks its checkpoint names that tag: a crash between a put
 * and the next commit cannot leave it reading a state from the future.
 *
 * When the cache must evict a dirty state to stay under its budget, the state goes to the spill,
 * a second LMDB file, DIR/state.spill, never to the database: the spill holds uncommitted states
 * only, is emptied into the database by each commit (in the same transaction) and is deleted when
 * a store is opened or closed. Clean states are evicted by dropping them. Eviction is least
 * recently used first, so what get returns never depends on the budget, only how fast.
 *
 * Each commit also records, in the same transaction, how to undo it: the previous commit's state
 * of every client it changes. The engine commits the store (tag T+1) and then writes its
 * checkpoint naming T+1; a crash between the two leaves checkpoint T with the store at T+1, and
 * sim_store_restore(T) goes back one commit.
 *
 * The files are made when first needed: a NEW store makes DIR/state.mdb at its first commit or
 * its first spill, the spill at its first use, so a run whose clients hold no state and which
 * never commits leaves no state files. Without a directory the store is memory-only: no files
 * at all, every state in the cache whatever the budget (for tests and runs without a folder).
 *
 * Opening an existing file checks its header (magic, format version, the caller's run identity,
 * e.g. the scenario's hash) and refuses a foreign, corrupted or another run's file with a sim_err
 * naming the file and what is wrong. A map that fills up is grown and the transaction retried.
 * One thread uses a store; a forked child must not.
 */
#ifndef SIM_STORE_H
#define SIM_STORE_H

#include "sim/base.h"

#include <stddef.h>
#include <stdint.h>

/* The file format's version in its header; a file with another one is refused. 2: the undo
 * table and the meta undo_tag. */
#define SIM_STORE_FORMAT 2

typedef struct sim_store sim_store;

typedef enum sim_store_mode {
    SIM_STORE_NEW,    /* a fresh database: an existing DIR/state.mdb is removed at open */
    SIM_STORE_RESUME, /* DIR/state.mdb must exist and carry this identity */
} sim_store_mode;

typedef struct sim_store_opts {
    size_t budget;   /* the cache's bytes (states and their bookkeeping); SIZE_MAX = unbounded;
                        ignored by a memory-only store */
    size_t map_size; /* LMDB map to start with, bytes; 0 = 1 GiB */
    size_t map_max;  /* how far the map may grow; 0 = no limit but the machine's */
} sim_store_opts;

/* What the store holds now (for `fedsim check` and the run's report). */
typedef struct sim_store_stats {
    size_t cached_bytes;  /* counted against the budget */
    size_t cached;        /* states in memory, dirty or not */
    size_t dirty;         /* of them, changed since the last commit */
    size_t spilled;       /* states written to the spill since the last commit */
    uint64_t disk_bytes;  /* DIR/state.mdb's size (0 while it is not made) */
    uint64_t spill_bytes; /* DIR/state.spill's size (0 while it is not made) */
    uint64_t states;      /* states committed in the database (0 without one) */
    uint64_t reads;       /* states get read back from the spill or the database, all told */
} sim_store_stats;

/* Open DIR/state.mdb (mode says whether it is new) for the run identity (any string). NEW
 * removes older files and makes none yet; RESUME checks the file and its header. dir NULL: a
 * memory-only store (NEW only). 0, or negative with err naming the file. */
int sim_store_open(sim_store **out, const char *dir, const char *identity,
                   const sim_store_opts *opts, sim_store_mode mode, sim_err *err);
/* DIR/state.mdb, for errors about what it holds; NULL for a memory-only store. */
const char *sim_store_path(const sim_store *s);
/* Close, discarding what was not committed (the spill file goes). NULL is a no-op. */
void sim_store_free(sim_store *s);
/* Close and delete DIR/state.mdb and its lock too: a finished run's states were for resuming. 0,
 * or negative naming the file that could not be removed ("finished, but cannot remove"). */
int sim_store_remove(sim_store *s, sim_err *err);

/* Client id's state: 1 with *data and *len set (a buffer the store owns, valid until the next
 * call on s), 0 when the client has none, negative on a read error. */
int sim_store_get(sim_store *s, uint32_t id, const void **data, size_t *len, sim_err *err);
/* Set client id's state to a copy of len bytes (len may be 0). 0, or negative when an eviction
 * this needed could not be written to the spill (the put itself is then kept, in memory). */
int sim_store_put(sim_store *s, uint32_t id, const void *data, size_t len, sim_err *err);
/* Client id has no state from now on (a no-op when it had none). 0 or negative as put. */
int sim_store_drop(sim_store *s, uint32_t id, sim_err *err);

/* Write every state changed since the last commit and tag into the database in one durable
 * transaction, then empty the spill. 0, or negative with nothing committed. */
int sim_store_commit(sim_store *s, uint64_t tag, sim_err *err);
/* The tag of the last commit into *tag: 1, or 0 when the database was never committed. */
int sim_store_committed(const sim_store *s, uint64_t *tag);

/* After a RESUME open and before any get/put/drop: bring the database to the commit tagged
 * tag. 0 when it is already there, or after undoing its last commit when that commit's
 * predecessor is tag (one synced transaction: states restored, tag = tag, undo emptied);
 * negative naming the file and both tags (and the one it could go back to) otherwise. A
 * memory-only store succeeds iff tag is its last commit's (0 when none). */
int sim_store_restore(sim_store *s, uint64_t tag, sim_err *err);

/* The counters alone (files' bytes and states 0): no system call, no transaction. */
void sim_store_stats_peek(const sim_store *s, sim_store_stats *st);
/* 0, or negative when a file's size or the committed states cannot be read. */
int sim_store_stats_get(const sim_store *s, sim_store_stats *st, sim_err *err);

#endif /* SIM_STORE_H */
