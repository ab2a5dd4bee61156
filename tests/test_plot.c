/* tests/test_plot.c -- fedsim's plots end to end through the binary ($FEDSIM_BIN): a tiny run
 * draws valid, non-trivial PNG (and SVG) plots; plotting changes no result (metrics, clients and
 * events byte-identical with --plots none); `fedsim plot` overlays two runs; `fedsim sweep` makes
 * one ordinary run per value, a summary.tsv and overlay plots; `fedsim summary` groups runs that
 * differ only in their seed (-SEED, or a sweep's seed=N); a DM-PFL+ run draws DM-PFL's curve
 * from its acc_base_* columns; a metrics.tsv of more columns than the engine's own (an
 * algorithm's) reads by name; a scenario name and a folder made
 * to inject gnuplot commands run nothing and still get their plots; without gnuplot on PATH a run
 * still succeeds and says how to get plots; a metrics.tsv of nan, inf, garbage or nothing to draw
 * fails naming file:line:column and the column (issue 37). */
#include "tests/check.h"
#include "tests/files.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static const char *bin;

static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int exists(const char *path)
{
    struct stat st;
    return !stat(path, &st);
}

/* DIR/NAME is a real picture: the format's magic and more than a few KB. */
static void check_picture(const char *d, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", d, name);
    size_t len = 0;
    char *p = test_slurp(path, &len);
    int ok = p && len > 4000;
    if (ok && strstr(name, ".png")) ok = !memcmp(p, "\x89PNG\r\n\x1a\n", 8);
    if (ok && strstr(name, ".svg")) ok = !strncmp(p, "<?xml", 5) || !strncmp(p, "<svg", 4);
    CHECK_MSG(ok, "%s is a valid picture (%zu bytes)", path, len);
    free(p);
}

/* Data rows of a TSV: lines that are neither comments nor the header. */
static int data_rows(const char *path)
{
    size_t len;
    char *p = test_slurp(path, &len);
    if (!p) return -1;
    int n = 0, header = 0;
    for (char *l = p; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        if (*l == '#' || *l == '\n') continue;
        if (!header++) continue;
        n++;
    }
    free(p);
    return n;
}

