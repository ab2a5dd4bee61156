/* sim/budget.h -- how much memory the clients' private states may hold by default (issue 41):
 * one rule that `fedsim run` (its engine) and `fedsim check` (its prediction) share. */
#ifndef SIM_BUDGET_H
#define SIM_BUDGET_H

#include <stddef.h>

/* A quarter of the machine's physical memory; 1 GiB when it cannot be read. */
size_t sim_state_budget_default(void);

#endif /* SIM_BUDGET_H */
