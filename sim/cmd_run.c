/* sim/cmd_run.c -- `fedsim run` and `fedsim resume`: one run of a scenario into its folder, with
 * live plots, checkpoints and SIGINT/SIGTERM stops; and the options, scenario loading and warnings
 * that check and sweep share with them (sim/cmd.h).
 *
 * A run that fails midway keeps the outputs written so far. Under fedsim-mpi, sim_cli_run_one hands
 * the jobs to MPI ranks only through rank_hooks (sim/cmd_mpi.c).
 */
#include "sim/budget.h"
#include "sim/checkpoint.h"
#include "sim/cmd.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parse the options of check, run, sweep or resume (what = OPTS_*). resume takes a run folder and
 * only the options that cannot change a result: everything else is in its scenario.yaml. */
void sim_cli_run_dir(const sim_scenario *sc, char *out, size_t n)
{
    snprintf(out, n, "runs/%s-%llu", sc->name, (unsigned long long)sc->spec.seed);
}

int sim_cli_parse_run(run_opts *o, int argc, char **argv, int what)
{
    memset(o, 0, sizeof *o);
    plot_opts_default(&o->plots);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->workers = cores > 0 ? (int)(cores < 256 ? cores : 256) : 0;
    /* by wall time, not rounds: a checkpoint of a million-client run costs seconds, so a
     * rounds-based default would dominate short runs; long runs are the ones worth saving */
    o->checkpoint_minutes = 10;
    int runs = what != OPTS_CHECK, resume = what == OPTS_RESUME;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-q") && runs) {
            o->quiet = 1;
        } else if (!strcmp(a, "--strict") && (what == OPTS_CHECK || what == OPTS_RUN)) {
            o->strict = 1;
        } else if (!strcmp(a, "--cost-only") && runs && !resume) {
            o->cost_only = 1;
        } else if (!strcmp(a, "--plot-logx") && runs) {
            o->plots.log_x = 1;
        } else if ((!strcmp(a, "--set") || !strcmp(a, "--out") || !strcmp(a, "--seed") ||
                    !strcmp(a, "--trace") || !strcmp(a, "--plots") || !strcmp(a, "--plot-window") ||
                    !strcmp(a, "--vary") || !strcmp(a, "--target") || !strcmp(a, "--workers") ||
                    !strcmp(a, "--checkpoint-every") || !strcmp(a, "--checkpoint-minutes") ||
                    !strcmp(a, "--job-timeout") || !strcmp(a, "--state-memory")) &&
                   i + 1 < argc) {
            const char *v = argv[++i];
            double x;
            if (resume && (!strcmp(a, "--set") || !strcmp(a, "--out") || !strcmp(a, "--seed"))) {
                fprintf(stderr,
                        "fedsim: resume takes no %s: the run continues exactly as its "
                        "scenario.yaml says\n",
                        a);
                return 2;
            } else if (!strcmp(a, "--set")) {
                if (o->n_sets == MAX_SETS - 2)
                    return sim_cli_die("too many --set options (62 at most)");
                o->sets[o->n_sets++] = v;
            } else if (!strcmp(a, "--out") && runs) {
                o->out = v;
            } else if (!strcmp(a, "--trace") && what == OPTS_RUN) {
                o->trace = v;
            } else if (!strcmp(a, "--plots") && runs) {
                if ((o->plots.format = plot_format_parse(v)) < 0)
                    return sim_cli_die("--plots: expected png, svg, pdf or none");
            } else if (!strcmp(a, "--plot-window") && runs) {
                if (sim_cli_parse_num(a, v, 1, 1e6, &x)) return 2;
                o->plots.window = (int)x;
            } else if (!strcmp(a, "--workers") && runs) {
                if (sim_cli_parse_num(a, v, 0, 256, &x)) return 2;
                if (x != (int)x)
                    return sim_cli_die("--workers: expected a whole number of processes");
                o->workers = (int)x;
            } else if (!strcmp(a, "--checkpoint-every") && runs) {
                if (sim_cli_parse_num(a, v, 0, 1e9, &x)) return 2;
                if (x != (int)x) return sim_cli_die("--checkpoint-every: expected a whole number");
                o->checkpoint_every = (int)x;
            } else if (!strcmp(a, "--checkpoint-minutes") && runs) {
                if (sim_cli_parse_num(a, v, 0, 1e9, &o->checkpoint_minutes)) return 2;
            } else if (!strcmp(a, "--job-timeout") && runs) {
                if (sim_cli_parse_num(a, v, 0, 1e9, &o->job_timeout)) return 2;
            } else if (!strcmp(a, "--state-memory")) {
                sim_err e = {0};
                if (sim_parse_bytes(v, &o->state_memory, &e) || o->state_memory < 1) {
                    fprintf(stderr, "fedsim: --state-memory: %s\n",
                            e.msg[0] ? e.msg : "expected a size of at least 1 B, e.g. 4GiB");
                    return 2;
                }
            } else if (!strcmp(a, "--target") && what == OPTS_SWEEP) {
                if (sim_cli_parse_num(a, v, 0, 1, &o->plots.target)) return 2;
            } else if (!strcmp(a, "--vary") && what == OPTS_SWEEP) {
                if (o->n_vary == MAX_VARY)
                    return sim_cli_die("too many --vary options (8 at most)");
                if (!strchr(v, '=') || strchr(v, '=') == v)
                    return sim_cli_die("--vary: expected key=value1,value2,...");
                o->vary[o->n_vary++] = v;
            } else if (!strcmp(a, "--seed")) {
                char *end;
                o->seed = strtoull(v, &end, 10);
                if (*end || end == v) return sim_cli_die("--seed: expected a non-negative integer");
                o->have_seed = 1;
            } else {
                fprintf(stderr, "fedsim: %s is not an option of this command\n", a);
                return 2;
            }
        } else if (a[0] != '-' && !o->scenario) {
            o->scenario = a;
        } else {
            fprintf(stderr, "fedsim: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!o->scenario)
        return sim_cli_die(resume ? "which run? (fedsim resume RUN_DIR)"
                                  : "which scenario? (fedsim run SCENARIO.yaml)");
    if (what == OPTS_SWEEP && !o->n_vary)
        return sim_cli_die("sweep: what to vary? (--vary key=value1,value2,...)");
    return 0;
}

/* Load with --seed and --cost-only folded in as --set overrides (o->sets has room for both). */
int sim_cli_load_scenario(sim_scenario *sc, const run_opts *o, sim_err *err)
{
    const char *sets[MAX_SETS];
    int n = o->n_sets;
    memcpy(sets, o->sets, sizeof(char *) * (size_t)n);
    char seed_set[64];
    if (o->have_seed) {
        snprintf(seed_set, sizeof seed_set, "seed=%llu", o->seed);
        sets[n++] = seed_set;
    }
    if (o->cost_only) sets[n++] = "cost_only=true";
    int rc = sim_scenario_load(sc, o->scenario, sets, n, err);
    if (!rc && sc->note[0] && !o->rank_worker) fprintf(stderr, "fedsim: note: %s\n", sc->note);
    return rc;
}

/* The signal that asked the run to stop (SIGINT, SIGTERM), 0 until one does. The only mutable
 * global: a signal handler can reach nothing else. The engine polls it at event boundaries through
 * spec.stop, writes a checkpoint and returns (and the MPI ranks' wait, sim/cmd_mpi.c). */
volatile sig_atomic_t sim_cli_stop_signal;

static void on_stop_signal(int sig)
{
    sim_cli_stop_signal = sig;
}

/* Installed before the engine forks its workers, which inherit the handler: a Ctrl-C sent to the
 * whole process group then leaves them running (their flag is never read) while the coordinator
 * checkpoints, instead of killing them mid-job. SA_RESTART keeps the pool's blocking reads and
 * writes going; libev's loop already retries an interrupted wait. */
static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* doc as YAML into path, whole or not at all (sim_write_file). */
static int write_yaml_file(const sim_yaml *doc, const char *path, sim_err *err)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno));
    int rc = sim_yaml_write(doc, f, err);
    if (fclose(f) && !rc)
        rc = sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno));
    if (!rc) rc = sim_write_file(path, text, len, err);
    free(text);
    return rc;
}

