/* tests/bench/bench_train.c -- `make bench`: training throughput of fedsim's nn/ on one thread.
 *
 * For mlp 784-200-200-10, cnn2 and lenet5-caffe at batch 10, 32 and 64 on Fashion-MNIST it times
 * full SGD steps (gather, forward, backward, update) for a fixed wall time each, reports samples/s
 * and the GFLOP/s achieved, next to the sgemm peak measured in the same run; width-0.5 cnn2 shows
 * what structured narrowing saves. When Debian's python3-torch is installed, the same models and
 * batches run in PyTorch (tests/bench/torch_train.py) and the table gets the fedsim/PyTorch ratio.
 * Timings only: nothing here passes or fails.
 */
#include "nn/data.h"
#include "nn/model.h"
#include "nn/train.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SECONDS 2.0

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
    float *a = calloc((size_t)n * n, 4), *b = calloc((size_t)n * n, 4), *c = calloc((size_t)n * n, 4);
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

typedef struct result {
    const char *model;
    int batch;
    double sps, gflops, torch;
} result;

static void bench(result *r, const nn_dataset *train, const char *model, double width, int batch)
{
    nn_arch a;
    sim_err err;
    if (nn_arch_build(&a, model, train->c, train->h, train->w, train->classes, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        exit(1);
    }
    nn_model m;
    nn_model_init(&m, &a, batch);
    sim_rng rng;
    sim_rng_seed(&rng, 1, SIM_RNG_INIT_WEIGHTS, 0);
    nn_model_init_params(&m, &rng);
    if (width < 1) nn_model_set_width(&m, width, 0);
    sim_rng_seed(&rng, 1, SIM_RNG_BATCHES, 0);
    nn_batcher b;
    nn_batcher_init(&b, train, NULL, train->n, batch, 1, &rng);
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
    r->sps = (double)samples / (t - t0);
    r->gflops = m.cost.flops / (t - t0) * 1e-9;
    nn_batcher_destroy(&b);
    nn_model_destroy(&m);
}

/* Run the PyTorch reference for every row; leaves torch = 0 when it is not installed. */
static void bench_torch(result *rs, int n, const char *dir)
{
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        printf("PyTorch not installed: apt-get install python3-torch to get the ratio column\n");
        return;
    }
    char cmd[4096];
    int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/bench/torch_train.py %s %g", dir,
                       SECONDS);
    for (int i = 0; i < n; i++)
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %s:%d", rs[i].model, rs[i].batch);
    FILE *p = popen(cmd, "r");
    char name[64];
    int batch;
    double sps;
    while (p && fscanf(p, "%63s %d %lf", name, &batch, &sps) == 3)
        for (int i = 0; i < n; i++)
            if (!strcmp(rs[i].model, name) && rs[i].batch == batch) rs[i].torch = sps;
    if (p) pclose(p);
}

int main(void)
{
    openblas_set_num_threads(1);
    const char *dir = "/usr/share/datasets/fashion-mnist";
    nn_dataset train = {0}, test = {0};
    sim_err err;
    if (nn_fmnist_load(&train, &test, dir, &err)) {
        fprintf(stderr, "bench: %s: %s\n", err.file, err.msg);
        return 1;
    }
    double peak = sgemm_peak();
    printf("sgemm peak (1024^3, one thread): %.1f GFLOP/s\n\n", peak);
    static const char *models[] = {"mlp", "cnn2", "lenet5-caffe"};
    static const char *archs[] = {"mlp:784-200-200-10", "cnn2", "lenet5-caffe"};
    static const int batches[] = {10, 32, 64};
    result rs[11];
    int n = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int bi = 0; bi < 3; bi++) {
            rs[n] = (result){models[mi], batches[bi], 0, 0, 0};
            bench(&rs[n], &train, archs[mi], 1.0, batches[bi]);
            n++;
        }
    for (int bi = 0; bi < 3; bi += 2) {
        rs[n] = (result){"cnn2@0.5", batches[bi], 0, 0, 0};
        bench(&rs[n], &train, "cnn2", 0.5, batches[bi]);
        n++;
    }
    bench_torch(rs, n, dir);
    printf("%-14s %5s %12s %8s %7s %12s %8s\n", "model", "batch", "samples/s", "GFLOP/s",
           "%peak", "torch s/s", "ratio");
    for (int i = 0; i < n; i++) {
        printf("%-14s %5d %12.0f %8.1f %6.0f%% ", rs[i].model, rs[i].batch, rs[i].sps,
               rs[i].gflops, 100 * rs[i].gflops / peak);
        if (rs[i].torch > 0)
            printf("%12.0f %8.2f\n", rs[i].torch, rs[i].sps / rs[i].torch);
        else
            printf("%12s %8s\n", "-", "-");
    }
    for (int bi = 0; bi < 2; bi++) {
        const result *full = &rs[3 + 2 * bi], *half = &rs[9 + bi];
        printf("cnn2 width 0.5 vs 1.0 at batch %d: %.2fx samples/s\n", half->batch,
               half->sps / full->sps);
    }
    nn_dataset_destroy(&train);
    nn_dataset_destroy(&test);
    return 0;
}
