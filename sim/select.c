/* sim/select.c -- the selection policies' registry, their keys (`federation.selection:`, read as
 * `algorithm:` is: a name, then the chosen policy's section and any other present) and the
 * helpers policy files share (sim/select.h).
 */
#include "sim/select.h"

#include <stdlib.h>
#include <string.h>

const sim_sel_policy *const sim_sel_policies[] = {
        &sim_sel_uniform, &sim_sel_oort, &sim_sel_poc, &sim_sel_fastest, &sim_sel_available, NULL,
};

const sim_sel_policy *sim_sel_find(const char *name)
{
    for (int i = 0; sim_sel_policies[i]; i++)
        if (!strcmp(sim_sel_policies[i]->name, name)) return sim_sel_policies[i];
    return NULL;
}

typedef struct sel_name {
    char name[32];
} sel_name;

const sim_key sim_sel_keys[] = {
        {"name", SIM_KEY_STRING, offsetof(sel_name, name), sizeof(((sel_name *)0)->name),
         .dflt = "uniform", .doc = "the policy: one of those listed above"},
        {0},
};

static void policy_list(char *list, size_t n)
{
    list[0] = 0;
    for (int i = 0; sim_sel_policies[i]; i++)
        snprintf(list + strlen(list), n - strlen(list), "%s%s", i ? ", " : "",
                 sim_sel_policies[i]->name);
}

int sim_sel_config_read(sim_sel_config *c, sim_keys_map *s, const sim_key_ctx *ctx, sim_err *err)
{
    memset(c, 0, sizeof *c);
    if (!s->map) return SIM_OK; /* none given: uniform, and the resolved scenario says nothing */
    sel_name nm = {{0}};
    int rc = sim_keys_need_map(s, "selection", err);
    if (rc || (rc = sim_keys_read(&sim_sel_keys[0], &nm, s, NULL, err))) return rc;
    const sim_sel_policy *p = sim_sel_find(nm.name);
    if (!p) {
        char list[256];
        policy_list(list, sizeof list);
        const char *names[SIM_SEL_MAX + 1], *near;
        int n = 0;
        for (; sim_sel_policies[n]; n++)
            names[n] = sim_sel_policies[n]->name;
        names[n] = NULL;
        if ((near = sim_keys_closest(nm.name, names)))
            return sim_yaml_fail(sim_yaml_get(s->map, "name"), err,
                                 "selection: unknown name '%s'; did you mean '%s'? (known: %s)",
                                 nm.name, near, list);
        return sim_yaml_fail(sim_yaml_get(s->map, "name"), err,
                             "selection: unknown name '%s' (known: %s)", nm.name, list);
    }
    c->policy = p;
    sim_key_ctx kc = ctx ? *ctx : (sim_key_ctx){0};
    for (int i = 0; sim_sel_policies[i] && !rc; i++) {
        const sim_sel_policy *q = sim_sel_policies[i];
        if (!q->keys || (q != p && !sim_yaml_get(s->map, q->name))) continue;
        char pre[128];
        sim_keys_map m = sim_keys_sub(s, q->name, pre, sizeof pre);
        void *block = c->blocks[i] = sim_xcalloc(1, q->size);
        if ((rc = sim_keys_need_map(&m, q->name, err)) ||
            (rc = sim_keys_load(q->keys, block, &m, &kc, err)))
            break;
        if (q->check) rc = q->check(block, m.map, &kc, err);
        if (q == p) c->cfg = block;
    }
    return rc;
}

int sim_sel_config_load(sim_sel_config *c, const char *text, const sim_key_ctx *ctx, sim_err *err)
{
    sim_yaml *doc = NULL;
    memset(c, 0, sizeof *c);
    int rc = sim_yaml_load_string(&doc, text, "selection", err);
    if (!rc) {
        sim_keys_map s = {doc, doc, ""};
        rc = sim_sel_config_read(c, &s, ctx, err);
    }
    if (!rc) rc = sim_yaml_check_used(doc, err);
    sim_yaml_free(doc);
    return rc;
}

void sim_sel_config_destroy(sim_sel_config *c)
{
    if (!c) return;
    for (int i = 0; i < SIM_SEL_MAX; i++)
        free(c->blocks[i]);
    memset(c, 0, sizeof *c);
}

int sim_sel_keys_print(FILE *f, const char *filter, int markdown)
{
    char *intro = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&intro, &len);
    if (m) {
        fputs("Which of the clients that can take a job now (online, idle, able to hold the "
              "model) get one: a sync round's ceil(per_round × over_commit), or an async run's "
              "idle slots. Without this map every run selects `uniform`ly. `name` picks the "
              "policy:\n",
              m);
        for (int i = 0; sim_sel_policies[i]; i++)
            fprintf(m, "\n- `%s`: %s", sim_sel_policies[i]->name, sim_sel_policies[i]->doc);
        fputs("\n\nIts own settings are in its section below, `federation.selection.NAME`.", m);
    }
    if (!m || fclose(m)) {
        free(intro);
        intro = NULL;
    }
    int n = sim_keys_print(f, "federation.selection", intro, sim_sel_keys, filter, markdown);
    free(intro);
    for (int i = 0; sim_sel_policies[i]; i++) {
        if (!sim_sel_policies[i]->keys) continue;
        char pre[96];
        snprintf(pre, sizeof pre, "federation.selection.%s", sim_sel_policies[i]->name);
        n += sim_keys_print(f, pre, NULL, sim_sel_policies[i]->keys, filter, markdown);
    }
    return n;
}

static int cmp_item(const void *a, const void *b)
{
    const sim_sel_item *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->tie != y->tie) return x->tie < y->tie ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

void sim_sel_sort(sim_sel_item *it, int n)
{
    qsort(it, (size_t)n, sizeof *it, cmp_item);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int sim_sel_take(const sim_sel_item *it, int k, int32_t *out)
{
    for (int i = 0; i < k; i++)
        out[i] = it[i].id;
    qsort(out, (size_t)k, sizeof *out, cmp_i32);
    return k;
}
