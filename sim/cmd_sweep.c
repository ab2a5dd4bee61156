/* sim/cmd_sweep.c -- `fedsim sweep`: one run per point of a grid of --vary values, resumable as a
 * campaign, then a summary.tsv and overlay plots of every point.
 */
#include "sim/cmd.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Split a --vary list at top-level commas (a value may be a YAML flow list or map). */
static int split_values(char *s, char **v, int max)
{
    int n = 0, depth = 0;
    v[n++] = s;
    for (char *p = s; *p; p++) {
        if (*p == '[' || *p == '{') depth++;
        if ((*p == ']' || *p == '}') && depth > 0) depth--;
        if (*p == ',' && !depth) {
            if (n == max) return -1;
            *p = 0;
            v[n++] = p + 1;
        }
    }
    return n;
}

enum { MAX_VALUES = 64 };

/* Whether the file at path holds exactly text[0..len). */
static int file_is(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char *buf = sim_xmalloc(len + 1);
    size_t n = fread(buf, 1, len + 1, f);
    fclose(f);
    int same = n == len && !memcmp(buf, text, len);
    free(buf);
    return same;
}

/* Whether the file at path has a second line (clients.tsv's rows follow its header). */
static int has_rows(const char *path)
{
    FILE *f = fopen(path, "rb");
    int lines = 0;
    for (int c; f && lines < 2 && (c = getc(f)) != EOF;)
        lines += c == '\n';
    if (f) fclose(f);
    return lines >= 2;
}

/* What a sweep run again (after a stop, or to add points) finds in a point's folder dir: this
 * point's run -- its scenario.yaml is the text sc resolved to -- finished (clients.tsv has rows,
 * engine.h) or unfinished (checkpoint.msgpack), or nothing of its own. A run from before a key
 * was added (its scenario.yaml lacks it) is this point's when that file, loaded now, holds the
 * same settings: a new key's default keeps what the code did without it. Resuming one keeps its
 * file, whose bytes its checkpoint names. */
enum { POINT_NEW, POINT_FINISHED, POINT_UNFINISHED };

static int point_state(const sim_scenario *sc, const char *dir, int *state)
{
    *state = POINT_NEW;
    sim_err err = {0};
    char *text = NULL, path[1700], ckpt[1700], clients[1700];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return sim_cli_die("sweep: out of memory");
    int rc = sim_yaml_write(sc->doc, f, &err);
    fclose(f);
    snprintf(path, sizeof path, "%s/scenario.yaml", dir);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.msgpack", dir);
    snprintf(clients, sizeof clients, "%s/clients.tsv", dir);
    int ckpt_there = access(ckpt, F_OK) == 0, done = !ckpt_there && has_rows(clients);
    int same = !rc && file_is(path, text, len);
    if (!rc && !same && (ckpt_there || done)) {
        /* written before a key was added: the keys it lacks take their defaults, last in their
         * maps, and its checkpoint (tied to the file's bytes) still resumes it */
        sim_scenario old;
        sim_err ignored = {0};
        if (!sim_scenario_load(&old, path, NULL, 0, &ignored)) {
            same = sim_yaml_same(old.doc, sc->doc);
            sim_scenario_destroy(&old);
        }
    }
    if (same && ckpt_there)
        *state = POINT_UNFINISHED;
    else if (same && done)
        *state = POINT_FINISHED;
    free(text);
    return rc ? sim_cli_print_err(&err) : 0;
}

