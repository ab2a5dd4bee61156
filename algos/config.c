/* algos/config.c -- reading the `algorithm:` map: the keys every algorithm shares, then the chosen
 * algorithm's section (and any other present) through its key table, then the checks its flags
 * ask for. Nothing here knows an algorithm by name: the registry (fl_algos, fl_sections) says
 * which exist, and each algorithm's file what its settings are. */
#include "algos/algo.h"

#include <stdlib.h>
#include <string.h>

static const char *const WEIGHTINGS[] = {"samples", "uniform", NULL};

#define K(field) .offset = offsetof(fl_config, field)
/* The shared keys after the name, in reading order */
static const sim_key COMMON[] = {
        {"local_epochs", SIM_KEY_INT, K(local_epochs), .dflt = "1", .lo = 0, .hi = 100000,
         .doc = "passes over the client's samples per job (when `local_steps` is 0)"},
        {"local_steps", SIM_KEY_INT, K(local_steps), .dflt = "0", .lo = 0, .hi = 100000000,
         .doc = "if > 0: exactly this many SGD steps per job instead of `local_epochs`"},
        {"batch_size", SIM_KEY_INT, K(batch_size), .dflt = "32", .lo = 1, .hi = 65536,
         .doc = "minibatch size"},
        {"lr", SIM_KEY_DOUBLE, K(lr), .dflt = "0.05", .lo = 0, .hi = 1e3,
         .doc = "client learning rate"},
        {"momentum", SIM_KEY_DOUBLE, K(momentum), .dflt = "0", .lo = 0, .hi = 1,
         .doc = "SGD momentum (restarted every job unless persistent_momentum)"},
        {"weight_decay", SIM_KEY_DOUBLE, K(weight_decay), .dflt = "0", .lo = 0, .hi = 1,
         .doc = "L2 weight decay"},
        {"clip", SIM_KEY_DOUBLE, K(clip), .dflt = "0", .lo = 0, .hi = 1e9,
         .doc = "client gradient-norm clip (0: none)"},
        {"persistent_momentum", SIM_KEY_BOOL, K(persistent_momentum), .dflt = "false",
         .doc = "`true`: the model's momentum stays with the client from one of its jobs to the "
                "next, in its private state (a model-sized buffer per client: the optimizers of "
                "pFedGate's released code, which its learning rates were tuned with); `false`: it "
                "restarts at zero every job. Kept by the algorithms marked *keeps momentum* under "
                "`name` (an algorithm with a momentum setting of its own reads that instead); "
                "needs `momentum` > 0"},
        {"lr_decay", SIM_KEY_DOUBLE, K(lr_decay), .dflt = "1", .lo = 0, .hi = 10,
         .doc = "client lr multiplied by this every round"},
        {"mu", SIM_KEY_DOUBLE, K(mu), .dflt = "0.01", .lo = 0, .hi = 1e3,
         .doc = "FedProx's proximal weight"},
        {"server_lr", SIM_KEY_DOUBLE, K(server_lr), .dflt = "1", .lo = 0, .hi = 1e3,
         .doc = "server step on the weighted mean update (1: plain averaging)"},
        {"weighting", SIM_KEY_CHOICE, K(uniform), .dflt = "samples", .words = WEIGHTINGS,
         .doc = "weight each update by the client's sample count, or `uniform` (1/K, as SpaFL's "
                "paper does), in the algorithms that average updates"},
        {0},
};
const sim_key *const fl_keys_common = COMMON;
static const sim_key NAME = {"name",           SIM_KEY_STRING,
                             K(name),          .size = sizeof(((fl_config *)0)->name),
                             .dflt = "fedavg", .doc = "the algorithm: one of those listed above"};
#undef K

int fl_keys_print(FILE *f, const char *filter, int markdown)
{
    sim_key both[SIM_ARRAY_LEN(COMMON) + 1] = {NAME};
    memcpy(both + 1, COMMON, sizeof COMMON);
    /* the intro: every algorithm `name` may pick, with what it is */
    char *intro = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&intro, &len);
    if (m) {
        fputs("The keys every algorithm shares; `name` picks the algorithm:\n", m);
        for (int i = 0; fl_algos[i]; i++)
            fprintf(m, "\n- `%s`: %s%s", fl_algos[i]->name,
                    fl_algos[i]->doc ? fl_algos[i]->doc : fl_algos[i]->summary,
                    fl_algos[i]->flags & FL_KEEPS_MOMENTUM ? " (*keeps momentum*)" : "");
        fputs("\n\nIts own settings are in its section below, `algorithm.SECTION`.", m);
    }
    if (!m || fclose(m)) { /* no memory: the keys without their intro */
        free(intro);
        intro = NULL;
    }
    int n = sim_keys_print(f, "algorithm", intro, both, filter, markdown);
    free(intro);
    for (int i = 0; fl_sections[i]; i++) {
        char pre[64];
        snprintf(pre, sizeof pre, "algorithm.%s", fl_sections[i]->name);
        n += sim_keys_print(f, pre, fl_sections[i]->doc, fl_sections[i]->keys, filter, markdown);
    }
    return n;
}

/* names of the algorithms whose flags hold all of mask, joined by ", " */
static void names_with(unsigned mask, char *list, size_t n)
{
    list[0] = 0;
    for (int i = 0; fl_algos[i]; i++)
        if ((fl_algos[i]->flags & mask) == mask)
            snprintf(list + strlen(list), n - strlen(list), "%s%s", list[0] ? ", " : "",
                     fl_algos[i]->name);
}

