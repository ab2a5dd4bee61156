/* tests/test_sim_checkpoint.c -- checkpoints and `fedsim resume` end to end through the fedsim
 * binary ($FEDSIM_BIN), on the tiny scenario:
 *   - a run stopped right after its checkpoint at aggregation K (test hook
 *     FEDSIM_TEST_STOP_AFTER_CHECKPOINT=K, exit 130) and resumed ends with metrics.tsv,
 *     clients.tsv, events.msgpack and timeline.tsv byte-identical to an uninterrupted run: sync,
 *     over-commit (late jobs still in flight across the checkpoint) and async (jobs and buffered
 *     updates in flight); resuming with --workers 0 and 2 gives the same outputs;
 *   - a real SIGINT to a running `fedsim run` (at whatever event it lands on) exits 130, leaves a
 *     checkpoint, and resume completes to the same bytes;
 *   - a corrupted (one flipped byte), truncated or foreign (scenario.yaml changed) checkpoint is
 *     rejected with exit status 2 and a message naming the file, and no output is touched;
 *   - a finished run leaves no checkpoint; `run` into a folder holding one is refused;
 *   - a sweep stopped in a point and run again resumes it and runs the rest, byte-identical to an
 *     uninterrupted sweep; run again after that it keeps every finished point (outputs not
 *     rewritten), unless the folder's scenario.yaml is another scenario's;
 *   - scenarios/papers.sh keeps finished runs' scenario, metrics and clients files in
 *     scenarios/results/ (not unfinished runs) and takes them back where runs/ lacks them: the
 *     same report, and a sweep keeps those points;
 *   - the same holds with a network (flows in flight, some lost mid-transfer), and for SpaFL,
 *     FjORD, FedPeWS, pFedGate, DM-PFL and pFedHN, whose server and client states are their own;
 *   - a personalized run's checkpoint holds the last evaluation's mean personalized accuracy (a
 *     resumed run's progress line shows it until the next evaluation, not NaN).
 */
#include "tests/check.h"
#include "tests/files.h"

#include "sim/checkpoint.h"

#include <math.h>
#include <msgpack.h>
#include <stdio.h>

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[64];
static const char *bin;
static const char *const variants[][2] = {
        {"sync", ""},
        {"overcommit", "--set 'federation={per_round: 2, over_commit: 2.0}'"},
        {"async", "--set 'federation={mode: async, concurrency: 4, buffer: 2, staleness: {kind: "
                  "polynomial, a: 0.5}}' --set rounds=8"},
        /* clients come and go: their availability processes (and RNG streams) cross the
         * checkpoint, and jobs are lost mid-way */
        {"churn", "--set 'devices.profiles.slow.availability={kind: markov, mean_on: 3 s, "
                  "mean_off: 2 s}' --set 'devices.profiles.fast.availability={kind: markov, "
                  "mean_on: 3 s, mean_off: 2 s}' --set rounds=8"},
        /* batteries: levels, charging processes and a job that dies cross the checkpoint */
        {"energy", "--set devices.energy=true --set 'devices.profiles.slow.power={train: 2 W, up: "
                   "1.5 W, down: 1 W, idle: 0.25 W}' --set 'devices.profiles.slow.battery={"
                   "capacity: 8 J, floor: 25%, initial: {uniform: [40%, 100%]}, charging: {rate: "
                   "1 W, when: online}}' --set 'devices.profiles.slow.availability={kind: markov, "
                   "mean_on: 20 s, mean_off: 2 s}' --set 'devices.profiles.fast.power={train: 5 W, "
                   "up: 2 W, down: 0.5 W}' --set rounds=8"},
        /* algorithms with server state and private client state of their own */
        {"spafl", "--set algorithm.name=spafl"},
        {"fjord", "--set algorithm.name=fjord"},
        /* the round whose windows FedRolex evaluates */
        {"fedrolex", "--set algorithm.name=fedrolex --set algorithm.width.p=0.5"},
        /* the warmup (scores in private state, masks.tsv rows in server state) crosses it */
        {"fedpews", "--set algorithm.name=fedpews --set algorithm.pews.warmup=0.6"},
        /* the gates (private, with their running statistics and the model's kept momentum)
         * and per-parameter sums */
        {"pfedgate", "--set algorithm.name=pfedgate --set algorithm.pfedgate.s=0.5 "
                     "--set algorithm.momentum=0.9 --set algorithm.persistent_momentum=true"},
        /* a private model and its kept momentum */
        {"local", "--set algorithm.name=local --set algorithm.momentum=0.9 "
                  "--set algorithm.persistent_momentum=true"},
        /* masks and weights in private state, per-client copies the server tracks, all phases */
        {"dmpfl", "--set algorithm.name=dmpfl --set algorithm.dmpfl.iterations=1"},
        /* a hyper-network on the server, whole models in private state */
        {"pfedhn", "--set algorithm.name=pfedhn"},
        /* factors and a hyper-network on the server; async: replies in flight cross the
         * checkpoint */
        {"pa3dfl", "--set algorithm.name=pa3dfl"},
        {"pa3dfl-async", "--set algorithm.name=pa3dfl --set 'federation={mode: async, "
                         "concurrency: 4, buffer: 2, staleness: {kind: polynomial, a: 0.5}}' "
                         "--set rounds=8"},
        /* shared links: flows with their bits left and rates, and their end events, cross the
         * checkpoint (late over-committed uploads still on the server's link) */
        {"network", "--set 'network={server: {up: 2 Mbps, down: 8 Mbps}, groups: [{name: cell, "
                    "down: 4 Mbps, up: 1 Mbps, devices: [fast], share: 0.75}]}' "
                    "--set 'federation={per_round: 2, over_commit: 2.0}'"},
        /* and async jobs lost mid-transfer, whose flows are freed */
        {"network-churn", "--set 'network={server: {up: 2 Mbps, down: 8 Mbps}}' "
                          "--set 'federation={mode: async, concurrency: 4, buffer: 2}' "
                          "--set 'devices.profiles.slow.availability={kind: markov, mean_on: "
                          "3 s, mean_off: 2 s}' --set 'devices.profiles.fast.availability={kind: "
                          "markov, mean_on: 3 s, mean_off: 2 s}' --set rounds=8"},
};