static int cmd_sweep(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    run_opts o;
    if (sim_cli_parse_run(&o, argc, argv, OPTS_SWEEP)) return SIM_CLI_BAD_ARGS;
    int rc = 0;
    if (o.n_sets + o.n_vary > MAX_SETS - 2) return sim_cli_die("too many --set and --vary options");
    /* the grid: key k takes values val[k][0..nval[k]) */
    char *keys[MAX_VARY], *copy[MAX_VARY], *val[MAX_VARY][MAX_VALUES];
    int nval[MAX_VARY];
    long points = 1;
    for (int k = 0; k < o.n_vary; k++) {
        for (const char *c = o.vary[k]; *c && !rc; c++) /* checked before any point runs */
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                rc = sim_cli_die(
                        "--vary: a control character in a value (a point's key=value names its "
                        "folder and its row of summary.tsv)");
        copy[k] = sim_xstrdup(o.vary[k]);
        char *eq = strchr(copy[k], '=');
        *eq = 0;
        keys[k] = copy[k];
        nval[k] = split_values(eq + 1, val[k], MAX_VALUES);
        if (nval[k] < 0 && !rc) rc = sim_cli_die("--vary: 64 values per key at most");
        points *= nval[k] > 0 ? nval[k] : 1;
    }
    if (!rc && points > 1000) rc = sim_cli_die("sweep: more than 1000 grid points");
    char dir[1024];
    if (o.out) {
        snprintf(dir, sizeof dir, "%s", o.out);
    } else {
        const char *b = strrchr(o.scenario, '/');
        b = b ? b + 1 : o.scenario;
        snprintf(dir, sizeof dir, "runs/sweep-%.*s", (int)strcspn(b, "."), b);
        /* the stem as a run's default name takes it: what a name cannot hold becomes '_' */
        for (char *c = dir + strlen("runs/sweep-"); *c; c++)
            if (sim_name_problem((char[]){*c, 0}, 1)) *c = '_';
    }
    if (!rc && sim_cli_mkdirs(dir)) {
        fprintf(stderr, "fedsim: %s: cannot create: %s\n", dir, strerror(errno));
        rc = 2;
    }
    char(*label)[512] = sim_xcalloc((size_t)points, sizeof *label);
    char(*run_dir)[1600] = sim_xcalloc((size_t)points, sizeof *run_dir);
    char(*set)[MAX_VARY][1024] = sim_xcalloc((size_t)points, sizeof *set);
    for (long p = 0; p < points && !rc; p++) {
        run_opts po = o;
        po.out = NULL;
        long rest = p;
        for (int k = o.n_vary - 1; k >= 0; k--) { /* the last --vary changes fastest */
            int i = (int)(rest % nval[k]);
            rest /= nval[k];
            snprintf(set[p][k], sizeof set[p][k], "%s=%s", keys[k], val[k][i]);
        }
        for (int k = 0; k < o.n_vary; k++) {
            po.sets[po.n_sets++] = set[p][k];
            size_t len = strlen(label[p]);
            snprintf(label[p] + len, sizeof label[p] - len, "%s%s", k ? "," : "", set[p][k]);
        }
        /* the folder: the label, with no '/' (a value may be a path) */
        char name[512];
        snprintf(name, sizeof name, "%s", label[p]);
        for (char *c = name; *c; c++)
            if (*c == '/') *c = '_';
        snprintf(run_dir[p], sizeof run_dir[p], "%s/%s", dir, name);
        po.out = run_dir[p];
        /* loaded once: for the point's state, then for its run */
        sim_scenario sc;
        sim_err err = {0};
        int state;
        if (sim_cli_load_scenario(&sc, &po, &err)) {
            rc = sim_cli_print_err(&err);
            break;
        }
        if ((rc = point_state(&sc, run_dir[p], &state))) {
            sim_scenario_destroy(&sc);
            break;
        }
        static const char *const how[] = {"", " (finished before: kept)", " (resuming)"};
        if (!o.quiet)
            fprintf(stderr, "fedsim: sweep point %ld/%ld: %s%s\n", p + 1, points, label[p],
                    how[state]);
        if (state == POINT_FINISHED) {
            sim_scenario_destroy(&sc);
            continue;
        }
        /* resumed from its checkpoint, whose scenario.yaml holds these settings */
        po.resume = state == POINT_UNFINISHED;
        char out[1600];
        rc = sim_cli_run_one(&po, &sc, out, sizeof out);
    }
    if (rc == 128 + SIGINT || rc == 128 + SIGTERM)
        fprintf(stderr, "fedsim: the same sweep command continues the sweep\n");
    /* summary.tsv: one row per point */
    char path[1200];
    snprintf(path, sizeof path, "%s/summary.tsv", dir);
    char *summary = NULL; /* made in memory, then written whole (sim_write_file) */
    size_t summary_len = 0;
    FILE *f = !rc ? open_memstream(&summary, &summary_len) : NULL;
    if (!rc && !f) {
        fprintf(stderr, "fedsim: %s: cannot write: %s\n", path, strerror(errno));
        rc = 2;
    }
    if (f) {
        fprintf(f, "# fedsim sweep %s: target accuracy %g\n", o.scenario, o.plots.target);
        fprintf(f, "point\tfinal_acc\ttime_to_target_s\tbytes_to_target\tdropped\n");
        printf("\n%-40s %9s %14s %14s %8s\n", "point", "final_acc", "time_to_target",
               "bytes_to_target", "dropped");
    }
    for (long p = 0; p < points && f && !rc; p++) {
        plot_metrics m;
        sim_err err = {0};
        if (plot_metrics_load(&m, run_dir[p], &err)) {
            rc = sim_cli_print_err(&err);
            break;
        }
        double acc = m.n ? plot_metrics_acc(&m, m.n - 1) : NAN, ts, bs;
        double dropped = m.n ? m.dropped[m.n - 1] : 0;
        int ok = plot_metrics_to_target(&m, o.plots.target, NULL, &ts, &bs);
        char tcell[32] = "not reached", bcell[32] = "not reached";
        if (ok) {
            sim_format_time(tcell, sizeof tcell, (sim_time)(ts * 1e9));
            sim_format_bytes(bcell, sizeof bcell, bs);
            fprintf(f, "%s\t%.6f\t%.9f\t%.0f\t%.0f\n", label[p], acc, ts, bs, dropped);
        } else {
            fprintf(f, "%s\t%.6f\tNA\tNA\t%.0f\n", label[p], acc, dropped);
        }
        printf("%-40s %9.4f %14s %14s %8.0f\n", label[p], acc, tcell, bcell, dropped);
        plot_metrics_destroy(&m);
    }
    if (f && fclose(f) && !rc) {
        fprintf(stderr, "fedsim: %s: cannot write: %s\n", path, strerror(errno));
        rc = 2;
    }
    sim_err werr = {0};
    if (f && !rc && sim_write_file(path, summary, summary_len, &werr))
        rc = sim_cli_print_err(&werr);
    free(summary);
    if (!rc) printf("summary: %s\n", path);
    /* overlay plots of every point */
    if (!rc && o.plots.format != PLOT_NONE) {
        plot_proc *gp = plot_open();
        const char **dirs = sim_xcalloc((size_t)points, sizeof *dirs);
        const char **names = sim_xcalloc((size_t)points, sizeof *names);
        for (long p = 0; p < points; p++)
            dirs[p] = run_dir[p], names[p] = label[p];
        sim_err err = {0};
        int figs = 0;
        if (!gp)
            sim_cli_gnuplot_missing();
        else if ((figs = plot_overlay(gp, &o.plots, dir, (int)points, dirs, names, &err)) < 0)
            rc = sim_cli_print_err(&err);
        if (gp && plot_close(gp) && !rc)
            rc = sim_cli_die("gnuplot reported errors (above)");
        else if (gp && !rc) { /* the figures drawn: none when no point has an accuracy */
            char list[256];
            plot_fig_list(list, sizeof list, &o.plots, (unsigned)figs);
            if (figs)
                printf("plots: %s/%s\n", dir, list);
            else
                printf("plots: none (no point has an accuracy in its metrics.tsv)\n");
        }
        free(dirs);
        free(names);
    }
    for (int k = 0; k < o.n_vary; k++)
        free(copy[k]);
    free(label);
    free(run_dir);
    free(set);
    return rc;
}

