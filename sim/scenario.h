/* sim/scenario.h -- scenario files: YAML in, a resolved run out.
 *
 * A scenario names the dataset and its split over clients, the model, the algorithm and its
 * hyperparameters, how clients take part (sync rounds or async), the devices (catalog profiles,
 * overrides, per-client distributions, a mix with shares) and when to evaluate. Every key has a
 * default in its section's key table (sim/scenario_keys.c; `fedsim keys` prints them), every
 * value carries its unit, unknown keys are errors at their file:line:col, and `--set a.b=v`
 * overrides any key before it is read. Loading builds the datasets, the partition, the
 * architecture and one concrete device per client, and keeps the resolved tree so the run folder
 * can hold exactly what ran.
 */
#ifndef SIM_SCENARIO_H
#define SIM_SCENARIO_H

#include "sim/engine.h"
#include "sim/yaml.h"

typedef struct sim_scenario {
    sim_yaml *doc; /* the tree after --set, with defaults filled in (owned) */
    char name[128];
    char path[512];    /* the scenario file */
    sim_run_spec spec; /* what the engine runs; its pointers point into this struct */
    fl_config cfg;
    nn_arch arch;
    nn_dataset train, test;
    nn_partition part;
    dev_profile *devices; /* one concrete profile per client (owned) */
    double *capacity;     /* per client (owned): `devices.capacity`, see fl_env */
    int capacity_derived; /* devices.capacity: device (each profile's capacity, else derived) */
    sim_sel_config sel;   /* federation.selection (spec.fed.selection points into it) */
    double *predicted_s;  /* per client (owned), for a policy that reads them: sim_cli_run_one */
    double *predicted_j;  /* and their energy, with devices.energy (owned) */
    nn_comp comp_up, comp_down; /* `compression:` (fl_env.comp_up, comp_down point here) */
    sim_net_config net;         /* `network:` (its arrays owned); spec.net points here when it has a
                                   limited link */
    int n_population;           /* clients devices.population made (the mix has the others) */
    char model[64];
    /* keys read by the other federation mode only, which this one leaves unused ("federation:
     * per_round, deadline (sync mode's) unused in async mode"), "" when none: for the user */
    char note[256];
} sim_scenario;

/* Load path, apply the n_sets "a.b=v" overrides in order, validate, build everything. On error
 * nothing is left allocated and err names file:line:col (or the --set) and the key. */
int sim_scenario_load(sim_scenario *s, const char *path, const char *const *sets, int n_sets,
                      sim_err *err);
void sim_scenario_destroy(sim_scenario *s);

/* Digests telling whether two processes loaded the same run: *text of the resolved scenario as
 * sim_yaml_write prints it, *env of what was built from it (datasets, partition, local test
 * splits, capacities, model size). MPI worker ranks load the scenario themselves, and the
 * coordinator compares their digests with its own before sending a job. SIM_EIO if the text
 * cannot be printed. */
int sim_scenario_digest(const sim_scenario *s, uint64_t *text, uint64_t *env, sim_err *err);

/* `fedsim keys`: every key of a scenario, its own sections' and the algorithms', whose full
 * dotted name starts with filter (NULL: all), for a terminal or as Markdown (scenarios/README.md's
 * key tables), in the order of a scenario's sections; returns how many keys were printed. */
int sim_scenario_keys_print(FILE *f, const char *filter, int markdown);

/* The default device catalog: PREFIX/share/fedsim/devices/catalog.yaml for a fedsim installed as
 * PREFIX/bin/fedsim (make install), else devices/catalog.yaml of the source tree it was built in.
 */
const char *sim_default_catalog(void);

#endif /* SIM_SCENARIO_H */
