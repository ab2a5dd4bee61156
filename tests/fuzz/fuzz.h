/* tests/fuzz/fuzz.h -- what the fuzz harnesses share: splitting one input into parts, and handing
 * a part to a decoder that reads files.
 *
 * Each tests/fuzz/fuzz_<name>.c defines LLVMFuzzerTestOneInput for one decoder; `make fuzz` links
 * it with libFuzzer (clang) and `make test` with tests/fuzz/replay.c (gcc), which feeds it every
 * file of tests/fuzz/corpus/<name>/. A harness must return normally on any input: a decoder that
 * crashes, leaks, trips a sanitizer or breaks an invariant the harness checks (fuzz_require) is
 * the bug. Inputs made of several files (a scenario and its --set overrides, IDX images and
 * labels) are split at a marker line, so corpus entries stay readable and the fuzzer learns the
 * marker from the comparison that finds it.
 */
#ifndef TESTS_FUZZ_FUZZ_H
#define TESTS_FUZZ_FUZZ_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_PARTS 16

/* An invariant of the decoder's output: a violation aborts, which the fuzzer reports as a crash
 * and the replay as a crashed test. */
#define fuzz_require(cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* data cut at every occurrence of sep into at most FUZZ_MAX_PARTS parts (the last one keeps any
 * further markers); part[i] is a NUL-terminated copy of len[i] bytes (free with fuzz_parts_free).
 * Returns the number of parts, at least 1. */
static inline int fuzz_split(const uint8_t *data, size_t size, const char *sep, char **part,
                             size_t *len)
{
    size_t m = strlen(sep), at = 0;
    int n = 0;
    for (size_t i = 0;; i++) {
        int cut = i + m <= size && n < FUZZ_MAX_PARTS - 1 && !memcmp(data + i, sep, m);
        if (!cut && i < size) continue;
        size_t l = i - at;
        part[n] = malloc(l + 1);
        if (!part[n]) abort();
        if (l) memcpy(part[n], data + at, l);
        part[n][l] = '\0';
        len[n++] = l;
        if (!cut) return n;
        at = i + m;
        i = at - 1;
    }
}

static inline void fuzz_parts_free(char **part, int n)
{
    for (int i = 0; i < n; i++)
        free(part[i]);
}

static char fuzz_scratch[512];

static inline void fuzz_scratch_remove(void)
{
    DIR *d = opendir(fuzz_scratch);
    if (d) {
        char path[1024];
        for (struct dirent *e; (e = readdir(d));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(path, sizeof path, "%s/%s", fuzz_scratch, e->d_name);
                unlink(path);
            }
        closedir(d);
    }
    rmdir(fuzz_scratch);
}

/* The per-process scratch folder (made on first use, removed at exit) where decoders that take a
 * path find their input: under $TMPDIR, else in /dev/shm, since a file written and read on every
 * run costs 60 times more on this machine's /tmp disk, else in /tmp. */
static inline const char *fuzz_dir(void)
{
    if (!fuzz_scratch[0]) {
        const char *t = getenv("TMPDIR");
        if (!t || !*t) t = access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm";
        snprintf(fuzz_scratch, sizeof fuzz_scratch, "%s/fedsim-fuzz-XXXXXX", t);
        if (!mkdtemp(fuzz_scratch)) {
            perror(fuzz_scratch);
            abort();
        }
        atexit(fuzz_scratch_remove);
    }
    return fuzz_scratch;
}

/* Writes n bytes to the file name in the scratch folder; path (size 1024) gets its path. */
static inline void fuzz_write(char *path, const char *name, const void *data, size_t n)
{
    snprintf(path, 1024, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f)) {
        perror(path);
        abort();
    }
}

#endif /* TESTS_FUZZ_FUZZ_H */