static void test_run_plots(void)
{
    char cmd[1024], a[128], n[128], s[128], pa[256], pn[256];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(n, sizeof n, "%s/n", dir);
    snprintf(s, sizeof s, "%s/s", dir);
    snprintf(cmd, sizeof cmd, "%s run scenarios/tiny.yaml -q --out %s >/dev/null", bin, a);
    CHECK(sh(cmd) == 0);
    check_picture(a, "acc_time.png");
    check_picture(a, "acc_bytes.png");
    check_picture(a, "timeline.png");
    CHECK(data_rows(strcat(strcpy(pa, a), "/timeline.tsv")) == 60); /* 20 jobs, 3 phases */
    snprintf(cmd, sizeof cmd, "%s run scenarios/tiny.yaml -q --plots none --out %s >/dev/null", bin,
             n);
    CHECK(sh(cmd) == 0);
    snprintf(pn, sizeof pn, "%s/acc_time.png", n);
    CHECK_MSG(!exists(pn), "--plots none draws nothing");
    static const char *const outs[] = {"metrics.tsv", "clients.tsv", "events.msgpack",
                                       "timeline.tsv"};
    for (int i = 0; i < 4; i++) {
        snprintf(pa, sizeof pa, "%s/%s", a, outs[i]);
        snprintf(pn, sizeof pn, "%s/%s", n, outs[i]);
        CHECK_MSG(test_same_file(pa, pn), "%s identical with and without plots", outs[i]);
    }
    snprintf(cmd, sizeof cmd,
             "%s run scenarios/tiny.yaml -q --plots svg --plot-logx --out %s >/dev/null", bin, s);
    CHECK(sh(cmd) == 0);
    check_picture(s, "acc_time.svg");
    check_picture(s, "acc_bytes.svg");
    check_picture(s, "timeline.svg");
    /* overlay of two runs (another seed, so the curves differ) */
    snprintf(cmd, sizeof cmd,
             "%s run scenarios/tiny.yaml -q --seed 3 --plots none --out %s/b >/dev/null && "
             "%s plot %s %s/b --target 0.3 --out %s/ov >/dev/null",
             bin, dir, bin, a, dir, dir);
    CHECK(sh(cmd) == 0);
    snprintf(pa, sizeof pa, "%s/ov", dir);
    check_picture(pa, "acc_time.png");
    check_picture(pa, "acc_bytes.png");
    check_picture(pa, "to_target.png");
    CHECK(data_rows(strcat(pa, "/to_target.tsv")) == 2);
    /* redraw one run elsewhere; a folder that is not a run fails with a message */
    snprintf(cmd, sizeof cmd, "%s plot %s --out %s/re >/dev/null", bin, a, dir);
    CHECK(sh(cmd) == 0);
    snprintf(pa, sizeof pa, "%s/re", dir);
    check_picture(pa, "timeline.png");
    snprintf(cmd, sizeof cmd, "%s plot %s/nonexistent 2>/dev/null", bin, dir);
    CHECK(sh(cmd) == 2);
    /* summary's final accuracy: the global model's by default, the personalized mean with --acc
     * personalized (tiny.yaml's FedAvg logs both), each the last row's */
    double fin[2] = {-1, -1}, last[2] = {-2, -2};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s summary %s --acc %s > %s/sum%d.txt", bin, a,
                 k ? "personalized" : "global", dir, k);
        CHECK(sh(cmd) == 0);
        snprintf(pa, sizeof pa, "%s/sum%d.txt", dir, k);
        size_t len;
        char *t = test_slurp(pa, &len), *row = t ? strstr(t, a) : NULL;
        if (row) sscanf(row + strlen(a), "%lf", &fin[k]);
        free(t);
    }
    snprintf(pa, sizeof pa, "%s/metrics.tsv", a);
    size_t len;
    char *t = test_slurp(pa, &len);
    char *lastrow = t ? strrchr(t, '\n') : NULL;
    if (lastrow) {
        *lastrow = 0;
        lastrow = strrchr(t, '\n');
        sscanf(lastrow ? lastrow + 1 : t, "%*s %*s %*s %*s %*s %lf %*s %lf", &last[0], &last[1]);
    }
    free(t);
    CHECK_MSG(fabs(fin[0] - last[0]) < 1e-4 && fabs(fin[1] - last[1]) < 1e-4 && last[0] != last[1],
              "summary --acc global/personalized: %g/%g, metrics.tsv %g/%g", fin[0], fin[1],
              last[0], last[1]);
    snprintf(cmd, sizeof cmd, "%s summary %s --acc best 2>/dev/null", bin, a);
    CHECK(sh(cmd) == 2);
}

static void test_sweep(void)
{
    char cmd[1024], p[256], q[256];
    snprintf(cmd, sizeof cmd,
             "%s sweep scenarios/tiny.yaml --vary rounds=2,3 --target 0.3 -q --out %s/sw "
             ">/dev/null && %s run scenarios/tiny.yaml --set rounds=2 -q --plots none --out "
             "%s/r2 >/dev/null",
             bin, dir, bin, dir);
    CHECK(sh(cmd) == 0);
    for (int r = 2; r <= 3; r++) {
        snprintf(p, sizeof p, "%s/sw/rounds=%d/metrics.tsv", dir, r);
        CHECK_MSG(data_rows(p) == r + 1, "%s has %d rows (round 0 too)", p, r + 1);
    }
    snprintf(p, sizeof p, "%s/sw/rounds=2/metrics.tsv", dir);
    snprintf(q, sizeof q, "%s/r2/metrics.tsv", dir);
    CHECK_MSG(test_same_file(p, q), "a sweep point is byte-identical to the plain run");
    snprintf(p, sizeof p, "%s/sw/rounds=2/events.msgpack", dir);
    snprintf(q, sizeof q, "%s/r2/events.msgpack", dir);
    CHECK(test_same_file(p, q));
    snprintf(p, sizeof p, "%s/sw/summary.tsv", dir);
    CHECK(data_rows(p) == 2);
    size_t len;
    char *t = test_slurp(p, &len);
    CHECK(t && strstr(t, "rounds=2\t") && strstr(t, "rounds=3\t"));
    free(t);
    snprintf(p, sizeof p, "%s/sw", dir);
    check_picture(p, "acc_time.png");
    check_picture(p, "acc_bytes.png");
    check_picture(p, "to_target.png");
    snprintf(cmd, sizeof cmd, "%s sweep scenarios/tiny.yaml --out %s/sw2 2>/dev/null", bin, dir);
    CHECK_MSG(sh(cmd) == 2, "a sweep without --vary is an error");
}

