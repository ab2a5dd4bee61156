/* sim/cmd_summary.c -- `fedsim summary`: a table of runs (final and best accuracy, rounds, time
 * and bytes to a target accuracy), then mean ± std over the groups of runs that differ only in
 * their seed. Runs are listed in natural order (a shell sorts sweep/rounds=10 before
 * sweep/rounds=5), times and bytes in human units unless --raw asks for plain numbers.
 */
#include "sim/cmd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Paths in natural order: where both have a number, the numbers are compared by value (so
 * rounds=5 < rounds=10 and lr=0.01 < lr=0.1), the rest byte by byte; equal values written
 * differently fall back to strcmp. */
static int cmp_natural(const void *pa, const void *pb)
{
    const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
    const char *x = a, *y = b;
    while (*x && *y) {
        if (*x >= '0' && *x <= '9' && *y >= '0' && *y <= '9') {
            char *ex, *ey;
            double u = strtod(x, &ex), v = strtod(y, &ey);
            if (u != v) return u < v ? -1 : 1;
            x = ex, y = ey;
        } else if (*x != *y) {
            return (unsigned char)*x < (unsigned char)*y ? -1 : 1;
        } else {
            x++, y++;
        }
    }
    if (*x || *y) return *x ? 1 : -1;
    return strcmp(a, b);
}

/* Whether dir holds a run (its metrics.tsv): a sweep folder's summary.tsv and plots, which a
 * glob of a sweep folder hands over with its points, are skipped with a note; a path that does not
 * exist stays, for the loader to report. */
static int is_run(const char *dir)
{
    struct stat st;
    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.tsv", dir);
    if (stat(dir, &st) || !stat(path, &st)) return 1;
    fprintf(stderr, "fedsim summary: skipped %s: not a run folder (no metrics.tsv)\n", dir);
    return 0;
}

enum { CELL_PLAIN, CELL_TIME, CELL_BYTES }; /* how a mean_std value prints in human units */

static void cell(char *buf, size_t size, double v, int decimals, int kind)
{
    if (kind == CELL_TIME)
        sim_format_time(buf, size, (sim_time)llround(v * 1e9));
    else if (kind == CELL_BYTES)
        sim_format_bytes(buf, size, v);
    else
        snprintf(buf, size, "%.*f", decimals, v);
}

/* mean ± sample std (ddof 1) of v[0..n) into buf; "NA" for the std of one value, "x" for none.
 * kind: CELL_TIME (seconds) and CELL_BYTES print in units, CELL_PLAIN with decimals. */
static void mean_std(char *buf, size_t size, const double *v, int n, int decimals, int kind)
{
    if (n == 0) {
        snprintf(buf, size, "x");
        return;
    }
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    double mean = s / n;
    for (int i = 0; i < n; i++)
        ss += (v[i] - mean) * (v[i] - mean);
    char m[32], d[32] = "NA";
    cell(m, sizeof m, mean, decimals, kind);
    if (n > 1) cell(d, sizeof d, sqrt(ss / (n - 1)), decimals, kind);
    snprintf(buf, size, "%s ± %s", m, d);
}

