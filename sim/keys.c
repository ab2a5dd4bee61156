/* sim/keys.c -- the key-table loader and its printer (see keys.h).
 *
 * A default goes through the same parser as a value from the file: it is written into the tree
 * as text, then that text is read, so the resolved scenario and the run can never disagree. A
 * double default is written with 17 significant digits (it reads back bit for bit).
 */
#include "sim/keys.h"

#include <assert.h>
#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

sim_keys_map sim_keys_sub(sim_keys_map *parent, const char *key, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s", parent->prefix, parent->prefix[0] ? "." : "", key);
    sim_keys_map s = {parent->doc, sim_yaml_get(parent->map, key), buf};
    return s;
}

int sim_keys_need_map(const sim_keys_map *s, const char *key, sim_err *err)
{
    if (s->map && s->map->kind != SIM_YAML_MAP)
        return sim_yaml_fail(s->map, err, "%s: expected a map of settings", key);
    return SIM_OK;
}

void sim_keys_put(sim_keys_map *s, const char *key, const char *text)
{
    char buf[512];
    int len = snprintf(buf, sizeof buf, "%s%s%s=%s", s->prefix, s->prefix[0] ? "." : "", key, text);
    sim_err ignore;
    if (len < 0 || (size_t)len >= sizeof buf || sim_yaml_set(s->doc, buf, &ignore) != SIM_OK)
        return; /* a cut assignment would set another key */
    if (!s->map) s->map = sim_keys_at(s->doc, s->prefix); /* the map was just created */
    sim_yaml_get(s->map, key);
}

const sim_yaml *sim_keys_at(const sim_yaml *doc, const char *path)
{
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", path);
    const sim_yaml *m = doc;
    for (char *k = strtok_r(buf, ".", &save); k && m; k = strtok_r(NULL, ".", &save))
        m = sim_yaml_get(m, k);
    return m;
}

/* The text of k's default in ctx (NULL: none), normalized as it is written: a double with 17
 * significant digits. */
static const char *default_text(const sim_key *k, const sim_key_ctx *ctx, char *buf, size_t n)
{
    const char *t = k->dflt;
    if (k->dflt_fn) {
        k->dflt_fn(ctx, buf, n);
        t = buf;
    }
    if (t && k->type == SIM_KEY_DOUBLE) {
        double v = strtod(t, NULL);
        snprintf(buf, n, "%.17g", v);
        t = buf;
    }
    return t;
}

/* Parse node (the value of k) into its place in block; lo..hi bound numbers when range is set. */
static int parse(const sim_key *k, const sim_yaml *node, void *block, int range, sim_err *err)
{
    char *at = (char *)block + k->offset;
    double lo = range ? k->lo : -DBL_MAX, hi = range ? k->hi : DBL_MAX;
    long v;
    int rc;
    const char *str;
    switch (k->type) {
    case SIM_KEY_INT:
    case SIM_KEY_LONG:
        /* a double holds no LONG_MAX: a bound beyond long's range is long's own */
        rc = sim_yaml_int(node, k->name, lo <= (double)LONG_MIN ? LONG_MIN : (long)lo,
                          hi >= (double)LONG_MAX ? LONG_MAX : (long)hi, &v, err);
        if (rc) return rc;
        if (k->type == SIM_KEY_INT)
            *(int *)at = (int)v;
        else
            *(long *)at = v;
        return SIM_OK;
    case SIM_KEY_DOUBLE:
        return sim_yaml_double(node, k->name, lo, hi, (double *)at, err);
    case SIM_KEY_BOOL:
        return sim_yaml_bool(node, k->name, (int *)at, err);
    case SIM_KEY_SIZE:
        return sim_yaml_bytes(node, k->name, (double *)at, err);
    case SIM_KEY_RATE:
        return sim_yaml_rate(node, k->name, (double *)at, err);
    case SIM_KEY_FLOPS:
        return sim_yaml_flops(node, k->name, (double *)at, err);
    case SIM_KEY_TIME:
        if (node->kind == SIM_YAML_SCALAR && !strcmp(node->value, "none")) {
            *(sim_time *)at = 0;
            return SIM_OK;
        }
        return sim_yaml_time(node, k->name, (sim_time *)at, err);
    case SIM_KEY_STRING:
        if ((rc = sim_yaml_str(node, k->name, &str, err))) return rc;
        if (strlen(str) >= k->size) return sim_yaml_fail(node, err, "%s: value too long", k->name);
        memcpy(at, str, strlen(str) + 1);
        return SIM_OK;
    case SIM_KEY_LIST:
    case SIM_KEY_MAP:
        assert(!"a list or map key is read by its section's own code");
        return SIM_OK;
    case SIM_KEY_CHOICE:
        if ((rc = sim_yaml_str(node, k->name, &str, err))) return rc;
        if (strlen(str) >= 64) return sim_yaml_fail(node, err, "%s: value too long", k->name);
        for (int i = 0; k->words[i]; i++)
            if (!strcmp(str, k->words[i])) {
                *(int *)at = i;
                return SIM_OK;
            }
        char list[256] = "";
        for (int i = 0; k->words[i]; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     k->words[i]);
        const char *near = sim_keys_closest(str, k->words);
        if (near)
            return sim_yaml_fail(node, err, "%s: '%s' is not one of %s; did you mean '%s'?",
                                 k->name, str, list, near);
        return sim_yaml_fail(node, err, "%s: '%s' is not one of %s", k->name, str, list);
    }
    return SIM_OK;
}

