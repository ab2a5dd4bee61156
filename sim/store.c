/* sim/store.c -- the client state store (sim/store.h): an LRU write-back cache over two LMDB
 * files, the database (committed states and the header) and the spill (uncommitted states the
 * cache evicted).
 *
 * Where a client's state is, newest first: the cache (a dirty entry, or a tombstone for a drop
 * not yet committed), the spill (same, a tag byte before the state), the database. get looks in
 * that order, so a clean cached entry is always a copy of the first of the others that has the
 * client, and dropping it loses nothing. The spill is a file of its own, not a second table in
 * the database: its transactions skip fsync (nothing in it must survive a crash), and LMDB
 * without fsync may damage the file's older pages on a system crash; kept apart, a damaged spill
 * is deleted at the next open and the database is only ever written by synced commits. The
 * spill has no lock file: no other process ever opens it. Both files are made when first
 * written; a memory-only store (no directory) has neither, and its cache, the only copy, never
 * evicts.
 *
 * A commit's undo table holds, for each client the commit changed, its state as of the commit
 * before, read through a read transaction begun inside the write one (MDB_NOTLS lets a thread
 * hold read transactions besides its write one): it sees the previous commit whatever the write
 * has done, and its pages stay put while it lives, so an old state is copied once, into the undo.
 *
 * The cache is an open-addressing table of entry pointers (linear probing, backward-shift
 * deletion) and a doubly linked list in order of use; eviction takes the least recently used
 * entries until the budget holds, and writes the dirty ones among them in one spill transaction.
 */
#define _DEFAULT_SOURCE /* madvise: POSIX_MADV_DONTNEED is a no-op on Linux */
#include "sim/store.h"

#include <assert.h>
#include <errno.h>
#include <lmdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORE_MAGIC "fedsim-state"
/* A map is address space, not memory or disk (the file grows with its pages), so it starts
 * large: growing it retries the whole transaction that filled it, a commit of every change. */
#define MAP_DEFAULT    ((size_t)1 << 30)
#define REC_STATE      1 /* a spill or undo record's tag byte: the state follows */
#define REC_ABSENT     0 /* ... the client has no state (dropped, or had none then) */
#define PATH_MAX_STORE 1100

typedef struct entry {
    uint32_t id;
    unsigned char dirty; /* newer than the spill's and the database's copy */
    unsigned char gone;  /* a drop (always dirty) */
    size_t len;
    unsigned char *data;       /* len bytes, owned; NULL for a drop */
    struct entry *prev, *next; /* order of use, head the most recent */
} entry;

/* One LMDB file: its environment, its table of states and its map's current size. */
typedef struct lenv {
    MDB_env *env;
    MDB_dbi dbi;
    size_t map;
    char path[PATH_MAX_STORE];
} lenv;

struct sim_store {
    lenv db, spill; /* env NULL while the file is not made yet (always, memory-only) */
    MDB_dbi meta, undo;
    int memory; /* no directory: the cache is the only copy and never evicts */
    char *identity;
    size_t budget, map_size, map_max;
    size_t bytes, n, ndirty, nspilled;
    uint64_t reads; /* states read back from the files */
    entry **slot;   /* cap slots, a power of two, at most half full */
    size_t cap;
    entry *head, *tail;
    int committed, undoable; /* undoable: the last commit has an undo table, to undo_tag */
    uint64_t tag, undo_tag;
    unsigned char *scratch; /* a state too large to cache, as get returned it */
    pid_t pid;              /* the process that opened it, the only one that may use it */
};

/* LMDB's environment and the cache belong to the process that opened them: a forked child
 * (evaluation's helpers) reading through an inherited environment may see a torn map, and its
 * cache changes are lost, so any use there is a bug in the caller. */
#define OWNED(s) assert((s)->pid == getpid() && "a forked process used the state store")

/* What an entry costs against the budget: its state and its bookkeeping, table slots included. */
static size_t entry_cost(const entry *e)
{
    return e->len + sizeof(entry) + 2 * sizeof(entry *);
}

static int lmdb_fail(sim_err *err, const lenv *e, int rc, const char *what)
{
    int bad_file = rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_VERSION_MISMATCH ||
                   rc == MDB_PAGE_NOTFOUND || rc == MDB_INCOMPATIBLE;
    return sim_fail(err, bad_file ? SIM_EFORMAT : SIM_EIO, e->path, 0, 0, "%s: %s", what,
                    mdb_strerror(rc));
}

static void key_of(uint32_t id, unsigned char k[4], MDB_val *kv)
{
    k[0] = (unsigned char)(id >> 24), k[1] = (unsigned char)(id >> 16);
    k[2] = (unsigned char)(id >> 8), k[3] = (unsigned char)id;
    kv->mv_size = 4, kv->mv_data = k;
}

