/* sim/scenario_net.c -- a scenario's `network:` section (its keys are in scenario_keys.c): the
 * server's link and the groups, and which clients sit behind each group, into sc->net, which
 * the engine's shared links (sim/net.h) are built from.
 *
 *   network:
 *     server: {up: 10 Gbps, down: 10 Gbps}
 *     groups:
 *       - {name: cell, down: 100 Mbps, up: 50 Mbps, devices: [phone-low], share: 0.5}
 *
 * A group takes share of the clients whose device profile it lists (any client without a list)
 * that no earlier group took, drawn in a seeded order (stream SIM_RNG_NET, the group's index),
 * the count rounded to the nearest. Or `assign: FILE` names every group's clients: a TSV (its
 * path relative to the scenario's folder) with the header `client<TAB>group` and a line per
 * client behind a group (client ids from 0; clients it does not list are behind none), the
 * groups then without devices or share. Without `network:` nothing is read or written into the
 * resolved scenario, so a run without it is the run it was before the section existed. A
 * network whose links are all unlimited is no network (spec.net stays NULL).
 */
#include "sim/rng.h"
#include "sim/scenario.h"
#include "sim/scenario_keys.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_GROUPS = 1024 };

/* assigned: `network.assign` gives the groups' clients (its node), so no draw. */
static int load_group(sim_scenario *sc, sim_keys_map *gs, int g, uint32_t *pool,
                      const sim_yaml *assigned, sim_err *err)
{
    for (int i = 0; assigned && i < 2; i++) {
        static const char *const drawn[] = {"devices", "share"};
        if (sim_yaml_get(gs->map, drawn[i]))
            return sim_yaml_fail_key(gs->map, drawn[i], err,
                                     "%s: the groups' clients come from network.assign (%s:%d)",
                                     drawn[i], assigned->file, assigned->line);
    }
    sim_net_config *net = &sc->net;
    sim_link_keys k = {.up = INFINITY, .down = INFINITY};
    /* with the file, share (which has a default) is not read, so not written either */
    int rc = SIM_OK;
    if (!assigned) rc = sim_keys_load(sim_keys_network_group, &k, gs, NULL, err);
    for (int i = 0; assigned && i < 3 && !rc; i++) {
        static const char *const read[] = {"name", "up", "down"};
        rc = sim_keys_read(sim_keys_find(sim_keys_network_group, read[i]), &k, gs, NULL, err);
    }
    if (rc) return rc;
    if (!k.name[0]) return sim_yaml_fail(gs->map, err, "network.groups: each group needs a name");
    for (int i = 0; i < g; i++)
        if (!strcmp(net->groups[i].name, k.name))
            return sim_yaml_fail_key(gs->map, "name", err, "name: a second group '%s'", k.name);
    sim_net_group *gr = &net->groups[g];
    snprintf(gr->name, sizeof gr->name, "%s", k.name);
    gr->up = k.up;
    gr->down = k.down;
    if (assigned) return SIM_OK;
    /* the clients it may take: the listed devices' (all without a list), not in a group yet */
    int n = sc->part.n_clients, m = 0;
    const sim_yaml *dl = sim_yaml_get(gs->map, "devices");
    if (dl && (dl->kind != SIM_YAML_SEQ || dl->n == 0))
        return sim_yaml_fail(dl, err, "devices: expected a list of device profile names");
    for (int i = 0; dl && i < dl->n; i++) {
        const char *name;
        if ((rc = sim_yaml_str(dl->items[i], "devices", &name, err))) return rc;
        int found = 0;
        for (int c = 0; c < n && !found; c++)
            found = !strcmp(sc->devices[c].name, name);
        if (!found)
            return sim_yaml_fail(dl->items[i], err,
                                 "devices: no client has the device profile '%s' (devices.mix)",
                                 name);
    }
    for (int c = 0; c < n; c++) {
        if (net->group_of[c] >= 0) continue;
        int take = !dl;
        for (int i = 0; dl && i < dl->n && !take; i++)
            take = !strcmp(sc->devices[c].name, dl->items[i]->value);
        if (take) pool[m++] = (uint32_t)c;
    }
    sim_rng r;
    sim_rng_seed(&r, sc->spec.seed, SIM_RNG_NET, (uint64_t)g);
    sim_rng_shuffle_u32(&r, pool, (size_t)m);
    int count = (int)floor(k.share * m + 0.5);
    for (int i = 0; i < count; i++)
        net->group_of[pool[i]] = g;
    return SIM_OK;
}

/* An error at line (column col) of the assignment file path, which node named. */
static int assign_fail(sim_err *err, const char *path, int line, int col, const sim_yaml *node,
                       const char *what, const char *detail)
{
    return sim_fail(err, SIM_EINVAL, path, line, col, "network.assign: %s%s (named at %s:%d:%d)",
                    what, detail, node->file, node->line, node->col);
}

