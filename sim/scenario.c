/* sim/scenario.c -- reading a scenario file into a runnable sim_run_spec (see scenario.h).
 *
 * Each section is read key by key with its default; a key that is absent gets its default
 * written into the tree, so the resolved scenario in the run folder lists every setting that
 * ran. After reading, sim_yaml_check_used rejects any key nobody asked for.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "sim/scenario.h"

#include "devices/catalog.h"
#include "devices/population.h"
#include "sim/checkpoint.h"
#include "sim/keys.h"
#include "sim/scenario_keys.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FEDSIM_ROOT
#define FEDSIM_ROOT "."
#endif

/* The catalog of an installed fedsim is PREFIX/share/fedsim/devices/catalog.yaml beside
 * PREFIX/bin/fedsim (make install), found from the running binary, so an installed copy moved
 * elsewhere still finds its own; any other binary (build/release/fedsim, a test) reads the source
 * tree it was built from. Computed once, on the first call (scenarios load on the main thread). */
const char *sim_default_catalog(void)
{
    static char path[4096];
    if (path[0]) return path;
    char exe[sizeof path - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/'); /* PREFIX/bin/fedsim -> PREFIX/bin */
        if (slash) *slash = 0;
        slash = strrchr(exe, '/'); /* -> PREFIX */
        if (slash) {
            *slash = 0;
            snprintf(path, sizeof path, "%s/share/fedsim/devices/catalog.yaml", exe);
            if (access(path, R_OK) == 0) return path;
        }
    }
    snprintf(path, sizeof path, "%s", FEDSIM_ROOT "/devices/catalog.yaml");
    return path;
}

/* Reading one section: the map, the dotted prefix used to write defaults back, the document. */
typedef sim_keys_map section;

/* Key `name` of table keys into block, its default in ctx (NULL: none) with block as the block
 * being filled: the keys a section reads only where they apply (sim/scenario_keys.h). */
static int read_key(const sim_key *keys, const char *name, void *block, section *s,
                    const sim_key_ctx *ctx, sim_err *err)
{
    sim_key_ctx c = ctx ? *ctx : (sim_key_ctx){0};
    c.config = block;
    return sim_keys_read(sim_keys_find(keys, name), block, s, &c, err);
}

/* The same with the table's key changed where a case reads it otherwise (a scheme's own range
 * or default): k is that copy. */
static int read_changed(sim_key k, void *block, section *s, sim_err *err)
{
    sim_key_ctx c = {.config = block};
    return sim_keys_read(&k, block, s, &c, err);
}

/* A sub-map (created empty when absent, so defaults can be written into it). */
static section sub(section *parent, const char *key, char *prefix_buf, size_t n)
{
    return sim_keys_sub(parent, key, prefix_buf, n);
}

static int need_map(const section *s, const char *key, sim_err *err)
{
    return sim_keys_need_map(s, key, err);
}

/* A key the section needs and lacks: at its map (it is there: the key that picked what needs it
 * is in it). */
