/* tests/test_sim_store.c -- the client state store (sim/store.h): reads independent of the cache's
 * budget, commits that survive a reopen (and a crash) while uncommitted states do not, refusal of
 * foreign, damaged and other runs' files, and a map that grows. */
#include "sim/store.h"
#include "tests/check.h"

#include <lmdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NCLIENT 10000
#define MAXLEN  (64 << 10)

static uint64_t mix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Client id's state at version ver (ver > 0): its length, log-uniform over 0..64 KiB so that
 * 10,000 clients fit in memory, and its bytes, both a function of (id, ver) alone. */
static size_t state_len(uint32_t id, uint32_t ver)
{
    uint64_t x = (uint64_t)id << 32 | ver;
    unsigned e = (unsigned)(mix(&x) % 17);
    return e == 0 ? 0 : 1 + (size_t)(mix(&x) % ((size_t)1 << e)) % MAXLEN;
}

static void state_fill(uint32_t id, uint32_t ver, unsigned char *p, size_t len)
{
    uint64_t x = ((uint64_t)ver << 32 | id) ^ 0x5555;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t r = mix(&x);
        memcpy(p + i, &r, len - i < 8 ? len - i : 8);
    }
}

/* 1 when s holds ver of client id (ver 0: no state). */
static int holds(sim_store *s, uint32_t id, uint32_t ver, unsigned char *buf)
{
    const void *p;
    size_t n;
    sim_err err;
    int rc = sim_store_get(s, id, &p, &n, &err);
    if (rc < 0) printf("get %u: %s\n", id, err.msg);
    if (ver == 0) return rc == 0;
    size_t len = state_len(id, ver);
    state_fill(id, ver, buf, len);
    return rc == 1 && n == len && (len == 0 || !memcmp(p, buf, len));
}

static int put_ver(sim_store *s, uint32_t id, uint32_t ver, unsigned char *buf)
{
    sim_err err;
    size_t len = state_len(id, ver);
    state_fill(id, ver, buf, len);
    int rc = sim_store_put(s, id, buf, len, &err);
    if (rc) printf("put %u: %s\n", id, err.msg);
    return rc;
}

