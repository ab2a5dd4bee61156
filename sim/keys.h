/* sim/keys.h -- typed key tables, and the one loader that reads a YAML map through them.
 *
 * A section of a scenario (the top level, `federation:`, an algorithm's `algorithm.spafl:`) is
 * described by a table of keys: name, type, where the value goes in a config struct (offsetof),
 * default, range, choice words, unit and a one-line doc. sim_keys_load walks a table over a map:
 * a present key is parsed (errors at its file:line:col, naming the key), an absent one gets its
 * default written into the tree, in table order, so the resolved scenario lists every setting that
 * ran. Unknown keys are left to sim_yaml_check_used / sim_yaml_check_keys, which see every key
 * the loader asked for. The same tables print `fedsim keys` (sim_keys_print).
 * A leaf header: any layer may include it.
 */
#ifndef SIM_KEYS_H
#define SIM_KEYS_H

#include "sim/base.h"
#include "sim/yaml.h"

#include <stddef.h>
#include <stdio.h>

typedef enum sim_key_type {
    SIM_KEY_INT,    /* int; lo..hi */
    SIM_KEY_LONG,   /* long; lo..hi */
    SIM_KEY_DOUBLE, /* double; lo..hi */
    SIM_KEY_BOOL,   /* int 0/1: true/false, yes/no, on/off */
    SIM_KEY_CHOICE, /* int: the index of the value in words */
    SIM_KEY_SIZE,   /* double bytes: "2 GiB" */
    SIM_KEY_RATE,   /* double bit/s: "20 Mbps" */
    SIM_KEY_TIME,   /* sim_time ns: "40 ms"; "none" is 0 */
    SIM_KEY_FLOPS,  /* double FLOP/s: "8 GFLOPS" */
    SIM_KEY_STRING, /* char[size] */
    SIM_KEY_LIST,   /* for the docs: a list its section's own code reads (custom) */
    SIM_KEY_MAP,    /* for the docs: a map its section's own code reads (custom) */
} sim_key_type;

/* What a default may depend on besides the keys read before it. */
typedef struct sim_key_ctx {
    const char *algorithm; /* algorithm.name */
    int rounds;            /* the scenario's rounds */
    int clients;           /* the partition's clients */
    int async;             /* federation.mode is async */
    const void *config;    /* the block being filled: the keys before this one are in it */
    /* the enclosing config and its map, when the block is a sub-section (an algorithm's section:
     * the fl_config of the shared keys, read before it, and the `algorithm:` map); else NULL */
    const void *parent;
    const sim_yaml *parent_map;
} sim_key_ctx;

typedef struct sim_key {
    const char *name;
    sim_key_type type;
    size_t offset; /* of the value in the config block */
    size_t size;   /* SIM_KEY_STRING: the buffer's size */
    /* The default as YAML text, written into the tree when the key is absent; NULL: none (the
     * key stays absent and the value untouched). With dflt_fn, the doc of the default. */
    const char *dflt;
    /* Optional: the default in context (ctx never NULL), into buf, overriding dflt. */
    void (*dflt_fn)(const sim_key_ctx *ctx, char *buf, size_t n);
    double lo, hi;            /* SIM_KEY_INT, LONG, DOUBLE: the range a given value must be in */
    const char *const *words; /* SIM_KEY_CHOICE: NULL-terminated */
    const char *unit;         /* for the docs: what the number counts ("rounds", "share") */
    const char *doc;          /* what it does: a line, or a paragraph (Markdown: `code`) */
    /* Read by its section's own code, where and when it applies (a key of one dataset kind, of
     * one federation mode, a list): sim_keys_load skips it, sim_keys_read reads it when that
     * code asks (not a LIST or MAP), and the docs list it with the rest. */
    int custom;
} sim_key;

/* A map being read: the document (defaults are written into it), the map (NULL until a default
 * creates it) and its dotted path from the document's root ("" for the root itself). */
typedef struct sim_keys_map {
    sim_yaml *doc;
    const sim_yaml *map;
    const char *prefix;
} sim_keys_map;

/* The sub-map key of parent (s.map NULL when absent); its prefix is written into buf. */
sim_keys_map sim_keys_sub(sim_keys_map *parent, const char *key, char *buf, size_t n);
/* SIM_EINVAL "KEY: expected a map of settings" when s's map is there and not a map. */
int sim_keys_need_map(const sim_keys_map *s, const char *key, sim_err *err);
/* The node at a dotted path of doc ("": doc itself), every key on the way marked used; NULL when
 * a step is absent. */
const sim_yaml *sim_keys_at(const sim_yaml *doc, const char *path);
/* Write text as key's value into the tree (creating s's map when absent) and mark it used. */
void sim_keys_put(sim_keys_map *s, const char *key, const char *text);

/* Read one key into block (at k->offset): parsed when present, else its default written back and
 * parsed (a default is not range-checked: it may follow the context). ctx may be NULL for keys
 * without dflt_fn. */
int sim_keys_read(const sim_key *k, void *block, sim_keys_map *s, const sim_key_ctx *ctx,
                  sim_err *err);
/* Every key of a table ending with a key whose name is NULL, in order, into block, the custom
 * ones aside; ctx->config is set to block. */
int sim_keys_load(const sim_key *keys, void *block, sim_keys_map *s, const sim_key_ctx *ctx,
                  sim_err *err);

/* How far s is from word as a misspelling of it (letters added, dropped, changed or swapped,
 * case ignored: "local_epoch" is 1 from "local_epochs"), or -1 when s is word itself or too far
 * from it to be a slip (more than 1 edit for up to 3 letters, 2 for up to 6, else 3). */
int sim_keys_misspelling(const char *s, const char *word);
/* The word of words (NULL-ended) s is the nearest misspelling of, or NULL (the first of the
 * nearest on a tie): for "did you mean" hints. */
const char *sim_keys_closest(const char *s, const char *const *words);

/* The key called name in keys; asserts there is one. */
const sim_key *sim_keys_find(const sim_key *keys, const char *name);

/* The keys of one table under a dotted prefix ("algorithm.spafl"; "" for the top level), those
 * whose full name starts with filter (NULL: all), after a heading and intro (what the section
 * is, NULL: none) when any is printed: for a terminal, a line each with type, default, range or
 * words and unit, its doc wrapped below; or Markdown ("### `prefix`", the intro, a table).
 * Returns how many keys were printed. */
int sim_keys_print(FILE *f, const char *prefix, const char *intro, const sim_key *keys,
                   const char *filter, int markdown);

#endif /* SIM_KEYS_H */
