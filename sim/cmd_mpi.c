/* sim/cmd_mpi.c -- fedsim-mpi (`make mpi`) under mpirun or srun: which rank does what, and the
 * hooks through which run and resume hand their jobs to ranks 1..N-1 (sim/mpi.h).
 *
 * Built into fedsim-mpi only (with -DFEDSIM_MPI), so plain fedsim has no MPI dependency. It is the
 * one place that knows about ranks: run and resume (sim/cmd_run.c) see them only as rank_hooks,
 * and main.c only calls sim_cli_mpi_main with its dispatcher; a worker rank parses run's options
 * and loads the scenario with the same functions the coordinator uses, so both load the same run.
 */
#include "sim/cmd.h"
#include "sim/mpi.h"

#include <stdio.h>
#include <string.h>

typedef struct rank_state {
    sim_mpi *m;
    sim_pool_link link;
    int closed;
} rank_state;

/* Coordinator: every worker rank's hello must carry our digests; then jobs go to the ranks. A
 * rank that dies kills the job under Open MPI and MPICH, so a checkpoint after every round is
 * the default here: it is what a resume continues from. */
static int ranks_open(rank_hooks *h, sim_scenario *sc, sim_err *err)
{
    rank_state *st = h->state;
    uint64_t text, env;
    int rc = sim_scenario_digest(sc, &text, &env, err);
    if (!rc) rc = sim_mpi_open(&st->m, &st->link, text, env, &sim_cli_stop_signal, err);
    if (rc) {
        st->closed = 1; /* sim_mpi_open stopped the workers, or they get told below */
        if (!st->m) sim_mpi_stop_workers();
        return rc;
    }
    sc->spec.link = &st->link;
    if (!sc->spec.checkpoint_every) sc->spec.checkpoint_every = 1;
    if (!sc->spec.quiet)
        fprintf(stderr, "fedsim: %d MPI worker ranks agree on the scenario and data\n", st->link.n);
    return SIM_OK;
}

/* A run that failed or stopped may leave ranks dead or holding jobs, which would never join
 * MPI_Finalize: MPI_Abort ends them all (after our messages are out). */
static void ranks_close(rank_hooks *h, int status)
{
    rank_state *st = h->state;
    if (st->closed) return;
    st->closed = 1;
    if (status && st->m) sim_mpi_finalize(status);
    if (st->m)
        sim_mpi_close(st->m);
    else
        sim_mpi_stop_workers();
    st->m = NULL;
}

/* Worker rank: load the same scenario the coordinator does (run: the file, --set and --seed;
 * resume: RUN_DIR/scenario.yaml), say hello, and train jobs until told to stop. */
static int serve_rank(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) /* the coordinator prints the usage */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 0;
    run_opts o;
    char dir[1024], scenario[1100];
    int rc = !strcmp(argv[1], "resume")
                     ? sim_cli_parse_resume(&o, argc - 2, argv + 2, dir, scenario)
                     : sim_cli_parse_run(&o, argc - 2, argv + 2, OPTS_RUN);
    if (rc) return rc; /* the coordinator parses the same options and fails the same way */
    o.rank_worker = 1;
    sim_err err = {0};
    sim_scenario sc;
    uint64_t text = 0, env = 0;
    int load = sim_cli_load_scenario(&sc, &o, &err);
    if (!load && (load = sim_scenario_digest(&sc, &text, &env, &err))) sim_scenario_destroy(&sc);
    rc = sim_mpi_serve(load ? NULL : sc.spec.algo, load ? NULL : &sc.spec.env, text, env, load,
                       &err);
    if (!load) sim_scenario_destroy(&sc);
    return rc;
}

/* Rank 0 is fedsim; under mpirun with N > 1 ranks, ranks 1..N-1 are its workers for run and
 * resume. A single rank (no mpirun, or -np 1) is plain fedsim with forked workers. */
int sim_cli_mpi_main(int argc, char **argv,
                     int (*dispatch)(int argc, char **argv, rank_hooks *ranks))
{
    int rank = 0, size = 1;
    if (sim_mpi_init(&argc, &argv, &rank, &size)) return 2;
    int rc;
    if (size == 1) {
        rc = dispatch(argc, argv, NULL);
    } else if (argc < 2 || (strcmp(argv[1], "run") && strcmp(argv[1], "resume"))) {
        rc = rank ? 0
                  : sim_cli_die(
                            "under mpirun only run and resume use the ranks; run other commands "
                            "without mpirun");
    } else if (rank > 0) {
        rc = serve_rank(argc, argv);
    } else {
        rank_state st = {0};
        rank_hooks h = {ranks_open, ranks_close, &st};
        rc = dispatch(argc, argv, &h);
        ranks_close(&h, 0); /* a run that failed before open: the workers still wait */
    }
    sim_mpi_finalize(0);
    return rc;
}
