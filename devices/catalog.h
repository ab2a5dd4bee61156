/* devices/catalog.h -- named device profiles: the built-in catalog (devices/catalog.yaml) and any
 * file of the same shape a scenario points at.
 *
 * A catalog file is a YAML map with one key, `profiles`, mapping each name to a profile
 * (profile.h): {profiles: {phone-low: {compute: 6 GFLOPS, ...}, rpi4: {...}}}. Names keep the
 * file's order, are unique, and are names as sim_name_problem defines them, at most
 * DEV_MAX_NAME - 1 bytes (a name is clients.tsv's device column). A catalog holds tens of
 * profiles, so lookup is a linear scan.
 */
#ifndef DEV_CATALOG_H
#define DEV_CATALOG_H

#include "devices/profile.h"
#include "sim/base.h"
#include "sim/yaml.h"

typedef struct dev_catalog {
    dev_profile *profiles; /* n of them, in file order (owned) */
    int n;
} dev_catalog;

/* Read a catalog file. On error c is zeroed and err names file:line:col. */
int dev_catalog_load(dev_catalog *c, const char *path, sim_err *err);
/* The same from an already parsed `profiles` map (a scenario's inline profiles); every key of
 * map must be a profile. */
int dev_catalog_from_yaml(dev_catalog *c, const sim_yaml *map, sim_err *err);
/* The profile called name, or NULL. The pointer lives as long as c. */
const dev_profile *dev_catalog_find(const dev_catalog *c, const char *name);
/* Free the profiles and zero c. Accepts NULL. */
void dev_catalog_destroy(dev_catalog *c);

#endif /* DEV_CATALOG_H */