/* The k-th (0-based) blank-separated token after name in text (a summary row or group line), as
 * a number, or NAN. */
static double token_after(const char *text, const char *name, int k)
{
    const char *at = text ? strstr(text, name) : NULL;
    if (!at) return NAN;
    at += strlen(name);
    for (int i = 0; i < k; i++) {
        at += strspn(at, " \t");
        at += strcspn(at, " \t\n");
    }
    char *end;
    double v = strtod(at, &end);
    return end == at ? NAN : v;
}

/* summary groups runs whose paths differ only in their seed: a trailing -SEED, or a sweep point's
 * seed=N item (another sweep's seed=* points, another parent's -SEED folders are other groups). */
static void test_summary_groups(void)
{
    char cmd[2048], p[256];
    snprintf(cmd, sizeof cmd,
             "%s sweep scenarios/tiny.yaml --vary seed=1,2 --vary rounds=2,3 -q --plots none "
             "--workers 0 --out %s/sg >/dev/null && cp -r %s/sg/seed=1,rounds=2 %s/run-1 && "
             "cp -r %s/sg/seed=2,rounds=2 %s/run-2 && mkdir -p %s/b && cp -r %s/run-1 %s/b && "
             "%s summary --raw %s/sg/*/ %s/run-1 %s/run-2 %s/b/run-1 > %s/sg.txt",
             bin, dir, dir, dir, dir, dir, dir, dir, dir, bin, dir, dir, dir, dir, dir);
    CHECK(sh(cmd) == 0);
    snprintf(p, sizeof p, "%s/sg.txt", dir);
    size_t len;
    char *t = test_slurp(p, &len);
    double f1 = token_after(t, "seed=1,rounds=2/", 0), f2 = token_after(t, "seed=2,rounds=2/", 0);
    /* groups are named by their paths; the same folder name under another parent (b/run-1) is
     * another group */
    char groups[4][256];
    snprintf(groups[0], sizeof groups[0], "\n%s/sg/seed=*,rounds=2 ", dir);
    snprintf(groups[1], sizeof groups[1], "\n%s/sg/seed=*,rounds=3 ", dir);
    snprintf(groups[2], sizeof groups[2], "\n%s/run-* ", dir);
    snprintf(groups[3], sizeof groups[3], "\n%s/b/run-* ", dir);
    const char *gt = t ? strstr(t, "\ngroup") : NULL; /* the group lines (rows have "run" too) */
    for (int g = 0; g < 4; g++) {
        double runs = token_after(gt, groups[g], 0), mean = token_after(gt, groups[g], 1);
        CHECK_MSG(runs == (g == 3 ? 1 : 2), "summary: group '%s' has %d runs (%g)", groups[g] + 1,
                  g == 3 ? 1 : 2, runs);
        if (g == 0 || g == 2)
            CHECK_MSG(fabs(mean - (f1 + f2) / 2) < 1e-4 && f1 != f2,
                      "summary: group '%s' mean %g of %g and %g", groups[g] + 1, mean, f1, f2);
    }
    CHECK_MSG(gt && !strstr(gt, "seed=1,"), "summary: no group per seed");
    /* a run's flops_total is its last client_flops (final best rounds time bytes bytes_total
     * flops_total) */
    snprintf(p, sizeof p, "%s/sg/seed=1,rounds=2/metrics.tsv", dir);
    char *mt = test_slurp(p, &len);
    double want = NAN;
    for (char *line = mt ? strtok(mt, "\n") : NULL; line; line = strtok(NULL, "\n"))
        if (line[0] != '#') sscanf(line, "%*s %*s %*s %*s %lf", &want); /* the last row's */
    double got = token_after(t, "seed=1,rounds=2/", 6);
    CHECK_MSG(want > 0 && fabs(got - want) <= 1e-3 * want, "summary flops_total %g, metrics %g",
              got, want);
    free(mt);
    /* best_round: the first round at the run's best accuracy (here a tie, both before the end) */
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/peak && printf '# fedsim run peak seed=1 algorithm=fedavg clients=2\\n"
             "round\\tsim_time_s\\tbytes_up\\tbytes_down\\tclient_flops\\tacc_global\\tloss_"
             "global\\n"
             "10\\t1\\t1\\t1\\t1\\t0.5\\t1\\n20\\t2\\t2\\t2\\t2\\t0.8\\t1\\n"
             "30\\t3\\t3\\t3\\t3\\t0.7\\t1\\n40\\t4\\t4\\t4\\t4\\t0.8\\t1\\n"
             "50\\t5\\t5\\t5\\t5\\t0.75\\t1\\n' >%s/peak/metrics.tsv && %s summary --raw %s/peak "
             ">%s/peak.txt",
             dir, dir, bin, dir, dir);
    CHECK(sh(cmd) == 0);
    snprintf(p, sizeof p, "%s/peak.txt", dir);
    char *pt = test_slurp(p, &len);
    CHECK_MSG(token_after(pt, "/peak", 0) == 0.75 && token_after(pt, "/peak", 1) == 0.8 &&
                      token_after(pt, "/peak", 7) == 20,
              "summary: final 0.75, best 0.8 first at round 20: %s", pt ? pt : "");
    CHECK_MSG(isnan(token_after(pt, "/peak", 8)), "summary: no at_val without acc_val_mean");
    free(pt);
    /* at_val: the accuracy at the first evaluation with the best validation accuracy (round 30,
     * tied at round 50), which is neither the best nor the final one */
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/vpeak && printf '# fedsim run vpeak seed=1 algorithm=fedavg clients=2\\n"
             "round\\tsim_time_s\\tbytes_up\\tbytes_down\\tclient_flops\\tacc_global\\t"
             "acc_pers_mean\\tacc_val_mean\\n"
             "10\\t1\\t1\\t1\\t1\\t0.1\\t0.5\\t0.6\\n20\\t2\\t2\\t2\\t2\\t0.1\\t0.8\\t0.7\\n"
             "30\\t3\\t3\\t3\\t3\\t0.1\\t0.7\\t0.9\\n40\\t4\\t4\\t4\\t4\\t0.1\\t0.8\\t0.85\\n"
             "50\\t5\\t5\\t5\\t5\\t0.1\\t0.75\\t0.9\\n' >%s/vpeak/metrics.tsv && "
             "%s summary --raw %s/vpeak --acc personalized >%s/vpeak.txt",
             dir, dir, bin, dir, dir);
    CHECK(sh(cmd) == 0);
    snprintf(p, sizeof p, "%s/vpeak.txt", dir);
    pt = test_slurp(p, &len);
    CHECK_MSG(token_after(pt, "/vpeak", 1) == 0.8 && token_after(pt, "/vpeak", 8) == 0.7 &&
                      token_after(pt, "/vpeak", 9) == 30,
              "summary: at_val 0.7 at round 30 (best 0.8): %s", pt ? pt : "");
    free(pt);
    free(t);
}

