/* tests/test_sim_modes.c -- switching federation.mode from the command line: a sync scenario run
 * with --set federation.mode=async checks and runs, its sync-only keys noted once on stderr as
 * unused (and the other way round), while a key no mode reads is still an error; and a sweep over
 * the mode runs both points. The binary is $FEDSIM_BIN (make test sets it). */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "tests/check.h"
#include "tests/files.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/fedsim-modes-XXXXXX";
static const char *bin;

/* `fedsim ARGS` with stdout and stderr into dir/out; its exit status, the output in *out (freed
 * by the caller). */
static int fedsim(const char *args, char **out)
{
    char cmd[2048], path[128];
    snprintf(path, sizeof path, "%s/out", dir);
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1", bin, args, path);
    int st = system(cmd);
    size_t n;
    *out = test_slurp(path, &n);
    if (!*out) *out = calloc(1, 1);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* How many times s occurs in text. */
static int count(const char *text, const char *s)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, s)); p += strlen(s))
        n++;
    return n;
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin || !mkdtemp(dir)) {
        printf("FEDSIM_BIN is not set, or no temporary folder\n");
        return 1;
    }
    char *out, args[1024];
    /* tiny.yaml is sync with per_round: async leaves it unused, once noted */
    int rc = fedsim("check scenarios/tiny.yaml --set federation.mode=async", &out);
    CHECK_MSG(rc == 0, "check: exit %d:\n%s", rc, out);
    CHECK_MSG(count(out, "fedsim: note: federation: per_round (sync mode's keys) unused in async "
                         "mode\n") == 1,
              "%s", out);
    free(out);
    /* async's keys in sync mode, every one of them named */
    rc = fedsim("check scenarios/async.yaml --set federation.mode=sync", &out);
    CHECK_MSG(
            rc == 0 &&
                    strstr(out,
                           "fedsim: note: federation: concurrency, buffer, staleness (async mode's "
                           "keys) unused in sync mode\n"),
            "exit %d:\n%s", rc, out);
    free(out);
    /* no note when every key is read */
    rc = fedsim("check scenarios/tiny.yaml", &out);
    CHECK_MSG(rc == 0 && !strstr(out, "note:"), "exit %d:\n%s", rc, out);
    free(out);
    /* a misspelled key is no mode's: still an error, in either mode, and so is one misspelled
     * inside the other mode's staleness map */
    rc = fedsim("check scenarios/tiny.yaml --set federation.mode=async --set federation.per_rund=2",
                &out);
    CHECK_MSG(rc == 2 && strstr(out, "unknown key 'per_rund'; did you mean 'per_round'?"),
              "exit %d:\n%s", rc, out);
    free(out);
    rc = fedsim("check scenarios/tiny.yaml --set federation.staleness.knd=hinge", &out);
    CHECK_MSG(rc == 2 && strstr(out, "unknown key 'knd'; did you mean 'kind'?"), "exit %d:\n%s", rc,
              out);
    free(out);
    /* a sweep over the mode: both points run */
    snprintf(args, sizeof args,
             "sweep scenarios/tiny.yaml --vary federation.mode=sync,async --set rounds=2 "
             "--plots none -q --out %s/sweep",
             dir);
    rc = fedsim(args, &out);
    CHECK_MSG(rc == 0, "sweep: exit %d:\n%s", rc, out);
    free(out);
    for (int m = 0; m < 2; m++) {
        char path[256];
        snprintf(path, sizeof path, "%s/sweep/federation.mode=%s/metrics.tsv", dir,
                 m ? "async" : "sync");
        CHECK_MSG(test_readable(path), "the sweep did not run %s", path);
    }
    if (!check_failed) {
        snprintf(args, sizeof args, "rm -rf %s", dir);
        CHECK(system(args) == 0);
    }
    return CHECK_DONE();
}