/* The clients behind each group, from the TSV node names (groups known). */
static int load_assign(sim_scenario *sc, sim_yaml *node, sim_err *err)
{
    sim_net_config *net = &sc->net;
    const char *raw;
    int rc = sim_yaml_str(node, "assign", &raw, err);
    if (rc) return rc;
    char path[512], detail[160];
    sim_scenario_resolve_path(path, sizeof path, node, raw);
    FILE *f = fopen(path, "r");
    if (!f)
        return sim_yaml_fail(node, err, "network.assign: '%s': cannot open: %s", path,
                             strerror(errno));
    int *first = sim_xcalloc((size_t)sc->part.n_clients, sizeof(int)); /* line naming a client */
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, header = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (len == 0 || line[0] == '#') continue;
        if (!header) {
            header = 1;
            if (strcmp(line, "client\tgroup"))
                rc = assign_fail(err, path, lineno, 1, node,
                                 "expected the header 'client<TAB>group'", "");
            continue;
        }
        char *tab = strchr(line, '\t');
        if (!tab || strchr(tab + 1, '\t')) {
            rc = assign_fail(err, path, lineno, 1, node,
                             "expected two tab-separated fields: client, group", "");
            break;
        }
        *tab = 0;
        long c = -1;
        if (line[0] && strspn(line, "0123456789") == strlen(line) && strlen(line) < 10)
            c = strtol(line, NULL, 10);
        if (c < 0 || c >= sc->part.n_clients) {
            snprintf(detail, sizeof detail, " (the scenario's clients are 0 to %d)",
                     sc->part.n_clients - 1);
            char what[96];
            snprintf(what, sizeof what, "client '%.40s' is not a client id", line);
            rc = assign_fail(err, path, lineno, 1, node, what, detail);
            break;
        }
        int g = 0;
        while (g < net->n_groups && strcmp(net->groups[g].name, tab + 1))
            g++;
        if (g == net->n_groups) {
            char what[96];
            snprintf(what, sizeof what, "no group named '%.40s' in network.groups", tab + 1);
            rc = assign_fail(err, path, lineno, (int)(tab - line) + 2, node, what, "");
            break;
        }
        if (first[c]) {
            char what[96];
            snprintf(what, sizeof what, "client %ld a second time (line %d)", c, first[c]);
            rc = assign_fail(err, path, lineno, 1, node, what, "");
            break;
        }
        first[c] = lineno;
        net->group_of[c] = g;
    }
    if (!rc && ferror(f))
        rc = sim_yaml_fail(node, err, "network.assign: '%s': cannot read: %s", path,
                           strerror(errno));
    if (!rc && !header)
        rc = assign_fail(err, path, lineno, 0, node, "no header 'client<TAB>group'", "");
    free(line);
    free(first);
    fclose(f);
    return rc;
}

int sim_scenario_load_network(sim_scenario *sc, sim_keys_map *root, sim_err *err)
{
    if (!sim_yaml_get(root->map, "network")) return SIM_OK;
    char pre[64], pre2[64];
    sim_keys_map s = sim_keys_sub(root, "network", pre, sizeof pre);
    int rc = sim_keys_need_map(&s, "network", err);
    if (rc) return rc;
    sim_net_config *net = &sc->net;
    sim_keys_map ss = sim_keys_sub(&s, "server", pre2, sizeof pre2);
    sim_link_keys server = {.up = INFINITY, .down = INFINITY};
    if ((rc = sim_keys_need_map(&ss, "server", err)) ||
        (rc = sim_keys_load(sim_keys_network_server, &server, &ss, NULL, err)))
        return rc;
    net->server_up = server.up;
    net->server_down = server.down;
    const sim_yaml *gl = sim_yaml_get(s.map, "groups");
    if (gl && (gl->kind != SIM_YAML_SEQ || gl->n > MAX_GROUPS))
        return sim_yaml_fail(gl, err, "groups: expected a list of at most %d groups", MAX_GROUPS);
    int n = sc->part.n_clients, ng = gl ? gl->n : 0;
    net->groups = sim_xcalloc((size_t)(ng > 0 ? ng : 1), sizeof *net->groups);
    net->group_of = sim_xmalloc(sizeof(int32_t) * (size_t)n);
    for (int c = 0; c < n; c++)
        net->group_of[c] = -1;
    uint32_t *pool = sim_xmalloc(sizeof(uint32_t) * (size_t)n);
    sim_yaml *assign = sim_yaml_get(s.map, "assign");
    for (int g = 0; g < ng && !rc; g++) {
        char gp[96];
        snprintf(gp, sizeof gp, "%s.groups.%d", pre, g);
        sim_keys_map gs = {root->doc, gl->items[g], gp};
        if (gl->items[g]->kind != SIM_YAML_MAP)
            rc = sim_yaml_fail(gl->items[g], err,
                               "groups: each group is a map {name, up, down, devices, share}");
        else
            rc = load_group(sc, &gs, g, pool, assign, err);
    }
    free(pool);
    if (rc) return rc;
    net->n_groups = ng;
    if (assign && (rc = load_assign(sc, assign, err))) return rc;
    int finite = isfinite(net->server_up) || isfinite(net->server_down);
    for (int g = 0; g < ng; g++)
        finite |= isfinite(net->groups[g].up) || isfinite(net->groups[g].down);
    sc->spec.net = finite ? net : NULL;
    return SIM_OK;
}
