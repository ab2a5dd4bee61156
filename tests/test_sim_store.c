/* tests/test_sim_store.c -- the client state store (sim/store.h): reads independent of the cache's
 * budget, commits that survive a reopen (and a crash) while uncommitted states do not, refusal of
 * foreign, damaged and other runs' files, a map that grows, the memory-only store, files made
 * only when needed, and going back one commit. */
#include "sim/store.h"
#include "tests/check.h"

#include <dirent.h>
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
    unsigned char fmt[4] = {0, 0, 0, SIM_STORE_FORMAT + 1};
    char why[80];
    snprintf(why, sizeof why, "state store format %d, this fedsim reads format %d",
             SIM_STORE_FORMAT + 1, SIM_STORE_FORMAT);
    set_header(dir, "format", fmt, 4);
    refused(dir, "run-A", why);
    fmt[3] = SIM_STORE_FORMAT;
    set_header(dir, "format", fmt, 4);
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

/* 1 when dir holds no file but . and .. */
static int dir_empty(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int empty = 1;
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            printf("%s holds %s\n", dir, de->d_name), empty = 0;
    if (d) closedir(d);
    return d && empty;
}

/* A memory-only store (no directory) run from a scratch directory: 10,000 random puts, gets,
 * drops and commits on 1,000 clients through a 1 KiB budget agree with the model (the budget is
 * ignored: nothing is evicted, there is nowhere to put it), no file is made, the stats say no
 * disk, and restore accepts only the last commit's tag. */
static void test_memory_only(void)
{
    char dir[64], cwd[4096];
    tmp_dir(dir);
    CHECK(getcwd(cwd, sizeof cwd) && chdir(dir) == 0);
    sim_store *s;
    sim_err err;
    sim_store_opts o = {1 << 10, 0, 0};
    CHECK(sim_store_open(&s, NULL, "mem", &o, SIM_STORE_NEW, &err) == 0);
    CHECK(sim_store_restore(s, 0, &err) == 0);
    uint32_t ver[1000] = {0}, next = 1;
    unsigned char *buf = malloc(MAXLEN);
    uint64_t x = 43, tag = 0;
    long bad = 0;
    for (int step = 0; step < 10000; step++) {
        uint32_t id = (uint32_t)(mix(&x) % 1000);
        unsigned op = (unsigned)(mix(&x) % 10);
        if (op < 5)
            bad += put_ver(s, id, ver[id] = next++, buf) != 0;
        else if (op < 9)
            bad += !holds(s, id, ver[id], buf);
        else
            ver[id] = 0, bad += sim_store_drop(s, id, &err) != 0;
        if (step % 1000 == 999) bad += sim_store_commit(s, ++tag, &err) != 0;
    }
    for (uint32_t id = 0; id < 1000; id++)
        bad += !holds(s, id, ver[id], buf);
    CHECK_EQ_I64(bad, 0);
    sim_store_stats st;
    CHECK(sim_store_stats_get(s, &st, &err) == 0);
    CHECK_MSG(st.cached_bytes > 100 * o.budget && st.spilled == 0 && st.disk_bytes == 0 &&
                      st.spill_bytes == 0 && st.states == 0,
              "memory-only stats: %zu bytes cached, %zu spilled, %llu %llu disk, %llu states",
              st.cached_bytes, st.spilled, (unsigned long long)st.disk_bytes,
              (unsigned long long)st.spill_bytes, (unsigned long long)st.states);
    uint64_t t = 0;
    CHECK(sim_store_committed(s, &t) == 1 && t == 10);
    CHECK(sim_store_restore(s, 10, &err) == 0);
    CHECK(sim_store_restore(s, 9, &err) < 0 && strstr(err.msg, "at commit 10, not 9"));
    sim_store_free(s);
    CHECK_MSG(dir_empty(dir), "a memory-only store made files");
    CHECK(chdir(cwd) == 0);
    free(buf);
    rm_dir(dir);
}

static int exists(const char *dir, const char *name)
{
    char path[200];
    struct stat fs;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &fs) == 0;
}

/* NEW in a directory holding another session's state.mdb and state.spill removes both and, with
 * states put and read but no commit and no spill, makes none (nor at close); the database comes
 * with the first commit, or with the first spill (and the spill file with it). */
