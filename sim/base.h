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
#include <stdio.h>

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

/* An output file written bit by bit, whose first failed write is kept with its OS reason. stdio
 * drops a buffer it failed to write, and a later fflush or fclose of the emptied buffer succeeds,
 * so a failure is only seen, and its errno only known, at the write that met it: every write
 * through these functions is checked there. Writes after a failure are skipped. */
typedef struct sim_out {
    FILE *f;
    char path[1024];
    int errnum; /* errno of the first failure, 0 while every write went through */
} sim_out;

/* Open path with fopen's mode ("wb", "r+b", ...); SIM_EIO naming path and the OS reason. */
int sim_out_open(sim_out *o, const char *path, const char *mode, sim_err *err);
void sim_out_printf(sim_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sim_out_write(sim_out *o, const void *p, size_t n);
/* Keep a failure met outside these functions (a write to o->f, a truncate): errnum, or errno. */
void sim_out_fail(sim_out *o, int errnum);
/* Flush o, and with sync also fsync it: SIM_EIO "PATH: cannot write: REASON" when this or any
 * write before it failed. */
int sim_out_flush(sim_out *o, int sync, sim_err *err);
/* sim_out_flush, then close; o is closed either way (a NULL o->f is a no-op). */
int sim_out_close(sim_out *o, int sync, sim_err *err);
/* Close without a word: the error path, where a failure is already being reported. */
void sim_out_discard(sim_out *o);

/* Replace path by len bytes of data: written to PATH.tmp, fsync'ed, renamed over path, so path
 * is the old file or the new one, never part of one. SIM_EIO naming the file and the reason. */
int sim_write_file(const char *path, const void *data, size_t len, sim_err *err);

/* fopen(path, "r") of a file a user named (a scenario, a catalog, a trace, a partition file):
 * NULL with *why the OS reason, or what it is when a reader of the whole file could not use it:
 * a directory, or a device, which it would read forever (/dev/zero). A pipe is a file here
 * (`fedsim run <(make-scenario)`): it ends when its writer does. */
FILE *sim_open_input(const char *path, const char **why);

void *sim_xmalloc(size_t size);
void *sim_xcalloc(size_t n, size_t size);
void *sim_xrealloc(void *p, size_t size);
char *sim_xstrdup(const char *s);

#define SIM_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif /* SIM_BASE_H */