static int status_of(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Run tiny.yaml into dir/name (env: assignments before the command); stderr in dir/name.err. */
static int run(const char *env, const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s %s run scenarios/tiny.yaml -q --plots none --out %s/%s %s >/dev/null 2>%s/%s.err",
             env, bin, dir, name, args, dir, name);
    return status_of(system(cmd));
}

/* Sweep tiny.yaml over two learning rates into dir/name; stderr in dir/name.TAG. */
static int sweep(const char *env, const char *name, const char *tag)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s %s sweep scenarios/tiny.yaml --vary algorithm.lr=0.05,0.1 --plots none "
             "--workers 0 --checkpoint-every 2 --out %s/%s >/dev/null 2>%s/%s.%s",
             env, bin, dir, name, dir, name, tag);
    return status_of(system(cmd));
}

/* Sweep into dir/sw again (stderr in dir/sw.TAG): exit 0 with both a and b in its stderr. */
static int sweep_says(const char *tag, const char *a, const char *b)
{
    if (sweep("", "sw", tag) != 0) return 0;
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/sw.%s", dir, tag);
    char *msg = test_slurp(p, &len);
    int ok = msg && strstr(msg, a) && strstr(msg, b);
    if (!ok) printf("sweep stderr: %s\n", msg ? msg : "(none)");
    free(msg);
    return ok;
}

static int resume(const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s resume %s/%s -q --plots none %s >/dev/null 2>%s/%s.rerr", bin,
             dir, name, args, dir, name);
    return status_of(system(cmd));
}

/* Run a shell command with every "@" in it replaced by the test folder. */
static int sh(const char *tmpl)
{
    char cmd[2048];
    size_t n = 0;
    for (const char *t = tmpl; *t && n + sizeof dir < sizeof cmd; t++)
        if (*t == '@')
            n += (size_t)snprintf(cmd + n, sizeof cmd - n, "%s", dir);
        else
            cmd[n++] = *t;
    cmd[n] = 0;
    return status_of(system(cmd));
}

static int exists(const char *name, const char *file)
{
    char p[200];
    snprintf(p, sizeof p, "%s/%s/%s", dir, name, file);
    return access(p, F_OK) == 0;
}

static char *text_of(const char *name, const char *ext)
{
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s.%s", dir, name, ext);
    return test_slurp(p, &len);
}

/* Lines in dir/name/metrics.tsv (0 when absent). */
static int metrics_lines(const char *name)
{
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s/metrics.tsv", dir, name);
    char *t = test_slurp(p, &len);
    int n = 0;
    for (size_t i = 0; t && i < len; i++)
        n += t[i] == '\n';
    free(t);
    return n;
}

