/* sim/main.c -- the fedsim command line: run, resume, check, sweep, plot, devices, events,
 * calibrate, train.
 *
 * Errors print as "fedsim: file:line:col: message" and exit with status 2; a run that fails
 * midway keeps the outputs written so far.
 *
 * Built with -DFEDSIM_MPI (`make mpi`, build/mpi/fedsim-mpi), the same program under mpirun or
 * srun runs `run` and `resume` with MPI ranks 1..N-1 as the training workers (sim/mpi.h); the
 * MPI code here is confined to the last section, and run_one reaches it only through rank_hooks.
 */
#include "devices/catalog.h"
#include "nn/data.h"
#include "nn/model.h"
#include "nn/pack.h"
#include "nn/train.h"
#include "plots/plot.h"
#include "sim/base.h"
#include "sim/blas.h"
#include "sim/checkpoint.h"
#include "sim/engine.h"
#include "sim/events.h"
#include "sim/rng.h"
#include "sim/scenario.h"
#ifdef FEDSIM_MPI
#include "sim/mpi.h"
#endif

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
        "usage: fedsim COMMAND [options]\n"
        "\n"
        "fedsim simulates heterogeneous federated learning: real training math per client, and\n"
        "simulated time and bytes from device profiles and what each job really cost.\n"
        "\n"
        "commands:\n"
        "  run SCENARIO [--set key=value]... [--out DIR] [--seed N] [--cost-only] [-q]\n"
        "             [--trace FILE] [--plots png|svg|pdf|none] [--plot-window N] [--plot-logx]\n"
        "             [--workers N] [--job-timeout S] [--checkpoint-every N]\n"
        "             [--checkpoint-minutes T]\n"
        "             run a scenario; outputs go to DIR [runs/NAME-SEED]: scenario.yaml "
        "(resolved),\n"
        "             metrics.tsv, clients.tsv, events.msgpack, timeline.tsv, and plots that\n"
        "             gnuplot refreshes every 5 s while it runs [png]: acc_time (accuracy vs\n"
        "             simulated time), acc_bytes (vs bytes up + down; --plot-logx: log axis),\n"
        "             timeline (per-client download/train/upload bars of the last N rounds\n"
        "             [5], lost and late jobs marked). --set overrides any key\n"
        "             (e.g. --set federation.per_round=20); --cost-only skips the math and\n"
        "             reports the FLOPs and bytes the jobs would have; --trace writes every\n"
        "             event as a line of text; --workers N trains client jobs in N forked\n"
        "             processes [online cores], 0 = in this process, and with N >= 2 spreads\n"
        "             evaluations over N processes; outputs do not depend on N.\n"
        "             --job-timeout S: a worker holding a job over S wall seconds is killed and\n"
        "             replaced, and the job re-run (3 tries) [0 = no limit]; outputs unchanged.\n"
        "             DIR/checkpoint.msgpack is written every N rounds [off] and/or T wall\n"
        "             minutes [10] (0 = off), and on SIGINT/SIGTERM, which stop the run\n"
        "             (exit 130/143); a finished run removes it. A DIR holding a checkpoint\n"
        "             is refused: resume it, or remove the checkpoint to start over\n"
        "  resume RUN_DIR [-q] [--workers N] [--job-timeout S] [--plots ...]\n"
        "             [--checkpoint-every N] [--checkpoint-minutes T]\n"
        "             continue an interrupted run from RUN_DIR/checkpoint.msgpack with its\n"
        "             scenario.yaml; the outputs end byte-identical to an uninterrupted run's\n"
        "             (a checkpoint written by another build of fedsim, or on other OpenBLAS\n"
        "             kernels, resumes with a warning: the rest can round differently)\n"
        "  check SCENARIO [--set key=value]...\n"
        "             validate, print the resolved scenario and per-device predicted job cost\n"
        "             (the average client's, as the algorithm prices its first round: the\n"
        "             width, budget or masks trained and the messages sent), memory fit and\n"
        "             warnings (settings that run as asked but may not be what was meant)\n"
        "  sweep SCENARIO --vary key=v1,v2,... [--vary ...] [--set key=value]... [--out DIR]\n"
        "             [--target ACC] [--seed N] [--cost-only] [-q] [--plots ...] [--workers N]\n"
        "             [--job-timeout S] [--checkpoint-every N] [--checkpoint-minutes T]\n"
        "             one run per point of the grid of --vary values, in DIR/key=value,...\n"
        "             [runs/sweep-SCENARIO]; then DIR/summary.tsv (final accuracy, simulated\n"
        "             time and bytes to reach ACC [0.7], dropped jobs) and overlay plots.\n"
        "             Run again (after a stop, or with more values), a sweep keeps the points\n"
        "             that finished and resumes the one that was stopped, each only if its\n"
        "             folder's scenario.yaml is the text the point resolves to (or lacks only\n"
        "             keys added since, at their defaults)\n"
        "  plot RUN_DIR... [--out DIR] [--target ACC] [--acc KIND] [--plots FORMAT]\n"
        "             [--plot-window N] [--plot-logx]\n"
        "             redraw one run's plots [into its folder], or overlay several runs\n"
        "             [into plots-out]: acc_time, acc_bytes, and to_target (bars of the time\n"
        "             and bytes each run took to reach ACC [0.7]); KIND: the accuracy a run\n"
        "             with both is judged by, global (its global model) [default] or\n"
        "             personalized (the mean over clients); a run with one uses that one.\n"
        "             By personalized accuracy, a run of a method that evaluates over\n"
        "             another's training (see summary) draws that method's curve too\n"
        "  summary RUN_DIR... [--target ACC] [--acc KIND]\n"
        "             one row per run (final and best accuracy, the round, simulated time and\n"
        "             bytes at which it first reached ACC [0.7], the run's bytes and client\n"
        "             FLOPs, the round of its best accuracy, and with partition.local_val\n"
        "             the accuracy at the evaluation with the best validation accuracy and\n"
        "             its round), then per group of runs whose\n"
        "             folders differ only in a trailing -SEED or, for sweep points, a seed=N\n"
        "             item (--vary seed=1,2,3): mean ± std over the runs of final accuracy\n"
        "             and, over those that reached ACC, rounds, time and bytes to it. By\n"
        "             personalized accuracy, a run of a method that evaluates over another's\n"
        "             training (DM-PFL+ over DM-PFL, FedAvg-FT over FedAvg) has a second row,\n"
        "             \"RUN [base NAME]\": the other method, from the same run\n"
        "  devices [--catalog FILE]\n"
        "             list the device catalog [devices/catalog.yaml]\n"
        "  events RUN_DIR|FILE\n"
        "             print a run's events.msgpack as text\n"
        "  calibrate [--model NAME] [--data NAME] [--data-dir DIR] [--batch N]\n"
        "             [--widths P,P,...] [--seconds S]\n"
        "             time SGD steps of the model at each width on this machine (one BLAS\n"
        "             thread, as a worker; the best of 3 runs of S seconds [1] each) and fit\n"
        "             the device cost model to them: compute (FLOP/s), mem_bandwidth (for the\n"
        "             activation bytes a step writes) and step_overhead (time a step takes\n"
        "             beyond both), with each width's error, and the errors of FLOPs alone\n"
        "             and of the fit without mem_bandwidth [pa3dfl-cnn, fashion-mnist,\n"
        "             batch 50, widths 1,0.5,0.25,0.125,0.0625]\n"
        "  train      train a model centrally and report test accuracy per epoch\n"
        "  help       show this text\n"
        "\n"
        "Scenario keys and their defaults: scenarios/README.md.\n"
        "\n"
        "train options (defaults in brackets):\n"
        "  --model NAME       mlp:784-200-200-10, mlpbn:..., cnn2, lenet5-caffe, pa3dfl-cnn,\n"
        "                     fedpews-mlp, fedpews-cnn [lenet5-caffe]\n"
        "  --data NAME        fashion-mnist, synth-pews-32k, synth-pews-3.2k [fashion-mnist]\n"
        "  --data-dir DIR     where Fashion-MNIST's gzip'd IDX files are\n"
        "                     [/usr/share/datasets/fashion-mnist]\n"
        "  --epochs N         passes over the training set [1]\n"
        "  --batch N          minibatch size [64]\n"
        "  --lr X             SGD learning rate [0.01]\n"
        "  --momentum X       SGD momentum [0.9]\n"
        "  --weight-decay X   L2 weight decay [0]\n"
        "  --clip X           clip the gradient norm to X, 0 = off [0]\n"
        "  --width P          train the first ceil(P*C) channels of every hidden layer [1]\n"
        "  --seed N           run seed: weights and batch order [1]\n"
        "  --test-subset N    evaluate on the first N test samples, 0 = all [0]\n"
        "  --threads N        BLAS threads; results are reproducible only with 1 [1]\n"
        "\n"
        "environment:\n"
        "  OPENBLAS_CORETYPE  OpenBLAS's kernels. Unset, fedsim runs on OpenBLAS's own choice,\n"
        "                     or on its SkylakeX (Haswell) kernels where that choice lacks the\n"
        "                     CPU's AVX-512 (AVX2): a CPU newer than the library gets its SSE3\n"
        "                     ones. Results repeat byte for byte on the same kernels.\n";

typedef struct train_opts {
    const char *model, *data, *data_dir;
    int epochs, batch, test_subset, threads;
    double lr, momentum, weight_decay, clip, width;
    unsigned long long seed;
} train_opts;

