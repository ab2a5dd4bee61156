/* plots/timeline.c -- the per-client timeline of a run's last rounds (timeline.png): each job's
 * download, train and upload as bars on its client's row, lost and late jobs marked, a dotted line
 * where each round began, and, left of the rows, a strip in the colour of each client's device
 * class (timeline.tsv's device column; folders written before it have none and get no strip).
 * With a network, links.png beside it over the same time: each shared link's load in percent of
 * its capacity, a step line from links.tsv's rows (the load holds from a row to the link's next).
 *
 * fedsim reads timeline.tsv once first, for the window's rounds, their start times and the device
 * classes, so gnuplot is asked only for what exists; device names reach gnuplot as string
 * literals (plot_put_var), never as code.
 */
#include "plots/plot_int.h"

#include "sim/units.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Device classes a timeline colours, the first in name order of the first SEEN_CLASSES names met
 * (the others are left unmarked, and the key says how many). */
enum { MAX_CLASSES = 12, SEEN_CLASSES = 64, CLASS_NAME = 64 };

/* What the timeline plot needs from timeline.tsv: the window's rounds and what is in them. */
typedef struct timeline_scan {
    int rmin, rmax; /* the window */
    int cmax;       /* highest client id */
    long rows, lost, late;
    double t_min, t_max;  /* earliest phase start and latest phase end in the window, s */
    double *start;        /* [r - rmin]: when round r's first job started, s (owned) */
    int has_device;       /* the file has a device column */
    int n_class;          /* classes coloured: min(n_seen, MAX_CLASSES) */
    int n_seen, seen_all; /* names kept in cls, and whether that is all of them */
    char cls[SEEN_CLASSES][CLASS_NAME]; /* the device classes, sorted by name after the scan */
} timeline_scan;

static int cmp_class(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void add_class(timeline_scan *s, const char *name)
{
    char c[CLASS_NAME];
    snprintf(c, sizeof c, "%s", name);
    for (int i = 0; i < s->n_seen; i++)
        if (!strcmp(s->cls[i], c)) return;
    if (s->n_seen < SEEN_CLASSES)
        memcpy(s->cls[s->n_seen++], c, sizeof c);
    else
        s->seen_all = 0;
}

static int scan_timeline(const char *run_dir, int window, timeline_scan *s)
{
    memset(s, 0, sizeof *s);
    s->seen_all = 1;
    char path[1200];
    snprintf(path, sizeof path, "%s/timeline.tsv", run_dir);
    FILE *fp = fopen(path, "r");
    if (!fp) return -1;
    /* per round: rows, lost, late, earliest start, latest end (rounds are few; jobs are many) */
    long *cnt = NULL;
    double *tend = NULL, *tbeg = NULL;
    int cap = 0, rmax = -1, header = 0, c_dev = -1;
    char line[1024], *f[8];
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        int k = plot_split_tabs(line, f, 8);
        if (!header) {
            header = 1;
            if (k >= 7 && !strcmp(f[6], "device")) c_dev = 6;
            continue;
        }
        if (k < 6) continue;
        int r = atoi(f[1]), c = atoi(f[0]);
        if (c > s->cmax) s->cmax = c;
        if (c_dev >= 0 && k > c_dev) add_class(s, f[c_dev]);
        if (r < 0 || r > 100000000) continue;
        if (r >= cap) {
            int nc = cap ? cap : 64;
            while (nc <= r)
                nc *= 2;
            cnt = sim_xrealloc(cnt, sizeof(long) * 3 * (size_t)nc);
            tend = sim_xrealloc(tend, sizeof(double) * (size_t)nc);
            tbeg = sim_xrealloc(tbeg, sizeof(double) * (size_t)nc);
            memset(cnt + 3 * cap, 0, sizeof(long) * 3 * (size_t)(nc - cap));
            for (int i = cap; i < nc; i++)
                tend[i] = 0, tbeg[i] = INFINITY;
            cap = nc;
        }
        cnt[3 * r]++;
        cnt[3 * r + 1] += !strcmp(f[5], "lost");
        cnt[3 * r + 2] += !strcmp(f[5], "late");
        double b = atof(f[3]), e = atof(f[4]);
        if (b < tbeg[r]) tbeg[r] = b;
        if (e > tend[r]) tend[r] = e;
        if (r > rmax) rmax = r;
    }
    fclose(fp);
    s->has_device = c_dev >= 0;
    qsort(s->cls, (size_t)s->n_seen, sizeof s->cls[0], cmp_class);
    s->n_class = s->n_seen < MAX_CLASSES ? s->n_seen : MAX_CLASSES;
    s->rmax = rmax;
    s->rmin = rmax - window + 1 < 0 ? 0 : rmax - window + 1;
    s->t_min = INFINITY;
    if (rmax >= 0) s->start = sim_xcalloc((size_t)(rmax - s->rmin + 1), sizeof *s->start);
    for (int r = s->rmin; r <= rmax; r++) {
        s->rows += cnt[3 * r];
        s->lost += cnt[3 * r + 1];
        s->late += cnt[3 * r + 2];
        if (tend[r] > s->t_max) s->t_max = tend[r];
        if (tbeg[r] < s->t_min) s->t_min = tbeg[r];
        s->start[r - s->rmin] = tbeg[r]; /* INFINITY: no job of round r ended yet */
    }
    free(cnt);
    free(tend);
    free(tbeg);
    return 0;
}