/* summary over a sweep folder's glob: points in numeric order (a shell sorts rounds=10 before
 * rounds=5), the folder's summary.tsv skipped with a note, time and bytes in human units, plain
 * numbers with --raw. */
static void test_summary_order(void)
{
    char cmd[2048], p[256];
    size_t len;
    int r[3] = {10, 20, 5};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd,
                 "mkdir -p %s/so/rounds=%d && printf '# fedsim run so seed=1 algorithm=fedavg "
                 "clients=2\\nround\\tsim_time_s\\tbytes_up\\tbytes_down\\tclient_flops\\t"
                 "acc_global\\n1\\t90\\t1048576\\t2097152\\t1\\t0.8\\n' "
                 ">%s/so/rounds=%d/metrics.tsv",
                 dir, r[i], dir, r[i]);
        CHECK(sh(cmd) == 0);
    }
    for (int raw = 0; raw < 2; raw++) {
        snprintf(cmd, sizeof cmd,
                 "touch %s/so/summary.tsv && %s summary %s %s/so/* >%s/so.txt 2>%s/so.err", dir,
                 bin, raw ? "--raw" : "", dir, dir, dir);
        CHECK(sh(cmd) == 0);
        snprintf(p, sizeof p, "%s/so.txt", dir);
        char *t = test_slurp(p, &len);
        snprintf(p, sizeof p, "%s/so.err", dir);
        char *e = test_slurp(p, &len);
        const char *a = t ? strstr(t, "rounds=5 ") : NULL, *b = t ? strstr(t, "rounds=10 ") : NULL,
                   *c = t ? strstr(t, "rounds=20 ") : NULL;
        CHECK_MSG(a && b && c && a < b && b < c, "summary rows in numeric order: %s", t ? t : "");
        snprintf(p, sizeof p, "skipped %s/so/summary.tsv: not a run folder (no metrics.tsv)\n",
                 dir);
        CHECK_MSG(e && strstr(e, p), "summary skips the sweep's files with a note: %s", e ? e : "");
        /* reached 0.7 at 90 s with 3 MiB; the run's 3 MiB in total */
        const char *want = raw ? "   90.000        3145728        3145728 "
                               : "   1.50 min       3.00 MiB       3.00 MiB ";
        CHECK_MSG(a && strstr(a, want), "summary%s: '%s' in %s", raw ? " --raw" : "", want,
                  t ? t : "");
        free(t);
        free(e);
    }
    snprintf(cmd, sizeof cmd, "%s summary %s/so/summary.tsv 2>/dev/null", bin, dir);
    CHECK_MSG(sh(cmd) == 2, "summary of no run folder is an error");
    /* round 0 is the initial model: a target it meets takes 0 rounds, 0 s and 0 bytes; one met
     * after the first aggregation takes 1 round (the row's round, not its index) */
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/r0 && printf '# fedsim run r0 seed=1 algorithm=fedavg clients=2\\n"
             "round\\tsim_time_s\\tbytes_up\\tbytes_down\\tclient_flops\\tacc_global\\n"
             "0\\t0\\t0\\t0\\t0\\t0.5\\n1\\t4\\t10\\t10\\t1\\t0.8\\n' "
             ">%s/r0/metrics.tsv",
             dir, dir);
    CHECK(sh(cmd) == 0);
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s summary --raw --target %s %s/r0 >%s/r0.txt", bin,
                 k ? "0.7" : "0.4", dir, dir);
        CHECK(sh(cmd) == 0);
        snprintf(p, sizeof p, "%s/r0.txt", dir);
        char *t = test_slurp(p, &len);
        double rd = token_after(t, "/r0 ", 2), ts = token_after(t, "/r0 ", 3),
               bs = token_after(t, "/r0 ", 4);
        CHECK_MSG(k ? rd == 1 && ts == 4 && bs == 20 : rd == 0 && ts == 0 && bs == 0,
                  "target %s: rounds %g, %g s, %g bytes: %s", k ? "0.7" : "0.4", rd, ts, bs,
                  t ? t : "");
        free(t);
    }
}

