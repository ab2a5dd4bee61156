/* plots/seeds.c -- runs that differ only in their seed: which they are (by their folders' names,
 * the rule `fedsim summary` groups by), and, for the overlays, each group's mean accuracy curve
 * with the band from its lowest to its highest run.
 *
 * Runs of one scenario under different seeds evaluate at the same rounds but at different
 * simulated times and byte counts, so the curves are combined on the union of their x values,
 * each run's accuracy read off its own curve as drawn (linear between its evaluations), and only
 * where every run has one: from the latest first point to the earliest last.
 */
#include "plots/plot_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Whether s[0..n) is "seed=" and digits: the seed item of a sweep point's name. */
static int is_seed_item(const char *s, size_t n)
{
    if (n <= 5 || strncmp(s, "seed=", 5)) return 0;
    for (size_t i = 5; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

void plot_seed_group(char *out, size_t n, const char *dir)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    const char *b = dir;
    for (size_t i = 0; i < len; i++)
        if (dir[i] == '/') b = dir + i + 1;
    size_t bl = (size_t)(dir + len - b), e = bl;
    while (e > 0 && b[e - 1] >= '0' && b[e - 1] <= '9')
        e--;
    int dashed = e > 0 && e < bl && b[e - 1] == '-';
    size_t o = (size_t)snprintf(out, n, "%.*s", (int)(b - dir), dir);
    if (dashed) {
        snprintf(out + (o < n ? o : n), o < n ? n - o : 0, "%.*s*", (int)e, b);
        return;
    }
    for (size_t i = 0, j; i < bl && o < n; i = j + 1) {
        for (j = i; j < bl && b[j] != ',';)
            j++;
        int seed = is_seed_item(b + i, j - i);
        o += (size_t)snprintf(out + o, n - o, "%s%.*s", i ? "," : "", seed ? 6 : (int)(j - i),
                              seed ? "seed=*" : b + i);
    }
}

int plot_group_curves(const plot_metrics *m, const int *run, int n, const char *const *dirs,
                      int *group)
{
    char(*key)[1200] = sim_xcalloc((size_t)(n > 0 ? n : 1), sizeof *key);
    int groups = 0;
    for (int i = 0; i < n; i++) {
        plot_seed_group(key[i], sizeof key[i], dirs[run[i]]);
        group[i] = -1;
        for (int q = 0; q < i && group[i] < 0; q++) /* a base's curve joins its bases only */
            if (m[q].is_base == m[i].is_base && !strcmp(key[q], key[i])) group[i] = group[q];
        if (group[i] < 0) group[i] = groups++;
    }
    free(key);
    return groups;
}

void plot_seed_label(char *out, size_t n, const char *label, int runs)
{
    /* the label without its seed: a trailing -SEED, or a seed=N item */
    char g[512];
    plot_seed_group(g, sizeof g, label);
    size_t len = strlen(g);
    if (len >= 2 && !strcmp(g + len - 2, "-*")) {
        g[len - 2] = 0;
    } else {
        char *s = strstr(g, "seed=*");
        if (s) {
            size_t tail = strlen(s + 6);
            if (s[6] == ',')
                memmove(s, s + 7, tail);
            else if (s > g && s[-1] == ',')
                memmove(s - 1, s + 6, tail + 1);
            else
                memmove(s, s + 6, tail + 1);
        }
    }
    snprintf(out, n, "%s%smean of %d seeds", g, g[0] ? ": " : "", runs);
}

/* m's accuracy at x (linear between its evaluations), NaN outside its curve. */
static double acc_at(const plot_metrics *m, int what, double x)
{
    const double *xs = what ? m->bytes : m->time_s;
    double px = NAN, pa = NAN;
    for (int i = 0; i < m->n; i++) {
        double a = plot_metrics_acc(m, i);
        if (isnan(a)) continue;
        if (xs[i] == x) return a;
        if (xs[i] > x) {
            if (isnan(px)) return NAN;
            return pa + (a - pa) * (x - px) / (xs[i] - px);
        }
        px = xs[i], pa = a;
    }
    return NAN;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int plot_band_block(FILE *f, const plot_metrics *m, const int *members, int k, int what)
{
    int cap = 0;
    for (int j = 0; j < k; j++)
        cap += m[members[j]].n;
    double *xs = sim_xcalloc((size_t)(cap > 0 ? cap : 1), sizeof *xs);
    int nx = 0;
    for (int j = 0; j < k; j++) {
        const plot_metrics *r = &m[members[j]];
        for (int i = 0; i < r->n; i++)
            if (!isnan(plot_metrics_acc(r, i))) xs[nx++] = what ? r->bytes[i] : r->time_s[i];
    }
    qsort(xs, (size_t)nx, sizeof *xs, cmp_double);
    int points = 0;
    for (int i = 0; i < nx; i++) {
        if (i && xs[i] == xs[i - 1]) continue;
        double sum = 0, lo = INFINITY, hi = -INFINITY;
        int all = 1;
        for (int j = 0; j < k && all; j++) {
            double a = acc_at(&m[members[j]], what, xs[i]);
            all = !isnan(a);
            sum += a;
            lo = a < lo ? a : lo;
            hi = a > hi ? a : hi;
        }
        if (!all) continue;
        fprintf(f, "%.17g\t%.9f\t%.9f\t%.9f\n", xs[i], sum / k, lo, hi);
        points++;
    }
    fputs("\n\n", f); /* a gnuplot data block ends: the next is `index` + 1 */
    free(xs);
    return points;
}