static int die(const char *msg)
{
    fprintf(stderr, "fedsim: %s\n", msg);
    return 2;
}

static int print_err(const sim_err *err)
{
    char msg[1200];
    sim_err_format(err, msg, sizeof msg);
    return die(msg);
}

static int parse_num(const char *key, const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "fedsim: %s: '%s' is not a number in [%g, %g]\n", key, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* The option at argv[*i], as --key VALUE or --key=value: *k (copied into key[64] when split)
 * and *v, with *i on the last word taken; -1 after saying what `fedsim cmd` expected. */
static int next_option(const char *cmd, int argc, char **argv, int *i, char *key, const char **k,
                       const char **v)
{
    *k = argv[*i];
    *v = NULL;
    const char *eq = strchr(*k, '=');
    if (eq) {
        snprintf(key, 64, "%.*s", (int)(eq - *k), *k);
        *k = key;
        *v = eq + 1;
    } else if (*i + 1 < argc) {
        *v = argv[++*i];
    }
    if (strncmp(*k, "--", 2) || !*v) {
        fprintf(stderr, "fedsim %s: expected --option VALUE, got '%s'\n", cmd, argv[*i]);
        return -1;
    }
    return 0;
}

static int parse_train(train_opts *o, int argc, char **argv)
{
    *o = (train_opts){"lenet5-caffe", "fashion-mnist", NULL, 1, 64, 0, 1, 0.01, 0.9, 0, 0, 1, 1};
    for (int i = 0; i < argc; i++) {
        const char *k, *v;
        char key[64];
        if (next_option("train", argc, argv, &i, key, &k, &v)) return -1;
        double x;
        int rc = 0;
        if (!strcmp(k, "--model"))
            o->model = v;
        else if (!strcmp(k, "--data"))
            o->data = v;
        else if (!strcmp(k, "--data-dir"))
            o->data_dir = v;
        else if (!strcmp(k, "--epochs"))
            rc = parse_num(k, v, 1, 1e6, &x), o->epochs = (int)x;
        else if (!strcmp(k, "--batch"))
            rc = parse_num(k, v, 1, 65536, &x), o->batch = (int)x;
        else if (!strcmp(k, "--lr"))
            rc = parse_num(k, v, 0, 1e3, &o->lr);
        else if (!strcmp(k, "--momentum"))
            rc = parse_num(k, v, 0, 1, &o->momentum);
        else if (!strcmp(k, "--weight-decay"))
            rc = parse_num(k, v, 0, 1, &o->weight_decay);
        else if (!strcmp(k, "--clip"))
            rc = parse_num(k, v, 0, 1e9, &o->clip);
        else if (!strcmp(k, "--width"))
            rc = parse_num(k, v, 1e-6, 1, &o->width);
        else if (!strcmp(k, "--seed"))
            rc = parse_num(k, v, 0, 9e15, &x), o->seed = (unsigned long long)x;
        else if (!strcmp(k, "--test-subset"))
            rc = parse_num(k, v, 0, 1e9, &x), o->test_subset = (int)x;
        else if (!strcmp(k, "--threads"))
            rc = parse_num(k, v, 1, 256, &x), o->threads = (int)x;
        else {
            fprintf(stderr, "fedsim train: unknown option '%s' (see fedsim help)\n", k);
            return -1;
        }
        if (rc) return -1;
    }
    return 0;
}

static int load_data(const train_opts *o, nn_dataset *train, nn_dataset *test, sim_err *err)
{
    if (!strcmp(o->data, "fashion-mnist")) return nn_fmnist_load(train, test, o->data_dir, err);
    if (!strcmp(o->data, "synth-pews-32k"))
        return nn_synth_pews_make(train, test, 2000, o->seed, err);
    if (!strcmp(o->data, "synth-pews-3.2k"))
        return nn_synth_pews_make(train, test, 200, o->seed, err);
    return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                    "unknown dataset '%s' (known: fashion-mnist, synth-pews-32k, synth-pews-3.2k)",
                    o->data);
}

/* o's dataset and the architecture of o's model on it; 2 after printing why not (nothing to
 * free then). */
static int load_model_data(const train_opts *o, nn_dataset *train, nn_dataset *test, nn_arch *arch)
{
    sim_err err = {0};
    *train = *test = (nn_dataset){0};
    if (!load_data(o, train, test, &err) &&
        !nn_arch_build(arch, o->model, train->c, train->h, train->w, train->classes, &err))
        return 0;
    nn_dataset_destroy(train);
    nn_dataset_destroy(test);
    return print_err(&err);
}

