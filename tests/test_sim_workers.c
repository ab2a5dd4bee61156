/* tests/test_sim_workers.c -- the worker pool end to end through the fedsim binary ($FEDSIM_BIN):
 * the tiny scenario, sync and async, gives byte-identical metrics.tsv, clients.tsv,
 * events.msgpack and timeline.tsv with --workers 0 (in-process), 1 and 2, and with 3 workers (whose
 * evaluations fan out over three processes, sim/fanout.h) also under eval.shift; a worker killed
 * mid-run (test hook FEDSIM_TEST_WORKER_KILL=K:J, sim/pool.h) is replaced and the outputs still
 * match, and so do runs whose devices price activation bytes (which travel in the result frames);
 * a worker answering with garbage (FEDSIM_TEST_WORKER_GARBAGE=K:J) fails the run with exit
 * status 2 and a message naming the worker and the job; a worker stuck on a job
 * (FEDSIM_TEST_WORKER_HANG=K:J) is killed after --job-timeout, replaced, and the outputs still
 * match. */
#include "tests/check.h"
#include "tests/files.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static const char *bin;

static const char *const async_set =
        "--set 'federation={mode: async, concurrency: 4, buffer: 2, staleness: {kind: polynomial, "
        "a: 0.5}}' --set rounds=8";

/* Run tiny.yaml into dir/name with extra args (env: variable assignments before the command);
 * returns the exit status and leaves stderr in dir/name.err. */
static int run(const char *env, const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s %s run scenarios/tiny.yaml -q --plots none --out %s/%s %s "
             ">/dev/null 2>%s/%s.err",
             env, bin, dir, name, args, dir, name);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs dir/TAG0 in-process and dir/TAGn with n workers, both with extra args: 1 when both
 * succeed with byte-identical outputs. */
static int workers_agree(const char *tag, int n, const char *extra)
{
    char args[1024], a[16], b[16];
    snprintf(a, sizeof a, "%s0", tag);
    snprintf(b, sizeof b, "%s%d", tag, n);
    snprintf(args, sizeof args, "--workers 0 %s", extra);
    if (run("", a, args)) return 0;
    snprintf(args, sizeof args, "--workers %d %s", n, extra);
    return run("", b, args) == 0 && test_same_outputs(dir, a, b, 1);
}

static char *stderr_of(const char *name)
{
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s.err", dir, name);
    return test_slurp(p, &len);
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-workers-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char args[1024];
    /* sync and async: 0, 1 and 2 workers agree byte for byte */
    for (int n = 0; n <= 2; n++) {
        char name[16];
        snprintf(args, sizeof args, "--workers %d", n);
        snprintf(name, sizeof name, "s%d", n);
        CHECK_MSG(run("", name, args) == 0, "sync run with %s", args);
        snprintf(args, sizeof args, "--workers %d %s", n, async_set);
        snprintf(name, sizeof name, "a%d", n);
        CHECK_MSG(run("", name, args) == 0, "async run with --workers %d", n);
    }
    CHECK_MSG(test_same_outputs(dir, "s0", "s1", 1), "sync: --workers 1 matches in-process");
    CHECK_MSG(test_same_outputs(dir, "s0", "s2", 1), "sync: --workers 2 matches in-process");
    CHECK_MSG(test_same_outputs(dir, "a0", "a1", 1), "async: --workers 1 matches in-process");
    CHECK_MSG(test_same_outputs(dir, "a0", "a2", 1), "async: --workers 2 matches in-process");
    /* evaluation over 3 processes: global chunks, own splits and shifted splits */
    CHECK_MSG(workers_agree("f", 3, "--set 'eval.shift=[0, 0.5, 1]'"),
              "eval.shift: --workers 3 matches in-process");
    CHECK_MSG(!test_same_outputs(dir, "s0", "f0", 0), "the shift columns change metrics.tsv");
    CHECK_MSG(!test_same_outputs(dir, "s0", "a0", 0),
              "sync and async runs differ (the comparison can fail)");
    /* the slow devices price activation bytes: the jobs' bytes reach the engine from workers
     * as they do in-process, and change the times */
    CHECK_MSG(workers_agree("b", 2,
                            "--set 'devices.profiles.slow={compute: 10 MFLOPS, up: 1 Mbps, down: "
                            "4 Mbps, latency: 50 ms, memory: 1 GiB, mem_bandwidth: 1 MB/s}'"),
              "mem_bandwidth: --workers 2 matches in-process");
    CHECK_MSG(!test_same_outputs(dir, "s0", "b0", 0), "mem_bandwidth changes the times");
    /* a worker killed on its 2nd job (and one on its 1st) is replaced; nothing changes */
    CHECK(run("FEDSIM_TEST_WORKER_KILL=1:2", "k1", "--workers 2") == 0);
    CHECK_MSG(test_same_outputs(dir, "s0", "k1", 1), "sync: a killed worker changes no output");
    char *msg = stderr_of("k1");
    CHECK_MSG(msg && strstr(msg, "1 worker process(es) died and were replaced"),
              "the kill happened and was reported: %s", msg ? msg : "(none)");
    free(msg);
    snprintf(args, sizeof args, "--workers 2 %s", async_set);
    CHECK(run("FEDSIM_TEST_WORKER_KILL=0:1", "k2", args) == 0);
    CHECK_MSG(test_same_outputs(dir, "a0", "k2", 1), "async: a killed worker changes no output");
    /* a worker stuck on its 2nd job is killed after the 1 s job timeout (a tiny job takes a few
     * ms, even sanitized); the run still matches and says why it replaced a worker */
    CHECK(run("FEDSIM_TEST_WORKER_HANG=1:2", "h1", "--workers 2 --job-timeout 1") == 0);
    CHECK_MSG(test_same_outputs(dir, "s0", "h1", 1), "sync: a timed-out worker changes no output");
    msg = stderr_of("h1");
    CHECK_MSG(msg && strstr(msg, "exceeded --job-timeout and were killed and replaced") &&
                      !strstr(msg, "died and were replaced"),
              "the timeout happened and was reported: %s", msg ? msg : "(none)");
    free(msg);
    /* garbage from a worker: an error naming the worker and the job, not a crash */
    CHECK(run("FEDSIM_TEST_WORKER_GARBAGE=0:3", "g", "--workers 2") == 2);
    msg = stderr_of("g");
    CHECK_MSG(msg && strstr(msg, "worker 0 (pid ") && strstr(msg, "bad result frame") &&
                      strstr(msg, "for client ") && strstr(msg, " round "),
              "bad frame message names worker and job: %s", msg ? msg : "(none)");
    CHECK_MSG(msg && !strstr(msg, "runtime error") && !strstr(msg, "Sanitizer"),
              "no sanitizer report: %s", msg ? msg : "");
    free(msg);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
