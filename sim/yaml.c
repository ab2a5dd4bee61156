/* sim/yaml.c -- libyaml events to a positioned tree, typed reads, --set overrides, emitting.
 *
 * Workload: scenario and catalog files of a few hundred lines, read once per run, so the tree is
 * plain arrays searched linearly and built by recursion (depth capped so a hostile "[[[[..." file
 * is an error, not a stack overflow). YAML features that make a file mean something other than
 * what it shows (anchors, aliases, several documents) are rejected rather than half-supported.
 */
#include "sim/yaml.h"

#include <yaml.h>

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256 /* nesting levels; real files use fewer than 10 */

/* Every node a --set creates borrows this name, so errors about it read "--set: ..." */
static const char set_file[] = "--set";

typedef struct builder {
    yaml_parser_t parser;
    const char *file; /* the name nodes borrow (owned by the caller until the root takes it) */
    const char *text; /* the whole input, to turn a reader error's byte offset into line:col */
    size_t len;
    int depth; /* current nesting of maps and sequences */
} builder;

static void yaml_oom(void)
{
    /* libyaml allocates with malloc; treat its failure like sim_xmalloc's */
    fprintf(stderr, "fedsim: out of memory in libyaml\n");
    abort();
}

static sim_yaml *node_new(sim_yaml_kind kind, const char *file, int line, int col)
{
    sim_yaml *n = sim_xcalloc(1, sizeof *n);
    n->kind = kind;
    n->file = file;
    n->line = line;
    n->col = col;
    return n;
}

static void node_free(sim_yaml *n)
{
    if (!n) return;
    for (int i = 0; i < n->n; i++) {
        if (n->keys) free(n->keys[i]);
        node_free(n->items[i]);
    }
    free(n->value);
    free(n->keys);
    free(n->items);
    free(n->key_line);
    free(n->key_col);
    free(n->used);
    free(n->file_owned);
    free(n);
}

void sim_yaml_free(sim_yaml *root)
{
    node_free(root);
}

/* Make room for one more item. Items are never removed, so the capacity is always the next power
 * of two >= n and the struct needs no capacity field. */
static void grow(sim_yaml *n)
{
    int c = n->n;
    if (c != 0 && (c & (c - 1)) != 0) return;
    size_t cap = c ? (size_t)c * 2 : 1;
    n->items = sim_xrealloc(n->items, cap * sizeof *n->items);
    if (n->kind == SIM_YAML_MAP) {
        n->keys = sim_xrealloc(n->keys, cap * sizeof *n->keys);
        n->key_line = sim_xrealloc(n->key_line, cap * sizeof *n->key_line);
        n->key_col = sim_xrealloc(n->key_col, cap * sizeof *n->key_col);
        n->used = sim_xrealloc(n->used, cap * sizeof *n->used);
    }
}

/* key is taken over (owned by the map from now on) */
static void map_add(sim_yaml *m, char *key, int line, int col, sim_yaml *v)
{
    assert(m->kind == SIM_YAML_MAP);
    grow(m);
    m->keys[m->n] = key;
    m->key_line[m->n] = line;
    m->key_col[m->n] = col;
    m->used[m->n] = 0;
    m->items[m->n++] = v;
}

static void seq_add(sim_yaml *s, sim_yaml *v)
{
    assert(s->kind == SIM_YAML_SEQ);
    grow(s);
    s->items[s->n++] = v;
}

static int map_find(const sim_yaml *m, const char *key)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->keys[i], key) == 0) return i;
    return -1;
}

/* ---- building the tree from libyaml events ---- */