/* A model of arch for batches of B, initialized from o's seed, trained at width p. */
static void make_model(nn_model *m, const nn_arch *arch, const train_opts *o, int B, double p)
{
    nn_model_init(m, arch, B);
    sim_rng r;
    sim_rng_seed(&r, o->seed, SIM_RNG_INIT_WEIGHTS, 0);
    nn_model_init_params(m, &r);
    if (p < 1) nn_model_set_width(m, p, 0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmd_train(int argc, char **argv)
{
    train_opts o;
    if (parse_train(&o, argc, argv)) return 2;
    openblas_set_num_threads(o.threads);
    nn_dataset train, test;
    nn_arch arch;
    if (load_model_data(&o, &train, &test, &arch)) return 2;
    nn_model m;
    make_model(&m, &arch, &o, o.batch, o.width);
    sim_rng r;
    sim_rng_seed(&r, o.seed, SIM_RNG_BATCHES, 0);
    nn_batcher b;
    nn_batcher_init(&b, &train, NULL, train.n, o.batch, 0, &r);
    nn_sgd opt = {(float)o.lr, (float)o.momentum, (float)o.weight_decay, (float)o.clip};
    int n_test = o.test_subset > 0 && o.test_subset < test.n ? o.test_subset : test.n;
    printf("# fedsim train: model %s (%zu parameters, %zu trained at width %g), data %s "
           "(%d train, %d test), batch %d, lr %g, momentum %g, seed %llu\n",
           o.model, arch.layout.n_params, nn_model_live_count(&m), o.width, o.data, train.n, n_test,
           o.batch, o.lr, o.momentum, o.seed);
    printf("epoch\ttrain_loss\ttest_acc\ttest_loss\twall_s\tsamples_per_s\tgflop\n");
    int rc = 0;
    for (int e = 1; e <= o.epochs && !rc; e++) {
        double t0 = now_s(), sum = 0, last = t0;
        long seen = 0, steps = 0;
        int B;
        while ((B = nn_batcher_next(&b))) {
            float l = nn_model_train_step(&m, &opt, b.x, b.y, B);
            if (!(l == l) || l > 1e30f) {
                fprintf(stderr,
                        "\nfedsim: training diverged (loss %g) at epoch %d step %ld; "
                        "lower --lr\n",
                        (double)l, e, steps);
                rc = 1;
                break;
            }
            sum += (double)l * B;
            seen += B;
            steps++;
            double t = now_s();
            if (t - last >= 1.0) {
                fprintf(stderr, "\repoch %d: %ld/%d samples, loss %.4f, %.0f samples/s ", e, seen,
                        train.n, sum / (double)seen, (double)seen / (t - t0));
                last = t;
            }
        }
        double wall = now_s() - t0, tl;
        fprintf(stderr, "\r%70s\r", "");
        double acc = nn_evaluate(&m, &test, NULL, n_test, &tl);
        printf("%d\t%.4f\t%.4f\t%.4f\t%.1f\t%.0f\t%.1f\n", e, seen ? sum / (double)seen : 0, acc,
               tl, wall, (double)seen / wall, m.cost.flops * 1e-9);
        fflush(stdout);
    }
    nn_batcher_destroy(&b);
    nn_model_destroy(&m);
    nn_dataset_destroy(&train);
    nn_dataset_destroy(&test);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* calibrate: this machine's seconds per SGD step against the FLOPs the cost model counts */

enum { CAL_MAX_WIDTHS = 16 };

typedef struct cal_opts {
    train_opts t; /* model, data, data_dir, batch, seed */
    double widths[CAL_MAX_WIDTHS], seconds;
    int n_widths;
} cal_opts;

/* "1,0.5,..." into o->widths, each in (0, 1]. */
static int parse_widths(cal_opts *o, const char *v)
{
    o->n_widths = 0;
    for (const char *p = v;; p++) {
        char *end;
        double w = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(w > 0 && w <= 1) ||
            o->n_widths == CAL_MAX_WIDTHS) {
            fprintf(stderr,
                    "fedsim calibrate: --widths: '%s' is not a list of up to %d widths in "
                    "(0, 1] (e.g. 1,0.5,0.25)\n",
                    v, CAL_MAX_WIDTHS);
            return -1;
        }
        o->widths[o->n_widths++] = w;
        if (!*end) return 0;
        p = end;
    }
}

static int parse_calibrate(cal_opts *o, int argc, char **argv)
{
    *o = (cal_opts){.t = {.model = "pa3dfl-cnn",
                          .data = "fashion-mnist",
                          .batch = 50,
                          .lr = 0.01,
                          .seed = 1},
                    .widths = {1, 0.5, 0.25, 0.125, 0.0625},
                    .seconds = 1.0,
                    .n_widths = 5};
    for (int i = 0; i < argc; i++) {
        const char *k, *v;
        char key[64];
        if (next_option("calibrate", argc, argv, &i, key, &k, &v)) return -1;
        double x;
        int rc = 0;
        if (!strcmp(k, "--model"))
            o->t.model = v;
        else if (!strcmp(k, "--data"))
            o->t.data = v;
        else if (!strcmp(k, "--data-dir"))
            o->t.data_dir = v;
        else if (!strcmp(k, "--batch"))
            rc = parse_num(k, v, 1, 65536, &x), o->t.batch = (int)x;
        else if (!strcmp(k, "--widths"))
            rc = parse_widths(o, v);
        else if (!strcmp(k, "--seconds"))
            rc = parse_num(k, v, 0.001, 3600, &o->seconds);
        else {
            fprintf(stderr, "fedsim calibrate: unknown option '%s' (see fedsim help)\n", k);
            return -1;
        }
        if (rc) return -1;
    }
    return 0;
}

/* 100·e rounded to a tenth, with no "-0.0" for an error that rounds to nothing. */
static double percent(double e)
{
    return round(1000 * e) / 10 + 0.0;
}

/* Seconds per SGD step of m on full batches from b: the best of 3 runs of at least `secs` each,
 * after one of warm-up (other load on the machine only ever slows a run down). */
static double step_seconds(nn_model *m, nn_batcher *b, const nn_sgd *opt, double secs)
{
    double best = INFINITY;
    for (int rep = 0; rep < 4; rep++) {
        double t0 = now_s(), t;
        long steps = 0;
        do {
            int B = nn_batcher_next(b);
            if (!B) B = nn_batcher_next(b); /* an epoch ended */
            nn_model_train_step(m, opt, b->x, b->y, B);
            steps++;
        } while ((t = now_s() - t0) < secs);
        if (rep > 0 && t / (double)steps < best) best = t / (double)steps;
    }
    return best;
}

static int cmd_calibrate(int argc, char **argv)
{
    cal_opts o;
    if (parse_calibrate(&o, argc, argv)) return 2;
    openblas_set_num_threads(1); /* as a worker trains */
    nn_dataset train, test;
    nn_arch arch;
    if (load_model_data(&o.t, &train, &test, &arch)) return 2;
    int B = o.t.batch, rc = 0;
    if (B > train.n) {
        fprintf(stderr, "fedsim calibrate: --batch %d is more than the %d training samples\n", B,
                train.n);
        nn_dataset_destroy(&train);
        nn_dataset_destroy(&test);
        return 2;
    }
    double flops[CAL_MAX_WIDTHS], bytes[CAL_MAX_WIDTHS], secs[CAL_MAX_WIDTHS];
    printf("# fedsim calibrate: model %s, batch %d, one BLAS thread (%s kernels); per width, the "
           "best of 3 runs of %g s of SGD steps\n",
           o.t.model, B, sim_blas_corename(), o.seconds);
    fflush(stdout);
    for (int i = 0; i < o.n_widths; i++) {
        nn_model m;
        make_model(&m, &arch, &o.t, B, o.widths[i]);
        nn_cost c;
        nn_model_step_cost(&m, B, &c);
        sim_rng r;
        sim_rng_seed(&r, o.t.seed, SIM_RNG_BATCHES, 0);
        nn_batcher b;
        nn_batcher_init(&b, &train, NULL, train.n, B, 1, &r);
        nn_sgd opt = {(float)o.t.lr, 0, 0, 0};
        flops[i] = c.flops;
        bytes[i] = c.bytes;
        secs[i] = step_seconds(&m, &b, &opt, o.seconds);
        fprintf(stderr, "\rwidth %g: %.3g ms a step ", o.widths[i], secs[i] * 1e3);
        nn_batcher_destroy(&b);
        nn_model_destroy(&m);
    }
    fprintf(stderr, "\r%40s\r", "");
    /* the fit with every term, and without the bandwidth one, to show what each term buys */
    double compute, bw, oh, compute2, oh2;
    if (dev_fit_step_cost(flops, bytes, secs, o.n_widths, &compute, &bw, &oh) ||
        dev_fit_step_cost(flops, NULL, secs, o.n_widths, &compute2, NULL, &oh2)) {
        fprintf(stderr, "fedsim calibrate: the model has no FLOPs to fit a rate to\n");
        rc = 2;
    }
    if (!rc) {
        /* time ∝ FLOPs alone, at the first width's rate (the full model's, by default) */
        double rate = flops[0] / secs[0], worst[3] = {0};
        int at0 = 0;
        printf("width\tflops_per_step\tact_bytes_per_step\tms_per_step\tgflops\terr_flops_only\t"
               "err_no_bandwidth\terr_fitted\n");
        for (int i = 0; i < o.n_widths; i++) {
            double e[3] = {flops[i] / rate, flops[i] / compute2 + oh2,
                           flops[i] / compute + (bw > 0 ? bytes[i] / bw : 0) + oh};
            for (int j = 0; j < 3; j++) {
                e[j] = (e[j] - secs[i]) / secs[i];
                if (fabs(e[j]) <= fabs(worst[j])) continue;
                worst[j] = e[j];
                if (j == 0) at0 = i;
            }
            printf("%g\t%.0f\t%.0f\t%.4g\t%.3g\t%+.1f%%\t%+.1f%%\t%+.1f%%\n", o.widths[i], flops[i],
                   bytes[i], secs[i] * 1e3, flops[i] / secs[i] * 1e-9, percent(e[0]), percent(e[1]),
                   percent(e[2]));
        }
        char ohs[32], oh2s[32], bws[48] = "none", bwk[48] = "";
        sim_format_time(ohs, sizeof ohs, (sim_time)llround(oh * 1e9));
        sim_format_time(oh2s, sizeof oh2s, (sim_time)llround(oh2 * 1e9));
        if (bw > 0) {
            snprintf(bws, sizeof bws, "%.3g GB/s", bw * 1e-9);
            snprintf(bwk, sizeof bwk, "mem_bandwidth: %.3g GB/s, ", bw * 1e-9);
        }
        printf("# FLOPs alone (compute %.3g GFLOPS, width %g's rate): off by up to %+.1f%% (width "
               "%g: %.3g ms predicted, %.3g ms measured)\n",
               rate * 1e-9, o.widths[0], percent(worst[0]), o.widths[at0], flops[at0] / rate * 1e3,
               secs[at0] * 1e3);
        printf("# without mem_bandwidth: compute %.3g GFLOPS, step_overhead %s: off by up to "
               "%+.1f%%\n",
               compute2 * 1e-9, oh2s, percent(worst[1]));
        printf("# fitted: compute %.3g GFLOPS, mem_bandwidth %s, step_overhead %s: off by up to "
               "%+.1f%%\n",
               compute * 1e-9, bws, ohs, percent(worst[2]));
        printf("# as a device profile: {compute: %.3g GFLOPS, %sstep_overhead: %s, up: ..., down: "
               "..., latency: ..., memory: ...}\n",
               compute * 1e-9, bwk, ohs);
    }
    nn_dataset_destroy(&train);
    nn_dataset_destroy(&test);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* run, check, devices, events */

enum { MAX_SETS = 64, MAX_VARY = 8 };

/* What run_one asks of MPI worker ranks (fedsim-mpi under mpirun; NULL otherwise). open gets the
 * loaded scenario, its spec filled in, before the engine starts, and points spec.link at the
 * ranks; close gets the run's exit status once it is over (also when open failed or was never
 * reached). */
typedef struct rank_hooks {
    int (*open)(struct rank_hooks *h, sim_scenario *sc, sim_err *err);
    void (*close)(struct rank_hooks *h, int status);
    void *state;
} rank_hooks;

typedef struct run_opts {
    const char *scenario, *out, *trace, *sets[MAX_SETS], *vary[MAX_VARY];
    int n_sets, n_vary, quiet, cost_only, have_seed, workers;
    int checkpoint_every;      /* rounds/aggregations between checkpoints, 0 = none */
    double checkpoint_minutes; /* or wall minutes, 0 = none */
    double job_timeout;        /* wall seconds per worker job, 0 = none (cannot change results) */
    int resume;                /* resume: scenario is RUN_DIR/scenario.yaml, out is RUN_DIR */
    unsigned long long seed;
    plot_opts plots;
    rank_hooks *ranks; /* MPI worker ranks, or NULL */
} run_opts;

enum { OPTS_CHECK, OPTS_RUN, OPTS_SWEEP, OPTS_RESUME };

/* Parse the options of check, run, sweep or resume (what = OPTS_*). resume takes a run folder and
 * only the options that cannot change a result: everything else is in its scenario.yaml. */
static int parse_run(run_opts *o, int argc, char **argv, int what)
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
        } else if (!strcmp(a, "--cost-only") && runs && !resume) {
            o->cost_only = 1;
        } else if (!strcmp(a, "--plot-logx") && runs) {
            o->plots.log_x = 1;
        } else if ((!strcmp(a, "--set") || !strcmp(a, "--out") || !strcmp(a, "--seed") ||
                    !strcmp(a, "--trace") || !strcmp(a, "--plots") || !strcmp(a, "--plot-window") ||
                    !strcmp(a, "--vary") || !strcmp(a, "--target") || !strcmp(a, "--workers") ||
                    !strcmp(a, "--checkpoint-every") || !strcmp(a, "--checkpoint-minutes") ||
                    !strcmp(a, "--job-timeout")) &&
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
                if (o->n_sets == MAX_SETS - 2) return die("too many --set options (62 at most)");
                o->sets[o->n_sets++] = v;
            } else if (!strcmp(a, "--out") && runs) {
                o->out = v;
            } else if (!strcmp(a, "--trace") && what == OPTS_RUN) {
                o->trace = v;
            } else if (!strcmp(a, "--plots") && runs) {
                if ((o->plots.format = plot_format_parse(v)) < 0)
                    return die("--plots: expected png, svg, pdf or none");
            } else if (!strcmp(a, "--plot-window") && runs) {
                if (parse_num(a, v, 1, 1e6, &x)) return 2;
                o->plots.window = (int)x;
            } else if (!strcmp(a, "--workers") && runs) {
                if (parse_num(a, v, 0, 256, &x)) return 2;
                if (x != (int)x) return die("--workers: expected a whole number of processes");
                o->workers = (int)x;
            } else if (!strcmp(a, "--checkpoint-every") && runs) {
                if (parse_num(a, v, 0, 1e9, &x)) return 2;
                if (x != (int)x) return die("--checkpoint-every: expected a whole number");
                o->checkpoint_every = (int)x;
            } else if (!strcmp(a, "--checkpoint-minutes") && runs) {
                if (parse_num(a, v, 0, 1e9, &o->checkpoint_minutes)) return 2;
            } else if (!strcmp(a, "--job-timeout") && runs) {
                if (parse_num(a, v, 0, 1e9, &o->job_timeout)) return 2;
            } else if (!strcmp(a, "--target") && what == OPTS_SWEEP) {
                if (parse_num(a, v, 0, 1, &o->plots.target)) return 2;
            } else if (!strcmp(a, "--vary") && what == OPTS_SWEEP) {
                if (o->n_vary == MAX_VARY) return die("too many --vary options (8 at most)");
                if (!strchr(v, '=') || strchr(v, '=') == v)
                    return die("--vary: expected key=value1,value2,...");
                o->vary[o->n_vary++] = v;
            } else if (!strcmp(a, "--seed")) {
                char *end;
                o->seed = strtoull(v, &end, 10);
                if (*end || end == v) return die("--seed: expected a non-negative integer");
                o->have_seed = 1;
            } else {
                fprintf(stderr, "fedsim: %s is not an option of this command\n", a);
                return 2;
            }
        } else if (a[0] != '-' && !o->scenario) {
            o->scenario = a;
        } else {
            fprintf(stderr, "fedsim: unexpected argument '%s' (see fedsim help)\n", a);
            return 2;
        }
    }
    if (!o->scenario)
        return die(resume ? "which run? (fedsim resume RUN_DIR)"
                          : "which scenario? (fedsim run SCENARIO.yaml)");
    if (what == OPTS_SWEEP && !o->n_vary)
        return die("sweep: what to vary? (--vary key=value1,value2,...)");
    return 0;
}

