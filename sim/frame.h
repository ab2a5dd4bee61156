/* sim/frame.h -- the job and result frames that carry client jobs to training workers and back.
 *
 * One encoding for every transport: the forked pool (sim/pool.c) writes frames to socketpairs,
 * the MPI build (sim/mpi.c) sends the same bytes as MPI messages. A frame is a 4-byte big-endian
 * length and one msgpack array:
 *   job:    [client, round, down (bin|nil), priv (bin|nil), stream (uint)]
 *   result: [0, client, round, up (bin), up_bytes, priv (bin), cost..., loss, steps]
 *            cost...: nn_cost's terms in NN_COST_TERMS order (nn/model.h), each a float
 *        or [1, client, round, code, message]   (client_train failed)
 * Only messages and private states travel: a worker has the datasets, partition and environment
 * already (inherited by fork, or loaded by the MPI rank itself). Results are validated field by
 * field before anything of them is used: a worker is another process, possibly on another machine.
 *
 * Test hooks (read from the environment by workers; for tests only): FEDSIM_TEST_WORKER_KILL=K:J
 * makes the first process of worker K raise SIGKILL on receiving its J-th job,
 * FEDSIM_TEST_WORKER_GARBAGE=K:J makes it answer its J-th job with a malformed frame, and
 * FEDSIM_TEST_WORKER_HANG=K:J makes it sleep forever (pause) on its J-th job.
 */
#ifndef SIM_FRAME_H
#define SIM_FRAME_H

#include "algos/algo.h"

#include <stdint.h>

enum {
    SIM_FRAME_MAX = 1 << 30, /* bytes of a frame's body; larger frames are rejected unread */
    SIM_FRAME_PREFIX = 4,    /* the length prefix */
};

/* One job's outcome: its result, or the error client_train returned (rc < 0, err). */
typedef struct sim_job_out {
    fl_result res;
    int rc;
    sim_err err;
    int done; /* the outcome is in (sim/pool.h) */
} sim_job_out;

/* The body length a 4-byte prefix announces. */
uint32_t sim_frame_len(const unsigned char *prefix);

/* Encode job into sb (cleared first) as prefix + body. SIM_EINVAL naming the job when the body
 * exceeds SIM_FRAME_MAX. */
int sim_frame_job(msgpack_sbuffer *sb, const fl_job *job, sim_err *err);

/* Check a result body (len bytes) for the job of client/round and absorb it into out (out->res
 * initialized by the caller). On a bad frame returns SIM_EFORMAT with *why saying what is wrong,
 * and out is untouched. */
int sim_frame_take_result(const void *body, size_t len, int32_t client, int32_t round,
                          sim_job_out *out, const char **why);

/* The worker side of one job: decode the job body (len bytes), train it with algo on env using
 * scratch w, and leave the result frame (prefix + body) in out. slot, gen and job_no (1-based,
 * per process) select the test hooks. SIM_EFORMAT when the job frame is malformed or names a client
 * env does not have (out is then unusable). */
int sim_frame_serve(const fl_algo *algo, const fl_env *env, fl_worker *w, int slot, int gen,
                    int job_no, const void *body, size_t len, msgpack_sbuffer *out);

#endif /* SIM_FRAME_H */