static int fail_at(const builder *b, yaml_mark_t m, sim_err *err, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int fail_at(const builder *b, yaml_mark_t m, sim_err *err, const char *fmt, ...)
{
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sim_fail(err, SIM_EFORMAT, b->file, (int)m.line + 1, (int)m.column + 1, "%s", msg);
}

static int parser_fail(const builder *b, sim_err *err)
{
    const yaml_parser_t *p = &b->parser;
    if (p->error == YAML_MEMORY_ERROR) yaml_oom();
    const char *problem = p->problem ? p->problem : "syntax error";
    if (p->error == YAML_READER_ERROR) {
        /* the reader (encoding checks) reports a byte offset, not a mark */
        int line = 1, col = 1;
        for (size_t i = 0; i < p->problem_offset && i < b->len; i++) {
            if (b->text[i] == '\n')
                line++, col = 1;
            else
                col++;
        }
        if (p->problem_value != -1)
            return sim_fail(err, SIM_EFORMAT, b->file, line, col, "%s (#%X)", problem,
                            (unsigned)p->problem_value);
        return sim_fail(err, SIM_EFORMAT, b->file, line, col, "%s", problem);
    }
    int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
    if (p->context)
        return sim_fail(err, SIM_EFORMAT, b->file, line, col, "%s (%s at %d:%d)", problem,
                        p->context, (int)p->context_mark.line + 1, (int)p->context_mark.column + 1);
    return sim_fail(err, SIM_EFORMAT, b->file, line, col, "%s", problem);
}

static int next_event(builder *b, yaml_event_t *ev, sim_err *err)
{
    if (!yaml_parser_parse(&b->parser, ev)) return parser_fail(b, err);
    return SIM_OK;
}

static int build(builder *b, yaml_event_t *ev, sim_yaml **out, sim_err *err);

static int build_seq(builder *b, sim_yaml *s, sim_err *err)
{
    for (;;) {
        yaml_event_t ev;
        int rc = next_event(b, &ev, err);
        if (rc) return rc;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return SIM_OK;
        }
        sim_yaml *item;
        rc = build(b, &ev, &item, err);
        if (rc) return rc;
        seq_add(s, item);
    }
}

static int build_map(builder *b, sim_yaml *m, sim_err *err)
{
    for (;;) {
        yaml_event_t ev;
        int rc = next_event(b, &ev, err);
        if (rc) return rc;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return SIM_OK;
        }
        yaml_mark_t km = ev.start_mark;
        if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT) {
            rc = fail_at(b, km, err, "a map key must be a scalar, not a %s",
                         ev.type == YAML_MAPPING_START_EVENT ? "map" : "sequence");
            yaml_event_delete(&ev);
            return rc;
        }
        sim_yaml *k; /* a scalar, or an alias that build() rejects */
        rc = build(b, &ev, &k, err);
        if (rc) return rc;
        int dup = map_find(m, k->value);
        if (dup >= 0) {
            rc = fail_at(b, km, err, "duplicate key '%s' (first at %d:%d)", k->value,
                         m->key_line[dup], m->key_col[dup]);
            node_free(k);
            return rc;
        }
        sim_yaml *v = NULL;
        rc = next_event(b, &ev, err);
        if (!rc) rc = build(b, &ev, &v, err);
        if (rc) {
            node_free(k);
            return rc;
        }
        char *key = k->value;
        k->value = NULL;
        node_free(k);
        map_add(m, key, (int)km.line + 1, (int)km.column + 1, v);
    }
}

/* Turn the node starting with *ev (and the events after it) into a tree. Always deletes *ev. */
static int build(builder *b, yaml_event_t *ev, sim_yaml **out, sim_err *err)
{
    *out = NULL;
    yaml_mark_t m = ev->start_mark;
    int line = (int)m.line + 1, col = (int)m.column + 1;
    const yaml_char_t *anchor = NULL;
    int rc = SIM_OK;
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        rc = fail_at(b, m, err, "aliases (*%s) are not supported",
                     (const char *)ev->data.alias.anchor);
        break;
    case YAML_SCALAR_EVENT: {
        anchor = ev->data.scalar.anchor;
        if (anchor) break;
        const yaml_char_t *v = ev->data.scalar.value;
        size_t len = ev->data.scalar.length;
        if (memchr(v, '\0', len)) {
            rc = fail_at(b, m, err, "a NUL character in a scalar is not supported");
            break;
        }
        sim_yaml *n = node_new(SIM_YAML_SCALAR, b->file, line, col);
        n->value = sim_xmalloc(len + 1);
        memcpy(n->value, v, len);
        n->value[len] = '\0';
        /* quoted, a | > block or tagged !!str: the author did not mean a plain (typed) value */
        const yaml_char_t *tag = ev->data.scalar.tag;
        n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
                    (tag && strcmp((const char *)tag, YAML_STR_TAG) == 0);
        *out = n;
        break;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        int is_map = ev->type == YAML_MAPPING_START_EVENT;
        anchor = is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
        if (anchor) break;
        if (b->depth >= MAX_DEPTH) {
            rc = fail_at(b, m, err, "nested deeper than %d levels", MAX_DEPTH);
            break;
        }
        yaml_event_delete(ev);
        sim_yaml *n = node_new(is_map ? SIM_YAML_MAP : SIM_YAML_SEQ, b->file, line, col);
        b->depth++;
        rc = is_map ? build_map(b, n, err) : build_seq(b, n, err);
        b->depth--;
        if (rc)
            node_free(n);
        else
            *out = n;
        return rc;
    }
    default:
        /* libyaml only sends stream and document events between documents */
        rc = fail_at(b, m, err, "unexpected YAML event %d", (int)ev->type);
        break;
    }
    if (anchor) rc = fail_at(b, m, err, "anchors (&%s) are not supported", (const char *)anchor);
    yaml_event_delete(ev);
    return rc;
}

