/* tests/rows.h -- the server's per-client rows (fl_rows) for algorithm tests that drive a server
 * outside the engine: each client's last row in memory, as the engine's store gives it back.
 * Point env.rows at test_rows_api(&r) before server_new. */
#ifndef TESTS_ROWS_H
#define TESTS_ROWS_H

#include "algos/algo.h"

#include <stdlib.h>
#include <string.h>

enum { TEST_ROWS_MAX = 4096 };
typedef struct test_rows {
    fl_rows api;
    void *row[TEST_ROWS_MAX];
    size_t len[TEST_ROWS_MAX];
    long gets, puts, bad; /* bad: rows the algorithm said it did not write */
} test_rows;

static int test_rows_get(void *ctx, int32_t c, void *row, size_t len)
{
    test_rows *r = ctx;
    r->gets++;
    if (c < 0 || c >= TEST_ROWS_MAX || !r->row[c] || r->len[c] != len) return 0;
    memcpy(row, r->row[c], len);
    return 1;
}

static void test_rows_put(void *ctx, int32_t c, const void *row, size_t len)
{
    test_rows *r = ctx;
    r->puts++;
    if (c < 0 || c >= TEST_ROWS_MAX) abort();
    r->row[c] = realloc(r->row[c], len + 1);
    memcpy(r->row[c], row, len);
    r->len[c] = len;
}

static void test_rows_bad(void *ctx, int32_t c, const char *what)
{
    test_rows *r = ctx;
    (void)c, (void)what;
    r->bad++;
}

static inline const fl_rows *test_rows_api(test_rows *r)
{
    memset(r, 0, sizeof *r);
    r->api = (fl_rows){test_rows_get, test_rows_put, test_rows_bad, r};
    return &r->api;
}

static inline void test_rows_free(test_rows *r)
{
    for (int c = 0; c < TEST_ROWS_MAX; c++)
        free(r->row[c]);
    memset(r, 0, sizeof *r);
}

#endif /* TESTS_ROWS_H */