/* ---- the cache's table and list */

static size_t home(const sim_store *s, uint32_t id)
{
    return (size_t)(id * 2654435761u) & (s->cap - 1);
}

static size_t slot_of(const sim_store *s, uint32_t id)
{
    size_t i = home(s, id);
    while (s->slot[i] && s->slot[i]->id != id)
        i = (i + 1) & (s->cap - 1);
    return i;
}

static entry *find(const sim_store *s, uint32_t id)
{
    return s->cap ? s->slot[slot_of(s, id)] : NULL;
}

static void unlink_lru(sim_store *s, entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(sim_store *s, entry *e)
{
    e->next = s->head;
    e->prev = NULL;
    if (s->head) s->head->prev = e;
    s->head = e;
    if (!s->tail) s->tail = e;
}

static void touch(sim_store *s, entry *e)
{
    unlink_lru(s, e);
    push_front(s, e);
}

static void table_grow(sim_store *s)
{
    entry **old = s->slot;
    size_t ocap = s->cap;
    s->cap = ocap ? 2 * ocap : 64;
    s->slot = sim_xcalloc(s->cap, sizeof *s->slot);
    for (size_t i = 0; i < ocap; i++)
        if (old[i]) s->slot[slot_of(s, old[i]->id)] = old[i];
    free(old);
}

static entry *insert(sim_store *s, uint32_t id)
{
    if (2 * (s->n + 1) > s->cap) table_grow(s);
    entry *e = sim_xcalloc(1, sizeof *e);
    e->id = id;
    s->slot[slot_of(s, id)] = e;
    push_front(s, e);
    s->n++;
    s->bytes += entry_cost(e);
    return e;
}

static void set_dirty(sim_store *s, entry *e, int dirty)
{
    if (e->dirty && !dirty) s->ndirty--;
    if (!e->dirty && dirty) s->ndirty++;
    e->dirty = (unsigned char)dirty;
}

/* A state's buffer. Large ones (a model, a mask set) are mapped from the system and unmapped
 * when freed: the cache evicts states while messages and results of the same size are allocated
 * and freed around it, and from malloc's heap the evicted states' room would stay this
 * process's, out of the budget's reach (a 1 GiB budget measured 1 GiB over what was in use).
 * Small ones come from malloc. A 16-byte header before the buffer holds its size and kind. */
#define BUF_HEAD 16
#define BUF_MAP  ((size_t)256 << 10)

static unsigned char *buf_new(size_t n)
{
    size_t total = n + BUF_HEAD;
    size_t *h = NULL;
    if (total >= BUF_MAP) {
        void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) h = p, h[1] = 1;
    }
    if (!h) h = sim_xmalloc(total), h[1] = 0;
    h[0] = total;
    return (unsigned char *)h + BUF_HEAD;
}

static void buf_free(unsigned char *p)
{
    if (!p) return;
    size_t *h = (size_t *)(void *)(p - BUF_HEAD);
    if (h[1])
        munmap(h, h[0]);
    else
        free(h);
}

/* e's state becomes data (len bytes, from buf_new, now the entry's; NULL for a drop). */
static void set_data(sim_store *s, entry *e, unsigned char *data, size_t len)
{
    s->bytes -= entry_cost(e);
    buf_free(e->data);
    e->data = data;
    e->len = len;
    s->bytes += entry_cost(e);
}

/* Remove e from the table (backward shift: no tombstones in the table) and the list. */
static void remove_entry(sim_store *s, entry *e)
{
    size_t mask = s->cap - 1, i = slot_of(s, e->id), j = i;
    s->slot[i] = NULL;
    for (;;) {
        j = (j + 1) & mask;
        if (!s->slot[j]) break;
        size_t k = home(s, s->slot[j]->id);
        /* slot j's entry may move to the hole at i unless its home lies cyclically in (i, j] */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            s->slot[i] = s->slot[j];
            s->slot[j] = NULL;
            i = j;
        }
    }
    unlink_lru(s, e);
    set_dirty(s, e, 0);
    s->bytes -= entry_cost(e);
    s->n--;
    buf_free(e->data);
    free(e);
}

/* ---- LMDB files */

typedef int (*fill_fn)(sim_store *s, MDB_txn *txn, void *ctx, const lenv **where);

/* Run fill in one write transaction on e and commit it; when the map fills up, grow it (double,
 * up to map_max) and run the whole transaction again. */
