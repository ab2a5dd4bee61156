/* tests/test_plot_figs.c -- what the figures show, read from the gnuplot script a recording
 * gnuplot (a wrapper on PATH that keeps a copy of its input) was sent and from the data files
 * fedsim writes beside the plots (issue 39):
 *   - timeline.tsv names each job's device, the one clients.tsv gives its client; the timeline's
 *     key stands right of the plot (where no number of entries reaches the x axis's label); a
 *     dotted line marks each round of the window where its first job started; each device class
 *     gets a strip colour and a key entry; lost and late marks appear exactly when the window
 *     has such jobs;
 *   - an overlay says which accuracy it plots: the y axis when every curve is the same kind, each
 *     legend when they differ;
 *   - runs that differ only in their seed are drawn as a mean with a band: seed_bands.tsv holds,
 *     per group and axis, the mean, lowest and highest accuracy of the group's runs, which this
 *     test recomputes from their metrics.tsv (each run's curve linear between its evaluations),
 *     only where every run has a curve.
 */
#include "tests/check.h"
#include "tests/files.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static const char *bin;
static char gp_log[128]; /* what the recording gnuplot was sent */
static char path_env[256];

static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A gnuplot on PATH that appends its input to gp_log, then hands it to the real one. */
static int make_recorder(void)
{
    const char *path = getenv("PATH");
    char real[1024] = "";
    for (const char *p = path ? path : ""; *p && !real[0];) {
        size_t n = strcspn(p, ":");
        char c[1024];
        snprintf(c, sizeof c, "%.*s/gnuplot", (int)n, p);
        if (n && !access(c, X_OK)) snprintf(real, sizeof real, "%s", c);
        p += n + (p[n] == ':');
    }
    if (!real[0]) return -1;
    char d[128], script[256];
    snprintf(d, sizeof d, "%s/gp", dir);
    mkdir(d, 0777);
    snprintf(gp_log, sizeof gp_log, "%s/gp.log", dir);
    snprintf(script, sizeof script, "%s/gnuplot", d);
    FILE *f = fopen(script, "w");
    if (!f) return -1;
    fprintf(f, "#!/bin/sh\ntee -a '%s' | exec '%s' \"$@\"\n", gp_log, real);
    if (fclose(f) || chmod(script, 0755)) return -1;
    snprintf(path_env, sizeof path_env, "PATH='%s':\"$PATH\"", d);
    return 0;
}

/* The recorded script from the figure whose output file ends in name (".../timeline.png") to its
 * "unset output" (a fresh string), or NULL. */
static char *figure(const char *name)
{
    size_t len;
    char *log = test_slurp(gp_log, &len), *out = NULL;
    char key[128];
    snprintf(key, sizeof key, "/%s'\n", name);
    char *at = log ? strstr(log, key) : NULL, *next;
    while (at && (next = strstr(at + 1, key))) /* the last drawing of it */
        at = next;
    if (at) {
        char *end = strstr(at, "unset output");
        size_t n = end ? (size_t)(end - at) : strlen(at);
        out = malloc(n + 1);
        memcpy(out, at, n);
        out[n] = 0;
    }
    free(log);
    return out;
}

/* A TSV file's data rows as fields: rows[i][j] point into *text (freed by the caller). */
enum { MAX_ROWS = 4096, MAX_FIELDS = 16 };
static int read_tsv(const char *path, char **text, char *rows[][MAX_FIELDS], int *nf)
{
    size_t len;
    *text = test_slurp(path, &len);
    int n = 0, header = 0;
    for (char *l = *text, *e; l && *l && n < MAX_ROWS; l = e + 1) {
        e = strchr(l, '\n');
        if (!e) break;
        *e = 0;
        if (*l == '#' || !*l) continue;
        if (!header++) continue;
        int k = 0;
        for (char *p = l; p && k < MAX_FIELDS; k++) {
            rows[n][k] = p;
            p = strchr(p, '\t');
            if (p) *p++ = 0;
        }
        nf[n++] = k;
    }
    return n;
}

