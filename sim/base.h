/* sim/base.h -- the three error classes every module shares, and checked allocation.
 *
 * Bugs are asserts. Out-of-memory aborts inside sim_xmalloc (so callers never check for NULL).
 * Bad input (a file, a key, a value) returns a negative SIM_E* code and fills a sim_err with the
 * file, line and column it came from; only the command-line front end prints it and exits.
 * Included from every layer, so it depends on nothing but libc.
 */
#ifndef SIM_BASE_H
#define SIM_BASE_H

#include <stddef.h>

enum {
    SIM_OK = 0,
    SIM_EIO = -1,     /* a file could not be opened, read or written */
    SIM_EFORMAT = -2, /* a file's content is malformed (magic, size, syntax) */
    SIM_EINVAL = -3,  /* a value is out of range or inconsistent */
};

typedef struct sim_err {
    char msg[512];  /* what is wrong, one line, no trailing newline */
    char file[256]; /* the file it came from, "" when none */
    int line, col;  /* 1-based position in file, 0 when unknown */
} sim_err;

/* Fill err (when non-NULL) and return code, so callers write `return sim_fail(err, ...)`. */
int sim_fail(sim_err *err, int code, const char *file, int line, int col, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));

/* Format err as "file:line:col: msg" (parts that are unknown are left out) into buf. */
void sim_err_format(const sim_err *err, char *buf, size_t size);

void *sim_xmalloc(size_t size);
void *sim_xcalloc(size_t n, size_t size);
void *sim_xrealloc(void *p, size_t size);
char *sim_xstrdup(const char *s);

#define SIM_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif /* SIM_BASE_H */