static void tmp_dir(char *dir)
{
    strcpy(dir, "/tmp/fedsim_store_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void rm_dir(const char *dir)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) printf("cannot remove %s\n", dir);
}

/* 20,000 random puts, gets, drops and a commit every 5,000, on 10,000 clients, against a store
 * with a 1 MiB cache and one without bound: every get agrees with the model (and so with the
 * other store), the small one stays within its budget and did evict and spill. */
static void test_budget_invisible(void)
{
    char d1[64], d2[64];
    tmp_dir(d1), tmp_dir(d2);
    sim_store *small, *big;
    sim_err err;
    sim_store_opts o1 = {1 << 20, 0, 0}, o2 = {SIZE_MAX, 0, 0};
    CHECK(sim_store_open(&small, d1, "id", &o1, SIM_STORE_NEW, &err) == 0);
    CHECK(sim_store_open(&big, d2, "id", &o2, SIM_STORE_NEW, &err) == 0);
    uint32_t *ver = calloc(NCLIENT, sizeof *ver), next = 1;
    unsigned char *buf = malloc(MAXLEN);
    uint64_t x = 41;
    long bad = 0, over = 0;
    size_t most_spilled = 0;
    sim_store_stats st;
    for (int step = 0; step < 20000; step++) {
        uint32_t id = (uint32_t)(mix(&x) % NCLIENT);
        unsigned op = (unsigned)(mix(&x) % 10);
        if (op < 5) {
            ver[id] = next++;
            bad += put_ver(small, id, ver[id], buf) != 0;
            bad += put_ver(big, id, ver[id], buf) != 0;
        } else if (op < 9) {
            int a = holds(small, id, ver[id], buf), b = holds(big, id, ver[id], buf);
            if ((!a || !b) && !bad)
                printf("step %d: client %u v%u: %d %d\n", step, id, ver[id], a, b);
            bad += !a + !b;
        } else {
            ver[id] = 0;
            bad += sim_store_drop(small, id, &err) != 0;
            bad += sim_store_drop(big, id, &err) != 0;
        }
        bad += sim_store_stats_get(small, &st, &err) != 0;
        over += st.cached_bytes > o1.budget;
        if (st.spilled > most_spilled) most_spilled = st.spilled;
        if (step % 5000 == 4999) {
            CHECK(sim_store_commit(small, (uint64_t)step, &err) == 0);
            CHECK(sim_store_commit(big, (uint64_t)step, &err) == 0);
        }
    }
    for (uint32_t id = 0; id < NCLIENT; id++)
        bad += !holds(small, id, ver[id], buf) + !holds(big, id, ver[id], buf);
    CHECK_EQ_I64(bad, 0);
    CHECK_EQ_I64(over, 0);
    CHECK_MSG(most_spilled > 1000, "the 1 MiB store spilled %zu states", most_spilled);
    CHECK(sim_store_stats_get(small, &st, &err) == 0);
    CHECK_MSG(st.cached < NCLIENT / 10, "the 1 MiB store caches %zu states", st.cached);
    CHECK(sim_store_stats_get(big, &st, &err) == 0);
    CHECK_EQ_I64(st.spilled, 0);
    sim_store_free(small);
    sim_store_free(big);
    free(ver);
    free(buf);
    rm_dir(d1), rm_dir(d2);
}

/* States as of the last commit: 0..999 at version 1, every tenth dropped. After it, a session
 * puts version 2 of 0..1499 and drops 0..99 through a 64 KiB cache (so most of it is spilled),
 * then ends without committing: by a crash (_exit in a child) or by closing. */
static void after_commit(sim_store *s, unsigned char *buf)
{
    sim_err err;
    sim_store_stats st;
    for (uint32_t id = 1000; id < 1500; id++)
        put_ver(s, id, 2, buf);
    for (uint32_t id = 0; id < 1000; id++)
        put_ver(s, id, 2, buf);
    for (uint32_t id = 0; id < 100; id++)
        sim_store_drop(s, id, &err);
    CHECK(sim_store_stats_get(s, &st, &err) == 0);
    CHECK_MSG(st.spilled > 500 && st.spill_bytes > 0, "%zu spilled", st.spilled);
    CHECK(holds(s, 5, 0, buf) && holds(s, 200, 2, buf) && holds(s, 1200, 2, buf));
}

static void check_committed(const char *dir, unsigned char *buf)
{
    sim_store *s;
    sim_err err;
    sim_store_opts o = {64 << 10, 0, 0};
    uint64_t tag = 0;
    CHECK(sim_store_open(&s, dir, "run", &o, SIM_STORE_RESUME, &err) == 0);
    if (!s) return;
    CHECK(sim_store_committed(s, &tag) == 1);
    CHECK_EQ_I64(tag, 7);
    long bad = 0;
    for (uint32_t id = 0; id < 1500; id++)
        bad += !holds(s, id, id < 1000 && id % 10 ? 1 : 0, buf);
    CHECK_EQ_I64(bad, 0);
    sim_store_free(s);
}

/* One session on a new store in dir: commit tag 7 over version 1, then after_commit; a crash
 * ends it with _exit (no close, the spill file stays behind), else it closes. */
static void session(const char *dir, unsigned char *buf, int crash)
{
    sim_store *s;
    sim_err err;
    sim_store_opts o = {64 << 10, 0, 0};
    uint64_t tag = 1;
    CHECK(sim_store_open(&s, dir, "run", &o, SIM_STORE_NEW, &err) == 0);
    CHECK(sim_store_committed(s, &tag) == 0 && tag == 0);
    for (uint32_t id = 0; id < 1000; id++)
        put_ver(s, id, 1, buf);
    for (uint32_t id = 0; id < 1000; id += 10)
        sim_store_drop(s, id, &err);
    CHECK(sim_store_commit(s, 7, &err) == 0);
    CHECK(sim_store_committed(s, &tag) == 1 && tag == 7);
    after_commit(s, buf);
    if (crash) {
        fflush(stdout);
        _exit(check_failed ? 1 : 0);
    }
    sim_store_free(s);
}

static void test_commit_reopen(void)
{
    unsigned char *buf = malloc(MAXLEN);
    for (int crash = 0; crash < 2; crash++) {
        char dir[64], spill[100];
        struct stat fs;
        tmp_dir(dir);
        snprintf(spill, sizeof spill, "%s/state.spill", dir);
        if (crash) {
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                check_passed = check_failed = 0;
                session(dir, buf, 1);
            }
            int status = 0;
            waitpid(pid, &status, 0);
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            CHECK_MSG(stat(spill, &fs) == 0 && fs.st_size > 0, "the crash left no spill");
        } else {
            session(dir, buf, 0);
            CHECK_MSG(stat(spill, &fs) != 0, "closing left the spill");
        }
        check_committed(dir, buf);
        rm_dir(dir);
    }
    free(buf);
}

