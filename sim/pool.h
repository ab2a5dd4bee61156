/* sim/pool.h -- the worker pool: client jobs trained in forked worker processes.
 *
 * The engine hands the pool each job as it is dispatched and asks for its result only when the
 * simulation needs it (sim/engine.c: the lookahead), so jobs dispatched at different simulated
 * instants train at once. A job goes to an idle worker as a length-prefixed msgpack frame (client,
 * round, down message, private state, batch stream); the worker runs the algorithm's client_train
 * and sends back a result frame (up message, new private state, cost, loss, steps, or an error
 * message). The coordinator takes results on a libev loop (one ev_io per worker socket) whenever
 * it waits, for a worker to be idle or for a result; simulated time never comes from it, so the
 * worker count changes wall time only (DESIGN.md §4, §11).
 *
 * Workers are forked once the scenario is loaded and the algorithm server exists: they inherit the
 * datasets, partition and environment by copy-on-write, so only messages travel in frames, and
 * nothing assumes shared memory after the fork (DESIGN.md §13: the same frames go to MPI ranks).
 * Frames from workers are validated (size, msgpack types, fields, lengths); a bad frame is an error
 * naming the worker and the job. A worker that dies (EOF on its socket) is reaped, replaced, and
 * its in-flight job re-sent; so is one that holds a job longer than the job timeout (wall seconds,
 * an ev_timer per worker; it is killed first). A job that kills or outlasts SIM_POOL_MAX_TRIES
 * workers in a row is an error. Wall time decides only which process trains a job, never what the
 * job computes, so a timeout cannot change an output.
 *
 * Frames are sim/frame.h's; so are the test hooks (FEDSIM_TEST_WORKER_KILL, _GARBAGE, _HANG).
 *
 * A linked pool (sim_pool_new_linked) starts no process: its workers are MPI ranks that sim/mpi.c
 * reaches through the send/recv functions of a sim_pool_link. The batch bookkeeping, frames,
 * validation and job timeout are the same; what differs is that a lost rank cannot be replaced
 * (MPI without fault-tolerance extensions cannot start a new one), so a rank that times out or
 * fails a send or receive ends the batch with an error naming it, and so does a stop signal
 * (*link.stop) while jobs are out: under mpirun it usually means a rank died and the launcher is
 * tearing the job down, with about a second before SIGKILL.
 */
#ifndef SIM_POOL_H
#define SIM_POOL_H

#include "algos/algo.h"
#include "sim/frame.h"

#include <signal.h>

enum {
    SIM_POOL_MAX_TRIES = 3, /* a job is sent at most this many times */
};

typedef struct sim_pool sim_pool;

/* Fork n_workers workers for algo on env (both borrowed: they must outlive the pool). A job not
 * answered within job_timeout_s wall seconds of being sent is re-run on a new worker (0 = wait
 * forever). */
int sim_pool_new(sim_pool **out, int n_workers, const fl_algo *algo, const fl_env *env,
                 double job_timeout_s, sim_err *err);
/* Workers the pool does not start (MPI ranks): slots 0..n-1, reached through these functions. */
typedef struct sim_pool_link {
    int n;
    void *arg; /* passed to every function below */
    /* Send a job body (len bytes, no length prefix) to slot; negative with err naming the
     * worker when it cannot be sent. */
    int (*send)(void *arg, int slot, const void *body, size_t len, sim_err *err);
    /* Take one result that has arrived, if any: 1 with *slot and *body (malloc'd, the caller
     * frees) of *len bytes, 0 when none has, negative with err on a failure. */
    int (*recv)(void *arg, int *slot, void **body, size_t *len, sim_err *err);
    /* The worker for messages, e.g. "worker rank 2 (host n3, pid 1234)". */
    void (*name)(void *arg, int slot, char *buf, size_t size);
    double poll_s;                     /* wall seconds between polls for results */
    const volatile sig_atomic_t *stop; /* nonzero: stop waiting (a signal); NULL = never */
} sim_pool_link;

/* A pool over link's workers (link is copied; its arg must outlive the pool). */
int sim_pool_new_linked(sim_pool **out, const sim_pool_link *link, double job_timeout_s,
                        sim_err *err);
/* Close every socket and reap every worker (busy ones are killed first); a linked pool only
 * forgets its workers. Accepts NULL. */
void sim_pool_free(sim_pool *p);

/* Workers that died or timed out and were replaced so far. */
int sim_pool_replaced(const sim_pool *p);
/* Of those, workers killed for exceeding the job timeout. */
int sim_pool_timeouts(const sim_pool *p);

/* Send job to a worker, waiting for one to be idle (taking the results that arrive meanwhile); its
 * outcome lands in *out (res initialized by the caller; out->done set when it has), which must
 * stay where it is until then. The job's buffers may be freed when this returns. A negative
 * return (a bad frame, a worker that keeps dying) is the pool's first error, and every later
 * call returns it too: the run is over. */
int sim_pool_submit(sim_pool *p, sim_job_out *out, const fl_job *job, sim_err *err);
/* Wait until out has its outcome; out NULL: until every job sent has. */
int sim_pool_wait(sim_pool *p, const sim_job_out *out, sim_err *err);
/* Wall seconds workers have held jobs, summed over the jobs answered so far (achieved
 * parallelism: this over the wall time). 0 for NULL. */
double sim_pool_busy_s(const sim_pool *p);

#endif /* SIM_POOL_H */
