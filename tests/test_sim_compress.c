/* tests/test_sim_compress.c -- `compression:` end to end through the fedsim binary ($FEDSIM_BIN)
 * on scenarios/tiny.yaml: a FedAvg run with topk (error feedback, beside persistent momentum) up
 * and fp16 down, a SCAFFOLD run with qsgd (error feedback on Δy and Δc) up and bf16 down, a
 * FedRep run (its shared layers) with qsgd and error feedback up and fp16 down, and a FedRolex
 * run (its rolling sub-model) with topk up and qsgd down, write the same outputs with 0 and 2
 * workers, and stopped after a checkpoint and resumed end as the straight runs (the residuals ride
 * in the clients' private state); a run's bytes are its messages' lengths (fp16 and qsgd:
 * participants × the length nn_comp_bytes computes, every round, and the cost-only run's; FedPer's
 * and HeteroFL's the cost-only run's, below their dense runs'; topk: no more than cost-only
 * prices); and an algorithm that sends no dense vector, a sparse download or randk's error feedback
 * are refused at the key. */
#include "nn/compress.h"
#include "tests/check.h"
#include "tests/files.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char dir[64];
static const char *bin;

/* FedAvg with topk and its residual beside persistent momentum, fp16 models; SCAFFOLD with
 * qsgd and error feedback on both its vectors, bf16 models; FedRep's shared layers and FedRolex's
 * rolling sub-models, each with error feedback */
enum { N_CASES = 4 };
static const char *const CASES[N_CASES] = {
        "--set algorithm.momentum=0.5 --set algorithm.persistent_momentum=true "
        "--set 'compression={up: {scheme: topk, ratio: 0.05}, down: {scheme: fp16}}'",
        "--set algorithm.name=scaffold --set 'compression={up: {scheme: qsgd, levels: 15, "
        "error_feedback: true}, down: {scheme: bf16}}'",
        "--set algorithm.name=fedrep --set 'compression={up: {scheme: qsgd, levels: 15, "
        "error_feedback: true}, down: {scheme: fp16}}'",
        "--set algorithm.name=fedrolex --set 'compression={up: {scheme: topk, ratio: 0.05}, "
        "down: {scheme: qsgd, levels: 255}}'"};

/* Run tiny.yaml into dir/name with args (env before the command); the exit status, stderr in
 * dir/name.err. */
static int run(const char *env, const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s %s run scenarios/tiny.yaml -q --plots none --out %s/%s %s >/dev/null "
             "2>%s/%s.err",
             env, bin, dir, name, args, dir, name);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *file_of(const char *name, const char *file)
{
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/%s%s", dir, name, file);
    return test_slurp(p, &len);
}

/* metrics.tsv's rows of dir/name: bytes_up, bytes_down and participants of each (at most 16);
 * returns the count. */
static int rows(const char *name, double *up, double *down, int *parts)
{
    char *t = file_of(name, "/metrics.tsv");
    int n = 0;
    for (char *l = t ? strchr(t, '\n') : NULL; l && n < 16; l = strchr(l + 1, '\n')) {
        if (l[1] == 'r' || !l[1]) continue; /* the header */
        int r;
        double time, flops;
        if (sscanf(l + 1, "%d %lf %lf %lf %lf", &r, &time, &up[n], &down[n], &flops) != 5) continue;
        const char *p = l + 1; /* participants: the 11th column */
        for (int c = 0; c < 10 && p; c++)
            p = strchr(p, '\t') ? strchr(p, '\t') + 1 : NULL;
        parts[n++] = p ? atoi(p) : -1;
    }
    free(t);
    return n;
}