/* Load with --seed and --cost-only folded in as --set overrides (o->sets has room for both). */
static int load_scenario(sim_scenario *sc, const run_opts *o, sim_err *err)
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
    return sim_scenario_load(sc, o->scenario, sets, n, err);
}

static int mkdirs(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

static void gnuplot_missing(void)
{
    fprintf(stderr, "fedsim: gnuplot is not on PATH, so no plots (apt-get install gnuplot-nox; "
                    "then fedsim plot RUN_DIR draws them)\n");
}

/* The signal that asked the run to stop (SIGINT, SIGTERM), 0 until one does. The only mutable
 * global: a signal handler can reach nothing else. The engine polls it at event boundaries through
 * spec.stop, writes a checkpoint and returns. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
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

/* Clients that train a wider model than their devices.capacity affords (a p-wide model costs
 * about p² of the full one; p counts NAME@p's width too). Capacities derived from a device's
 * memory and compute are left out: the engine already enforces those (memory fit, time). */
static int capacity_warning(const sim_scenario *sc, char *msg, size_t cap)
{
    const char *at = strchr(sc->model, '@');
    double pm = at ? strtod(at + 1, NULL) : 1, rmin = 1;
    int n = sc->part.n_clients, over = 0;
    for (int c = 0; c < n; c++) {
        if (sc->capacity_derived && !(sc->devices[c].capacity > 0)) continue;
        double p = sim_client_width(&sc->spec, c) * pm;
        if (p * p <= sc->capacity[c] * (1 + 1e-9)) continue;
        over++;
        rmin = fmin(rmin, sc->capacity[c]);
    }
    if (!over) return 0;
    double q = 1; /* the widest 1/2^k model such a client can afford */
    while (q * q > rmin * (1 + 1e-9) && q > 1.0 / 1024)
        q /= 2;
    snprintf(msg, cap,
             "%d of %d clients train a wider model than their devices.capacity r_i affords "
             "(width² ≤ r_i; r_i down to %.3g): %s does not narrow %s that far here. Every "
             "client can afford model: %.*s@%g",
             over, n, rmin, sc->spec.algo->name, sc->model,
             (int)(at ? (size_t)(at - sc->model) : strlen(sc->model)), sc->model, q);
    return 1;
}

/* The algorithm's warning and the capacity one, each on a line of its own. */
static void print_warnings(const sim_scenario *sc, FILE *f, const char *prefix)
{
    char warning[512];
    if (sc->spec.algo->warn && sc->spec.algo->warn(&sc->spec.env, warning, sizeof warning))
        fprintf(f, "%s%s\n", prefix, warning);
    if (capacity_warning(sc, warning, sizeof warning)) fprintf(f, "%s%s\n", prefix, warning);
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
    if (!loaded && load_scenario(&own, o, &err)) return print_err(&err);
    if (o->out)
        snprintf(out, out_size, "%s", o->out);
    else
        snprintf(out, out_size, "runs/%s-%llu", sc->name, (unsigned long long)sc->spec.seed);
    if (mkdirs(out)) {
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
        return print_err(&err);
    }
    /* a checkpoint is tied to the exact resolved text, which is what resume reloads */
    if (sim_checkpoint_hash_file(path, &sc->spec.scenario_hash, &err)) {
        sim_scenario_destroy(sc);
        return print_err(&err);
    }
    sc->spec.out_dir = out;
    sc->spec.quiet = o->quiet;
    sc->spec.workers = o->workers;
    sc->spec.job_timeout_s = o->job_timeout;
    sc->spec.resume = o->resume;
    sc->spec.checkpoint_every = o->checkpoint_every;
    sc->spec.checkpoint_wall_s = 60 * o->checkpoint_minutes;
    sc->spec.stop = &stop_signal;
    /* test hook: stop as if interrupted right after the checkpoint of this aggregation */
    const char *hook = getenv("FEDSIM_TEST_STOP_AFTER_CHECKPOINT");
    sc->spec.stop_after_round = hook ? atoi(hook) : 0;
    catch_stop_signals();
    if (o->ranks && o->ranks->open(o->ranks, sc, &err)) {
        sim_scenario_destroy(sc);
        return print_err(&err);
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
        if (!(gp = plot_open())) gnuplot_missing();
        plot_live_init(&live, gp, &o->plots, out);
        sc->spec.on_tick = plot_live_tick;
        sc->spec.tick_arg = &live;
    }
    print_warnings(sc, stderr, "fedsim: warning: ");
    sim_engine *e;
    if (sim_engine_new(&e, &sc->spec, &err)) {
        plot_close(gp);
        if (trace) fclose(trace);
        sim_scenario_destroy(sc);
        return print_err(&err);
    }
    if (!o->quiet)
        fprintf(stderr, "fedsim: %s%s: %d clients, %s, %s, %d %s; outputs in %s/\n",
                o->resume ? "resuming " : "", sc->name, sc->spec.n_clients, sc->model,
                sc->spec.algo->name, sc->spec.fed.rounds,
                sc->spec.fed.mode == SIM_SYNC ? "rounds" : "aggregations", out);
    int rc = sim_engine_run(e, &err);
    int sc_mode_sync = sc->spec.fed.mode == SIM_SYNC;
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
        print_err(&err);
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
                stop_signal == SIGTERM ? "stopped by SIGTERM"
                : stop_signal          ? "interrupted (SIGINT)"
                                       : "stopped by FEDSIM_TEST_STOP_AFTER_CHECKPOINT",
                sc_mode_sync ? "round" : "aggregation", t.round, ts, out, out);
        return stop_signal == SIGTERM ? 128 + SIGTERM : 128 + SIGINT;
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
    char ts[32], up[32], down[32];
    sim_format_time(ts, sizeof ts, t.now);
    sim_format_bytes(up, sizeof up, t.bytes_up);
    sim_format_bytes(down, sizeof down, t.bytes_down);
    printf("%s: %d %s in %s simulated; up %s, down %s; %ld jobs, %ld lost, %ld late, "
           "%ld clients excluded (memory); final %saccuracy %.4f\nmetrics: %s/metrics.tsv\n",
           out, t.round, sc_mode_sync ? "rounds" : "aggregations", ts, up, down, t.jobs, t.dropped,
           t.late, t.excluded, isnan(t.acc_global) ? "personalized " : "",
           isnan(t.acc_global) ? t.acc_pers : t.acc_global, out);
    if (gp && !plots_failed) {
        const char *x = plot_format_ext(o->plots.format);
        printf("plots: %s/acc_time.%s, acc_bytes.%s, timeline.%s\n", out, x, x, x);
    }
    fflush(stdout);
    return plots_failed ? 2 : 0; /* a plot asked for and not drawn is not a success */
}