/* Parse text[0..len) named `name`. A stream with no document is an empty map when empty_is_map
 * (a file), an empty scalar otherwise (a --set value such as "key="). */
static int load(sim_yaml **root, const char *text, size_t len, const char *name, int empty_is_map,
                sim_err *err)
{
    *root = NULL;
    builder b = {.text = text, .len = len};
    char *file = sim_xstrdup(name);
    b.file = file;
    if (!yaml_parser_initialize(&b.parser)) yaml_oom();
    yaml_parser_set_input_string(&b.parser, (const unsigned char *)text, len);

    sim_yaml *top = NULL;
    int docs = 0, rc = SIM_OK, done = 0;
    while (!done) {
        yaml_event_t ev;
        rc = next_event(&b, &ev, err);
        if (rc) goto fail;
        switch (ev.type) {
        case YAML_STREAM_START_EVENT:
        case YAML_DOCUMENT_END_EVENT:
            break;
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (docs++) {
                rc = fail_at(&b, ev.start_mark, err, "multiple documents are not supported");
                yaml_event_delete(&ev);
                goto fail;
            }
            break;
        default:
            rc = build(&b, &ev, &top, err); /* deletes ev */
            if (rc) goto fail;
            continue;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&b.parser);

    int null_top = !top || (top->kind == SIM_YAML_SCALAR && !top->quoted && !top->value[0]);
    if (null_top && empty_is_map) {
        node_free(top);
        top = node_new(SIM_YAML_MAP, file, 1, 1);
    } else if (!top) {
        top = node_new(SIM_YAML_SCALAR, file, 1, 1);
        top->value = sim_xstrdup("");
    }
    top->file_owned = file;
    *root = top;
    return SIM_OK;

fail:
    yaml_parser_delete(&b.parser);
    node_free(top);
    free(file);
    return rc;
}

int sim_yaml_load_string(sim_yaml **root, const char *text, const char *name, sim_err *err)
{
    return load(root, text, strlen(text), name ? name : "<string>", 1, err);
}

int sim_yaml_load_file(sim_yaml **root, const char *path, sim_err *err)
{
    *root = NULL;
    const char *why;
    FILE *f = sim_open_input(path, &why);
    if (!f) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot open: %s", why);
    size_t len = 0, cap = 4096;
    char *buf = sim_xmalloc(cap);
    for (;;) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        cap *= 2;
        buf = sim_xrealloc(buf, cap);
    }
    if (ferror(f)) {
        int e = errno;
        fclose(f);
        free(buf);
        return sim_fail(err, SIM_EIO, path, 0, 0, "cannot read: %s", strerror(e));
    }
    fclose(f);
    int rc = load(root, buf, len, path, 1, err);
    free(buf);
    return rc;
}

/* ---- lookups and the unknown-key check ---- */

sim_yaml *sim_yaml_get(const sim_yaml *map, const char *key)
{
    if (!map || map->kind != SIM_YAML_MAP) return NULL;
    int i = map_find(map, key);
    if (i < 0) return NULL;
    map->used[i] = 1; /* the tree is const to readers, its bookkeeping is not */
    return map->items[i];
}

