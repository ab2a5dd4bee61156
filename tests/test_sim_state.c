/* tests/test_sim_state.c -- the clients' private states out of core (issue 41), end to end through
 * the fedsim binary ($FEDSIM_BIN) on the tiny scenario:
 *   - every algorithm that keeps a state per client (or a server row per client: pFedHN's
 *     embeddings, FedPeWS's masks), run with --state-memory 1B (every state and row evicted as
 *     soon as it is written, read back from disk at its next job and evaluation) ends
 *     byte-identical to the same run with the default budget, and the run's report says states
 *     were read back from disk (the path under test was taken) where the default run read none;
 *   - with that budget: a run stopped after a checkpoint and resumed (with either budget), and a
 *     run whose worker is SIGKILLed, end the same;
 *   - a run killed (SIGKILL, test hook) right after the store's commit for a checkpoint and before
 *     the checkpoint file is in place resumes from the checkpoint before, whose states the store
 *     goes back to, and ends the same (Ditto; pFedHN, whose rows go back too);
 *   - a damaged, foreign or stale state.mdb in a run folder is refused at resume with exit 2 and a
 *     message naming the file; a finished run leaves no state files, and a run whose clients keep
 *     no state makes none.
 */
#include "tests/check.h"
#include "tests/files.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static const char *bin;

/* Algorithms that keep a state per client between jobs, and their settings for a short run */
static const struct {
    const char *name, *args;
} algos[] = {
        {"ditto", "--set algorithm.name=ditto"},
        {"apfl", "--set algorithm.name=apfl"},
        {"local", "--set algorithm.name=local --set algorithm.momentum=0.9 "
                  "--set algorithm.persistent_momentum=true"},
        {"fedavg-ft", "--set algorithm.name=fedavg-ft --set algorithm.momentum=0.9 "
                      "--set algorithm.persistent_momentum=true"},
        {"fedavg", "--set algorithm.name=fedavg --set algorithm.momentum=0.9 "
                   "--set algorithm.persistent_momentum=true"},
        {"spafl", "--set algorithm.name=spafl"},
        {"spafl-local", "--set algorithm.name=spafl-local"},
        {"fedpews", "--set algorithm.name=fedpews --set algorithm.pews.warmup=0.6"},
        {"pfedgate", "--set algorithm.name=pfedgate --set algorithm.pfedgate.s=0.5"},
        {"dmpfl", "--set algorithm.name=dmpfl --set algorithm.dmpfl.iterations=1"},
        {"dmpfl+", "--set algorithm.name=dmpfl+ --set algorithm.dmpfl.iterations=1"},
        {"fedper", "--set algorithm.name=fedper"},
        {"lg-fedavg", "--set algorithm.name=lg-fedavg"},
        {"fedrep", "--set algorithm.name=fedrep"},
        {"pfedhn", "--set algorithm.name=pfedhn"},
        {"pa3dfl", "--set algorithm.name=pa3dfl"},
        {"scaffold", "--set algorithm.name=scaffold"},
};
#define N_ALGOS (sizeof algos / sizeof algos[0])

#define TINY "--state-memory 1B"

static int run(const char *env, const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s %s run scenarios/tiny.yaml --plots none --out %s/%s %s >/dev/null 2>%s/%s.err",
             env, bin, dir, name, args, dir, name);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

static int resume(const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s resume %s/%s --plots none %s >/dev/null 2>%s/%s.rerr", bin, dir,
             name, args, dir, name);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* 1 when dir/name.ext holds every one of the NULL-ended strings */
static int says(const char *name, const char *ext, ...)
{
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s.%s", dir, name, ext);
    char *msg = test_slurp(p, &len);
    int ok = msg != NULL;
    va_list ap;
    va_start(ap, ext);
    for (const char *s; ok && (s = va_arg(ap, const char *));)
        ok = strstr(msg, s) != NULL;
    va_end(ap);
    if (!ok) printf("%s.%s: %s\n", name, ext, msg ? msg : "(none)");
    free(msg);
    return ok;
}

/* The states the run's report says were read back from disk, or -1 without the line */
static long reads_back(const char *name)
{
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s.err", dir, name);
    char *msg = test_slurp(p, &len);
    const char *at = msg ? strstr(msg, "read back from disk") : NULL;
    long n = -1;
    if (at) {
        while (at > msg && at[-1] == ' ')
            at--;
        while (at > msg && (at[-1] >= '0' && at[-1] <= '9'))
            at--;
        n = strtol(at, NULL, 10);
    }
    free(msg);
    return n;
}