/* One run of o->scenario into its folder (o->out, or runs/NAME-SEED); the folder's path is left
 * in out. Plots, unless o->plots.format is PLOT_NONE, come from a gnuplot that redraws them
 * while the run goes on; they only read the files the run writes. loaded: the scenario already
 * loaded from o (taken over), or NULL to load it here. */
static int run_body(const run_opts *o, sim_scenario *loaded, char *out, size_t out_size)
{
    sim_err err = {0};
    sim_scenario own, *sc = loaded ? loaded : &own; /* its spec points into it: never copied */
    if (!loaded && sim_cli_load_scenario(&own, o, &err)) return sim_cli_print_err(&err);
    /* the warnings before anything is written: under --strict nothing is */
    sim_cli_prices pr;
    int sync_deadline = sc->spec.fed.mode == SIM_SYNC && sc->spec.fed.deadline > 0;
    const sim_sel_policy *sel = sc->spec.fed.selection;
    int predict = sel && (sel->flags & SIM_SEL_PREDICTED); /* the policy reads predicted jobs */
    int rc = sim_cli_prices_init(&pr, sc, sync_deadline || predict, &err);
    int warned = rc ? 0 : sim_cli_warnings(sc, &pr, stderr, "fedsim: warning: ");
    if (!rc && predict) {
        sc->predicted_s = sim_xmalloc(sizeof(double) * (size_t)sc->spec.n_clients);
        int energy = 0;
        for (int c = 0; c < sc->spec.n_clients && !energy; c++)
            energy = sc->devices[c].power.set;
        if (energy) sc->predicted_j = sim_xmalloc(sizeof(double) * (size_t)sc->spec.n_clients);
        sim_cli_predict_jobs(&pr, sc, sc->predicted_s, sc->predicted_j);
        sc->spec.predicted_s = sc->predicted_s;
        sc->spec.predicted_j = sc->predicted_j;
    }
    sim_cli_prices_destroy(&pr);
    if (rc || (warned && o->strict)) {
        sim_scenario_destroy(sc);
        if (rc) return sim_cli_print_err(&err);
        fprintf(stderr,
                "fedsim: run --strict: %d warning%s (above) count as errors; nothing was run\n",
                warned, warned > 1 ? "s" : "");
        return 2;
    }
    if (o->out)
        snprintf(out, out_size, "%s", o->out);
    else
        sim_cli_run_dir(sc, out, out_size);
    if (sim_cli_mkdirs(out)) {
        sim_scenario_destroy(sc);
        fprintf(stderr, "fedsim: %s: cannot create the run folder: %s\n", out, strerror(errno));
        return 2;
    }
    char path[1700];
    snprintf(path, sizeof path, "%s/checkpoint.msgpack", out);
    if (!o->resume && access(path, F_OK) == 0) { /* hours of work may be in it */
        sim_scenario_destroy(sc);
        fprintf(stderr,
                "fedsim: %s holds an unfinished run (checkpoint.msgpack); continue it with: "
                "fedsim resume %s\n(to start over, remove %s or choose another --out)\n",
                out, out, path);
        return 2;
    }
    snprintf(path, sizeof path, "%s/scenario.yaml", out);
    if (!o->resume && write_yaml_file(sc->doc, path, &err)) {
        sim_scenario_destroy(sc);
        return sim_cli_print_err(&err);
    }
    /* a checkpoint is tied to the exact resolved text, which is what resume reloads */
    if (sim_checkpoint_hash_file(path, &sc->spec.scenario_hash, &err)) {
        sim_scenario_destroy(sc);
        return sim_cli_print_err(&err);
    }
    sc->spec.out_dir = out;
    sc->spec.quiet = o->quiet;
    sc->spec.workers = o->workers;
    sc->spec.job_timeout_s = o->job_timeout;
    sc->spec.state_memory = (size_t)o->state_memory;
    sc->spec.resume = o->resume;
    sc->spec.checkpoint_every = o->checkpoint_every;
    sc->spec.checkpoint_wall_s = 60 * o->checkpoint_minutes;
    sc->spec.stop = &sim_cli_stop_signal;
    /* test hook: stop as if interrupted right after the checkpoint of this aggregation */
    const char *hook = getenv("FEDSIM_TEST_STOP_AFTER_CHECKPOINT");
    sc->spec.stop_after_round = hook ? atoi(hook) : 0;
    catch_stop_signals();
    if (o->ranks && o->ranks->open(o->ranks, sc, &err)) {
        sim_scenario_destroy(sc);
        return sim_cli_print_err(&err);
    }
    FILE *trace = NULL;
    if (o->trace && !(trace = fopen(o->trace, "w"))) {
        sim_scenario_destroy(sc);
        fprintf(stderr, "fedsim: %s: cannot create: %s\n", o->trace, strerror(errno));
        return 2;
    }
    sc->spec.trace = trace;
    sc->spec.trace_path = o->trace;
    openblas_set_num_threads(1);
    plot_proc *gp = NULL;
    plot_live live;
    if (o->plots.format != PLOT_NONE) {
        if (!(gp = plot_open())) sim_cli_gnuplot_missing();
        plot_live_init(&live, gp, &o->plots, out);
        sc->spec.on_tick = plot_live_tick;
        sc->spec.tick_arg = &live;
    }
    sim_engine *e;
    if (sim_engine_new(&e, &sc->spec, &err)) {
        plot_close(gp);
        if (trace) fclose(trace);
        sim_scenario_destroy(sc);
        return sim_cli_print_err(&err);
    }
    if (!o->quiet)
        fprintf(stderr, "fedsim: %s%s: %d clients, %s, %s, %d %s; outputs in %s/\n",
                o->resume ? "resuming " : "", sc->name, sc->spec.n_clients, sc->model,
                sc->spec.algo->name, sc->spec.fed.rounds,
                sc->spec.fed.mode == SIM_SYNC ? "rounds" : "aggregations", out);
    rc = sim_engine_run(e, &err);
    int sc_mode_sync = sc->spec.fed.mode == SIM_SYNC, cost_only = sc->spec.env.cost_only;
    sim_totals t;
    sim_engine_totals(e, &t);
    sim_engine_free(e);
    if (trace && fclose(trace) && !rc) /* the engine flushed it: only closing can fail here */
        rc = sim_fail(&err, SIM_EIO, o->trace, 0, 0, "cannot write: %s", strerror(errno));
    sim_scenario_destroy(sc);
    /* the only wait on gnuplot: until it has written the final plots */
    int plots_failed = gp && plot_close(gp);
    if (plots_failed)
        fprintf(stderr,
                "fedsim: gnuplot reported errors (above); the run's results are intact "
                "(redraw its plots with: fedsim plot %s)\n",
                out);
    if (rc) {
        sim_cli_print_err(&err);
        fprintf(stderr, "fedsim: outputs so far are in %s/\n", out);
        snprintf(path, sizeof path, "%s/checkpoint.msgpack", out);
        if (t.checkpoint_round >= 0 && access(path, F_OK) == 0)
            fprintf(stderr,
                    "fedsim: %s/checkpoint.msgpack holds the run after %s %d; continue with: "
                    "fedsim resume %s\n",
                    out, sc_mode_sync ? "round" : "aggregation", t.checkpoint_round, out);
        return 2;
    }
    if (t.stopped) {
        char ts[32];
        sim_format_time(ts, sizeof ts, t.now);
        fprintf(stderr,
                "\nfedsim: %s after %s %d at simulated %s; state saved in "
                "%s/checkpoint.msgpack\nfedsim: continue with: fedsim resume %s\n",
                sim_cli_stop_signal == SIGTERM ? "stopped by SIGTERM"
                : sim_cli_stop_signal          ? "interrupted (SIGINT)"
                                               : "stopped by FEDSIM_TEST_STOP_AFTER_CHECKPOINT",
                sc_mode_sync ? "round" : "aggregation", t.round, ts, out, out);
        return sim_cli_stop_signal == SIGTERM ? 128 + SIGTERM : 128 + SIGINT;
    }
    if (t.workers_replaced > t.workers_timed_out)
        fprintf(stderr,
                "fedsim: %ld worker process(es) died and were replaced; their jobs were re-run\n",
                t.workers_replaced - t.workers_timed_out);
    if (t.workers_timed_out)
        fprintf(stderr,
                "fedsim: %ld worker process(es) exceeded --job-timeout and were killed and "
                "replaced; their jobs were re-run\n",
                t.workers_timed_out);
    if (t.eval_reruns)
        fprintf(stderr,
                "fedsim: %ld evaluation task(s) were run again by the coordinator: a helper "
                "process died\n",
                t.eval_reruns);
    if (t.workers_busy_s > 0 && t.wall_s > 0 && !o->quiet)
        fprintf(stderr,
                "fedsim: %.2f jobs trained at once on average (%.1f s of training on the workers "
                "in %.1f s)\n",
                t.workers_busy_s / t.wall_s, t.workers_busy_s, t.wall_s);
    if (t.state_clients > 0 && !o->quiet) {
        char held[32], budget[32], disk[32];
        sim_format_bytes(held, sizeof held, t.state_bytes);
        sim_format_bytes(disk, sizeof disk, t.state_disk);
        sim_format_bytes(budget, sizeof budget,
                         (double)(o->state_memory > 0 ? (size_t)o->state_memory
                                                      : sim_state_budget_default()));
        fprintf(stderr,
                "fedsim: client states: %ld clients hold %s; %ld read back from disk (state "
                "memory %s; state files %s at the end)\n",
                t.state_clients, held, t.state_reads, budget, disk);
    }
    char ts[32], up[32], down[32];
    sim_format_time(ts, sizeof ts, t.now);
    sim_format_bytes(up, sizeof up, t.bytes_up);
    sim_format_bytes(down, sizeof down, t.bytes_down);
    /* what the run has: a --cost-only run evaluates nothing, so it has no accuracy to report */
    double acc = isnan(t.acc_global) ? t.acc_pers : t.acc_global;
    char acc_text[64];
    if (isnan(acc))
        snprintf(acc_text, sizeof acc_text, "accuracy none%s",
                 cost_only ? " (--cost-only: nothing trained)" : "");
    else
        snprintf(acc_text, sizeof acc_text, "%saccuracy %.4f",
                 isnan(t.acc_global) ? "personalized " : "", acc);
    printf("%s: %d %s in %s simulated; up %s, down %s; %ld jobs, %ld lost, %ld late, "
           "%ld clients excluded (memory); final %s\nmetrics: %s/metrics.tsv\n",
           out, t.round, sc_mode_sync ? "rounds" : "aggregations", ts, up, down, t.jobs, t.dropped,
           t.late, t.excluded, acc_text, out);
    if (gp && !plots_failed) { /* the figures its last draw asked for */
        char list[256];
        plot_fig_list(list, sizeof list, &o->plots, live.figs);
        if (live.figs)
            printf("plots: %s/%s\n", out, list);
        else
            printf("plots: none (metrics.tsv has no accuracy and timeline.tsv no job)\n");
    }
    fflush(stdout);
    return plots_failed ? 2 : 0; /* a plot asked for and not drawn is not a success */
}