/* Colours of the device classes' strips: apart from the phases' blue, orange and green. */
static const char *const class_color[MAX_CLASSES] = {"#b07aa1", "#9c755f", "#76b7b2", "#edc948",
                                                     "#ff9da7", "#bab0ac", "#17becf", "#8c564b",
                                                     "#bcbd22", "#7f7f7f", "#aec7e8", "#393b79"};

static void timeline_figure(FILE *f, const plot_opts *o, const char *run_dir, const char *out_dir,
                            const char *name, const timeline_scan *s)
{
    char title[512], path[1200];
    snprintf(title, sizeof title, "%s: job phases per client, rounds %d-%d", name, s->rmin + 1,
             s->rmax + 1);
    plot_begin(f, o, out_dir, "timeline", title);
    double div;
    const char *unit;
    plot_time_unit(s->t_max, &div, &unit);
    snprintf(path, sizeof path, "%s/timeline.tsv", run_dir);
    plot_put_var(f, "fedsim_f", path);
    /* the x range: the window, and room left of it for the device classes' strip */
    double span = s->t_max - s->t_min > 0 ? s->t_max - s->t_min : 1;
    double strip = s->n_class ? 0.025 * span : 0, x0 = s->t_min - strip - 0.005 * span;
    fprintf(f, "fedsim_rmin = %d\nfedsim_div = %.17g\nfedsim_s0 = %.17g\nfedsim_s1 = %.17g\n",
            s->rmin, div, (s->t_min - strip) / div, (s->t_min - 0.2 * strip) / div);
    fprintf(f, "set xlabel 'simulated time (%s)'\nset ylabel 'client'\n", unit);
    fprintf(f, "set xrange [%.17g:%.17g]\n", x0 / div, (s->t_max + 0.01 * span) / div);
    if (s->cmax < 40) fputs("set ytics 1\n", f); /* else gnuplot's own spacing */
    fprintf(f, "set yrange [-0.6:%g]\n", s->cmax + 0.6);
    /* the key right of the plot, where no number of entries can reach the x axis's label */
    fputs("set key outside right top vertical Left reverse noopaque nobox\nset grid noytics\n"
          "set format y '%.0f'\nset tmargin 5\nset title offset 0,1\n"
          "set style fill solid 0.85 noborder\n"
          "fedsim_in(p) = column('round') >= fedsim_rmin && strcol('phase') eq p\n"
          "fedsim_bar(p) = fedsim_in(p) ? column('start_s')/fedsim_div : NaN\n"
          "fedsim_end(p) = fedsim_in(p) ? column('end_s')/fedsim_div : NaN\n"
          "fedsim_mark(w) = column('round') >= fedsim_rmin && strcol('outcome') eq w ? "
          "column('end_s')/fedsim_div : NaN\n"
          "fedsim_cls(d) = strcol('phase') eq 'download' && strcol('device') eq d ? fedsim_s0 : "
          "NaN\n",
          f);
    /* where each round of the window began: a dotted line, its number above the plot */
    for (int r = s->rmin; r <= s->rmax; r++) {
        double t = s->start[r - s->rmin];
        if (!isfinite(t)) continue;
        fprintf(f,
                "set arrow from %.17g, graph 0 to %.17g, graph 1 nohead dt (8,5) lw 1.5 lc rgb "
                "'#333333' back\n"
                "set label '%d' at %.17g, graph 1 offset 0,0.7 center font ',9' tc rgb '#333333'\n",
                t / div, t / div, r + 1, t / div);
    }
    for (int i = 0; i < s->n_class; i++) { /* names from the file: string literals */
        char v[32], t[CLASS_NAME + 16];
        snprintf(v, sizeof v, "fedsim_d%d", i);
        plot_put_var(f, v, s->cls[i]);
        snprintf(v, sizeof v, "fedsim_t%d", i);
        snprintf(t, sizeof t, "device %s", s->cls[i]);
        plot_put_var(f, v, t);
    }
    static const char *const phase[] = {"download", "train", "upload"};
    static const char *const color[] = {"#4e79a7", "#f28e2b", "#59a14f"};
    const char *sep = "plot ";
    for (int i = 0; i < 3; i++) {
        fprintf(f,
                "%sfedsim_f using (fedsim_bar('%s')):'client':(fedsim_bar('%s')):"
                "(fedsim_end('%s')):(column('client')-0.35):(column('client')+0.35) "
                "with boxxyerror lc rgb '%s' title '%s'",
                sep, phase[i], phase[i], phase[i], color[i], phase[i]);
        sep = ", \\\n  ";
    }
    fprintf(f,
            "%skeyentry with lines dt (8,5) lw 1.5 lc rgb '#333333' title 'round N starts (N "
            "above)'",
            sep);
    if (s->lost)
        fprintf(f,
                "%sfedsim_f using (fedsim_mark('lost')):'client' with points pt 2 ps 1.6 lw 2 "
                "lc rgb '#d62728' title 'lost (went offline)'",
                sep);
    if (s->late)
        fprintf(f,
                "%sfedsim_f using (fedsim_mark('late')):'client' with points pt 6 ps 1.4 lw 2 "
                "lc rgb '#7b3294' title 'late (after its round closed)'",
                sep);
    /* each client's device class, a strip left of its row (from any of its downloads) */
    for (int i = 0; i < s->n_class; i++)
        fprintf(f,
                "%sfedsim_f using (fedsim_cls(fedsim_d%d)):'client':(fedsim_cls(fedsim_d%d)):"
                "(fedsim_s1):(column('client')-0.45):(column('client')+0.45) "
                "with boxxyerror lc rgb '%s' title fedsim_t%d",
                sep, i, i, class_color[i], i);
    if (s->n_seen > s->n_class)
        fprintf(f, "%skeyentry with boxes lc rgb '#ffffff' title '(%s%d more classes unmarked)'",
                sep, s->seen_all ? "" : "over ", s->n_seen - s->n_class);
    fputs("\n", f);
    plot_end(f);
}

