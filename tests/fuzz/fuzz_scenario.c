/* tests/fuzz/fuzz_scenario.c -- fuzzes the scenario loader (sim_scenario_load in sim/scenario.c,
 * with sim/yaml.c, the device catalog and everything a scenario names): the input is a scenario
 * file, then any number of overrides, each on a line of its own starting "--set " as on fedsim's
 * command line (an override runs to the next such line, so it may span lines).
 *
 * Loading builds the datasets, so the harness keeps each run cheap: Fashion-MNIST (the default
 * dataset) comes from a fixture of 1000 + 200 blank 16x16 images written once to the scratch
 * folder (the loader takes it for the real one unless the input names its own `dir`; an MLP then
 * has 256 inputs, the CNNs size themselves from the data), and an
 * input that asks for more than 1000 clients, or LEAF synthetic data for more than 100, is read
 * and overridden but not built (a million clients is a valid scenario, not a fast one). The
 * scenario lands in the scratch folder beside a link `root` to this source tree, so an entry names
 * the project's files portably (`file: root/devices/traces/example-day.trace`). A scenario that
 * loads must be whole: clients with devices, and a digest of what was built.
 */
#include "sim/scenario.h"
#include "tests/fuzz/fuzz.h"

#include <zlib.h>

#define FIXTURE_TRAIN 1000
#define FIXTURE_TEST  200
#define FIXTURE_SIDE  16

static void write_idx(const char *name, int n, int images)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    gzFile f = gzopen(path, "wb1");
    unsigned char head[16] = {0,
                              0,
                              8,
                              images ? 3 : 1,
                              n >> 24,
                              n >> 16 & 255,
                              n >> 8 & 255,
                              n & 255,
                              0,
                              0,
                              0,
                              FIXTURE_SIDE,
                              0,
                              0,
                              0,
                              FIXTURE_SIDE};
    static unsigned char body[FIXTURE_TRAIN * FIXTURE_SIDE * FIXTURE_SIDE];
    size_t nb = (size_t)n * (images ? FIXTURE_SIDE * FIXTURE_SIDE : 1);
    for (size_t i = 0; i < nb; i++)
        body[i] = (unsigned char)(images ? 0 : i % 10);
    if (!f || gzwrite(f, head, images ? 16 : 8) <= 0 || gzwrite(f, body, (unsigned)nb) <= 0 ||
        gzclose(f) != Z_OK) {
        fprintf(stderr, "%s: cannot write the fixture\n", path);
        abort();
    }
}

/* The scratch folder, holding the Fashion-MNIST fixture and the link to the source tree. */
static const char *fixture(void)
{
    static int done;
    if (!done) {
        char link[1024];
        snprintf(link, sizeof link, "%s/root", fuzz_dir());
        if (symlink(FEDSIM_ROOT, link)) {
            perror(link);
            abort();
        }
        write_idx("train-images-idx3-ubyte.gz", FIXTURE_TRAIN, 1);
        write_idx("train-labels-idx1-ubyte.gz", FIXTURE_TRAIN, 0);
        write_idx("t10k-images-idx3-ubyte.gz", FIXTURE_TEST, 1);
        write_idx("t10k-labels-idx1-ubyte.gz", FIXTURE_TEST, 0);
        done = 1;
    }
    return fuzz_dir();
}

/* strtod of a scalar at map.key, or 0 */
static double number_at(const sim_yaml *root, const char *map, const char *key)
{
    const sim_yaml *m = sim_yaml_get(root, map), *v = sim_yaml_get(m, key);
    return v && v->kind == SIM_YAML_SCALAR ? strtod(v->value, NULL) : 0;
}

/* What the loader will be asked to build, read from its own parse of the same text and
 * overrides: 1 when it is too large to build on every run; *fmnist when the dataset is the
 * default Fashion-MNIST without a `dir`, which the fixture then stands in for. */
static int too_large(const char *text, char **sets, int n_sets, int *fmnist)
{
    sim_yaml *root;
    sim_err err = {0};
    *fmnist = 0;
    if (sim_yaml_load_string(&root, text, "scenario.yaml", &err)) return 0;
    int rc = 0;
    for (int i = 0; i < n_sets && !rc; i++)
        rc = sim_yaml_set(root, sets[i], &err);
    if (!rc && root->kind == SIM_YAML_MAP) {
        const sim_yaml *d = sim_yaml_get(root, "dataset"), *name = sim_yaml_get(d, "name");
        *fmnist =
                (!d || (d->kind == SIM_YAML_MAP && !sim_yaml_get(d, "dir"))) &&
                (!name || (name->kind == SIM_YAML_SCALAR && !strcmp(name->value, "fashion-mnist")));
        rc = !(number_at(root, "partition", "clients") <= 1000) ||
             !(number_at(root, "dataset", "clients") <= 100);
    } else {
        rc = 0;
    }
    sim_yaml_free(root);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *part[FUZZ_MAX_PARTS];
    size_t len[FUZZ_MAX_PARTS];
    int np = fuzz_split(data, size, "\n--set ", part, len);
    char path[1024], dir_set[1100];
    const char *dir = fixture();
    fuzz_write(path, "scenario.yaml", part[0], len[0]);
    int fmnist, n_sets = np - 1;
    if (too_large(part[0], part + 1, n_sets, &fmnist)) {
        fuzz_parts_free(part, np);
        return 0;
    }
    const char *sets[FUZZ_MAX_PARTS + 1];
    for (int i = 0; i < n_sets; i++)
        sets[i] = part[i + 1];
    if (fmnist) {
        snprintf(dir_set, sizeof dir_set, "dataset.dir=%s", dir);
        sets[n_sets++] = dir_set;
    }
    sim_scenario sc;
    sim_err err = {0};
    if (sim_scenario_load(&sc, path, sets, n_sets, &err)) {
        fuzz_require(err.msg[0] && !sc.doc && !sc.devices);
    } else {
        fuzz_require(sc.part.n_clients >= 1 && sc.spec.n_clients == sc.part.n_clients);
        fuzz_require(sc.devices != NULL);
        uint64_t text, env;
        fuzz_require(sim_scenario_digest(&sc, &text, &env, &err) == SIM_OK);
        sim_scenario_destroy(&sc);
    }
    fuzz_parts_free(part, np);
    return 0;
}