static void test_timeline(void)
{
    char cmd[4096], p[256];
    snprintf(cmd, sizeof cmd,
             "%s run scenarios/tiny.yaml -q --plots none --out %s/tl --set rounds=8 "
             "--set 'devices.profiles.slow.availability={kind: markov, mean_on: 2 s, mean_off: "
             "2 s}' --set 'federation.deadline=500 ms' --set federation.over_commit=1.5 "
             "--set federation.per_round=3 >/dev/null 2>&1 && %s %s plot %s/tl --plot-window 8 "
             "--out %s/tlp "
             ">/dev/null",
             bin, dir, path_env, bin, dir, dir);
    CHECK(sh(cmd) == 0);
    static char *rows[MAX_ROWS][MAX_FIELDS], *crows[MAX_ROWS][MAX_FIELDS];
    static int nf[MAX_ROWS], cnf[MAX_ROWS];
    char *tt, *ct;
    snprintf(p, sizeof p, "%s/tl/timeline.tsv", dir);
    int n = read_tsv(p, &tt, rows, nf);
    snprintf(p, sizeof p, "%s/tl/clients.tsv", dir);
    int nc = read_tsv(p, &ct, crows, cnf);
    CHECK_MSG(n > 50 && nc == 8, "%d timeline rows, %d clients", n, nc);
    /* every row names its client's device */
    int same = 1, lost = 0, late = 0, rmax = -1;
    for (int i = 0; i < n; i++) {
        int c = atoi(rows[i][0]);
        same &= nf[i] == 7 && c >= 0 && c < nc && !strcmp(rows[i][6], crows[c][1]);
        if (atoi(rows[i][1]) > rmax) rmax = atoi(rows[i][1]);
    }
    CHECK_MSG(same, "timeline.tsv's device column is clients.tsv's device of the row's client");
    char *fig = figure("timeline.png");
    CHECK_MSG(fig != NULL, "the timeline was drawn");
    if (!fig) fig = calloc(1, 1);
    CHECK_MSG(strstr(fig, "set key outside right") && !strstr(fig, "set key at screen"),
              "the timeline's key stands right of the plot");
    /* a line where each round of the window (all 8) began: its first job's start */
    int rmin = rmax - 7;
    double div = NAN;
    const char *dv = strstr(fig, "fedsim_div = ");
    if (dv) div = atof(dv + strlen("fedsim_div = "));
    int lines = 0;
    for (const char *a = strstr(fig, "set arrow from "); a; a = strstr(a + 1, "set arrow from "))
        lines++;
    CHECK_MSG(lines == 8, "%d round lines for rounds %d-%d", lines, rmin, rmax);
    for (int r = rmin; r <= rmax; r++) {
        double first = INFINITY;
        for (int i = 0; i < n; i++)
            if (atoi(rows[i][1]) == r && atof(rows[i][3]) < first) first = atof(rows[i][3]);
        int found = 0;
        for (const char *a = strstr(fig, "set arrow from "); a;
             a = strstr(a + 1, "set arrow from "))
            found |= fabs(atof(a + strlen("set arrow from ")) * div - first) < 1e-9;
        CHECK_MSG(found, "a line where round %d began, at %.9f s", r, first);
        for (int i = 0; i < n; i++) {
            lost += atoi(rows[i][1]) == r && !strcmp(rows[i][5], "lost");
            late += atoi(rows[i][1]) == r && !strcmp(rows[i][5], "late");
        }
    }
    /* a strip colour and key entry per device class */
    const char *const cls[] = {"fast", "slow"};
    for (int k = 0; k < 2; k++) {
        char var[64], title[64];
        snprintf(var, sizeof var, "fedsim_d%d = '%s'", k, cls[k]);
        snprintf(title, sizeof title, "fedsim_t%d = 'device %s'", k, cls[k]);
        CHECK_MSG(strstr(fig, var) && strstr(fig, title) &&
                          strstr(fig, k ? "fedsim_cls(fedsim_d1)" : "fedsim_cls(fedsim_d0)"),
                  "device class %s has its strip", cls[k]);
    }
    CHECK_MSG(!strstr(fig, "fedsim_d2"), "two classes, two strips");
    CHECK_MSG(lost > 0 && late > 0, "the window has lost (%d) and late (%d) jobs", lost, late);
    CHECK_MSG(!strstr(fig, "'lost (went offline)'") == !lost, "lost marked as the window has");
    CHECK_MSG(!strstr(fig, "'late (after its round closed)'") == !late,
              "late marked as the window has");
    free(fig);
    free(tt);
    free(ct);
}

