/* devices/avail.c -- availability processes: always, two-state Markov, trace (see avail.h). */
#include "devices/avail.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An exponential holding time of the given mean, in whole ns, at least 1 so that every state
 * lasts and next_change is strictly later. Inversion on (0, 1] keeps log finite. */
static sim_time draw_hold(sim_rng *r, sim_time mean_ns)
{
    double u = 1.0 - sim_rng_uniform(r);
    double ns = -log(u) * (double)mean_ns;
    if (ns >= 4e18) return (sim_time)4e18; /* beyond any run; keeps sums far from overflow */
    sim_time d = (sim_time)llround(ns);
    return d < 1 ? 1 : d;
}

void dev_avail_init(dev_avail_proc *p, const dev_avail_spec *s, const sim_rng *stream)
{
    memset(p, 0, sizeof *p);
    p->kind = s->kind;
    p->rng = *stream;
    switch (s->kind) {
    case DEV_AVAIL_ALWAYS:
        p->on = 1;
        break;
    case DEV_AVAIL_MARKOV: {
        assert(s->mean_on_ns > 0 && s->mean_off_ns > 0);
        p->mean_on_ns = s->mean_on_ns;
        p->mean_off_ns = s->mean_off_ns;
        double pon = (double)s->mean_on_ns / ((double)s->mean_on_ns + (double)s->mean_off_ns);
        p->on = sim_rng_uniform(&p->rng) < pon;
        p->until = draw_hold(&p->rng, p->on ? p->mean_on_ns : p->mean_off_ns);
        break;
    }
    case DEV_AVAIL_TRACE:
        assert(s->trace && s->trace->kind == DEV_TRACE_AVAIL);
        p->trace = s->trace;
        p->offset_ns = s->offset_ns;
        if (s->offset_random) {
            assert(s->trace->period > 0);
            p->offset_ns = (sim_time)sim_rng_below(&p->rng, (uint64_t)s->trace->period);
        }
        break;
    }
}

/* Move a Markov process forward so that t lies in its current state [.., until). */
static void markov_advance(dev_avail_proc *p, sim_time t)
{
    while (t >= p->until) {
        p->on = !p->on;
        p->until += draw_hold(&p->rng, p->on ? p->mean_on_ns : p->mean_off_ns);
    }
}

int dev_avail_online(dev_avail_proc *p, sim_time t)
{
    assert(t >= p->last && "availability is queried in non-decreasing time order");
    p->last = t;
    switch (p->kind) {
    case DEV_AVAIL_ALWAYS:
        return 1;
    case DEV_AVAIL_MARKOV:
        markov_advance(p, t);
        return p->on;
    case DEV_AVAIL_TRACE:
        return dev_trace_value(p->trace, t + p->offset_ns) != 0.0;
    }
    return 1;
}

sim_time dev_avail_next_change(dev_avail_proc *p, sim_time t)
{
    assert(t >= p->last && "availability is queried in non-decreasing time order");
    p->last = t;
    switch (p->kind) {
    case DEV_AVAIL_ALWAYS:
        return DEV_TIME_NEVER;
    case DEV_AVAIL_MARKOV:
        markov_advance(p, t);
        return p->until;
    case DEV_AVAIL_TRACE: {
        sim_time c = dev_trace_next_change(p->trace, t + p->offset_ns);
        return c == DEV_TIME_NEVER ? c : c - p->offset_ns;
    }
    }
    return DEV_TIME_NEVER;
}

void dev_avail_spec_copy(dev_avail_spec *dst, const dev_avail_spec *src)
{
    *dst = *src;
    dev_trace_ref(dst->trace);
}

void dev_avail_spec_destroy(dev_avail_spec *s)
{
    if (!s) return;
    dev_trace_free(s->trace);
    memset(s, 0, sizeof *s);
}

/* path as named in a YAML file, resolved against that file's directory when relative. */
static char *resolve_path(const char *yaml_file, const char *path)
{
    const char *slash = yaml_file ? strrchr(yaml_file, '/') : NULL;
    if (path[0] == '/' || !slash) return sim_xstrdup(path);
    size_t dir = (size_t)(slash - yaml_file) + 1, n = strlen(path) + 1;
    char *out = sim_xmalloc(dir + n);
    memcpy(out, yaml_file, dir);
    memcpy(out + dir, path, n);
    return out;
}

