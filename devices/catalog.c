/* devices/catalog.c -- reading named profiles from YAML (see catalog.h). */
#include "devices/catalog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dev_catalog_from_yaml(dev_catalog *c, const sim_yaml *map, sim_err *err)
{
    memset(c, 0, sizeof *c);
    if (map->kind != SIM_YAML_MAP)
        return sim_yaml_fail(map, err, "profiles: expected a map of name: {compute: ..., ...}");
    c->profiles = sim_xcalloc((size_t)map->n, sizeof *c->profiles);
    for (int i = 0; i < map->n; i++) {
        const char *name = map->keys[i];
        /* a profile's name is clients.tsv's device column */
        int rc = sim_yaml_key_name(map, i, "profile name", DEV_MAX_NAME - 1, err);
        for (int j = 0; !rc && j < i; j++)
            if (!strcmp(map->keys[j], name))
                rc = sim_fail(err, SIM_EINVAL, map->file, map->key_line[i], map->key_col[i],
                              "profile '%s' is defined twice (first on line %d)", name,
                              map->key_line[j]);
        /* mark the key used: the profiles map is ours, every key in it is a profile */
        const sim_yaml *node = rc ? NULL : sim_yaml_get(map, name);
        if (!rc) rc = dev_profile_from_yaml(&c->profiles[i], node, NULL, err);
        if (rc) {
            dev_catalog_destroy(c);
            return rc;
        }
        snprintf(c->profiles[i].name, sizeof c->profiles[i].name, "%s", name);
        c->n = i + 1;
    }
    return SIM_OK;
}

int dev_catalog_load(dev_catalog *c, const char *path, sim_err *err)
{
    memset(c, 0, sizeof *c);
    sim_yaml *root;
    int rc = sim_yaml_load_file(&root, path, err);
    if (rc) return rc;
    const sim_yaml *profiles = sim_yaml_get(root, "profiles");
    if (root->kind != SIM_YAML_MAP || !profiles)
        rc = sim_yaml_fail(root, err, "a device catalog is a map with 'profiles:'");
    if (!rc) rc = dev_catalog_from_yaml(c, profiles, err);
    if (!rc) rc = sim_yaml_check_used(root, err);
    if (rc) dev_catalog_destroy(c);
    sim_yaml_free(root);
    return rc;
}

const dev_profile *dev_catalog_find(const dev_catalog *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->profiles[i].name, name)) return &c->profiles[i];
    return NULL;
}

void dev_catalog_destroy(dev_catalog *c)
{
    if (!c) return;
    for (int i = 0; i < c->n; i++)
        dev_profile_destroy(&c->profiles[i]);
    free(c->profiles);
    memset(c, 0, sizeof *c);
}