static int write_txn(sim_store *s, lenv *e, fill_fn fill, void *ctx, const char *what, sim_err *err)
{
    if (!e->env) /* a spill that could not be made again after a commit */
        return sim_fail(err, SIM_EIO, e->path, 0, 0, "%s: closed by an earlier error", what);
    for (;;) {
        MDB_txn *txn;
        const lenv *where = e;
        int rc = mdb_txn_begin(e->env, NULL, 0, &txn);
        if (rc) return lmdb_fail(err, e, rc, "cannot begin a write transaction");
        rc = fill(s, txn, ctx, &where);
        if (rc)
            mdb_txn_abort(txn);
        else
            rc = mdb_txn_commit(txn);
        if (!rc) return 0;
        if (rc != MDB_MAP_FULL) return lmdb_fail(err, where, rc, what);
        if (s->map_max && e->map >= s->map_max)
            return sim_fail(err, SIM_EIO, e->path, 0, 0,
                            "%s: the map is full at %zu bytes, its limit (%s)", what, e->map,
                            mdb_strerror(rc));
        size_t grown = e->map > SIZE_MAX / 2 ? SIZE_MAX : 2 * e->map;
        if (s->map_max && grown > s->map_max) grown = s->map_max;
        rc = mdb_env_set_mapsize(e->env, grown);
        if (rc) return lmdb_fail(err, e, rc, "cannot grow the map");
        e->map = grown;
    }
}

static int env_open(lenv *e, size_t map, unsigned flags, unsigned maxdbs, sim_err *err)
{
    int rc = mdb_env_create(&e->env);
    if (rc) return lmdb_fail(err, e, rc, "cannot create an LMDB environment");
    rc = mdb_env_set_mapsize(e->env, map);
    if (!rc && maxdbs) rc = mdb_env_set_maxdbs(e->env, maxdbs);
    if (!rc)
        rc = mdb_env_open(e->env, e->path, flags | MDB_NOSUBDIR | MDB_NOTLS | MDB_NORDAHEAD, 0644);
    if (rc) {
        mdb_env_close(e->env);
        e->env = NULL;
        return lmdb_fail(err, e, rc, "cannot open");
    }
    MDB_envinfo info;
    mdb_env_info(e->env, &info);
    e->map = info.me_mapsize; /* an existing file's map, when larger */
    return 0;
}

/* Delete path and its LMDB lock file; 0 when they are gone (or never were), else an error
 * "what: the OS's reason". */
static int remove_files_as(const char *path, const char *what, sim_err *err)
{
    char lock[PATH_MAX_STORE + 8];
    snprintf(lock, sizeof lock, "%s-lock", path);
    if (unlink(path) && errno != ENOENT)
        return sim_fail(err, SIM_EIO, path, 0, 0, "%s: %s", what, strerror(errno));
    if (unlink(lock) && errno != ENOENT)
        return sim_fail(err, SIM_EIO, lock, 0, 0, "%s: %s", what, strerror(errno));
    return 0;
}

static int remove_files(const char *path, sim_err *err)
{
    return remove_files_as(path, "cannot remove", err);
}

static void u64_put(unsigned char b[8], uint64_t x)
{
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(x >> (56 - 8 * i));
}

static uint64_t u64_get(const unsigned char b[8])
{
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x = x << 8 | b[i];
    return x;
}

static int spill_table(sim_store *s, MDB_txn *txn, void *ctx, const lenv **where)
{
    (void)ctx, (void)where;
    return mdb_dbi_open(txn, NULL, 0, &s->spill.dbi);
}

/* The spill file, made at its first use (no older one is left: every open removes it). */
static int spill_make(sim_store *s, sim_err *err)
{
    if (s->spill.env) return 0;
    int rc = env_open(&s->spill, s->map_size, MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOLOCK, 0, err);
    if (!rc) rc = write_txn(s, &s->spill, spill_table, NULL, "cannot create its table", err);
    return rc;
}

/* Close and delete the spill file; the next eviction that spills makes a new one. */
static int spill_remove(sim_store *s, sim_err *err)
{
    if (s->spill.env) mdb_env_close(s->spill.env);
    s->spill.env = NULL;
    s->nspilled = 0;
    return remove_files(s->spill.path, err);
}

static int meta_put(MDB_txn *txn, MDB_dbi dbi, const char *key, const void *p, size_t n)
{
    MDB_val k = {strlen(key), (void *)(uintptr_t)key}, v = {n, (void *)(uintptr_t)p};
    return mdb_put(txn, dbi, &k, &v, 0);
}

