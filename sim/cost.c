/* sim/cost.c -- a job's nn_cost as device work (see cost.h). */
#include "sim/cost.h"

dev_work sim_cost_work(const nn_cost *c, double steps)
{
    return (dev_work){
            .flops = c->flops,
            .flops_masked = c->flops_masked,
            .flops_masked_nnz = c->flops_masked_nnz,
            .bytes = c->bytes,
            .steps = steps,
    };
}
