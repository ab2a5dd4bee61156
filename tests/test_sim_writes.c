/* tests/test_sim_writes.c -- nothing written is lost and a failed write is never a success
 * (issue 37): the fedsim binary ($FEDSIM_BIN) runs with RLIMIT_FSIZE set and SIGXFSZ ignored, so
 * a write past the limit fails with EFBIG as one on a full disk fails with ENOSPC. The limit is
 * chosen from an uninterrupted run's file sizes so that one file in turn is the only one that
 * outgrows it: metrics.tsv, clients.tsv, events.msgpack, timeline.tsv, the --trace file, the
 * checkpoint, the clients' states (state.mdb) and scenario.yaml. The run must exit 2 with a message
 * naming that file and the OS reason, keep its last checkpoint, and `fedsim resume` with room must
 * then finish it with outputs byte-identical to the uninterrupted run's. */
#include "tests/check.h"
#include "tests/files.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static const char *bin;

/* Run bin with args (NULL-terminated) in a child whose files may not grow past limit bytes (0:
 * no limit), stdout to /dev/null and stderr to dir/err.txt; stop: FEDSIM_TEST_STOP_AFTER_CHECKPOINT
 * or NULL. Returns the exit status (-1 for a signal). */
static int run(long limit, const char *stop, const char *const *args)
{
    char errp[128];
    snprintf(errp, sizeof errp, "%s/err.txt", dir);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen(errp, "w", stderr)) _exit(120);
        if (stop)
            setenv("FEDSIM_TEST_STOP_AFTER_CHECKPOINT", stop, 1);
        else
            unsetenv("FEDSIM_TEST_STOP_AFTER_CHECKPOINT");
        signal(SIGXFSZ, SIG_IGN); /* a write past the limit then fails with EFBIG */
        struct rlimit rl = {(rlim_t)limit, (rlim_t)limit};
        if (limit > 0 && setrlimit(RLIMIT_FSIZE, &rl)) _exit(121);
        char *argv[16] = {strdup(bin)}; /* exec replaces the copies */
        for (int i = 0; args[i] && i < 14; i++)
            argv[i + 1] = strdup(args[i]);
        execv(bin, argv);
        _exit(122);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The stderr of the last run (caller frees). */
static char *last_err(void)
{
    char errp[128];
    size_t n;
    snprintf(errp, sizeof errp, "%s/err.txt", dir);
    char *s = test_slurp(errp, &n);
    return s ? s : calloc(1, 1);
}