/* run_body, then the rank hooks' close with its status. */
int sim_cli_run_one(const run_opts *o, sim_scenario *loaded, char *out, size_t out_size)
{
    int rc = run_body(o, loaded, out, out_size);
    if (o->ranks) o->ranks->close(o->ranks, rc);
    return rc;
}

static int cmd_run(int argc, char **argv, rank_hooks *ranks)
{
    run_opts o;
    if (sim_cli_parse_run(&o, argc, argv, OPTS_RUN)) return SIM_CLI_BAD_ARGS;
    o.ranks = ranks;
    char out[1600];
    return sim_cli_run_one(&o, NULL, out, sizeof out);
}

/* fedsim resume RUN_DIR: the run continues from RUN_DIR/checkpoint.msgpack with RUN_DIR's
 * resolved scenario.yaml (no --set: a checkpoint belongs to exactly that text). The options:
 * RUN_DIR's scenario.yaml (into scenario), its folder (dir). */
int sim_cli_parse_resume(run_opts *o, int argc, char **argv, char dir[1024], char scenario[1100])
{
    int rc = sim_cli_parse_run(o, argc, argv, OPTS_RESUME);
    if (rc) return rc;
    snprintf(dir, 1024, "%s", o->scenario);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') /* "runs/x/" and "runs/x" name the same folder */
        dir[--n] = 0;
    snprintf(scenario, 1100, "%s/scenario.yaml", dir);
    o->scenario = scenario;
    o->out = dir;
    o->resume = 1;
    return 0;
}