/* Column col (0-based) of the last line of dir/name/metrics.tsv; NaN when absent. */
static double last_metric(const char *name, int col)
{
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s/metrics.tsv", dir, name);
    char *t = test_slurp(p, &len);
    double v = NAN;
    if (t && len > 1) {
        size_t i = len - 1;
        while (i > 0 && t[i - 1] != '\n')
            i--;
        const char *f = t + i;
        for (int c = 0; c < col && f; c++)
            f = strchr(f, '\t') ? strchr(f, '\t') + 1 : NULL;
        if (f) v = strtod(f, NULL);
    }
    free(t);
    return v;
}

/* dir/name's checkpoint payload, unpacked into u (*buf holds its bytes: the caller frees it and
 * destroys u); its path into p. 0, or -1 when it cannot be read. */
static int payload_open(const char *name, char *p, size_t n, void **buf, msgpack_unpacked *u)
{
    snprintf(p, n, "%s/%s/checkpoint.msgpack", dir, name);
    size_t len;
    sim_err err;
    msgpack_unpacked_init(u);
    *buf = NULL;
    if (sim_checkpoint_read(p, buf, &len, &err) != SIM_OK) return -1;
    return msgpack_unpack_next(u, *buf, len, NULL) == MSGPACK_UNPACK_SUCCESS ? 0 : -1;
}

/* o as the checkpoint at p, framed (a valid trailer): only the engine's reader can refuse it */
static int payload_save(const char *p, const msgpack_object *o)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, *o);
    sim_err err;
    int rc = sim_checkpoint_write(p, sb.data, sb.size, &err);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* The mean personalized accuracy in dir/name's checkpoint (its totals, the 9th field, end with
 * it: sim/engine_ckpt.c); NaN when the checkpoint or the field is missing. */
static double ckpt_acc_pers(const char *name)
{
    char p[200];
    void *buf;
    msgpack_unpacked u;
    double v = NAN;
    if (!payload_open(name, p, sizeof p, &buf, &u) && u.data.type == MSGPACK_OBJECT_ARRAY &&
        u.data.via.array.size > 8) {
        const msgpack_object *t = &u.data.via.array.ptr[8];
        if (t->type == MSGPACK_OBJECT_ARRAY && t->via.array.size == 11 &&
            t->via.array.ptr[10].type == MSGPACK_OBJECT_FLOAT64)
            v = t->via.array.ptr[10].via.f64;
    }
    msgpack_unpacked_destroy(&u);
    free(buf);
    return v;
}

