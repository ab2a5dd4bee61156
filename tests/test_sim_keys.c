/* tests/test_sim_keys.c -- the key-table loader (sim/keys.h): every type parses into its field,
 * a given value out of range or of the wrong kind is an error at its file:line:col naming the
 * key, absent keys get their defaults written into the tree in table order (and read back bit
 * for bit), a default may follow the context and the keys read before it, and an unknown key is
 * left for sim_yaml_check_used to report at its position. The scenario's own sections are read
 * through their tables (sim/scenario_keys.c): every key a scenario's defaults write is in its
 * section's table, in the table's order, with the table's default, and the async federation's
 * staleness is read from its table with errors at the key. An unknown key, choice or name
 * suggests the one likely meant, or says where the key belongs. */
#include "sim/keys.h"
#include "sim/scenario_keys.h"
#include "tests/check.h"
#include "tests/scenario_text.h"

#include <stdlib.h>
#include <string.h>

typedef struct block {
    int n, flag, pick;
    long big;
    double x, bytes, bps, flops;
    sim_time t, none;
    char word[8];
    int derived;
} block;

static const char *const PICKS[] = {"low", "mid", "high", NULL};

/* n's default in context: the clients, plus 1 when x (read before it) is above 1 */
static void n_default(const sim_key_ctx *ctx, char *buf, size_t len)
{
    const block *b = ctx->config;
    snprintf(buf, len, "%d", ctx->clients + (b->x > 1));
}

static const sim_key KEYS[] = {
        {.name = "x",
         .type = SIM_KEY_DOUBLE,
         .offset = offsetof(block, x),
         .dflt = "0.1",
         .lo = 0,
         .hi = 10,
         .doc = "a number"},
        {.name = "n",
         .type = SIM_KEY_INT,
         .offset = offsetof(block, n),
         .dflt = "clients",
         .dflt_fn = n_default,
         .lo = 1,
         .hi = 100},
        {.name = "flag", .type = SIM_KEY_BOOL, .offset = offsetof(block, flag), .dflt = "true"},
        {.name = "pick",
         .type = SIM_KEY_CHOICE,
         .offset = offsetof(block, pick),
         .dflt = "mid",
         .words = PICKS},
        {.name = "big",
         .type = SIM_KEY_LONG,
         .offset = offsetof(block, big),
         .dflt = "5",
         .lo = 0,
         .hi = 9.3e18},
        {.name = "bytes", .type = SIM_KEY_SIZE, .offset = offsetof(block, bytes), .dflt = "2 KiB"},
        {.name = "bps", .type = SIM_KEY_RATE, .offset = offsetof(block, bps), .dflt = "1 Mbps"},
        {.name = "flops",
         .type = SIM_KEY_FLOPS,
         .offset = offsetof(block, flops),
         .dflt = "3 GFLOPS"},
        {.name = "t", .type = SIM_KEY_TIME, .offset = offsetof(block, t), .dflt = "40 ms"},
        {.name = "none", .type = SIM_KEY_TIME, .offset = offsetof(block, none), .dflt = "none"},
        {.name = "word",
         .type = SIM_KEY_STRING,
         .offset = offsetof(block, word),
         .size = sizeof(((block *)0)->word),
         .dflt = "abc"},
        {.name = "derived",
         .type = SIM_KEY_INT,
         .offset = offsetof(block, derived),
         .lo = 0,
         .hi = 1}, /* no default: stays absent */
        {0},
};

static const char *fmt_err(const sim_err *e)
{
    static char buf[1024];
    sim_err_format(e, buf, sizeof buf);
    return buf;
}

/* Load text's `sec:` map through KEYS; the document is returned in *doc (the caller frees it). */
static int load(const char *text, block *b, sim_yaml **doc, sim_err *err)
{
    int rc = sim_yaml_load_string(doc, text, "k.yaml", err);
    CHECK_MSG(rc == SIM_OK, "parse: %s", err->msg);
    if (rc) return rc;
    sim_yaml_get(*doc, "top"); /* a key of the document's own, read elsewhere */
    sim_keys_map root = {*doc, *doc, ""};
    char pre[32];
    sim_keys_map s = sim_keys_sub(&root, "sec", pre, sizeof pre);
    sim_key_ctx ctx = {.clients = 7};
    memset(b, 0, sizeof *b);
    b->derived = -1;
    rc = sim_keys_need_map(&s, "sec", err);
    if (!rc) rc = sim_keys_load(KEYS, b, &s, &ctx, err);
    if (!rc) rc = sim_yaml_check_used(*doc, err);
    return rc;
}

static char *written(const sim_yaml *doc)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sim_err err;
    CHECK(sim_yaml_write(doc, f, &err) == SIM_OK);
    fclose(f);
    return buf;
}

