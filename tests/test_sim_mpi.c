/* tests/test_sim_mpi.c -- workers as MPI ranks end to end: `mpirun -np 3 fedsim-mpi` (rank 0 the
 * coordinator, ranks 1-2 the workers; $FEDSIM_MPI_BIN, built by `make mpi`) against the same
 * binary run alone with --workers 0 and 2 (byte-identity is promised per binary; another build
 * of fedsim, with other flags, need not round the same), on the tiny scenario, on a short FedAvg
 * Fashion-MNIST run, and on async FedAvg, SpaFL and pFedGate (jobs training on the ranks while rank
 * 0 simulates ahead): metrics.tsv, clients.tsv, events.msgpack and timeline.tsv must be
 * byte-identical. Worker ranks running another build (a copy of the binary one byte longer) are
 * named in a warning and change nothing here. Then failures: worker ranks given another seed than
 * the coordinator are refused by the hello check; a worker rank killed mid-run
 * (FEDSIM_TEST_WORKER_KILL, sim/frame.h) ends the run, under Open MPI's default teardown and under
 * --enable-recovery with --job-timeout (where rank 0 survives to name the rank), leaving a
 * checkpoint that `fedsim resume`, locally and under mpirun, continues to the uninterrupted run's
 * outputs.
 *
 * `make test` installs Open MPI when it is missing; only when mpirun is still not there does this
 * test skip, saying so. */
#include "tests/check.h"
#include "tests/files.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static const char *mpibin;
static char mpirun[128]; /* "mpirun" plus the flags one machine needs */

static const char *const fmnist =
        "scenarios/fmnist-cnn2-fedavg.yaml --set rounds=2 --set model=mlp:784-32-10 "
        "--set partition.clients=20 --set federation.per_round=4 --set eval.every=1 "
        "--set eval.test_subset=500";

/* Run "prefix BIN CMD args" with stdout to /dev/null and stderr to dir/name.err; exit status. */
static int sh(const char *env, const char *prefix, const char *b, const char *args,
              const char *name)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s %s %s >/dev/null 2>%s/%s.err", env, prefix, b, args, dir,
             name);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* fedsim run SCENARIO_ARGS into dir/name, locally (workers >= 0) or under mpirun -np 3. */
static int run(const char *env, const char *name, const char *scenario, int workers,
               const char *extra)
{
    char args[1024];
    if (workers >= 0) {
        snprintf(args, sizeof args, "run %s -q --plots none --workers %d --out %s/%s", scenario,
                 workers, dir, name);
        return sh(env, "", mpibin, args, name);
    }
    snprintf(args, sizeof args, "run %s -q --plots none --out %s/%s", scenario, dir, name);
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s %s -np 3", mpirun, extra);
    return sh(env, prefix, mpibin, args, name);
}

/* dir/name.err holds what; when it does not and report is set, say so and show it. */
static int err_holds(const char *name, const char *what, int report)
{
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s.err", dir, name);
    char *s = test_slurp(p, &len);
    int yes = s && strstr(s, what);
    if (!yes && report) printf("%s.err lacks '%s':\n%s\n", name, what, s ? s : "(none)");
    free(s);
    return yes;
}

static int has(const char *name, const char *what)
{
    return err_holds(name, what, 1);
}

static int exists(const char *name, const char *file)
{
    char p[200];
    snprintf(p, sizeof p, "%s/%s/%s", dir, name, file);
    return test_readable(p);
}

