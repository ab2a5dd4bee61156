/* tests/test_sim_async.c -- issue 40: jobs train on the workers while the engine simulates ahead
 * of them (sim/engine_jobs.c), and nothing an output holds changes.
 *
 * - Byte-identical outputs with 0, 1, 2 and 3 workers for async runs of a fixed-cost algorithm
 *   (FedAvg), of SpaFL and pFedGate (whose work is known only by training: a lower bound), of
 *   devices that go offline mid-job (jobs lost before their training could end are never
 *   trained), on shared links (jobs needed by when their download could end), with batteries
 *   that die mid-job (before the training could end, known at dispatch, or after), and for
 *   over-committed sync rounds with a deadline (late jobs).
 * - The lookahead is real and safe: with FEDSIM_TEST_LOOKAHEAD the engine logs every job it placed
 *   after dispatch; no job was placed after the instant it was needed at, FedAvg's were needed
 *   exactly when their training ended, SpaFL's at or before, and the engine handled other events
 *   while jobs trained (it would not, were it to wait for each result at dispatch).
 * - A wrong bound is caught: FEDSIM_TEST_BOUND_SCALE=K inflates every prediction; FedAvg's run
 *   stops on the exact cost's mismatch (K = 1.5) and SpaFL's on a bound above a job's real
 *   training (K = 50: its bound is its steps' overhead alone, well below its training), each
 *   naming the algorithm; a bound halved is still sound and changes nothing.
 * - A worker killed with SIGKILL mid-run, and a run stopped after a checkpoint and resumed, with 2
 *   workers and jobs in flight, give the uninterrupted run's outputs.
 */
#include "tests/check.h"
#include "tests/files.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static const char *bin;
static char dir[64];

/* tiny.yaml's clients, async: 4 jobs in flight, 2 updates per aggregation; a step costs a device
 * 2 ms beyond its FLOPs, so SpaFL's bound (its steps) is above its download's end */
#define ASYNC                                                                                      \
    "--set 'federation={mode: async, concurrency: 4, buffer: 2}' --set rounds=10 "                 \
    "--set devices.profiles.slow.step_overhead=2ms --set devices.profiles.fast.step_overhead=2ms "