/* A run whose method evaluates over another's training (DM-PFL+ over DM-PFL) draws its base's
 * curve too: by personalized accuracy the overlay has a "[base dmpfl]" curve whose final
 * accuracy is the DM-PFL run's own; by the global model, one curve per run. */
static void test_base_curves(void)
{
    char cmd[1024], plus[160], base[160], out[160], path[200];
    snprintf(plus, sizeof plus, "%s/bplus", dir);
    snprintf(base, sizeof base, "%s/bbase", dir);
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s run scenarios/tiny.yaml --set algorithm.name=%s -q --workers 0 --out %s "
                 "--plots %s > /dev/null",
                 bin, k ? "dmpfl" : "dmpfl+", k ? base : plus, k ? "none" : "png");
        CHECK(sh(cmd) == 0);
    }
    check_picture(plus, "acc_time.png");
    for (int g = 0; g < 2; g++) {
        snprintf(out, sizeof out, "%s/bover%d", dir, g);
        snprintf(cmd, sizeof cmd, "%s plot %s %s --out %s --target 0.3 %s > /dev/null", bin, plus,
                 base, out, g ? "" : "--acc personalized");
        CHECK(sh(cmd) == 0);
        snprintf(path, sizeof path, "%s/to_target.tsv", out);
        CHECK_MSG(data_rows(path) == (g ? 2 : 3), "overlay by %s: %d curves",
                  g ? "global" : "personalized", data_rows(path));
        if (g) continue;
        size_t len;
        char *t = test_slurp(path, &len), *b = t ? strstr(t, "\n1\tbplus [base dmpfl]\t") : NULL,
             *own = t ? strstr(t, "\n2\tbbase\t") : NULL;
        for (char *l = t; l && *l; l++) /* lines end where their last field does */
            if (*l == '\n') *l = 0;
        const char *fb = b ? strrchr(b + 1, '\t') : NULL, *fo = own ? strrchr(own + 1, '\t') : NULL;
        CHECK_MSG(fb && fo && !strcmp(fb, fo),
                  "the base curve ends where DM-PFL's run does: %s / %s", fb ? fb : "-",
                  fo ? fo : "-");
        free(t);
    }
}