/* A key reported unknown is marked so (used[i] = UNKNOWN), for sim_yaml_unknown to find: the
 * reader who knows the key's vocabulary can then say what was meant. */
enum { UNKNOWN = 2 };

static int unknown(const sim_yaml *map, int i, sim_err *err)
{
    map->used[i] = UNKNOWN;
    return sim_yaml_fail_key(map, map->keys[i], err, "unknown key '%s'", map->keys[i]);
}

int sim_yaml_check_used(const sim_yaml *node, sim_err *err)
{
    if (!node) return SIM_OK;
    for (int i = 0; i < node->n; i++) {
        if (node->kind == SIM_YAML_MAP && !node->used[i]) return unknown(node, i, err);
        int rc = sim_yaml_check_used(node->items[i], err);
        if (rc) return rc;
    }
    return SIM_OK;
}

int sim_yaml_check_keys(const sim_yaml *map, sim_err *err)
{
    for (int i = 0; map && map->kind == SIM_YAML_MAP && i < map->n; i++)
        if (!map->used[i]) return unknown(map, i, err);
    return SIM_OK;
}

const sim_yaml *sim_yaml_unknown(const sim_yaml *node, int *index, char *path, size_t n)
{
    size_t len = strlen(path);
    for (int i = 0; node && node->kind != SIM_YAML_SCALAR && i < node->n; i++) {
        if (node->kind == SIM_YAML_MAP && node->used[i] == UNKNOWN) {
            *index = i;
            return node;
        }
        if (node->kind == SIM_YAML_MAP)
            snprintf(path + len, n - len, "%s%s", len ? "." : "", node->keys[i]);
        else
            snprintf(path + len, n - len, "%s%d", len ? "." : "", i);
        const sim_yaml *m = sim_yaml_unknown(node->items[i], index, path, n);
        if (m) return m;
        path[len] = 0;
    }
    return NULL;
}

void sim_yaml_mark_used(const sim_yaml *node)
{
    if (!node) return;
    for (int i = 0; i < node->n; i++) {
        if (node->kind == SIM_YAML_MAP) node->used[i] = 1;
        sim_yaml_mark_used(node->items[i]);
    }
}

/* ---- typed reads ---- */

int sim_yaml_fail(const sim_yaml *node, sim_err *err, const char *fmt, ...)
{
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!node) return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "%s", msg);
    return sim_fail(err, SIM_EINVAL, node->file, node->line, node->col, "%s", msg);
}

int sim_yaml_fail_key(const sim_yaml *map, const char *key, sim_err *err, const char *fmt, ...)
{
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int i = map && map->kind == SIM_YAML_MAP ? map_find(map, key) : -1;
    if (i < 0) return sim_yaml_fail(map, err, "%s", msg);
    /* a key a --set added to a file's map has no line; its value knows it came from --set */
    const char *file = map->key_line[i] > 0 ? map->file : map->items[i]->file;
    return sim_fail(err, SIM_EINVAL, file, map->key_line[i], map->key_col[i], "%s", msg);
}

const char *sim_name_problem(const char *s, size_t max)
{
    static const char extra[] = "-_.+=,";
    size_t n = strlen(s);
    if (!n) return "it is empty";
    if (n > max) return "it is too long";
    if (s[0] == '.') return "it starts with '.'";
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr(extra, c)))
            return c == '/'                ? "it has a '/'"
                   : c < 0x20 || c == 0x7f ? "it has a control character"
                   : c == ' '              ? "it has a space"
                                           : "it has a character other than letters, digits "
                                             "and - _ . + = ,";
    }
    return NULL;
}

/* s for a one-line message: control characters as \n, \t or \xNN, cut at about 80 bytes */
static void show(char *buf, size_t n, const char *s)
{
    size_t k = 0;
    for (; *s && k + 8 < n && k < 80; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n' || c == '\t')
            k += (size_t)snprintf(buf + k, n - k, "\\%c", c == '\n' ? 'n' : 't');
        else if (c < 0x20 || c == 0x7f)
            k += (size_t)snprintf(buf + k, n - k, "\\x%02X", c);
        else
            buf[k++] = (char)c;
    }
    snprintf(buf + k, n - k, "%s", *s ? "..." : "");
}

