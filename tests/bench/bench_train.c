/* tests/bench/bench_train.c -- `make bench`: training throughput of fedsim's nn/ on one thread.
 *
 * For mlp 784-200-200-10, cnn2 and lenet5-caffe at batch 10, 32 and 64 on Fashion-MNIST (and
 * pa3dfl-cnn at batch 50, the width-fmnist campaigns' model and batch) it times
 * full SGD steps (gather, forward, backward, update) and reports samples/s and the GFLOP/s
 * achieved, next to the sgemm peak measured in the same run; width-0.5 cnn2 shows what structured
 * narrowing saves, and the LEAF CNN at batch 128 with element masks that keep the first 40% of
 * each weight tensor (pFedGate's block masks at s = 0.5) what skipping dropped rows saves. When
 * Debian's python3-torch is installed, the same models and batches run in
 * PyTorch (tests/bench/torch_train.py, one thread, kept running beside this process) and the table
 * gets the fedsim/PyTorch ratio. This machine is a shared VM whose speed drifts, so every row
 * alternates fedsim and PyTorch runs REPS times and keeps each side's best. GFLOP/s counts the
 * FLOPs fedsim charges a device (direct convolution); its Winograd convs execute fewer, so the
 * %peak of a CNN can pass what its GEMMs alone would reach. Timings only: nothing here passes or
 * fails.
 */
#include "nn/data.h"
#include "nn/model.h"
#include "nn/train.h"
#include "sim/blas.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECONDS 1.0
#define REPS    3

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best-of sgemm rate at a square size large enough to reach the kernel's peak. */
static double sgemm_peak(void)
{
    int n = 1024;
    float *a = calloc((size_t)n * n, 4), *b = calloc((size_t)n * n, 4),
          *c = calloc((size_t)n * n, 4);
    for (size_t i = 0; i < (size_t)n * n; i++)
        a[i] = b[i] = (float)(i % 7) * 0.1f;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        t = now_s() - t;
        double g = 2.0 * n * n * n / t * 1e-9;
        if (g > best) best = g;
    }
    free(a), free(b), free(c);
    return best;
}

/* The PyTorch side: a child process answering "model batch seconds" with samples/s. */
typedef struct torch_peer {
    FILE *to, *from;
    pid_t pid;
} torch_peer;

static int torch_start(torch_peer *t, const char *dir)
{
    memset(t, 0, sizeof *t);
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) return -1;
    int in[2], out[2];
    if (pipe(in) || pipe(out)) return -1;
    t->pid = fork();
    if (t->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl("/usr/bin/python3", "python3", "tests/bench/torch_train.py", dir, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    t->to = fdopen(in[1], "w");
    t->from = fdopen(out[0], "r");
    char line[64];
    if (!fgets(line, sizeof line, t->from) || strncmp(line, "ready", 5)) return -1;
    return 0;
}

static double torch_run(torch_peer *t, const char *model, int batch)
{
    double sps = 0;
    fprintf(t->to, "%s %d %g\n", model, batch, SECONDS);
    fflush(t->to);
    if (fscanf(t->from, "%lf", &sps) != 1) return 0;
    return sps;
}

static void torch_stop(torch_peer *t)
{
    if (!t->to) return;
    fclose(t->to);
    fclose(t->from);
    waitpid(t->pid, NULL, 0);
}

typedef struct result {
    const char *model, *arch;
    double width, keep; /* keep < 1: element masks keep that leading share of each weight */
    int batch;
    double sps, gflops, torch;
} result;

static void bench_once(result *r, const nn_dataset *train)
{
    nn_arch a;
    sim_err err;
    if (nn_arch_build(&a, r->arch, train->c, train->h, train->w, train->classes, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        exit(1);
    }
    nn_model m;
    nn_model_init(&m, &a, r->batch);
    sim_rng rng;
    sim_rng_seed(&rng, 1, SIM_RNG_INIT_WEIGHTS, 0);
    nn_model_init_params(&m, &rng);
    if (r->width < 1) nn_model_set_width(&m, r->width, 0);
    uint8_t *masks[NN_MAX_TENSORS] = {0};
    for (int i = 0; r->keep < 1 && i < a.n; i++) {
        if (a.l[i].op != NN_CONV && a.l[i].op != NN_LINEAR) continue;
        const nn_tensor *t = &a.layout.t[a.l[i].wt];
        size_t n = (size_t)t->rows * t->cols;
        masks[a.l[i].wt] = calloc(n, 1);
        memset(masks[a.l[i].wt], 1, (size_t)(r->keep * (double)n));
    }
    if (r->keep < 1) nn_model_set_masks(&m, (const uint8_t *const *)masks);
    sim_rng_seed(&rng, 1, SIM_RNG_BATCHES, 0);
    nn_batcher b;
    nn_batcher_init(&b, train, NULL, train->n, r->batch, 1, &rng);
    nn_sgd opt = {0.01f, 0.9f, 0, 0};
    for (int i = 0; i < 20; i++) { /* warm-up */
        int B = nn_batcher_next(&b);
        if (!B) B = nn_batcher_next(&b);
        nn_model_train_step(&m, &opt, b.x, b.y, B);
    }
    m.cost.flops = 0;
    long samples = 0;
    double t0 = now_s(), t;
    while ((t = now_s()) - t0 < SECONDS) {
        int B = nn_batcher_next(&b);
        if (!B) B = nn_batcher_next(&b);
        nn_model_train_step(&m, &opt, b.x, b.y, B);
        samples += B;
    }
    double sps = (double)samples / (t - t0);
    if (sps > r->sps) {
        r->sps = sps;
        r->gflops = m.cost.flops / (t - t0) * 1e-9;
    }
    nn_batcher_destroy(&b);
    nn_model_destroy(&m);
    for (int ti = 0; ti < NN_MAX_TENSORS; ti++)
        free(masks[ti]);
}

/* The row of model at batch (the ratios below name their rows: rows get added). */
static const result *row(const result *rs, int n, const char *model, int batch)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(rs[i].model, model) && rs[i].batch == batch) return &rs[i];
    fprintf(stderr, "bench: no row %s at batch %d\n", model, batch);
    exit(1);
}

