/* sim/checkpoint.c -- atomic, checksummed checkpoint files (see checkpoint.h). */
#include "sim/checkpoint.h"
#include "sim/blas.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char magic[8] = {'F', 'S', 'C', 'K', 'P', 'T', '0', '1'};

uint64_t sim_checkpoint_hash(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void put_le64(unsigned char *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

/* The whole file into *buf (caller frees). */
static int slurp(const char *path, unsigned char **buf, size_t *len, sim_err *err)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
        fclose(f);
        return sim_fail(err, SIM_EIO, path, 0, 0, "not a regular file");
    }
    size_t n = (size_t)st.st_size;
    unsigned char *b = sim_xmalloc(n ? n : 1);
    size_t got = fread(b, 1, n, f);
    fclose(f);
    if (got != n) {
        free(b);
        return sim_fail(err, SIM_EIO, path, 0, 0, "read error");
    }
    *buf = b;
    *len = n;
    return SIM_OK;
}

int sim_checkpoint_hash_file(const char *path, uint64_t *out, sim_err *err)
{
    unsigned char *b;
    size_t n;
    int rc = slurp(path, &b, &n, err);
    if (rc) return rc;
    *out = sim_checkpoint_hash(b, n);
    free(b);
    return SIM_OK;
}

const char *sim_checkpoint_build(void)
{
    static char id[256]; /* the program file a process runs does not change: hash it once */
    if (!id[0]) {
        uint64_t h;
        sim_err err;
        char exe[32] = "unknown";
        if (!sim_checkpoint_hash_file("/proc/self/exe", &h, &err))
            snprintf(exe, sizeof exe, "%016llx", (unsigned long long)h);
        /* the library's configuration has its version: an upgrade keeps the kernels' name */
        snprintf(id, sizeof id, "exe %s, %s kernels, %s", exe, sim_blas_corename(),
                 openblas_get_config());
    }
    return id;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int sim_checkpoint_write(const char *path, const void *payload, size_t len, sim_err *err)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unsigned char trailer[SIM_CHECKPOINT_TRAILER];
    put_le64(trailer, (uint64_t)len);
    put_le64(trailer + 8, sim_checkpoint_hash(payload, len));
    memcpy(trailer + 16, magic, 8);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return sim_fail(err, SIM_EIO, tmp, 0, 0, "cannot create: %s", strerror(errno));
    if (write_all(fd, payload, len) || write_all(fd, trailer, sizeof trailer) || fsync(fd)) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return sim_fail(err, SIM_EIO, tmp, 0, 0, "cannot write: %s", strerror(e));
    }
    if (close(fd) || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return sim_fail(err, SIM_EIO, path, 0, 0, "cannot replace: %s", strerror(e));
    }
    /* the rename itself survives a crash only once the folder is on disk too */
    char dir[1100];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd); /* best effort: some file systems refuse fsync on a folder */
        close(dfd);
    }
    return SIM_OK;
}

int sim_checkpoint_read(const char *path, void **payload, size_t *len, sim_err *err)
{
    *payload = NULL;
    *len = 0;
    unsigned char *b;
    size_t n;
    int rc = slurp(path, &b, &n, err);
    if (rc) return rc;
    if (n < SIM_CHECKPOINT_TRAILER || memcmp(b + n - 8, magic, 8)) {
        free(b);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "not a fedsim checkpoint, or truncated (no trailer); not loaded");
    }
    const unsigned char *t = b + n - SIM_CHECKPOINT_TRAILER;
    uint64_t said = get_le64(t);
    if (said != n - SIM_CHECKPOINT_TRAILER) {
        free(b);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "truncated or padded checkpoint (%zu payload bytes, trailer says %llu); "
                        "not loaded",
                        n - SIM_CHECKPOINT_TRAILER, (unsigned long long)said);
    }
    if (get_le64(t + 8) != sim_checkpoint_hash(b, n - SIM_CHECKPOINT_TRAILER)) {
        free(b);
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "corrupted checkpoint (checksum mismatch); not loaded");
    }
    *payload = b;
    *len = n - SIM_CHECKPOINT_TRAILER;
    return SIM_OK;
}