int dev_trace_from_yaml(dev_trace **out, const sim_yaml *map, dev_trace_kind kind, sim_err *err)
{
    *out = NULL;
    const sim_yaml *fnode = sim_yaml_get(map, "file"), *loop = sim_yaml_get(map, "loop");
    /* the map's keys are all read (the caller read its own): a typo is reported, not the file
     * its absence leaves unnamed */
    int rc = sim_yaml_check_keys(map, err);
    if (rc) return rc;
    if (!fnode) return sim_yaml_fail(map, err, "missing 'file' (the trace file to read)");
    const char *name;
    if ((rc = sim_yaml_str(fnode, "file", &name, err))) return rc;
    char *path = resolve_path(fnode->file, name);
    dev_trace *t;
    sim_err e = {0};
    rc = dev_trace_load(&t, path, kind, &e);
    if (rc && e.line == 0) /* about the whole file: at the key that named it */
        rc = sim_yaml_fail_key(map, "file", err, "file: trace '%s': %s", path, e.msg);
    else if (rc && err)
        *err = e; /* at its line */
    free(path);
    if (rc) return rc;
    if (loop) {
        sim_time period = 0;
        if (!(loop->kind == SIM_YAML_SCALAR &&
              (!strcmp(loop->value, "false") || !strcmp(loop->value, "no")))) {
            rc = sim_yaml_time(loop, "loop", &period, err);
            if (!rc && period <= 0) rc = sim_yaml_fail(loop, err, "loop period must be > 0");
            if (!rc && period <= t->at[t->n - 1])
                rc = sim_yaml_fail(loop, err, "loop period must be after the last point of '%s'",
                                   t->file);
        }
        dev_trace *c = NULL;
        if (!rc) rc = dev_trace_with_period(&c, t, period, err);
        dev_trace_free(t);
        if (rc) return rc;
        t = c;
    }
    *out = t;
    return SIM_OK;
}

int dev_avail_spec_from_yaml(dev_avail_spec *out, const sim_yaml *node, sim_err *err)
{
    memset(out, 0, sizeof *out);
    const char *kind;
    int rc;
    if (node->kind == SIM_YAML_SCALAR) {
        if (!strcmp(node->value, "always")) return SIM_OK;
        return sim_yaml_fail(node, err,
                             "availability '%s': use 'always', {kind: markov, mean_on: ..., "
                             "mean_off: ...} or {kind: trace, file: ...}",
                             node->value);
    }
    if (node->kind != SIM_YAML_MAP)
        return sim_yaml_fail(node, err, "availability must be 'always' or a map with 'kind'");
    const sim_yaml *k = sim_yaml_get(node, "kind");
    if (!k) return sim_yaml_fail(node, err, "availability: missing 'kind' (always, markov, trace)");
    if ((rc = sim_yaml_str(k, "kind", &kind, err))) return rc;

    if (!strcmp(kind, "always")) return SIM_OK;
    if (!strcmp(kind, "markov")) {
        const char *names[2] = {"mean_on", "mean_off"};
        sim_time *dst[2] = {&out->mean_on_ns, &out->mean_off_ns};
        for (int i = 0; i < 2; i++) {
            const sim_yaml *v = sim_yaml_get(node, names[i]);
            if (!v)
                rc = sim_yaml_fail(node, err, "markov availability: missing '%s' (e.g. 30 min)",
                                   names[i]);
            else if (!(rc = sim_yaml_time(v, names[i], dst[i], err)) && *dst[i] <= 0)
                rc = sim_yaml_fail(v, err, "%s must be > 0", names[i]);
            if (rc) {
                memset(out, 0, sizeof *out);
                return rc;
            }
        }
        out->kind = DEV_AVAIL_MARKOV;
        return SIM_OK;
    }
    if (!strcmp(kind, "trace")) {
        const sim_yaml *off = sim_yaml_get(node, "offset"); /* read before the trace's check */
        if ((rc = dev_trace_from_yaml(&out->trace, node, DEV_TRACE_AVAIL, err))) return rc;
        out->kind = DEV_AVAIL_TRACE;
        if (off && off->kind == SIM_YAML_SCALAR && !strcmp(off->value, "random")) {
            if (!out->trace->period)
                rc = sim_yaml_fail(off, err, "offset: random needs a looping trace (add 'loop')");
            out->offset_random = 1;
        } else if (off) {
            rc = sim_yaml_time(off, "offset", &out->offset_ns, err);
        }
        if (rc) dev_avail_spec_destroy(out);
        return rc;
    }
    return sim_yaml_fail(k, err, "unknown availability kind '%s' (always, markov, trace)", kind);
}

void dev_avail_spec_describe(const dev_avail_spec *s, char *buf, size_t n)
{
    char a[32], b[32];
    switch (s->kind) {
    case DEV_AVAIL_ALWAYS:
        snprintf(buf, n, "always");
        return;
    case DEV_AVAIL_MARKOV:
        sim_format_time(a, sizeof a, s->mean_on_ns);
        sim_format_time(b, sizeof b, s->mean_off_ns);
        snprintf(buf, n, "markov(on %s, off %s)", a, b);
        return;
    case DEV_AVAIL_TRACE: {
        const char *base = strrchr(s->trace->file, '/');
        base = base ? base + 1 : s->trace->file;
        if (s->trace->period) {
            sim_format_time(a, sizeof a, s->trace->period);
            snprintf(buf, n, "trace(%s, loop %s%s)", base, a,
                     s->offset_random ? ", random offset" : "");
        } else {
            snprintf(buf, n, "trace(%s)", base);
        }
        return;
    }
    }
    snprintf(buf, n, "?");
}