int main(int argc, char **argv)
{
    (void)argc;
    sim_blas_kernels(argv); /* the kernels fedsim runs on */
    openblas_set_num_threads(1);
    const char *dir = "/usr/share/datasets/fashion-mnist";
    nn_dataset train = {0}, test = {0};
    sim_err err;
    if (nn_fmnist_load(&train, &test, dir, &err)) {
        fprintf(stderr, "bench: %s: %s\n", err.file, err.msg);
        return 1;
    }
    torch_peer tp;
    int have_torch = torch_start(&tp, dir) == 0;
    if (!have_torch)
        printf("PyTorch not found: apt-get install python3-torch to get the ratio column\n");
    double peak = sgemm_peak();
    printf("sgemm peak (1024^3, one thread, OpenBLAS's %s kernels): %.1f GFLOP/s; best of %d "
           "alternating %gs runs\n",
           sim_blas_corename(), peak, REPS, SECONDS);
    printf("GFLOP/s: the FLOPs a device is charged (direct convolution; Winograd convs run "
           "fewer)\n\n");
    result rs[] = {
            {"mlp", "mlp:784-200-200-10", 1, 1, 10, 0, 0, 0},
            {"mlp", "mlp:784-200-200-10", 1, 1, 32, 0, 0, 0},
            {"mlp", "mlp:784-200-200-10", 1, 1, 64, 0, 0, 0},
            {"cnn2", "cnn2", 1, 1, 10, 0, 0, 0},
            {"cnn2", "cnn2", 1, 1, 32, 0, 0, 0},
            {"cnn2", "cnn2", 1, 1, 64, 0, 0, 0},
            {"pa3dfl-cnn", "pa3dfl-cnn", 1, 1, 50, 0, 0, 0}, /* Pa3dFL's Table 1 protocol */
            {"lenet5-caffe", "lenet5-caffe", 1, 1, 10, 0, 0, 0},
            {"lenet5-caffe", "lenet5-caffe", 1, 1, 32, 0, 0, 0},
            {"lenet5-caffe", "lenet5-caffe", 1, 1, 64, 0, 0, 0},
            {"cnn2@0.5", "cnn2", 0.5, 1, 10, 0, 0, 0},
            {"cnn2@0.5", "cnn2", 0.5, 1, 64, 0, 0, 0},
            {"cnn2@0.125", "cnn2", 0.125, 1, 64, 0, 0, 0}, /* 4 input channels in conv2 */
            {"leaf-cnn", "leaf-cnn", 1, 1, 128, 0, 0, 0},
            {"leaf-cnn/40%", "leaf-cnn", 1, 0.4, 128, 0, 0, 0},
    };
    int n = (int)(sizeof rs / sizeof rs[0]);
    printf("%-14s %5s %12s %8s %7s %12s %8s\n", "model", "batch", "samples/s", "GFLOP/s", "%peak",
           "torch s/s", "ratio");
    for (int i = 0; i < n; i++) {
        for (int rep = 0; rep < REPS; rep++) {
            bench_once(&rs[i], &train);
            if (have_torch && strncmp(rs[i].model, "leaf", 4)) { /* torch_train.py lacks it */
                double s = torch_run(&tp, rs[i].model, rs[i].batch);
                if (s > rs[i].torch) rs[i].torch = s;
            }
        }
        printf("%-14s %5d %12.0f %8.1f %6.0f%% ", rs[i].model, rs[i].batch, rs[i].sps, rs[i].gflops,
               100 * rs[i].gflops / peak);
        if (rs[i].torch > 0)
            printf("%12.0f %8.2f\n", rs[i].torch, rs[i].sps / rs[i].torch);
        else
            printf("%12s %8s\n", "-", "-");
        fflush(stdout);
    }
    for (int bi = 0; bi < 2; bi++) {
        int batch = bi ? 64 : 10;
        const result *full = row(rs, n, "cnn2", batch), *half = row(rs, n, "cnn2@0.5", batch);
        printf("cnn2 width 0.5 vs 1.0 at batch %d: %.2fx samples/s\n", batch,
               half->sps / full->sps);
    }
    printf("leaf-cnn, 40%% of each weight tensor kept vs dense at batch 128: %.2fx samples/s\n",
           row(rs, n, "leaf-cnn/40%", 128)->sps / row(rs, n, "leaf-cnn", 128)->sps);
    torch_stop(&tp);
    nn_dataset_destroy(&train);
    nn_dataset_destroy(&test);
    return 0;
}
