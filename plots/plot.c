/* plots/plot.c -- gnuplot behind a pipe: the run plots, the overlays and the live refresh (see
 * plot.h).
 *
 * Every figure is a self-contained block of gnuplot code ("reset", terminal, output, axes, plot,
 * "unset output") written into the pipe in one go; gnuplot draws it in its own process while the
 * run goes on. fedsim reads metrics.tsv and timeline.tsv itself first, so it only asks for curves
 * that have points (gnuplot would print a warning per empty curve) and picks readable units.
 * Workload: a refresh every few seconds; metrics.tsv has one row per evaluation, timeline.tsv up
 * to three rows per job.
 */
#define _XOPEN_SOURCE 700 /* fcntl flags, posix_spawn, sigaction with SA_* */
#include "plots/plot_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

void plot_opts_default(plot_opts *o)
{
    *o = (plot_opts){PLOT_PNG, 0, 5, 0.7, 0};
}

int plot_format_parse(const char *s)
{
    static const char *const names[] = {"none", "png", "svg", "pdf"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

const char *plot_format_ext(int format)
{
    return format == PLOT_SVG ? "svg" : format == PLOT_PDF ? "pdf" : "png";
}

/* ---------------------------------------------------------------------------------------- */
/* reading the run's TSV files */

/* Split a line in place at tabs (and drop its newline); returns the field count, or max + 1 when
 * the line has more than max fields (f then holds the first max). */
int plot_split_tabs(char *line, char **f, int max)
{
    line[strcspn(line, "\r\n")] = 0;
    int n = 0;
    for (char *p = line;;) {
        if (n == max) return max + 1;
        f[n++] = p;
        char *t = strchr(p, '\t');
        if (!t) break;
        *t = 0;
        p = t + 1;
    }
    return n;
}

static int col_index(char **f, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(f[i], name)) return i;
    return -1;
}

static double field(char **f, int n, int i)
{
    if (i < 0 || i >= n) return NAN;
    return strtod(f[i], NULL); /* check_row has seen that it is a number */
}

/* Every field of a metrics.tsv row is a number (nan where the engine had none: no global model,
 * no personalized evaluation, a diverged loss); the axes are finite and accuracies nan or in
 * [0, 1]. Anything else is named by line, column (1-based characters) and header name. */
static int check_row(char **f, int k, char **head, const char *line, const char *path, int ln,
                     sim_err *err)
{
    for (int i = 0; i < k; i++) {
        char *end;
        double v = strtod(f[i], &end);
        int col = (int)(f[i] - line) + 1;
        if (end == f[i] || *end)
            return sim_fail(err, SIM_EFORMAT, path, ln, col, "%s: '%s' is not a number", head[i],
                            f[i]);
        int axis = !strcmp(head[i], "round") || !strcmp(head[i], "sim_time_s") ||
                   !strcmp(head[i], "bytes_up") || !strcmp(head[i], "bytes_down");
        if (axis && !isfinite(v))
            return sim_fail(err, SIM_EFORMAT, path, ln, col, "%s: '%s' is not a finite number",
                            head[i], f[i]);
        if (!strncmp(head[i], "acc_", 4) && !isnan(v) && !(v >= 0 && v <= 1))
            return sim_fail(err, SIM_EFORMAT, path, ln, col,
                            "%s: '%s' is not an accuracy (nan, or 0 to 1)", head[i], f[i]);
    }
    return SIM_OK;
}

/* The folder's own name: the legend of a run whose metrics.tsv names none. */
static void base_name(char *out, size_t n, const char *dir)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    size_t b = len;
    while (b > 0 && dir[b - 1] != '/')
        b--;
    snprintf(out, n, "%.*s", (int)(len - b), dir + b);
}

/* The n-row columns of m, in one list: what load grows and base_copy duplicates. */
enum { N_COLUMNS = 12 };
static void columns(plot_metrics *m, double **col[N_COLUMNS])
{
    double **c[N_COLUMNS] = {&m->time_s,   &m->bytes,        &m->acc,     &m->acc_pers,
                             &m->acc_p10,  &m->dropped,      &m->round,   &m->flops,
                             &m->acc_base, &m->acc_base_p10, &m->acc_val, &m->energy};
    memcpy(col, c, sizeof c);
}