int main(void)
{
    mpibin = getenv("FEDSIM_MPI_BIN");
    if (!mpibin) mpibin = "build/mpi/fedsim-mpi";
    if (system("command -v mpirun >/dev/null 2>&1")) {
        printf("SKIP test_sim_mpi: mpirun is not installed and `make mpi` could not install "
               "Open MPI (apt-get install libopenmpi-dev openmpi-bin; see build/mpi.log)\n");
        return CHECK_DONE();
    }
    if (access(mpibin, X_OK)) { /* mpirun would wait for ranks that never start */
        CHECK_MSG(0, "%s exists (make mpi; see build/mpi.log)", mpibin);
        return CHECK_DONE();
    }
    /* Open MPI refuses root without these, and -np 3 on a smaller machine without
     * --oversubscribe; MPICH's mpirun needs neither flag */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    int ompi = system("mpirun --version 2>&1 | grep -q 'Open MPI'") == 0;
    snprintf(mpirun, sizeof mpirun, "mpirun%s", ompi ? " --oversubscribe" : "");
    snprintf(dir, sizeof dir, "/tmp/fedsim-mpi-XXXXXX");
    if (!mkdtemp(dir)) return 1;

    /* same outputs whatever the transport: in-process, 2 forked workers, 2 worker ranks */
    CHECK(run("", "t0", "scenarios/tiny.yaml", 0, "") == 0);
    CHECK(run("", "t2", "scenarios/tiny.yaml", 2, "") == 0);
    CHECK_MSG(run("", "tm", "scenarios/tiny.yaml", -1, "") == 0, "tiny under mpirun");
    CHECK_MSG(test_same_outputs(dir, "t0", "tm", 1), "tiny: MPI ranks match --workers 0");
    CHECK_MSG(test_same_outputs(dir, "t2", "tm", 1), "tiny: MPI ranks match --workers 2");
    CHECK(run("", "f0", fmnist, 0, "") == 0);
    CHECK(run("", "f2", fmnist, 2, "") == 0);
    CHECK_MSG(run("", "fm", fmnist, -1, "") == 0, "Fashion-MNIST under mpirun");
    CHECK_MSG(test_same_outputs(dir, "f0", "fm", 1), "fmnist: MPI ranks match --workers 0");
    CHECK_MSG(test_same_outputs(dir, "f2", "fm", 1), "fmnist: MPI ranks match --workers 2");
    CHECK_MSG(!test_same_outputs(dir, "t0", "f0", 0), "the comparison can fail");
    CHECK_MSG(!err_holds("tm", "another build", 0), "one build: no warning");
    /* async, where jobs train on the ranks while rank 0 simulates ahead (issue 40): FedAvg's
     * exact costs, SpaFL's and pFedGate's lower bounds */
    static const char *const async_algos[] = {"fedavg", "spafl", "pfedgate"};
    for (int i = 0; i < 3; i++) {
        char sc[512], a0[32], am[32];
        snprintf(sc, sizeof sc,
                 "scenarios/tiny.yaml --set 'federation={mode: async, concurrency: 4, buffer: 2}' "
                 "--set rounds=8 --set algorithm.name=%s",
                 async_algos[i]);
        snprintf(a0, sizeof a0, "a0-%s", async_algos[i]);
        snprintf(am, sizeof am, "am-%s", async_algos[i]);
        CHECK(run("", a0, sc, 0, "") == 0);
        CHECK_MSG(run("", am, sc, -1, "") == 0, "async %s under mpirun", async_algos[i]);
        CHECK_MSG(test_same_outputs(dir, a0, am, 1), "async %s: MPI ranks match --workers 0",
                  async_algos[i]);
    }
    /* the note of keys the other federation mode leaves unused comes from rank 0 alone */
    CHECK(run("", "ta", "scenarios/tiny.yaml --set federation.mode=async", -1, "") == 0);
    char np[200];
    size_t nlen;
    snprintf(np, sizeof np, "%s/ta.err", dir);
    char *notes = test_slurp(np, &nlen);
    int n_notes = 0;
    for (const char *at = notes; at && (at = strstr(at, "fedsim: note:")); at++)
        n_notes++;
    CHECK_MSG(n_notes == 1, "one mode-switch note under mpirun -np 3, not %d:\n%s", n_notes,
              notes ? notes : "");
    free(notes);

    /* worker ranks on another build (the same code, one byte appended to the program file) are
     * named, once for both, and the run goes on */
    char args[1024], prefix[256];
    snprintf(args, sizeof args, "cp %s %s/other && printf x >>%s/other", mpibin, dir, dir);
    CHECK(system(args) == 0);
    snprintf(args, sizeof args,
             "run scenarios/tiny.yaml -q --plots none --out %s/ob : -np 2 %s/other run "
             "scenarios/tiny.yaml -q --plots none --out %s/ob",
             dir, dir, dir);
    snprintf(prefix, sizeof prefix, "%s -np 1", mpirun);
    CHECK_MSG(sh("", prefix, mpibin, args, "ob") == 0, "worker ranks on another build: exit 0");
    CHECK(has("ob", "warning: 2 worker ranks (the first: rank 1, host ") &&
          has("ob", "run another build (exe ") && has("ob", "; rank 0: exe "));
    snprintf(args, sizeof args, "test \"$(grep -c 'warning: ' %s/ob.err)\" = 1", dir);
    CHECK_MSG(system(args) == 0, "one warning for the two ranks of one build");
    CHECK_MSG(test_same_outputs(dir, "t0", "ob", 1),
              "another build of the same code: same outputs");

    /* worker ranks that resolve another scenario (here: another seed) are refused by name */
    snprintf(args, sizeof args,
             "run scenarios/tiny.yaml -q --plots none --out %s/bad : -np 2 %s run "
             "scenarios/tiny.yaml --seed 8 -q --plots none --out %s/bad",
             dir, mpibin, dir);
    snprintf(prefix, sizeof prefix, "%s -np 1", mpirun);
    CHECK(sh("", prefix, mpibin, args, "bad") != 0);
    CHECK(has("bad", "worker rank 1 (host ") && has("bad", "resolved another scenario"));
    CHECK_MSG(!exists("bad", "events.msgpack"), "no run started");

    /* a worker rank killed on its 7th job (round 3 or 4 of 5), with mpirun's default teardown:
     * the job ends, the checkpoint written before that round's dispatch is left, and a local
     * resume finishes it exactly as the uninterrupted run. Rank 0's own message may be cut short by
     * the teardown; mpirun always names the rank. */
    CHECK(run("FEDSIM_TEST_WORKER_KILL=0:7", "k", "scenarios/tiny.yaml", -1, "") != 0);
    CHECK(has("k", "rank 1") && has("k", "signal 9"));
    CHECK_MSG(exists("k", "checkpoint.msgpack"), "the killed run left a checkpoint");
    snprintf(args, sizeof args, "resume %s/k -q --plots none --workers 0", dir);
    CHECK_MSG(sh("", "", mpibin, args, "k-resume") == 0, "local resume of the killed run");
    CHECK_MSG(test_same_outputs(dir, "t0", "k", 1), "killed and resumed = uninterrupted");
    /* killed on its first job, in round 1: the checkpoint written before the first dispatch
     * starts the run over to the same outputs */
    CHECK(run("FEDSIM_TEST_WORKER_KILL=0:1", "k1", "scenarios/tiny.yaml", -1, "") != 0);
    CHECK_MSG(exists("k1", "checkpoint.msgpack"), "a rank lost in round 1 left a checkpoint");
    snprintf(args, sizeof args, "resume %s/k1 -q --plots none --workers 0", dir);
    CHECK_MSG(sh("", "", mpibin, args, "k1-resume") == 0, "local resume of the round-1 kill");
    CHECK_MSG(test_same_outputs(dir, "t0", "k1", 1),
              "killed in round 1 and resumed = uninterrupted");

    /* Open MPI with --enable-recovery keeps rank 0 alive: the job timeout finds the dead rank,
     * and the error names it and says how to resume; resume under mpirun finishes the run */
    if (ompi) {
        CHECK(run("FEDSIM_TEST_WORKER_KILL=0:7", "r", "scenarios/tiny.yaml --job-timeout 2", -1,
                  "--enable-recovery") >= 0);
        CHECK(has("r", "worker rank 1 (host ") && has("r", "MPI cannot replace a lost rank") &&
              has("r", "fedsim resume "));
        CHECK_MSG(exists("r", "checkpoint.msgpack"), "the timed-out run left a checkpoint");
        snprintf(args, sizeof args, "resume %s/r -q --plots none", dir);
        snprintf(prefix, sizeof prefix, "%s -np 3", mpirun);
        CHECK_MSG(sh("", prefix, mpibin, args, "r-resume") == 0, "resume under mpirun");
        CHECK_MSG(test_same_outputs(dir, "t0", "r", 1), "timed out and resumed = uninterrupted");
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
