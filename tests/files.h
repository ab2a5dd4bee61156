/* tests/files.h -- file helpers for the tests that run the fedsim binary and compare its output
 * files: read a whole file, compare two byte for byte. */
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

#endif /* TESTS_FILES_H */
