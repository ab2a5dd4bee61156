/* tests/files.h -- file helpers for the tests that run the fedsim binary and compare its output
 * files: read a whole file, compare two files or two run folders byte for byte. */
#ifndef TESTS_FILES_H
#define TESTS_FILES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file, NUL-terminated (caller frees), or NULL when it cannot be opened. */
static inline char *test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    *len = fread(p, 1, (size_t)n, f);
    p[*len] = 0;
    fclose(f);
    return p;
}

/* 1 when the file at path holds text. */
static inline int test_file_has(const char *path, const char *text)
{
    size_t n;
    char *s = test_slurp(path, &n);
    int has = s && strstr(s, text);
    free(s);
    return has;
}

/* 1 when path can be opened for reading. */
static inline int test_readable(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* 1 when both files exist and are byte-identical. */
static inline int test_same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = test_slurp(a, &la), *y = test_slurp(b, &lb);
    int same = x && y && la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return same;
}

/* 1 when run folders dir/a and dir/b hold byte-identical metrics, clients, events and timeline
 * files, and the same algorithm report (masks.tsv) and shared links' loads (links.tsv) when a
 * has them (with verbose, says which differ). */
static inline int test_same_outputs(const char *dir, const char *a, const char *b, int verbose)
{
    static const char *const outs[] = {"metrics.tsv",  "clients.tsv", "events.msgpack",
                                       "timeline.tsv", "masks.tsv",   "links.tsv"};
    int same = 1;
    for (int i = 0; i < 6; i++) {
        char pa[300], pb[300];
        snprintf(pa, sizeof pa, "%s/%s/%s", dir, a, outs[i]);
        snprintf(pb, sizeof pb, "%s/%s/%s", dir, b, outs[i]);
        if (i >= 4 && !test_readable(pa)) continue; /* some runs only */
        if (!test_same_file(pa, pb)) {
            if (verbose) printf("%s differs between %s and %s\n", outs[i], a, b);
            same = 0;
        }
    }
    return same;
}

#endif /* TESTS_FILES_H */