int plot_metrics_load(plot_metrics *m, const char *run_dir, sim_err *err)
{
    memset(m, 0, sizeof *m);
    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.tsv", run_dir);
    FILE *fp = fopen(path, "r");
    if (!fp) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot open (is it a fedsim run folder?)");
    base_name(m->name, sizeof m->name, run_dir);
    /* the engine writes at most ~60 columns (every eval.shift twice, an algorithm's own) */
    enum { MAX_COLUMNS = 256 };
    char line[4096], head[4096], *f[MAX_COLUMNS], *h[MAX_COLUMNS];
    int cap = 0, header = 0, nf = 0, ln = 0, rc = SIM_OK;
    int c_t = -1, c_up = -1, c_down = -1, c_acc = -1, c_pers = -1, c_p10 = -1, c_drop = -1,
        c_round = -1, c_flops = -1, c_base = -1, c_base_p10 = -1, c_val = -1, c_energy = -1;
    while (!rc && fgets(line, sizeof line, fp)) {
        ln++;
        if (!strchr(line, '\n')) {
            if (feof(fp)) break; /* the last row, still being written */
            rc = sim_fail(err, SIM_EFORMAT, path, ln, 0, "line longer than %d bytes",
                          (int)sizeof line - 1);
            break;
        }
        if (line[0] == '#') {
            static const char tag[] = "# fedsim run ";
            if (!strncmp(line, tag, sizeof tag - 1)) {
                char *name = line + sizeof tag - 1, *end = strstr(name, " seed="),
                     *base = strstr(name, " base=");
                if (!end) end = name + strcspn(name, "\r\n");
                if (end > name) snprintf(m->name, sizeof m->name, "%.*s", (int)(end - name), name);
                if (base)
                    snprintf(m->base, sizeof m->base, "%.*s", (int)strcspn(base + 6, " \r\n"),
                             base + 6);
            }
            continue;
        }
        if (!header) {
            memcpy(head, line, sizeof head);
            nf = plot_split_tabs(head, h, MAX_COLUMNS);
            if (nf > MAX_COLUMNS) {
                fclose(fp);
                return sim_fail(err, SIM_EFORMAT, path, ln, 0, "more than %d columns", MAX_COLUMNS);
            }
            memcpy(f, h, sizeof f);
            c_t = col_index(f, nf, "sim_time_s");
            c_up = col_index(f, nf, "bytes_up");
            c_down = col_index(f, nf, "bytes_down");
            c_acc = col_index(f, nf, "acc_global");
            c_pers = col_index(f, nf, "acc_pers_mean");
            c_p10 = col_index(f, nf, "acc_pers_p10");
            c_drop = col_index(f, nf, "dropped");
            c_round = col_index(f, nf, "round");
            c_flops = col_index(f, nf, "client_flops");
            c_base = col_index(f, nf, "acc_base_mean");
            c_base_p10 = col_index(f, nf, "acc_base_p10");
            c_val = col_index(f, nf, "acc_val_mean");
            c_energy = col_index(f, nf, "client_energy_j");
            if (c_t < 0 || c_up < 0 || c_down < 0) {
                fclose(fp);
                return sim_fail(err, SIM_EFORMAT, path, ln, 0,
                                "header row lacks sim_time_s, bytes_up or bytes_down");
            }
            header = 1;
            continue;
        }
        int k = plot_split_tabs(line, f, MAX_COLUMNS);
        if (k != nf) {
            rc = sim_fail(err, SIM_EFORMAT, path, ln, 0, "%d fields; the header row has %d", k, nf);
            break;
        }
        if ((rc = check_row(f, k, h, line, path, ln, err))) break;
        if (m->n == cap) {
            cap = cap ? 2 * cap : 64;
            double **cols[N_COLUMNS];
            columns(m, cols);
            for (int i = 0; i < N_COLUMNS; i++)
                *cols[i] = sim_xrealloc(*cols[i], sizeof(double) * (size_t)cap);
        }
        int i = m->n++;
        m->time_s[i] = field(f, k, c_t);
        m->round[i] = field(f, k, c_round);
        m->bytes[i] = field(f, k, c_up) + field(f, k, c_down);
        m->acc[i] = field(f, k, c_acc);
        m->acc_pers[i] = field(f, k, c_pers);
        m->acc_p10[i] = field(f, k, c_p10);
        m->dropped[i] = field(f, k, c_drop);
        m->flops[i] = field(f, k, c_flops);
        m->acc_base[i] = field(f, k, c_base);
        m->acc_base_p10[i] = field(f, k, c_base_p10);
        m->acc_val[i] = field(f, k, c_val);
        m->energy[i] = field(f, k, c_energy);
        m->has_energy |= !isnan(m->energy[i]);
        m->has_base |= !isnan(m->acc_base[i]);
        m->has_global |= !isnan(m->acc[i]);
        m->has_pers |= !isnan(m->acc_pers[i]);
        m->has_p10 |= !isnan(m->acc_p10[i]);
    }
    fclose(fp);
    if (!rc && !header) rc = sim_fail(err, SIM_EFORMAT, path, ln, 0, "no header row");
    if (rc) plot_metrics_destroy(m);
    return rc;
}

void plot_metrics_destroy(plot_metrics *m)
{
    if (!m) return;
    double **cols[N_COLUMNS];
    columns(m, cols);
    for (int i = 0; i < N_COLUMNS; i++)
        free(*cols[i]);
    memset(m, 0, sizeof *m);
}

/* dst: src as its base algorithm's run (a copy): the acc_base_* columns are the personalized
 * ones, and the name gets " [base NAME]". */