static void test_defaults(void)
{
    block b;
    sim_yaml *doc = NULL;
    sim_err err = {0};
    /* the section absent: created, every default written in table order */
    CHECK_MSG(load("top: 1\n", &b, &doc, &err) == SIM_OK, "%s", fmt_err(&err));
    CHECK(b.x == 0.1 && b.n == 7 && b.flag == 1 && b.pick == 1 && b.big == 5);
    CHECK(b.bytes == 2048 && b.bps == 1e6 && b.flops == 3e9);
    CHECK(b.t == 40 * SIM_MS && b.none == 0 && !strcmp(b.word, "abc") && b.derived == -1);
    char *out = written(doc);
    const char *want = "top: 1\nsec:\n  x: 0.10000000000000001\n  n: 7\n  flag: true\n"
                       "  pick: mid\n  big: 5\n  bytes: 2 KiB\n  bps: 1 Mbps\n  flops: 3 GFLOPS\n"
                       "  t: 40 ms\n  none: none\n  word: abc\n";
    CHECK_MSG(!strcmp(out, want), "written:\n%s", out);
    free(out);
    sim_yaml_free(doc);
    /* given keys stay where they are, the defaults of the others follow in table order; n's
     * default follows x as given */
    CHECK_MSG(load("sec:\n  word: hi\n  x: 2.5\n  derived: 1\n", &b, &doc, &err) == SIM_OK, "%s",
              fmt_err(&err));
    CHECK(b.x == 2.5 && b.n == 8 && !strcmp(b.word, "hi") && b.derived == 1);
    out = written(doc);
    want = "sec:\n  word: hi\n  x: 2.5\n  derived: 1\n  n: 8\n  flag: true\n  pick: mid\n"
           "  big: 5\n  bytes: 2 KiB\n  bps: 1 Mbps\n  flops: 3 GFLOPS\n  t: 40 ms\n  none: none\n";
    CHECK_MSG(!strcmp(out, want), "written:\n%s", out);
    free(out);
    sim_yaml_free(doc);
    /* every type from the file */
    CHECK_MSG(load("sec: {x: 0, n: 100, flag: off, pick: high, big: 9000000000000000000, bytes: "
                   "1 MB, bps: 2 Gbps, flops: 1 TFLOPS, t: 2 min, none: 1 s, word: 1234567}\n",
                   &b, &doc, &err) == SIM_OK,
              "%s", fmt_err(&err));
    CHECK(b.x == 0 && b.n == 100 && b.flag == 0 && b.pick == 2 && b.big == 9000000000000000000L);
    CHECK(b.bytes == 1e6 && b.bps == 2e9 && b.flops == 1e12 && b.t == 120 * SIM_SEC &&
          b.none == SIM_SEC && !strcmp(b.word, "1234567"));
    sim_yaml_free(doc);
}

static void test_errors(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
            {"sec:\n  x: 11\n", "k.yaml:2:6: x: 11 is out of range [0, 10]"},
            {"sec:\n  n: 0\n", "k.yaml:2:6: n: 0 is out of range [1, 100]"},
            {"sec:\n  n: 1.5\n", "k.yaml:2:6: n: '1.5' is not an integer"},
            {"sec: {flag: maybe}\n",
             "k.yaml:1:13: flag: 'maybe' is not a boolean (use true/false, yes/no, on/off)"},
            {"sec: {pick: top}\n", "k.yaml:1:13: pick: 'top' is not one of low, mid, high"},
            /* a misspelled choice names the word meant */
            {"sec: {pick: hihg}\n",
             "k.yaml:1:13: pick: 'hihg' is not one of low, mid, high; did you mean 'high'?"},
            {"sec: {big: -1}\n", "k.yaml:1:12: big: -1 is out of range [0, 9223372036854775807]"},
            {"sec: {t: 3}\n", "k.yaml:1:10: t: '3' has no unit"},
            {"sec: {word: abcdefgh}\n", "k.yaml:1:13: word: value too long"},
            {"sec: [1]\n", "k.yaml:1:6: sec: expected a map of settings"},
            {"sec:\n  x: 1\n  bogus: 2\n", "k.yaml:3:3: unknown key 'bogus'"},
    };
    for (size_t i = 0; i < SIM_ARRAY_LEN(cases); i++) {
        block b;
        sim_yaml *doc = NULL;
        sim_err err = {0};
        CHECK_MSG(load(cases[i].text, &b, &doc, &err) == SIM_EINVAL, "case %zu loads", i);
        CHECK_MSG(!strncmp(fmt_err(&err), cases[i].want, strlen(cases[i].want)),
                  "case %zu: \"%s\", want \"%s\"", i, fmt_err(&err), cases[i].want);
        sim_yaml_free(doc);
    }
}