static int cmd_resume(int argc, char **argv, rank_hooks *ranks)
{
    run_opts o;
    char dir[1024], scenario[1100];
    if (sim_cli_parse_resume(&o, argc, argv, dir, scenario)) return SIM_CLI_BAD_ARGS;
    o.ranks = ranks;
    char out[1600];
    return sim_cli_run_one(&o, NULL, out, sizeof out);
}

static const char run_usage[] =
        "usage: fedsim run SCENARIO [--set key=value]... [--out DIR] [--seed N] [--cost-only]\n"
        "                  [-q] [--trace FILE] [--plots png|svg|pdf|none] [--plot-window N]\n"
        "                  [--plot-logx] [--workers N] [--job-timeout S]\n"
        "                  [--checkpoint-every N] [--checkpoint-minutes T] [--strict]\n"
        "                  [--state-memory SIZE]\n"
        "\n"
        "Run a scenario; outputs go to DIR [runs/NAME-SEED]: scenario.yaml (resolved),\n"
        "metrics.tsv, clients.tsv, events.msgpack, timeline.tsv, and plots that gnuplot\n"
        "refreshes every 5 s while it runs [png]: acc_time (accuracy vs simulated time),\n"
        "acc_bytes (vs bytes up + down; --plot-logx: log axis), timeline (per-client\n"
        "download/train/upload bars of the last N rounds [5], lost and late jobs marked);\n"
        "with network: links.tsv and links.png (each shared link's load over time), and\n"
        "with devices.energy acc_energy (vs the joules the clients' jobs drew).\n"
        "--set overrides any key (e.g. --set federation.per_round=20; scenario keys and\n"
        "their defaults: scenarios/README.md); --seed N is --set seed=N; --cost-only skips\n"
        "the math and reports the FLOPs and bytes the jobs would have; -q: no progress\n"
        "line; --trace writes every event as a line of text; --workers N trains client\n"
        "jobs in N forked processes [online cores], 0 = in this process (a job trains\n"
        "from its dispatch while the simulation goes on to its earliest possible end;\n"
        "the run ends saying how many trained at once), and with N >= 2 spreads\n"
        "evaluations over N processes; outputs do not depend on N.\n"
        "--job-timeout S: a worker holding a job over S wall seconds is killed and\n"
        "replaced, and the job re-run (3 tries) [0 = no limit]; outputs unchanged.\n"
        "--state-memory SIZE: the clients' private states (personal models, masks,\n"
        "momentum) and the server's rows for them (pFedHN's embeddings, FedPeWS's\n"
        "masks) kept in memory, e.g. 4GiB [a quarter of RAM]; the rest wait in\n"
        "DIR/state.mdb, read back when next needed; outputs unchanged.\n"
        "DIR/checkpoint.msgpack is written every N rounds [off] and/or T wall minutes\n"
        "[10] (0 = off), and on SIGINT/SIGTERM, which stop the run (exit 130/143), with\n"
        "the states changed since the last one committed to DIR/state.mdb; a finished\n"
        "run removes both. A DIR holding a checkpoint is refused: resume it, or\n"
        "remove the checkpoint to start over.\n"
        "Warnings (fedsim check's: clients that can never contribute, and why) go to\n"
        "stderr before the run starts; --strict makes them errors: nothing runs (exit 2).\n";

