/* sim/cmd.h -- what the commands of the fedsim program share: sim/main.c (the command table),
 * sim/cmd.c (helpers) and one sim/cmd_NAME.c per command.
 *
 * These files make the program, not the library: they are linked into fedsim and fedsim-mpi
 * only, never into the tests (Makefile: CMD_SRC), and they alone besides plots/ include plots/.
 * A command is a sim_command defined in its own file; main.c's table lists them, and from it
 * prints `fedsim help` (each command's summary) and `fedsim NAME --help` (its usage). Adding a
 * command is a file that defines one and a line in the table.
 *
 * Errors print as "fedsim: file:line:col: message" and exit with status 2 (sim_cli_print_err).
 */
#ifndef SIM_CMD_H
#define SIM_CMD_H

#include "nn/model.h"
#include "plots/plot.h"
#include "sim/scenario.h"

#include <signal.h>

/* What run and resume ask of MPI worker ranks (fedsim-mpi under mpirun: sim/cmd_mpi.c; NULL
 * otherwise). open gets the loaded scenario, its spec filled in, before the engine starts, and
 * points spec.link at the ranks; close gets the run's exit status once it is over (also when open
 * failed or was never reached). */
typedef struct rank_hooks {
    int (*open)(struct rank_hooks *h, sim_scenario *sc, sim_err *err);
    void (*close)(struct rank_hooks *h, int status);
    void *state;
} rank_hooks;

/* What a command returns after printing why its arguments are wrong: main.c then prints the
 * command's synopsis and exits with status 2. */
enum { SIM_CLI_BAD_ARGS = -1 };

typedef struct sim_command {
    const char *name;
    const char *summary; /* one line of `fedsim help` */
    /* `fedsim NAME --help`: "usage: fedsim NAME ..." lines (the synopsis, which a bad argument
     * prints too), a blank line, then what it does and its options */
    const char *usage;
    /* argv[0..argc): the words after the command's name; ranks: MPI worker ranks for run and
     * resume, or NULL (other commands ignore it). Returns the exit status, or SIM_CLI_BAD_ARGS. */
    int (*fn)(int argc, char **argv, rank_hooks *ranks);
} sim_command;

extern const sim_command sim_cmd_run, sim_cmd_resume, sim_cmd_check, sim_cmd_sweep, sim_cmd_plot,
        sim_cmd_summary, sim_cmd_devices, sim_cmd_keys, sim_cmd_events, sim_cmd_calibrate,
        sim_cmd_train;

/* sim/cmd.c ------------------------------------------------------------------------------- */

/* "fedsim: msg" on stderr; returns 2. */
int sim_cli_die(const char *msg);
/* err as "fedsim: file:line:col: message"; returns 2. */
int sim_cli_print_err(const sim_err *err);
/* s as a number in [lo, hi] into *out; -1 after saying that it is not (key names the option). */
int sim_cli_parse_num(const char *key, const char *s, double lo, double hi, double *out);
/* The option at argv[*i], as --key VALUE or --key=value: *k (copied into key[64] when split)
 * and *v, with *i on the last word taken; -1 after saying what `fedsim cmd` expected. */
int sim_cli_next_option(const char *cmd, int argc, char **argv, int *i, char *key, const char **k,
                        const char **v);
/* --acc global|personalized into *pers (1: personalized); 2 after saying it is neither. */
int sim_cli_parse_acc(const char *v, int *pers);
/* mkdir -p path; -1 with errno set. */
int sim_cli_mkdirs(const char *path);
void sim_cli_gnuplot_missing(void);

/* sim/cmd_run.c: the options of run and of the commands that take most of them -------------- */

enum { MAX_SETS = 64, MAX_VARY = 8 };

typedef struct run_opts {
    const char *scenario, *out, *trace, *sets[MAX_SETS], *vary[MAX_VARY];
    int n_sets, n_vary, quiet, cost_only, have_seed, workers;
    int checkpoint_every;      /* rounds/aggregations between checkpoints, 0 = none */
    double checkpoint_minutes; /* or wall minutes, 0 = none */
    double job_timeout;        /* wall seconds per worker job, 0 = none (cannot change results) */
    double state_memory;       /* --state-memory bytes, 0 = the default (cannot change results) */
    int resume;                /* resume: scenario is RUN_DIR/scenario.yaml, out is RUN_DIR */
    int strict;                /* check, run: warnings are errors (exit 2) */
    int rank_worker;           /* an MPI worker rank: leaves what the run says to rank 0 */
    unsigned long long seed;
    plot_opts plots;
    rank_hooks *ranks; /* MPI worker ranks, or NULL */
} run_opts;

enum { OPTS_CHECK, OPTS_RUN, OPTS_SWEEP, OPTS_RESUME };

/* Parse the options of check, run, sweep or resume (what = OPTS_*); nonzero after saying what is
 * wrong. */