static void base_copy(plot_metrics *dst, const plot_metrics *src)
{
    *dst = *src;
    double **cols[N_COLUMNS];
    columns(dst, cols);
    for (int i = 0; i < N_COLUMNS; i++)
        if (*cols[i]) {
            double *c = sim_xmalloc(sizeof(double) * (size_t)(src->n ? src->n : 1));
            memcpy(c, *cols[i], sizeof(double) * (size_t)src->n);
            *cols[i] = c;
        }
    double *t = dst->acc_pers;
    dst->acc_pers = dst->acc_base, dst->acc_base = t;
    t = dst->acc_p10;
    dst->acc_p10 = dst->acc_base_p10, dst->acc_base_p10 = t;
    for (int i = 0; i < dst->n; i++)
        dst->acc_val[i] = NAN; /* the run's own algorithm's, not its base's */
    dst->has_pers = dst->has_p10 = dst->is_base = 1;
    dst->has_base = 0;
    size_t len = strlen(dst->name);
    snprintf(dst->name + len, sizeof dst->name - len, " [base %s]", dst->base[0] ? dst->base : "?");
}

int plot_metrics_load_runs(plot_metrics *m, int *run, int *count, const char *const *dirs, int n,
                           int use_pers, sim_err *err)
{
    int k = 0, rc;
    *count = 0;
    for (int r = 0; r < n; r++) {
        if ((rc = plot_metrics_load(&m[k], dirs[r], err))) {
            while (k > 0)
                plot_metrics_destroy(&m[--k]);
            return rc;
        }
        m[k].use_pers = use_pers;
        run[k++] = r;
        if (m[k - 1].has_base && plot_metrics_pers(&m[k - 1])) {
            base_copy(&m[k], &m[k - 1]);
            run[k++] = r;
        }
    }
    *count = k;
    return SIM_OK;
}

int plot_metrics_pers(const plot_metrics *m)
{
    return (m->use_pers && m->has_pers) || !m->has_global;
}

double plot_metrics_acc(const plot_metrics *m, int i)
{
    return plot_metrics_pers(m) ? m->acc_pers[i] : m->acc[i];
}

int plot_metrics_to_target(const plot_metrics *m, double target, double *round, double *time_s,
                           double *bytes)
{
    for (int i = 0; i < m->n; i++)
        if (plot_metrics_acc(m, i) >= target) {
            if (round) *round = m->round[i];
            *time_s = m->time_s[i];
            *bytes = m->bytes[i];
            return 1;
        }
    if (round) *round = NAN;
    *time_s = *bytes = NAN;
    return 0;
}

int plot_metrics_best_val(const plot_metrics *m)
{
    int best = -1;
    for (int i = 0; i < m->n; i++)
        if (!isnan(m->acc_val[i]) && (best < 0 || m->acc_val[i] > m->acc_val[best])) best = i;
    return best;
}

/* ---------------------------------------------------------------------------------------- */
/* the gnuplot process */

struct plot_proc {
    FILE *in; /* gnuplot's stdin (owned) */
    pid_t pid;
};

int plot_gnuplot_found(void)
{
    const char *path = getenv("PATH");
    if (!path) return 0;
    char buf[4096];
    while (*path) {
        size_t n = strcspn(path, ":");
        snprintf(buf, sizeof buf, "%.*s/gnuplot", (int)n, n ? path : ".");
        if (!access(buf, X_OK)) return 1;
        path += n + (path[n] == ':');
    }
    return 0;
}

plot_proc *plot_open(void)
{
    if (!plot_gnuplot_found()) return NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    int fd[2];
    if (pipe(fd)) return NULL;
    /* close-on-exec: a later gnuplot (the next run of a sweep) must not hold this pipe open */
    fcntl(fd[0], F_SETFD, FD_CLOEXEC);
    fcntl(fd[1], F_SETFD, FD_CLOEXEC);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[0], 0);
    char *argv[] = {"gnuplot", NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd[0]);
    if (rc) {
        close(fd[1]);
        return NULL;
    }
    plot_proc *p = sim_xcalloc(1, sizeof *p);
    p->in = fdopen(fd[1], "w");
    p->pid = pid;
    if (!p->in) {
        close(fd[1]);
        waitpid(pid, NULL, 0);
        free(p);
        return NULL;
    }
    /* gnuplot's own warnings and errors go to its stderr, which is ours */
    fputs("set print '-'\n", p->in);
    return p;
}

int plot_close(plot_proc *p)
{
    if (!p) return 0;
    /* a script gnuplot did not get whole (it died: EPIPE) drew nothing it says it did */
    int lost = ferror(p->in) | (fclose(p->in) != 0);
    int st = 0;
    while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
    }
    free(p);
    return WIFEXITED(st) && WEXITSTATUS(st) ? WEXITSTATUS(st) : WIFEXITED(st) && !lost ? 0 : -1;
}

static const char *const fig_names[] = {"acc_time",  "acc_bytes", "timeline",
                                        "to_target", "links",     "acc_energy"};