static int cmd_summary(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    double target = 0.7;
    const char **dirs = sim_xcalloc((size_t)(argc > 0 ? argc : 1), sizeof *dirs);
    int n = 0, rc = 0, pers = 0, raw = 0, named = 0;
    for (int i = 0; i < argc && !rc; i++) {
        if (!strcmp(argv[i], "--raw"))
            raw = 1;
        else if (!strcmp(argv[i], "--target") && i + 1 < argc)
            rc = sim_cli_parse_num(argv[i], argv[i + 1], 0, 1, &target) ? 2 : 0, i++;
        else if (!strcmp(argv[i], "--acc") && i + 1 < argc)
            rc = sim_cli_parse_acc(argv[++i], &pers);
        else if (argv[i][0] != '-') {
            named++;
            if (is_run(argv[i])) dirs[n++] = argv[i];
        } else
            fprintf(stderr, "fedsim summary: unexpected argument '%s'\n", argv[i]), rc = 2;
    }
    if (!rc && named && !n) fprintf(stderr, "fedsim summary: no run folder among them\n"), rc = 2;
    if (rc || !n) {
        free(dirs);
        return SIM_CLI_BAD_ARGS;
    }
    qsort(dirs, (size_t)n, sizeof *dirs, cmp_natural);
    /* rows: each run, and its base's (plot_metrics_load_runs), "RUN [base NAME]" */
    int cap = 2 * n, *run = sim_xcalloc((size_t)cap, sizeof *run), rows = 0;
    plot_metrics *m = sim_xcalloc((size_t)cap, sizeof *m);
    char(*group)[300] = sim_xcalloc((size_t)cap, sizeof *group);
    char(*label)[1200] = sim_xcalloc((size_t)cap, sizeof *label);
    sim_err err = {0};
    if (plot_metrics_load_runs(m, run, &rows, dirs, n, pers, &err)) rc = sim_cli_print_err(&err);
    for (int i = 0; i < rows; i++) {
        char sfx[80] = "";
        if (m[i].is_base) snprintf(sfx, sizeof sfx, " [base %s]", m[i].base);
        plot_seed_group(group[i], sizeof group[i], dirs[run[i]]);
        size_t lg = strlen(group[i]);
        snprintf(group[i] + lg, sizeof group[i] - lg, "%s", sfx);
        snprintf(label[i], sizeof label[i], "%s%s", dirs[run[i]], sfx);
    }
    n = rows;
    if (!rc) {
        printf("# target accuracy %g; rounds = the first round whose evaluation reached it; "
               "accuracy: %s\n",
               target,
               pers ? "personalized mean where a run has it" : "global model where a run has it");
        int w = 24, gw = 24; /* the name columns fit the longest path and group */
        for (int r = 0; r < n; r++) {
            int l = (int)strlen(label[r]), lg = (int)strlen(group[r]);
            w = l > w ? l : w, gw = lg > gw ? lg : gw;
        }
        printf("%-*s %8s %8s %8s %14s %14s %14s %12s %10s %8s %9s\n", w, "run", "final", "best",
               "rounds", raw ? "time_s" : "time", "bytes", "bytes_total", "flops_total",
               "best_round", "at_val", "val_round");
        for (int r = 0; r < n; r++) {
            double best = NAN, best_round = NAN, rd, ts, bs; /* the first round at its best */
            for (int i = 0; i < m[r].n; i++)
                if (!(plot_metrics_acc(&m[r], i) <= best))
                    best = plot_metrics_acc(&m[r], i), best_round = m[r].round[i];
            int ok = plot_metrics_to_target(&m[r], target, &rd, &ts, &bs);
            double total = m[r].n ? m[r].bytes[m[r].n - 1] : 0.0;
            char c1[32] = "x", c2[32] = "x", c3[32] = "x", c6[32];
            if (ok) {
                snprintf(c1, sizeof c1, "%.0f", rd);
                if (raw) {
                    snprintf(c2, sizeof c2, "%.3f", ts);
                    snprintf(c3, sizeof c3, "%.0f", bs);
                } else {
                    cell(c2, sizeof c2, ts, 0, CELL_TIME);
                    cell(c3, sizeof c3, bs, 0, CELL_BYTES);
                }
            }
            if (raw)
                snprintf(c6, sizeof c6, "%.0f", total);
            else
                cell(c6, sizeof c6, total, 0, CELL_BYTES);
            /* the accuracy at the evaluation with the best validation accuracy, and its round */
            int bv = plot_metrics_best_val(&m[r]);
            char c4[32] = "-", c5[32] = "-";
            if (bv >= 0) {
                snprintf(c4, sizeof c4, "%.4f", plot_metrics_acc(&m[r], bv));
                snprintf(c5, sizeof c5, "%.0f", m[r].round[bv]);
            }
            printf("%-*s %8.4f %8.4f %8s %14s %14s %14s %12.4g %10.0f %8s %9s\n", w, label[r],
                   m[r].n ? plot_metrics_acc(&m[r], m[r].n - 1) : NAN, best, c1, c2, c3, c6,
                   m[r].n ? m[r].flops[m[r].n - 1] : 0.0, best_round, c4, c5);
        }
        /* groups: runs whose folders differ only in their seed (plot_seed_group) */
        printf("\n%-*s %5s %22s %22s %22s %26s\n", gw, "group", "runs", "final", "rounds (reached)",
               raw ? "time_s" : "time", "bytes");
        double *fin = sim_xcalloc((size_t)n, sizeof(double)), *rds = sim_xcalloc((size_t)n, 8),
               *tss = sim_xcalloc((size_t)n, 8), *bss = sim_xcalloc((size_t)n, 8);
        for (int r = 0; r < n; r++) {
            int seen = 0;
            for (int q = 0; q < r; q++)
                seen |= !strcmp(group[q], group[r]);
            if (seen) continue;
            int k = 0, hit = 0;
            for (int q = r; q < n; q++) {
                if (strcmp(group[q], group[r])) continue;
                double rd, ts, bs;
                fin[k++] = m[q].n ? plot_metrics_acc(&m[q], m[q].n - 1) : NAN;
                if (plot_metrics_to_target(&m[q], target, &rd, &ts, &bs))
                    rds[hit] = rd, tss[hit] = ts, bss[hit++] = bs;
            }
            char a[48], b[48], b2[80], c[48], d[64];
            mean_std(a, sizeof a, fin, k, 4, CELL_PLAIN);
            mean_std(b, sizeof b, rds, hit, 1, CELL_PLAIN);
            snprintf(b2, sizeof b2, "%s (%d/%d)", b, hit, k);
            mean_std(c, sizeof c, tss, hit, 1, raw ? CELL_PLAIN : CELL_TIME);
            mean_std(d, sizeof d, bss, hit, 0, raw ? CELL_PLAIN : CELL_BYTES);
            printf("%-*s %5d %22s %22s %22s %26s\n", gw, group[r], k, a, b2, c, d);
        }
        free(fin), free(rds), free(tss), free(bss);
    }
    for (int r = 0; r < n; r++)
        plot_metrics_destroy(&m[r]);
    free(m);
    free(group);
    free(label);
    free(run);
    free(dirs);
    return rc;
}

