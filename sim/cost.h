/* sim/cost.h -- what a job's cost (nn/'s nn_cost) asks of a device (devices/'s dev_work): the one
 * conversion between the two, which devices/ cannot make since it does not see nn/.
 *
 * A new nn_cost term that takes device time goes into dev_work (devices/profile.h), its price
 * (dev_compute_ns) and here; a term that does not (samples) stays out.
 */
#ifndef SIM_COST_H
#define SIM_COST_H

#include "devices/profile.h"
#include "nn/model.h"

/* The device work of a job that cost c over `steps` SGD steps. */
dev_work sim_cost_work(const nn_cost *c, double steps);

#endif /* SIM_COST_H */