static void test_lazy_files(void)
{
    char dir[64], path[100];
    tmp_dir(dir);
    make_store(dir, "lazy");
    snprintf(path, sizeof path, "%s/state.spill", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f && fputs("stale", f) >= 0 && fclose(f) == 0);
    CHECK(exists(dir, "state.mdb") && exists(dir, "state.spill"));
    sim_store *s;
    sim_err err;
    sim_store_opts big = {SIZE_MAX, 0, 0}, tiny = {64 << 10, 0, 0};
    unsigned char *buf = malloc(MAXLEN);
    sim_store_stats st;
    CHECK(sim_store_open(&s, dir, "lazy", &big, SIM_STORE_NEW, &err) == 0);
    CHECK_MSG(dir_empty(dir), "NEW left older files or made new ones");
    CHECK(holds(s, 5, 0, buf)); /* the older store's client 5 is gone */
    for (uint32_t id = 0; id < 100; id++)
        put_ver(s, id, 1, buf);
    CHECK(holds(s, 5, 1, buf));
    CHECK(sim_store_stats_get(s, &st, &err) == 0);
    CHECK(st.disk_bytes == 0 && st.states == 0);
    CHECK_MSG(dir_empty(dir), "puts without a commit made files");
    sim_store_free(s);
    CHECK_MSG(dir_empty(dir), "closing made files");

    CHECK(sim_store_open(&s, dir, "lazy", &big, SIM_STORE_NEW, &err) == 0);
    put_ver(s, 7, 1, buf);
    CHECK(sim_store_commit(s, 1, &err) == 0);
    CHECK(exists(dir, "state.mdb") && !exists(dir, "state.spill"));
    CHECK(sim_store_stats_get(s, &st, &err) == 0);
    CHECK(st.disk_bytes > 0 && st.states == 1);
    sim_store_free(s);

    CHECK(sim_store_open(&s, dir, "lazy", &tiny, SIM_STORE_NEW, &err) == 0);
    CHECK(!exists(dir, "state.mdb"));
    uint32_t id = 0;
    for (; id < 1000 && !exists(dir, "state.spill"); id++)
        put_ver(s, id, 2, buf);
    CHECK_MSG(id < 1000 && exists(dir, "state.mdb"), "a spill without a database (%u puts)", id);
    CHECK(sim_store_stats_get(s, &st, &err) == 0);
    CHECK(st.spilled > 0 && st.states == 0);
    sim_store_free(s);
    uint64_t tag = 9;
    CHECK(sim_store_open(&s, dir, "lazy", &tiny, SIM_STORE_RESUME, &err) == 0);
    CHECK(s && sim_store_committed(s, &tag) == 0 && tag == 0);
    sim_store_free(s);
    free(buf);
    rm_dir(dir);
}

/* The states of commit 1 (A) and commit 2 (B) of clients 0..699. */
static uint32_t ver_a(uint32_t id)
{
    return id < 600 && id % 3 ? 1 : 0;
}

static uint32_t ver_b(uint32_t id)
{
    if (id < 20) return 3;
    if (id < 200) return 2;
    if (id < 300) return 0;
    return id < 600 ? ver_a(id) : 2;
}

/* A new store in dir: commit 1 holds A; then through a 64 KiB cache, 0..199 get version 2 (some
 * new), 200..299 are dropped, 600..699 are new, and 0..19 get version 3 after being spilled at
 * version 2 (so the commit writes them from the spill, then from the cache); commit 2 holds B.
 * A crash (in a child) ends the session right after commit 2, else it closes. */
static void two_commits(const char *dir, unsigned char *buf, int crash)
{
    sim_store *s;
    sim_err err;
    sim_store_opts o = {64 << 10, 0, 0};
    sim_store_stats st;
    if (crash) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid) {
            int status = 0;
            waitpid(pid, &status, 0);
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            return;
        }
        check_passed = check_failed = 0;
    }
    CHECK(sim_store_open(&s, dir, "undo", &o, SIM_STORE_NEW, &err) == 0);
    for (uint32_t id = 0; id < 600; id++)
        if (ver_a(id)) put_ver(s, id, 1, buf);
    CHECK(sim_store_commit(s, 1, &err) == 0);
    for (uint32_t id = 0; id < 200; id++)
        put_ver(s, id, 2, buf);
    for (uint32_t id = 200; id < 300; id++)
        sim_store_drop(s, id, &err);
    for (uint32_t id = 600; id < 700; id++)
        put_ver(s, id, 2, buf);
    CHECK(sim_store_stats_get(s, &st, &err) == 0);
    CHECK_MSG(st.spilled > 200, "%zu spilled", st.spilled);
    for (uint32_t id = 0; id < 20; id++)
        put_ver(s, id, 3, buf);
    CHECK(sim_store_commit(s, 2, &err) == 0);
    if (crash) {
        fflush(stdout);
        _exit(check_failed ? 1 : 0);
    }
    sim_store_free(s);
}