/* fedsim run fails (exit 2) with every piece of want in its stderr */
static void refused(const char *args, const char *a, const char *b, int line)
{
    int st = run("", "bad", args);
    char *msg = file_of("bad", ".err");
    CHECK_AT(st == 2 && msg && strstr(msg, a) && strstr(msg, b) && !strstr(msg, "Sanitizer"),
             "line %d: exit %d, stderr: %s", line, st, msg ? msg : "(none)");
    free(msg);
}
#define REFUSED(args, a, b) refused(args, a, b, __LINE__)

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-compress-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char args[1024];
    /* 0 and 2 workers, and a run resumed from its checkpoint at aggregation 2 */
    char cmd[1024];
    for (int i = 0; i < N_CASES; i++) {
        snprintf(args, sizeof args, "--workers 0 %s", CASES[i]);
        CHECK(run("", "w0", args) == 0);
        snprintf(args, sizeof args, "--workers 2 %s", CASES[i]);
        CHECK(run("", "w2", args) == 0);
        CHECK_MSG(test_same_outputs(dir, "w0", "w2", 1), "%s: --workers 2 = in-process", CASES[i]);
        snprintf(args, sizeof args, "--workers 0 %s", CASES[i]);
        *strstr(args, " --set 'compression") = 0; /* the same without compression */
        CHECK(run("", "plain", args) == 0);
        CHECK_MSG(!test_same_outputs(dir, "w0", "plain", 0), "%s: compression changes the run",
                  CASES[i]);
        snprintf(cmd, sizeof cmd, "rm -rf %s/re", dir);
        CHECK(system(cmd) == 0);
        snprintf(args, sizeof args, "--workers 0 --checkpoint-every 2 %s", CASES[i]);
        CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", "re", args) == 130);
        snprintf(cmd, sizeof cmd, "%s resume %s/re -q --plots none --workers 0 >/dev/null 2>&1",
                 bin, dir);
        int st = system(cmd);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        CHECK_MSG(test_same_outputs(dir, "w0", "re", 1), "%s: resumed = straight", CASES[i]);
    }

    /* bytes: participants × each message's length, trained and cost-only alike */
    size_t n = 14884; /* fedpews-mlp's parameters */
    const struct {
        const char *set;
        nn_comp up, down;
    } cs[] = {
            {"{up: {scheme: fp16}, down: {scheme: qsgd, levels: 15}}",
             {NN_COMP_FP16, 0, 0, 0},
             {NN_COMP_QSGD, 0, 15, 0}},
            {"{up: {scheme: qsgd, levels: 255}, down: {scheme: bf16}}",
             {NN_COMP_QSGD, 0, 255, 0},
             {NN_COMP_BF16, 0, 0, 0}},
    };
    for (int i = 0; i < 2; i++) {
        double up[16], down[16], cup[16], cdown[16];
        int parts[16], cparts[16];
        snprintf(args, sizeof args, "--workers 0 --set 'compression=%s'", cs[i].set);
        CHECK(run("", "b", args) == 0);
        snprintf(args, sizeof args, "--workers 0 --cost-only --set 'compression=%s'", cs[i].set);
        CHECK(run("", "c", args) == 0);
        int m = rows("b", up, down, parts), mc = rows("c", cup, cdown, cparts);
        CHECK_EQ_I64(m, 6);
        CHECK_EQ_I64(mc, 6);
        double lu = (double)nn_comp_bytes(&cs[i].up, n), ld = (double)nn_comp_bytes(&cs[i].down, n);
        for (int r = 1; r < m && r < mc; r++) {
            int p = parts[r];
            CHECK_MSG(p > 0 && up[r] - up[r - 1] == p * lu && cup[r] - cup[r - 1] == cparts[r] * lu,
                      "%s round %d: %.0f bytes up for %d uploads of %.0f", cs[i].set, r,
                      up[r] - up[r - 1], p, lu);
            CHECK_MSG(down[r] - down[r - 1] >= p * ld && fmod(down[r] - down[r - 1], ld) == 0,
                      "%s round %d: %.0f bytes down, not downloads of %.0f", cs[i].set, r,
                      down[r] - down[r - 1], ld);
            CHECK(cup[r] == up[r] && cdown[r] == down[r]);
        }
    }
    /* messages that are part of the model: FedPer's shared layers, HeteroFL's sub-models (a
     * width per client from its capacity): the trained run's bytes are the cost-only run's
     * round by round, fp16 uploads about half the dense ones and qsgd's 5 bits a value about
     * 5/32 of the dense downloads */
    const char *sliced[] = {
            "fedper", "heterofl --set algorithm.width.by=capacity --set devices.capacity=uniform"};
    for (int i = 0; i < 2; i++) {
        double up[16], down[16], cup[16], cdown[16], dup[16], ddown[16];
        int pa[16], cpa[16], dpa[16];
        const char *set = "--set 'compression={up: {scheme: fp16}, down: {scheme: qsgd, levels: "
                          "15}}'";
        snprintf(args, sizeof args, "--workers 0 --set algorithm.name=%s %s", sliced[i], set);
        CHECK(run("", "b", args) == 0);
        snprintf(args, sizeof args, "--workers 0 --cost-only --set algorithm.name=%s %s", sliced[i],
                 set);
        CHECK(run("", "c", args) == 0);
        snprintf(args, sizeof args, "--workers 0 --set algorithm.name=%s", sliced[i]);
        CHECK(run("", "d", args) == 0);
        int m = rows("b", up, down, pa);
        CHECK(m == 6 && rows("c", cup, cdown, cpa) == 6 && rows("d", dup, ddown, dpa) == 6);
        for (int r = 0; r < m; r++)
            CHECK_MSG(cup[r] == up[r] && cdown[r] == down[r] && cpa[r] == pa[r],
                      "%s round %d: %.0f, %.0f bytes up and down, %.0f and %.0f priced", sliced[i],
                      r, up[r], down[r], cup[r], cdown[r]);
        double ru = up[m - 1] / dup[m - 1], rd = down[m - 1] / ddown[m - 1];
        CHECK_MSG(ru > 0.49 && ru < 0.55 && rd > 5.0 / 32 && rd < 0.2,
                  "%s: %.4f of the dense bytes up, %.4f down", sliced[i], ru, rd);
    }
    /* topk: what cost-only prices is the most a run sends */
    {
        double up[16], down[16], cup[16], cdown[16];
        int parts[16];
        CHECK(run("", "t", "--set compression.up.scheme=topk") == 0);
        CHECK(run("", "tc", "--cost-only --set compression.up.scheme=topk") == 0);
        int m = rows("t", up, down, parts);
        CHECK(m == 6 && rows("tc", cup, cdown, parts) == 6);
        CHECK_MSG(m == 6 && up[5] <= cup[5] && up[5] > 0.5 * cup[5],
                  "topk: %.0f bytes sent, %.0f priced", up[5], cup[5]);
    }
    /* refusals at the key, with the reason */
    REFUSED("--set algorithm.name=spafl --set compression.up.scheme=qsgd",
            "compression.up.scheme: qsgd: spafl: SpaFL's messages are its neurons' thresholds",
            "compression applies to the messages of fedavg, fedprox, heterofl");
    REFUSED("--set algorithm.name=dmpfl --set compression.down.scheme=fp16",
            "compression.down.scheme: fp16: dmpfl: DM-PFL sends each parameter's mask", "");
    REFUSED("--set compression.down.scheme=topk", "compression.down.scheme: topk of a whole model",
            "down takes none, qsgd, fp16 or bf16");
    REFUSED("--set 'compression.up={scheme: randk, error_feedback: true}'",
            "compression.up.error_feedback: randk", "scaled by n/k");
    REFUSED("--set 'compression.up={scheme: topk, ratio: 2}'", "ratio", "");
    REFUSED("--set compression.up.skeme=topk", "did you mean 'scheme'", "");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