enum { N_FIGS = sizeof fig_names / sizeof fig_names[0] };

void plot_remove(const plot_opts *o, const char *out_dir)
{
    char path[1200];
    for (int i = 0; i < N_FIGS; i++) {
        snprintf(path, sizeof path, "%s/%s.%s", out_dir, fig_names[i], plot_format_ext(o->format));
        unlink(path);
    }
}

int plot_check(const plot_opts *o, const char *out_dir, unsigned figs, sim_err *err)
{
    char path[1200];
    for (int i = 0; i < N_FIGS; i++) {
        if (!(figs & (1u << i))) continue;
        snprintf(path, sizeof path, "%s/%s.%s", out_dir, fig_names[i], plot_format_ext(o->format));
        struct stat st;
        if (stat(path, &st))
            return sim_fail(err, SIM_EIO, path, 0, 0, "gnuplot did not write it: %s",
                            strerror(errno));
        if (st.st_size == 0) return sim_fail(err, SIM_EIO, path, 0, 0, "gnuplot left it empty");
    }
    return SIM_OK;
}

void plot_fig_list(char *buf, size_t n, const plot_opts *o, unsigned figs)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < N_FIGS && len < n; i++)
        if (figs & (1u << i))
            len += (size_t)snprintf(buf + len, n - len, "%s%s.%s", len ? ", " : "", fig_names[i],
                                    plot_format_ext(o->format));
}

void plot_put_str(FILE *f, const char *s)
{
    fputc('\'', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\'')
            fputs("''", f); /* the only escape a single-quoted gnuplot string has */
        else if (*p < 0x20 || *p == 0x7f)
            fputc('?', f); /* a newline would end the command */
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}

/* name = 'text' */
void plot_put_var(FILE *f, const char *name, const char *text)
{
    fprintf(f, "%s = ", name);
    plot_put_str(f, text);
    fputc('\n', f);
}

/* ---------------------------------------------------------------------------------------- */
/* figures */

void plot_time_unit(double max_s, double *div, const char **label)
{
    if (max_s >= 3 * 3600.0)
        *div = 3600, *label = "h";
    else if (max_s >= 600)
        *div = 60, *label = "min";
    else
        *div = 1, *label = "s";
}

/* joules: J, kJ or MJ */
static void energy_unit(double max, double *div, const char **label)
{
    if (max >= 2e6)
        *div = 1e6, *label = "MJ";
    else if (max >= 2e3)
        *div = 1e3, *label = "kJ";
    else
        *div = 1, *label = "J";
}

void plot_bytes_unit(double max, double *div, const char **label)
{
    if (max >= 2.0 * (1 << 30))
        *div = (double)(1 << 30), *label = "GiB";
    else if (max >= 2.0 * (1 << 20))
        *div = (double)(1 << 20), *label = "MiB";
    else
        *div = 1024, *label = "KiB";
}

/* Start a figure: clean state, terminal, output file DIR/NAME.EXT, title. */
void plot_begin(FILE *f, const plot_opts *o, const char *dir, const char *name, const char *title)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, plot_format_ext(o->format));
    fputs("reset\n", f);
    if (o->format == PLOT_SVG)
        fputs("set terminal svg size 1000,600 noenhanced font 'sans,12' background '#ffffff'\n", f);
    else if (o->format == PLOT_PDF)
        fputs("set terminal pdfcairo size 8in,4.8in noenhanced font 'sans,10'\n", f);
    else
        fputs("set terminal pngcairo size 1000,600 noenhanced font 'sans,11'\n", f);
    plot_put_var(f, "fedsim_out", path);
    plot_put_var(f, "fedsim_title", title);
    fputs("set output fedsim_out\nset title fedsim_title\n"
          "set datafile separator \"\\t\"\nset grid\nset key bottom right box opaque\n",
          f);
}

void plot_end(FILE *f)
{
    fputs("unset output\n", f);
}

/* An overlay's groups of runs that differ only in their seed (seeds.c), drawn as one mean curve
 * in a band: the group of each curve, and per group its runs and its blocks in the band file
 * (block[2g + what], -1: drawn run by run, as a group of one is). */
typedef struct plot_bands {
    const char *path; /* the band file, seed_bands.tsv */
    int *group, *runs, *block;
} plot_bands;

/* Curve colours of an overlay, so a group's band and its mean share one. */
static const char *const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1",
                                      "#9c755f", "#76b7b2", "#edc948", "#ff9da7", "#bab0ac"};

/* The accuracy curves of runs m[0..n) against time (what = 0), bytes (1) or the clients' energy
 * (2: no seed bands, b NULL). One run: its
 * global, personalized mean and bottom-decile curves; several: one curve per run, or per group of
 * runs that differ only in their seed (b), each legend saying which accuracy it is when they are
 * not all the same one (else the y axis says). nv holds (legend, run folder) pairs. */