const sim_command sim_cmd_run = {
        .name = "run",
        .summary = "run a scenario; outputs, plots and checkpoints go to its folder",
        .usage = run_usage,
        .fn = cmd_run,
};

static const char resume_usage[] =
        "usage: fedsim resume RUN_DIR [-q] [--workers N] [--job-timeout S]\n"
        "                     [--plots png|svg|pdf|none] [--plot-window N] [--plot-logx]\n"
        "                     [--checkpoint-every N] [--checkpoint-minutes T]\n"
        "                     [--state-memory SIZE]\n"
        "\n"
        "Continue an interrupted run from RUN_DIR/checkpoint.msgpack with its\n"
        "scenario.yaml and the clients' states in RUN_DIR/state.mdb; the outputs end\n"
        "byte-identical to an uninterrupted run's (a checkpoint written by another build\n"
        "of fedsim, or on other OpenBLAS kernels, resumes with a warning: the rest can\n"
        "round differently; one of format 6 or older, from before state.mdb, does not).\n"
        "The options are run's that cannot change a result: no --set, --seed, --out,\n"
        "--cost-only or --trace.\n";

const sim_command sim_cmd_resume = {
        .name = "resume",
        .summary = "continue an interrupted run from its checkpoint",
        .usage = resume_usage,
        .fn = cmd_resume,
};
