/* devices/trace.c -- reading and querying piecewise-constant traces (see trace.h for the format).
 *
 * The parser works on whole lines split at blanks: the last token of a point line is the value and
 * everything before it is the time, handed to sim_parse_time so that traces accept exactly the time
 * spellings scenario files do ("30 min", "30min", "1.5 h").
 */
#include "devices/trace.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct token {
    const char *s; /* start in the line buffer */
    size_t len;
    int col; /* 1-based column */
} token;

#define MAX_TOKENS 8

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* Split line (NUL-terminated, comment already cut) into at most MAX_TOKENS tokens; returns the
 * count, or MAX_TOKENS + 1 when there are more. */
static int split(const char *line, token *tok)
{
    int n = 0;
    const char *p = line;
    for (;;) {
        while (is_blank(*p))
            p++;
        if (!*p) return n;
        if (n == MAX_TOKENS) return MAX_TOKENS + 1;
        tok[n].s = p;
        tok[n].col = (int)(p - line) + 1;
        while (*p && !is_blank(*p))
            p++;
        tok[n].len = (size_t)(p - tok[n].s);
        n++;
    }
}

/* Parse the time spanning tokens [first, last] of a line. */
static int parse_span_time(const token *tok, int first, int last, const char *name, int line,
                           sim_time *out, sim_err *err)
{
    char buf[128];
    size_t len = (size_t)(tok[last].s + tok[last].len - tok[first].s);
    if (len >= sizeof buf)
        return sim_fail(err, SIM_EFORMAT, name, line, tok[first].col, "time too long");
    memcpy(buf, tok[first].s, len);
    buf[len] = '\0';
    sim_err e = {0};
    if (sim_parse_time(buf, out, &e) != SIM_OK)
        return sim_fail(err, SIM_EFORMAT, name, line, tok[first].col, "bad time: %s", e.msg);
    return SIM_OK;
}

static int parse_value(const token *v, dev_trace_kind kind, const char *name, int line, double *out,
                       sim_err *err)
{
    char buf[64];
    if (v->len >= sizeof buf)
        return sim_fail(err, SIM_EFORMAT, name, line, v->col, "value too long");
    memcpy(buf, v->s, v->len);
    buf[v->len] = '\0';
    if (kind == DEV_TRACE_AVAIL) {
        if (strcmp(buf, "0") && strcmp(buf, "1"))
            return sim_fail(err, SIM_EFORMAT, name, line, v->col,
                            "availability value '%s' must be 0 (offline) or 1 (online)", buf);
        *out = buf[0] == '1';
        return SIM_OK;
    }
    /* strtod alone would take "inf", "nan" and hex; a speed factor is a plain decimal */
    char *end;
    errno = 0;
    double x = (buf[0] >= '0' && buf[0] <= '9') || buf[0] == '.' ? strtod(buf, &end) : NAN;
    if (isnan(x) || *end || errno == ERANGE || !isfinite(x))
        return sim_fail(err, SIM_EFORMAT, name, line, v->col,
                        "speed factor '%s' must be a plain number >= 0 (e.g. 0.5)", buf);
    *out = x;
    return SIM_OK;
}

static void trace_destroy(dev_trace *t)
{
    free(t->at);
    free(t->value);
    free(t->file);
    free(t);
}

int dev_trace_parse(dev_trace **out, const char *text, const char *name, dev_trace_kind kind,
                    sim_err *err)
{
    *out = NULL;
    dev_trace *t = sim_xcalloc(1, sizeof *t);
    t->kind = kind;
    t->file = sim_xstrdup(name);
    t->refs = 1;
    size_t cap = 0;
    int loop_line = 0, loop_col = 0, last_line = 0;
    char *buf = NULL;
    size_t buf_cap = 0;
    int rc = SIM_OK;

    const char *p = text;
    for (int line = 1; *p; line++) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len + 1 > buf_cap) {
            buf_cap = len + 1;
            buf = sim_xrealloc(buf, buf_cap);
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        p = eol ? eol + 1 : p + len;
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';

        token tok[MAX_TOKENS];
        int nt = split(buf, tok);
        if (nt == 0) continue;
        if (nt > MAX_TOKENS) {
            rc = sim_fail(err, SIM_EFORMAT, name, line, tok[0].col,
                          "expected '<time> <value>' or 'loop <period>'");
            goto fail;
        }
        if (tok[0].len == 4 && !memcmp(tok[0].s, "loop", 4)) {
            if (loop_line) {
                rc = sim_fail(err, SIM_EFORMAT, name, line, tok[0].col,
                              "second 'loop' line (the first is on line %d)", loop_line);
                goto fail;
            }
            if (nt < 2) {
                rc = sim_fail(err, SIM_EFORMAT, name, line, tok[0].col,
                              "'loop' needs a period, e.g. 'loop 24 h'");
                goto fail;
            }
            rc = parse_span_time(tok, 1, nt - 1, name, line, &t->period, err);
            if (rc) goto fail;
            if (t->period <= 0) {
                rc = sim_fail(err, SIM_EINVAL, name, line, tok[1].col, "loop period must be > 0");
                goto fail;
            }
            loop_line = line;
            loop_col = tok[1].col;
            continue;
        }
        if (nt < 2) {
            rc = sim_fail(err, SIM_EFORMAT, name, line, tok[0].col,
                          "expected '<time> <value>' (e.g. '30 min 1'), found one token");
            goto fail;
        }
        sim_time at;
        double v = 0;
        rc = parse_span_time(tok, 0, nt - 2, name, line, &at, err);
        if (rc) goto fail;
        if (t->n > 0 && at <= t->at[t->n - 1]) {
            rc = sim_fail(err, SIM_EFORMAT, name, line, tok[0].col,
                          "times must be strictly increasing (line %d has a time at or after "
                          "this one)",
                          last_line);
            goto fail;
        }
        rc = parse_value(&tok[nt - 1], kind, name, line, &v, err);
        if (rc) goto fail;
        if (t->n == cap) {
            cap = cap ? 2 * cap : 16;
            t->at = sim_xrealloc(t->at, cap * sizeof *t->at);
            t->value = sim_xrealloc(t->value, cap * sizeof *t->value);
        }
        t->at[t->n] = at;
        t->value[t->n] = v;
        t->n++;
        last_line = line;
    }
    if (t->n == 0) {
        rc = sim_fail(err, SIM_EFORMAT, name, 0, 0, "trace has no points ('<time> <value>' lines)");
        goto fail;
    }
    if (t->period && t->at[t->n - 1] >= t->period) {
        rc = sim_fail(err, SIM_EINVAL, name, loop_line, loop_col,
                      "loop period must be after the last point (line %d)", last_line);
        goto fail;
    }
    free(buf);
    *out = t;
    return SIM_OK;