/* run_body, then the rank hooks' close with its status. */
static int run_one(const run_opts *o, sim_scenario *loaded, char *out, size_t out_size)
{
    int rc = run_body(o, loaded, out, out_size);
    if (o->ranks) o->ranks->close(o->ranks, rc);
    return rc;
}

static int cmd_run(int argc, char **argv, rank_hooks *ranks)
{
    run_opts o;
    int rc = parse_run(&o, argc, argv, OPTS_RUN);
    if (rc) return rc;
    o.ranks = ranks;
    char out[1600];
    return run_one(&o, NULL, out, sizeof out);
}

/* fedsim resume RUN_DIR: the run continues from RUN_DIR/checkpoint.msgpack with RUN_DIR's
 * resolved scenario.yaml (no --set: a checkpoint belongs to exactly that text). */
/* The options of `resume RUN_DIR`: RUN_DIR's scenario.yaml (into scenario), its folder (dir). */
static int parse_resume(run_opts *o, int argc, char **argv, char dir[1024], char scenario[1100])
{
    int rc = parse_run(o, argc, argv, OPTS_RESUME);
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
    int rc = parse_resume(&o, argc, argv, dir, scenario);
    if (rc) return rc;
    o.ranks = ranks;
    char out[1600];
    return run_one(&o, NULL, out, sizeof out);
}

static int cmd_check(int argc, char **argv)
{
    run_opts o;
    int rc = parse_run(&o, argc, argv, OPTS_CHECK);
    if (rc) return rc;
    sim_err err = {0};
    sim_scenario sc;
    if (load_scenario(&sc, &o, &err)) return print_err(&err);
    if (sim_yaml_write(sc.doc, stdout, &err)) {
        sim_scenario_destroy(&sc);
        return print_err(&err);
    }
    /* predicted cost of one job of an average client, per device profile in the mix */
    nn_model m;
    nn_model_init(&m, &sc.arch, sc.cfg.batch_size);
    int n = sc.part.n_clients;
    double avg = 0;
    for (int c = 0; c < n; c++)
        avg += sc.part.n[c];
    avg /= n;
    int B = sc.cfg.batch_size, per_epoch = (int)ceil(avg / B);
    int steps = sc.cfg.local_steps > 0 ? sc.cfg.local_steps : sc.cfg.local_epochs * per_epoch;
    nn_cost step;
    nn_model_step_cost(&m, B, &step);
    double flops = step.flops * steps, act = step.bytes * steps,
           mem = (double)nn_model_memory_bytes(&m, B);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    nn_pack_params(&sb, &sc.arch, m.params);
    double msg = sim_message_bytes(&sc.spec, sb.size);
    msgpack_sbuffer_destroy(&sb);
    char ms[32], mm[32], ma[32];
    sim_format_bytes(ms, sizeof ms, msg);
    sim_format_bytes(mm, sizeof mm, mem);
    sim_format_bytes(ma, sizeof ma, act);
    printf("\n# model %s: %zu parameters; a job of %.0f samples (%d steps of %d) executes %.3g "
           "FLOPs and writes %s of activations; a dense message is %s; training needs %s\n",
           sc.model, sc.arch.layout.n_params, avg, steps, B, flops, ma, ms, mm);
    /* the clients' own splits: what they train on, are tested on and validate on, on average */
    double nt = 0, nv = 0;
    for (int c = 0; c < n; c++) {
        nt += sc.part.n_test ? sc.part.n_test[c] : 0;
        nv += sc.part.n_val ? sc.part.n_val[c] : 0;
    }
    printf("# a client's samples, on average: %.1f to train on, %.1f to test on (its local test "
           "split), %.1f to validate on\n",
           avg, nt / n, nv / n);
    /* what the clients' capacities make of the model, for algorithms that size it by client */
    double rlo = 1, rhi = 0, rsum = 0, wlo = 1, whi = 0, wsum = 0;
    for (int c = 0; c < n && sc.spec.algo->client_width; c++) {
        double r = sc.capacity[c], w = sc.spec.algo->client_width(&sc.spec.env, c);
        rlo = r < rlo ? r : rlo, rhi = r > rhi ? r : rhi, rsum += r;
        wlo = w < wlo ? w : wlo, whi = w > whi ? w : whi, wsum += w;
    }
    if (sc.spec.algo->client_width)
        printf("# capacity r_i: %.3g … %.3g, mean %.3g; models trained %.3g … %.3g wide, mean "
               "%.3g (a sparse one counts as √density wide)\n",
               rlo, rhi, rsum / n, wlo, whi, wsum / n);
    print_warnings(&sc, stdout, "# warning: ");
    /* Each device's row prices the average client's job as the algorithm prices its first
     * client on that device in round 1 (a cost-only job: the width, budget or masks it trains and
     * the messages it exchanges), the training scaled to the average client's samples. */
    fl_env env = sc.spec.env;
    env.cost_only = 1;
    sim_err aerr = {0};
    void *server = sc.spec.algo->server_new(&env, &aerr), *dense = NULL;
    if (server) dense = fl_dense->server_new(&env, &aerr);
    if (!dense) {
        if (server) sc.spec.algo->server_free(server);
        nn_model_destroy(&m);
        sim_scenario_destroy(&sc);
        return print_err(&aerr);
    }
    fl_worker wk;
    fl_worker_init(&wk);
    printf("# per device, the average client's job as the algorithm prices round 1's:\n");
    printf("# %-20s %8s %12s %12s %12s %12s %6s\n", "device", "clients", "download", "train",
           "upload", "job", "fits");
    for (int c = 0; c < n; c++) {
        const dev_profile *d = &sc.devices[c];
        int seen = 0;
        for (int k = 0; k < c && !seen; k++)
            seen = !strcmp(sc.devices[k].name, d->name);
        if (seen) continue;
        /* the client's job, and FedAvg's on the same samples: the ratio is what the algorithm
         * saves (or adds) in training */
        fl_job job = {
                c, 0, NULL, sc.spec.algo->job_down(server, c, 0, NULL), NULL, 0, (uint64_t)c << 32};
        fl_job ref = {c, 0, NULL, fl_dense->job_down(dense, c, 0, NULL), NULL, 0, job.stream};
        fl_result res, rd;
        fl_result_init(&res);
        fl_result_init(&rd);
        if (sc.spec.algo->client_train(&env, &job, &wk, &res, &aerr) ||
            fl_dense->client_train(&env, &ref, &wk, &rd, &aerr))
            rc = print_err(&aerr);
        double work = dev_work_flops(d, res.cost.flops, res.cost.flops_masked,
                                     res.cost.flops_masked_nnz),
               ratio = rd.cost.flops > 0 ? work / rd.cost.flops : 1,
               act_ratio = rd.cost.bytes > 0 ? res.cost.bytes / rd.cost.bytes : 1,
               step_ratio = rd.steps > 0 ? (double)res.steps / rd.steps : 1;
        double down_b = sim_message_bytes(&sc.spec, job.down_len),
               up_b = sim_message_bytes(&sc.spec, res.up_bytes);
        fl_result_destroy(&res);
        fl_result_destroy(&rd);
        if (rc) break;
        /* how many of its clients hold the model they train (their width's), as the run counts */
        int count = 0, fit = 0;
        double width = 1, need = mem;
        for (int k = 0; k < n; k++) {
            if (strcmp(sc.devices[k].name, d->name)) continue;
            double w = sim_client_width(&sc.spec, k);
            if (w != width) need = sim_width_memory(&sc.spec, width = w, &m);
            count++;
            fit += dev_fits(&sc.devices[k], need);
        }
        char fits[32] = "yes";
        if (fit < count) snprintf(fits, sizeof fits, fit ? "%d/%d" : "NO", fit, count);
        sim_time td = down_b > 0 ? dev_transfer_ns(d->latency_ns, down_b, d->down_bps) : 0;
        sim_time tt =
                dev_compute_ns(d, flops * ratio, 0, 0, act * act_ratio, steps * step_ratio, 0);
        sim_time tu = up_b > 0 ? dev_transfer_ns(d->latency_ns, up_b, d->up_bps) : 0;
        char a[32], b[32], cc[32], j[32];
        sim_format_time(a, sizeof a, td);
        sim_format_time(b, sizeof b, tt);
        sim_format_time(cc, sizeof cc, tu);
        sim_format_time(j, sizeof j, td + tt + tu);
        printf("# %-20s %8d %12s %12s %12s %12s %6s\n", d->name, count, a, b, cc, j, fits);
    }
    fl_worker_destroy(&wk);
    sc.spec.algo->server_free(server);
    fl_dense->server_free(dense);
    nn_model_destroy(&m);
    sim_scenario_destroy(&sc);
    return rc;
}

static int cmd_devices(int argc, char **argv)
{
    const char *path = sim_default_catalog();
    if (argc == 2 && !strcmp(argv[0], "--catalog"))
        path = argv[1];
    else if (argc)
        return die("usage: fedsim devices [--catalog FILE]");
    dev_catalog cat;
    sim_err err = {0};
    if (dev_catalog_load(&cat, path, &err)) return print_err(&err);
    printf("# %s\n", path);
    for (int i = 0; i < cat.n; i++) {
        char line[512];
        dev_profile_describe(&cat.profiles[i], line, sizeof line);
        printf("%-20s %s\n", cat.profiles[i].name, line);
    }
    dev_catalog_destroy(&cat);
    return 0;
}