/* ---------------------------------------------------------------------------------------- */
/* links.png */

enum { MAX_LINKS = 16 }; /* the links drawn: the first met in links.tsv */

typedef struct link_line {
    char name[64];
    double cap, before, last; /* capacity; utilization (%) before the window, at its last row */
    int points;
    FILE *pts; /* its points in the window, "t\tpercent" lines (a memstream into text) */
    char *text;
    size_t len;
} link_line;

/* Draw RUN_DIR/links.tsv over [t0, t1] s into OUT_DIR/links.EXT; 0 when it has no link. */
static int links_figure(FILE *f, const plot_opts *o, const char *run_dir, const char *out_dir,
                        const char *name, double t0, double t1)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/links.tsv", run_dir);
    FILE *fp = fopen(path, "r");
    if (!fp) return 0;
    link_line *ln = calloc(MAX_LINKS, sizeof *ln);
    int nl = 0, header = 0;
    char line[512], *fld[5];
    while (ln && fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        int k = plot_split_tabs(line, fld, 4);
        if (!header) {
            header = 1;
            continue;
        }
        double t = atof(fld[0]), cap = k == 4 ? atof(fld[3]) : 0;
        if (k != 4 || !(cap > 0)) continue;
        int i = 0;
        while (i < nl && strcmp(ln[i].name, fld[1]))
            i++;
        if (i == nl) {
            if (nl == MAX_LINKS) continue;
            snprintf(ln[nl].name, sizeof ln[nl].name, "%s", fld[1]);
            ln[nl].cap = cap;
            ln[nl].pts = open_memstream(&ln[nl].text, &ln[nl].len);
            if (!ln[nl].pts) break;
            nl++;
        }
        link_line *l = &ln[i];
        double u = 100 * atof(fld[2]) / cap;
        if (t < t0) {
            l->before = u;
            continue;
        }
        if (t > t1) continue;
        if (!l->points++ && t > t0) fprintf(l->pts, "%.17g\t%.17g\n", t0, l->before);
        fprintf(l->pts, "%.17g\t%.17g\n", t, u);
        l->last = u;
    }
    fclose(fp);
    int drawn = nl > 0;
    double div;
    const char *unit;
    plot_time_unit(t1, &div, &unit);
    if (drawn) { /* a panel per link, one above the other, on the timeline's time axis */
        char title[512];
        snprintf(title, sizeof title, "%s: shared links, load in %% of capacity", name);
        plot_begin(f, o, out_dir, "links", title);
        fprintf(f, "unset title\nset multiplot layout %d,1 title fedsim_title\n", nl);
        fprintf(f, "set xrange [%.17g:%.17g]\nset yrange [0:110]\nset ytics 0,50,100\n", t0 / div,
                t1 / div);
        fputs("set key top left opaque box\nset ylabel '% of capacity'\nset format x ''\n"
              "set lmargin 10\nset rmargin 3\n",
              f);
    }
    static const char *const color[] = {"#4e79a7", "#59a14f", "#e15759", "#f28e2b",
                                        "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};
    for (int i = 0; i < nl; i++) {
        link_line *l = &ln[i];
        if (!l->points) fprintf(l->pts, "%.17g\t%.17g\n", t0, l->before);
        fprintf(l->pts, "%.17g\t%.17g\n", t1, l->points ? l->last : l->before);
        fclose(l->pts);
        fprintf(f, "$fedsim_l%d << EOD\n%sEOD\n", i, l->text);
        free(l->text);
        char v[32], t[128], rate[32];
        sim_format_rate(rate, sizeof rate, l->cap);
        snprintf(v, sizeof v, "fedsim_n%d", i);
        snprintf(t, sizeof t, "%s (%s)", l->name, rate); /* from the file: a string literal */
        plot_put_var(f, v, t);
        if (i == nl - 1) /* the last panel has the time axis */
            fprintf(f, "set format x '%%g'\nset xlabel 'simulated time (%s)'\n", unit);
        const char *c = color[i % (int)(sizeof color / sizeof *color)];
        fprintf(f,
                "plot $fedsim_l%d using ($1/%.17g):2 with fillsteps fs solid 0.3 noborder "
                "lc rgb '%s' notitle, \\\n  $fedsim_l%d using ($1/%.17g):2 with steps lw 1.5 "
                "lc rgb '%s' title fedsim_n%d\n",
                i, div, c, i, div, c, i);
    }
    if (drawn) fputs("unset multiplot\n", f);
    if (drawn) plot_end(f);
    free(ln);
    return drawn;
}

unsigned plot_timeline(FILE *f, const plot_opts *o, const char *run_dir, const char *out_dir,
                       const char *name)
{
    timeline_scan s;
    if (scan_timeline(run_dir, o->window > 0 ? o->window : 5, &s)) return 0;
    unsigned drawn = 0;
    if (s.rows > 0) {
        timeline_figure(f, o, run_dir, out_dir, name, &s);
        drawn = PLOT_FIG_TIMELINE;
        if (links_figure(f, o, run_dir, out_dir, name, s.t_min, s.t_max)) drawn |= PLOT_FIG_LINKS;
    }
    free(s.start);
    return drawn;
}