static int meta_del(MDB_txn *txn, MDB_dbi dbi, const char *key)
{
    MDB_val k = {strlen(key), (void *)(uintptr_t)key};
    int rc = mdb_del(txn, dbi, &k, NULL);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int header_write(sim_store *s, MDB_txn *txn, void *ctx, const lenv **where)
{
    (void)ctx, (void)where;
    unsigned char fmt[4] = {0, 0, 0, SIM_STORE_FORMAT};
    int rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta);
    if (!rc) rc = mdb_dbi_open(txn, "states", MDB_CREATE, &s->db.dbi);
    if (!rc) rc = mdb_dbi_open(txn, "undo", MDB_CREATE, &s->undo);
    if (!rc) rc = meta_put(txn, s->meta, "magic", STORE_MAGIC, strlen(STORE_MAGIC));
    if (!rc) rc = meta_put(txn, s->meta, "format", fmt, sizeof fmt);
    if (!rc) rc = meta_put(txn, s->meta, "identity", s->identity, strlen(s->identity));
    return rc;
}

/* The database file with its header, made at the first commit or spill of a NEW store. */
static int db_make(sim_store *s, sim_err *err)
{
    if (s->db.env) return 0;
    int rc = env_open(&s->db, s->map_size, 0, 3, err);
    if (!rc) rc = write_txn(s, &s->db, header_write, NULL, "cannot write its header", err);
    if (rc && s->db.env) {
        mdb_env_close(s->db.env);
        s->db.env = NULL;
    }
    return rc;
}

/* Read meta key (8 bytes) into *x: 1, 0 when absent, negative when it has another size. */
static int meta_u64(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t *x)
{
    MDB_val k = {strlen(key), (void *)(uintptr_t)key}, v;
    int rc = mdb_get(txn, dbi, &k, &v);
    if (rc == MDB_NOTFOUND) return 0;
    if (rc || v.mv_size != 8) return -1;
    *x = u64_get(v.mv_data);
    return 1;
}

/* Check an existing file's header and read its last commit's tag and what it can go back to. */
static int header_check(sim_store *s, const char *identity, sim_err *err)
{
    const char *path = s->db.path;
    MDB_txn *txn;
    int rc = mdb_txn_begin(s->db.env, NULL, MDB_RDONLY, &txn);
    if (rc) return lmdb_fail(err, &s->db, rc, "cannot read");
    rc = mdb_dbi_open(txn, "meta", 0, &s->meta);
    if (rc) {
        mdb_txn_abort(txn);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "an LMDB file but not a fedsim state store (no header: %s)",
                        mdb_strerror(rc));
    }
    MDB_val k = {5, "magic"}, v = {0, NULL};
    rc = mdb_get(txn, s->meta, &k, &v);
    if (rc || v.mv_size != strlen(STORE_MAGIC) || memcmp(v.mv_data, STORE_MAGIC, v.mv_size)) {
        mdb_txn_abort(txn);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "an LMDB file but not a fedsim state store (its magic is not '%s')",
                        STORE_MAGIC);
    }
    k = (MDB_val){6, "format"};
    rc = mdb_get(txn, s->meta, &k, &v);
    const unsigned char *f = v.mv_data;
    unsigned fmt = rc || v.mv_size != 4 ? 0 : (unsigned)f[0] << 24 | f[1] << 16 | f[2] << 8 | f[3];
    if (fmt != SIM_STORE_FORMAT) {
        mdb_txn_abort(txn);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "state store format %u, this fedsim reads format %d", fmt,
                        SIM_STORE_FORMAT);
    }
    k = (MDB_val){8, "identity"};
    rc = mdb_get(txn, s->meta, &k, &v);
    if (rc || v.mv_size != strlen(identity) || memcmp(v.mv_data, identity, v.mv_size)) {
        int n = rc ? 0 : v.mv_size > 200 ? 200 : (int)v.mv_size;
        mdb_txn_abort(txn);
        return sim_fail(err, SIM_EINVAL, path, 0, 0,
                        "the state store of another run (identity '%.*s', this run's '%s')", n,
                        rc ? "" : (const char *)v.mv_data, identity);
    }
    int tag = meta_u64(txn, s->meta, "tag", &s->tag);
    int undo = meta_u64(txn, s->meta, "undo_tag", &s->undo_tag);
    if (tag < 0 || undo < 0) {
        mdb_txn_abort(txn);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0, "its %s tag is unreadable",
                        tag < 0 ? "commit" : "undo");
    }
    s->committed = tag, s->undoable = undo;
    const char *table = "states";
    rc = mdb_dbi_open(txn, table, 0, &s->db.dbi);
    if (!rc) rc = mdb_dbi_open(txn, table = "undo", 0, &s->undo);
    if (rc) {
        mdb_txn_abort(txn);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0, "its table '%s' is missing: %s", table,
                        mdb_strerror(rc));
    }
    rc = mdb_txn_commit(txn); /* keeps the table handles */
    return rc ? lmdb_fail(err, &s->db, rc, "cannot read") : 0;
}