static int cmd_events(int argc, char **argv)
{
    if (argc != 1) return die("usage: fedsim events RUN_DIR|events.msgpack");
    char path[1024];
    struct stat st;
    if (!stat(argv[0], &st) && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/events.msgpack", argv[0]);
    else
        snprintf(path, sizeof path, "%s", argv[0]);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fedsim: %s: cannot open: %s\n", path, strerror(errno));
        return 2;
    }
    sim_err err = {0};
    int rc = sim_events_list(f, path, stdout, &err);
    fclose(f);
    return rc ? print_err(&err) : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* plot, sweep */

/* Whether s[0..n) is "seed=" and digits: the seed item of a sweep point's name. */
static int is_seed_item(const char *s, size_t n)
{
    if (n <= 5 || strncmp(s, "seed=", 5)) return 0;
    for (size_t i = 5; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* The group a run folder belongs to: the runs whose paths differ only in their seed, named by
 * the path with the seed as *: a trailing -SEED (digits) as -* (runs/fedavg-*), or a sweep
 * point's seed=N item (fedsim sweep --vary seed=1,2,3) as seed=* (sweep/seed=*,algorithm.lr=0.1).
 * A folder with neither is a group of its own. */
static void group_of(char *out, size_t n, const char *dir)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    const char *b = dir;
    for (size_t i = 0; i < len; i++)
        if (dir[i] == '/') b = dir + i + 1;
    size_t bl = (size_t)(dir + len - b), e = bl;
    while (e > 0 && b[e - 1] >= '0' && b[e - 1] <= '9')
        e--;
    int dashed = e > 0 && e < bl && b[e - 1] == '-';
    size_t o = (size_t)snprintf(out, n, "%.*s", (int)(b - dir), dir);
    if (dashed) {
        snprintf(out + (o < n ? o : n), o < n ? n - o : 0, "%.*s*", (int)e, b);
        return;
    }
    for (size_t i = 0, j; i < bl && o < n; i = j + 1) {
        for (j = i; j < bl && b[j] != ',';)
            j++;
        int seed = is_seed_item(b + i, j - i);
        o += (size_t)snprintf(out + o, n - o, "%s%.*s", i ? "," : "", seed ? 6 : (int)(j - i),
                              seed ? "seed=*" : b + i);
    }
}

/* mean ± sample std (ddof 1) of v[0..n) into buf; "NA" for the std of one value, "x" for none. */
static void mean_std(char *buf, size_t size, const double *v, int n, int decimals)
{
    if (n == 0) {
        snprintf(buf, size, "x");
        return;
    }
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    double mean = s / n;
    for (int i = 0; i < n; i++)
        ss += (v[i] - mean) * (v[i] - mean);
    char m[32], d[32] = "NA";
    snprintf(m, sizeof m, "%.*f", decimals, mean);
    if (n > 1) snprintf(d, sizeof d, "%.*f", decimals, sqrt(ss / (n - 1)));
    snprintf(buf, size, "%s ± %s", m, d);
}

/* --acc global|personalized: what plot and summary judge a run by when it has both. */
static int parse_acc(const char *v, int *pers)
{
    if (!strcmp(v, "global") || !strcmp(v, "personalized")) {
        *pers = v[0] == 'p';
        return 0;
    }
    return die("--acc: expected global or personalized");
}

static int cmd_summary(int argc, char **argv)
{
    double target = 0.7;
    const char **dirs = sim_xcalloc((size_t)(argc > 0 ? argc : 1), sizeof *dirs);
    int n = 0, rc = 0, pers = 0;
    for (int i = 0; i < argc && !rc; i++) {
        if (!strcmp(argv[i], "--target") && i + 1 < argc)
            rc = parse_num(argv[i], argv[i + 1], 0, 1, &target) ? 2 : 0, i++;
        else if (!strcmp(argv[i], "--acc") && i + 1 < argc)
            rc = parse_acc(argv[++i], &pers);
        else if (argv[i][0] != '-')
            dirs[n++] = argv[i];
        else
            rc = die("fedsim summary: unexpected argument (see fedsim help)");
    }
    if (!rc && !n) rc = die("usage: fedsim summary RUN_DIR... [--target ACC] [--acc KIND]");
    /* rows: each run, and its base's (plot_metrics_load_runs), "RUN [base NAME]" */
    int cap = 2 * (n ? n : 1), *run = sim_xcalloc((size_t)cap, sizeof *run), rows = 0;
    plot_metrics *m = sim_xcalloc((size_t)cap, sizeof *m);
    char(*group)[300] = sim_xcalloc((size_t)cap, sizeof *group);
    char(*label)[1200] = sim_xcalloc((size_t)cap, sizeof *label);
    sim_err err = {0};
    if (!rc && plot_metrics_load_runs(m, run, &rows, dirs, n, pers, &err)) rc = print_err(&err);
    for (int i = 0; i < rows; i++) {
        char sfx[80] = "";
        if (m[i].is_base) snprintf(sfx, sizeof sfx, " [base %s]", m[i].base);
        group_of(group[i], sizeof group[i], dirs[run[i]]);
        size_t lg = strlen(group[i]);
        snprintf(group[i] + lg, sizeof group[i] - lg, "%s", sfx);
        snprintf(label[i], sizeof label[i], "%s%s", dirs[run[i]], sfx);
    }
    n = rows;
    if (!rc) {
        printf("# target accuracy %g; rounds = the first round whose evaluation reached it; "
               "accuracy: %s\n",
               target,
               pers ? "personalized mean where a run has it" : "global model where a run has it");
        int w = 24, gw = 24; /* the name columns fit the longest path and group */
        for (int r = 0; r < n; r++) {
            int l = (int)strlen(label[r]), lg = (int)strlen(group[r]);
            w = l > w ? l : w, gw = lg > gw ? lg : gw;
        }
        printf("%-*s %8s %8s %8s %14s %14s %14s %12s %10s %8s %9s\n", w, "run", "final", "best",
               "rounds", "time_s", "bytes", "bytes_total", "flops_total", "best_round", "at_val",
               "val_round");
        for (int r = 0; r < n; r++) {
            double best = NAN, best_round = NAN, rd, ts, bs; /* the first round at its best */
            for (int i = 0; i < m[r].n; i++)
                if (!(plot_metrics_acc(&m[r], i) <= best))
                    best = plot_metrics_acc(&m[r], i), best_round = m[r].round[i];
            int ok = plot_metrics_to_target(&m[r], target, &rd, &ts, &bs);
            char c1[32] = "x", c2[32] = "x", c3[32] = "x";
            if (ok) {
                snprintf(c1, sizeof c1, "%.0f", rd);
                snprintf(c2, sizeof c2, "%.3f", ts);
                snprintf(c3, sizeof c3, "%.0f", bs);
            }
            /* the accuracy at the evaluation with the best validation accuracy, and its round */
            int bv = plot_metrics_best_val(&m[r]);
            char c4[32] = "-", c5[32] = "-";
            if (bv >= 0) {
                snprintf(c4, sizeof c4, "%.4f", plot_metrics_acc(&m[r], bv));
                snprintf(c5, sizeof c5, "%.0f", m[r].round[bv]);
            }
            printf("%-*s %8.4f %8.4f %8s %14s %14s %14.0f %12.4g %10.0f %8s %9s\n", w, label[r],
                   m[r].n ? plot_metrics_acc(&m[r], m[r].n - 1) : NAN, best, c1, c2, c3,
                   m[r].n ? m[r].bytes[m[r].n - 1] : 0.0, m[r].n ? m[r].flops[m[r].n - 1] : 0.0,
                   best_round, c4, c5);
        }
        /* groups: runs whose folders differ only in their seed (group_of) */
        printf("\n%-*s %5s %22s %22s %22s %26s\n", gw, "group", "runs", "final", "rounds (reached)",
               "time_s", "bytes");
        double *fin = sim_xcalloc((size_t)n, sizeof(double)), *rds = sim_xcalloc((size_t)n, 8),
               *tss = sim_xcalloc((size_t)n, 8), *bss = sim_xcalloc((size_t)n, 8);
        for (int r = 0; r < n; r++) {
            int seen = 0;
            for (int q = 0; q < r; q++)
                seen |= !strcmp(group[q], group[r]);
            if (seen) continue;
            int k = 0, hit = 0;
            for (int q = r; q < n; q++) {
                if (strcmp(group[q], group[r])) continue;
                double rd, ts, bs;
                fin[k++] = m[q].n ? plot_metrics_acc(&m[q], m[q].n - 1) : NAN;
                if (plot_metrics_to_target(&m[q], target, &rd, &ts, &bs))
                    rds[hit] = rd, tss[hit] = ts, bss[hit++] = bs;
            }
            char a[48], b[48], b2[80], c[48], d[64];
            mean_std(a, sizeof a, fin, k, 4);
            mean_std(b, sizeof b, rds, hit, 1);
            snprintf(b2, sizeof b2, "%s (%d/%d)", b, hit, k);
            mean_std(c, sizeof c, tss, hit, 1);
            mean_std(d, sizeof d, bss, hit, 0);
            printf("%-*s %5d %22s %22s %22s %26s\n", gw, group[r], k, a, b2, c, d);
        }
        free(fin), free(rds), free(tss), free(bss);
    }
    for (int r = 0; r < n; r++)
        plot_metrics_destroy(&m[r]);
    free(m);
    free(group);
    free(label);
    free(run);
    free(dirs);
    return rc;
}

static int cmd_plot(int argc, char **argv)
{
    plot_opts po;
    plot_opts_default(&po);
    const char *out = NULL;
    const char **dirs = sim_xcalloc((size_t)(argc > 0 ? argc : 1), sizeof *dirs);
    int n = 0, rc = 0;
    double x;
    for (int i = 0; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--plot-logx")) {
            po.log_x = 1;
        } else if (!strcmp(a, "--out") && v) {
            out = v, i++;
        } else if (!strcmp(a, "--target") && v) {
            rc = parse_num(a, v, 0, 1, &po.target) ? 2 : 0, i++;
        } else if (!strcmp(a, "--acc") && v) {
            rc = parse_acc(v, &po.acc_pers), i++;
        } else if (!strcmp(a, "--plot-window") && v) {
            rc = parse_num(a, v, 1, 1e6, &x) ? 2 : 0, po.window = (int)x, i++;
        } else if (!strcmp(a, "--plots") && v) {
            if ((po.format = plot_format_parse(v)) <= 0)
                rc = die("--plots: expected png, svg or pdf");
            i++;
        } else if (a[0] != '-') {
            dirs[n++] = a;
        } else {
            fprintf(stderr, "fedsim plot: unexpected argument '%s' (see fedsim help)\n", a);
            rc = 2;
        }
    }
    if (!rc && !n) rc = die("usage: fedsim plot RUN_DIR... [--out DIR] [--target ACC]");
    plot_proc *gp = NULL;
    if (!rc && !(gp = plot_open())) {
        gnuplot_missing();
        rc = 2;
    }
    if (!out) out = n == 1 ? dirs[0] : "plots-out";
    if (!rc && mkdirs(out)) {
        fprintf(stderr, "fedsim: %s: cannot create: %s\n", out, strerror(errno));
        rc = 2;
    }
    sim_err err = {0};
    int figs = 0;
    if (!rc) {
        plot_remove(&po, out); /* what is there after gnuplot is what it drew */
        figs = n == 1 ? plot_run(gp, &po, dirs[0], out, &err)
                      : plot_overlay(gp, &po, out, n, dirs, NULL, &err);
        if (figs < 0) rc = print_err(&err);
    }
    if (plot_close(gp) && !rc) rc = die("gnuplot reported errors (above)");
    if (!rc && !figs)
        rc = die(n == 1 ? "nothing to plot: metrics.tsv has no accuracy and timeline.tsv no job"
                        : "nothing to plot: no run has an accuracy in its metrics.tsv");
    if (!rc && plot_check(&po, out, (unsigned)figs, &err)) rc = print_err(&err);
    if (!rc) printf("plots in %s/\n", out);
    free(dirs);
    return rc;
}

/* Split a --vary list at top-level commas (a value may be a YAML flow list or map). */
static int split_values(char *s, char **v, int max)
{
    int n = 0, depth = 0;
    v[n++] = s;
    for (char *p = s; *p; p++) {
        if (*p == '[' || *p == '{') depth++;
        if ((*p == ']' || *p == '}') && depth > 0) depth--;
        if (*p == ',' && !depth) {
            if (n == max) return -1;
            *p = 0;
            v[n++] = p + 1;
        }
    }
    return n;
}

enum { MAX_VALUES = 64 };

/* Whether the file at path holds exactly text[0..len). */
static int file_is(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char *buf = sim_xmalloc(len + 1);
    size_t n = fread(buf, 1, len + 1, f);
    fclose(f);
    int same = n == len && !memcmp(buf, text, len);
    free(buf);
    return same;
}

/* Whether the file at path has a second line (clients.tsv's rows follow its header). */
static int has_rows(const char *path)
{
    FILE *f = fopen(path, "rb");
    int lines = 0;
    for (int c; f && lines < 2 && (c = getc(f)) != EOF;)
        lines += c == '\n';
    if (f) fclose(f);
    return lines >= 2;
}

/* What a sweep run again (after a stop, or to add points) finds in a point's folder dir: this
 * point's run -- its scenario.yaml is the text sc resolved to -- finished (clients.tsv has rows,
 * engine.h) or unfinished (checkpoint.msgpack), or nothing of its own. A run from before a key
 * was added (its scenario.yaml lacks it) is this point's when that file, loaded now, holds the
 * same settings: a new key's default keeps what the code did without it. Resuming one keeps its
 * file, whose bytes its checkpoint names. */
enum { POINT_NEW, POINT_FINISHED, POINT_UNFINISHED };

static int point_state(const sim_scenario *sc, const char *dir, int *state)
{
    *state = POINT_NEW;
    sim_err err = {0};
    char *text = NULL, path[1700], ckpt[1700], clients[1700];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return die("sweep: out of memory");
    int rc = sim_yaml_write(sc->doc, f, &err);
    fclose(f);
    snprintf(path, sizeof path, "%s/scenario.yaml", dir);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.msgpack", dir);
    snprintf(clients, sizeof clients, "%s/clients.tsv", dir);
    int ckpt_there = access(ckpt, F_OK) == 0, done = !ckpt_there && has_rows(clients);
    int same = !rc && file_is(path, text, len);
    if (!rc && !same && (ckpt_there || done)) {
        /* written before a key was added: the keys it lacks take their defaults, last in their
         * maps, and its checkpoint (tied to the file's bytes) still resumes it */
        sim_scenario old;
        sim_err ignored = {0};
        if (!sim_scenario_load(&old, path, NULL, 0, &ignored)) {
            same = sim_yaml_same(old.doc, sc->doc);
            sim_scenario_destroy(&old);
        }
    }
    if (same && ckpt_there)
        *state = POINT_UNFINISHED;
    else if (same && done)
        *state = POINT_FINISHED;
    free(text);
    return rc ? print_err(&err) : 0;
}

static int cmd_sweep(int argc, char **argv)
{
    run_opts o;
    int rc = parse_run(&o, argc, argv, OPTS_SWEEP);
    if (rc) return rc;
    if (o.n_sets + o.n_vary > MAX_SETS - 2) return die("too many --set and --vary options");
    /* the grid: key k takes values val[k][0..nval[k]) */
    char *keys[MAX_VARY], *copy[MAX_VARY], *val[MAX_VARY][MAX_VALUES];
    int nval[MAX_VARY];
    long points = 1;
    for (int k = 0; k < o.n_vary; k++) {
        for (const char *c = o.vary[k]; *c && !rc; c++) /* checked before any point runs */
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                rc = die("--vary: a control character in a value (a point's key=value names its "
                         "folder and its row of summary.tsv)");
        copy[k] = sim_xstrdup(o.vary[k]);
        char *eq = strchr(copy[k], '=');
        *eq = 0;
        keys[k] = copy[k];
        nval[k] = split_values(eq + 1, val[k], MAX_VALUES);
        if (nval[k] < 0 && !rc) rc = die("--vary: 64 values per key at most");
        points *= nval[k] > 0 ? nval[k] : 1;
    }
    if (!rc && points > 1000) rc = die("sweep: more than 1000 grid points");
    char dir[1024];
    if (o.out) {
        snprintf(dir, sizeof dir, "%s", o.out);
    } else {
        const char *b = strrchr(o.scenario, '/');
        b = b ? b + 1 : o.scenario;
        snprintf(dir, sizeof dir, "runs/sweep-%.*s", (int)strcspn(b, "."), b);
        /* the stem as a run's default name takes it: what a name cannot hold becomes '_' */
        for (char *c = dir + strlen("runs/sweep-"); *c; c++)
            if (sim_name_problem((char[]){*c, 0}, 1)) *c = '_';
    }
    if (!rc && mkdirs(dir)) {
        fprintf(stderr, "fedsim: %s: cannot create: %s\n", dir, strerror(errno));
        rc = 2;
    }
    char(*label)[512] = sim_xcalloc((size_t)points, sizeof *label);
    char(*run_dir)[1600] = sim_xcalloc((size_t)points, sizeof *run_dir);
    char(*set)[MAX_VARY][1024] = sim_xcalloc((size_t)points, sizeof *set);
    for (long p = 0; p < points && !rc; p++) {
        run_opts po = o;
        po.out = NULL;
        long rest = p;
        for (int k = o.n_vary - 1; k >= 0; k--) { /* the last --vary changes fastest */
            int i = (int)(rest % nval[k]);
            rest /= nval[k];
            snprintf(set[p][k], sizeof set[p][k], "%s=%s", keys[k], val[k][i]);
        }
        for (int k = 0; k < o.n_vary; k++) {
            po.sets[po.n_sets++] = set[p][k];
            size_t len = strlen(label[p]);
            snprintf(label[p] + len, sizeof label[p] - len, "%s%s", k ? "," : "", set[p][k]);
        }
        /* the folder: the label, with no '/' (a value may be a path) */
        char name[512];
        snprintf(name, sizeof name, "%s", label[p]);
        for (char *c = name; *c; c++)
            if (*c == '/') *c = '_';
        snprintf(run_dir[p], sizeof run_dir[p], "%s/%s", dir, name);
        po.out = run_dir[p];
        /* loaded once: for the point's state, then for its run */
        sim_scenario sc;
        sim_err err = {0};
        int state;
        if (load_scenario(&sc, &po, &err)) {
            rc = print_err(&err);
            break;
        }
        if ((rc = point_state(&sc, run_dir[p], &state))) {
            sim_scenario_destroy(&sc);
            break;
        }
        static const char *const how[] = {"", " (finished before: kept)", " (resuming)"};
        if (!o.quiet)
            fprintf(stderr, "fedsim: sweep point %ld/%ld: %s%s\n", p + 1, points, label[p],
                    how[state]);
        if (state == POINT_FINISHED) {
            sim_scenario_destroy(&sc);
            continue;
        }
        /* resumed from its checkpoint, whose scenario.yaml holds these settings */
        po.resume = state == POINT_UNFINISHED;
        char out[1600];
        rc = run_one(&po, &sc, out, sizeof out);
    }
    if (rc == 128 + SIGINT || rc == 128 + SIGTERM)
        fprintf(stderr, "fedsim: the same sweep command continues the sweep\n");
    /* summary.tsv: one row per point */
    char path[1200];
    snprintf(path, sizeof path, "%s/summary.tsv", dir);
    char *summary = NULL; /* made in memory, then written whole (sim_write_file) */
    size_t summary_len = 0;
    FILE *f = !rc ? open_memstream(&summary, &summary_len) : NULL;
    if (!rc && !f) {
        fprintf(stderr, "fedsim: %s: cannot write: %s\n", path, strerror(errno));
        rc = 2;
    }
    if (f) {
        fprintf(f, "# fedsim sweep %s: target accuracy %g\n", o.scenario, o.plots.target);
        fprintf(f, "point\tfinal_acc\ttime_to_target_s\tbytes_to_target\tdropped\n");
        printf("\n%-40s %9s %14s %14s %8s\n", "point", "final_acc", "time_to_target",
               "bytes_to_target", "dropped");
    }
    for (long p = 0; p < points && f && !rc; p++) {
        plot_metrics m;
        sim_err err = {0};
        if (plot_metrics_load(&m, run_dir[p], &err)) {
            rc = print_err(&err);
            break;
        }
        double acc = m.n ? plot_metrics_acc(&m, m.n - 1) : NAN, ts, bs;
        double dropped = m.n ? m.dropped[m.n - 1] : 0;
        int ok = plot_metrics_to_target(&m, o.plots.target, NULL, &ts, &bs);
        char tcell[32] = "not reached", bcell[32] = "not reached";
        if (ok) {
            sim_format_time(tcell, sizeof tcell, (sim_time)(ts * 1e9));
            sim_format_bytes(bcell, sizeof bcell, bs);
            fprintf(f, "%s\t%.6f\t%.9f\t%.0f\t%.0f\n", label[p], acc, ts, bs, dropped);
        } else {
            fprintf(f, "%s\t%.6f\tNA\tNA\t%.0f\n", label[p], acc, dropped);
        }
        printf("%-40s %9.4f %14s %14s %8.0f\n", label[p], acc, tcell, bcell, dropped);
        plot_metrics_destroy(&m);
    }
    if (f && fclose(f) && !rc) {
        fprintf(stderr, "fedsim: %s: cannot write: %s\n", path, strerror(errno));
        rc = 2;
    }
    sim_err werr = {0};
    if (f && !rc && sim_write_file(path, summary, summary_len, &werr)) rc = print_err(&werr);
    free(summary);
    if (!rc) printf("summary: %s\n", path);
    /* overlay plots of every point */
    if (!rc && o.plots.format != PLOT_NONE) {
        plot_proc *gp = plot_open();
        const char **dirs = sim_xcalloc((size_t)points, sizeof *dirs);
        const char **names = sim_xcalloc((size_t)points, sizeof *names);
        for (long p = 0; p < points; p++)
            dirs[p] = run_dir[p], names[p] = label[p];
        sim_err err = {0};
        if (!gp)
            gnuplot_missing();
        else if (plot_overlay(gp, &o.plots, dir, (int)points, dirs, names, &err) < 0)
            rc = print_err(&err);
        if (gp && plot_close(gp) && !rc)
            rc = die("gnuplot reported errors (above)");
        else if (gp && !rc) {
            const char *x = plot_format_ext(o.plots.format);
            printf("plots: %s/acc_time.%s, acc_bytes.%s, to_target.%s\n", dir, x, x, x);
        }
        free(dirs);
        free(names);
    }
    for (int k = 0; k < o.n_vary; k++)
        free(copy[k]);
    free(label);
    free(run_dir);
    free(set);
    return rc;
}

/* The command line of one process; ranks: MPI worker ranks for run and resume, or NULL. */
static int cli(int argc, char **argv, rank_hooks *ranks)
{
    int help = argc >= 2 && !strcmp(argv[1], "help");
    for (int i = 1; i < argc; i++) /* `fedsim sweep --help` asks for the same text */
        help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (argc < 2 || help) {
        FILE *f = argc < 2 ? stderr : stdout;
        fputs(usage, f);
        fprintf(f, "                     In use here: %s.\n", sim_blas_corename());
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "run")) return cmd_run(argc - 2, argv + 2, ranks);
    if (!strcmp(argv[1], "resume")) return cmd_resume(argc - 2, argv + 2, ranks);
    if (!strcmp(argv[1], "check")) return cmd_check(argc - 2, argv + 2);
    if (!strcmp(argv[1], "sweep")) return cmd_sweep(argc - 2, argv + 2);
    if (!strcmp(argv[1], "plot")) return cmd_plot(argc - 2, argv + 2);
    if (!strcmp(argv[1], "summary")) return cmd_summary(argc - 2, argv + 2);
    if (!strcmp(argv[1], "devices")) return cmd_devices(argc - 2, argv + 2);
    if (!strcmp(argv[1], "calibrate")) return cmd_calibrate(argc - 2, argv + 2);
    if (!strcmp(argv[1], "events")) return cmd_events(argc - 2, argv + 2);
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
    fprintf(stderr, "fedsim: unknown command '%s' (see fedsim help)\n", argv[1]);
    return 2;
}

