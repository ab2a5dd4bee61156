/* tests/test_sim_warn.c -- `fedsim check` and `fedsim run` say which clients can never contribute
 * and why (sim/cmd_warn.c): a sync deadline shorter than their predicted job, a device that
 * cannot hold the model, an availability trace that never comes on, a mix share rounding to no
 * client; counts per device class; `--strict` makes them errors (exit 2, nothing run); and
 * clients.tsv tells late updates from aggregated ones. The tiny scenario's slow clients' jobs
 * take 2.93, 2.99, 5.13 and 5.44 s (their busy_s in a run: the prediction is checked against
 * it). The binary is $FEDSIM_BIN (make test sets it). */
#include "tests/check.h"
#include "tests/files.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char dir[64];
static const char *bin;

/* Run `fedsim ARGS` with stdout into *out and stderr into *err (caller frees); exit status. */
static int fedsim(const char *args, char **out, char **err)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s >%s/out.txt 2>%s/err.txt", bin, args, dir, dir);
    int st = system(cmd);
    char p[128];
    size_t n;
    snprintf(p, sizeof p, "%s/out.txt", dir);
    *out = test_slurp(p, &n);
    snprintf(p, sizeof p, "%s/err.txt", dir);
    *err = test_slurp(p, &n);
    if (!*out) *out = strdup("");
    if (!*err) *err = strdup("");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* How many lines of text contain "warning:". */
static int warnings(const char *text)
{
    int k = 0;
    for (const char *p = text; (p = strstr(p, "warning:")); p++)
        k++;
    return k;
}

/* The tiny scenario's check and run without a reason to warn say nothing; a deadline between the
 * slow clients' job times names exactly those above it, at their predicted times. */
static void test_deadline(void)
{
    char *o, *e;
    CHECK(fedsim("check scenarios/tiny.yaml", &o, &e) == 0);
    CHECK_MSG(warnings(o) == 0 && warnings(e) == 0, "tiny: no warning: %s%s", o, e);
    free(o), free(e);
    /* 5.12 s: the jobs of 5.13 and 5.44 s are late, those of 2.9 s are not */
    CHECK(fedsim("check scenarios/tiny.yaml --set federation.deadline=5.12s", &o, &e) == 0);
    CHECK_MSG(strstr(o, "# warning: 2 of 8 clients (slow) need 5.13 s to 5.44 s per job") &&
                      strstr(o, "the deadline is 5.12 s: their updates will always be late") &&
                      warnings(o) == 1,
              "deadline 5.12 s: %s", o);
    free(o), free(e);
    /* 5.13 s: the 5.129 s job arrives in time */
    CHECK(fedsim("check scenarios/tiny.yaml --set federation.deadline=5.13s", &o, &e) == 0);
    CHECK_MSG(strstr(o, "# warning: 1 of 8 clients (slow) need 5.44 s per job") && warnings(o) == 1,
              "deadline 5.13 s: %s", o);
    free(o), free(e);
}

/* A device that cannot hold the model: its clients, and what they need against what they have. */
static void test_memory(void)
{
    char *o, *e;
    CHECK(fedsim("check scenarios/tiny.yaml --set 'devices.profiles.slow.memory=1 KiB'", &o, &e) ==
          0);
    CHECK_MSG(strstr(o, "# warning: 4 of 8 clients (slow) cannot hold the model they train: "
                        "training needs 271 KiB and their devices have 1.00 KiB of memory") &&
                      warnings(o) == 1,
              "memory: %s", o);
    free(o), free(e);
}