/* An existing file that LMDB would map past its end (truncated) is refused before any page is
 * read: a page beyond the end of a mapped file is a SIGBUS, not an error code. */
static int size_check(sim_store *s, sim_err *err)
{
    MDB_envinfo info;
    MDB_stat st;
    struct stat fs;
    mdb_env_info(s->db.env, &info);
    mdb_env_stat(s->db.env, &st);
    if (stat(s->db.path, &fs))
        return sim_fail(err, SIM_EIO, s->db.path, 0, 0, "cannot stat: %s", strerror(errno));
    uint64_t need = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    if ((uint64_t)fs.st_size < need)
        return sim_fail(err, SIM_EFORMAT, s->db.path, 0, 0,
                        "truncated: %lld bytes where its pages need %llu", (long long)fs.st_size,
                        (unsigned long long)need);
    return 0;
}

static int resume_open(sim_store *s, const char *identity, sim_err *err)
{
    struct stat fs;
    if (stat(s->db.path, &fs))
        return sim_fail(err, SIM_EIO, s->db.path, 0, 0, "cannot open the state store: %s",
                        strerror(errno));
    if (!S_ISREG(fs.st_mode))
        return sim_fail(err, SIM_EFORMAT, s->db.path, 0, 0, "not a regular file");
    if (fs.st_size == 0) /* LMDB would take an empty file for a new database */
        return sim_fail(err, SIM_EFORMAT, s->db.path, 0, 0, "empty, not a state store");
    int rc = env_open(&s->db, s->map_size, 0, 3, err);
    if (!rc) rc = size_check(s, err);
    if (!rc) rc = header_check(s, identity, err);
    return rc;
}

const char *sim_store_path(const sim_store *s)
{
    return s->memory ? NULL : s->db.path;
}

int sim_store_open(sim_store **out, const char *dir, const char *identity,
                   const sim_store_opts *opts, sim_store_mode mode, sim_err *err)
{
    *out = NULL;
    sim_store *s = sim_xcalloc(1, sizeof *s);
    s->pid = getpid();
    s->budget = opts->budget;
    s->map_size = opts->map_size ? opts->map_size : MAP_DEFAULT;
    s->map_max = opts->map_max;
    s->identity = sim_xstrdup(identity);
    if (!dir) {
        assert(mode == SIM_STORE_NEW && "a memory-only store has nothing to resume");
        s->memory = 1;
        *out = s;
        return 0;
    }
    snprintf(s->db.path, sizeof s->db.path, "%s/state.mdb", dir);
    snprintf(s->spill.path, sizeof s->spill.path, "%s/state.spill", dir);
    /* NEW makes its database at the first commit or spill, so an older one must go now. */
    int rc = mode == SIM_STORE_NEW ? remove_files(s->db.path, err) : resume_open(s, identity, err);
    if (!rc) rc = remove_files(s->spill.path, err); /* a crashed session's */
    if (rc) {
        sim_store_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int sim_store_remove(sim_store *s, sim_err *err)
{
    char path[PATH_MAX_STORE];
    int memory = s->memory;
    snprintf(path, sizeof path, "%s", s->db.path);
    sim_store_free(s);
    return memory ? 0 : remove_files_as(path, "finished, but cannot remove", err);
}

void sim_store_free(sim_store *s)
{
    if (!s) return;
    while (s->head)
        remove_entry(s, s->head);
    free(s->slot);
    buf_free(s->scratch);
    free(s->identity);
    if (s->db.env) mdb_env_close(s->db.env);
    if (s->spill.env) spill_remove(s, NULL);
    free(s);
}

/* ---- eviction */

struct victims {
    entry *end; /* the first entry, walking from the tail, that stays */
};

static int spill_write(sim_store *s, MDB_txn *txn, void *ctx, const lenv **where)
{
    (void)where;
    const struct victims *v = ctx;
    for (entry *e = s->tail; e != v->end; e = e->prev) {
        if (!e->dirty) continue;
        unsigned char k[4];
        MDB_val kv, dv = {e->len + 1, NULL};
        key_of(e->id, k, &kv);
        int rc = mdb_put(txn, s->spill.dbi, &kv, &dv, MDB_RESERVE);
        if (rc) return rc;
        unsigned char *p = dv.mv_data;
        p[0] = e->gone ? REC_ABSENT : REC_STATE;
        if (e->len) memcpy(p + 1, e->data, e->len);
    }
    return 0;
}

/* Evict least recently used entries until the cache is within its budget; the dirty ones go to
 * the spill in one transaction first, so a failure leaves the cache as it was. */
static int evict(sim_store *s, sim_err *err)
{
    if (s->memory || s->bytes <= s->budget) return 0;
    size_t over = s->bytes - s->budget, freed = 0, ndirty = 0;
    entry *e = s->tail;
    for (; e && freed < over; e = e->prev) {
        freed += entry_cost(e);
        ndirty += e->dirty;
    }
    struct victims v = {e};
    if (ndirty) {
        int rc = db_make(s, err);
        if (!rc) rc = spill_make(s, err);
        if (!rc) rc = write_txn(s, &s->spill, spill_write, &v, "cannot write evicted states", err);
        if (rc) return rc;
        s->nspilled += ndirty;
    }
    while (s->tail != v.end)
        remove_entry(s, s->tail);
    return 0;
}

/* ---- get, put, drop */

/* A state read from a file's map is copied out and not read there again soon: its whole pages
 * leave this process's resident set (they stay in the page cache), or a run reading its states
 * back would count every page of them as resident. Only the maps are touched (LMDB writes with
 * write(), not through them), and only large states' pages, which are theirs alone. */
static void drop_pages(const void *p, size_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || n < 16 * (size_t)page) return;
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: a failure costs memory */
}

/* Read client id's record from e into a new buffer: 1 found, 0 absent, negative on error. */
static int lmdb_read(lenv *e, uint32_t id, unsigned char **buf, size_t *len, sim_err *err)
{
    MDB_txn *txn;
    unsigned char k[4];
    MDB_val kv, dv;
    key_of(id, k, &kv);
    int rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &txn);
    if (rc) return lmdb_fail(err, e, rc, "cannot begin a read transaction");
    rc = mdb_get(txn, e->dbi, &kv, &dv);
    if (rc == MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        return 0;
    }
    if (rc) {
        mdb_txn_abort(txn);
        return lmdb_fail(err, e, rc, "cannot read a state");
    }
    *len = dv.mv_size;
    *buf = buf_new(dv.mv_size);
    if (dv.mv_size) memcpy(*buf, dv.mv_data, dv.mv_size);
    drop_pages(dv.mv_data, dv.mv_size);
    mdb_txn_abort(txn);
    return 1;
}