/* ---------------------------------------------------------------------------------------- */
/* MPI: fedsim-mpi under mpirun or srun (sim/mpi.h) */
#ifdef FEDSIM_MPI

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
    if (!rc) rc = sim_mpi_open(&st->m, &st->link, text, env, &stop_signal, err);
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
    run_opts o;
    char dir[1024], scenario[1100];
    int rc = !strcmp(argv[1], "resume") ? parse_resume(&o, argc - 2, argv + 2, dir, scenario)
                                        : parse_run(&o, argc - 2, argv + 2, OPTS_RUN);
    if (rc) return rc; /* the coordinator parses the same options and fails the same way */
    sim_err err = {0};
    sim_scenario sc;
    uint64_t text = 0, env = 0;
    int load = load_scenario(&sc, &o, &err);
    if (!load && (load = sim_scenario_digest(&sc, &text, &env, &err))) sim_scenario_destroy(&sc);
    rc = sim_mpi_serve(load ? NULL : sc.spec.algo, load ? NULL : &sc.spec.env, text, env, load,
                       &err);
    if (!load) sim_scenario_destroy(&sc);
    return rc;
}

/* Rank 0 is fedsim; under mpirun with N > 1 ranks, ranks 1..N-1 are its workers for run and
 * resume. A single rank (no mpirun, or -np 1) is plain fedsim with forked workers. */