static long size_of(const char *path)
{
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

/* A small federation: the knobs set which output grows fastest. */
static void scenario(const char *path, const char *algo, int rounds, int clients, int per_round,
                     const char *latency, const char *eval)
{
    FILE *f = fopen(path, "w");
    fprintf(f,
            "name: w\nseed: 3\nrounds: %d\ndataset: {name: synth-pews-3.2k}\n"
            "partition: {scheme: iid, clients: %d, local_test: 0.2}\nmodel: mlp:5-4\n"
            "algorithm: {name: %s, local_steps: 1, batch_size: 16}\n"
            "federation: {per_round: %d}\ndevices:\n  profiles:\n"
            "    d: {compute: 1 GFLOPS, up: 4 Mbps, down: 8 Mbps, latency: %s, memory: 1 GiB}\n"
            "  mix: [{profile: d, share: 1}]\neval: %s\n",
            rounds, clients, algo, per_round, latency, eval);
    fclose(f);
}

static const char *const outs[4] = {"metrics.tsv", "clients.tsv", "events.msgpack", "timeline.tsv"};

/* One case: the file `what` (an output, "checkpoint" for the checkpoint itself, or "state.mdb",
 * the clients' states, whose size is the stopped run's) is the only
 * one to outgrow the limit in a run resumed from the checkpoint of round 1, checkpointing every
 * round when every (else never). */
static void fill_up(const char *name, const char *yaml, const char *what, int every)
{
    char ref[160], run_dir[160], path[300], ckpt[300];
    snprintf(ref, sizeof ref, "%s/%s-ref", dir, name);
    snprintf(run_dir, sizeof run_dir, "%s/%s", dir, name);
    const char *q[] = {"-q", "--plots", "none", "--workers", "0"};
    const char *a_ref[] = {"run", yaml, "--out", ref, q[0], q[1], q[2], q[3], q[4], NULL};
    CHECK_MSG(run(0, NULL, a_ref) == 0, "%s: the uninterrupted run", name);
    const char *a_stop[] = {"run", yaml, "--out", run_dir, q[0], q[1], q[2], q[3], q[4], NULL};
    CHECK_MSG(run(0, "1", a_stop) == 130, "%s: the run stopped after round 1", name);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.msgpack", run_dir);
    long ckpt_size = size_of(ckpt), biggest = 0, size = ckpt_size;
    /* the limit: halfway from the biggest of the others to the file that must fail */
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", ref, outs[i]);
        if (!strcmp(outs[i], what))
            size = size_of(path);
        else if (size_of(path) > biggest)
            biggest = size_of(path);
    }
    if (every && strcmp(what, "checkpoint") && ckpt_size > biggest) biggest = ckpt_size;
    if (!strcmp(what, "state.mdb")) {
        snprintf(path, sizeof path, "%s/state.mdb", run_dir);
        size = size_of(path);
    }
    CHECK_MSG(ckpt_size > 0 && size > biggest + 200,
              "%s: %s (%ld bytes) must outgrow the others (%ld) for this case to test it", name,
              what, size, biggest);
    long limit = (size + biggest) / 2;
    const char *a_full[] = {"resume",
                            run_dir,
                            "--checkpoint-every",
                            every ? "1" : "0",
                            q[0],
                            "--plots",
                            "none",
                            "--workers",
                            "0",
                            "--checkpoint-minutes",
                            "0",
                            NULL};
    int rc = run(limit, NULL, a_full);
    char *msg = last_err();
    snprintf(path, sizeof path, "%s/%s%s", run_dir, what,
             strcmp(what, "checkpoint") ? "" : ".msgpack.tmp");
    CHECK_MSG(rc == 2, "%s: a run that cannot write %s exits 2, not %d", name, what, rc);
    CHECK_MSG(strstr(msg, path) && strstr(msg, strerror(EFBIG)),
              "%s: the message names %s and the OS reason: %s", name, path, msg);
    CHECK_MSG(size_of(ckpt) > 0, "%s: the last checkpoint is kept", name);
    free(msg);
    /* with room, the run finishes as if nothing had happened */
    const char *a_room[] = {"resume", run_dir, q[0], q[1], q[2], q[3], q[4], NULL};
    CHECK_MSG(run(0, NULL, a_room) == 0, "%s: resumed with room", name);
    char a[64], b[64];
    snprintf(a, sizeof a, "%s-ref", name);
    snprintf(b, sizeof b, "%s", name);
    CHECK_MSG(test_same_outputs(dir, a, b, 1), "%s: outputs as an uninterrupted run's", name);
    CHECK_MSG(size_of(ckpt) < 0, "%s: the finished run removed its checkpoint", name);
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-writes-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char met[128], cl[128], ev[128], tl[128], st[128];
    snprintf(met, sizeof met, "%s/met.yaml", dir);
    snprintf(cl, sizeof cl, "%s/cl.yaml", dir);
    snprintf(ev, sizeof ev, "%s/ev.yaml", dir);
    snprintf(tl, sizeof tl, "%s/tl.yaml", dir);
    /* sixteen shifted accuracies per evaluation, one job a round: metrics.tsv grows fastest */
    scenario(met, "fedavg", 10, 2, 1, "10 ms",
             "{every: 1, personalized: true, shift: [0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, "
             "0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85]}");
    /* a hundred clients, one job a round: clients.tsv, written at the end, is the biggest file;
     * their checkpoint is bigger still */
    scenario(cl, "fedavg", 3, 100, 1, "10 ms", "{every: 1}");
    /* four events a job against three timeline rows */
    scenario(ev, "fedavg", 30, 8, 4, "10 ms", "{every: 1}");
    /* 10^6 s latencies: timeline rows with long times, and a round's events spread over 8 jobs */
    scenario(tl, "fedavg", 12, 8, 8, "1000000 s", "{every: 1}");
    /* Ditto's personal models: state.mdb (LMDB's pages) outgrows the rest */
    snprintf(st, sizeof st, "%s/st.yaml", dir);
    scenario(st, "ditto", 4, 8, 4, "10 ms", "{every: 1}");
    fill_up("met", met, "metrics.tsv", 1);
    fill_up("cl", cl, "clients.tsv", 0);
    fill_up("ev", ev, "events.msgpack", 1);
    fill_up("tl", tl, "timeline.tsv", 1);
    fill_up("ck", cl, "checkpoint", 1);
    fill_up("st", st, "state.mdb", 1);

    /* the text trace of a fresh run: it outgrows everything else; the run stops at once */
    char trace[160], tr[160], path[300];
    snprintf(trace, sizeof trace, "%s/ev.trace", dir);
    snprintf(tr, sizeof tr, "%s/tr", dir);
    const char *a_tr[] = {"run",  ev,          "--out", tr,        "-q",  "--plots",
                          "none", "--workers", "0",     "--trace", trace, "--checkpoint-every",
                          "1",    NULL};
    int rc = run(8000, NULL, a_tr);
    char *msg = last_err();
    CHECK_MSG(rc == 2 && strstr(msg, trace) && strstr(msg, strerror(EFBIG)),
              "the trace file: exit %d, %s", rc, msg);
    free(msg);
    snprintf(path, sizeof path, "%s/checkpoint.msgpack", tr);
    CHECK_MSG(size_of(path) > 0, "the trace file: the last checkpoint is kept");
    const char *a_room[] = {"resume", tr, "-q", "--plots", "none", "--workers", "0", NULL};
    CHECK(run(0, NULL, a_room) == 0);
    CHECK(test_same_outputs(dir, "ev-ref", "tr", 1));

    /* scenario.yaml, the first file a run writes: "cannot write" with the file and the reason */
    char yml[160];
    snprintf(yml, sizeof yml, "%s/y", dir);
    const char *a_y[] = {"run", ev, "--out", yml, "-q", "--plots", "none", "--workers", "0", NULL};
    rc = run(300, NULL, a_y);
    msg = last_err();
    snprintf(path, sizeof path, "%s/scenario.yaml", yml);
    CHECK_MSG(rc == 2 && strstr(msg, path) && strstr(msg, strerror(EFBIG)),
              "scenario.yaml: exit %d, %s", rc, msg);
    free(msg);

    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!check_failed && system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