int sim_store_get(sim_store *s, uint32_t id, const void **data, size_t *len, sim_err *err)
{
    OWNED(s);
    entry *e = find(s, id);
    if (e) {
        touch(s, e);
        if (e->gone) return 0;
        *data = e->data;
        *len = e->len;
        return 1;
    }
    unsigned char *buf = NULL;
    size_t n = 0, skip = 0;
    int rc = 0;
    if (s->nspilled) {
        rc = lmdb_read(&s->spill, id, &buf, &n, err);
        if (rc < 0) return rc;
        if (rc && (n == 0 || buf[0] > REC_STATE)) {
            buf_free(buf);
            return sim_fail(err, SIM_EFORMAT, s->spill.path, 0, 0,
                            "client %u's spilled record is malformed", id);
        }
        if (rc && buf[0] == REC_ABSENT) {
            buf_free(buf);
            return 0;
        }
        skip = rc; /* the tag byte */
    }
    if (!rc && s->db.env) rc = lmdb_read(&s->db, id, &buf, &n, err);
    if (rc <= 0) return rc;
    s->reads++;
    n -= skip;
    if (skip) memmove(buf, buf + skip, n);
    if (n + sizeof(entry) + 2 * sizeof(entry *) > s->budget) { /* handed out, not cached */
        buf_free(s->scratch);
        s->scratch = buf;
        *data = buf;
        *len = n;
        return 1;
    }
    e = insert(s, id);
    set_data(s, e, buf, n);
    rc = evict(s, err); /* e, the newest and within the budget, stays */
    if (rc) return rc;
    *data = e->data;
    *len = e->len;
    return 1;
}

static int change(sim_store *s, uint32_t id, const void *data, size_t len, sim_err *err)
{
    entry *e = find(s, id);
    if (e)
        touch(s, e);
    else
        e = insert(s, id);
    unsigned char *copy = NULL;
    if (data) {
        copy = buf_new(len);
        if (len) memcpy(copy, data, len);
    }
    set_data(s, e, copy, len);
    e->gone = !data;
    set_dirty(s, e, 1);
    return evict(s, err);
}

int sim_store_put(sim_store *s, uint32_t id, const void *data, size_t len, sim_err *err)
{
    static const unsigned char none[1];
    OWNED(s);
    return change(s, id, data ? data : none, len, err);
}

int sim_store_drop(sim_store *s, uint32_t id, sim_err *err)
{
    OWNED(s);
    return change(s, id, NULL, 0, err);
}

/* ---- commit and restore */

