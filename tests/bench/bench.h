/* tests/bench/bench.h -- what the engine benchmarks share: a wall clock, and one run of a loaded
 * scenario on a fresh engine with n workers. */
#ifndef TESTS_BENCH_BENCH_H
#define TESTS_BENCH_BENCH_H

#include "sim/engine.h"
#include "sim/scenario.h"

#include <stdio.h>
#include <time.h>

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall seconds of one run of sc with n workers (forking them included), its totals in *t; a
 * negative number on error, said on stderr after name. Every event goes to trace as text when it
 * is not NULL. */
static inline double bench_run(const char *name, sim_scenario *sc, int n, FILE *trace,
                               sim_totals *t)
{
    sim_err err = {0};
    sim_engine *e;
    sc->spec.workers = n;
    sc->spec.quiet = 1;
    sc->spec.trace = trace;
    double t0 = bench_now_s();
    if (sim_engine_new(&e, &sc->spec, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        return -1;
    }
    int rc = sim_engine_run(e, &err);
    sim_engine_totals(e, t);
    sim_engine_free(e);
    double wall = bench_now_s() - t0;
    if (rc) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        return -1;
    }
    return wall;
}

#endif /* TESTS_BENCH_BENCH_H */