/* A store in dir with 200 states of 4 KiB committed, for the refusals to damage. */
static void make_store(const char *dir, const char *identity)
{
    sim_store *s;
    sim_err err;
    sim_store_opts o = {SIZE_MAX, 0, 0};
    unsigned char buf[4096];
    memset(buf, 7, sizeof buf);
    CHECK(sim_store_open(&s, dir, identity, &o, SIM_STORE_NEW, &err) == 0);
    for (uint32_t id = 0; id < 200; id++)
        sim_store_put(s, id, buf, sizeof buf, &err);
    CHECK(sim_store_commit(s, 3, &err) == 0);
    sim_store_free(s);
}

/* An LMDB file at dir/state.mdb that is not a fedsim store: with a "meta" table whose magic is
 * magic, or (magic NULL) a key in its main table only. */
static void make_foreign(const char *dir, const char *magic)
{
    char path[100];
    snprintf(path, sizeof path, "%s/state.mdb", dir);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    char value[32];
    snprintf(value, sizeof value, "%s", magic ? magic : "abc");
    MDB_val k = {5, "magic"}, v = {strlen(value), value};
    int rc = mdb_env_create(&env);
    if (!rc) rc = mdb_env_set_maxdbs(env, 2);
    if (!rc) rc = mdb_env_open(env, path, MDB_NOSUBDIR, 0644);
    if (!rc) rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (!rc) rc = mdb_dbi_open(txn, magic ? "meta" : NULL, MDB_CREATE, &dbi);
    if (!rc) rc = mdb_put(txn, dbi, &k, &v, 0);
    if (!rc) rc = mdb_txn_commit(txn);
    CHECK_MSG(rc == 0, "foreign LMDB: %s", mdb_strerror(rc));
    mdb_env_close(env);
}

/* Overwrite dir's store's header record key with n bytes of value. */
static void set_header(const char *dir, const char *key, const void *value, size_t n)
{
    char path[100], kb[16], vb[16];
    snprintf(path, sizeof path, "%s/state.mdb", dir);
    snprintf(kb, sizeof kb, "%s", key);
    memcpy(vb, value, n);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {strlen(kb), kb}, v = {n, vb};
    int rc = mdb_env_create(&env);
    if (!rc) rc = mdb_env_set_maxdbs(env, 2);
    if (!rc) rc = mdb_env_set_mapsize(env, (size_t)1 << 30);
    if (!rc) rc = mdb_env_open(env, path, MDB_NOSUBDIR, 0644);
    if (!rc) rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (!rc) rc = mdb_dbi_open(txn, "meta", 0, &dbi);
    if (!rc) rc = mdb_put(txn, dbi, &k, &v, 0);
    if (!rc) rc = mdb_txn_commit(txn);
    CHECK_MSG(rc == 0, "set_header: %s", mdb_strerror(rc));
    mdb_env_close(env);
}

/* Opening dir's store for identity is refused with a message naming the file and saying why. */
static void refused(const char *dir, const char *identity, const char *why)
{
    sim_store *s;
    sim_err err;
    sim_store_opts o = {SIZE_MAX, 0, 0};
    char path[100], msg[1024];
    snprintf(path, sizeof path, "%s/state.mdb", dir);
    int rc = sim_store_open(&s, dir, identity, &o, SIM_STORE_RESUME, &err);
    CHECK_MSG(rc < 0 && !s, "%s: opened (%d)", why, rc);
    if (rc >= 0) {
        sim_store_free(s);
        return;
    }
    sim_err_format(&err, msg, sizeof msg);
    printf("refused as expected: %s\n", msg);
    CHECK_MSG(strstr(msg, path) && strstr(msg, why), "'%s' should name %s and say '%s'", msg, path,
              why);
}

static void write_bytes(const char *dir, size_t n, int random)
{
    char path[100];
    snprintf(path, sizeof path, "%s/state.mdb", dir);
    FILE *f = fopen(path, "wb");
    uint64_t x = 9;
    for (size_t i = 0; i < n; i++)
        fputc(random ? (int)(mix(&x) & 255) : 0, f);
    CHECK(fclose(f) == 0);
}