/* Run d's accuracy curve against time (axis 0) or bytes (1): n points (x ascending). */
static int curve(const char *d, int axis, double *x, double *y, int cap)
{
    static char *rows[MAX_ROWS][MAX_FIELDS];
    static int nf[MAX_ROWS];
    char p[512], *t;
    snprintf(p, sizeof p, "%s/metrics.tsv", d);
    int n = read_tsv(p, &t, rows, nf), k = 0;
    /* columns: round sim_time_s bytes_up bytes_down client_flops acc_global ... */
    for (int i = 0; i < n && k < cap; i++) {
        if (isnan(atof(rows[i][5]))) continue;
        x[k] = axis ? atof(rows[i][2]) + atof(rows[i][3]) : atof(rows[i][1]);
        y[k++] = atof(rows[i][5]);
    }
    free(t);
    return k;
}

static double at(const double *x, const double *y, int n, double v)
{
    for (int i = 0; i < n; i++) {
        if (x[i] == v) return y[i];
        if (x[i] > v)
            return i ? y[i - 1] + (y[i] - y[i - 1]) * (v - x[i - 1]) / (x[i] - x[i - 1]) : NAN;
    }
    return NAN;
}

static void test_seed_bands(void)
{
    char cmd[4096], p[256];
    snprintf(cmd, sizeof cmd,
             "%s %s sweep scenarios/tiny.yaml --vary seed=1,2,3 --vary algorithm.lr=0.02,0.05 "
             "--set rounds=6 --set 'federation.deadline=500 ms' -q --out %s/sd >/dev/null 2>&1",
             path_env, bin, dir);
    CHECK(sh(cmd) == 0);
    static char *rows[MAX_ROWS][MAX_FIELDS];
    static int nf[MAX_ROWS];
    /* the blocks: group lr=0.02 time, bytes; lr=0.05 time, bytes (the legend's order) */
    snprintf(p, sizeof p, "%s/sd/seed_bands.tsv", dir);
    size_t len;
    char *text = test_slurp(p, &len);
    CHECK_MSG(text != NULL, "%s written", p);
    int block = 0, checked = 0, bad = 0;
    const char *lr[] = {"0.02", "0.05"};
    for (char *l = text, *e; l && *l; l = e + 1) {
        e = strchr(l, '\n');
        if (!e) break;
        if (*l == '#' || *l == 'x') continue;
        if (*l == '\n') { /* a block ends with two blank lines */
            block++;
            e++;
            continue;
        }
        double x, mean, lo, hi;
        if (sscanf(l, "%lf\t%lf\t%lf\t%lf", &x, &mean, &lo, &hi) != 4) {
            bad++;
            continue;
        }
        int g = block / 2, axis = block % 2;
        double sum = 0, mn = INFINITY, mx = -INFINITY;
        int all = g < 2;
        for (int s = 1; s <= 3 && all; s++) {
            static double cx[256], cy[256];
            char d[256];
            snprintf(d, sizeof d, "%s/sd/seed=%d,algorithm.lr=%s", dir, s, lr[g]);
            int k = curve(d, axis, cx, cy, 256);
            double a = at(cx, cy, k, x);
            all = !isnan(a);
            sum += a, mn = fmin(mn, a), mx = fmax(mx, a);
        }
        int ok = all && fabs(mean - sum / 3) < 2e-9 && fabs(lo - mn) < 2e-9 && fabs(hi - mx) < 2e-9;
        if (!ok && !bad)
            printf("block %d x %g: mean %g lo %g hi %g; recomputed %g %g %g (all %d)\n", block, x,
                   mean, lo, hi, sum / 3, mn, mx, all);
        bad += !ok;
        checked++;
    }
    CHECK_MSG(block == 4 && checked > 20 && !bad,
              "seed_bands.tsv: %d blocks, %d points, %d differ from the runs' curves", block,
              checked, bad);
    free(text);
    (void)rows, (void)nf;
    /* the bars: a group's mean time and bytes to the target over its runs that reached it, the
     * lowest and highest as whiskers; the target is the middle of one group's three best
     * accuracies (the first group whose three differ), so that not every run of it reaches it */
    double target = NAN;
    int split = -1;
    for (int g = 0; g < 2 && split < 0; g++) {
        double best[3];
        for (int s = 0; s < 3; s++) {
            static double cx[256], cy[256];
            char d[256];
            snprintf(d, sizeof d, "%s/sd/seed=%d,algorithm.lr=%s", dir, s + 1, lr[g]);
            int k = curve(d, 0, cx, cy, 256);
            best[s] = 0;
            for (int i = 0; i < k; i++)
                best[s] = fmax(best[s], cy[i]);
        }
        if (best[0] == best[1] || best[1] == best[2] || best[0] == best[2]) continue;
        split = g;
        target = fmax(fmin(best[0], best[1]), fmin(fmax(best[0], best[1]), best[2]));
    }
    CHECK_MSG(split >= 0, "a group whose runs' best accuracies differ (else the test needs another "
                          "scenario)");
    snprintf(cmd, sizeof cmd, "%s %s plot %s/sd/seed=* --target %.9f --out %s/sdp >/dev/null",
             path_env, bin, dir, target, dir);
    CHECK(sh(cmd) == 0);
    char *tt;
    snprintf(p, sizeof p, "%s/sdp/to_target.tsv", dir);
    int nb = read_tsv(p, &tt, rows, nf), good = nb == 2;
    for (int g = 0; g < 2 && good; g++) {
        double v[2][3] = {{0, INFINITY, -INFINITY}, {0, INFINITY, -INFINITY}}; /* mean min max */
        int hit = 0;
        for (int s = 1; s <= 3; s++) {
            static double cx[256], cy[256], bx[256], by[256];
            char d[256];
            snprintf(d, sizeof d, "%s/sd/seed=%d,algorithm.lr=%s", dir, s, lr[g]);
            int k = curve(d, 0, cx, cy, 256);
            curve(d, 1, bx, by, 256);
            for (int i = 0; i < k; i++)
                if (cy[i] >= target) {
                    double x[2] = {cx[i], bx[i]};
                    for (int a = 0; a < 2; a++)
                        v[a][0] += x[a], v[a][1] = fmin(v[a][1], x[a]),
                                         v[a][2] = fmax(v[a][2], x[a]);
                    hit++;
                    break;
                }
        }
        good = nf[g] == 11 && atoi(rows[g][2]) == hit && atoi(rows[g][3]) == 3 &&
               (g != split || (hit >= 1 && hit < 3)); /* some of its runs reach it, not all */
        for (int a = 0; a < 2 && good && hit; a++)
            for (int j = 0; j < 3; j++) {
                double want = j ? v[a][j] : v[a][0] / hit, got = atof(rows[g][4 + 3 * a + j]);
                good &= fabs(got - want) <= (a ? 0.5 : 1e-9);
            }
        if (!good) printf("to_target.tsv bar %d differs from its runs (%d reached)\n", g, hit);
    }
    CHECK_MSG(good, "to_target.tsv: a bar per group of seeds, its mean, lowest and highest");
    free(tt);
    char *fig = figure("acc_time.png");
    CHECK_MSG(fig && strstr(fig, "'algorithm.lr=0.02: mean of 3 seeds'") &&
                      strstr(fig, "'algorithm.lr=0.05: mean of 3 seeds'") &&
                      strstr(fig, "with filledcurves") &&
                      strstr(fig, "set ylabel 'accuracy: global model on the test set'"),
              "the overlay draws each group as its mean in a band, and says which accuracy");
    free(fig);
}

