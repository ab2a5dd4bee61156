/* plots/plot_int.h -- what the files of plots/ share: plot.c (metrics, gnuplot process, accuracy
 * figures, overlays, live refresh), timeline.c (the per-client timeline) and seeds.c (runs that
 * differ only in their seed, drawn as a mean with a band). Callers outside plots/ see plot.h. */
#ifndef PLOT_PLOT_INT_H
#define PLOT_PLOT_INT_H

#include "plots/plot.h"

/* Split a line in place at tabs (and drop its newline); returns the field count, or max + 1 when
 * the line has more than max fields (f then holds the first max). */
int plot_split_tabs(char *line, char **f, int max);
/* name = 'text', text as a safe string literal (plot_put_str). */
void plot_put_var(FILE *f, const char *name, const char *text);
/* A readable unit for an axis reaching max: its divisor and name. */
void plot_time_unit(double max_s, double *div, const char **label);
void plot_bytes_unit(double max, double *div, const char **label);
/* Start a figure: clean state, terminal, output file DIR/NAME.EXT, title; plot_end ends it. */
void plot_begin(FILE *f, const plot_opts *o, const char *dir, const char *name, const char *title);
void plot_end(FILE *f);

/* timeline.c: draw RUN_DIR/timeline.tsv's last o->window rounds into OUT_DIR/timeline.EXT, and
 * with a network its shared links' utilization over the same time (links.tsv) into
 * OUT_DIR/links.EXT; returns the PLOT_FIG_* drawn (0: nothing asked of gnuplot). */
unsigned plot_timeline(FILE *f, const plot_opts *o, const char *run_dir, const char *out_dir,
                       const char *name);

/* seeds.c: the curves m[0..n) of an overlay (run[i]: curve i's index in dirs) in groups of runs
 * that differ only in their seed (plot_seed_group of their folders; a base's curve groups with
 * the bases of the same group): group[i], numbered in order of first curve; returns how many. */
int plot_group_curves(const plot_metrics *m, const int *run, int n, const char *const *dirs,
                      int *group);
/* The legend of a group of runs: label (its first run's) without its seed, and how many. */
void plot_seed_label(char *out, size_t n, const char *label, int runs);
/* Write the mean, lowest and highest accuracy of the runs m[members[0..k)] against simulated time
 * (what 0, seconds) or bytes (1) as one gnuplot data block (x, mean, min, max; ended by two
 * blank lines) to f, where every run has a curve; returns its points. */
int plot_band_block(FILE *f, const plot_metrics *m, const int *members, int k, int what);

#endif /* PLOT_PLOT_INT_H */