static const char sweep_usage[] =
        "usage: fedsim sweep SCENARIO --vary key=v1,v2,... [--vary ...] [--set key=value]...\n"
        "                    [--out DIR] [--target ACC] [--seed N] [--cost-only] [-q]\n"
        "                    [--plots png|svg|pdf|none] [--plot-window N] [--plot-logx]\n"
        "                    [--workers N] [--job-timeout S] [--checkpoint-every N]\n"
        "                    [--checkpoint-minutes T] [--state-memory SIZE]\n"
        "\n"
        "One run per point of the grid of --vary values (8 keys, 64 values each, 1000\n"
        "points at most; a value may be a YAML flow list or map), in DIR/key=value,...\n"
        "[runs/sweep-SCENARIO]; then DIR/summary.tsv (final accuracy, simulated time and\n"
        "bytes to reach ACC [0.7], dropped jobs) and overlay plots. The other options are\n"
        "fedsim run's, for every point. Run again (after a stop, or with more values), a\n"
        "sweep keeps the points that finished and resumes the one that was stopped, each\n"
        "only if its folder's scenario.yaml is the text the point resolves to (or lacks\n"
        "only keys added since, at their defaults).\n";

const sim_command sim_cmd_sweep = {
        .name = "sweep",
        .summary = "one run per point of a grid of values; a summary and overlay plots",
        .usage = sweep_usage,
        .fn = cmd_sweep,
};
