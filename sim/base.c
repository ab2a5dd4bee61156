/* sim/base.c -- error filling and the allocators that abort on out-of-memory (see base.h). */
#include "sim/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sim_fail(sim_err *err, int code, const char *file, int line, int col, const char *fmt, ...)
{
    if (!err) return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    snprintf(err->file, sizeof err->file, "%s", file ? file : "");
    err->line = line;
    err->col = col;
    return code;
}

void sim_err_format(const sim_err *err, char *buf, size_t size)
{
    if (!err->file[0])
        snprintf(buf, size, "%s", err->msg);
    else if (err->line <= 0)
        snprintf(buf, size, "%s: %s", err->file, err->msg);
    else if (err->col <= 0)
        snprintf(buf, size, "%s:%d: %s", err->file, err->line, err->msg);
    else
        snprintf(buf, size, "%s:%d:%d: %s", err->file, err->line, err->col, err->msg);
}

static void oom(size_t size)
{
    fprintf(stderr, "fedsim: out of memory allocating %zu bytes\n", size);
    abort();
}

void *sim_xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p) oom(size);
    return p;
}

void *sim_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *sim_xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q) oom(size);
    return q;
}

char *sim_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(sim_xmalloc(n), s, n);
}
