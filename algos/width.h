/* algos/width.h -- what the width family (algos/width.c: HeteroFL, FjORD, FedRolex) lends other
 * files: the width a capacity affords on its grid, FjORD's nested draws (for its test), and the
 * width `algorithm.width: {by: capacity}` gives a client of another algorithm (LocalOnly). All
 * read the scenario's `algorithm.width:` section. */
#ifndef FL_WIDTH_H
#define FL_WIDTH_H

#include "algos/algo.h"

/* The largest grid width p with p² ≤ r (a p-wide model costs about p² of the full one), and the
 * narrowest, step, when none does; the width section must have been read. */
double fl_width_for(const fl_env *env, double r);
/* FjORD's nested width for one local step of a client whose widest is top: a grid width up to
 * top, or uniform in [min, max] when all clients share one width. */
double fl_fjord_draw(const fl_env *env, double top, sim_rng *r);
/* With a width section of `by: capacity`, client's capacity's grid width; else 1. */
double fl_width_by_capacity(const fl_env *env, int32_t client);

#endif /* FL_WIDTH_H */
