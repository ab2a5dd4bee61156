/* sim/budget.h -- the client state store's sizes (issue 41), where `fedsim check` predicts them
 * and `fedsim run` sizes the store: the cache's default byte budget (--state-memory's default),
 * and what a number of states takes in DIR/state.mdb.
 */
#ifndef SIM_BUDGET_H
#define SIM_BUDGET_H

#include <stddef.h>

/* LMDB's page, the unit a state's room in the database is counted in (4 KiB on Linux x86-64). */
#define SIM_STATE_PAGE 4096

/* The state cache's budget when --state-memory is not given: a quarter of the machine's physical
 * memory (sysconf _SC_PHYS_PAGES x _SC_PAGESIZE), or 1 GiB when the system does not say. */
size_t sim_state_budget_default(void);

/* Bytes DIR/state.mdb grows to holding n states of `state` bytes each, with one checkpoint's
 * changes written (0 when state is 0). */
double sim_state_disk_bytes(size_t state, double n);

#endif /* SIM_BUDGET_H */
