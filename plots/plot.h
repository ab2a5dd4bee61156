/* plots/plot.h -- fedsim's plots, drawn by gnuplot running in its own process behind a pipe.
 *
 * A run folder's metrics.tsv and timeline.tsv become accuracy vs simulated time, accuracy vs
 * cumulative bytes (up + down) and a per-client timeline (download/train/upload bars, lost and
 * late jobs marked, round starts, device classes) over the last few rounds. Several runs overlay
 * on the same axes (runs differing only in their seed as their mean in a band), with bars of
 * the simulated time and bytes each took to reach a target accuracy. fedsim never draws anything
 * itself and never blocks on gnuplot except when a plot_proc is closed.
 *
 * Safety (DESIGN.md §12): text from scenario files (run names, titles, paths) reaches gnuplot only
 * as single-quoted string literals assigned to variables (plot_put_str: '' doubled, control
 * characters replaced), never spliced into gnuplot code, and every plot is drawn noenhanced.
 */
#ifndef PLOT_PLOT_H
#define PLOT_PLOT_H

#include "sim/base.h"

#include <stdio.h>

enum { PLOT_NONE = 0, PLOT_PNG, PLOT_SVG, PLOT_PDF };

/* How to draw. */
typedef struct plot_opts {
    int format;    /* PLOT_* */
    int log_x;     /* accuracy vs bytes on a logarithmic byte axis */
    int window;    /* timeline: the last this many rounds */
    double target; /* time/bytes-to-accuracy bars: the target accuracy */
    int acc_pers;  /* judge runs by their personalized mean even when they have a global model */
} plot_opts;

void plot_opts_default(plot_opts *o);
/* "png", "svg", "pdf" or "none"; -1 if unknown. */
int plot_format_parse(const char *s);
/* File extension of a format ("png"...). */
const char *plot_format_ext(int format);

/* One run's metrics.tsv, as far as the plots and sweep summaries need it. */
typedef struct plot_metrics {
    char name[256]; /* from the "# fedsim run NAME ..." line, else the folder's name */
    int n;          /* evaluation rows */
    double *time_s, *bytes, *acc, *acc_pers, *acc_p10, *dropped, *round; /* n each (owned) */
    double *flops; /* n (owned): cumulative client FLOPs, NaN in files written before the column */
    double *acc_base, *acc_base_p10; /* n each (owned): the base algorithm's personalized mean and
                                      * bottom decile (fl_algo.base), NaN without one */
    double *acc_val; /* n (owned): mean accuracy on the clients' validation splits, NaN without */
    double *energy;  /* n (owned): cumulative client energy (J), NaN without devices.energy */
    char base[64];   /* its name, from " base=NAME" in the header line, or "" */
    int has_global, has_pers, has_p10, has_base, has_energy; /* the column has a number (not NaN) */
    int is_base; /* its base's run (plot_metrics_load_runs): acc_base_* are its personalized ones */
    int use_pers; /* set by the caller: judge by the personalized mean when there is one */
} plot_metrics;

/* Read RUN_DIR/metrics.tsv: SIM_EFORMAT at file:line:column for a row that is not numbers (as
 * plot_run says); a last row without its newline is one still being written, and left out. */
int plot_metrics_load(plot_metrics *m, const char *run_dir, sim_err *err);
void plot_metrics_destroy(plot_metrics *m);
/* Read the runs dirs[0..n) into m (room for 2n), each judged as use_pers says and followed, when
 * judged by its personalized accuracy and it has acc_base_* columns (fl_algo.base), by its base
 * algorithm's run from the same file: those columns as the personalized ones, is_base set and
 * " [base NAME]" added to its name. run[i] gets the index in dirs of m[i], *count how many were
 * read. A run that cannot be read: its error code, err set, *count 0 and nothing left
 * allocated. */
int plot_metrics_load_runs(plot_metrics *m, int *run, int *count, const char *const *dirs, int n,
                           int use_pers, sim_err *err);
/* Whether a run is judged by its personalized mean: when use_pers is set and it has one, or when
 * it has no global model (local training). */
int plot_metrics_pers(const plot_metrics *m);
/* The accuracy a run is judged by at row i (plot_metrics_pers: personalized, else the global
 * model's). NaN when neither. */
double plot_metrics_acc(const plot_metrics *m, int i);
/* First row whose accuracy reaches target: its round (rounds or aggregations done, so the
 * 1-based round that reached it; round may be NULL), simulated time and cumulative bytes;
 * returns 0 if the run never reaches it (they are then NaN). */