fail:
    free(buf);
    trace_destroy(t);
    return rc;
}

int dev_trace_load(dev_trace **out, const char *path, dev_trace_kind kind, sim_err *err)
{
    *out = NULL;
    const char *why;
    FILE *f = sim_open_input(path, &why);
    if (!f) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot open trace: %s", why);
    size_t cap = 4096, n = 0;
    char *text = sim_xmalloc(cap);
    for (;;) {
        n += fread(text + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        cap *= 2;
        text = sim_xrealloc(text, cap);
    }
    int bad = ferror(f) ? errno : 0;
    fclose(f);
    if (bad) {
        free(text);
        return sim_fail(err, SIM_EIO, path, 0, 0, "cannot read trace: %s", strerror(bad));
    }
    text[n] = '\0';
    if (memchr(text, '\0', n)) {
        free(text);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0, "trace is not a text file (NUL byte)");
    }
    int rc = dev_trace_parse(out, text, path, kind, err);
    free(text);
    return rc;
}

dev_trace *dev_trace_ref(dev_trace *t)
{
    if (t) {
        assert(t->refs > 0);
        t->refs++;
    }
    return t;
}

void dev_trace_free(dev_trace *t)
{
    if (!t) return;
    assert(t->refs > 0);
    if (--t->refs == 0) trace_destroy(t);
}

int dev_trace_with_period(dev_trace **out, const dev_trace *t, sim_time period, sim_err *err)
{
    *out = NULL;
    assert(period >= 0);
    if (period && t->at[t->n - 1] >= period)
        return sim_fail(err, SIM_EINVAL, t->file, 0, 0,
                        "loop period must be after the trace's last point");
    dev_trace *c = sim_xcalloc(1, sizeof *c);
    c->kind = t->kind;
    c->n = t->n;
    c->period = period;
    c->refs = 1;
    c->file = sim_xstrdup(t->file);
    c->at = sim_xmalloc(t->n * sizeof *c->at);
    c->value = sim_xmalloc(t->n * sizeof *c->value);
    memcpy(c->at, t->at, t->n * sizeof *c->at);
    memcpy(c->value, t->value, t->n * sizeof *c->value);
    *out = c;
    return SIM_OK;
}

/* Index of the first point with time > at (n when none). */
static size_t upper_bound(const dev_trace *t, sim_time at)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->at[mid] <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

double dev_trace_value(const dev_trace *t, sim_time at)
{
    assert(at >= 0);
    sim_time in = t->period ? at % t->period : at;
    size_t i = upper_bound(t, in);
    if (i > 0) return t->value[i - 1];
    return t->period ? t->value[t->n - 1] : 1.0; /* before the first point */
}

sim_time dev_trace_next_change(const dev_trace *t, sim_time at)
{
    assert(at >= 0);
    double cur = dev_trace_value(t, at);
    if (!t->period) {
        for (size_t i = upper_bound(t, at); i < t->n; i++)
            if (t->value[i] != cur) return t->at[i];
        return DEV_TIME_NEVER;
    }
    sim_time base = at - at % t->period;
    size_t i = upper_bound(t, at % t->period);
    /* n steps visit every point once, wrapping into the next period; equal all round = never */
    for (size_t step = 0; step < t->n; step++, i++) {
        if (i == t->n) {
            i = 0;
            if (base > DEV_TIME_NEVER - 2 * t->period) return DEV_TIME_NEVER;
            base += t->period;
        }
        if (t->value[i] != cur) return base + t->at[i];
    }
    return DEV_TIME_NEVER;
}
