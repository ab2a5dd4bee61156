/* tests/bench/bench_workers.c -- `make bench`: what the worker pool buys. Wall time of 5 FedAvg
 * rounds (cnn2 on Fashion-MNIST, 10 clients per round, scenarios/fmnist-cnn2-fedavg.yaml with no
 * evaluation) with 1 and with 2 workers, in one run, and the speedup (issue 4's target: >= 1.8x on
 * a 2-core machine). The scenario is loaded once; each measurement builds a fresh engine, so it
 * includes forking the workers. Timings only; skipped when Fashion-MNIST is not installed.
 */
#include "sim/engine.h"
#include "sim/scenario.h"

#include <cblas.h>
#include <stdio.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall seconds of one run with n workers, or a negative number on error. */
static double run(sim_scenario *sc, int n)
{
    sim_err err = {0};
    sim_engine *e;
    sc->spec.workers = n;
    sc->spec.quiet = 1;
    double t0 = now_s();
    if (sim_engine_new(&e, &sc->spec, &err)) {
        fprintf(stderr, "bench_workers: %s\n", err.msg);
        return -1;
    }
    int rc = sim_engine_run(e, &err);
    sim_totals t;
    sim_engine_totals(e, &t);
    sim_engine_free(e);
    double wall = now_s() - t0;
    if (rc) {
        fprintf(stderr, "bench_workers: %s\n", err.msg);
        return -1;
    }
    printf("workers %d: %d rounds, %ld jobs, final accuracy %.4f, %.2f s wall (%.2f s/round)\n", n,
           t.round, t.jobs, t.acc_global, wall, wall / t.round);
    fflush(stdout);
    return wall;
}

int main(void)
{
    openblas_set_num_threads(1);
    const char *sets[] = {"rounds=5", "eval.every=0"};
    sim_scenario sc;
    sim_err err = {0};
    if (sim_scenario_load(&sc, FEDSIM_ROOT "/scenarios/fmnist-cnn2-fedavg.yaml", sets, 2, &err)) {
        printf("bench_workers: skipped (%s)\n", err.msg);
        return 0;
    }
    printf("# bench_workers: 5 FedAvg rounds, cnn2, Fashion-MNIST, 10 clients per round\n");
    double w1 = run(&sc, 1), w2 = w1 > 0 ? run(&sc, 2) : -1;
    if (w1 > 0 && w2 > 0) printf("speedup 2 workers / 1 worker: %.2fx (target >= 1.8x)\n", w1 / w2);
    sim_scenario_destroy(&sc);
    return w1 > 0 && w2 > 0 ? 0 : 1;
}