static int need_key(const sim_scenario *sc, const section *s, sim_err *err, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int need_key(const sim_scenario *sc, const section *s, sim_err *err, const char *fmt, ...)
{
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (s->map) return sim_yaml_fail(s->map, err, "%s", msg);
    return sim_fail(err, SIM_EINVAL, sc->path, 0, 0, "%s", msg);
}

/* err holds a loader's error about the file (err->file) that `key` of section s named: put it at
 * the key, naming the key and the file ("s.yaml:4:26: partition.file: '/abs/p.txt': cannot open:
 * No such file or directory"), or, for a key left out (given NULL: its default named the file),
 * at the section. An error at a line of the file itself (a bad line of a partition file) stays
 * there: that is where to look. Returns rc. */
static int file_error(const sim_scenario *sc, const section *s, const char *key,
                      const sim_yaml *given, int rc, sim_err *err)
{
    if (!rc || !err || err->line > 0) return rc;
    char what[sizeof err->msg + sizeof err->file + 8];
    if (err->file[0])
        snprintf(what, sizeof what, "'%s': %s", err->file, err->msg);
    else
        snprintf(what, sizeof what, "%s", err->msg);
    const char *dot = s->prefix[0] ? "." : "";
    if (given)
        sim_yaml_fail_key(s->map, key, err, "%s%s%s: %s", s->prefix, dot, key, what);
    else if (s->map && s->map->line > 0)
        sim_yaml_fail(s->map, err, "%s%s%s (default): %s", s->prefix, dot, key, what);
    else
        sim_fail(err, rc, sc->path, 0, 0, "%s%s%s (default): %s", s->prefix, dot, key, what);
    return rc;
}

/* Path relative to the directory of the file a node came from (cut at n − 1 bytes: a path that
 * long then fails to open, with its name in the message), made absolute when it exists. The
 * node's text is replaced by that path, so the resolved scenario in a run folder names the same
 * files wherever it is read from (fedsim resume reads it from the run folder). */
static void resolve_path(char *out, size_t n, sim_yaml *node, const char *p)
{
    int len;
    if (p[0] == '/' || !node || !node->file || !strchr(node->file, '/'))
        len = snprintf(out, n, "%s", p);
    else
        len = snprintf(out, n, "%.*s/%s", (int)(strrchr(node->file, '/') - node->file), node->file,
                       p);
    if (len < 0 || (size_t)len >= n) out[n - 1] = 0;
    char *abs = realpath(out, NULL);
    if (abs && strlen(abs) < n) snprintf(out, n, "%s", abs);
    free(abs);
    if (node && node->kind == SIM_YAML_SCALAR && strcmp(node->value, out)) {
        free(node->value);
        node->value = sim_xstrdup(out);
    }
}

void sim_scenario_resolve_path(char *out, size_t n, sim_yaml *node, const char *p)
{
    resolve_path(out, n, node, p);
}

/* The same for trace files named inside scenario device profiles (availability, speed, a
 * battery's own charging process), which devices/ resolves against the YAML file's folder when
 * it reads them. */
static void absolutize_file(const sim_yaml *spec)
{
    for (int q = 0; spec && spec->kind == SIM_YAML_MAP && q < spec->n; q++)
        if (!strcmp(spec->keys[q], "file") && spec->items[q]->kind == SIM_YAML_SCALAR) {
            char path[512], raw[512];
            snprintf(raw, sizeof raw, "%s", spec->items[q]->value);
            resolve_path(path, sizeof path, spec->items[q], raw);
        }
}

static void absolutize_traces(const sim_yaml *profiles)
{
    for (int i = 0; profiles && profiles->kind == SIM_YAML_MAP && i < profiles->n; i++) {
        const sim_yaml *m = profiles->items[i];
        if (m->kind != SIM_YAML_MAP) continue;
        absolutize_file(sim_yaml_get(m, "availability"));
        absolutize_file(sim_yaml_get(m, "speed"));
        const sim_yaml *b = sim_yaml_get(m, "battery");
        const sim_yaml *ch = b && b->kind == SIM_YAML_MAP ? sim_yaml_get(b, "charging") : NULL;
        absolutize_file(ch && ch->kind == SIM_YAML_MAP ? sim_yaml_get(ch, "when") : NULL);
    }
}

/* ---------------------------------------------------------------------------------------- */

/* The dataset. Its keys are all read, and checked for typos, before a file is opened; its
 * inputs are then multiplied by `scale` (SpaFL's code feeds raw 0–255 pixels: 255). */
static int load_dataset(sim_scenario *sc, section *root, int *natural, sim_err *err)
{
    static const char *const idx_keys[4] = {"train_images", "train_labels", "test_images",
                                            "test_labels"};
    const sim_key *keys = sim_keys_dataset;
    char pre[64];
    section s = sub(root, "dataset", pre, sizeof pre);
    sim_dataset_keys dk = {0};
    int rc = need_map(&s, "dataset", err);
    if (!rc) rc = read_key(keys, "name", &dk, &s, NULL, err);
    if (rc) return rc;
    int which = dk.name;
    *natural = 0;
    uint64_t seed = sc->spec.seed;
    const sim_yaml *given[4] = {NULL}; /* the keys naming files, as written (NULL: left out) */
    const char *raw[4] = {dk.dir};
    char path[4][512];
    switch (which) {
    case 0:
        given[0] = sim_yaml_get(s.map, "dir");
        rc = read_key(keys, "dir", &dk, &s, NULL, err);
        break;
    case 3:
        if ((rc = read_key(keys, "clients", &dk, &s, NULL, err)) ||
            (rc = read_key(keys, "alpha", &dk, &s, NULL, err)) ||
            (rc = read_key(keys, "beta", &dk, &s, NULL, err)))
            break;
        rc = read_key(keys, "test_fraction", &dk, &s, NULL, err);
        break;
    case 4:
        for (int i = 0; i < 4 && !rc; i++) {
            given[i] = sim_yaml_get(s.map, idx_keys[i]);
            rc = read_key(keys, idx_keys[i], &dk, &s, NULL, err); /* no default */
            raw[i] = dk.idx[i];
        }
        break;
    case 5: {
        given[0] = sim_yaml_get(s.map, "dir");
        sim_key dir = *sim_keys_find(keys, "dir");
        dir.dflt = NULL; /* cifar10 has no folder of its own */
        rc = read_changed(dir, &dk, &s, err);
        break;
    }
    }
    if (rc || (rc = read_key(keys, "scale", &dk, &s, NULL, err)) ||
        (rc = sim_yaml_check_keys(s.map, err)))
        return rc;
    switch (which) {
    case 0:
        resolve_path(path[0], sizeof path[0], sim_yaml_get(s.map, "dir"), raw[0]);
        rc = file_error(sc, &s, "dir", given[0],
                        nn_fmnist_load(&sc->train, &sc->test, path[0], err), err);
        break;
    case 1:
    case 2:
        rc = nn_synth_pews_make(&sc->train, &sc->test, which == 1 ? 2000 : 200, seed, err);
        break;
    case 3:
        *natural = 1;
        rc = nn_synth_leaf_make(&sc->train, &sc->test, dk.clients, dk.alpha, dk.beta, 60, 10, seed,
                                dk.test_fraction, err);
        break;
    case 4:
        for (int i = 0; i < 4; i++) {
            if (!given[i])
                return need_key(sc, &s, err, "dataset: idx needs %s (an IDX file)", idx_keys[i]);
            resolve_path(path[i], sizeof path[i], sim_yaml_get(s.map, idx_keys[i]), raw[i]);
        }
        for (int i = 0; i < 4 && !rc; i += 2) {
            nn_dataset *d = i ? &sc->test : &sc->train;
            rc = nn_idx_load(d, path[i], path[i + 1], i ? sc->train.classes : 0, err);
            /* the labels file's own errors name it; the images' and a count mismatch, those */
            int k = i + (rc && err && !strcmp(err->file, path[i + 1]));
            rc = file_error(sc, &s, idx_keys[k], given[k], rc, err);
        }
        break;
    default: {
        if (!given[0])
            return need_key(sc, &s, err,
                            "dataset: cifar10 needs dir (the folder of data_batch_1.bin ... "
                            "test_batch.bin)");
        resolve_path(path[0], sizeof path[0], sim_yaml_get(s.map, "dir"), raw[0]);
        char paths[5][600];
        const char *pp[5];
        for (int i = 0; i < 5; i++) {
            snprintf(paths[i], sizeof paths[i], "%s/data_batch_%d.bin", path[0], i + 1);
            pp[i] = paths[i];
        }
        rc = nn_cifar10_load(&sc->train, pp, 5, err);
        if (!rc) {
            snprintf(paths[0], sizeof paths[0], "%s/test_batch.bin", path[0]);
            rc = nn_cifar10_load(&sc->test, pp, 1, err);
        }
        rc = file_error(sc, &s, "dir", given[0], rc, err);
    }
    }
    if (rc || dk.scale == 1) return rc;
    nn_dataset *d[2] = {&sc->train, &sc->test};
    for (int k = 0; k < 2; k++)
        for (size_t j = 0; j < (size_t)d[k]->n * (size_t)nn_dataset_features(d[k]); j++)
            d[k]->x[j] = (float)(d[k]->x[j] * dk.scale);
    return SIM_OK;
}

/* `groups: [[0, 2], [1, 3]]`: client k gets the classes of the k-th list (a class several
 * clients list is cut between them). */
static int classes_partition(sim_scenario *sc, section *s, sim_err *err)
{
    const sim_yaml *g = sim_yaml_get(s->map, "groups");
    if (!g)
        return need_key(sc, s, err,
                        "partition: scheme classes needs groups (a list of class lists)");
    if (g->kind != SIM_YAML_SEQ || g->n < 1)
        return sim_yaml_fail(g, err, "groups: expected a list of class lists, one per client");
    int **of = sim_xcalloc((size_t)g->n, sizeof *of),
        *n_of = sim_xcalloc((size_t)g->n, sizeof(int));
    int rc = SIM_OK;
    for (int k = 0; k < g->n && !rc; k++) {
        const sim_yaml *l = g->items[k];
        if (l->kind != SIM_YAML_SEQ || l->n < 1) {
            rc = sim_yaml_fail(l, err, "groups: client %d: expected a non-empty list of classes",
                               k);
            break;
        }
        of[k] = sim_xmalloc(sizeof(int) * (size_t)l->n);
        n_of[k] = l->n;
        for (int j = 0; j < l->n && !rc; j++) {
            long c;
            rc = sim_yaml_int(l->items[j], "groups", 0, sc->train.classes - 1, &c, err);
            of[k][j] = (int)c;
        }
    }
    if (!rc)
        rc = nn_partition_groups(&sc->part, &sc->train, g->n, (const int *const *)of, n_of,
                                 sc->spec.seed, err);
    if (rc == SIM_EINVAL && !err->line) { /* from the partition: point at the key */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        sim_yaml_fail(g, err, "groups: %s", why);
    }
    for (int k = 0; k < g->n; k++)
        free(of[k]);
    free(of);
    free(n_of);
    return rc;
}

/* Clients that have only a sample count, no data: for cost-only studies of populations far
 * larger than any dataset. Counts are `samples`, or lognormal around it with `sigma`. */
static int sizes_partition(sim_scenario *sc, section *s, sim_partition_keys *pk, sim_err *err)
{
    sim_key many = *sim_keys_find(sim_keys_partition, "clients");
    many.hi = 100000000; /* no data to split: as many clients as one wants to price */
    int rc;
    if ((rc = read_changed(many, pk, s, err)) ||
        (rc = read_key(sim_keys_partition, "samples", pk, s, NULL, err)) ||
        (rc = read_key(sim_keys_partition, "sigma", pk, s, NULL, err)))
        return rc;
    int clients = pk->clients, samples = pk->samples;
    double sigma = pk->sigma;
    nn_partition *p = &sc->part;
    p->n_clients = clients;
    p->n = sim_xmalloc(sizeof(int) * (size_t)clients);
    p->n_test = sim_xcalloc((size_t)clients, sizeof(int));
    sim_rng r;
    sim_rng_seed(&r, sc->spec.seed, SIM_RNG_DATA_SPLIT, 0);
    for (int k = 0; k < clients; k++) {
        double v = sigma > 0 ? samples * exp(sigma * sim_rng_normal(&r)) : samples;
        p->n[k] = v < 1 ? 1 : v > 1e8 ? 100000000 : (int)llround(v);
    }
    return SIM_OK;
}

/* The partition. The keys of its scheme and of the local splits are all read, and checked for
 * typos, before the split is made (and a partition file opened). */
static int load_partition(sim_scenario *sc, section *root, int natural, int cost_only, sim_err *err)
{
    const sim_key *keys = sim_keys_partition;
    char pre[64];
    section s = sub(root, "partition", pre, sizeof pre);
    sim_partition_keys pk = {.natural = natural};
    int rc = need_map(&s, "partition", err);
    if (rc || (rc = read_key(keys, "scheme", &pk, &s, NULL, err))) return rc;
    int scheme = pk.scheme;
    uint64_t seed = sc->spec.seed;
    const sim_yaml *file_key = NULL; /* scheme file: the key naming it, as written */
    switch (scheme) {
    case 0:
        rc = read_key(keys, "clients", &pk, &s, NULL, err);
        break;
    case 1:
        if ((rc = read_key(keys, "clients", &pk, &s, NULL, err)) ||
            (rc = read_key(keys, "alpha", &pk, &s, NULL, err)))
            break;
        rc = read_key(keys, "min_size", &pk, &s, NULL, err);
        break;
    case 2:
        if ((rc = read_key(keys, "clients", &pk, &s, NULL, err))) break;
        rc = read_key(keys, "shards", &pk, &s, NULL, err);
        break;
    case 3:
        if (!sc->train.group)
            return sim_yaml_fail(sim_yaml_get(s.map, "scheme"), err,
                                 "scheme: natural needs a dataset with natural clients "
                                 "(leaf-synthetic)");
        break;
    case 4:
        if ((file_key = sim_yaml_get(s.map, "file")))
            rc = read_key(keys, "file", &pk, &s, NULL, err);
        break;
    case 5: {
        if (!cost_only)
            return sim_yaml_fail(sim_yaml_get(s.map, "scheme"), err,
                                 "scheme: sizes has no data to train on; it needs cost_only: true");
        /* no samples, so no local splits: 0 is the only share */
        sim_key test = *sim_keys_find(keys, "local_test"), val = *sim_keys_find(keys, "local_val");
        test.hi = val.hi = 0;
        test.dflt = val.dflt = "0";
        if ((rc = sizes_partition(sc, &s, &pk, err)) || (rc = read_changed(test, &pk, &s, err)) ||
            (rc = read_changed(val, &pk, &s, err)))
            return rc;
        return read_key(keys, "local_test_from_train", &pk, &s, NULL, err);
    }
    case 6:
        sim_yaml_get(s.map, "groups"); /* read with the split */
        break;
    }
    if (rc || (rc = read_key(keys, "local_test", &pk, &s, NULL, err)) ||
        (rc = read_key(keys, "local_test_from_train", &pk, &s, NULL, err)) ||
        (rc = read_key(keys, "local_val", &pk, &s, NULL, err)) ||
        (rc = sim_yaml_check_keys(s.map, err)))
        return rc;
    int clients = pk.clients, from_train = pk.local_test_from_train;
    double local_test = pk.local_test, local_val = pk.local_val;
    if (local_val > 0 && !(local_test > 0))
        return sim_yaml_fail(sim_yaml_get(s.map, "local_val"), err,
                             "local_val is a share of each client's local test split, and "
                             "local_test is 0: there is none");
    switch (scheme) {
    case 0:
        rc = nn_partition_iid(&sc->part, &sc->train, clients, seed, err);
        break;
    case 1:
        rc = nn_partition_dirichlet(&sc->part, &sc->train, clients, pk.alpha, pk.min_size, seed,
                                    err);
        break;
    case 2:
        rc = nn_partition_shards(&sc->part, &sc->train, clients, pk.shards, seed, err);
        break;
    case 3:
        rc = nn_partition_natural(&sc->part, &sc->train, err);
        break;
    case 6:
        rc = classes_partition(sc, &s, err);
        break;
    default: {
        if (!file_key)
            return need_key(sc, &s, err,
                            "partition: scheme file needs file (a partition file: one line of "
                            "sample indices per client)");
        char path[512];
        resolve_path(path, sizeof path, sim_yaml_get(s.map, "file"), pk.file);
        rc = file_error(sc, &s, "file", file_key,
                        nn_partition_file(&sc->part, &sc->train, path, err), err);
    }
    }
    if (rc) return rc;
    if (local_test > 0)
        rc = nn_partition_local_test(&sc->part, &sc->train, &sc->test, local_test, from_train, seed,
                                     err);
    if (!rc && local_val > 0)
        rc = nn_partition_local_val(&sc->part, from_train ? &sc->train : &sc->test, local_val, seed,
                                    err);
    return rc;
}

/* `algorithm:`: read through the registry (algos/config.c), with what its defaults may depend
 * on: the rounds, the clients, and federation.mode (read ahead of the federation section). */
static int load_algorithm(sim_scenario *sc, sim_err *err)
{
    const sim_yaml *fed = sim_yaml_get(sc->doc, "federation"),
                   *mode = fed ? sim_yaml_get(fed, "mode") : NULL;
    const char *mv = NULL;
    sim_err ignored;
    sim_key_ctx ctx = {.rounds = sc->spec.fed.rounds, .clients = sc->part.n_clients};
    ctx.async = mode && sim_yaml_str(mode, "mode", &mv, &ignored) == SIM_OK && !strcmp(mv, "async");
    int rc = fl_config_read(&sc->cfg, sc->doc, "algorithm", &ctx, err);
    if (!rc) sc->spec.algo = fl_algo_find(sc->cfg.name);
    return rc;
}

static int load_federation(sim_scenario *sc, section *root, sim_err *err)
{
    const sim_key *keys = sim_keys_federation;
    char pre[64], pre2[96];
    section s = sub(root, "federation", pre, sizeof pre);
    sim_fed_config *f = &sc->spec.fed;
    int rc = need_map(&s, "federation", err), n = sc->part.n_clients;
    sim_key_ctx ctx = {.clients = n};
    if (rc || (rc = read_key(keys, "mode", f, &s, NULL, err))) return rc;
    /* The other mode's keys are left as they are, unread, and noted (sc->note), so that
     * `--set federation.mode=async` (a sweep over the mode) runs a sync scenario unchanged. */
    static const char *const mode_keys[2][5] = {
            {"per_round", "fraction", "over_commit", "deadline"},
            {"concurrency", "buffer", "staleness"}};
    const char *const *other = mode_keys[f->mode == SIM_SYNC];
    for (int i = 0; other[i]; i++) {
        const sim_yaml *v = sim_yaml_get(s.map, other[i]);
        if (!v) continue;
        if (strcmp(other[i], "staleness") || v->kind != SIM_YAML_MAP)
            sim_yaml_mark_used(v);
        else /* its own keys only: a misspelled one is still an error */
            for (const sim_key *k = sim_keys_staleness; k->name; k++)
                sim_yaml_mark_used(sim_yaml_get(v, k->name));
        size_t len = strlen(sc->note);
        snprintf(sc->note + len, sizeof sc->note - len, "%s%s",
                 len ? ", " : "federation: ", other[i]);
    }
    if (sc->note[0]) {
        size_t len = strlen(sc->note);
        snprintf(sc->note + len, sizeof sc->note - len, " (%s mode's keys) unused in %s mode",
                 f->mode == SIM_SYNC ? "async" : "sync", f->mode == SIM_SYNC ? "sync" : "async");
    }
    if (f->mode == SIM_SYNC) {
        sim_yaml *frac = sim_yaml_get(s.map, "fraction");
        if (frac) {
            double x;
            if ((rc = read_key(keys, "fraction", &x, &s, NULL, err))) return rc;
            if (sim_yaml_get(s.map, "per_round"))
                return sim_yaml_fail(frac, err, "federation: give per_round or fraction, not both");
            f->per_round = (int)ceil(x * n - 1e-9);
            if (f->per_round < 1) f->per_round = 1;
        } else if ((rc = read_key(keys, "per_round", f, &s, &ctx, err))) {
            return rc;
        }
        if (f->per_round > n)
            return sim_yaml_fail(sim_yaml_get(s.map, "per_round"), err,
                                 "per_round: %d is more than the %d clients", f->per_round, n);
        if ((rc = read_key(keys, "over_commit", f, &s, NULL, err)) ||
            (rc = read_key(keys, "deadline", f, &s, NULL, err)))
            return rc;
    } else {
        if ((rc = read_key(keys, "concurrency", f, &s, &ctx, err)) ||
            (rc = read_key(keys, "buffer", f, &s, NULL, err)))
            return rc;
        section st = sub(&s, "staleness", pre2, sizeof pre2);
        if ((rc = need_map(&st, "staleness", err)) ||
            (rc = sim_keys_load(sim_keys_staleness, f, &st, NULL, err)))
            return rc;
    }
    if ((rc = read_key(keys, "overhead", f, &s, NULL, err))) return rc;
    const sim_yaml *part = sim_yaml_get(s.map, "participation"); /* absent: nothing written */
    const char *pv;
    if (part && !(rc = sim_yaml_str(part, "participation", &pv, err))) {
        if (!strcmp(pv, "charging-only"))
            f->charging_only = 1;
        else if (strcmp(pv, "any"))
            rc = sim_yaml_fail(part, err, "participation: '%s' is not any or charging-only", pv);
    }
    if (rc) return rc;
    /* the selection policy: nothing read or written without the map (uniform) */
    section sel = sub(&s, "selection", pre2, sizeof pre2);
    sim_key_ctx sctx = {
            .clients = n, .async = f->mode == SIM_ASYNC, .parent = f, .parent_map = s.map};
    if ((rc = sim_sel_config_read(&sc->sel, &sel, &sctx, err))) return rc;
    f->selection = sc->sel.policy;
    f->selection_cfg = sc->sel.cfg;
    return SIM_OK;
}

static int load_eval(sim_scenario *sc, section *root, sim_err *err)
{
    char pre[64];
    section s = sub(root, "eval", pre, sizeof pre);
    sim_eval_config *e = &sc->spec.eval;
    int rc = need_map(&s, "eval", err);
    if (rc || (rc = sim_keys_load(sim_keys_eval, e, &s, NULL, err))) return rc;
    const sim_yaml *sh = sim_yaml_get(s.map, "shift"); /* no default: absent, no columns */
    if (!sh) return SIM_OK;
    if (sh->kind != SIM_YAML_SEQ || sh->n < 1 || sh->n > SIM_MAX_SHIFTS)
        return sim_yaml_fail(sh, err, "shift: expected a list of 1 to %d shares in [0, 1]",
                             SIM_MAX_SHIFTS);
    for (int i = 0; i < sh->n && !rc; i++)
        rc = sim_yaml_double(sh->items[i], "shift", 0, 1, &e->shift[i], err);
    e->n_shift = sh->n;
    if (!rc && !e->personalized)
        return sim_yaml_fail(sh, err, "shift: needs personalized: true (it shifts local splits)");
    return rc;
}

/* devices: {catalog: path, profiles: {name: {base: other, ...}}, mix: [{profile, share}]} */
/* `devices.capacity`: every client's share r_i of the full model's cost (fl_env.capacity):
 * device (its profile's capacity, else dev_capacity against the full model's training memory
 * at the batch size and the fastest device of the mix), uniform (r_i = (π(i)+1)/N for a seeded
 * permutation π: the Pa3dFL paper's "Hetero", r uniform on [1/N, 1]), or one number for all (its
 * "Ideal" is 1). */
static int load_capacity(sim_scenario *sc, section *s, sim_devices_keys *dk, sim_err *err)
{
    int rc = read_key(sim_keys_devices, "capacity", dk, s, NULL, err), n = sc->part.n_clients;
    if (rc) return rc;
    const char *v = dk->capacity;
    double *r = sc->capacity = sim_xcalloc((size_t)n, sizeof(double));
    if (!strcmp(v, "uniform")) {
        uint32_t *perm = sim_xmalloc(sizeof(uint32_t) * (size_t)n);
        for (int c = 0; c < n; c++)
            perm[c] = (uint32_t)c;
        sim_rng g;
        sim_rng_seed(&g, sc->spec.seed, SIM_RNG_DEVICES, (uint64_t)1 << 41);
        sim_rng_shuffle_u32(&g, perm, (size_t)n);
        for (int c = 0; c < n; c++)
            r[c] = (perm[c] + 1.0) / n;
        free(perm);
    } else if (!strcmp(v, "device")) {
        sc->capacity_derived = 1;
        nn_model m;
        nn_model_init(&m, &sc->arch, 1);
        double mem = (double)nn_model_memory_bytes(&m, sc->cfg.batch_size), ref = 0;
        nn_model_destroy(&m);
        for (int c = 0; c < n; c++)
            if (sc->devices[c].compute_flops > ref) ref = sc->devices[c].compute_flops;
        for (int c = 0; c < n; c++) {
            r[c] = dev_capacity(&sc->devices[c], mem, ref);
            if (r[c] < 1e-9) r[c] = 1e-9; /* a width family still gives it its narrowest model */
        }
    } else {
        char *end;
        double x = strtod(v, &end);
        if (end == v || *end || !(x > 0 && x <= 1))
            return sim_yaml_fail(sim_yaml_get(s->map, "capacity"), err,
                                 "capacity: '%s' is not device, uniform or a number in (0, 1]", v);
        for (int c = 0; c < n; c++)
            r[c] = x;
    }
    return SIM_OK;
}

/* Into hint and returned: "; did you mean 'NAME'?" for a profile name that misspells one of
 * own's or cat's, else "". */
static const char *profile_hint(const char *name, const dev_profile *own, int nown,
                                const dev_catalog *cat, char hint[DEV_MAX_NAME + 32])
{
    const char *near = NULL;
    int bd = 0;
    for (int i = 0; i < nown + cat->n; i++) {
        const char *p = i < nown ? own[i].name : cat->profiles[i - nown].name;
        int d = sim_keys_misspelling(name, p);
        if (d >= 0 && (!near || d < bd)) near = p, bd = d;
    }
    hint[0] = 0;
    if (near) snprintf(hint, DEV_MAX_NAME + 32, "; did you mean '%.*s'?", DEV_MAX_NAME - 1, near);
    return hint;
}

/* devices.population (devices/population.h): its data into *pop, its reference profile (from
 * own, then cat) into *ref and how many clients it covers into *count; 0 without one. */
static int load_population(sim_scenario *sc, section *s, const dev_catalog *cat,
                           const dev_profile *own, int nown, dev_population *pop,
                           const dev_profile **ref, int *count, sim_err *err)
{
    memset(pop, 0, sizeof *pop);
    *ref = NULL;
    *count = 0;
    char pre[64];
    section ps = sub(s, "population", pre, sizeof pre);
    if (!ps.map || (ps.map->kind == SIM_YAML_SCALAR && !strcmp(ps.map->value, "none")))
        return SIM_OK;
    sim_population_keys k = {0};
    int rc = need_map(&ps, "population", err), n = sc->part.n_clients;
    if (rc || (rc = sim_keys_load(sim_keys_population, &k, &ps, NULL, err))) return rc;
    if (k.phones <= 1)
        *count = (int)lround(k.phones * n);
    else if (k.phones != floor(k.phones) || k.phones > n)
        return sim_yaml_fail(sim_yaml_get(ps.map, "phones"), err,
                             "phones: %g is neither a share in [0, 1] nor a whole count of at "
                             "most the %d clients",
                             k.phones, n);
    else
        *count = (int)k.phones;
    for (int i = 0; i < nown && !*ref; i++)
        if (!strcmp(own[i].name, k.reference)) *ref = &own[i];
    if (!*ref) *ref = dev_catalog_find(cat, k.reference);
    const sim_yaml *rn = sim_yaml_get(ps.map, "reference");
    if (!*ref)
        return sim_yaml_fail(rn ? rn : ps.map, err,
                             "reference: no profile '%s' in the catalog or devices.profiles",
                             k.reference);
    if (dev_profile_has_dist(*ref))
        return sim_yaml_fail(rn ? rn : ps.map, err,
                             "reference: profile '%s' has distributions; the population scales "
                             "one concrete profile",
                             k.reference);
    sim_yaml *ln = (sim_yaml *)sim_yaml_get(ps.map, "list"),
             *bn = (sim_yaml *)sim_yaml_get(ps.map, "bandwidth");
    char list[512], bw[512];
    resolve_path(list, sizeof list, ln, k.list);
    resolve_path(bw, sizeof bw, bn, k.bandwidth);
    rc = dev_population_load(pop, list, bw, err);
    /* dev_population_load zeroes pop on error: which file failed is in err */
    int second = rc && err && !strncmp(err->file, bw, sizeof err->file - 1) && strcmp(bw, list);
    if (rc) return file_error(sc, &ps, second ? "bandwidth" : "list", second ? bn : ln, rc, err);
    pop->ref_score = k.reference_score;
    pop->exponent = k.exponent;
    pop->floor = k.floor;
    return SIM_OK;
}

static int load_devices(sim_scenario *sc, section *root, sim_err *err)
{
    char pre[64];
    section s = sub(root, "devices", pre, sizeof pre);
    int rc = need_map(&s, "devices", err);
    if (rc) return rc;
    sim_devices_keys dk = {0};
    char cat_path[512];
    const sim_yaml *cat_key = sim_yaml_get(s.map, "catalog"),
                   *profiles = sim_yaml_get(s.map, "profiles");
    sim_yaml_get(s.map, "mix"); /* these are read once the catalog is */
    sim_yaml_get(s.map, "capacity");
    sim_yaml_get(s.map, "population");
    /* absent, not written into the resolved scenario: runs without it are as they were */
    const sim_yaml *energy_key = sim_yaml_get(s.map, "energy");
    int energy = 0;
    if (energy_key && (rc = sim_yaml_bool(energy_key, "energy", &energy, err))) return rc;
    if ((rc = read_key(sim_keys_devices, "catalog", &dk, &s, NULL, err)) ||
        (rc = sim_yaml_check_keys(s.map, err)))
        return rc;
    resolve_path(cat_path, sizeof cat_path, sim_yaml_get(s.map, "catalog"), dk.catalog);
    dev_catalog cat;
    if ((rc = file_error(sc, &s, "catalog", cat_key, dev_catalog_load(&cat, cat_path, err), err)))
        return rc;
    /* scenario-defined profiles: {name: {base: CATALOG_NAME, ...overrides}} or full profiles */
    absolutize_traces(profiles);
    dev_profile own[64];
    int nown = 0;
    if (profiles && (profiles->kind != SIM_YAML_MAP || profiles->n > 64))
        rc = sim_yaml_fail(profiles, err, "devices.profiles: expected a map of up to 64 profiles");
    for (int i = 0; profiles && !rc && i < profiles->n; i++) {
        if ((rc = sim_yaml_key_name(profiles, i, "profile name", DEV_MAX_NAME - 1, err))) break;
        const sim_yaml *node = sim_yaml_get(profiles, profiles->keys[i]);
        const sim_yaml *bn = sim_yaml_get(node, "base");
        static const char *const energy_keys[] = {"power", "battery"};
        for (int k = 0; k < 2 && !energy && !rc; k++)
            if (sim_yaml_get(node, energy_keys[k]))
                rc = sim_yaml_fail(sim_yaml_get(node, energy_keys[k]), err,
                                   "%s: the energy model is off (set devices.energy: true)",
                                   energy_keys[k]);
        if (rc) break;
        const dev_profile *base = NULL;
        const char *bname;
        char hint[DEV_MAX_NAME + 32];
        if (bn && !(rc = sim_yaml_str(bn, "base", &bname, err)) &&
            !(base = dev_catalog_find(&cat, bname)))
            rc = sim_yaml_fail(bn, err, "base: no profile '%s' in %s%s", bname, cat_path,
                               profile_hint(bname, NULL, 0, &cat, hint));
        if (!rc && !(rc = dev_profile_from_yaml(&own[nown], node, base, err)))
            snprintf(own[nown++].name, DEV_MAX_NAME, "%s", profiles->keys[i]);
    }
    if (rc) {
        for (int i = 0; i < nown; i++)
            dev_profile_destroy(&own[i]);
        dev_catalog_destroy(&cat);
        return rc;
    }
    const sim_yaml *mix = sim_yaml_get(s.map, "mix");
    int nmix = 0;
    const dev_profile *specs[64];
    double shares[64];
    if (!mix) {
        sim_keys_put(&s, "mix", sim_keys_find(sim_keys_devices, "mix")->dflt);
        mix = sim_yaml_get(s.map, "mix");
    }
    if (!mix || mix->kind != SIM_YAML_SEQ || mix->n == 0 || mix->n > 64) {
        dev_catalog_destroy(&cat);
        return sim_yaml_fail(mix ? mix : s.map, err,
                             "devices.mix: expected a list of {profile: NAME, share: X}");
    }
    double total = 0;
    for (int i = 0; i < mix->n && !rc; i++) {
        const sim_yaml *m = mix->items[i];
        const sim_yaml *pn = sim_yaml_get(m, "profile"), *sh = sim_yaml_get(m, "share");
        const char *name;
        if (m->kind != SIM_YAML_MAP || !pn || !sh) {
            rc = sim_yaml_fail(m, err, "devices.mix: each entry needs profile and share");
            break;
        }
        if ((rc = sim_yaml_str(pn, "profile", &name, err)) ||
            (rc = sim_yaml_double(sh, "share", 0, 1, &shares[i], err)))
            break;
        specs[i] = NULL;
        for (int k = 0; k < nown; k++)
            if (!strcmp(own[k].name, name)) specs[i] = &own[k];
        if (!specs[i]) specs[i] = dev_catalog_find(&cat, name);
        if (!specs[i]) {
            char mean[DEV_MAX_NAME + 32];
            rc = sim_yaml_fail(pn, err, "devices.mix: no profile '%s' in %s or devices.profiles%s",
                               name, cat_path, profile_hint(name, own, nown, &cat, mean));
            break;
        }
        total += shares[i];
        nmix++;
    }
    if (!rc && fabs(total - 1) > 1e-6)
        rc = sim_yaml_fail(mix, err, "devices.mix: shares sum to %g, not 1", total);
    dev_population pop;
    const dev_profile *pref;
    int npop = 0;
    if (!rc) rc = load_population(sc, &s, &cat, own, nown, &pop, &pref, &npop, err);
    if (rc) {
        for (int i = 0; i < nown; i++)
            dev_profile_destroy(&own[i]);
        dev_catalog_destroy(&cat);
        return rc;
    }
    /* counts by largest remainder over the clients the population leaves, then a seeded shuffle
     * so profiles are not tied to client ids; the population's clients are entry nmix */
    int n = sc->part.n_clients - npop, assigned = 0, counts[64];
    double rem[64];
    for (int i = 0; i < nmix; i++) { /* shares normalized: they may sum to 1 ± 1e-6 */
        double want = shares[i] / total * n;
        counts[i] = (int)floor(want);
        if (counts[i] > n - assigned) counts[i] = n - assigned;
        rem[i] = want - counts[i];
        assigned += counts[i];
    }
    while (assigned < n) {
        int best = 0;
        for (int i = 1; i < nmix; i++)
            if (rem[i] > rem[best]) best = i;
        counts[best]++;
        rem[best] = -1;
        assigned++;
    }
    n = sc->part.n_clients;
    uint32_t *which = sim_xmalloc(sizeof(uint32_t) * (size_t)n);
    int k = 0;
    for (int i = 0; i < nmix; i++)
        for (int j = 0; j < counts[i] && k < n; j++)
            which[k++] = (uint32_t)i;
    while (k < n)
        which[k++] = (uint32_t)nmix;
    sim_rng r;
    sim_rng_seed(&r, sc->spec.seed, SIM_RNG_DEVICES, (uint64_t)1 << 40);
    sim_rng_shuffle_u32(&r, which, (size_t)n);
    sc->devices = sim_xcalloc((size_t)n, sizeof *sc->devices);
    for (int c = 0; c < n; c++) {
        if (which[c] == (uint32_t)nmix) {
            sim_rng_seed(&r, sc->spec.seed, SIM_RNG_PHONES, (uint64_t)c);
            dev_population_draw(&pop, pref, &r, &sc->devices[c], NULL, NULL);
            snprintf(sc->devices[c].name, DEV_MAX_NAME, "phones");
            continue;
        }
        sim_rng_seed(&r, sc->spec.seed, SIM_RNG_DEVICES, (uint64_t)c);
        dev_profile_draw(&sc->devices[c], specs[which[c]], &r);
    }
    for (int c = 0; c < n && !energy; c++) { /* the figures are there, the model is off */
        memset(&sc->devices[c].power, 0, sizeof sc->devices[c].power);
        dev_battery_destroy(&sc->devices[c].battery);
    }
    free(which);
    dev_population_destroy(&pop);
    sc->n_population = npop;
    for (int i = 0; i < nown; i++)
        dev_profile_destroy(&own[i]);
    dev_catalog_destroy(&cat);
    if (sc->spec.fed.charging_only && !energy)
        return sim_yaml_fail(sim_yaml_get(sim_yaml_get(sc->doc, "federation"), "participation"),
                             err,
                             "participation: charging-only needs devices.energy: true (the "
                             "batteries' charging says when a device charges)");
    return load_capacity(sc, &s, &dk, err);
}

int sim_scenario_load(sim_scenario *sc, const char *path, const char *const *sets, int n_sets,
                      sim_err *err)
{
    memset(sc, 0, sizeof *sc);
    snprintf(sc->path, sizeof sc->path, "%s", path);
    int rc = sim_yaml_load_file(&sc->doc, path, err);
    for (int i = 0; i < n_sets && !rc; i++)
        rc = sim_yaml_set(sc->doc, sets[i], err);
    if (rc) goto fail;
    if (sc->doc->kind != SIM_YAML_MAP) {
        rc = sim_yaml_fail(sc->doc, err, "a scenario is a map of settings");
        goto fail;
    }
    section root = {sc->doc, sc->doc, ""};
    /* The name is a file name (runs/NAME-SEED) and header text (metrics.tsv): one that is
     * neither is refused. It defaults to the file's stem, with what a name cannot hold as '_'. */
    char stem[128];
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(stem, sizeof stem, "%.*s", (int)strcspn(base, "."), base);
    for (char *c = stem; *c; c++) {
        char one[2] = {*c, 0};
        if (sim_name_problem(one, 1)) *c = '_';
    }
    const sim_yaml *name = sim_yaml_get(sc->doc, "name");
    const char *nv = stem[0] ? stem : "scenario";
    if (name && (rc = sim_yaml_name(name, "name", sizeof sc->name - 1, &nv, err))) goto fail;
    if (!name) sim_keys_put(&root, "name", nv);
    snprintf(sc->name, sizeof sc->name, "%s", nv);
    /* the sections' names are read below, after a file may have been opened: a misspelled one
     * is reported first */
    static const char *const sections[] = {"dataset",   "partition",   "model",
                                           "algorithm", "federation",  "eval",
                                           "devices",   "compression", "network"};
    for (size_t i = 0; i < SIM_ARRAY_LEN(sections); i++)
        sim_yaml_get(sc->doc, sections[i]);
    sim_top_keys top = {0};
    int natural;
    if ((rc = sim_keys_load(sim_keys_top, &top, &root, NULL, err)) ||
        (rc = sim_yaml_check_keys(sc->doc, err)))
        goto fail;
    sc->spec.seed = (uint64_t)top.seed;
    sc->spec.fed.rounds = top.rounds;
    sc->spec.fed.max_time = top.max_time;
    int cost_only = top.cost_only;
    if ((rc = load_dataset(sc, &root, &natural, err)) ||
        (rc = load_partition(sc, &root, natural, cost_only, err)))
        goto fail;
    if ((rc = read_key(sim_keys_top, "model", &top, &root, NULL, err))) goto fail;
    snprintf(sc->model, sizeof sc->model, "%s", top.model);
    if ((rc = nn_arch_build(&sc->arch, sc->model, sc->train.c, sc->train.h, sc->train.w,
                            sc->train.classes, err))) {
        sim_yaml *m = sim_yaml_get(sc->doc, "model");
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        if (m) sim_yaml_fail(m, err, "model: %s", why);
        goto fail;
    }
    if ((rc = load_algorithm(sc, err)) || (rc = load_federation(sc, &root, err)) ||
        (rc = load_eval(sc, &root, err)) || (rc = load_devices(sc, &root, err)) ||
        (rc = sim_scenario_load_compression(sc, &root, err)) ||
        (rc = sim_scenario_load_network(sc, &root, err)))
        goto fail;
    if ((rc = sim_yaml_check_used(sc->doc, err))) goto fail;
    sc->spec.name = sc->name;
    sc->spec.env = (fl_env){.cfg = &sc->cfg,
                            .arch = &sc->arch,
                            .train = &sc->train,
                            .test = &sc->test,
                            .part = &sc->part,
                            .seed = sc->spec.seed,
                            .cost_only = cost_only,
                            .capacity = sc->capacity,
                            .comp_up = &sc->comp_up,
                            .comp_down = &sc->comp_down};
    sc->spec.n_clients = sc->part.n_clients;
    sc->spec.devices = sc->devices;
    return SIM_OK;
fail:
    if (rc == SIM_EINVAL && err && sc->doc) sim_scenario_hint(sc->doc, err);
    sim_scenario_destroy(sc);
    return rc;
}

void sim_scenario_destroy(sim_scenario *sc)
{
    if (!sc) return;
    if (sc->devices)
        for (int c = 0; c < sc->part.n_clients; c++)
            dev_profile_destroy(&sc->devices[c]);
    free(sc->devices);
    free(sc->capacity);
    free(sc->predicted_s);
    free(sc->predicted_j);
    sim_sel_config_destroy(&sc->sel);
    free(sc->net.groups);
    free(sc->net.group_of);
    fl_config_destroy(&sc->cfg);
    nn_partition_destroy(&sc->part);
    nn_dataset_destroy(&sc->train);
    nn_dataset_destroy(&sc->test);
    sim_yaml_free(sc->doc);
    memset(sc, 0, sizeof *sc);
}

/* FNV-1a of n bytes at p, folded into the running digest h: hashing each piece and then the
 * pair keeps one function (sim_checkpoint_hash) for every digest of the run. */
static uint64_t fold(uint64_t h, const void *p, size_t n)
{
    uint64_t pair[2] = {h, sim_checkpoint_hash(p, n)};
    return sim_checkpoint_hash(pair, sizeof pair);
}

static uint64_t fold_dataset(uint64_t h, const nn_dataset *d)
{
    int shape[5] = {d->n, d->c, d->h, d->w, d->classes};
    h = fold(h, shape, sizeof shape);
    h = fold(h, d->x, sizeof(float) * (size_t)d->n * (size_t)nn_dataset_features(d));
    h = fold(h, d->y, sizeof(int32_t) * (size_t)d->n);
    if (d->group) h = fold(h, d->group, sizeof(int32_t) * (size_t)d->n);
    return h;
}

int sim_scenario_digest(const sim_scenario *sc, uint64_t *text, uint64_t *env, sim_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return sim_fail(err, SIM_EIO, NULL, 0, 0, "cannot print the resolved scenario");
    int rc = sim_yaml_write(sc->doc, f, err);
    if (fclose(f) && !rc)
        rc = sim_fail(err, SIM_EIO, NULL, 0, 0, "cannot print the resolved scenario: %s",
                      strerror(errno));
    if (!rc) *text = sim_checkpoint_hash(buf, len);
    free(buf);
    if (rc) return rc;
    const nn_partition *p = &sc->part;
    size_t n_params = sc->arch.layout.n_params;
    uint64_t h = fold(0, &n_params, sizeof n_params);
    h = fold_dataset(h, &sc->train);
    h = fold_dataset(h, &sc->test);
    h = fold(h, p->n, sizeof(int) * (size_t)p->n_clients);
    h = fold(h, p->n_test, sizeof(int) * (size_t)p->n_clients);
    for (int k = 0; k < p->n_clients; k++) {
        if (p->idx) h = fold(h, p->idx[k], sizeof(int32_t) * (size_t)p->n[k]); /* sizes: counts */
        if (p->n_test[k]) h = fold(h, p->test_idx[k], sizeof(int32_t) * (size_t)p->n_test[k]);
    }
    for (int k = 0; p->val_idx && k < p->n_clients; k++) { /* none: the hash it had before */
        h = fold(h, &p->n_val[k], sizeof(int));
        if (p->n_val[k]) h = fold(h, p->val_idx[k], sizeof(int32_t) * (size_t)p->n_val[k]);
    }
    if (sc->capacity) h = fold(h, sc->capacity, sizeof(double) * (size_t)p->n_clients);
    *env = h;
    return SIM_OK;
}