/* sim_yaml_name's refusal, at node or (map non-NULL) at map's key i */
static int name_fail(const sim_yaml *node, const sim_yaml *map, int i, const char *what,
                     const char *name, const char *why, size_t max, sim_err *err)
{
    static const char rule[] = "a name becomes a file name and header text: 1 to %zu bytes of "
                               "letters, digits and - _ . + = , not starting with '.'";
    char shown[128], msg[sizeof err->msg];
    show(shown, sizeof shown, name);
    int len = snprintf(msg, sizeof msg, "%s: '%s' is not a usable name: %s (", what, shown, why);
    snprintf(msg + len, sizeof msg - (size_t)len, rule, max);
    strncat(msg, ")", sizeof msg - strlen(msg) - 1);
    if (map) return sim_yaml_fail_key(map, map->keys[i], err, "%s", msg);
    return sim_yaml_fail(node, err, "%s", msg);
}

int sim_yaml_name(const sim_yaml *node, const char *what, size_t max, const char **out,
                  sim_err *err)
{
    const char *v;
    int rc = sim_yaml_str(node, what, &v, err);
    if (rc) return rc;
    const char *why = sim_name_problem(v, max);
    if (why) return name_fail(node, NULL, 0, what, v, why, max, err);
    *out = v;
    return SIM_OK;
}

int sim_yaml_key_name(const sim_yaml *map, int i, const char *what, size_t max, sim_err *err)
{
    assert(map->kind == SIM_YAML_MAP && i >= 0 && i < map->n);
    const char *why = sim_name_problem(map->keys[i], max);
    return why ? name_fail(NULL, map, i, what, map->keys[i], why, max, err) : SIM_OK;
}

static const char *kind_name(sim_yaml_kind k)
{
    return k == SIM_YAML_MAP ? "a map" : k == SIM_YAML_SEQ ? "a sequence" : "a scalar";
}

/* Every typed read starts here: the key was present and holds a single value. */
static int need_scalar(const sim_yaml *node, const char *what, const char *expected, sim_err *err)
{
    if (!node) return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "missing %s", what);
    if (node->kind != SIM_YAML_SCALAR)
        return sim_yaml_fail(node, err, "%s: expected %s, found %s", what, expected,
                             kind_name(node->kind));
    return SIM_OK;
}

int sim_yaml_str(const sim_yaml *node, const char *what, const char **out, sim_err *err)
{
    int rc = need_scalar(node, what, "a string", err);
    if (rc) return rc;
    *out = node->value;
    return SIM_OK;
}

int sim_yaml_int(const sim_yaml *node, const char *what, long lo, long hi, long *out, sim_err *err)
{
    int rc = need_scalar(node, what, "an integer", err);
    if (rc) return rc;
    const char *s = node->value;
    /* strtol would skip leading blanks and accept "0x"-less garbage after digits; insist on
     * [+-]digits and nothing else */
    const char *d = s + (*s == '+' || *s == '-');
    if (*d < '0' || *d > '9')
        return sim_yaml_fail(node, err, "%s: '%s' is not an integer", what, s);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end) return sim_yaml_fail(node, err, "%s: '%s' is not an integer", what, s);
    if (errno == ERANGE || v < lo || v > hi)
        return sim_yaml_fail(node, err, "%s: %s is out of range [%ld, %ld]", what, s, lo, hi);
    *out = v;
    return SIM_OK;
}

int sim_yaml_double(const sim_yaml *node, const char *what, double lo, double hi, double *out,
                    sim_err *err)
{
    int rc = need_scalar(node, what, "a number", err);
    if (rc) return rc;
    const char *s = node->value;
    /* decimal notation only: strtod alone would also take "inf", "nan" and hex floats */
    if (!*s || s[strspn(s, "0123456789+-.eE")])
        return sim_yaml_fail(node, err, "%s: '%s' is not a number", what, s);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || end == s) return sim_yaml_fail(node, err, "%s: '%s' is not a number", what, s);
    if ((errno == ERANGE && fabs(v) > 1.0) || !(v >= lo && v <= hi))
        return sim_yaml_fail(node, err, "%s: %s is out of range [%g, %g]", what, s, lo, hi);
    *out = v;
    return SIM_OK;
}