static int apply(MDB_txn *txn, MDB_dbi dbi, const MDB_val *key, int gone, const void *p, size_t n)
{
    MDB_val k = *key, v = {n, (void *)(uintptr_t)p}; /* LMDB only reads them */
    if (gone) {
        int rc = mdb_del(txn, dbi, &k, NULL);
        return rc == MDB_NOTFOUND ? 0 : rc;
    }
    return mdb_put(txn, dbi, &k, &v, 0);
}

/* Note in the undo table key's state as of the previous commit (prev, a read transaction that
 * sees it), unless this commit noted it already (a key from the spill, then from the cache). */
static int undo_note(sim_store *s, MDB_txn *txn, MDB_txn *prev, const MDB_val *key)
{
    MDB_val k = *key, v, old;
    int rc = mdb_get(txn, s->undo, &k, &v);
    if (rc != MDB_NOTFOUND) return rc;
    rc = mdb_get(prev, s->db.dbi, &k, &old);
    if (rc == MDB_NOTFOUND) {
        unsigned char absent = REC_ABSENT;
        v = (MDB_val){1, &absent};
        return mdb_put(txn, s->undo, &k, &v, 0);
    }
    if (rc) return rc;
    /* old points into prev's snapshot, which this transaction's writes leave in place */
    v = (MDB_val){old.mv_size + 1, NULL};
    rc = mdb_put(txn, s->undo, &k, &v, MDB_RESERVE);
    if (rc) return rc;
    unsigned char *p = v.mv_data;
    p[0] = REC_STATE;
    if (old.mv_size) memcpy(p + 1, old.mv_data, old.mv_size);
    return 0;
}

/* One key's change, its old state noted first when there is a previous commit to go back to. */
static int commit_key(sim_store *s, MDB_txn *txn, MDB_txn *prev, const MDB_val *key, int gone,
                      const void *p, size_t n)
{
    int rc = prev ? undo_note(s, txn, prev, key) : 0;
    return rc ? rc : apply(txn, s->db.dbi, key, gone, p, n);
}

static int commit_spill(sim_store *s, MDB_txn *txn, MDB_txn *prev, const lenv **where)
{
    MDB_txn *rt;
    MDB_cursor *cur;
    MDB_val k, v;
    *where = &s->spill;
    int rc = mdb_txn_begin(s->spill.env, NULL, MDB_RDONLY, &rt);
    if (rc) return rc;
    rc = mdb_cursor_open(rt, s->spill.dbi, &cur);
    if (rc) {
        mdb_txn_abort(rt);
        return rc;
    }
    for (MDB_cursor_op op = MDB_FIRST; !(rc = mdb_cursor_get(cur, &k, &v, op)); op = MDB_NEXT) {
        const unsigned char *p = v.mv_data;
        if (v.mv_size == 0 || p[0] > REC_STATE) {
            rc = MDB_CORRUPTED;
            break;
        }
        *where = &s->db;
        rc = commit_key(s, txn, prev, &k, p[0] == REC_ABSENT, p + 1, v.mv_size - 1);
        if (rc) break;
        *where = &s->spill;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(rt);
    if (rc != MDB_NOTFOUND) return rc;
    *where = &s->db;
    return 0;
}

/* The spill's records first, then the cache's dirty entries over them (they are newer); the
 * undo table is emptied first and refilled with the old states of the keys this changes. */
static int commit_write(sim_store *s, MDB_txn *txn, void *ctx, const lenv **where)
{
    const uint64_t *tag = ctx;
    MDB_txn *prev = NULL;
    unsigned char t[8];
    int rc = mdb_drop(txn, s->undo, 0);
    if (!rc && s->committed) rc = mdb_txn_begin(s->db.env, NULL, MDB_RDONLY, &prev);
    if (!rc && s->nspilled) rc = commit_spill(s, txn, prev, where);
    for (entry *e = s->head; e && !rc; e = e->next) {
        if (!e->dirty) continue;
        unsigned char kb[4];
        MDB_val k;
        key_of(e->id, kb, &k);
        rc = commit_key(s, txn, prev, &k, e->gone, e->data, e->len);
    }
    if (prev) mdb_txn_abort(prev);
    u64_put(t, *tag);
    if (!rc) rc = meta_put(txn, s->meta, "tag", t, sizeof t);
    u64_put(t, s->tag);
    if (!rc)
        rc = prev ? meta_put(txn, s->meta, "undo_tag", t, sizeof t)
                  : meta_del(txn, s->meta, "undo_tag");
    return rc;
}

int sim_store_commit(sim_store *s, uint64_t tag, sim_err *err)
{
    OWNED(s);
    if (!s->memory) {
        int rc = db_make(s, err);
        if (!rc) rc = write_txn(s, &s->db, commit_write, &tag, "cannot commit", err);
        if (rc) return rc;
        s->undoable = s->committed, s->undo_tag = s->tag;
    }
    s->committed = 1;
    s->tag = tag;
    for (entry *e = s->head, *next; e; e = next) {
        next = e->next;
        if (e->gone)
            remove_entry(s, e);
        else
            set_dirty(s, e, 0);
    }
    return s->spill.env ? spill_remove(s, err) : 0;
}

int sim_store_committed(const sim_store *s, uint64_t *tag)
{
    *tag = s->committed ? s->tag : 0;
    return s->committed;
}

/* Put back every state the undo table holds, then empty it: the database of the commit before. */
static int undo_write(sim_store *s, MDB_txn *txn, void *ctx, const lenv **where)
{
    (void)where;
    const uint64_t *tag = ctx;
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, s->undo, &cur);
    if (rc) return rc;
    /* the undo table's pages are not written before the drop below, so v stays valid */
    for (MDB_cursor_op op = MDB_FIRST; !(rc = mdb_cursor_get(cur, &k, &v, op)); op = MDB_NEXT) {
        const unsigned char *p = v.mv_data;
        if (v.mv_size == 0 || p[0] > REC_STATE) {
            rc = MDB_CORRUPTED;
            break;
        }
        rc = apply(txn, s->db.dbi, &k, p[0] == REC_ABSENT, p + 1, v.mv_size - 1);
        if (rc) break;
    }
    mdb_cursor_close(cur);
    if (rc != MDB_NOTFOUND) return rc;
    unsigned char t[8];
    u64_put(t, *tag);
    rc = mdb_drop(txn, s->undo, 0);
    if (!rc) rc = meta_put(txn, s->meta, "tag", t, sizeof t);
    if (!rc) rc = meta_del(txn, s->meta, "undo_tag");
    return rc;
}