/* Write a scenario: tiny's, with a third mix entry and its own profile line. */
static void write_scenario(const char *path, const char *profile, const char *mix)
{
    FILE *f = fopen(path, "w");
    fprintf(f,
            "name: warn\nseed: 7\nrounds: 2\ndataset: {name: synth-pews-3.2k}\n"
            "partition: {scheme: dirichlet, clients: 8, alpha: 1.0, min_size: 20, "
            "local_test: 0.2}\nmodel: fedpews-mlp\n"
            "algorithm: {name: fedavg, local_epochs: 1, batch_size: 32, lr: 0.05}\n"
            "federation: {mode: sync, per_round: 4}\n"
            "devices:\n  profiles:\n"
            "    slow: {compute: 10 MFLOPS, up: 1 Mbps, down: 4 Mbps, latency: 50 ms, memory: "
            "1 GiB}\n"
            "    fast: {compute: 1 GFLOPS, up: 20 Mbps, down: 50 Mbps, latency: 10 ms, memory: "
            "4 GiB}\n"
            "    %s\n  mix: %s\n",
            profile, mix);
    fclose(f);
}

/* A share of 0.05 of 8 clients rounds to none; a trace that is off from the start is never
 * online (for ever, or before max_time when it comes on later). */
static void test_share_and_offline(void)
{
    char path[128], trace[128], args[512], *o, *e;
    snprintf(path, sizeof path, "%s/s.yaml", dir);
    write_scenario(path, "odd: {base: laptop}",
                   "[{profile: slow, share: 0.5}, {profile: fast, share: 0.45}, "
                   "{profile: odd, share: 0.05}]");
    snprintf(args, sizeof args, "check %s", path);
    CHECK(fedsim(args, &o, &e) == 0);
    CHECK_MSG(strstr(o, "# warning: devices.mix gives odd a share of 0.05, which rounds to 0 of "
                        "8 clients") &&
                      warnings(o) == 1,
              "zero share: %s", o);
    free(o), free(e);
    /* off from 0, on at 1 h and for ever after (no loop) */
    snprintf(trace, sizeof trace, "%s/off.trace", dir);
    FILE *f = fopen(trace, "w");
    fprintf(f, "0 s 0\n1 h 1\n");
    fclose(f);
    char prof[256];
    snprintf(prof, sizeof prof, "late: {base: laptop, availability: {kind: trace, file: %s}}",
             trace);
    write_scenario(path, prof,
                   "[{profile: slow, share: 0.5}, {profile: fast, share: 0.25}, "
                   "{profile: late, share: 0.25}]");
    CHECK(fedsim(args, &o, &e) == 0);
    CHECK_MSG(warnings(o) == 0, "comes on at 1 h, no max_time: no warning: %s", o);
    free(o), free(e);
    snprintf(args, sizeof args, "check %s --set max_time=30min", path);
    CHECK(fedsim(args, &o, &e) == 0);
    CHECK_MSG(strstr(o, "# warning: 2 of 8 clients (late) are never online before max_time "
                        "30.0 min") &&
                      warnings(o) == 1,
              "max_time 30 min: %s", o);
    free(o), free(e);
    snprintf(args, sizeof args, "check %s --set max_time=2h", path);
    CHECK(fedsim(args, &o, &e) == 0);
    CHECK_MSG(warnings(o) == 0, "max_time 2 h: no warning: %s", o);
    free(o), free(e);
}

/* --strict: check prints its warnings and exits 2; run prints them on stderr and runs nothing;
 * without it run warns and runs. */
static void test_strict_and_run(void)
{
    char args[512], out[128], *o, *e;
    const char *dl = "scenarios/tiny.yaml --set federation.deadline=5.12s";
    snprintf(args, sizeof args, "check %s --strict", dl);
    CHECK(fedsim(args, &o, &e) == 2);
    CHECK_MSG(strstr(o, "# warning: 2 of 8 clients (slow)") && strstr(e, "--strict"),
              "check --strict: %s%s", o, e);
    free(o), free(e);
    CHECK(fedsim("check scenarios/tiny.yaml --strict", &o, &e) == 0);
    free(o), free(e);
    snprintf(out, sizeof out, "%s/strict", dir);
    snprintf(args, sizeof args, "run %s --cost-only -q --plots none --out %s --strict", dl, out);
    CHECK(fedsim(args, &o, &e) == 2);
    CHECK_MSG(strstr(e, "fedsim: warning: 2 of 8 clients (slow) need 5.13 s to 5.44 s per job") &&
                      strstr(e, "nothing was run"),
              "run --strict: %s", e);
    char p[200];
    snprintf(p, sizeof p, "%s/scenario.yaml", out);
    CHECK_MSG(!test_readable(p), "run --strict wrote no run folder");
    free(o), free(e);
    snprintf(args, sizeof args, "run %s --cost-only -q --plots none --out %s --set rounds=1", dl,
             out);
    CHECK(fedsim(args, &o, &e) == 0);
    CHECK_MSG(strstr(e, "fedsim: warning: 2 of 8 clients (slow) need 5.13 s to 5.44 s per job"),
              "run warns: %s", e);
    free(o), free(e);
}

