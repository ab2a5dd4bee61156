/* sim/pool.h -- the worker pool: client jobs trained in forked worker processes.
 *
 * The engine hands the pool batches: every job dispatched at one simulated instant. A job goes to
 * an idle worker as a length-prefixed msgpack frame (client, round, down message, private state,
 * batch stream); the worker runs the algorithm's client_train and sends back a result frame (up
 * message, new private state, cost, loss, steps, or an error message). The coordinator waits for a
 * batch's results on a libev loop (one ev_io per worker socket); simulated time never comes from
 * it. The engine then finishes the batch's dispatches in client-id order exactly as it does
 * in-process, so the worker count changes wall time only (DESIGN.md §4, §11).
 *
 * Workers are forked once the scenario is loaded and the algorithm server exists: they inherit the
 * datasets, partition and environment by copy-on-write, so only messages travel in frames, and
 * nothing assumes shared memory after the fork (DESIGN.md §13: the same frames could go to MPI
 * ranks). Frames from workers are validated (size, msgpack types, fields, lengths); a bad frame is
 * an error naming the worker and the job. A worker that dies (EOF on its socket) is reaped,
 * replaced, and its in-flight job re-sent; so is one that holds a job longer than the job timeout
 * (wall seconds, an ev_timer per worker; it is killed first). A job that kills or outlasts
 * SIM_POOL_MAX_TRIES workers in a row is an error. Wall time decides only which process trains a
 * job, never what the job computes, so a timeout cannot change an output.
 *
 * Test hooks (read from the environment by workers; for tests only): FEDSIM_TEST_WORKER_KILL=K:J
 * makes the first process of worker K raise SIGKILL on receiving its J-th job,
 * FEDSIM_TEST_WORKER_GARBAGE=K:J makes it answer its J-th job with a malformed frame, and
 * FEDSIM_TEST_WORKER_HANG=K:J makes it sleep forever (pause) on its J-th job, for the job timeout.
 */
#ifndef SIM_POOL_H
#define SIM_POOL_H

#include "algos/algo.h"

enum {
    SIM_POOL_MAX_FRAME = 1 << 30, /* bytes; larger frames are rejected unread */
    SIM_POOL_MAX_TRIES = 3,       /* a job is sent at most this many times */
};

/* One job's outcome: its result, or the error client_train returned (rc < 0, err). */
typedef struct sim_job_out {
    fl_result res;
    int rc;
    sim_err err;
} sim_job_out;

typedef struct sim_pool sim_pool;

/* Fork n_workers workers for algo on env (both borrowed: they must outlive the pool). A job not
 * answered within job_timeout_s wall seconds of being sent is re-run on a new worker (0 = wait
 * forever). */
int sim_pool_new(sim_pool **out, int n_workers, const fl_algo *algo, const fl_env *env,
                 double job_timeout_s, sim_err *err);
/* Close every socket and reap every worker (busy ones are killed first). Accepts NULL. */
void sim_pool_free(sim_pool *p);

/* Workers that died or timed out and were replaced so far. */
int sim_pool_replaced(const sim_pool *p);
/* Of those, workers killed for exceeding the job timeout. */
int sim_pool_timeouts(const sim_pool *p);

/* Start a batch of n jobs; job i's outcome lands in outs[i] (res initialized by the caller). */
void sim_pool_begin(sim_pool *p, int n, sim_job_out *outs);
/* Send job i of the batch to a worker, waiting for one to be idle; the job's buffers may be freed
 * when this returns. A negative return (a bad frame, a worker that keeps dying) fails the batch. */
int sim_pool_submit(sim_pool *p, int i, const fl_job *job, sim_err *err);
/* Wait until every submitted job of the batch has its outcome. */
int sim_pool_wait(sim_pool *p, sim_err *err);

#endif /* SIM_POOL_H */