static int mpi_main(int argc, char **argv)
{
    int rank = 0, size = 1;
    if (sim_mpi_init(&argc, &argv, &rank, &size)) return 2;
    int rc;
    if (size == 1) {
        rc = cli(argc, argv, NULL);
    } else if (argc < 2 || (strcmp(argv[1], "run") && strcmp(argv[1], "resume"))) {
        rc = rank ? 0
                  : die("under mpirun only run and resume use the ranks; run other commands "
                        "without mpirun");
    } else if (rank > 0) {
        rc = serve_rank(argc, argv);
    } else {
        rank_state st = {0};
        rank_hooks h = {ranks_open, ranks_close, &st};
        rc = cli(argc, argv, &h);
        ranks_close(&h, 0); /* a run that failed before open: the workers still wait */
    }
    sim_mpi_finalize(0);
    return rc;
}
#endif

/* What a command printed (a listing redirected to a file) is output too: a failed write to it
 * fails the command. stdio keeps only that one failed, so the reason is known only when the last
 * flush is the one that fails. */
static int stdout_checked(int rc)
{
    errno = 0;
    if (!fflush(stdout) && !ferror(stdout)) return rc;
    fprintf(stderr, "fedsim: standard output: cannot write: %s\n",
            errno ? strerror(errno) : "an earlier write failed");
    return rc ? rc : 2;
}

int main(int argc, char **argv)
{
    sim_blas_kernels(argv); /* may start fedsim again, on faster kernels: before anything else */
    /* One BLAS thread before anything can call BLAS: results must not depend on a thread count,
     * and the run's training workers are forked processes, which inherit this setting (threads do
     * not survive fork). `fedsim train --threads` raises it for itself. */
    openblas_set_num_threads(1);
#ifdef FEDSIM_MPI
    return stdout_checked(mpi_main(argc, argv));
#else
    return stdout_checked(cli(argc, argv, NULL));
#endif
}