/* Rewrite dir/name's checkpoint as format `version` (its fields as they are). */
static int rewrite_version(const char *name, int version)
{
    char p[200];
    void *buf;
    msgpack_unpacked u;
    int rc = -1;
    if (!payload_open(name, p, sizeof p, &buf, &u) && u.data.type == MSGPACK_OBJECT_ARRAY &&
        u.data.via.array.size >= 2 &&
        u.data.via.array.ptr[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        u.data.via.array.ptr[1].via.u64 = (uint64_t)version;
        rc = payload_save(p, &u.data);
    }
    msgpack_unpacked_destroy(&u);
    free(buf);
    return rc;
}

/* Rewrite dir/name's checkpoint payload with the element at path (indices from the top-level
 * array down, depth of them) set to the integer v, or, v INT64_MIN, with the array at path one
 * element short, or, v INT64_MAX, unchanged. */
static int mutate(const char *name, const int *path, int depth, int64_t v)
{
    char p[200];
    void *buf;
    msgpack_unpacked u;
    msgpack_object *o = payload_open(name, p, sizeof p, &buf, &u) ? NULL : &u.data;
    for (int i = 0; i < depth && o; i++)
        o = o->type == MSGPACK_OBJECT_ARRAY && (uint32_t)path[i] < o->via.array.size
                    ? &o->via.array.ptr[path[i]]
                    : NULL;
    if (o && v == INT64_MAX) {
        /* packed again as it is */
    } else if (o && v == INT64_MIN && o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size) {
        o->via.array.size--;
    } else if (o && v != INT64_MIN) {
        o->type = v < 0 ? MSGPACK_OBJECT_NEGATIVE_INTEGER : MSGPACK_OBJECT_POSITIVE_INTEGER;
        if (v < 0)
            o->via.i64 = v;
        else
            o->via.u64 = (uint64_t)v;
    } else {
        o = NULL;
    }
    int rc = o ? payload_save(p, &u.data) : -1;
    msgpack_unpacked_destroy(&u);
    free(buf);
    return rc;
}

/* The checkpoint of dir/name is rejected (exit 2, message naming it) and no output changes. */
static void check_rejected(const char *name, const char *why, const char *expect)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cp -r @/%s @/%s.before", name, name);
    CHECK_MSG(sh(cmd) == 0, "copy %s", name);
    CHECK_MSG(resume(name, "--workers 0") == 2, "%s: resume exits 2", why);
    char *msg = text_of(name, "rerr");
    CHECK_MSG(msg && strstr(msg, "checkpoint.msgpack") && strstr(msg, expect),
              "%s: the message names the file and says '%s': %s", why, expect, msg ? msg : "");
    CHECK_MSG(msg && !strstr(msg, "Sanitizer") && !strstr(msg, "runtime error"),
              "%s: no sanitizer report", why);
    free(msg);
    char before[128];
    snprintf(before, sizeof before, "%s.before", name);
    CHECK_MSG(test_same_outputs(dir, name, before, 1), "%s: outputs untouched", why);
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-ckpt-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char args[1024], name[64], full[64];

    /* (a) stop after the checkpoint at aggregation 2 (every 2), resume, compare; (d) resume with
     * 0 and with 2 workers */
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const char *vn = variants[v][0], *set = variants[v][1];
        snprintf(full, sizeof full, "%s-full", vn);
        snprintf(args, sizeof args, "--workers 0 %s", set);
        CHECK_MSG(run("", full, args) == 0, "%s: uninterrupted run", vn);
        CHECK_MSG(!exists(full, "checkpoint.msgpack"), "%s: a finished run leaves no checkpoint",
                  vn);
        for (int w = 0; w <= 2; w += 2) {
            snprintf(name, sizeof name, "%s-w%d", vn, w);
            snprintf(args, sizeof args, "--workers 0 --checkpoint-every 2 %s", set);
            CHECK_MSG(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", name, args) == 130,
                      "%s: the hook stops the run with status 130", vn);
            CHECK_MSG(exists(name, "checkpoint.msgpack"), "%s: the stopped run left a checkpoint",
                      vn);
            CHECK_MSG(!test_same_outputs(dir, full, name, 0),
                      "%s: the stopped run's outputs are partial", vn);
            snprintf(args, sizeof args, "--workers %d", w);
            CHECK_MSG(resume(name, args) == 0, "%s: resume with --workers %d", vn, w);
            CHECK_MSG(test_same_outputs(dir, full, name, 1),
                      "%s: resumed (--workers %d) = uninterrupted", vn, w);
            char *rerr = text_of(name, "rerr");
            CHECK_MSG(rerr && !strstr(rerr, "another build"), "%s: the same build: no warning: %s",
                      vn, rerr ? rerr : "");
            free(rerr);
            CHECK_MSG(!exists(name, "checkpoint.msgpack"), "%s: resumed to the end: no checkpoint",
                      vn);
        }
    }

    /* (h) a checkpoint carries its writer's build: resumed by another (this program with a byte
     * appended: another file, the same code), the run says so and goes on to the same end */
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "other", "--workers 0 --checkpoint-every 2") ==
          130);
    char cmd0[2048];
    snprintf(cmd0, sizeof cmd0,
             "cp %s @/fedsim-other && printf x >> @/fedsim-other && @/fedsim-other resume "
             "@/other -q --plots none --workers 0 >/dev/null 2>@/other.rerr",
             bin);
    CHECK_MSG(sh(cmd0) == 0, "resume by another build: exit 0");
    char *other = text_of("other", "rerr");
    CHECK_MSG(other && strstr(other, "checkpoint.msgpack was written by another build (exe ") &&
                      strstr(other, "; this one: exe "),
              "resume by another build: a warning naming both builds: %s", other ? other : "");
    free(other);
    CHECK_MSG(test_same_outputs(dir, "sync-full", "other", 1),
              "resume by another build of the same code = uninterrupted");
    /* format 6 and older carried the clients' private states in the checkpoint: refused */
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "v6", "--workers 0 --checkpoint-every 2") ==
          130);
    CHECK(rewrite_version("v6", 6) == SIM_OK);
    check_rejected("v6", "format 6", "checkpoint format version 6; this fedsim reads version 7");

    /* (b) a real SIGINT lands on a running run at some event; resume ends the same */
    const char *long_set = "--workers 2 --set rounds=100 --set 'federation={per_round: 2, "
                           "over_commit: 2.0}'";
    CHECK(run("", "long-full", long_set) == 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec %s run scenarios/tiny.yaml -q --plots none --checkpoint-every 0 --out "
             "%s/long %s >/dev/null 2>%s/long.err",
             bin, dir, long_set, dir);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* signal once a few rounds are in metrics.tsv (header lines + rounds), well before the end */
    for (int i = 0; i < 6000 && metrics_lines("long") < 2 + 5; i++) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGINT);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK_MSG(status_of(st) == 130, "SIGINT: exit status 130 (got %d)", status_of(st));
    char *msg = text_of("long", "err");
    CHECK_MSG(msg && strstr(msg, "interrupted (SIGINT)") && strstr(msg, "fedsim resume "),
              "SIGINT: says where the checkpoint is and how to resume: %s", msg ? msg : "");
    free(msg);
    CHECK(exists("long", "checkpoint.msgpack"));
    CHECK_MSG(metrics_lines("long") < 2 + 101, "SIGINT: the run stopped before its end");
    CHECK(resume("long", "--workers 2") == 0);
    CHECK_MSG(test_same_outputs(dir, "long-full", "long", 1), "SIGINT then resume = uninterrupted");

    /* (g) a personalized run's checkpoint carries its last mean personalized accuracy: pFedGate
     * on tiny.yaml evaluates every round, so the checkpoint at round 2 holds round 2's
     * acc_pers_mean (column 8 of metrics.tsv, written with 6 decimals) */
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "pers",
              "--workers 0 --checkpoint-every 2 --set algorithm.name=pfedgate") == 130);
    double want = last_metric("pers", 7), got = ckpt_acc_pers("pers");
    CHECK_MSG(want > 0 && fabs(got - want) < 1e-6,
              "checkpoint holds acc_pers %.6f (metrics.tsv %.6f)", got, want);

    /* (c) a corrupted, truncated or foreign checkpoint is never loaded */
    const char *bad[] = {"flip", "cut", "foreign"};
    for (int i = 0; i < 3; i++) {
        CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", bad[i], "--workers 0") == 130);
    }
    /* flip one byte in the middle of the payload */
    CHECK(sh("f=@/flip/checkpoint.msgpack; n=$(($(stat -c %s $f) / 2)); "
             "printf '\\377' | dd of=$f bs=1 seek=$n conv=notrunc status=none") == 0);
    check_rejected("flip", "flipped byte", "corrupted");
    CHECK(sh("f=@/cut/checkpoint.msgpack; truncate -s $(($(stat -c %s $f) - 100)) $f") == 0);
    check_rejected("cut", "truncated", "truncated");
    CHECK(sh("echo '# edited' >> @/foreign/scenario.yaml") == 0);
    check_rejected("foreign", "changed scenario", "another scenario");
    CHECK(resume("nothing-here", "") == 2);

    /* (c') a payload framed correctly but malformed inside is refused naming the part, the
     * record and the field (sim/engine_ckpt.c's tables: top-level part, record, field) */
    static const struct {
        const char *name;
        int path[4], depth;
        int64_t v;
        const char *expect;
    } muts[] = {
            {"m-busy", {13, 0, 4}, 3, 7, "malformed checkpoint (clients: client 0: busy)"},
            {"m-short", {13, 7}, 2, INT64_MIN, "(clients: client 7: the field count)"},
            {"m-flight", {7, 4}, 2, 9, "(protocol state: in_flight)"},
            {"m-kind", {12, 1, 0, 2}, 4, 99, "(event queue: event 0: kind)"},
            {"m-clients", {13}, 1, INT64_MIN, "(clients: the count)"},
            {"m-top", {0}, 0, INT64_MIN, "malformed checkpoint (field count)"},
    };
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "mut", "--workers 0") == 130);
    for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
        char cp[200];
        snprintf(cp, sizeof cp, "cp -r @/mut @/%s", muts[i].name);
        CHECK(sh(cp) == 0);
        CHECK_MSG(mutate(muts[i].name, muts[i].path, muts[i].depth, muts[i].v) == SIM_OK,
                  "%s: mutated", muts[i].name);
        check_rejected(muts[i].name, muts[i].name, muts[i].expect);
    }
    /* the same payload packed again unchanged resumes to the uninterrupted run's end: what the
     * reader refused are the mutations, not the repacking */
    CHECK(mutate("mut", NULL, 0, INT64_MAX) == SIM_OK);
    CHECK_MSG(resume("mut", "--workers 0") == 0, "repacked checkpoint resumes");
    CHECK(test_same_outputs(dir, "sync-full", "mut", 1));

    /* (c'') write, read, write: a run resumed from its checkpoint at aggregation 2 and stopped
     * at 4 writes the very bytes an uninterrupted run stopped at 4 writes (the reader restores
     * every field the writer saved, for each protocol and for server and private states) */
    static const char *const rt[] = {"sync", "async", "churn", "pa3dfl-async", "pfedgate"};
    for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++) {
        const char *set = NULL;
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++)
            if (!strcmp(variants[v][0], rt[i])) set = variants[v][1];
        char a[64], b[64], cmd2[2048];
        snprintf(a, sizeof a, "rt-%s", rt[i]);
        snprintf(b, sizeof b, "rt-%s-straight", rt[i]);
        snprintf(args, sizeof args, "--workers 0 --checkpoint-every 2 %s", set ? set : "");
        CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", a, args) == 130);
        CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=4", b, args) == 130);
        snprintf(cmd2, sizeof cmd2,
                 "FEDSIM_TEST_STOP_AFTER_CHECKPOINT=4 %s resume @/%s -q --plots none --workers 0 "
                 ">/dev/null 2>@/%s.rerr; test $? = 130 && cmp -s @/%s/checkpoint.msgpack "
                 "@/%s/checkpoint.msgpack",
                 bin, a, a, a, b);
        CHECK_MSG(sh(cmd2) == 0, "%s: checkpoint at 4 after resuming at 2 = straight to 4", rt[i]);
    }

    /* (e) `run` into a folder holding an unfinished run is refused and touches nothing */
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "held", "--workers 0") == 130);
    CHECK(sh("cp -r @/held @/held.before") == 0);
    CHECK_MSG(run("", "held", "--workers 0 --set rounds=3") == 2,
              "run over an unfinished run: exit 2");
    msg = text_of("held", "err");
    CHECK_MSG(msg && strstr(msg, "unfinished run") && strstr(msg, "fedsim resume "),
              "run over an unfinished run: says how to continue it: %s", msg ? msg : "");
    free(msg);
    CHECK_MSG(test_same_outputs(dir, "held", "held.before", 1) &&
                      sh("cmp -s @/held/scenario.yaml @/held.before/scenario.yaml && cmp -s "
                         "@/held/checkpoint.msgpack @/held.before/checkpoint.msgpack") == 0,
              "run over an unfinished run: outputs, scenario and checkpoint untouched");
    CHECK_MSG(resume("held", "--workers 0") == 0, "the refused folder still resumes");

    /* (f) a sweep stopped part-way and run again resumes the stopped point and runs the rest,
     * ending as an uninterrupted sweep; run once more it keeps every point; a point whose folder
     * holds another scenario's run is run again */
    const char *pts[] = {"algorithm.lr=0.05", "algorithm.lr=0.1"};
    CHECK(sweep("", "sw-full", "err") == 0);
    CHECK_MSG(sweep("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "sw", "err1") == 130,
              "sweep: stopped in its first point with status 130");
    CHECK_MSG(exists("sw/algorithm.lr=0.05", "checkpoint.msgpack") &&
                      !exists("sw/algorithm.lr=0.1", "metrics.tsv"),
              "sweep: the first point holds a checkpoint, the second never started");
    msg = text_of("sw", "err1");
    CHECK_MSG(msg && strstr(msg, "the same sweep command continues"), "sweep: says how to go on");
    free(msg);
    CHECK_MSG(sweep_says("err2", "1/2: algorithm.lr=0.05 (resuming)", "2/2: algorithm.lr=0.1\n"),
              "sweep run again: resumes point 1, runs point 2");
    for (int i = 0; i < 2; i++) {
        char a[96], b[96];
        snprintf(a, sizeof a, "sw-full/%s", pts[i]);
        snprintf(b, sizeof b, "sw/%s", pts[i]);
        CHECK_MSG(test_same_outputs(dir, a, b, 1),
                  "sweep stopped and run again: %s = uninterrupted", pts[i]);
    }
    CHECK_MSG(sh("cmp -s @/sw-full/summary.tsv @/sw/summary.tsv") == 0, "sweep: same summary.tsv");
    CHECK(sh("touch -d 2000-01-01 @/sw/*/metrics.tsv @/sw/*/events.msgpack") == 0);
    CHECK_MSG(sweep_says("err3", "1/2: algorithm.lr=0.05 (finished before: kept)",
                         "2/2: algorithm.lr=0.1 (finished before: kept)"),
              "sweep run a third time: keeps both points");
    CHECK_MSG(sh("test -z \"$(find @/sw -newermt 2001-01-01 \\( -name metrics.tsv -o -name "
                 "events.msgpack \\))\"") == 0,
              "sweep: kept points' outputs not rewritten");
    /* a point finished before a key was added (its scenario.yaml lacks the key, which resolves
     * to its default) is kept too; one whose scenario resolves otherwise runs again */
    CHECK(sh("for d in @/sw/*/; do sed -i '/^  persistent_momentum: false$/d' $d/scenario.yaml "
             "&& ! grep -q persistent_momentum $d/scenario.yaml || exit 1; done") == 0);
    CHECK(sh("sed -i 's/^rounds: 5$/rounds: 3/' @/sw/algorithm.lr=0.1/scenario.yaml && "
             "grep -q '^rounds: 3$' @/sw/algorithm.lr=0.1/scenario.yaml") == 0);
    CHECK_MSG(sweep_says("err4", "1/2: algorithm.lr=0.05 (finished before: kept)",
                         "2/2: algorithm.lr=0.1\n"),
              "sweep: a point from before a key was added is kept; one whose folder holds "
              "another scenario's run runs again");
    CHECK_MSG(sh("test -z \"$(find @/sw/algorithm.lr=0.05 -newermt 2001-01-01 \\( -name "
                 "metrics.tsv -o -name events.msgpack \\))\"") == 0,
              "sweep: the point from before the key was added is not rewritten");
    CHECK_MSG(test_same_outputs(dir, "sw-full/algorithm.lr=0.1", "sw/algorithm.lr=0.1", 1),
              "sweep: the point run again = uninterrupted");
    /* an unfinished point whose scenario.yaml differs from its text only as an older build's
     * would (here: keys in another order, which the comparison ignores as it does a missing
     * key) resumes from its checkpoint, which names that file's bytes, and the file is kept */
    CHECK(sh("sed '/^seed: 7$/d; s/^rounds: 5$/rounds: 5\\nseed: 7/' scenarios/tiny.yaml "
             ">@/reordered.yaml && grep -A1 '^rounds: 5$' @/reordered.yaml | grep -q '^seed: "
             "7$'") == 0);
    snprintf(cmd, sizeof cmd,
             "FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2 %s run %s/reordered.yaml -q --plots none "
             "--workers 0 --checkpoint-every 2 --set algorithm.lr=0.05 --out "
             "%s/old/algorithm.lr=0.05 >/dev/null 2>&1",
             bin, dir, dir);
    CHECK(status_of(system(cmd)) == 130);
    CHECK(sh("cp @/old/algorithm.lr=0.05/scenario.yaml @/old.yaml && ! cmp -s @/old.yaml "
             "@/sw-full/algorithm.lr=0.05/scenario.yaml") == 0);
    CHECK(sweep("", "old", "err") == 0);
    msg = text_of("old", "err");
    CHECK_MSG(msg && strstr(msg, "1/2: algorithm.lr=0.05 (resuming)"),
              "sweep: an unfinished point from an older scenario.yaml resumes: %s", msg ? msg : "");
    free(msg);
    CHECK_MSG(test_same_outputs(dir, "sw-full/algorithm.lr=0.05", "old/algorithm.lr=0.05", 1) &&
                      sh("cmp -s @/old.yaml @/old/algorithm.lr=0.05/scenario.yaml") == 0,
              "sweep: that point resumed = uninterrupted, its scenario.yaml kept");

    /* (g) scenarios/papers.sh keeps a campaign's finished runs (scenario, metrics, clients) in
     * scenarios/results/ and takes them back where runs/ lacks them; those three files are all a
     * sweep needs to keep the point. The campaign lives in a copy of the script (it works in the
     * folder above its own); its one sweep folder holds the two finished points and one that
     * never finished. */
    CHECK(sh("mkdir -p @/camp/scenarios @/camp/runs/papers/pfedgate/gate/unfinished && "
             "cp scenarios/papers.sh @/camp/scenarios/ && "
             "cp -R @/sw-full/algorithm.lr=* @/camp/runs/papers/pfedgate/gate/ && "
             "cp @/sw-full/algorithm.lr=0.1/scenario.yaml "
             "@/camp/runs/papers/pfedgate/gate/unfinished/") == 0);
    snprintf(cmd, sizeof cmd,
             "FEDSIM=$(realpath %s) sh @/camp/scenarios/papers.sh pfedgate "
             "--report > @/camp/report1 2>&1",
             bin);
    CHECK_MSG(sh(cmd) == 0, "papers.sh --report: exit 0");
    const char *kept = "@/camp/scenarios/results/pfedgate/gate";
    char line[512];
    for (int i = 0; i < 2; i++)
        for (const char *const *f =
                     (const char *const[]){"scenario.yaml", "metrics.tsv", "clients.tsv", NULL};
             *f; f++) {
            snprintf(line, sizeof line, "cmp -s @/sw-full/%s/%s %s/%s/%s", pts[i], *f, kept, pts[i],
                     *f);
            CHECK_MSG(sh(line) == 0, "papers.sh keeps %s/%s", pts[i], *f);
        }
    snprintf(line, sizeof line, "test ! -e %s/unfinished && test ! -e %s/%s/events.msgpack", kept,
             kept, pts[0]);
    CHECK_MSG(sh(line) == 0, "papers.sh keeps neither an unfinished run nor event logs");
    CHECK(sh("rm -rf @/camp/runs") == 0);
    snprintf(cmd, sizeof cmd,
             "FEDSIM=$(realpath %s) sh @/camp/scenarios/papers.sh pfedgate "
             "--report > @/camp/report2 2>&1",
             bin);
    CHECK_MSG(sh("grep -q '^papers.sh: unfinished: .*/gate/unfinished (evaluated to round 0 of "
                 "5)$' @/camp/report1") == 0,
              "papers.sh --report names the unfinished run and how far it got");
    CHECK_MSG(sh(cmd) == 0 &&
                      sh("grep -v '^papers.sh: unfinished: ' @/camp/report1 | "
                         "cmp -s - @/camp/report2") == 0 &&
                      sh("grep -q 'lr=0.1' @/camp/report2") == 0,
              "papers.sh --report on a machine without runs/: the same tables, from the kept runs");
    /* FEDSIM_RUNS: the campaign's runs where it says, not in the work tree's runs/ */
    snprintf(cmd, sizeof cmd,
             "FEDSIM_RUNS=@/elsewhere FEDSIM=$(realpath %s) sh @/camp/scenarios/papers.sh "
             "pfedgate --report > @/camp/report3 2>&1",
             bin);
    snprintf(line, sizeof line,
             "cmp -s @/sw-full/%s/metrics.tsv @/elsewhere/papers/pfedgate/gate/%s/metrics.tsv && "
             "test -s @/elsewhere/papers/pfedgate/summary.txt",
             pts[0], pts[0]);
    CHECK_MSG(sh(cmd) == 0, "papers.sh with FEDSIM_RUNS: exit 0");
    CHECK_MSG(sh(line) == 0, "papers.sh with FEDSIM_RUNS: the runs taken back there");
    CHECK_MSG(sh("sed 's|@/elsewhere/|runs/|' @/camp/report3 | tr -s ' ' > @/camp/report3n && "
                 "tr -s ' ' < @/camp/report2 | cmp -s - @/camp/report3n") == 0,
              "papers.sh with FEDSIM_RUNS: the same tables (its paths are longer)");
    snprintf(cmd, sizeof cmd,
             "%s sweep scenarios/tiny.yaml --vary algorithm.lr=0.05,0.1 --plots none --workers 0 "
             "--out @/camp/runs/papers/pfedgate/gate >/dev/null 2>@/camp/sweep.err",
             bin);
    CHECK_MSG(sh(cmd) == 0 &&
                      sh("test $(grep -c 'finished before: kept' @/camp/sweep.err) = 2") == 0,
              "a sweep into the runs taken back keeps both points");
    /* a sweep that fails is named and the campaign goes on with the next; a stop ends it. The
     * fedsim here is a stand-in that logs its calls and fails the sweeps over pFedGate's budget
     * (status FAKE): the first, and the cost-only one at the end. */
    CHECK(sh("printf '#!/bin/sh\\necho \"$*\" >> \"$CALLS\"\\ncase \"$*\" in *pfedgate.s=*) "
             "exit $FAKE;; esac\\n' > @/camp/fake && chmod +x @/camp/fake") == 0);
    CHECK_MSG(sh("cd @/camp && CALLS=@/camp/calls2 FAKE=2 FEDSIM=@/camp/fake sh "
                 "scenarios/papers.sh pfedgate 1 > /dev/null 2> @/camp/err2; test $? = 1") == 0 &&
                      sh("grep -q 'these sweeps failed (their messages are above): gate "
                         "mix-costs$' "
                         "@/camp/err2 && grep -q 'algorithm.name=fedavg-ft,local' @/camp/calls2 "
                         "&& grep -q 'pfedgate-fmnist-mix.yaml' @/camp/calls2") == 0,
              "papers.sh: a failed sweep is named, the later ones run, exit 1");
    CHECK_MSG(sh("cd @/camp && CALLS=@/camp/calls143 FAKE=143 FEDSIM=@/camp/fake sh "
                 "scenarios/papers.sh pfedgate 1 > /dev/null 2>&1; test $? = 143") == 0 &&
                      sh("test $(wc -l < @/camp/calls143) = 1") == 0,
              "papers.sh: a stopped sweep stops the campaign with its status");

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