int sim_keys_read(const sim_key *k, void *block, sim_keys_map *s, const sim_key_ctx *ctx,
                  sim_err *err)
{
    const sim_yaml *n = sim_yaml_get(s->map, k->name);
    if (n) return parse(k, n, block, 1, err);
    char buf[512];
    const char *t = default_text(k, ctx, buf, sizeof buf);
    if (!t) {
        if (k->type == SIM_KEY_STRING) ((char *)block + k->offset)[0] = 0;
        return SIM_OK;
    }
    sim_keys_put(s, k->name, t);
    /* the text as written, read as a value of the file would be */
    sim_yaml node = {.kind = SIM_YAML_SCALAR, .value = (char *)(uintptr_t)t};
    return parse(k, &node, block, 0, err);
}

int sim_keys_load(const sim_key *keys, void *block, sim_keys_map *s, const sim_key_ctx *ctx,
                  sim_err *err)
{
    sim_key_ctx c = ctx ? *ctx : (sim_key_ctx){0};
    c.config = block;
    int rc = SIM_OK;
    for (const sim_key *k = keys; k->name && !rc; k++)
        if (!k->custom) rc = sim_keys_read(k, block, s, &c, err);
    return rc;
}

/* Optimal string alignment distance, case ignored: the letters added, dropped, changed or
 * swapped with their neighbour that make a into b; names are short (a longer one is "far"). */
static int distance(const char *a, const char *b)
{
    enum { MAX = 64 };
    size_t m = strlen(a), n = strlen(b);
    if (m >= MAX || n >= MAX) return MAX;
    int d[MAX][MAX];
    for (size_t i = 0; i <= m; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= n; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= m; i++)
        for (size_t j = 1; j <= n; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[m][n];
}

int sim_keys_misspelling(const char *s, const char *word)
{
    if (!strcmp(s, word)) return -1;
    size_t len = strlen(s);
    int d = distance(s, word), most = len <= 3 ? 1 : len <= 6 ? 2 : 3;
    return d <= most && (size_t)d < strlen(word) ? d : -1;
}

const char *sim_keys_closest(const char *s, const char *const *words)
{
    const char *best = NULL;
    int bd = 0;
    for (int i = 0; words[i]; i++) {
        int d = sim_keys_misspelling(s, words[i]);
        if (d >= 0 && (!best || d < bd)) best = words[i], bd = d;
    }
    return best;
}

const sim_key *sim_keys_find(const sim_key *keys, const char *name)
{
    for (const sim_key *k = keys; k->name; k++)
        if (!strcmp(k->name, name)) return k;
    assert(!"no such key in the table");
    return NULL;
}

static const char *const TYPES[] = {"int",  "int",  "number", "bool",   "choice", "size",
                                    "rate", "time", "FLOPS",  "string", "list",   "map"};

/* k's range or words, as text */
static void range_text(const sim_key *k, char *buf, size_t n)
{
    buf[0] = 0;
    if (k->type == SIM_KEY_CHOICE) {
        for (int i = 0; k->words[i]; i++)
            snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? ", " : "", k->words[i]);
    } else if ((k->type == SIM_KEY_INT || k->type == SIM_KEY_LONG || k->type == SIM_KEY_DOUBLE) &&
               k->lo < k->hi) {
        if (k->hi >= (double)LONG_MAX) /* "[0, 9.223372037e+18]" says less than this */
            snprintf(buf, n, ">= %.10g", k->lo);
        else
            snprintf(buf, n, "[%.10g, %.10g]", k->lo, k->hi);
    }
    if (k->unit) snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? " " : "", k->unit);
}