/* 1 when name's stderr holds text */
static int err_has(const char *name, const char *text)
{
    char p[200];
    snprintf(p, sizeof p, "%s/%s.err", dir, name);
    return test_file_has(p, text);
}

/* line run in the test's folder: 0 when it succeeded */
static int sh(const char *line)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && %s", dir, line);
    return system(cmd);
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-state-XXXXXX");
    if (!mkdtemp(dir)) return 1;

    /* (a) every personalized algorithm: evicted on every write = all in memory */
    for (size_t k = 0; k < N_ALGOS; k++) {
        char ref[64], low[64], args[1024];
        snprintf(ref, sizeof ref, "%s-mem", algos[k].name);
        snprintf(low, sizeof low, "%s-1b", algos[k].name);
        snprintf(args, sizeof args, "%s --workers 0 --set rounds=3", algos[k].args);
        CHECK_MSG(run("", ref, args) == 0, "%s runs", ref);
        snprintf(args, sizeof args, "%s --workers 0 --set rounds=3 " TINY, algos[k].args);
        CHECK_MSG(run("", low, args) == 0, "%s runs", low);
        CHECK_MSG(test_same_outputs(dir, ref, low, 1), "%s: --state-memory 1B = in memory",
                  algos[k].name);
        long r0 = reads_back(ref), r1 = reads_back(low);
        CHECK_MSG(r0 == 0 && r1 > 0, "%s: %ld states read back from disk in memory, %ld with 1B",
                  algos[k].name, r0, r1);
    }

    /* evaluations in batches of one client's state, spread over two processes: the same */
    CHECK(run("FEDSIM_TEST_EVAL_BATCH=1", "pfedgate-b1",
              "--set algorithm.name=pfedgate --set algorithm.pfedgate.s=0.5 --workers 2 "
              "--set rounds=3 " TINY) == 0);
    CHECK_MSG(test_same_outputs(dir, "pfedgate-mem", "pfedgate-b1", 1),
              "evaluation a client at a time, in two processes = in one batch");
    /* ... and pFedHN's embeddings (the server's rows), read for each batch before it forks */
    CHECK(run("FEDSIM_TEST_EVAL_BATCH=1", "pfedhn-b1",
              "--set algorithm.name=pfedhn --workers 2 --set rounds=3 " TINY) == 0);
    CHECK_MSG(test_same_outputs(dir, "pfedhn-mem", "pfedhn-b1", 1),
              "pfedhn: evaluation a client at a time, in two processes = in one batch");
    /* no helper died (a helper that touched the store would, and its tasks run again here) */
    CHECK(says("pfedgate-b1", "err", "read back from disk", NULL) &&
          !err_has("pfedgate-b1", "run again by the coordinator"));
    CHECK(says("pfedhn-b1", "err", "read back from disk", NULL) &&
          !err_has("pfedhn-b1", "run again by the coordinator"));

    /* a sweep's points take the budget too */
    char cmd0[1024];
    snprintf(cmd0, sizeof cmd0,
             "%s sweep scenarios/tiny.yaml --vary algorithm.lr=0.05 --set algorithm.name=ditto "
             "--set rounds=3 --workers 0 --plots none -q " TINY " --out %s/sw >/dev/null 2>&1",
             bin, dir);
    CHECK(system(cmd0) == 0);
    CHECK(run("", "ditto-lr",
              "--set algorithm.name=ditto --set rounds=3 --workers 0 "
              "--set algorithm.lr=0.05") == 0);
    CHECK_MSG(sh("cmp sw/algorithm.lr=0.05/metrics.tsv ditto-lr/metrics.tsv") == 0,
              "a sweep point with --state-memory 1B = the run");

    /* (b) stopped after a checkpoint, resumed with either budget; a worker killed */
    const char *ditto = "--set algorithm.name=ditto --set rounds=6 --checkpoint-every 2";
    char args[1024];
    snprintf(args, sizeof args, "%s --workers 0", ditto);
    CHECK(run("", "ditto-full", args) == 0);
    snprintf(args, sizeof args, "%s --workers 0 " TINY, ditto);
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "stop-a", args) == 130);
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=4", "stop-b", args) == 130);
    CHECK_MSG(sh("test -s stop-a/state.mdb && test ! -e stop-a/state.spill") == 0,
              "a stopped run keeps its states in state.mdb, and no spill");
    CHECK(sh("cp -r stop-a stop-c && cp -r stop-a foreign && cp -r stop-b stale") == 0);
    CHECK(resume("stop-a", "--workers 0 " TINY) == 0);
    CHECK_MSG(test_same_outputs(dir, "ditto-full", "stop-a", 1), "resumed with 1B = uninterrupted");
    CHECK(resume("stop-c", "--workers 2") == 0);
    CHECK_MSG(test_same_outputs(dir, "ditto-full", "stop-c", 1),
              "stopped with 1B, resumed with the default and 2 workers = uninterrupted");
    CHECK_MSG(sh("test ! -e stop-a/state.mdb && test ! -e stop-a/state.mdb-lock && "
                 "test ! -e stop-a/state.spill && test ! -e stop-a/checkpoint.msgpack") == 0,
              "a finished run leaves no state files");
    snprintf(args, sizeof args, "%s --workers 2 " TINY, ditto);
    CHECK(run("FEDSIM_TEST_WORKER_KILL=1:3", "killed", args) == 0);
    CHECK(says("killed", "err", "died and were replaced", NULL));
    CHECK_MSG(test_same_outputs(dir, "ditto-full", "killed", 1), "killed worker, 1B: same outputs");

    /* pFedHN's embeddings, the server's rows in the store beside the states: stopped after a
     * checkpoint and resumed, and killed between the store's commit and the checkpoint file
     * (the rows go back with the states) */
    const char *hn = "--set algorithm.name=pfedhn --set rounds=6 --checkpoint-every 2 --workers 0";
    CHECK(run("", "hn-full", hn) == 0);
    char hn_tiny[512];
    snprintf(hn_tiny, sizeof hn_tiny, "%s " TINY, hn);
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "hn-stop", hn_tiny) == 130);
    CHECK(resume("hn-stop", "--workers 0") == 0);
    CHECK_MSG(test_same_outputs(dir, "hn-full", "hn-stop", 1),
              "pfedhn: stopped with 1B and resumed = uninterrupted");
    CHECK(run("FEDSIM_TEST_KILL_AFTER_STATE_COMMIT=2", "hn-crash", hn_tiny) == 128 + 9);
    CHECK(resume("hn-crash", "--workers 0 " TINY) == 0);
    CHECK_MSG(test_same_outputs(dir, "hn-full", "hn-crash", 1),
              "pfedhn: killed after the store's commit, resumed = uninterrupted");

    /* a run whose clients keep no state writes no state files, checkpoints or not */
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "fedavg-stop",
              "--set rounds=6 --checkpoint-every 2 --workers 0") == 130);
    CHECK_MSG(sh("test -s fedavg-stop/checkpoint.msgpack && test ! -e fedavg-stop/state.mdb && "
                 "test ! -e fedavg-stop/state.spill") == 0,
              "FedAvg: a checkpoint and no state files");
    CHECK(resume("fedavg-stop", "--workers 0") == 0);

    /* (c) killed between the store's commit for the checkpoint after round 4 (the second: the
     * one at round 0 has no state to commit) and that checkpoint's file: the one after round 2
     * resumes, and the store must go back to it: round 4's clients that did not train in round 3
     * would otherwise start from their states after round 4 (seen failing so without
     * sim_store_restore) */
    CHECK(run("FEDSIM_TEST_KILL_AFTER_STATE_COMMIT=2", "crash", args) == 128 + 9);
    CHECK(sh("test -s crash/checkpoint.msgpack") == 0);
    CHECK(resume("crash", "--workers 0 " TINY) == 0);
    CHECK_MSG(test_same_outputs(dir, "ditto-full", "crash", 1),
              "killed after the store's commit: resumed from the checkpoint before = "
              "uninterrupted");

    /* (d) state.mdb of another run, behind its checkpoint, or damaged: refused, naming it */
    snprintf(args, sizeof args,
             "--set algorithm.name=ditto --set rounds=6 --set seed=8 "
             "--checkpoint-every 2 --workers 0");
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "seed8", args) == 130);
    /* stop-b's checkpoint (after round 4) with the states committed after round 2 */
    CHECK(sh("cp foreign/state.mdb stale/state.mdb && cp seed8/state.mdb foreign/state.mdb") == 0);
    CHECK(resume("foreign", "--workers 0") == 2);
    CHECK(says("foreign", "rerr", "foreign/state.mdb", "another run", NULL));
    CHECK(resume("stale", "--workers 0") == 2);
    CHECK(says("stale", "rerr", "stale/state.mdb", NULL));
    CHECK(sh("cp -r stop-b damaged && head -c 65536 /dev/urandom > damaged/state.mdb") == 0);
    CHECK(resume("damaged", "--workers 0") == 2);
    CHECK(says("damaged", "rerr", "damaged/state.mdb", NULL));
    CHECK_MSG(sh("cmp stop-b/metrics.tsv damaged/metrics.tsv") == 0,
              "a refused resume leaves the outputs as they were");

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return CHECK_DONE();
}
