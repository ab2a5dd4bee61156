/* devices/population.c -- phones drawn from measured populations (see population.h). */
#include "devices/population.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The next data line of f into line (comments, blank lines and the header skipped): its fields,
 * split at tabs, into field[0..n). Returns the number of fields, 0 at the end, -1 on a read error
 * (errno kept). *lineno counts lines. */
static int next_row(FILE *f, char *line, size_t cap, char **field, int n, int *lineno,
                    int *header_seen)
{
    while (fgets(line, (int)cap, f)) {
        (*lineno)++;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        if (!*header_seen) {
            *header_seen = 1;
            continue;
        }
        int k = 0;
        for (char *s = line, *tab; k < n; s = tab + 1) {
            field[k++] = s;
            if (!(tab = strchr(s, '\t'))) break;
            *tab = 0;
        }
        return k;
    }
    return ferror(f) ? -1 : 0;
}

/* A number > 0 (>= 0 with zero_ok) in text, else -1. */
static int number(const char *text, int zero_ok, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(*out) || *out < 0 || (!zero_ok && *out == 0))
        return -1;
    return 0;
}

typedef int row_fn(void *dst, char **field, int n);

static int phone_row(void *dst, char **field, int n)
{
    dev_phone *p = dst;
    double gib;
    if (n != 5 || number(field[2], 0, &gib) || number(field[4], 0, &p->score)) return -1;
    snprintf(p->model, sizeof p->model, "%s", field[0]);
    p->ram_bytes = gib * 1024 * 1024 * 1024;
    return 0;
}

static int user_row(void *dst, char **field, int n)
{
    dev_net_user *u = dst;
    double v[4];
    for (int i = 0; i < 4; i++)
        if (n != 5 || number(field[i + 1], i % 2, &v[i])) return -1;
    const double kib_s = 8 * 1024.0; /* KiB/s in bit/s */
    *u = (dev_net_user){v[0] * kib_s, v[1] * kib_s, v[2] * kib_s, v[3] * kib_s};
    return 0;
}

/* Read the rows of path through fn into a growing array of size-byte items. */
static int read_table(const char *path, size_t size, row_fn *fn, const char *what, void **out,
                      int *count, sim_err *err)
{
    const char *why;
    FILE *f = sim_open_input(path, &why);
    if (!f) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot open %s: %s", what, why);
    char line[1024], *field[8];
    int lineno = 0, header = 0, n, cap = 0, rc = SIM_OK;
    char *items = NULL;
    *count = 0;
    while ((n = next_row(f, line, sizeof line, field, 8, &lineno, &header)) > 0) {
        if (*count == cap) {
            cap = cap ? 2 * cap : 64;
            items = sim_xrealloc(items, size * (size_t)cap);
        }
        if (fn(items + size * (size_t)*count, field, n)) {
            rc = sim_fail(err, SIM_EFORMAT, path, lineno, 1,
                          "%s: expected 5 tab-separated fields with positive numbers", what);
            break;
        }
        (*count)++;
    }
    if (!rc && n < 0)
        rc = sim_fail(err, SIM_EIO, path, lineno, 0, "cannot read %s: %s", what, strerror(errno));
    fclose(f);
    if (!rc && *count == 0) rc = sim_fail(err, SIM_EFORMAT, path, 0, 0, "%s: no rows", what);
    if (rc) {
        free(items);
        *count = 0;
        items = NULL;
    }
    *out = items;
    return rc;
}

int dev_population_load(dev_population *p, const char *phones_path, const char *users_path,
                        sim_err *err)
{
    memset(p, 0, sizeof *p);
    void *phones = NULL, *users = NULL;
    int rc = read_table(phones_path, sizeof(dev_phone), phone_row, "phone list", &phones,
                        &p->n_phones, err);
    if (!rc)
        rc = read_table(users_path, sizeof(dev_net_user), user_row, "bandwidth list", &users,
                        &p->n_users, err);
    p->phones = phones;
    p->users = users;
    if (rc) dev_population_destroy(p);
    return rc;
}

void dev_population_destroy(dev_population *p)
{
    if (!p) return;
    free(p->phones);
    free(p->users);
    memset(p, 0, sizeof *p);
}

void dev_population_draw(const dev_population *p, const dev_profile *ref, sim_rng *r,
                         dev_profile *out, int *phone, int *user)
{
    int ph = (int)sim_rng_below(r, (uint64_t)p->n_phones);
    int us = (int)sim_rng_below(r, (uint64_t)p->n_users);
    const dev_phone *d = &p->phones[ph];
    const dev_net_user *u = &p->users[us];
    dev_profile_copy(out, ref);
    memset(out->dist, 0, sizeof out->dist);
    double s = pow(d->score / p->ref_score, p->exponent);
    out->compute_flops = ref->compute_flops * s;
    out->step_overhead_ns = (sim_time)llround((double)ref->step_overhead_ns / s);
    out->mem_bandwidth_bps = ref->mem_bandwidth_bps * s;
    out->memory_bytes = d->ram_bytes;
    /* the user's measured rates: each transfer draws its own (the engine, dev_rate_draw) */
    out->down_bps = u->down_mean;
    out->up_bps = u->up_mean;
    out->down_draw = (dev_rate_dist){u->down_mean, u->down_sigma, p->floor * u->down_mean};
    out->up_draw = (dev_rate_dist){u->up_mean, u->up_sigma, p->floor * u->up_mean};
    if (phone) *phone = ph;
    if (user) *user = us;
}
