/* sim/mpi.h -- training workers as MPI ranks (built only into fedsim-mpi: `make mpi`).
 *
 * Under `mpirun -np N fedsim-mpi run SCENARIO` (or srun), rank 0 is the coordinator: it runs the
 * engine and its libev loop as always, with a linked pool (sim/pool.h) whose N-1 workers are ranks
 * 1..N-1. Every rank loads the scenario itself, from its own paths (a shared filesystem, or the
 * same files at the same paths on every node): datasets never travel, only the job and result
 * frames of sim/frame.h, one MPI message each (tags below). Before any job, each worker rank sends
 * a hello (rank, host, pid, the digests of sim_scenario_digest, or why it could not load the
 * scenario, and its build: sim_checkpoint_build); the coordinator refuses to start unless every
 * digest equals its own, naming the rank and host that differ, and warns of ranks that run another
 * build (another binary, or other OpenBLAS kernels on another CPU): they can round differently.
 *
 * Nobody spins while waiting: Open MPI and MPICH busy-poll inside blocking calls, which on a node
 * shared with other ranks takes the cores they train on. Waits here are MPI_Iprobe with a short
 * sleep that grows from 50 µs to 1 ms; the coordinator polls from a libev timer (sim/pool.c says
 * why). Communication errors return (MPI_ERRORS_RETURN on MPI_COMM_WORLD) so they become errors
 * that name the rank instead of an abort inside the library.
 *
 * A rank that dies cannot be replaced (MPI has no way to start a new one without fault-tolerance
 * extensions such as ULFM): the run ends with an error and the last checkpoint. Open MPI's mpirun
 * kills every rank when one dies: the coordinator gets SIGTERM and about a second before SIGKILL
 * (MPICH's hydra kills at once). That is why, under MPI, a checkpoint is written after every
 * round by default, before the round's jobs are dispatched (sim/sync.c): what survives is the
 * checkpoint taken just before the round the rank died in, which `fedsim resume` continues,
 * locally or under mpirun. With `mpirun --enable-recovery` (Open
 * MPI) the coordinator survives, and a rank that stops answering is found by --job-timeout.
 */
#ifndef SIM_MPI_H
#define SIM_MPI_H

#include "sim/pool.h"

#include <signal.h>
#include <stdint.h>

typedef struct sim_mpi sim_mpi;

/* MPI_Init (with MPI_ERRORS_RETURN on MPI_COMM_WORLD); *rank and *size of MPI_COMM_WORLD.
 * Returns nonzero (after printing why) when MPI cannot start. */
int sim_mpi_init(int *argc, char ***argv, int *rank, int *size);
/* MPI_Finalize; with a nonzero code, MPI_Abort(code) instead, which ends every rank: the way out
 * when a rank may be dead or busy, and so would never take part in finalizing. */
void sim_mpi_finalize(int abort_code);

/* Worker rank: send the hello (load_rc nonzero: the scenario did not load, load_err says why),
 * then train jobs until the coordinator says stop. Returns 0, or 2 after printing an error. */
int sim_mpi_serve(const fl_algo *algo, const fl_env *env, uint64_t text_digest, uint64_t env_digest,
                  int load_rc, const sim_err *load_err);

/* Coordinator: wait for every worker's hello and check its digests against ours; on success *out
 * is the session and *link the pool link to hand the engine (spec.link). stop is the flag a
 * signal handler sets (see sim_pool_link). */
int sim_mpi_open(sim_mpi **out, sim_pool_link *link, uint64_t text_digest, uint64_t env_digest,
                 const volatile sig_atomic_t *stop, sim_err *err);
/* Tell every worker rank to stop (they then finalize), and free m. Accepts NULL. */
void sim_mpi_close(sim_mpi *m);
/* Coordinator that cannot load its scenario: tell the workers to stop without a session. */
void sim_mpi_stop_workers(void);

#endif /* SIM_MPI_H */