static void acc_figure(FILE *f, const plot_opts *o, const char *out_dir, int what,
                       const plot_metrics *m, int n, const char *const *nv, const plot_bands *b,
                       const char *title)
{
    double xmax = 0;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < m[r].n; i++) {
            double x = what == 2 ? m[r].energy[i] : what ? m[r].bytes[i] : m[r].time_s[i];
            if (x > xmax) xmax = x;
        }
    double div;
    const char *unit;
    if (what == 2)
        energy_unit(xmax, &div, &unit);
    else if (what)
        plot_bytes_unit(xmax, &div, &unit);
    else
        plot_time_unit(xmax, &div, &unit);
    static const char *const fig[3] = {"acc_time", "acc_bytes", "acc_energy"};
    plot_begin(f, o, out_dir, fig[what], title);
    if (what == 2)
        fprintf(f, "set xlabel 'cumulative energy of the clients'' jobs (%s)'\n", unit);
    else if (what)
        fprintf(f, "set xlabel 'cumulative bytes, up + down (%s%s)'\n", unit,
                o->log_x ? ", log scale" : "");
    else
        fprintf(f, "set xlabel 'simulated time (%s)'\n", unit);
    /* which accuracy the curves are: 1 global, 2 personalized mean, 3 both kinds */
    int kinds = 0;
    for (int r = 0; n > 1 && r < n; r++)
        if (m[r].has_global || m[r].has_pers) kinds |= plot_metrics_pers(&m[r]) ? 2 : 1;
    fprintf(f, "set ylabel '%s'\nset yrange [0:1]\n",
            kinds == 1   ? "accuracy: global model on the test set"
            : kinds == 2 ? "accuracy: personalized models, mean over clients"
                         : "accuracy (fraction correct)");
    if (what == 1 && o->log_x)
        fputs("set logscale x\n", f);
    else if (xmax > 0)
        fputs("set xrange [0:*]\n", f);
    else /* the initial model's row alone (a live plot's first): [0:0] is no range */
        fputs("set xrange [0:1]\n", f);
    char x[160];
    if (what == 2)
        snprintf(x, sizeof x, "(column('client_energy_j')/%.17g)", div);
    else if (what)
        snprintf(x, sizeof x, "((column('bytes_up')+column('bytes_down'))/%.17g)", div);
    else
        snprintf(x, sizeof x, "(column('sim_time_s')/%.17g)", div);
    for (int r = 0; r < n; r++) {
        char v[32], text[1200];
        snprintf(v, sizeof v, "fedsim_f%d", r);
        snprintf(text, sizeof text, "%s/metrics.tsv", nv[2 * r + 1]);
        plot_put_var(f, v, text);
        const char *label = nv[2 * r];
        char grp[600];
        int g = b ? b->group[r] : -1;
        if (g >= 0 && b->block[2 * g + what] >= 0) {
            plot_seed_label(grp, sizeof grp, label, b->runs[g]);
            label = grp;
        }
        snprintf(v, sizeof v, "fedsim_n%d", r);
        snprintf(text, sizeof text, "%s%s", label,
                 kinds != 3                 ? ""
                 : plot_metrics_pers(&m[r]) ? " (personalized mean)"
                                            : " (global model)");
        plot_put_var(f, v, text);
    }
    if (b) plot_put_var(f, "fedsim_b", b->path);
    const char *sep = "plot ";
    if (n == 1) {
        static const struct {
            const char *col, *title, *style;
        } c[] = {
                {"acc_global", "global model, test set", "lw 2 pt 7 ps 0.6 lc rgb '#4e79a7'"},
                {"acc_pers_mean", "personalized, mean over clients",
                 "lw 2 pt 5 ps 0.6 lc rgb '#f28e2b'"},
                {"acc_pers_p10", "personalized, 10th-percentile client",
                 "lw 1 dt 2 pt 4 ps 0.6 lc rgb '#e15759'"},
                {"acc_base_mean", NULL, "lw 2 pt 9 ps 0.6 lc rgb '#76b7b2'"},
        };
        int has[4] = {m->has_global, m->has_pers, m->has_p10, m->has_base};
        if (m->has_base) { /* the base's curve (fl_algo.base): its name comes from the file */
            char bt[128];
            snprintf(bt, sizeof bt, "personalized, mean over clients, as %s evaluates", m->base);
            plot_put_var(f, "fedsim_bt", bt);
        }
        for (int i = 0; i < 4; i++) {
            if (!has[i]) continue;
            fprintf(f, "%sfedsim_f0 using %s:'%s' with linespoints %s title ", sep, x, c[i].col,
                    c[i].style);
            if (c[i].title)
                fprintf(f, "'%s'", c[i].title);
            else
                fputs("fedsim_bt", f);
            sep = ", \\\n  ";
        }
    } else {
        int slot = 0, bands = 0;
        for (int r = 0; r < n; r++) {
            if (!m[r].has_global && !m[r].has_pers) continue;
            int g = b ? b->group[r] : -1, k = g >= 0 ? b->block[2 * g + what] : -1;
            const char *color = palette[slot % (int)(sizeof palette / sizeof *palette)];
            if (k >= 0) { /* a group of seeds: its band and mean, at its first run */
                int first = 1;
                for (int q = 0; q < r; q++)
                    first &= b->group[q] != g;
                if (!first) continue;
                fprintf(f,
                        "%sfedsim_b index %d using ($1/%.17g):3:4 with filledcurves fc rgb '%s' "
                        "fs transparent solid 0.22 noborder notitle, \\\n"
                        "  fedsim_b index %d using ($1/%.17g):2 with lines lw 2 lc rgb '%s' "
                        "title fedsim_n%d",
                        sep, k, div, color, k, div, color, r);
                bands = 1;
            } else {
                fprintf(f,
                        "%sfedsim_f%d using %s:'%s' with linespoints lw 2 pt %d ps 0.6 lc rgb "
                        "'%s' title fedsim_n%d",
                        sep, r, x,
                        m[r].is_base               ? "acc_base_mean"
                        : plot_metrics_pers(&m[r]) ? "acc_pers_mean"
                                                   : "acc_global",
                        5 + slot % 9, color, r);
            }
            slot++;
            sep = ", \\\n  ";
        }
        if (bands)
            fprintf(f,
                    "%skeyentry with filledcurves fc rgb '#888888' fs transparent solid 0.3 "
                    "noborder title 'band: lowest to highest run of the seeds'",
                    sep);
    }
    fputs("\n", f);
    plot_end(f);
}

