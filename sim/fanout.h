/* sim/fanout.h -- independent, read-only tasks spread over forked copies of this process.
 *
 * Evaluation reads the whole server state (a global model, or every client's personalized model
 * built by the algorithm's hooks) and writes a few numbers per task; it runs between batches,
 * when the worker pool is idle. Forking at that moment hands every child the state as it is, by
 * copy-on-write, so no algorithm needs a protocol for it. Tasks are taken from a shared counter
 * (the parent takes its share too) and each writes its own output slot in shared memory; the
 * parent then reads the slots. A task is a pure function of its index, so which process ran it
 * cannot change an output. A child that dies or cannot be forked costs time, not results: the
 * parent runs every task whose slot was not marked done.
 */
#ifndef SIM_FANOUT_H
#define SIM_FANOUT_H

#include <stddef.h>

/* Task i: write its out_size bytes at out. It may change this process's memory (caches), but
 * what it writes must depend on i alone. */
typedef void (*sim_fanout_fn)(void *ctx, int i, void *out);

/* Run fn for every i in [0, n) over up to procs processes (this one and procs − 1 children),
 * results to outs (n · out_size bytes). procs <= 1 or n < 2: in this process, in order. Returns
 * how many tasks this process ran itself because a child left them undone (0 normally). */
int sim_fanout(int procs, int n, size_t out_size, sim_fanout_fn fn, void *ctx, void *outs);

#endif /* SIM_FANOUT_H */
