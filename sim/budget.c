/* sim/budget.c -- the client state store's sizes (sim/budget.h): the cache's default budget, and
 * a prediction of the database's size that `fedsim check` compares with the free disk.
 */
#include "sim/budget.h"

#include <unistd.h>

size_t sim_state_budget_default(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || size <= 0) return (size_t)1 << 30;
    /* a quarter: the datasets, the models and the jobs in flight need the rest, and other
     * processes (MPI ranks, a second run) may share the machine */
    return (size_t)pages / 4 * (size_t)size;
}

/* Kept simple, an estimate rather than LMDB's exact layout. A state of model size is larger than
 * half a page, so LMDB stores it on overflow pages of its own: a 16-byte header and the value,
 * ceil((16 + state) / 4096) pages (a small state is counted a page too, though several share a
 * leaf); the keys and branch pages are left out (a few bytes a state). LMDB copies on write: a
 * commit's changed states take new pages while those they replace stay until the next commit,
 * so the file holds one checkpoint's changes twice; a checkpoint (by default every 10 wall
 * minutes) may follow any number of jobs, so every state is counted twice. Left out: the spill
 * (state.spill), written only when the cache overflows with states changed since the last
 * commit, and emptied and deleted by the commit. */
double sim_state_disk_bytes(size_t state, double n)
{
    if (!state) return 0;
    double pages = (double)((state + 16 + SIM_STATE_PAGE - 1) / SIM_STATE_PAGE);
    return 2 * n * pages * SIM_STATE_PAGE;
}