/* What counts as a misspelling: an edit or two (a swap of neighbours is one, case is none),
 * more for longer names, never a word itself, and the nearest word wins. */
static void test_misspelling(void)
{
    CHECK(sim_keys_misspelling("local_epoch", "local_epochs") == 1);
    CHECK(sim_keys_misspelling("dealdine", "deadline") == 1);
    CHECK(sim_keys_misspelling("Rounds", "rounds") == 0);
    CHECK(sim_keys_misspelling("rounds", "rounds") == -1);
    CHECK(sim_keys_misspelling("lr", "mu") == -1);
    CHECK(sim_keys_misspelling("sed", "seed") == 1);
    CHECK(sim_keys_misspelling("bufr", "buffer") == 2);
    CHECK(sim_keys_misspelling("concurency", "concurrency") == 1);
    CHECK(sim_keys_misspelling("staleness", "deadline") == -1);
    CHECK(sim_keys_misspelling("x", "y") == -1); /* never a whole word replaced */
    static const char *const words[] = {"buffer", "budget", "bufferz", NULL};
    CHECK(!strcmp(sim_keys_closest("bufer", words), "buffer"));
    CHECK(!strcmp(sim_keys_closest("budgit", words), "budget"));
    CHECK(sim_keys_closest("overhead", words) == NULL);
}

/* A scenario's unknown key or name says what was likely meant: a key of its own section it
 * misspells, else the sections it is a key of, else a key elsewhere it misspells; a misspelled
 * algorithm, model, dataset or device profile names the one meant. */
static void test_hints(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
            {"algorithm: {local_epoch: 2}\n",
             "s.yaml:1:13: unknown key 'local_epoch'; did you mean 'local_epochs'?"},
            {"deadline: 5 s\n", "s.yaml:1:1: unknown key 'deadline'; it belongs under federation:"},
            {"federation: {clients: 5}\n",
             "s.yaml:1:14: unknown key 'clients'; it belongs under dataset: or partition:"},
            {"federation: {seed: 5}\n",
             "s.yaml:1:14: unknown key 'seed'; it belongs at the top level"},
            {"local_epoch: 2\n", "s.yaml:1:1: unknown key 'local_epoch'; did you mean "
                                 "'local_epochs' under algorithm:?"},
            {"devices: {mix: [{profile: laptop, share: 1, sahre: 1}]}\n",
             "s.yaml:1:45: unknown key 'sahre'; did you mean 'share'?"},
            {"devices: {profiles: {p: {base: laptop, compte: 1 GFLOPS}}}\n",
             "s.yaml:1:40: unknown key 'compte'; did you mean 'compute'?"},
            {"federation: {mode: async, staleness: {knd: hinge}}\n",
             "s.yaml:1:39: unknown key 'knd'; did you mean 'kind'?"},
            {"algorithm: {name: fedprx}\n", "did you mean 'fedprox'?"},
            {"model: fedpews-mpl\n", "did you mean 'fedpews-mlp'?"},
            {"devices: {mix: [{profile: laptp, share: 1}]}\n", "did you mean 'laptop'?"},
            {"devices: {profiles: {p: {base: rpi}}}\n", "did you mean 'rpi4'?"},
    };
    for (size_t i = 0; i < SIM_ARRAY_LEN(cases); i++) {
        char text[512], msg[1024];
        sim_scenario sc;
        snprintf(text, sizeof text, "dataset: {name: synth-pews-3.2k}\n%s%s",
                 strncmp(cases[i].text, "model", 5) ? "model: fedpews-mlp\n" : "", cases[i].text);
        int rc = test_load_scenario(&sc, text, msg, sizeof msg);
        if (!rc) sim_scenario_destroy(&sc);
        /* the position is the text's line + 1 or 2 (the dataset and model lines before it) */
        const char *want = cases[i].want, *colon = strchr(want, ':');
        char full[512];
        if (!strncmp(want, "s.yaml:", 7)) {
            int line = atoi(want + 7) + 1 + !!strncmp(cases[i].text, "model", 5);
            snprintf(full, sizeof full, "s.yaml:%d%s", line, strchr(colon + 1, ':'));
            want = full;
        }
        CHECK_MSG(rc == SIM_EINVAL && strstr(msg, want), "case %zu: \"%s\", want \"%s\"", i, msg,
                  want);
    }
}

static void test_print(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(sim_keys_print(f, "sec", NULL, KEYS, "sec.p", 0) == 1);
    CHECK(sim_keys_print(f, "sec", NULL, KEYS, NULL, 1) == 12);
    fclose(f);
    CHECK_MSG(!strncmp(buf, "\nsec\n  sec.pick ", 16) && strstr(buf, "low, mid, high"), "%s", buf);
    CHECK_MSG(strstr(buf, "\n### `sec`\n") && strstr(buf, "| `x` | number | `0.1` | [0, 10] | a "
                                                          "number |\n"),
              "%s", buf);
    free(buf);
}