int sim_store_restore(sim_store *s, uint64_t tag, sim_err *err)
{
    uint64_t at = s->committed ? s->tag : 0;
    if (s->memory) {
        if (tag == at) return 0;
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "the memory-only state store is at commit %llu, not %llu",
                        (unsigned long long)at, (unsigned long long)tag);
    }
    assert(s->n == 0 && s->nspilled == 0 && "restore comes before any get, put or drop");
    if (tag == at) return 0;
    if (!s->undoable)
        return sim_fail(err, SIM_EINVAL, s->db.path, 0, 0,
                        "the state store is at commit %llu and cannot go back to commit %llu (its "
                        "last commit has no undo)",
                        (unsigned long long)at, (unsigned long long)tag);
    if (tag != s->undo_tag)
        return sim_fail(err, SIM_EINVAL, s->db.path, 0, 0,
                        "the state store is at commit %llu and can go back only to commit %llu, "
                        "not to commit %llu",
                        (unsigned long long)at, (unsigned long long)s->undo_tag,
                        (unsigned long long)tag);
    int rc = write_txn(s, &s->db, undo_write, &tag, "cannot go back a commit", err);
    if (rc) return rc;
    s->tag = tag;
    s->undoable = 0;
    return 0;
}

/* Committed states: the states table's entries. */
static int db_states(const sim_store *s, uint64_t *n, sim_err *err)
{
    MDB_txn *txn = NULL;
    MDB_stat st;
    int rc = mdb_txn_begin(s->db.env, NULL, MDB_RDONLY, &txn);
    if (!rc) rc = mdb_stat(txn, s->db.dbi, &st);
    if (txn) mdb_txn_abort(txn);
    if (rc) return lmdb_fail(err, &s->db, rc, "cannot count its states");
    *n = st.ms_entries;
    return 0;
}

void sim_store_stats_peek(const sim_store *s, sim_store_stats *st)
{
    *st = (sim_store_stats){s->bytes, s->n, s->ndirty, s->nspilled, 0, 0, 0, s->reads};
}

int sim_store_stats_get(const sim_store *s, sim_store_stats *st, sim_err *err)
{
    struct stat fs;
    sim_store_stats_peek(s, st);
    if (s->db.env) {
        if (stat(s->db.path, &fs))
            return sim_fail(err, SIM_EIO, s->db.path, 0, 0, "cannot stat: %s", strerror(errno));
        st->disk_bytes = (uint64_t)fs.st_size;
        int rc = db_states(s, &st->states, err);
        if (rc) return rc;
    }
    if (s->spill.env) {
        if (stat(s->spill.path, &fs))
            return sim_fail(err, SIM_EIO, s->spill.path, 0, 0, "cannot stat: %s", strerror(errno));
        st->spill_bytes = (uint64_t)fs.st_size;
    }
    return 0;
}
