/* sim/budget.c -- the default state-memory budget (sim/budget.h). A quarter leaves the rest to
 * the datasets, the models in flight and the evaluation's forked helpers, which share the
 * coordinator's pages until they write. */
#include "sim/budget.h"

#include <unistd.h>

size_t sim_state_budget_default(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || size <= 0) return (size_t)1 << 30;
    return (size_t)pages / 4 * (size_t)size;
}