int plot_metrics_to_target(const plot_metrics *m, double target, double *round, double *time_s,
                           double *bytes);

/* The row with the best validation accuracy (acc_val_mean; the first of equals), whose test
 * accuracy is what papers that select the round on validation data report (FLGo's
 * optimal_ltest_by_lval); -1 when the run has no validation accuracy, and for a base's copy
 * (its validation accuracy is not the base algorithm's). */
int plot_metrics_best_val(const plot_metrics *m);

/* The group of runs a run folder belongs to, those whose paths differ only in their seed: the path
 * with the seed as *, a trailing -SEED (digits) as -* (runs/fedavg-*), or a sweep point's seed=N
 * item (fedsim sweep --vary seed=1,2,3) as seed=* (sweep/seed=*,algorithm.lr=0.1). A folder with
 * neither is a group of its own. `fedsim summary` and the overlays group runs by it. */
void plot_seed_group(char *out, size_t n, const char *dir);

/* Write s as a gnuplot single-quoted string literal that cannot end early or run anything. */
void plot_put_str(FILE *f, const char *s);

/* A gnuplot process. */
typedef struct plot_proc plot_proc;

/* Is gnuplot on PATH? */
int plot_gnuplot_found(void);
/* Start gnuplot; NULL if it is not on PATH or cannot start. Ignores SIGPIPE process-wide, so a
 * gnuplot that dies can never kill the run that feeds it. */
plot_proc *plot_open(void);
/* Close the pipe and wait until gnuplot has written every plot. Returns its exit status (0 when
 * every command succeeded), or -1 when it died or did not get all it was sent. Accepts NULL. */
int plot_close(plot_proc *p);

/* The figures a plot_run or plot_overlay asks gnuplot for (its return value, or'ed). */
enum {
    PLOT_FIG_ACC_TIME = 1,
    PLOT_FIG_ACC_BYTES = 2,
    PLOT_FIG_TIMELINE = 4,
    PLOT_FIG_TO_TARGET = 8,
    PLOT_FIG_LINKS = 16,      /* a run with a network: its shared links' utilization (links.tsv) */
    PLOT_FIG_ACC_ENERGY = 32, /* runs with devices.energy */
};

/* Draw one run's plots into out_dir (NULL: the run folder): acc_time, acc_bytes (once
 * metrics.tsv has an accuracy), acc_energy (when it has client_energy_j too) and timeline (the last
 * o->window rounds of timeline.tsv). Returns the PLOT_FIG_* asked for (0: nothing to draw), or a
 * negative error: a metrics.tsv that is not one (a field that is not a number, an axis that is not
 * finite, an accuracy out of [0, 1]) is named by file, line and column. */
int plot_run(plot_proc *p, const plot_opts *o, const char *run_dir, const char *out_dir,
             sim_err *err);
/* Overlay n runs in out_dir: acc_time, acc_bytes, acc_energy (when every run has energy)
 * and to_target (plus to_target.tsv, the bars'
 * data, written whole). names[i] is the legend of run i (NULL, or names NULL: from its
 * metrics.tsv, or its folder when two runs share a name). Returns as plot_run. */
int plot_overlay(plot_proc *p, const plot_opts *o, const char *out_dir, int n,
                 const char *const *dirs, const char *const *names, sim_err *err);
/* Remove out_dir's figures of format o->format, before drawing them anew: then plot_check can
 * tell a plot gnuplot wrote from one left from before. */
void plot_remove(const plot_opts *o, const char *out_dir);
/* After plot_close: each figure in figs (PLOT_FIG_*) is a non-empty file in out_dir; else
 * SIM_EIO naming the first that is not. */
int plot_check(const plot_opts *o, const char *out_dir, unsigned figs, sim_err *err);
/* The file names of figs (PLOT_FIG_*) in o->format, comma-separated ("acc_time.png, ..."), or ""
 * for none. */
void plot_fig_list(char *buf, size_t n, const plot_opts *o, unsigned figs);

/* Live plots of a running engine: hand plot_live_tick and a plot_live to the engine's on_tick. */
typedef struct plot_live {
    plot_proc *proc; /* borrowed */
    plot_opts opts;
    const char *dir; /* the run folder (borrowed) */
    double last_wall, every_s;
    unsigned figs; /* PLOT_FIG_* of the last draw asked for (what the run's folder holds) */
} plot_live;
void plot_live_init(plot_live *l, plot_proc *proc, const plot_opts *o, const char *dir);
void plot_live_tick(void *arg, int round, int final);

#endif /* PLOT_PLOT_H */
