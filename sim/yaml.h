/* sim/yaml.h -- YAML documents as trees that remember where every node came from.
 *
 * libyaml parses (we never parse YAML by hand); this module turns its event stream into a small
 * tree of maps, sequences and scalars, each with its file, line and column, so that every error a
 * scenario or catalog file causes can name its position: "x.yaml:12:9: bandwidth: '20' has no unit
 * (use bps, kbps, Mbps or Gbps)". Readers look keys up with sim_yaml_get, which marks them used;
 * sim_yaml_check_used then reports the first key nobody asked for, so a typo is an error, not a
 * silently ignored setting. --set overrides edit the tree before it is read, and the tree can be
 * written back out (the resolved scenario in a run folder).
 * A leaf header: any layer may include it.
 */
#ifndef SIM_YAML_H
#define SIM_YAML_H

#include "sim/base.h"
#include "sim/units.h"

#include <stdio.h>

typedef enum sim_yaml_kind { SIM_YAML_SCALAR, SIM_YAML_MAP, SIM_YAML_SEQ } sim_yaml_kind;

typedef struct sim_yaml sim_yaml;
struct sim_yaml {
    sim_yaml_kind kind;
    char *value;      /* scalar text (owned), NULL for maps and sequences */
    char **keys;      /* map keys (owned), n of them, in file order */
    sim_yaml **items; /* map values or sequence items (owned), n of them */
    int n;
    const char *file;        /* borrowed from the document (the root owns the string) */
    int line, col;           /* 1-based position of the node (for a map value: of the value) */
    int *key_line, *key_col; /* maps: position of each key */
    unsigned char *used;     /* maps: 1 once sim_yaml_get asked for that key */
    char *file_owned;        /* root only: the file name every node borrows */
    int quoted;              /* scalars: quoted (or a | block) in the source: written back quoted */
};

/* Parse a file (or a string; `name` stands in for the file in messages). Anchors, aliases and
 * multiple documents are rejected. On error *root is NULL and err names file:line:col. */
int sim_yaml_load_file(sim_yaml **root, const char *path, sim_err *err);
int sim_yaml_load_string(sim_yaml **root, const char *text, const char *name, sim_err *err);
void sim_yaml_free(sim_yaml *root);

/* The value of key in map (NULL when absent or when map is not a map); marks the key used. */
sim_yaml *sim_yaml_get(const sim_yaml *map, const char *key);
/* SIM_EINVAL at the first key of map (recursively through maps and sequences, in file order)
 * that no reader asked for: "unknown key 'bandwith'" */
int sim_yaml_check_used(const sim_yaml *node, sim_err *err);
/* The map under node holding the key the last unknown-key error named (its index in *index),
 * and that map's dotted path from node appended to path (n bytes, "" for node itself; a
 * sequence item by its index: "devices.mix.1"); NULL when no key under node was reported so. For
 * the reader who knows what keys belong where to add what was likely meant. */
const sim_yaml *sim_yaml_unknown(const sim_yaml *node, int *index, char *path, size_t n);
/* Mark every key under node used: for a subtree a reader takes as a whole (copies or writes out)
 * without looking each key up. */
void sim_yaml_mark_used(const sim_yaml *node);
/* sim_yaml_check_used for map's own keys only, not the maps below them: a reader that has asked
 * for every key of a map checks it before acting on it, so that a misspelled key is reported
 * rather than the file its default (or a missing key) fails to open. */
int sim_yaml_check_keys(const sim_yaml *map, sim_err *err);

/* Typed reads of a scalar node; errors name the node's position and `what` (the key), and leave
 * *out untouched. A NULL node (a key sim_yaml_get did not find) is a "missing" error. Numbers are
 * whole-string decimal; booleans are true/false, yes/no, on/off (also Capitalized or UPPER). */
int sim_yaml_str(const sim_yaml *node, const char *what, const char **out, sim_err *err);
int sim_yaml_int(const sim_yaml *node, const char *what, long lo, long hi, long *out, sim_err *err);
int sim_yaml_double(const sim_yaml *node, const char *what, double lo, double hi, double *out,
                    sim_err *err);
int sim_yaml_bool(const sim_yaml *node, const char *what, int *out, sim_err *err);
int sim_yaml_time(const sim_yaml *node, const char *what, sim_time *out, sim_err *err);
int sim_yaml_bytes(const sim_yaml *node, const char *what, double *out, sim_err *err);
int sim_yaml_rate(const sim_yaml *node, const char *what, double *out, sim_err *err);
int sim_yaml_flops(const sim_yaml *node, const char *what, double *out, sim_err *err);
int sim_yaml_power(const sim_yaml *node, const char *what, double *out, sim_err *err);
int sim_yaml_energy(const sim_yaml *node, const char *what, double *out, sim_err *err);
/* Fail at node's position with a message (for checks a reader makes itself). */
int sim_yaml_fail(const sim_yaml *node, sim_err *err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* Fail at the position of key in map (at map's own when key is absent): for errors about what
 * a key names rather than about its text, such as a file that cannot be opened. */
int sim_yaml_fail_key(const sim_yaml *map, const char *key, sim_err *err, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* Names become file names and header text: a run's (runs/NAME-SEED, "# fedsim run NAME" in
 * metrics.tsv), a device profile's (clients.tsv's device column). A name is 1 to max bytes of
 * letters, digits and - _ . + = , (what sweep point folders are made of: algorithm.name=fjord)
 * and does not start with '.'. NULL when s is one, else what is wrong with it (static text). */
const char *sim_name_problem(const char *s, size_t max);
/* A name from a scalar node (see sim_name_problem); errors name node's position and `what`. */
int sim_yaml_name(const sim_yaml *node, const char *what, size_t max, const char **out,
                  sim_err *err);
/* The same for the key i of map (a device profile's name), at the key's position. */
int sim_yaml_key_name(const sim_yaml *map, int i, const char *what, size_t max, sim_err *err);

/* Apply "a.b.c=value" to the tree: walks/creates maps along the dotted path and sets the value,
 * which is parsed as YAML ("5 min" is a scalar, "[1, 2]" a sequence, "{k: v}" a map). A number
 * picks a sequence item ("mix.0.share=0.5"); the index one past the end appends. Nodes it creates
 * come from file "--set" at line 0, so later errors about them say so. */
int sim_yaml_set(sim_yaml *root, const char *assignment, sim_err *err);

/* 1 when a and b hold the same settings: the same kinds, scalar texts (quoted alike) and
 * sequence items in order, and maps with the same keys in any order. */
int sim_yaml_same(const sim_yaml *a, const sim_yaml *b);

/* Write the tree as block-style YAML (libyaml's emitter), keys in file order. */
int sim_yaml_write(const sim_yaml *root, FILE *f, sim_err *err);

#endif /* SIM_YAML_H */