/* Curves of different kinds say which each is: a local-training run (personalized only) beside
 * a FedAvg run (judged by its global model). */
/* links.png: a panel per link of links.tsv, each a data block holding every row of its link,
 * in order, as percent of its capacity (then the load held to the window's end). */
static void test_links(void)
{
    char cmd[4096], p[256];
    snprintf(cmd, sizeof cmd,
             "%s run scenarios/tiny.yaml -q --plots none --out %s/lk --set rounds=3 "
             "--set 'network={server: {up: 2 Mbps, down: 8 Mbps}, groups: [{name: cell, up: 1 "
             "Mbps, devices: [fast]}]}' >/dev/null 2>&1 && %s %s plot %s/lk --out %s/lkp "
             ">/dev/null",
             bin, dir, path_env, bin, dir, dir);
    CHECK(sh(cmd) == 0);
    char *fig = figure("links.png"), *text;
    static char *rows[MAX_ROWS][MAX_FIELDS];
    static int nf[MAX_ROWS];
    snprintf(p, sizeof p, "%s/lk/links.tsv", dir);
    int n = read_tsv(p, &text, rows, nf);
    CHECK_MSG(fig && n > 0, "links.png drawn from %d rows", n);
    static const char *const link[] = {"server.down", "cell.up", "server.up"};
    char want[64];
    snprintf(want, sizeof want, "set multiplot layout 3,1");
    CHECK_MSG(fig && strstr(fig, want), "one panel per link (3)");
    for (int k = 0; fig && k < 3; k++) {
        /* the links in the order of their first rows */
        int first = -1, found = 0;
        for (int i = 0; i < n && first < 0; i++)
            if (!strcmp(rows[i][1], link[k])) first = i;
        int order = 0;
        for (int j = 0; j < 3; j++) {
            int fj = -1;
            for (int i = 0; i < n && fj < 0; i++)
                if (!strcmp(rows[i][1], link[j])) fj = i;
            order += fj >= 0 && fj < first;
        }
        char head[64], title[64];
        snprintf(head, sizeof head, "$fedsim_l%d << EOD\n", order);
        snprintf(title, sizeof title, "fedsim_n%d = '%s (", order, link[k]);
        char *b = strstr(fig, head), *end = b ? strstr(b, "EOD\nfedsim_n") : NULL;
        CHECK_MSG(first >= 0 && b && end && strstr(fig, title), "%s: a panel titled by its name",
                  link[k]);
        if (!b || !end) continue;
        /* every row of the link, in order, among the block's points */
        char *q = b + strlen(head);
        int matched = 0, rows_of = 0;
        for (int i = 0; i < n; i++) {
            if (strcmp(rows[i][1], link[k])) continue;
            rows_of++;
            double t = atof(rows[i][0]), u = 100 * atof(rows[i][2]) / atof(rows[i][3]);
            while (q < end) {
                double pt, pu;
                int ok = sscanf(q, "%lf\t%lf", &pt, &pu) == 2;
                q = strchr(q, '\n') + 1;
                if (ok && fabs(pt - t) <= 1e-9 && fabs(pu - u) <= 1e-9 * (u > 1 ? u : 1)) {
                    matched++;
                    break;
                }
            }
        }
        found = matched == rows_of && rows_of > 0;
        CHECK_MSG(found, "%s: %d of its %d rows in its block", link[k], matched, rows_of);
    }
    free(fig);
    free(text);
}

static void test_mixed_kinds(void)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s run scenarios/tiny.yaml -q --plots none --out %s/loc --set algorithm.name=local "
             ">/dev/null && %s run scenarios/tiny.yaml -q --plots none --out %s/avg "
             "--set name=avg >/dev/null && %s %s plot %s/loc %s/avg --out %s/mix >/dev/null",
             bin, dir, bin, dir, path_env, bin, dir, dir, dir);
    CHECK(sh(cmd) == 0);
    char *fig = figure("mix/acc_time.png");
    CHECK_MSG(fig && strstr(fig, "fedsim_n0 = 'tiny (personalized mean)'") &&
                      strstr(fig, "fedsim_n1 = 'avg (global model)'") &&
                      strstr(fig, "set ylabel 'accuracy (fraction correct)'"),
              "each legend says which accuracy its curve is");
    free(fig);
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fpf-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    if (make_recorder()) {
        printf("no gnuplot on PATH\n");
        CHECK(0);
        return CHECK_DONE();
    }
    test_timeline();
    test_seed_bands();
    test_mixed_kinds();
    test_links();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!check_failed && system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
