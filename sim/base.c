/* sim/base.c -- error filling, checked file writing and the allocators that abort on
 * out-of-memory (see base.h). */
#include "sim/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int sim_out_open(sim_out *o, const char *path, const char *mode, sim_err *err)
{
    snprintf(o->path, sizeof o->path, "%s", path);
    o->errnum = 0;
    o->f = fopen(path, mode);
    if (!o->f) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot create: %s", strerror(errno));
    return SIM_OK;
}

void sim_out_fail(sim_out *o, int errnum)
{
    if (!o->errnum) o->errnum = errnum ? errnum : EIO; /* EIO: a short write that set no errno */
}

void sim_out_printf(sim_out *o, const char *fmt, ...)
{
    if (o->errnum) return;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    if (vfprintf(o->f, fmt, ap) < 0) sim_out_fail(o, errno);
    va_end(ap);
}

void sim_out_write(sim_out *o, const void *p, size_t n)
{
    if (o->errnum) return;
    errno = 0;
    if (fwrite(p, 1, n, o->f) != n) sim_out_fail(o, errno);
}

int sim_out_flush(sim_out *o, int sync, sim_err *err)
{
    errno = 0;
    if (!o->errnum && (fflush(o->f) || ferror(o->f))) sim_out_fail(o, errno);
    /* EINVAL: a pipe or terminal, which has nothing to sync */
    if (!o->errnum && sync && fsync(fileno(o->f)) && errno != EINVAL) sim_out_fail(o, errno);
    if (o->errnum)
        return sim_fail(err, SIM_EIO, o->path, 0, 0, "cannot write: %s", strerror(o->errnum));
    return SIM_OK;
}

int sim_out_close(sim_out *o, int sync, sim_err *err)
{
    if (!o->f) return SIM_OK;
    int rc = sim_out_flush(o, sync, err);
    errno = 0;
    if (fclose(o->f) && !rc) {
        sim_out_fail(o, errno);
        rc = sim_fail(err, SIM_EIO, o->path, 0, 0, "cannot write: %s", strerror(o->errnum));
    }
    o->f = NULL;
    return rc;
}

void sim_out_discard(sim_out *o)
{
    if (o->f) fclose(o->f);
    o->f = NULL;
}

int sim_write_file(const char *path, const void *data, size_t len, sim_err *err)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return sim_fail(err, SIM_EIO, tmp, 0, 0, "cannot create: %s", strerror(errno));
    const char *c = data;
    int e = 0;
    while (len && !e) {
        ssize_t w = write(fd, c, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) e = w < 0 ? errno : EIO;
        c += w > 0 ? w : 0;
        len -= w > 0 ? (size_t)w : 0;
    }
    if (!e && fsync(fd)) e = errno;
    if (close(fd) && !e) e = errno;
    if (e) {
        unlink(tmp);
        return sim_fail(err, SIM_EIO, tmp, 0, 0, "cannot write: %s", strerror(e));
    }
    if (rename(tmp, path)) {
        e = errno;
        unlink(tmp);
        return sim_fail(err, SIM_EIO, path, 0, 0, "cannot replace: %s", strerror(e));
    }
    return SIM_OK;
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

FILE *sim_open_input(const char *path, const char **why)
{
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f || fstat(fileno(f), &st)) {
        *why = strerror(errno);
        if (f) fclose(f);
        return NULL;
    }
    if (S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        *why = S_ISDIR(st.st_mode) ? "it is a directory" : "it is a device, not a file";
        fclose(f);
        return NULL;
    }
    return f;
}