static int check_flags(const fl_config *c, const fl_algo *a, const sim_yaml *map, sim_err *err)
{
    if (c->local_epochs == 0 && c->local_steps == 0)
        return sim_yaml_fail(map, err, "algorithm: local_epochs and local_steps are both 0");
    if (c->persistent_momentum && !(a->flags & FL_KEEPS_MOMENTUM)) {
        char list[256];
        names_with(FL_KEEPS_MOMENTUM, list, sizeof list);
        return sim_yaml_fail(sim_yaml_get(map, "persistent_momentum"), err,
                             "persistent_momentum: %s restarts its momentum every job (kept by "
                             "%s; an algorithm's own momentum setting is in its section)",
                             c->name, list);
    }
    if (c->persistent_momentum && c->momentum <= 0)
        return sim_yaml_fail(sim_yaml_get(map, "persistent_momentum"), err,
                             "persistent_momentum: true needs momentum > 0");
    if ((a->flags & FL_PLAIN_SGD) && (c->momentum > 0 || c->weight_decay > 0)) {
        const char *key = c->momentum > 0 ? "momentum" : "weight_decay";
        return sim_yaml_fail(sim_yaml_get(map, key), err,
                             "%s: %s's clients take plain SGD steps (momentum and weight_decay "
                             "must be 0)",
                             key, c->name);
    }
    if ((a->flags & FL_NEEDS_BATCH2) && c->batch_size < 2)
        return sim_yaml_fail(sim_yaml_get(map, "batch_size"), err,
                             "batch_size: %s's model has batch norm, which needs batches of two "
                             "samples or more (it skips 1-sample batches: with batch_size 1 "
                             "nothing would train)",
                             c->name);
    return SIM_OK;
}

int fl_config_read(fl_config *c, sim_yaml *doc, const char *path, const sim_key_ctx *ctx,
                   sim_err *err)
{
    memset(c, 0, sizeof *c);
    sim_keys_map s = {doc, sim_keys_at(doc, path), path};
    const char *last = strrchr(path, '.') ? strrchr(path, '.') + 1 : path;
    int rc = sim_keys_need_map(&s, path[0] ? last : "algorithm", err);
    if (rc || (rc = sim_keys_read(&NAME, c, &s, NULL, err))) return rc;
    const fl_algo *a = fl_algo_find(c->name);
    if (!a) {
        char list[256] = "";
        for (int i = 0; fl_algos[i]; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     fl_algos[i]->name);
        const char *names[64], *near;
        int n = 0;
        for (; fl_algos[n] && n < 63; n++)
            names[n] = fl_algos[n]->name;
        names[n] = NULL;
        if ((near = sim_keys_closest(c->name, names)))
            return sim_yaml_fail(sim_yaml_get(s.map, "name"), err,
                                 "algorithm: unknown name '%s'; did you mean '%s'? (known: %s)",
                                 c->name, near, list);
        return sim_yaml_fail(sim_yaml_get(s.map, "name"), err,
                             "algorithm: unknown name '%s' (known: %s)", c->name, list);
    }
    if ((rc = sim_keys_load(COMMON, c, &s, NULL, err)) || (rc = check_flags(c, a, s.map, err)))
        return rc;
    sim_key_ctx kc = ctx ? *ctx : (sim_key_ctx){0};
    kc.algorithm = c->name;
    kc.parent = c;
    kc.parent_map = s.map;
    for (int i = 0; fl_sections[i] && !rc; i++) {
        const fl_section *sec = fl_sections[i];
        if (sec != a->section && !sim_yaml_get(s.map, sec->name)) continue;
        char pre[128];
        sim_keys_map m = sim_keys_sub(&s, sec->name, pre, sizeof pre);
        void *block = c->blocks[i] = sim_xcalloc(1, sec->size);
        if ((rc = sim_keys_need_map(&m, sec->name, err)) ||
            (rc = sim_keys_load(sec->keys, block, &m, &kc, err)))
            break;
        kc.config = block;
        if (sec->check) rc = sec->check(block, m.map, &kc, err);
        if (sec == a->section) c->own = block;
    }
    return rc;
}

int fl_config_load(fl_config *c, const char *text, const sim_key_ctx *ctx, sim_err *err)
{
    sim_yaml *doc = NULL;
    sim_key_ctx dflt = {.rounds = 100, .clients = 10};
    memset(c, 0, sizeof *c);
    int rc = sim_yaml_load_string(&doc, text, "config", err);
    if (!rc) rc = fl_config_read(c, doc, "", ctx ? ctx : &dflt, err);
    if (!rc) rc = sim_yaml_check_used(doc, err);
    sim_yaml_free(doc);
    return rc;
}

void fl_config_destroy(fl_config *c)
{
    if (!c) return;
    for (int i = 0; i < FL_MAX_SECTIONS; i++)
        free(c->blocks[i]);
    memset(c->blocks, 0, sizeof c->blocks);
    c->own = NULL;
}

const void *fl_config_block(const fl_config *c, const fl_section *s)
{
    for (int i = 0; fl_sections[i]; i++)
        if (fl_sections[i] == s) return c->blocks[i];
    return NULL;
}

uint64_t fl_stream_id(const fl_stream *s)
{
    if (s->id) return s->id;
    /* FNV-1a of the tag, moved above 2^32: the core purposes (sim/rng.h) are small numbers */
    uint64_t h = 14695981039346656037ull;
    for (const char *p = s->tag; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h | (uint64_t)1 << 32;
}