/* A scenario name built to break out of gnuplot strings is refused (a name is a file name, see
 * test_sim_cli), and a run folder built to break out of them runs nothing. */
static void test_injection(void)
{
    char path[256], cmd[2048], out[256];
    size_t len;
    char *tiny = test_slurp("scenarios/tiny.yaml", &len);
    CHECK(tiny != NULL);
    if (!tiny) return;
    snprintf(path, sizeof path, "%s/evil.yaml", dir);
    FILE *f = fopen(path, "w");
    /* YAML double-quoted: \" is a quote; ' and ` are themselves */
    fprintf(f,
            "name: \"x\\\"; system \\\"touch %s/p1\\\"; x'; system 'touch %s/p2'; "
            "print `touch %s/p3` @x\"\n",
            dir, dir, dir);
    char *body = strstr(tiny, "seed:");
    fputs(body ? body : tiny, f);
    fclose(f);
    free(tiny);
    snprintf(out, sizeof out, "%s/q'o\\\"; system 'touch %s/p4", dir, dir);
    snprintf(cmd, sizeof cmd, "%s run %s -q --out \"%s\" 2>/dev/null", bin, path, out);
    CHECK_MSG(sh(cmd) == 2, "the name is refused");
    snprintf(cmd, sizeof cmd, "%s run scenarios/tiny.yaml -q --out \"%s\" >/dev/null", bin, out);
    CHECK(sh(cmd) == 0);
    for (int i = 1; i <= 4; i++) {
        snprintf(path, sizeof path, "%s/p%d", dir, i);
        CHECK_MSG(!exists(path), "gnuplot ran an injected command (%s exists)", path);
    }
    /* the shell took \" as " */
    char real[256];
    snprintf(real, sizeof real, "%s/q'o\"; system 'touch %s/p4", dir, dir);
    check_picture(real, "acc_time.png");
    check_picture(real, "timeline.png");
}