int sim_yaml_bool(const sim_yaml *node, const char *what, int *out, sim_err *err)
{
    /* YAML 1.1's spellings, which is what people write by habit */
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes",
                                      "YES",  "on",   "On",   "ON"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No",
                                     "NO",    "off",   "Off",   "OFF"};
    int rc = need_scalar(node, what, "a boolean", err);
    if (rc) return rc;
    for (size_t i = 0; i < SIM_ARRAY_LEN(yes); i++) {
        if (strcmp(node->value, yes[i]) == 0) {
            *out = 1;
            return SIM_OK;
        }
        if (strcmp(node->value, no[i]) == 0) {
            *out = 0;
            return SIM_OK;
        }
    }
    return sim_yaml_fail(node, err, "%s: '%s' is not a boolean (use true/false, yes/no, on/off)",
                         what, node->value);
}

/* The units parsers know nothing of files: put the node's position and `what` on their error. */
static int at_node(const sim_yaml *node, const char *what, int rc, sim_err *err)
{
    if (!err) return rc;
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    return sim_fail(err, rc, node->file, node->line, node->col, "%s: %s", what, msg);
}

int sim_yaml_time(const sim_yaml *node, const char *what, sim_time *out, sim_err *err)
{
    int rc = need_scalar(node, what, "a time", err);
    if (rc) return rc;
    rc = sim_parse_time(node->value, out, err);
    return rc ? at_node(node, what, rc, err) : SIM_OK;
}

int sim_yaml_bytes(const sim_yaml *node, const char *what, double *out, sim_err *err)
{
    int rc = need_scalar(node, what, "a size", err);
    if (rc) return rc;
    rc = sim_parse_bytes(node->value, out, err);
    return rc ? at_node(node, what, rc, err) : SIM_OK;
}

int sim_yaml_rate(const sim_yaml *node, const char *what, double *out, sim_err *err)
{
    int rc = need_scalar(node, what, "a rate", err);
    if (rc) return rc;
    rc = sim_parse_rate(node->value, out, err);
    return rc ? at_node(node, what, rc, err) : SIM_OK;
}

int sim_yaml_flops(const sim_yaml *node, const char *what, double *out, sim_err *err)
{
    int rc = need_scalar(node, what, "a FLOPS value", err);
    if (rc) return rc;
    rc = sim_parse_flops(node->value, out, err);
    return rc ? at_node(node, what, rc, err) : SIM_OK;
}

int sim_yaml_power(const sim_yaml *node, const char *what, double *out, sim_err *err)
{
    int rc = need_scalar(node, what, "a power", err);
    if (rc) return rc;
    rc = sim_parse_power(node->value, out, err);
    return rc ? at_node(node, what, rc, err) : SIM_OK;
}

int sim_yaml_energy(const sim_yaml *node, const char *what, double *out, sim_err *err)
{
    int rc = need_scalar(node, what, "an energy", err);
    if (rc) return rc;
    rc = sim_parse_energy(node->value, out, err);
    return rc ? at_node(node, what, rc, err) : SIM_OK;
}

/* ---- --set overrides ---- */

/* Nodes parsed from a --set value get no line: positions inside the value text would read like
 * lines of the scenario file. */
static void set_origin(sim_yaml *n, const char *file)
{
    n->file = file;
    n->line = n->col = 0;
    for (int i = 0; i < n->n; i++) {
        if (n->kind == SIM_YAML_MAP) n->key_line[i] = n->key_col[i] = 0;
        set_origin(n->items[i], file);
    }
}

/* "12" -> 12 when it is a plain decimal index no larger than max, else -1 */
static int parse_index(const char *s, int max)
{
    if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 9) return -1;
    long v = strtol(s, NULL, 10);
    return v <= max ? (int)v : -1;
}