static void truncate_to(const char *dir, off_t n)
{
    char path[100];
    snprintf(path, sizeof path, "%s/state.mdb", dir);
    CHECK(truncate(path, n) == 0);
}

static void test_refusals(void)
{
    char dir[64];
    tmp_dir(dir);
    refused(dir, "run-A", "No such file");
    make_store(dir, "run-A");
    refused(dir, "run-B", "another run (identity 'run-A', this run's 'run-B')");
    set_header(dir, "format", "\0\0\0\2", 4);
    refused(dir, "run-A", "state store format 2, this fedsim reads format 1");
    set_header(dir, "format", "\0\0\0\1", 4);
    struct stat fs;
    char path[100];
    snprintf(path, sizeof path, "%s/state.mdb", dir);
    CHECK(stat(path, &fs) == 0 && fs.st_size > 800 << 10);
    truncate_to(dir, fs.st_size / 2);
    refused(dir, "run-A", "truncated");
    truncate_to(dir, 100);
    refused(dir, "run-A", "not an LMDB file");
    truncate_to(dir, 0);
    refused(dir, "run-A", "empty");
    write_bytes(dir, 64 << 10, 1);
    refused(dir, "run-A", "not an LMDB file");
    write_bytes(dir, 64 << 10, 0);
    refused(dir, "run-A", "not an LMDB file");
    unlink(path);
    make_foreign(dir, "other-app");
    refused(dir, "run-A", "not a fedsim state store (its magic");
    unlink(path);
    make_foreign(dir, NULL);
    refused(dir, "run-A", "not a fedsim state store (no header");
    unlink(path);
    make_store(dir, "run-A"); /* still opens after all that */
    sim_store *s;
    sim_err err;
    sim_store_opts o = {SIZE_MAX, 0, 0};
    CHECK(sim_store_open(&s, dir, "run-A", &o, SIM_STORE_RESUME, &err) == 0);
    sim_store_free(s);
    rm_dir(dir);
}

/* A 256 KiB map takes 4 MiB of states (the database's and, through a 64 KiB cache, the spill's
 * map grow); capped at 1 MiB the commit fails saying so, and the states stay readable. */
static void test_map_growth(void)
{
    unsigned char *buf = malloc(MAXLEN), *want = malloc(MAXLEN);
    for (int capped = 0; capped < 2; capped++) {
        char dir[64];
        tmp_dir(dir);
        sim_store *s;
        sim_err err;
        sim_store_opts o = {64 << 10, 256 << 10, capped ? 1 << 20 : 0};
        CHECK(sim_store_open(&s, dir, "grow", &o, SIM_STORE_NEW, &err) == 0);
        for (uint32_t id = 0; id < 64; id++) {
            memset(buf, (int)id, MAXLEN);
            int rc = sim_store_put(s, id, buf, MAXLEN, &err);
            if (!capped) CHECK_MSG(rc == 0, "put %u: %s", id, err.msg);
        }
        int rc = sim_store_commit(s, 1, &err);
        char msg[1024], path[100];
        sim_err_format(&err, msg, sizeof msg);
        snprintf(path, sizeof path, "%s/state", dir);
        if (capped) {
            CHECK_MSG(rc < 0 && strstr(msg, path) && strstr(msg, "map is full"), "%d %s", rc, msg);
            printf("refused as expected: %s\n", msg);
        } else {
            CHECK_MSG(rc == 0, "%s", msg);
            sim_store_free(s);
            CHECK(sim_store_open(&s, dir, "grow", &o, SIM_STORE_RESUME, &err) == 0);
        }
        long bad = 0;
        for (uint32_t id = 0; id < 64; id += capped ? 63 : 1) {
            const void *p;
            size_t n;
            memset(want, (int)id, MAXLEN);
            bad += !(sim_store_get(s, id, &p, &n, &err) == 1 && n == MAXLEN && !memcmp(p, want, n));
        }
        CHECK_EQ_I64(bad, 0);
        sim_store_free(s);
        rm_dir(dir);
    }
    free(buf);
    free(want);
}

int main(void)
{
    test_budget_invisible();
    test_commit_reopen();
    test_refusals();
    test_map_growth();
    return CHECK_DONE();
}