/* The named column of clients.tsv row `row` (0-based) as an integer; -1 when missing. */
static long column(const char *tsv, const char *name, int row)
{
    const char *line = tsv;
    int col = -1, i = 0;
    for (const char *p = line; *p && *p != '\n'; i++) {
        size_t w = strcspn(p, "\t\n");
        if (w == strlen(name) && !strncmp(p, name, w)) col = i;
        p += w;
        if (*p == '\t') p++;
    }
    if (col < 0) return -1;
    for (int r = -1; r < row; r++) {
        line = strchr(line, '\n');
        if (!line) return -1;
        line++;
    }
    for (i = 0; i < col; i++) {
        line += strcspn(line, "\t\n");
        if (*line != '\t') return -1;
        line++;
    }
    return atol(line);
}

/* A tight deadline over 20 rounds: a slow client's update arrives after its round closed. Its
 * row counts it arrived and late, not aggregated; every row's aggregated is arrived − late (no
 * round is cut short), and their sum is metrics.tsv's participants summed. */
static void test_clients_columns(void)
{
    char args[512], out[128], p[200], *o, *e;
    snprintf(out, sizeof out, "%s/late", dir);
    snprintf(args, sizeof args,
             "run scenarios/tiny.yaml --set rounds=20 --set federation.deadline=1s --set "
             "federation.over_commit=1.5 --cost-only -q --plots none --workers 0 --out %s",
             out);
    CHECK(fedsim(args, &o, &e) == 0);
    free(o), free(e);
    snprintf(p, sizeof p, "%s/clients.tsv", out);
    size_t n;
    char *tsv = test_slurp(p, &n);
    CHECK(tsv != NULL);
    if (!tsv) return;
    CHECK_MSG(column(tsv, "arrived", 0) >= 0 && column(tsv, "aggregated", 0) >= 0 &&
                      column(tsv, "late", 0) >= 0 && column(tsv, "lost", 0) >= 0,
              "clients.tsv has arrived, aggregated, late and lost: %.200s", tsv);
    long late = 0, agg = 0, late_only = 0;
    for (int r = 0; r < 8; r++) {
        long a = column(tsv, "arrived", r), g = column(tsv, "aggregated", r),
             l = column(tsv, "late", r);
        CHECK_MSG(a >= 0 && g == a - l, "row %d: aggregated %ld = arrived %ld - late %ld", r, g, a,
                  l);
        late += l, agg += g;
        late_only += l > 0 && g == 0;
    }
    CHECK_MSG(late > 0 && late_only > 0, "a client whose updates were all late (%ld late)", late);
    free(tsv);
    snprintf(p, sizeof p, "%s/metrics.tsv", out);
    char *m = test_slurp(p, &n);
    CHECK(m != NULL);
    if (!m) return;
    const char *body = strchr(m, '\n') + 1; /* past the # line: the header row */
    long parts = 0;
    for (int r = 0; r <= 20; r++) /* round 0 (the initial model: none) and the 20 rounds */
        parts += column(body, "participants", r);
    CHECK_MSG(parts == agg, "aggregated sums to %ld, participants to %ld", agg, parts);
    free(m);
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    snprintf(dir, sizeof dir, "/tmp/fedsim-warn-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_deadline();
    test_memory();
    test_share_and_offline();
    test_strict_and_run();
    test_clients_columns();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