int sim_yaml_set(sim_yaml *root, const char *assignment, sim_err *err)
{
    assert(root);
    const char *eq = strchr(assignment, '=');
    if (!eq)
        return sim_fail(err, SIM_EINVAL, set_file, 0, 0, "'%s' is not key.path=value", assignment);
    size_t plen = (size_t)(eq - assignment);
    if (!plen)
        return sim_fail(err, SIM_EINVAL, set_file, 0, 0, "'%s' has no key path before '='",
                        assignment);

    /* split a copy of the path in place; comp[i] points into it, offsets match assignment */
    char *path = sim_xmalloc(plen + 1);
    memcpy(path, assignment, plen);
    path[plen] = '\0';
    const char *comp[MAX_DEPTH];
    int nc = 0, rc = SIM_OK;
    for (char *p = path;;) {
        char *dot = strchr(p, '.');
        if (dot) *dot = '\0';
        if (!*p) {
            rc = sim_fail(err, SIM_EINVAL, set_file, 0, 0, "'%s': empty key in path '%.*s'",
                          assignment, (int)plen, assignment);
            goto out;
        }
        if (nc == MAX_DEPTH) {
            rc = sim_fail(err, SIM_EINVAL, set_file, 0, 0, "'%.40s...': path deeper than %d",
                          assignment, MAX_DEPTH);
            goto out;
        }
        comp[nc++] = p;
        if (!dot) break;
        p = dot + 1;
    }

    sim_yaml *val = NULL;
    sim_err inner = {0};
    rc = load(&val, eq + 1, strlen(eq + 1), set_file, 0, &inner);
    if (rc) {
        if (inner.line > 0)
            rc = sim_fail(err, rc, set_file, 0, 0, "'%s': %s (at %d:%d of the value)", assignment,
                          inner.msg, inner.line, inner.col);
        else
            rc = sim_fail(err, rc, set_file, 0, 0, "'%s': %s", assignment, inner.msg);
        goto out;
    }
    free(val->file_owned);
    val->file_owned = NULL;
    set_origin(val, set_file);

    /* All or nothing: the walk only fails on nodes that already exist, and everything it creates
     * or converts lies below the last such node, so an error leaves the tree as it was. */
    sim_yaml *cur = root;
    for (int i = 0; i < nc; i++) {
        int last = i == nc - 1;
        int pre = i ? (int)(comp[i] - path - 1) : 0; /* "a.b" while at "c" of "a.b.c" */
        if (cur->kind == SIM_YAML_SCALAR && !cur->quoted && !cur->value[0]) {
            /* "key:" with nothing after it is null, which a --set may fill in as a map */
            free(cur->value);
            cur->value = NULL;
            cur->kind = SIM_YAML_MAP;
        }
        if (cur->kind == SIM_YAML_SCALAR) {
            rc = sim_fail(err, SIM_EINVAL, set_file, 0, 0,
                          "'%s': %s%.*s%s is a scalar ('%s'), not a map", assignment,
                          i ? "'" : "the root", pre, assignment, i ? "'" : "", cur->value);
            sim_yaml_free(val);
            goto out;
        }
        if (cur->kind == SIM_YAML_MAP) {
            int k = map_find(cur, comp[i]);
            if (last && k >= 0) {
                node_free(cur->items[k]);
                cur->items[k] = val;
            } else if (last) {
                map_add(cur, sim_xstrdup(comp[i]), 0, 0, val);
            } else if (k >= 0) {
                cur = cur->items[k];
            } else {
                sim_yaml *m = node_new(SIM_YAML_MAP, set_file, 0, 0);
                map_add(cur, sim_xstrdup(comp[i]), 0, 0, m);
                cur = m;
            }
            continue;
        }
        int k = parse_index(comp[i], cur->n);
        if (k < 0) {
            rc = sim_fail(err, SIM_EINVAL, set_file, 0, 0,
                          "'%s': %s%.*s%s is a sequence of %d; '%s' is not an index in 0..%d",
                          assignment, i ? "'" : "the root", pre, assignment, i ? "'" : "", cur->n,
                          comp[i], cur->n);
            sim_yaml_free(val);
            goto out;
        }
        if (last && k < cur->n) {
            node_free(cur->items[k]);
            cur->items[k] = val;
        } else if (last) {
            seq_add(cur, val);
        } else if (k < cur->n) {
            cur = cur->items[k];
        } else {
            sim_yaml *m = node_new(SIM_YAML_MAP, set_file, 0, 0);
            seq_add(cur, m);
            cur = m;
        }
    }
out:
    free(path);
    return rc;
}

/* ---- writing ---- */

