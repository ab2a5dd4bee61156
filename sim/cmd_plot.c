/* sim/cmd_plot.c -- `fedsim plot`: one run's plots redrawn, or several runs overlaid. */
#include "sim/cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmd_plot(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    plot_opts po;
    plot_opts_default(&po);
    const char *out = NULL;
    const char **dirs = sim_xcalloc((size_t)(argc > 0 ? argc : 1), sizeof *dirs);
    int n = 0, rc = 0;
    double x;
    for (int i = 0; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--plot-logx")) {
            po.log_x = 1;
        } else if (!strcmp(a, "--out") && v) {
            out = v, i++;
        } else if (!strcmp(a, "--target") && v) {
            rc = sim_cli_parse_num(a, v, 0, 1, &po.target) ? 2 : 0, i++;
        } else if (!strcmp(a, "--acc") && v) {
            rc = sim_cli_parse_acc(v, &po.acc_pers), i++;
        } else if (!strcmp(a, "--plot-window") && v) {
            rc = sim_cli_parse_num(a, v, 1, 1e6, &x) ? 2 : 0, po.window = (int)x, i++;
        } else if (!strcmp(a, "--plots") && v) {
            if ((po.format = plot_format_parse(v)) <= 0)
                rc = sim_cli_die("--plots: expected png, svg or pdf");
            i++;
        } else if (a[0] != '-') {
            dirs[n++] = a;
        } else {
            fprintf(stderr, "fedsim plot: unexpected argument '%s'\n", a);
            rc = 2;
        }
    }
    if (rc || !n) {
        free(dirs);
        return SIM_CLI_BAD_ARGS;
    }
    plot_proc *gp = plot_open();
    if (!gp) {
        sim_cli_gnuplot_missing();
        rc = 2;
    }
    if (!out) out = n == 1 ? dirs[0] : "plots-out";
    if (!rc && sim_cli_mkdirs(out)) {
        fprintf(stderr, "fedsim: %s: cannot create: %s\n", out, strerror(errno));
        rc = 2;
    }
    sim_err err = {0};
    int figs = 0;
    if (!rc) {
        plot_remove(&po, out); /* what is there after gnuplot is what it drew */
        figs = n == 1 ? plot_run(gp, &po, dirs[0], out, &err)
                      : plot_overlay(gp, &po, out, n, dirs, NULL, &err);
        if (figs < 0) rc = sim_cli_print_err(&err);
    }
    if (plot_close(gp) && !rc) rc = sim_cli_die("gnuplot reported errors (above)");
    if (!rc && !figs)
        rc = sim_cli_die(
                n == 1 ? "nothing to plot: metrics.tsv has no accuracy and timeline.tsv no job"
                       : "nothing to plot: no run has an accuracy in its metrics.tsv");
    if (!rc && plot_check(&po, out, (unsigned)figs, &err)) rc = sim_cli_print_err(&err);
    if (!rc) printf("plots in %s/\n", out);
    free(dirs);
    return rc;
}

static const char plot_usage[] =
        "usage: fedsim plot RUN_DIR... [--out DIR] [--target ACC] [--acc global|personalized]\n"
        "                   [--plots png|svg|pdf] [--plot-window N] [--plot-logx]\n"
        "\n"
        "Redraw one run's plots into DIR [its folder]: acc_time, acc_bytes and timeline\n"
        "(the last N rounds [5]); or overlay several runs into DIR [plots-out]: acc_time,\n"
        "acc_bytes and to_target (bars of the time and bytes each run took to reach ACC\n"
        "[0.7]); runs with devices.energy also acc_energy (vs the clients' joules). The\n"
        "format is png [default], svg or pdf; --plot-logx: a log byte axis.\n"
        "--acc: the accuracy a run with both is judged by, global (its global model)\n"
        "[default] or personalized (the mean over clients); a run with one uses that one.\n"
        "By personalized accuracy, a run of a method that evaluates over another's\n"
        "training (see fedsim summary --help) draws that method's curve too. Runs whose\n"
        "folders differ only in their seed (a trailing -SEED, or a sweep's seed=N) are\n"
        "one curve, their mean in a band from the lowest to the highest run\n"
        "(DIR/seed_bands.tsv), and one bar, the mean of those that reached ACC.\n";

const sim_command sim_cmd_plot = {
        .name = "plot",
        .summary = "redraw a run's plots, or overlay several runs",
        .usage = plot_usage,
        .fn = cmd_plot,
};