static void test_no_gnuplot(void)
{
    char cmd[1024], p[256];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/empty && PATH=%s/empty %s run scenarios/tiny.yaml -q "
             "--out %s/np >/dev/null 2>%s/np.err",
             dir, dir, bin, dir, dir);
    CHECK_MSG(sh(cmd) == 0, "a run without gnuplot succeeds");
    snprintf(p, sizeof p, "%s/np/metrics.tsv", dir);
    CHECK(data_rows(p) == 6); /* rounds 0..5 */
    snprintf(p, sizeof p, "%s/np.err", dir);
    size_t len;
    char *e = test_slurp(p, &len);
    CHECK_MSG(e && strstr(e, "gnuplot-nox") && !strchr(strchr(e, '\n') + 1, '\n'),
              "one line says how to get plots: '%s'", e ? e : "");
    free(e);
}

/* DIR/bad/metrics.tsv: the comment and header lines of run a's, then one row whose every field
 * is `value`, but for the columns named in finite (comma-separated), which get 1. */
static void bad_metrics(const char *a, const char *value, const char *finite)
{
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.tsv", a);
    size_t len;
    char *t = test_slurp(path, &len);
    char *head = t ? strchr(t, '\n') : NULL, *end = head ? strchr(head + 1, '\n') : NULL;
    snprintf(path, sizeof path, "%s/bad", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/bad/metrics.tsv", dir);
    FILE *f = fopen(path, "w");
    if (!f || !end) {
        CHECK_MSG(0, "cannot make %s", path);
        if (f) fclose(f);
        free(t);
        return;
    }
    *end = 0;
    fprintf(f, "%s\n", t);
    for (char *c = head + 1, *next; c; c = next) {
        next = strchr(c, '\t');
        size_t n = next ? (size_t)(next - c) : strlen(c);
        char name[64];
        snprintf(name, sizeof name, ",%.*s,", (int)n, c);
        char list[128];
        snprintf(list, sizeof list, ",%s,", finite);
        fprintf(f, "%s%s", strstr(list, name) ? "1" : value, next ? "\t" : "\n");
        if (next) next++;
    }
    fclose(f);
    free(t);
}

/* `fedsim plot` on a metrics.tsv it cannot draw fails naming what is wrong, and never says it
 * drew plots (it did, and drew none). */
static void test_bad_metrics(void)
{
    char a[128], cmd[1024], out[256], bad[160];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    snprintf(out, sizeof out, "%s/bad.txt", dir);
    static const struct {
        const char *value, *finite, *want;
    } cases[] = {
            {"nan", "", "metrics.tsv:3:1: round: 'nan' is not a finite number"},
            {"inf", "round", "metrics.tsv:3:3: sim_time_s: 'inf' is not a finite number"},
            {"x1y", "", "metrics.tsv:3:1: round: 'x1y' is not a number"},
            {"7", "round,sim_time_s,bytes_up,bytes_down", "acc_global: '7' is not an accuracy"},
            /* numbers, but no accuracy to draw and no timeline.tsv */
            {"nan", "round,sim_time_s,bytes_up,bytes_down,client_flops", "nothing to plot"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bad_metrics(a, cases[i].value, cases[i].finite);
        snprintf(cmd, sizeof cmd, "%s plot %s >%s 2>&1", bin, bad, out);
        int rc = sh(cmd);
        size_t len;
        char *t = test_slurp(out, &len);
        CHECK_MSG(rc == 2 && t && strstr(t, cases[i].want) && !strstr(t, "plots in"),
                  "plot of a metrics.tsv of %s: exit %d, want '%s': %s", cases[i].value, rc,
                  cases[i].want, t ? t : "");
        free(t);
    }
}

/* A run whose metrics.tsv has more columns than 32 (every eval.shift's and the base evaluation's,
 * an algorithm's own, then acc_val_mean: run a's rows, 48 more columns, and a validation
 * accuracy rising to the last row) plots, and summarizes as run a with that validation curve
 * does: columns are found by name wherever they are, and every one is checked. */
static void test_wide_metrics(void)
{
    char a[128], path[256], cmd[1024];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(path, sizeof path, "%s/metrics.tsv", a);
    size_t len;
    char *t = test_slurp(path, &len);
    snprintf(path, sizeof path, "%s/wide", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/wide/metrics.tsv", dir);
    FILE *f = fopen(path, "w");
    int lines = 0;
    for (char *l = t, *end; f && l && (end = strchr(l, '\n')); l = end + 1, lines++) {
        fprintf(f, "%.*s", (int)(end - l), l);
        for (int i = 0; *l != '#' && i < 49; i++)
            if (lines == 1)
                fprintf(f, i < 48 ? "\tacc_own_%d" : "\tacc_val_mean", i);
            else
                fprintf(f, "\t%s", i == 48 ? (lines == 2 ? "0.1" : "0.5") : i % 2 ? "nan" : "0.25");
        fprintf(f, "\n");
    }
    CHECK_MSG(f && lines > 3, "made %s (%d lines)", path, lines);
    if (f) fclose(f);
    free(t);
    /* final accuracy (token 0), at_val (8: the accuracy at the first best validation) and
     * val_round (9): the validation accuracy is best from the second row (round 1) on */
    char *s[2];
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s summary --raw %s%s --acc personalized >%s/wide%d.txt 2>&1",
                 bin, dir, k ? "/wide" : "/a", dir, k);
        int rc = sh(cmd);
        snprintf(path, sizeof path, "%s/wide%d.txt", dir, k);
        s[k] = test_slurp(path, &len);
        CHECK_MSG(rc == 0, "summary of %s: exit %d: %s", k ? "wide" : "a", rc, s[k] ? s[k] : "");
    }
    double fin = token_after(s[0], "/a", 0), wfin = token_after(s[1], "/wide", 0);
    CHECK_MSG(fin > 0 && wfin == fin && isnan(token_after(s[0], "/a", 8)) &&
                      token_after(s[1], "/wide", 9) == 1 && token_after(s[1], "/wide", 8) > 0,
              "summary: wide's final accuracy %g is a's %g; its at_val is round 1's: %s", wfin, fin,
              s[1] ? s[1] : "");
    free(s[0]);
    free(s[1]);
    snprintf(cmd, sizeof cmd, "%s plot %s/wide --out %s/wide-plots >%s/wide-plot.txt 2>&1", bin,
             dir, dir, dir);
    CHECK(sh(cmd) == 0);
    snprintf(path, sizeof path, "%s/wide-plots", dir);
    check_picture(path, "acc_time.png");
}

/* A run with only the initial model's row (round 0: time 0, 0 bytes), as the live plots first see
 * one: its plots draw without gnuplot's "empty x range" warning (a range of [0:0]). */
static void test_round0_only(void)
{
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "%s/a/metrics.tsv", dir);
    size_t len;
    char *t = test_slurp(path, &len);
    snprintf(path, sizeof path, "%s/zero", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/zero/metrics.tsv", dir);
    FILE *f = fopen(path, "w");
    int lines = 0;
    for (char *l = t, *end; f && l && lines < 3 && (end = strchr(l, '\n')); l = end + 1, lines++)
        fprintf(f, "%.*s\n", (int)(end - l), l);
    CHECK_MSG(f && lines == 3, "made %s (%d lines)", path, lines);
    if (f) fclose(f);
    free(t);
    snprintf(cmd, sizeof cmd, "%s plot %s/zero --out %s/zero-plots >%s/zero-plot.txt 2>&1", bin,
             dir, dir, dir);
    CHECK(sh(cmd) == 0);
    snprintf(path, sizeof path, "%s/zero-plot.txt", dir);
    char *out = test_slurp(path, &len);
    CHECK_MSG(out && !strstr(out, "empty x range"), "plot of round 0 alone: %s", out ? out : "");
    free(out);
    snprintf(path, sizeof path, "%s/zero-plots", dir);
    check_picture(path, "acc_time.png");
    check_picture(path, "acc_bytes.png");
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fp-XXXXXX"); /* short: the evil name must fit 127 bytes */
    if (!mkdtemp(dir)) return 1;
    test_run_plots();
    test_wide_metrics();
    test_round0_only();
    test_bad_metrics();
    test_sweep();
    test_summary_groups();
    test_summary_order();
    test_base_curves();
    test_injection();
    test_no_gnuplot();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!check_failed && system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
