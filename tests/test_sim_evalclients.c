/* tests/test_sim_evalclients.c -- eval.clients (issue 41): personalized evaluation of a fixed
 * random sample of the clients, through the fedsim binary ($FEDSIM_BIN) on scenarios/tiny.yaml
 * with Ditto and 20 clients, 2 rounds, evaluated at rounds 0, 1 and 2:
 * - a sample at least as large as the clients with a local test split is everyone: metrics.tsv
 *   and clients.tsv byte for byte as without the key;
 * - eval.clients: 5 evaluates exactly 5 clients (clients.tsv's acc_final is nan for the other 15)
 *   across the three evaluations, so the sample is the same at each (another one at any evaluation
 *   would leave more than 5 clients with an accuracy); the last row's acc_pers_mean is the mean
 *   of those 5 clients' acc_final, recomputed here; metrics.tsv's first line says
 *   eval_clients=5/20; a run stopped after its first checkpoint and resumed ends with the same
 *   bytes; another seed samples other clients;
 * - a negative or fractional eval.clients is refused naming file:line:col and the key. */
#include "tests/check.h"
#include "tests/files.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char dir[64];
static const char *bin;

static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* fedsim run tiny.yaml (Ditto, 20 clients, 2 rounds) into dir/name with more --set words;
 * env: assignments before the command (may be ""). Returns the exit status. */
static int run(const char *env, const char *name, const char *sets)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s %s run scenarios/tiny.yaml --out %s/%s -q --plots none --workers 0 "
             "--set algorithm.name=ditto --set partition.clients=20 --set rounds=2 "
             "--set federation.per_round=6 %s >/dev/null 2>%s/%s.err",
             env, bin, dir, name, sets, dir, name);
    return sh(cmd);
}

/* Column `col` of a tab-separated header line hdr: its index, or -1. */
static int column(const char *hdr, const char *col)
{
    size_t n = strlen(col);
    for (int i = 0;; i++) {
        if (!strncmp(hdr, col, n) && (hdr[n] == '\t' || hdr[n] == '\n' || !hdr[n])) return i;
        hdr = strchr(hdr, '\t');
        if (!hdr) return -1;
        hdr++;
    }
}

/* Field i of a tab-separated line, as a double. */
static double field(const char *line, int i)
{
    while (i-- > 0 && line)
        if ((line = strchr(line, '\t'))) line++;
    return line ? strtod(line, NULL) : NAN;
}

/* Run dir/name's clients.tsv: which clients have an accuracy (acc_final not nan) into has[20],
 * their count returned, the mean of their accuracies in *mean. */
static int evaluated(const char *name, int has[20], double *mean)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s/clients.tsv", dir, name);
    size_t len;
    char *t = test_slurp(p, &len);
    int k = 0, col = t ? column(t, "acc_final") : -1;
    double s = 0;
    memset(has, 0, sizeof(int) * 20);
    for (char *l = t ? strchr(t, '\n') : NULL; col >= 0 && l && l[1]; l = strchr(l + 1, '\n')) {
        int c = atoi(l + 1);
        double acc = field(l + 1, col);
        if (c >= 0 && c < 20 && !isnan(acc)) has[c] = 1, k++, s += acc;
    }
    free(t);
    *mean = k ? s / k : NAN;
    return col >= 0 ? k : -1;
}

/* Run dir/name's metrics.tsv: its first line into first[n], and the last row's acc_pers_mean. */
static double last_pers_mean(const char *name, char *first, size_t n)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s/metrics.tsv", dir, name);
    size_t len;
    char *t = test_slurp(p, &len);
    first[0] = 0;
    if (!t) return NAN;
    snprintf(first, n, "%.*s", (int)strcspn(t, "\n"), t);
    char *hdr = strchr(t, '\n');
    int col = hdr ? column(hdr + 1, "acc_pers_mean") : -1;
    char *last = NULL;
    for (char *l = hdr ? strchr(hdr + 1, '\n') : NULL; l && l[1]; l = strchr(l + 1, '\n'))
        last = l + 1;
    double v = col >= 0 && last ? field(last, col) : NAN;
    free(t);
    return v;
}

