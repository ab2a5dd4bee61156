/* sim/engine_rows.c -- algorithms' per-client rows (fl_rows, algos/algo.h) in the engine's store,
 * beside the clients' private states: a row is key 2^31 | client (a private state's is the
 * client id, below 2^31), so rows share the states' cache budget, spill, commits and undo, and
 * a checkpoint names them by the same tag.
 *
 * fl_rows has no error return (job_down and eval_params have none to pass it on): a row that
 * cannot be read or written is latched here and the run stops after the event
 * (sim_eng_outputs_failed). An evaluation's helper processes must not touch the store, so the
 * coordinator reads the rows of each batch first and the helpers' reads are served from them.
 */
#include "sim/engine_int.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define ROW_KEY(c) (0x80000000u | (uint32_t)(c))

/* The fetched batch's index of client c (fetch_id is sorted), or -1. */
static int fetched(const sim_engine *e, int32_t c)
{
    int lo = 0, hi = e->n_fetch;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (e->fetch_id[mid] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < e->n_fetch && e->fetch_id[lo] == c ? lo : -1;
}

static int row_get(void *ctx, int32_t c, void *row, size_t len)
{
    sim_engine *e = ctx;
    const void *p = NULL;
    size_t have = 0;
    int rc;
    if (e->fetching) { /* an evaluation: the batch's rows, read before the helpers forked */
        int i = fetched(e, c);
        assert(i >= 0 && "an evaluation read a row outside its batch");
        rc = i >= 0 && e->fetch_at[i] != SIZE_MAX;
        if (rc) p = e->fetch_data + e->fetch_at[i], have = e->fetch_len[i];
    } else {
        assert(e->store);
        rc = e->rows_failed ? 0 : sim_store_get(e->store, ROW_KEY(c), &p, &have, &e->rows_err);
        if (rc < 0) e->rows_failed = rc; /* the store named the file in rows_err */
    }
    if (rc <= 0) return 0;
    if (have != len) {
        if (!e->rows_failed)
            e->rows_failed = sim_fail(&e->rows_err, SIM_EFORMAT, sim_store_path(e->store), 0, 0,
                                      "the state store holds %zu bytes for client %d's row where "
                                      "the algorithm reads %zu: it does not belong to this run",
                                      have, c, len);
        return 0;
    }
    memcpy(row, p, len);
    return 1;
}

static void row_put(void *ctx, int32_t c, const void *row, size_t len)
{
    sim_engine *e = ctx;
    assert(!e->fetching && "an evaluation must not change the server");
    if (e->rows_failed) return;
    int rc = sim_store_put(e->store, ROW_KEY(c), row, len, &e->rows_err);
    if (rc) e->rows_failed = rc; /* the store named the file in rows_err */
    e->has_states = 1;           /* checkpoints commit the store from now on */
    if (len > e->row_len) e->row_len = len;
}

static void row_bad(void *ctx, int32_t c, const char *what)
{
    sim_engine *e = ctx;
    if (e->rows_failed) return;
    e->rows_failed = sim_fail(&e->rows_err, SIM_EFORMAT, sim_store_path(e->store), 0, 0,
                              "client %d's row in the state store is not one %s writes (%s): the "
                              "store is damaged or not this run's",
                              c, e->spec.algo->name, what);
}

void sim_eng_rows_init(sim_engine *e)
{
    e->rows = (fl_rows){row_get, row_put, row_bad, e};
    e->spec.env.rows = &e->rows;
}

int sim_eng_rows_failed(sim_engine *e, sim_err *err)
{
    if (e->rows_failed && err) *err = e->rows_err;
    return e->rows_failed;
}

int sim_eng_rows_fetch(sim_engine *e, const int32_t *ids, int n, sim_err *err)
{
    sim_eng_rows_unfetch(e);
    if (!(e->spec.algo->flags & FL_EVAL_ROWS)) return SIM_OK;
    e->fetch_id = sim_xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    memcpy(e->fetch_id, ids, sizeof(int32_t) * (size_t)n);
    sim_eng_sort_ids(e->fetch_id, n);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!k || e->fetch_id[k - 1] != e->fetch_id[i]) e->fetch_id[k++] = e->fetch_id[i];
    e->n_fetch = k;
    e->fetch_at = sim_xmalloc(sizeof(size_t) * (size_t)(k + 1));
    e->fetch_len = sim_xmalloc(sizeof(size_t) * (size_t)(k + 1));
    size_t used = 0, cap = 0;
    for (int i = 0; i < k; i++) {
        const void *p;
        size_t len;
        int rc = sim_store_get(e->store, ROW_KEY(e->fetch_id[i]), &p, &len, err);
        if (rc < 0) {
            sim_eng_rows_unfetch(e);
            return rc;
        }
        e->fetch_at[i] = rc ? used : SIZE_MAX;
        e->fetch_len[i] = rc ? len : 0;
        if (!rc) continue;
        if (used + len > cap) {
            cap = used + len > 2 * cap ? used + len : 2 * cap;
            e->fetch_data = sim_xrealloc(e->fetch_data, cap);
        }
        memcpy(e->fetch_data + used, p, len);
        used += len;
    }
    e->fetching = 1;
    return SIM_OK;
}

void sim_eng_rows_unfetch(sim_engine *e)
{
    free(e->fetch_id);
    free(e->fetch_at);
    free(e->fetch_len);
    free(e->fetch_data);
    e->fetch_id = NULL, e->fetch_at = e->fetch_len = NULL, e->fetch_data = NULL;
    e->n_fetch = 0;
    e->fetching = 0;
}