int plot_run(plot_proc *p, const plot_opts *o, const char *run_dir, const char *out_dir,
             sim_err *err)
{
    plot_metrics m;
    int rc = plot_metrics_load(&m, run_dir, err);
    if (rc) return rc;
    if (!out_dir) out_dir = run_dir;
    FILE *f = p->in;
    unsigned figs = 0;
    if (m.n && (m.has_global || m.has_pers)) {
        figs |= PLOT_FIG_ACC_TIME | PLOT_FIG_ACC_BYTES;
        const char *names[2] = {m.name, run_dir};
        char title[512];
        snprintf(title, sizeof title, "%s: accuracy vs simulated time", m.name);
        acc_figure(f, o, out_dir, 0, &m, 1, names, NULL, title);
        snprintf(title, sizeof title, "%s: accuracy vs bytes communicated", m.name);
        acc_figure(f, o, out_dir, 1, &m, 1, names, NULL, title);
        if (m.has_energy) {
            figs |= PLOT_FIG_ACC_ENERGY;
            snprintf(title, sizeof title, "%s: accuracy vs the clients' energy", m.name);
            acc_figure(f, o, out_dir, 2, &m, 1, names, NULL, title);
        }
    }
    figs |= plot_timeline(f, o, run_dir, out_dir, m.name);
    fflush(f);
    plot_metrics_destroy(&m);
    return (int)figs;
}

/* Group the overlay's curves by seed (seeds.c) into b, and write the band file, b->path, whole:
 * a block per group of two or more runs and axis (time, then bytes) where their curves meet;
 * none (and no file) when no run shares its group. */
static int write_bands(const char *out_dir, const plot_metrics *m, const int *run, int n,
                       const char *const *dirs, plot_bands *b, char *path, size_t path_len,
                       sim_err *err)
{
    snprintf(path, path_len, "%s/seed_bands.tsv", out_dir);
    b->path = path;
    b->group = sim_xcalloc((size_t)(n > 0 ? n : 1), sizeof *b->group);
    int ng = plot_group_curves(m, run, n, dirs, b->group), blocks = 0;
    b->runs = sim_xcalloc((size_t)(ng > 0 ? ng : 1), sizeof *b->runs);
    b->block = sim_xcalloc((size_t)(2 * ng > 0 ? 2 * ng : 1), sizeof *b->block);
    int *members = sim_xcalloc((size_t)(n > 0 ? n : 1), sizeof *members);
    char *text = NULL, *one = NULL;
    size_t len = 0, one_len = 0;
    FILE *t = open_memstream(&text, &len);
    if (!t) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno));
    fputs("# fedsim: runs that differ only in their seed, per group and axis (a block each, in "
          "the order of the overlay's legend; time in s, bytes up + down): the mean accuracy and "
          "the lowest and highest run's\nx\tacc_mean\tacc_min\tacc_max\n",
          t);
    for (int g = 0; g < ng; g++) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (b->group[i] == g && (m[i].has_global || m[i].has_pers)) members[k++] = i;
        b->runs[g] = k;
        for (int what = 0; what < 2; what++) {
            b->block[2 * g + what] = -1;
            if (k < 2) continue;
            FILE *bf = open_memstream(&one, &one_len);
            if (!bf) continue;
            int points = plot_band_block(bf, m, members, k, what);
            fclose(bf);
            if (points > 0) {
                fwrite(one, 1, one_len, t);
                b->block[2 * g + what] = blocks++;
            }
            free(one);
            one = NULL;
        }
    }
    free(members);
    int rc = SIM_OK;
    if (fclose(t)) rc = sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno));
    if (!rc && blocks) rc = sim_write_file(path, text, len, err);
    if (!rc && !blocks) unlink(path); /* an earlier overlay's, of other runs */
    free(text);
    return rc;
}