static int same(const char *a, const char *b, const char *file)
{
    char pa[256], pb[256];
    snprintf(pa, sizeof pa, "%s/%s/%s", dir, a, file);
    snprintf(pb, sizeof pb, "%s/%s/%s", dir, b, file);
    return test_same_file(pa, pb);
}

/* A scenario file whose eval section sets clients to v: fedsim check's exit and stderr. */
static int check_bad(const char *v, char *msg, size_t n)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "sed 's/eval: {every: 1, personalized: true}/eval: {every: 1, personalized: true, "
             "clients: %s}/' scenarios/tiny.yaml >%s/bad.yaml && %s check %s/bad.yaml "
             ">/dev/null 2>%s/bad.err",
             v, dir, bin, dir, dir);
    int rc = sh(cmd);
    char p[128];
    snprintf(p, sizeof p, "%s/bad.err", dir);
    size_t len;
    char *e = test_slurp(p, &len);
    snprintf(msg, n, "%s", e ? e : "");
    free(e);
    return rc;
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    snprintf(dir, sizeof dir, "/tmp/fedsim-evalclients-XXXXXX");
    if (!mkdtemp(dir)) return 1;

    /* everyone: no key, a sample of exactly all 20, and more than there are */
    CHECK(run("", "all", "") == 0);
    CHECK(run("", "all20", "--set eval.clients=20") == 0);
    CHECK(run("", "all99", "--set eval.clients=99") == 0);
    const char *every[] = {"all20", "all99"};
    for (int i = 0; i < 2; i++)
        CHECK_MSG(same("all", every[i], "metrics.tsv") && same("all", every[i], "clients.tsv"),
                  "%s: metrics.tsv and clients.tsv as without eval.clients", every[i]);
    int has[20], has2[20];
    double mean;
    char first[512];
    CHECK_MSG(evaluated("all", has, &mean) == 20, "without the key every client is evaluated");
    last_pers_mean("all", first, sizeof first);
    CHECK_MSG(!strstr(first, "eval_clients"), "no sample, no eval_clients: %s", first);

    /* a sample of 5: the same 5 clients at each of the 3 evaluations */
    CHECK(run("", "five", "--set eval.clients=5") == 0);
    int k = evaluated("five", has, &mean);
    CHECK_MSG(k == 5, "eval.clients=5: %d clients have an accuracy (want 5)", k);
    double pm = last_pers_mean("five", first, sizeof first);
    CHECK_MSG(fabs(pm - mean) < 1e-6, /* both printed with 6 decimals */
              "acc_pers_mean %.6f is the sampled clients' mean acc_final %.6f", pm, mean);
    CHECK_MSG(strstr(first, " eval_clients=5/20"), "metrics.tsv's first line: %s", first);

    /* stopped after the checkpoint of round 1, resumed: the same sample, the same bytes */
    CHECK(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=1", "stopped",
              "--set eval.clients=5 --checkpoint-every 1") == 130);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s resume %s/stopped -q --plots none --workers 0 >/dev/null 2>&1",
             bin, dir);
    CHECK(sh(cmd) == 0);
    CHECK_MSG(same("five", "stopped", "metrics.tsv") && same("five", "stopped", "clients.tsv"),
              "resumed: metrics.tsv and clients.tsv as the uninterrupted run's");

    /* another seed, another sample */
    CHECK(run("", "seed2", "--set eval.clients=5 --seed 2") == 0);
    CHECK(evaluated("seed2", has2, &mean) == 5);
    CHECK_MSG(memcmp(has, has2, sizeof has), "seeds 7 and 2 sample different clients");

    /* refused with the file, line, column and key */
    char msg[1024];
    CHECK_MSG(check_bad("-3", msg, sizeof msg) == 2 && strstr(msg, "bad.yaml:16:") &&
                      strstr(msg, "clients: -3 is out of range"),
              "eval.clients: -3 refused: %s", msg);
    CHECK_MSG(check_bad("2.5", msg, sizeof msg) == 2 && strstr(msg, "bad.yaml:16:") &&
                      strstr(msg, "clients: '2.5' is not an integer"),
              "eval.clients: 2.5 refused: %s", msg);

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    sh(cmd);
    return CHECK_DONE();
}
