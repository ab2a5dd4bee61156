/* sim/scenario_keys.h -- the scenario's own sections as key tables (sim/keys.h), private to
 * sim/scenario.c, which reads them through these tables, and sim/scenario_keys.c, which holds
 * them and prints them for `fedsim keys` (sim_scenario_keys_print, scenario.h).
 *
 * Each table fills a block: the values of a section as read, which scenario.c then builds from
 * (federation and eval fill the engine's own configs). A custom key (sim_key.custom) is read
 * by scenario.c's own code where it applies; one whose offset is 0 in a block that has no
 * member for it (federation.fraction) is read into a variable of its type.
 */
#ifndef SIM_SCENARIO_KEYS_H
#define SIM_SCENARIO_KEYS_H

#include "sim/keys.h"

/* The top level's keys (name is read by hand: its default is the file's stem) */
typedef struct sim_top_keys {
    long seed;
    int rounds;
    sim_time max_time;
    int cost_only;
    char model[64];
} sim_top_keys;

/* `dataset:`: the keys of every kind (each kind reads its own) */
typedef struct sim_dataset_keys {
    int name; /* index in the dataset names */
    char dir[512];
    char idx[4][512]; /* train_images, train_labels, test_images, test_labels */
    int clients;
    double alpha, beta, test_fraction, scale;
} sim_dataset_keys;

/* `partition:`: the keys of every scheme (each scheme reads its own) */
typedef struct sim_partition_keys {
    int natural; /* in: the dataset has natural clients (the scheme's default is natural) */
    int scheme;
    int clients;
    double alpha;
    int min_size, shards;
    char file[512];
    int samples;
    double sigma;
    double local_test;
    int local_test_from_train;
    double local_val;
} sim_partition_keys;

/* `devices:` (its profiles and mix are read by hand) */
typedef struct sim_devices_keys {
    char catalog[512];
    char capacity[32];
} sim_devices_keys;

/* `devices.population:` (devices/population.h) */
typedef struct sim_population_keys {
    double phones; /* a share in [0, 1], or a count above 1 */
    char reference[48];
    double reference_score, exponent, floor;
    char list[512], bandwidth[512];
} sim_population_keys;

/* `network:`'s links: the server's (`network.server`) and a group's (`network.groups.N`), whose
 * devices are read by hand */
typedef struct sim_link_keys {
    char name[48];
    double up, down; /* bit/s; INFINITY when absent */
    double share;
} sim_link_keys;

extern const sim_key sim_keys_network[], sim_keys_network_server[], sim_keys_network_group[];

/* Path p, named by node, relative to the folder of node's file, made absolute when it exists,
 * and written back into node (scenario.c's rule for every file a scenario names). */
void sim_scenario_resolve_path(char *out, size_t n, sim_yaml *node, const char *p);

/* Read `network:` (absent: sc->spec.net stays NULL, nothing written into the tree) once the
 * devices are (scenario_net.c). */
struct sim_scenario;
int sim_scenario_load_network(struct sim_scenario *sc, sim_keys_map *root, sim_err *err);
/* Read `compression:` (absent: none both ways, nothing written into the tree), refusing a scheme
 * at its key where the algorithm cannot use it (scenario_comp.c). */
int sim_scenario_load_compression(struct sim_scenario *sc, sim_keys_map *root, sim_err *err);

extern const sim_key sim_keys_top[], sim_keys_dataset[], sim_keys_partition[],
        sim_keys_federation[], sim_keys_staleness[], sim_keys_eval[], sim_keys_devices[],
        sim_keys_compression[], /* compression.up and .down: an nn_comp each */
        sim_keys_population[];
extern const char *const sim_dataset_names[]; /* dataset.name's words, NULL-ended */

/* err is the error loading doc failed with: when it is "unknown key 'K'" (the key
 * sim_yaml_unknown finds under doc), add the key of that map K likely misspells ("; did you mean
 * 'local_epochs'?"), else the sections K is a key of ("; it belongs under federation:"), else a
 * key of another section it misspells. */
void sim_scenario_hint(const sim_yaml *doc, sim_err *err);

#endif /* SIM_SCENARIO_KEYS_H */