int sim_cli_parse_run(run_opts *o, int argc, char **argv, int what);
/* The options of `resume RUN_DIR`: RUN_DIR's scenario.yaml (into scenario), its folder (dir). */
int sim_cli_parse_resume(run_opts *o, int argc, char **argv, char dir[1024], char scenario[1100]);
/* The run folder `fedsim run` writes without --out: runs/NAME-SEED. */
void sim_cli_run_dir(const sim_scenario *sc, char *out, size_t n);
/* Load o's scenario with --seed and --cost-only folded in as --set overrides; its note (keys
 * its federation mode leaves unused) goes to stderr, but for a worker rank's (o->rank_worker). */
int sim_cli_load_scenario(sim_scenario *sc, const run_opts *o, sim_err *err);
/* One run of o->scenario into its folder, left in out (see cmd_run.c); loaded: the scenario
 * already loaded from o (taken over), or NULL. Returns the exit status. */
int sim_cli_run_one(const run_opts *o, sim_scenario *loaded, char *out, size_t out_size);
/* The signal that asked the run to stop (SIGINT, SIGTERM), 0 until one does (cmd_run.c). */
extern volatile sig_atomic_t sim_cli_stop_signal;

/* sim/cmd_warn.c: device classes priced, and the warnings check and run print --------------- */

/* The clients whose devices have one name. The ratios compare the algorithm's round-1 job of the
 * class's first client with FedAvg's on the same samples: executed FLOPs, activation bytes,
 * steps. */
typedef struct sim_cli_class {
    const char *name; /* borrowed from the scenario's devices */
    int first, count; /* its first client, its clients */
    int fit;          /* of them, those whose device holds the model they train */
    double ratio, act_ratio, step_ratio;
    double down_bytes, up_bytes; /* the job's messages on the wire */
} sim_cli_class;

typedef struct sim_cli_prices {
    nn_model m;         /* the scenario's model for batches of batch_size */
    nn_cost step;       /* one SGD step of it */
    double mem;         /* the memory its training needs, full width */
    sim_cli_class *cls; /* n_cls classes, in order of their first client */
    int n_cls, priced;  /* priced: the ratios and bytes are filled in */
    int *of;            /* per client: its class */
    double *need;       /* per client: the memory its training needs (its width's) */
} sim_cli_prices;

/* sc's device classes, their clients and memory fit; with price, also each class's job as the
 * algorithm prices it (a cost-only server and job: what check's table prints). -1 with err
 * filled when the algorithm fails; p must be destroyed either way. */
int sim_cli_prices_init(sim_cli_prices *p, const sim_scenario *sc, int price, sim_err *err);
void sim_cli_prices_destroy(sim_cli_prices *p);
/* A job of class k (p priced) on device d, from 0: the dense model's training of flops FLOPs,
 * act bytes of activations and `steps` steps, scaled by the class's ratios. */
void sim_cli_price_job(const sim_cli_prices *p, int k, const dev_profile *d, double flops,
                       double act, double steps, dev_phases *ph);
/* Each client's round-1 job time in seconds (INFINITY: never ends) as check prices it (its own
 * samples and steps, its class's ratios and messages, its device at time 0; p priced) into out_s:
 * what a selection policy with SIM_SEL_PREDICTED reads (sim_run_spec.predicted_s); and into
 * out_j (unless NULL) the job's energy in joules by its profile's power figures. */
void sim_cli_predict_jobs(const sim_cli_prices *p, const sim_scenario *sc, double *out_s,
                          double *out_j);
/* Every warning about sc, each on a line of f after prefix: the algorithm's (fl_algo.warn),
 * capacities a model exceeds, and clients that can never contribute (the header of
 * sim/cmd_warn.c says which, and how it is decided; a deadline's needs p priced). Returns how
 * many lines it printed. */
int sim_cli_warnings(const sim_scenario *sc, const sim_cli_prices *p, FILE *f, const char *prefix);

/* sim/cmd_train.c: what calibrate shares with train ------------------------------------------ */

typedef struct train_opts {
    const char *model, *data, *data_dir;
    int epochs, batch, test_subset, threads;
    double lr, momentum, weight_decay, clip, width;
    unsigned long long seed;
} train_opts;

/* o's dataset and the architecture of o's model on it; 2 after printing why not (nothing to
 * free then). */
int sim_cli_load_model_data(const train_opts *o, nn_dataset *train, nn_dataset *test,
                            nn_arch *arch);
/* A model of arch for batches of B, initialized from o's seed, trained at width p. */
void sim_cli_make_model(nn_model *m, const nn_arch *arch, const train_opts *o, int B, double p);
/* Wall-clock seconds (monotonic). */
double sim_cli_now_s(void);

/* sim/cmd_mpi.c (fedsim-mpi only): main under mpirun; dispatch runs a command line in this
 * process with the given rank hooks (main.c's). */
int sim_cli_mpi_main(int argc, char **argv,
                     int (*dispatch)(int argc, char **argv, rank_hooks *ranks));

#endif /* SIM_CMD_H */