/* text as a Markdown table cell: a '|' would end the cell */
static void cell(FILE *f, const char *text)
{
    for (const char *c = text; *c; c++) {
        if (*c == '|') fputc('\\', f);
        fputc(*c, f);
    }
}

/* One line of text (up to its end or a newline) wrapped at word boundaries to lines of at most 100
 * columns, each indented by indent spaces (a word longer than a line has a line of its own);
 * columns count UTF-8 characters. Returns where the line ended. */
static const char *wrap_line(FILE *f, const char *p, int indent)
{
    while (*p && *p != '\n') {
        while (*p == ' ')
            p++;
        const char *end = p, *cut = NULL;
        for (int cols = indent; *end && *end != '\n' && cols <= 100; end++) {
            if (*end == ' ') cut = end;
            if ((*end & 0xC0) != 0x80) cols++;
        }
        if (!*end || *end == '\n') cut = end;
        if (!cut || cut == p) cut = p + strcspn(p, " \n");
        if (cut > p) fprintf(f, "%*s%.*s\n", indent, "", (int)(cut - p), p);
        p = cut;
    }
    return p;
}

/* text wrapped as above, line by line */
static void wrap(FILE *f, const char *text, int indent)
{
    for (const char *p = text; *p;)
        if (*(p = wrap_line(f, p, indent)) == '\n') p++;
}

int sim_keys_print(FILE *f, const char *prefix, const char *intro, const sim_key *keys,
                   const char *filter, int markdown)
{
    int count = 0;
    for (const sim_key *k = keys; k->name; k++) {
        char full[256], range[256];
        snprintf(full, sizeof full, "%s%s%s", prefix, prefix[0] ? "." : "", k->name);
        if (filter && strncmp(full, filter, strlen(filter))) continue;
        range_text(k, range, sizeof range);
        const char *doc = k->doc ? k->doc : "";
        if (!count && markdown) {
            if (prefix[0])
                fprintf(f, "\n### `%s`\n\n", prefix);
            else
                fputs("\n### Top level\n\n", f);
            if (intro) fprintf(f, "%s\n\n", intro);
            fputs("| key | type | default | range | what |\n|---|---|---|---|---|\n", f);
        } else if (!count) {
            fprintf(f, "\n%s\n", prefix[0] ? prefix : "top level");
            if (intro) wrap(f, intro, 2);
        }
        if (markdown) {
            fprintf(f, "| `%s` | %s | ", k->name, TYPES[k->type]);
            if (!k->dflt) {
                fputs("-", f);
            } else if (k->dflt_fn) { /* words saying what it depends on */
                cell(f, k->dflt);
            } else {
                fputc('`', f);
                cell(f, k->dflt);
                fputc('`', f);
            }
            fputs(" | ", f);
            cell(f, range);
            fputs(" | ", f);
            cell(f, doc);
            fputs(" |\n", f);
        } else {
            char line[1024];
            int n = snprintf(line, sizeof line, "  %-34s %-7s %-20s %s", full, TYPES[k->type],
                             k->dflt ? k->dflt : "-", range);
            while (n > 0 && (size_t)n < sizeof line && line[n - 1] == ' ')
                line[--n] = 0;
            fprintf(f, "%s\n", line);
            wrap(f, doc, 6);
        }
        count++;
    }
    return count;
}