/* A name for a bar's label in to_target.tsv: a TSV field (no tabs or newlines). */
static void put_field(FILE *f, const char *s)
{
    for (; *s; s++)
        fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
}

int plot_overlay(plot_proc *p, const plot_opts *o, const char *out_dir, int n_runs,
                 const char *const *dirs, const char *const *names, sim_err *err)
{
    /* curves: each run, and its base's (plot_metrics_load_runs) */
    int cap = 2 * (n_runs > 0 ? n_runs : 1);
    plot_metrics *m = sim_xcalloc((size_t)cap, sizeof *m);
    const char **nv = sim_xcalloc((size_t)(2 * cap), sizeof *nv);
    char(*fallback)[400] = sim_xcalloc((size_t)cap, sizeof *fallback);
    int *run = sim_xcalloc((size_t)cap, sizeof *run), any = 0, n;
    int rc = plot_metrics_load_runs(m, run, &n, dirs, n_runs, o->acc_pers, err);
    for (int i = 0; i < n; i++)
        any |= m[i].has_global || m[i].has_pers;
    for (int i = 0; i < n; i++) {
        int r = run[i], own = i - m[i].is_base, clash = 0; /* own: the run's own curve */
        /* runs of one scenario share its name: tell them apart by their folders */
        for (int q = 0; q < n; q++)
            clash |= run[q] != r && !m[q].is_base && !strcmp(m[q].name, m[own].name);
        const char *label = names && names[r] ? names[r] : NULL;
        char folder[256];
        if (!label && clash) {
            base_name(folder, sizeof folder, dirs[r]);
            label = folder;
        }
        nv[2 * i] = m[i].name;
        nv[2 * i + 1] = dirs[r];
        if (label) {
            if (m[i].is_base)
                snprintf(fallback[i], sizeof fallback[i], "%s [base %s]", label, m[i].base);
            else
                snprintf(fallback[i], sizeof fallback[i], "%s", label);
            nv[2 * i] = fallback[i];
        }
    }
    char path[1200], *text = NULL; /* to_target.tsv, made in memory and written whole */
    size_t len = 0;
    FILE *t = NULL;
    snprintf(path, sizeof path, "%s/to_target.tsv", out_dir);
    plot_bands bands = {0};
    char bpath[1200];
    if (!rc && any) rc = write_bands(out_dir, m, run, n, dirs, &bands, bpath, sizeof bpath, err);
    if (!rc && any && !(t = open_memstream(&text, &len)))
        rc = sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno));
    unsigned figs = 0;
    double tmax = 0, bmax = 0;
    int reached_any = 0, bars = 0;
    size_t longest = 0; /* the longest bar name */
    FILE *f = p->in;
    if (!rc && any) {
        /* time and bytes to the target accuracy: a bar per run, or per group of seeds (the mean
         * of the runs that reached it, whiskers from the lowest to the highest), and "not
         * reached" where none did */
        fprintf(t,
                "# fedsim: simulated time and bytes (up + down) each run, or group of runs that "
                "differ only in their seed, took to reach accuracy %g (a group: the mean, lowest "
                "and highest of its runs that reached it; final_acc: the mean of all)\n"
                "bar\tname\treached\truns\ttime_s\ttime_min\ttime_max\tbytes\tbytes_min\t"
                "bytes_max\tfinal_acc\n",
                o->target);
        for (int r = 0; r < n; r++) {
            int g = bands.group[r], first = 1, runs = 0, hit = 0;
            for (int q = 0; q < r; q++)
                first &= bands.group[q] != g;
            if (!first) continue;
            double ts, bs, st = 0, sb = 0, acc = 0, t0 = INFINITY, t1 = 0, b0 = INFINITY, b1 = 0;
            for (int q = r; q < n; q++) {
                if (bands.group[q] != g) continue;
                runs++;
                acc += m[q].n ? plot_metrics_acc(&m[q], m[q].n - 1) : NAN;
                if (!plot_metrics_to_target(&m[q], o->target, NULL, &ts, &bs)) continue;
                hit++, st += ts, sb += bs;
                t0 = fmin(t0, ts), t1 = fmax(t1, ts), b0 = fmin(b0, bs), b1 = fmax(b1, bs);
            }
            reached_any |= hit > 0;
            if (hit && t1 > tmax) tmax = t1;
            if (hit && b1 > bmax) bmax = b1;
            char name[600];
            if (runs > 1)
                plot_seed_label(name, sizeof name, nv[2 * r], runs);
            else
                snprintf(name, sizeof name, "%s", nv[2 * r]);
            if (strlen(name) > longest) longest = strlen(name);
            fprintf(t, "%d\t", bars++);
            put_field(t, name);
            if (!hit) t0 = t1 = b0 = b1 = 0;
            fprintf(t, "\t%d\t%d\t%.9f\t%.9f\t%.9f\t%.0f\t%.0f\t%.0f\t%.6f\n", hit, runs,
                    hit ? st / hit : 0.0, t0, t1, hit ? sb / hit : 0.0, b0, b1, acc / runs);
        }
        if (fclose(t)) rc = sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno));
        t = NULL;
        if (!rc) rc = sim_write_file(path, text, len, err);
    }
    if (!rc && any) {
        figs = PLOT_FIG_ACC_TIME | PLOT_FIG_ACC_BYTES | PLOT_FIG_TO_TARGET;
        acc_figure(f, o, out_dir, 0, m, n, nv, &bands, "accuracy vs simulated time");
        acc_figure(f, o, out_dir, 1, m, n, nv, &bands, "accuracy vs bytes communicated");
        int energy = 1;
        for (int i = 0; i < n; i++)
            energy &= m[i].has_energy || !(m[i].has_global || m[i].has_pers);
        if (energy) { /* every run with a curve has energy: seeds as separate curves */
            figs |= PLOT_FIG_ACC_ENERGY;
            acc_figure(f, o, out_dir, 2, m, n, nv, NULL, "accuracy vs the clients' energy");
        }
        double td, bd;
        const char *tu, *bu;
        plot_time_unit(tmax, &td, &tu);
        plot_bytes_unit(bmax, &bd, &bu);
        char title[128];
        snprintf(title, sizeof title, "time and bytes to reach accuracy %g", o->target);
        /* the bar names stand vertically under their bars: room for the longest */
        int bmargin = 3 + (int)(0.42 * (double)(longest < 45 ? longest : 45));
        plot_begin(f, o, out_dir, "to_target", "");
        plot_put_var(f, "fedsim_f", path);
        plot_put_var(f, "fedsim_mt", title);
        fprintf(f,
                "unset title\nunset key\nset style fill solid 0.85 noborder\nset boxwidth 0.6\n"
                "set xrange [-0.6:%d.4]\nset yrange [0:%s]\nset grid noxtics\n"
                "set xtics rotate by 90 right\nset bmargin %d\n"
                "set multiplot layout 1,2 title fedsim_mt\n",
                bars - 1, reached_any ? "*" : "1", bmargin);
        static const char *const what[2][2] = {{"time", "simulated time to target"},
                                               {"bytes", "bytes to target, up+down"}};
        for (int k = 0; k < 2; k++) {
            const char *w = what[k][0], *col = k ? "bytes" : "time_s";
            double d = k ? bd : td;
            fprintf(f,
                    "set ylabel '%s (%s)'\n"
                    "plot fedsim_f using 0:(column('%s')/%.17g):xtic(2) with boxes "
                    "lc rgb '%s', \\\n"
                    "  fedsim_f using 0:(column('runs') > 1 && column('reached') > 0 ? "
                    "column('%s')/%.17g : NaN):(column('%s_min')/%.17g):(column('%s_max')/%.17g) "
                    "with yerrorbars pt 0 lw 1.5 lc rgb '#333333', \\\n"
                    "  fedsim_f using 0:(0):(column('reached') == 0 ? 'not reached' : "
                    "column('reached') < column('runs') ? sprintf('%%d of %%d reached', "
                    "column('reached'), column('runs')) : '') with labels rotate left offset 0,0.5 "
                    "tc rgb '#d62728'\n",
                    what[k][1], k ? bu : tu, col, d, k ? "#59a14f" : "#4e79a7", col, d, w, d, w, d);
        }
        fputs("unset multiplot\n", f);
        plot_end(f);
        fflush(f);
    }
    if (t) fclose(t);
    free(text);
    for (int r = 0; r < n; r++)
        plot_metrics_destroy(&m[r]);
    free(m);
    free(nv);
    free(fallback);
    free(run);
    free(bands.group);
    free(bands.runs);
    free(bands.block);
    return rc ? rc : (int)figs;
}

/* ---------------------------------------------------------------------------------------- */
/* live */

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void plot_live_init(plot_live *l, plot_proc *proc, const plot_opts *o, const char *dir)
{
    l->proc = proc;
    l->opts = *o;
    l->dir = dir;
    l->last_wall = wall_s();
    l->every_s = 5;
    l->figs = 0;
}

void plot_live_tick(void *arg, int round, int final)
{
    plot_live *l = arg;
    if (!l->proc || (!final && round == 0)) return;
    double w = wall_s();
    if (!final && w - l->last_wall < l->every_s) return;
    l->last_wall = w;
    sim_err err = {0};
    int figs = plot_run(l->proc, &l->opts, l->dir, NULL, &err);
    if (figs >= 0) l->figs = (unsigned)figs;
    if (figs < 0 && final) {
        char msg[1200];
        sim_err_format(&err, msg, sizeof msg);
        fprintf(stderr, "fedsim: plots: %s\n", msg);
    }
}