static const struct {
    const char *name, *args;
} cases[] = {
        {"fedavg", ASYNC},
        {"spafl", ASYNC "--set algorithm.name=spafl"},
        {"pfedgate", ASYNC "--set algorithm.name=pfedgate --set algorithm.pfedgate.s=0.5"},
        /* devices going offline: some jobs are lost before their training could end */
        {"churn", ASYNC "--set 'devices.profiles.slow.availability={kind: markov, mean_on: 1 s, "
                        "mean_off: 1 s}' --set 'devices.profiles.fast.availability={kind: markov, "
                        "mean_on: 1 s, mean_off: 1 s}'"},
        /* shared links: a job is needed by when its download could end (and slow devices go
         * offline mid-download) */
        {"network",
         ASYNC "--set 'network={server: {up: 2 Mbps, down: 8 Mbps}, groups: [{name: "
               "cell, down: 4 Mbps, up: 1 Mbps, devices: [fast], share: 0.75}]}' --set "
               "'devices.profiles.slow.availability={kind: markov, mean_on: 1 s, mean_off: "
               "1 s}'"},
        /* batteries: slow phones' die mid-job (some before their training could end, known at
         * dispatch) and charge back */
        {"battery",
         ASYNC "--set devices.energy=true --set 'devices.profiles.slow.power={train: "
               "2 W, up: 1.5 W, down: 1 W, idle: 0.25 W}' --set 'devices.profiles.fast.power="
               "{train: 5 W, up: 2 W, down: 0.5 W, idle: 0.1 W}' --set "
               "'devices.profiles.slow.battery={capacity: 8 J, floor: 25%, initial: 50%, "
               "charging: {rate: 1 W, when: always}}'"},
        /* sync: 6 of 8 clients for 4 updates; the deadline makes the slow ones late */
        {"overcommit", "--set rounds=4 --set federation.over_commit=1.5 "
                       "--set federation.deadline=1s"},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static int run(const char *env, const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s %s run scenarios/tiny.yaml -q --plots none --out %s/%s %s >/dev/null 2>%s/%s.err",
             env, bin, dir, name, args, dir, name);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* 1 when dir/name.err holds every one of the NULL-ended strings */
static int err_says(const char *name, ...)
{
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s.err", dir, name);
    char *msg = test_slurp(p, &len);
    int ok = msg != NULL;
    va_list ap;
    va_start(ap, name);
    for (const char *s; ok && (s = va_arg(ap, const char *));)
        ok = strstr(msg, s) != NULL;
    va_end(ap);
    if (!ok) printf("%s.err: %s\n", name, msg ? msg : "(none)");
    free(msg);
    return ok;
}

/* Check the lookahead log of dir/name.la: every job placed no later than it was needed, needed no
 * later than its training ended (exactly then when exact); returns the events the engine handled
 * while jobs trained, summed, or -1 when a line breaks a rule. */
static long check_log(const char *name, int exact, int *jobs, int *ahead_of_end)
{
    char p[200];
    snprintf(p, sizeof p, "%s/%s.la", dir, name);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    unsigned long long id;
    int client;
    long long disp, need, placed, end;
    long ev, total = 0;
    *jobs = *ahead_of_end = 0;
    while (fscanf(f, "%llu %d %lld %lld %lld %lld %ld", &id, &client, &disp, &need, &placed, &end,
                  &ev) == 7) {
        ++*jobs;
        *ahead_of_end += need < end;
        if (!(disp <= placed && placed <= need && need <= end && (!exact || need == end))) {
            printf("%s: job %llu of client %d: dispatched %lld placed %lld needed %lld ends %lld\n",
                   name, id, client, disp, placed, need, end);
            total = -1;
            break;
        }
        total += ev;
    }
    fclose(f);
    return total;
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-async-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char cmd[256];

    for (size_t k = 0; k < N_CASES; k++) {
        char ref[64];
        snprintf(ref, sizeof ref, "%s-w0", cases[k].name);
        char args[1024];
        snprintf(args, sizeof args, "%s --workers 0", cases[k].args);
        CHECK_MSG(run("", ref, args) == 0, "%s runs", ref);
        for (int w = 1; w <= 3; w++) {
            char name[64], env[256];
            snprintf(name, sizeof name, "%s-w%d", cases[k].name, w);
            snprintf(args, sizeof args, "%s --workers %d", cases[k].args, w);
            /* the lookahead log of the 2-worker runs */
            snprintf(env, sizeof env, w == 2 ? "FEDSIM_TEST_LOOKAHEAD=%s/%s.la" : "", dir,
                     cases[k].name);
            CHECK_MSG(run(env, name, args) == 0, "%s runs", name);
            CHECK_MSG(test_same_outputs(dir, ref, name, 1), "%s: %d workers = 0 workers",
                      cases[k].name, w);
        }
    }
    /* the lookahead: FedAvg's jobs needed exactly at their training's end, SpaFL's by their
     * bound; the engine went on while they trained */
    int jobs, ahead;
    long ev = check_log("fedavg", 1, &jobs, &ahead);
    CHECK_MSG(ev > 0 && jobs > 20, "fedavg: %d jobs placed ahead, %ld events meanwhile", jobs, ev);
    ev = check_log("spafl", 0, &jobs, &ahead);
    CHECK_MSG(ev > 0 && jobs > 20 && ahead == jobs,
              "spafl: %d jobs, %d needed before their training ended, %ld events meanwhile", jobs,
              ahead, ev);
    ev = check_log("churn", 1, &jobs, &ahead);
    CHECK_MSG(ev > 0, "churn: %d jobs, %ld events meanwhile", jobs, ev);
    ev = check_log("network", 0, &jobs, &ahead);
    CHECK_MSG(ev > 0 && jobs > 20, "network: %d jobs, %ld events meanwhile", jobs, ev);

    /* a bound too high is caught, naming the algorithm; one too low is sound */
    char args[1024];
    snprintf(args, sizeof args, "%s --workers 2", cases[0].args);
    CHECK(run("FEDSIM_TEST_BOUND_SCALE=1.5", "fedavg-high", args) == 2);
    CHECK(err_says("fedavg-high", "algorithm fedavg declares its jobs' work known before training",
                   NULL));
    snprintf(args, sizeof args, "%s --workers 2", cases[1].args);
    CHECK(run("FEDSIM_TEST_BOUND_SCALE=50", "spafl-high", args) == 2);
    CHECK(err_says("spafl-high", "algorithm spafl's lower bound on a job's training is too high",
                   NULL));
    CHECK(run("FEDSIM_TEST_BOUND_SCALE=0.5", "spafl-low", args) == 0);
    CHECK_MSG(test_same_outputs(dir, "spafl-w0", "spafl-low", 1), "a lower bound changes nothing");

    /* a worker killed mid-run: its job re-run elsewhere, the same outputs */
    snprintf(args, sizeof args, "%s --workers 2", cases[0].args);
    CHECK(run("FEDSIM_TEST_WORKER_KILL=1:3", "killed", args) == 0);
    CHECK(err_says("killed", "died and were replaced", NULL));
    CHECK_MSG(test_same_outputs(dir, "fedavg-w0", "killed", 1), "killed worker: same outputs");

    /* stopped right after aggregation 4's checkpoint (jobs were in flight), then resumed */
    snprintf(args, sizeof args, "%s --workers 2 --checkpoint-every 2", cases[1].args);
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=4", "stopped", args) == 130);
    snprintf(cmd, sizeof cmd, "%s resume %s/stopped -q --plots none --workers 2 >/dev/null 2>&1",
             bin, dir);
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_MSG(test_same_outputs(dir, "spafl-w0", "stopped", 1), "stopped and resumed: the same");

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("cannot remove %s\n", dir);
    return CHECK_DONE();
}