static int emit(yaml_emitter_t *em, yaml_event_t *ev, sim_err *err)
{
    /* yaml_emitter_emit consumes the event even when it fails */
    if (yaml_emitter_emit(em, ev)) return SIM_OK;
    if (em->error == YAML_MEMORY_ERROR) yaml_oom();
    return sim_fail(err, SIM_EIO, NULL, 0, 0, "cannot write YAML: %s",
                    em->problem ? em->problem : "write error");
}

static int emit_scalar(yaml_emitter_t *em, const sim_yaml *at, const char *s, int quoted,
                       sim_err *err)
{
    yaml_event_t ev;
    /* ANY lets libyaml pick plain style when the text reads back the same, quotes otherwise */
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (const yaml_char_t *)s, (int)strlen(s), 1, 1,
                                      quoted ? YAML_SINGLE_QUOTED_SCALAR_STYLE
                                             : YAML_ANY_SCALAR_STYLE))
        return sim_yaml_fail(at, err, "'%s' is not valid UTF-8", s);
    return emit(em, &ev, err);
}

static int write_node(yaml_emitter_t *em, const sim_yaml *n, sim_err *err)
{
    yaml_event_t ev;
    int rc;
    switch (n->kind) {
    case SIM_YAML_SCALAR:
        return emit_scalar(em, n, n->value, n->quoted, err);
    case SIM_YAML_MAP:
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
        if ((rc = emit(em, &ev, err))) return rc;
        for (int i = 0; i < n->n; i++) {
            if ((rc = emit_scalar(em, n, n->keys[i], 0, err))) return rc;
            if ((rc = write_node(em, n->items[i], err))) return rc;
        }
        yaml_mapping_end_event_initialize(&ev);
        return emit(em, &ev, err);
    case SIM_YAML_SEQ:
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
        if ((rc = emit(em, &ev, err))) return rc;
        for (int i = 0; i < n->n; i++)
            if ((rc = write_node(em, n->items[i], err))) return rc;
        yaml_sequence_end_event_initialize(&ev);
        return emit(em, &ev, err);
    }
    assert(0 && "bad sim_yaml kind");
    return SIM_EINVAL;
}

int sim_yaml_same(const sim_yaml *a, const sim_yaml *b)
{
    if (a->kind != b->kind || a->n != b->n) return 0;
    if (a->kind == SIM_YAML_SCALAR) return a->quoted == b->quoted && !strcmp(a->value, b->value);
    for (int i = 0; i < a->n; i++) {
        const sim_yaml *bi = a->kind == SIM_YAML_SEQ ? b->items[i] : NULL;
        for (int j = 0; a->kind == SIM_YAML_MAP && j < b->n && !bi; j++) /* keys are unique */
            if (!strcmp(a->keys[i], b->keys[j])) bi = b->items[j];
        if (!bi || !sim_yaml_same(a->items[i], bi)) return 0;
    }
    return 1;
}

int sim_yaml_write(const sim_yaml *root, FILE *f, sim_err *err)
{
    yaml_emitter_t em;
    if (!yaml_emitter_initialize(&em)) yaml_oom();
    yaml_emitter_set_output_file(&em, f);
    yaml_emitter_set_unicode(&em, 1);
    yaml_emitter_set_indent(&em, 2);
    yaml_emitter_set_width(&em, -1); /* no folding of long scalars: diffs of runs stay line-wise */

    yaml_event_t ev;
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    int rc = emit(&em, &ev, err);
    if (!rc) {
        yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
        rc = emit(&em, &ev, err);
    }
    if (!rc) rc = write_node(&em, root, err);
    if (!rc) {
        yaml_document_end_event_initialize(&ev, 1);
        rc = emit(&em, &ev, err);
    }
    if (!rc) {
        yaml_stream_end_event_initialize(&ev);
        rc = emit(&em, &ev, err);
    }
    if (!rc && !yaml_emitter_flush(&em))
        rc = sim_fail(err, SIM_EIO, NULL, 0, 0, "cannot write YAML: %s",
                      em.problem ? em.problem : "write error");
    yaml_emitter_delete(&em);
    if (!rc && (fflush(f) != 0 || ferror(f)))
        rc = sim_fail(err, SIM_EIO, NULL, 0, 0, "cannot write YAML: %s", strerror(errno));
    return rc;
}
