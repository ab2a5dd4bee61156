/* sim/cmd_calibrate.c -- `fedsim calibrate`: this machine's seconds per SGD step against the
 * FLOPs and activation bytes the cost model counts, fitted to a device profile's compute,
 * mem_bandwidth and step_overhead.
 */
#include "devices/profile.h"
#include "nn/train.h"
#include "sim/blas.h"
#include "sim/cmd.h"
#include "sim/rng.h"
#include "sim/units.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if (sim_cli_next_option("calibrate", argc, argv, &i, key, &k, &v)) return -1;
        double x;
        int rc = 0;
        if (!strcmp(k, "--model"))
            o->t.model = v;
        else if (!strcmp(k, "--data"))
            o->t.data = v;
        else if (!strcmp(k, "--data-dir"))
            o->t.data_dir = v;
        else if (!strcmp(k, "--batch"))
            rc = sim_cli_parse_num(k, v, 1, 65536, &x), o->t.batch = (int)x;
        else if (!strcmp(k, "--widths"))
            rc = parse_widths(o, v);
        else if (!strcmp(k, "--seconds"))
            rc = sim_cli_parse_num(k, v, 0.001, 3600, &o->seconds);
        else {
            fprintf(stderr, "fedsim calibrate: unknown option '%s'\n", k);
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
        double t0 = sim_cli_now_s(), t;
        long steps = 0;
        do {
            int B = nn_batcher_next(b);
            if (!B) B = nn_batcher_next(b); /* an epoch ended */
            nn_model_train_step(m, opt, b->x, b->y, B);
            steps++;
        } while ((t = sim_cli_now_s() - t0) < secs);
        if (rep > 0 && t / (double)steps < best) best = t / (double)steps;
    }
    return best;
}

static int cmd_calibrate(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    cal_opts o;
    if (parse_calibrate(&o, argc, argv)) return SIM_CLI_BAD_ARGS;
    openblas_set_num_threads(1); /* as a worker trains */
    nn_dataset train, test;
    nn_arch arch;
    if (sim_cli_load_model_data(&o.t, &train, &test, &arch)) return 2;
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
        sim_cli_make_model(&m, &arch, &o.t, B, o.widths[i]);
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

static const char calibrate_usage[] =
        "usage: fedsim calibrate [--model NAME] [--data NAME] [--data-dir DIR] [--batch N]\n"
        "                        [--widths P,P,...] [--seconds S]\n"
        "\n"
        "Time SGD steps of the model at each width on this machine (one BLAS thread, as a\n"
        "worker; the best of 3 runs of S seconds [1] each) and fit the device cost model\n"
        "to them: compute (FLOP/s), mem_bandwidth (for the activation bytes a step\n"
        "writes) and step_overhead (time a step takes beyond both), with each width's\n"
        "error, and the errors of FLOPs alone and of the fit without mem_bandwidth\n"
        "[pa3dfl-cnn, fashion-mnist, batch 50, widths 1,0.5,0.25,0.125,0.0625].\n"
        "Options are --option VALUE or --option=VALUE; --model, --data and --data-dir\n"
        "as fedsim train's; --widths: up to 16, each in (0, 1].\n";

const sim_command sim_cmd_calibrate = {
        .name = "calibrate",
        .summary = "fit this machine's time per SGD step to a device profile's compute terms",
        .usage = calibrate_usage,
        .fn = cmd_calibrate,
};