static const char summary_usage[] =
        "usage: fedsim summary RUN_DIR... [--target ACC] [--acc global|personalized] [--raw]\n"
        "\n"
        "One row per run (final and best accuracy, the round, simulated time and bytes at\n"
        "which it first reached ACC [0.7], the run's bytes and client FLOPs, the round of\n"
        "its best accuracy, and with partition.local_val the accuracy at the evaluation\n"
        "with the best validation accuracy and its round), then per group of runs whose\n"
        "folders differ only in a trailing -SEED or, for sweep points, a seed=N item\n"
        "(--vary seed=1,2,3): mean ± std over the runs of final accuracy and, over those\n"
        "that reached ACC, rounds, time and bytes to it. --acc: the accuracy a run with\n"
        "both is judged by, global (its global model) [default] or personalized (the\n"
        "mean over clients); a run with one uses that one. By personalized accuracy, a\n"
        "run of a method that evaluates over another's training (DM-PFL+ over DM-PFL,\n"
        "FedAvg-FT over FedAvg) has a second row, \"RUN [base NAME]\": the other method,\n"
        "from the same run.\n"
        "Runs are listed in natural order (rounds=5 before rounds=10); arguments that\n"
        "are not run folders (a sweep folder's summary.tsv and plots) are skipped with a\n"
        "note. Times and bytes are in human units (12.3 s, 4.5 MiB); --raw prints plain\n"
        "seconds and bytes, for scripts.\n";

const sim_command sim_cmd_summary = {
        .name = "summary",
        .summary = "tabulate runs' accuracy and cost to a target; mean ± std over seeds",
        .usage = summary_usage,
        .fn = cmd_summary,
};