/* dir's store opened to resume (NULL, a failed check, when it would not open). */
static sim_store *resume(const char *dir)
{
    sim_store *s;
    sim_err err;
    sim_store_opts o = {64 << 10, 0, 0};
    int rc = sim_store_open(&s, dir, "undo", &o, SIM_STORE_RESUME, &err);
    CHECK_MSG(rc == 0, "resume: %s", err.msg);
    return s;
}

/* s holds A (b 0) or B (b 1) for every client, committed as tag, and counts them. */
static void check_states(sim_store *s, int b, uint64_t tag, unsigned char *buf)
{
    long bad = 0, n = 0;
    uint64_t t = 0;
    sim_store_stats st;
    sim_err err;
    for (uint32_t id = 0; id < 700; id++) {
        uint32_t v = b ? ver_b(id) : ver_a(id);
        bad += !holds(s, id, v, buf);
        n += v != 0;
    }
    CHECK_MSG(bad == 0, "%ld of 700 clients differ from %s", bad, b ? "B" : "A");
    CHECK(sim_store_committed(s, &t) == 1);
    CHECK_EQ_I64(t, tag);
    CHECK(sim_store_stats_get(s, &st, &err) == 0);
    CHECK_EQ_I64(st.states, n);
}

/* restore(tag) is refused naming the file and the tags. */
static void restore_refused(sim_store *s, const char *dir, uint64_t tag, const char *why)
{
    sim_err err;
    char msg[1024], path[100];
    snprintf(path, sizeof path, "%s/state.mdb", dir);
    CHECK(sim_store_restore(s, tag, &err) < 0);
    sim_err_format(&err, msg, sizeof msg);
    printf("refused as expected: %s\n", msg);
    CHECK_MSG(strstr(msg, path) && strstr(msg, why), "'%s' should name %s and say '%s'", msg, path,
              why);
}

/* Going back one commit: after commits 1 (A) and 2 (B), restore(1) reads exactly A, once (its
 * undo is gone after), also after a crash right after commit 2; restore(2) reads B and refuses
 * 3 and 0; a commit 3 of one change goes back to B exactly (its undo holds that change only). */
static void test_restore(void)
{
    unsigned char *buf = malloc(MAXLEN);
    for (int crash = 0; crash < 2; crash++) {
        char dir[64];
        tmp_dir(dir);
        two_commits(dir, buf, crash);
        sim_store *s = resume(dir);
        if (!s) continue;
        sim_err err;
        CHECK_MSG(sim_store_restore(s, 1, &err) == 0, "restore(1): %s", err.msg);
        check_states(s, 0, 1, buf);
        sim_store_free(s);
        if (!(s = resume(dir))) continue;
        restore_refused(s, dir, 2, "at commit 1 and cannot go back to commit 2");
        CHECK(sim_store_restore(s, 1, &err) == 0);
        check_states(s, 0, 1, buf);
        sim_store_free(s);
        rm_dir(dir);
    }
    char dir[64];
    tmp_dir(dir);
    two_commits(dir, buf, 0);
    sim_store *s = resume(dir);
    if (s) {
        sim_err err;
        restore_refused(s, dir, 3, "at commit 2 and can go back only to commit 1, not to commit 3");
        restore_refused(s, dir, 0, "at commit 2 and can go back only to commit 1, not to commit 0");
        CHECK(sim_store_restore(s, 2, &err) == 0);
        check_states(s, 1, 2, buf);
        put_ver(s, 650, 4, buf);
        CHECK(sim_store_commit(s, 3, &err) == 0);
        sim_store_free(s);
    }
    if ((s = resume(dir))) {
        sim_err err;
        CHECK_MSG(sim_store_restore(s, 2, &err) == 0, "restore(2): %s", err.msg);
        check_states(s, 1, 2, buf);
        sim_store_free(s);
    }
    rm_dir(dir);
    free(buf);
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
    test_memory_only();
    test_lazy_files();
    test_restore();
    return CHECK_DONE();
}
