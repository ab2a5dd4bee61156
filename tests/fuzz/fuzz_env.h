/* tests/fuzz/fuzz_env.h -- the small federation the message, frame and checkpoint harnesses
 * decode against: scenarios/tiny.yaml (synthetic data, no files) run by any registered algorithm,
 * shrunk to 2 clients, 3 rounds and an MLP of 44 parameters trained one SGD step per job, and
 * the hyper-networks of pFedHN and Pa3dFL to their smallest, so that an input that trains costs
 * little and a message is a few hundred bytes, a checkpoint a few kB.
 *
 * A message, a frame or a checkpoint only decodes for the environment it was made in, so the
 * corpora of these targets were made by the same scenario under the same overrides (FUZZ_ENV_SETS)
 * and scenario hash 0; changing either leaves their valid entries refused at the first check.
 * Each algorithm's environment is loaded on first use and kept for the process.
 */
#ifndef TESTS_FUZZ_FUZZ_ENV_H
#define TESTS_FUZZ_FUZZ_ENV_H

#include "sim/scenario.h"
#include "tests/fuzz/fuzz.h"

/* The overrides after algorithm.name=NAME. */
#define FUZZ_ENV_SETS                                                                              \
    "model=mlp:5-4-4", "partition.clients=2", "federation.per_round=1", "rounds=3",                \
            "algorithm.pfedhn.hidden=2", "algorithm.pfedhn.layers=0", "algorithm.pfedhn.embed=1",  \
            "algorithm.pa3dfl.embed=1", "algorithm.pa3dfl.hidden=2", "algorithm.pa3dfl.p_min=0.5", \
            "algorithm.local_epochs=0", "algorithm.local_steps=1"

/* How many algorithms are registered. */
static inline int fuzz_n_algos(void)
{
    int n = 0;
    while (fl_algos[n])
        n++;
    return n;
}

/* The scenario of algorithm i (an index into fl_algos[]), loaded once. */
static inline sim_scenario *fuzz_env(int i)
{
    static sim_scenario sc[64];
    static int loaded[64];
    if (i < 0 || i >= 64 || !fl_algos[i]) abort();
    if (!loaded[i]) {
        char name[64], path[1024];
        snprintf(name, sizeof name, "algorithm.name=%s", fl_algos[i]->name);
        snprintf(path, sizeof path, "%s/scenarios/tiny.yaml", FEDSIM_ROOT);
        const char *sets[] = {name, FUZZ_ENV_SETS};
        sim_err err = {0};
        if (sim_scenario_load(&sc[i], path, sets, sizeof sets / sizeof *sets, &err)) {
            fprintf(stderr, "fuzz_env: %s: %s\n", fl_algos[i]->name, err.msg);
            abort();
        }
        sc[i].spec.quiet = 1;
        loaded[i] = 1;
    }
    return &sc[i];
}

#endif /* TESTS_FUZZ_FUZZ_ENV_H */