/* The resolved map at dotted path of sc's tree: every key in table, in table order, and those
 * not given (after the first `given` keys, which stay where the file has them) with the table's
 * default, when it has a fixed one. */
static void check_section(const sim_scenario *sc, const char *path, const sim_key *table, int given)
{
    const sim_yaml *m = sc->doc;
    char buf[64], *save = NULL;
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok_r(buf, ".", &save); k && m; k = strtok_r(NULL, ".", &save))
        m = sim_yaml_get(m, k);
    CHECK_MSG(m && m->kind == SIM_YAML_MAP && m->n > given, "%s: resolved", path);
    int last = -1;
    for (int i = 0; m && m->kind == SIM_YAML_MAP && i < m->n; i++) {
        int at = -1;
        for (int k = 0; table[k].name; k++)
            if (!strcmp(table[k].name, m->keys[i])) at = k;
        if (at < 0 && !path[0]) continue; /* the top level holds the sections too */
        CHECK_MSG(at >= 0, "%s.%s is in its table", path, m->keys[i]);
        if (at < 0 || i < given) continue;
        CHECK_MSG(at > last, "%s.%s follows its table's order", path, m->keys[i]);
        last = at;
        const sim_key *k = &table[at];
        const char *v = m->items[i]->kind == SIM_YAML_SCALAR ? m->items[i]->value : NULL;
        if (k->dflt_fn || !k->dflt || !v) continue;
        int same = k->type == SIM_KEY_DOUBLE ? strtod(v, NULL) == strtod(k->dflt, NULL)
                                             : !strcmp(v, k->dflt);
        CHECK_MSG(same, "%s.%s: the table's default %s, not %s", path, k->name, k->dflt, v);
    }
}

static void test_scenario_tables(void)
{
    sim_scenario sc;
    char msg[1024];
    /* every section but the dataset's name, the model and the mode left to its defaults */
    int rc = test_load_scenario(&sc,
                                "dataset: {name: synth-pews-3.2k}\nmodel: fedpews-mlp\n"
                                "federation: {mode: async}\n",
                                msg, sizeof msg);
    CHECK_MSG(rc == SIM_OK, "%s", msg);
    if (rc) return;
    check_section(&sc, "", sim_keys_top, 3); /* dataset, model, federation */
    check_section(&sc, "dataset", sim_keys_dataset, 1);
    check_section(&sc, "partition", sim_keys_partition, 0);
    check_section(&sc, "federation", sim_keys_federation, 1);
    check_section(&sc, "federation.staleness", sim_keys_staleness, 0);
    check_section(&sc, "eval", sim_keys_eval, 0);
    check_section(&sc, "devices", sim_keys_devices, 0);
    /* the values read are the table's defaults */
    const sim_fed_config *f = &sc.spec.fed;
    CHECK(f->mode == SIM_ASYNC &&
          f->buffer == atoi(sim_keys_find(sim_keys_federation, "buffer")->dflt));
    CHECK(f->staleness == SIM_STALE_POLY &&
          f->stale_a == strtod(sim_keys_find(sim_keys_staleness, "a")->dflt, NULL) &&
          f->stale_b == strtod(sim_keys_find(sim_keys_staleness, "b")->dflt, NULL));
    CHECK(sc.spec.eval.personalized == 1 && sc.spec.eval.every_rounds == 1);
    sim_scenario_destroy(&sc);
    /* a staleness key out of its table's range: at the key */
    rc = test_load_scenario(&sc,
                            "dataset: {name: synth-pews-3.2k}\nmodel: fedpews-mlp\n"
                            "federation:\n  mode: async\n  staleness: {kind: hinge, a: 101}\n",
                            msg, sizeof msg);
    CHECK_MSG(rc == SIM_EINVAL && strstr(msg, "s.yaml:5:31: a: 101 is out of range [0, 100]"), "%s",
              msg);
    rc = test_load_scenario(&sc,
                            "dataset: {name: synth-pews-3.2k}\nmodel: fedpews-mlp\n"
                            "federation:\n  mode: async\n  staleness: {kind: square}\n",
                            msg, sizeof msg);
    CHECK_MSG(rc == SIM_EINVAL && strstr(msg, "s.yaml:5:21: kind: 'square' is not one of "
                                              "constant, polynomial, hinge"),
              "%s", msg);
}

int main(void)
{
    test_scenario_tables();
    test_defaults();
    test_errors();
    test_misspelling();
    test_hints();
    test_print();
    return CHECK_DONE();
}
