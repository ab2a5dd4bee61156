/* tests/test_sim_yaml.c -- the YAML tree keeps every node's position, every error a file can cause
 * names its exact file:line:col, unknown keys are caught in file order, --set edits the tree as
 * the command line means it, and writing then re-reading gives the same tree. */
#include "sim/yaml.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char scenario[] = "name: fmnist\n"                           /* 1 */
                               "seed: 1\n"                                /* 2 */
                               "federation:\n"                            /* 3 */
                               "  mode: sync\n"                           /* 4 */
                               "  deadline: 30 min\n"                     /* 5 */
                               "devices:\n"                               /* 6 */
                               "  catalog: devices/catalog.yaml\n"        /* 7 */
                               "  mix:\n"                                 /* 8 */
                               "    - {profile: phone-low, share: 0.5}\n" /* 9 */
                               "    - profile: laptop\n"                  /* 10 */
                               "      share: 0.2\n"                       /* 11 */
                               "tags: [a, 'b c', \"yes\"]\n"              /* 12 */
                               "empty:\n";                                /* 13 */

/* "file:line:col: msg" of err, for whole-message comparisons */
static const char *fmt_err(const sim_err *e)
{
    static char buf[1024];
    sim_err_format(e, buf, sizeof buf);
    return buf;
}

#define CHECK_ERR(e, want)                                                                         \
    CHECK_MSG(strcmp(fmt_err(&(e)), (want)) == 0, "error \"%s\", want \"%s\"", fmt_err(&(e)),      \
              (want))

static sim_yaml *load(const char *text)
{
    sim_yaml *r = NULL;
    sim_err e = {0};
    int rc = sim_yaml_load_string(&r, text, "s.yaml", &e);
    CHECK_MSG(rc == SIM_OK && r, "load failed: %s", fmt_err(&e));
    return r;
}

/* load text expecting failure with code and exactly the formatted error want */
static void check_load_error(const char *text, int code, const char *want)
{
    sim_yaml *r = (sim_yaml *)1;
    sim_err e = {0};
    int rc = sim_yaml_load_string(&r, text, "bad.yaml", &e);
    CHECK_MSG(rc == code && r == NULL, "rc %d for \"%s\"", rc, text);
    CHECK_ERR(e, want);
}

/* the tree written as YAML, in a malloc'ed string */
static char *write_str(const sim_yaml *root)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sim_err e = {0};
    CHECK_MSG(sim_yaml_write(root, f, &e) == SIM_OK, "write: %s", fmt_err(&e));
    fclose(f);
    return buf;
}

static void test_structure(void)
{
    sim_yaml *r = load(scenario);
    if (!r) return;
    CHECK(r->kind == SIM_YAML_MAP && r->n == 6);
    CHECK(strcmp(r->file, "s.yaml") == 0 && r->line == 1 && r->col == 1);
    CHECK(strcmp(r->keys[0], "name") == 0 && strcmp(r->keys[5], "empty") == 0);

    sim_yaml *fed = sim_yaml_get(r, "federation");
    CHECK(fed && fed->kind == SIM_YAML_MAP && fed->n == 2);
    CHECK(fed && fed->line == 4 && fed->col == 3);
    CHECK(r->key_line[2] == 3 && r->key_col[2] == 1);
    sim_yaml *dl = sim_yaml_get(fed, "deadline");
    CHECK(dl && dl->kind == SIM_YAML_SCALAR && strcmp(dl->value, "30 min") == 0);
    CHECK(dl && dl->line == 5 && dl->col == 13);
    CHECK(fed && fed->key_line[1] == 5 && fed->key_col[1] == 3);

    sim_yaml *mix = sim_yaml_get(sim_yaml_get(r, "devices"), "mix");
    CHECK(mix && mix->kind == SIM_YAML_SEQ && mix->n == 2 && mix->line == 9 && mix->col == 5);
    if (mix && mix->n == 2) {
        sim_yaml *m0 = mix->items[0], *m1 = mix->items[1];
        CHECK(m0->kind == SIM_YAML_MAP && m0->line == 9 && m0->col == 7);
        sim_yaml *share0 = sim_yaml_get(m0, "share");
        CHECK(share0 && strcmp(share0->value, "0.5") == 0 && share0->line == 9 &&
              share0->col == 35);
        CHECK(m0->key_line[1] == 9 && m0->key_col[1] == 28);
        CHECK(m1->kind == SIM_YAML_MAP && m1->line == 10 && m1->col == 7);
        sim_yaml *share1 = sim_yaml_get(m1, "share");
        CHECK(share1 && share1->line == 11 && share1->col == 14);
    }
    sim_yaml *tags = sim_yaml_get(r, "tags");
    CHECK(tags && tags->kind == SIM_YAML_SEQ && tags->n == 3);
    if (tags && tags->n == 3) {
        CHECK(strcmp(tags->items[1]->value, "b c") == 0 && tags->items[1]->col == 11);
        CHECK(!tags->items[0]->quoted && tags->items[1]->quoted && tags->items[2]->quoted);
    }
    sim_yaml *empty = sim_yaml_get(r, "empty");
    CHECK(empty && empty->kind == SIM_YAML_SCALAR && strcmp(empty->value, "") == 0);

    CHECK(sim_yaml_get(r, "nope") == NULL);
    CHECK(sim_yaml_get(tags, "a") == NULL); /* not a map */
    CHECK(sim_yaml_get(NULL, "a") == NULL);
    sim_yaml_free(r);
    sim_yaml_free(NULL);

    /* empty documents are empty maps; a bare scalar document stays a scalar */
    const char *empties[] = {"", "# only a comment\n", "---\n", "---\n...\n"};
    for (size_t i = 0; i < SIM_ARRAY_LEN(empties); i++) {
        r = load(empties[i]);
        CHECK_MSG(r && r->kind == SIM_YAML_MAP && r->n == 0, "empty doc %zu", i);
        sim_yaml_free(r);
    }
    r = load("hello\n");
    CHECK(r && r->kind == SIM_YAML_SCALAR && strcmp(r->value, "hello") == 0);
    sim_yaml_free(r);
}

static void test_load_errors(void)
{
    check_load_error(
            "a: 1\nb: [1, 2\nc: 3\n", SIM_EFORMAT,
            "bad.yaml:3:2: did not find expected ',' or ']' (while parsing a flow sequence "
            "at 2:4)");
    check_load_error("a: b: c\n", SIM_EFORMAT,
                     "bad.yaml:1:5: mapping values are not allowed in this context");
    check_load_error("a:\n  b: 1\n  c: 2\n  b: 3\n", SIM_EFORMAT,
                     "bad.yaml:4:3: duplicate key 'b' (first at 2:3)");
    check_load_error("a: &x 1\nb: *x\n", SIM_EFORMAT,
                     "bad.yaml:1:4: anchors (&x) are not supported");
    check_load_error("a: 1\nb: *x\n", SIM_EFORMAT, "bad.yaml:2:4: aliases (*x) are not supported");
    check_load_error("a: 1\nb: &m {c: 1}\n", SIM_EFORMAT,
                     "bad.yaml:2:4: anchors (&m) are not supported");
    check_load_error("a: 1\n---\nb: 2\n", SIM_EFORMAT,
                     "bad.yaml:2:1: multiple documents are not supported");
    check_load_error("? [a]\n: 1\n", SIM_EFORMAT,
                     "bad.yaml:1:3: a map key must be a scalar, not a sequence");
    check_load_error("a: ok\nb: \xff\n", SIM_EFORMAT,
                     "bad.yaml:2:4: invalid leading UTF-8 octet (#FF)");

    /* nesting deep enough to overflow a naive recursive builder is an error, not a crash */
    char deep[2 * 1000 + 2];
    memset(deep, '[', 1000);
    memset(deep + 1000, ']', 1000);
    deep[2000] = '\0';
    check_load_error(deep, SIM_EFORMAT, "bad.yaml:1:257: nested deeper than 256 levels");
}

static void test_unknown_keys(void)
{
    sim_yaml *r = load(scenario);
    if (!r) return;
    sim_err e = {0};
    sim_yaml_get(r, "name");
    sim_yaml_get(r, "seed");
    sim_yaml *fed = sim_yaml_get(r, "federation");
    sim_yaml_get(fed, "mode");
    /* "deadline" (line 5) comes before "devices" (line 6) and "tags" (line 12) */
    CHECK(sim_yaml_check_used(r, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:5:3: unknown key 'deadline'");
    sim_yaml_get(fed, "deadline");
    CHECK(sim_yaml_check_used(r, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:6:1: unknown key 'devices'");

    /* into sequences: the second mix item's "share" is the first one nobody read */
    sim_yaml *dev = sim_yaml_get(r, "devices");
    sim_yaml_get(dev, "catalog");
    sim_yaml *mix = sim_yaml_get(dev, "mix");
    for (int i = 0; i < mix->n; i++)
        sim_yaml_get(mix->items[i], "profile");
    sim_yaml_get(mix->items[0], "share");
    CHECK(sim_yaml_check_used(r, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:11:7: unknown key 'share'");
    sim_yaml_get(mix->items[1], "share");
    CHECK(sim_yaml_check_used(r, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:12:1: unknown key 'tags'");

    sim_yaml_get(r, "tags");
    sim_yaml_get(r, "empty");
    CHECK(sim_yaml_check_used(r, &e) == SIM_OK);
    sim_yaml_free(r);

    r = load(scenario);
    sim_yaml_get(r, "name");
    sim_yaml_mark_used(sim_yaml_get(r, "devices"));
    CHECK(sim_yaml_check_used(sim_yaml_get(r, "devices"), &e) == SIM_OK);
    CHECK(sim_yaml_check_used(r, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:2:1: unknown key 'seed'");
    sim_yaml_mark_used(r);
    CHECK(sim_yaml_check_used(r, &e) == SIM_OK);
    sim_yaml_free(r);
}

/* A reader that has asked for a map's keys checks that map alone, before acting on it; errors
 * about what a key names point at the key, not at its value. */
static void test_check_keys(void)
{
    sim_yaml *r = load(scenario);
    if (!r) return;
    sim_err e = {0};
    sim_yaml *dev = sim_yaml_get(r, "devices");
    sim_yaml_get(dev, "catalog");
    /* devices' own keys: "mix" (line 8) is unread; the root's and mix items' do not count */
    CHECK(sim_yaml_check_keys(dev, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:8:3: unknown key 'mix'");
    sim_yaml_get(dev, "mix");
    CHECK(sim_yaml_check_keys(dev, &e) == SIM_OK);
    CHECK(sim_yaml_check_keys(sim_yaml_get(dev, "catalog"), &e) == SIM_OK); /* not a map */
    CHECK(sim_yaml_check_used(dev, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:9:8: unknown key 'profile'");

    CHECK(sim_yaml_fail_key(dev, "catalog", &e, "catalog: %s", "gone") == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:7:3: catalog: gone");
    CHECK(sim_yaml_fail_key(dev, "profiles", &e, "no profiles") == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:7:3: no profiles"); /* absent: at the map */
    CHECK(sim_yaml_set(r, "devices.extra=1", &e) == SIM_OK);
    CHECK(sim_yaml_check_keys(dev, &e) == SIM_EINVAL);
    CHECK_ERR(e, "--set: unknown key 'extra'");
    sim_yaml_free(r);
}

/* Names become file names and header text: what every scenario, sweep point and profile uses
 * passes; a '/', a leading '.', a space, a control character or too many bytes do not, with
 * the text shown on one line. */
static void test_names(void)
{
    static const char *const good[] = {"tiny",
                                       "dmpfl-fmnist-short",
                                       "algorithm.name=fjord",
                                       "seed=2,algorithm.lr=0.1",
                                       "a+b_c",
                                       "phone-low",
                                       "x.y"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK_MSG(sim_name_problem(good[i], 127) == NULL, "'%s' is a name", good[i]);
    static const struct {
        const char *name, *why;
    } bad[] = {{"", "it is empty"},
               {"abcd", "it is too long"},
               {"../x", "it starts with '.'"},
               {".hidden", "it starts with '.'"},
               {"a/b", "it has a '/'"},
               {"a b", "it has a space"},
               {"a\tb", "it has a control character"},
               {"a\"b", "it has a character other than letters, digits and - _ . + = ,"},
               {"caf\xc3\xa9", "it has a character other than letters, digits and - _ . + = ,"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *why = sim_name_problem(bad[i].name, i == 1 ? 3 : 127);
        CHECK_MSG(why && !strcmp(why, bad[i].why), "'%s': %s", bad[i].name, why ? why : "a name");
    }

    sim_yaml *r = load("name: \"a\\nb\"\nprofiles:\n  ok: 1\n  \"x y\": 2\n");
    if (!r) return;
    sim_err e = {0};
    const char *v = NULL;
    CHECK(sim_yaml_name(sim_yaml_get(r, "name"), "name", 127, &v, &e) == SIM_EINVAL && !v);
    CHECK_MSG(strstr(fmt_err(&e), "s.yaml:1:7: name: 'a\\nb' is not a usable name: it has a "
                                  "control character (") == fmt_err(&e) &&
                      !strchr(fmt_err(&e), '\n'),
              "%s", fmt_err(&e));
    sim_yaml *p = sim_yaml_get(r, "profiles");
    CHECK(sim_yaml_key_name(p, 0, "profile name", 47, &e) == SIM_OK);
    CHECK(sim_yaml_key_name(p, 1, "profile name", 47, &e) == SIM_EINVAL);
    CHECK_MSG(strstr(fmt_err(&e), "s.yaml:4:3: profile name: 'x y' is not a usable name: it has a "
                                  "space") == fmt_err(&e),
              "%s", fmt_err(&e));
    CHECK(sim_yaml_set(r, "name=run-1", &e) == SIM_OK);
    CHECK(sim_yaml_name(sim_yaml_get(r, "name"), "name", 127, &v, &e) == SIM_OK && v &&
          !strcmp(v, "run-1"));
    sim_yaml_free(r);
}

static void test_typed(void)
{
    sim_yaml *r = load("n: 42\n"                     /* 1 */
                       "neg: -7\n"                   /* 2 */
                       "word: fmnist\n"              /* 3 */
                       "big: 99999999999999999999\n" /* 4 */
                       "x: 0.25\n"                   /* 5 */
                       "nan: nan\n"                  /* 6 */
                       "m: {a: 1}\n"                 /* 7 */
                       "s: [1]\n"                    /* 8 */
                       "deadline: 30\n"              /* 9 */
                       "link: {bandwidth: 20 MB, latency: 40 ms, cpu: 8 GFLOPS, mem: 2 GiB}\n"
                       "flags: [yes, no, on, off, true, false, True, maybe]\n" /* 11 */
                       "fl: 1.5\n"                                             /* 12 */
                       "hex: 0x10\n"                                           /* 13 */
                       "sp: ' 5'\n");                                          /* 14 */
    if (!r) return;
    sim_err e = {0};
    long l = -1;
    double d = -1;
    const char *s = NULL;
    int b = -1;
    sim_time t = -1;

    CHECK(sim_yaml_int(sim_yaml_get(r, "n"), "n", 0, 100, &l, &e) == SIM_OK && l == 42);
    CHECK(sim_yaml_int(sim_yaml_get(r, "neg"), "neg", -10, 0, &l, &e) == SIM_OK && l == -7);
    l = -1;
    CHECK(sim_yaml_int(sim_yaml_get(r, "n"), "n", 0, 10, &l, &e) == SIM_EINVAL && l == -1);
    CHECK_ERR(e, "s.yaml:1:4: n: 42 is out of range [0, 10]");
    CHECK(sim_yaml_int(sim_yaml_get(r, "word"), "rounds", 0, 10, &l, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:3:7: rounds: 'fmnist' is not an integer");
    CHECK(sim_yaml_int(sim_yaml_get(r, "big"), "big", 0, 1000000, &l, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:4:6: big: 99999999999999999999 is out of range [0, 1000000]");
    CHECK(sim_yaml_int(sim_yaml_get(r, "fl"), "fl", 0, 10, &l, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:12:5: fl: '1.5' is not an integer");
    CHECK(sim_yaml_int(sim_yaml_get(r, "sp"), "sp", 0, 10, &l, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:14:5: sp: ' 5' is not an integer");
    CHECK(sim_yaml_int(sim_yaml_get(r, "m"), "clients", 0, 10, &l, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:7:4: clients: expected an integer, found a map");
    CHECK(sim_yaml_int(sim_yaml_get(r, "absent"), "rounds", 0, 10, &l, &e) == SIM_EINVAL);
    CHECK_ERR(e, "missing rounds");
    CHECK(l == -1);

    CHECK(sim_yaml_double(sim_yaml_get(r, "x"), "x", 0, 1, &d, &e) == SIM_OK && d == 0.25);
    CHECK(sim_yaml_double(sim_yaml_get(r, "n"), "n", 0, 100, &d, &e) == SIM_OK && d == 42);
    CHECK(sim_yaml_double(sim_yaml_get(r, "x"), "x", 0.5, 1, &d, &e) == SIM_EINVAL && d == 42);
    CHECK_ERR(e, "s.yaml:5:4: x: 0.25 is out of range [0.5, 1]");
    CHECK(sim_yaml_double(sim_yaml_get(r, "nan"), "lr", 0, 1, &d, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:6:6: lr: 'nan' is not a number");
    CHECK(sim_yaml_double(sim_yaml_get(r, "hex"), "hex", 0, 100, &d, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:13:6: hex: '0x10' is not a number");
    CHECK(sim_yaml_double(sim_yaml_get(r, "s"), "alpha", 0, 1, &d, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:8:4: alpha: expected a number, found a sequence");

    CHECK(sim_yaml_str(sim_yaml_get(r, "word"), "model", &s, &e) == SIM_OK && s &&
          strcmp(s, "fmnist") == 0);
    CHECK(sim_yaml_str(sim_yaml_get(r, "m"), "model", &s, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:7:4: model: expected a string, found a map");

    sim_yaml *flags = sim_yaml_get(r, "flags");
    int want[] = {1, 0, 1, 0, 1, 0, 1};
    for (int i = 0; i < 7; i++)
        CHECK_MSG(sim_yaml_bool(flags->items[i], "flag", &b, &e) == SIM_OK && b == want[i],
                  "bool '%s'", flags->items[i]->value);
    CHECK(sim_yaml_bool(flags->items[7], "personalized", &b, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:11:46: personalized: 'maybe' is not a boolean (use true/false, yes/no, "
                 "on/off)");

    /* units: the parser's message, positioned at the value */
    CHECK(sim_yaml_time(sim_yaml_get(r, "deadline"), "deadline", &t, &e) == SIM_EINVAL && t == -1);
    CHECK_ERR(e, "s.yaml:9:11: deadline: '30' has no unit (use ns, us, ms, s, min, h, d)");
    sim_yaml *link = sim_yaml_get(r, "link");
    CHECK(sim_yaml_rate(sim_yaml_get(link, "bandwidth"), "bandwidth", &d, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:10:19: bandwidth: 'MB' is not a rate unit (use bps, kbps, Mbps, Gbps, "
                 "Tbps, B/s, kB/s, MB/s, GB/s, TB/s)");
    CHECK(sim_yaml_time(sim_yaml_get(link, "latency"), "latency", &t, &e) == SIM_OK &&
          t == 40 * SIM_MS);
    CHECK(sim_yaml_flops(sim_yaml_get(link, "cpu"), "cpu", &d, &e) == SIM_OK && d == 8e9);
    CHECK(sim_yaml_bytes(sim_yaml_get(link, "mem"), "mem", &d, &e) == SIM_OK && d == 2147483648.0);
    CHECK(sim_yaml_bytes(link, "link", &d, &e) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:10:7: link: expected a size, found a map");
    CHECK(sim_yaml_time(NULL, "deadline", &t, &e) == SIM_EINVAL);
    CHECK_ERR(e, "missing deadline");

    CHECK(sim_yaml_fail(link, &e, "%s needs %d more", "link", 2) == SIM_EINVAL);
    CHECK_ERR(e, "s.yaml:10:7: link needs 2 more");
    CHECK(sim_yaml_fail(NULL, &e, "no node") == SIM_EINVAL);
    CHECK_ERR(e, "no node");
    sim_yaml_free(r);
}

/* apply an assignment that must fail with SIM_EINVAL/EFORMAT and leave the tree unchanged */
static void check_set_error(sim_yaml *r, const char *assignment, int code, const char *want)
{
    char *before = write_str(r);
    sim_err e = {0};
    CHECK_MSG(sim_yaml_set(r, assignment, &e) == code, "set '%s' should fail", assignment);
    CHECK_ERR(e, want);
    char *after = write_str(r);
    CHECK_MSG(before && after && strcmp(before, after) == 0, "set '%s' changed the tree",
              assignment);
    free(before);
    free(after);
}

static void test_set(void)
{
    sim_yaml *r = load(scenario);
    if (!r) return;
    sim_err e = {0};
    long l = 0;
    sim_time t = 0;
    double d = 0;

    /* a new key in an existing map */
    CHECK(sim_yaml_set(r, "federation.per_round=10", &e) == SIM_OK);
    sim_yaml *fed = sim_yaml_get(r, "federation");
    sim_yaml *pr = sim_yaml_get(fed, "per_round");
    CHECK(pr && strcmp(pr->value, "10") == 0 && strcmp(pr->file, "--set") == 0 && pr->line == 0);
    CHECK(fed->n == 3 && strcmp(fed->keys[2], "per_round") == 0);

    /* replacing a scalar keeps the key where it was, the value says --set */
    CHECK(sim_yaml_set(r, "seed=7", &e) == SIM_OK);
    CHECK(r->n == 6 && strcmp(r->keys[1], "seed") == 0);
    CHECK(sim_yaml_int(sim_yaml_get(r, "seed"), "seed", 0, 100, &l, &e) == SIM_OK && l == 7);

    /* nested maps are created on the way; a value with spaces stays one scalar */
    CHECK(sim_yaml_set(r, "eval.schedule.every=5 min", &e) == SIM_OK);
    sim_yaml *every = sim_yaml_get(sim_yaml_get(sim_yaml_get(r, "eval"), "schedule"), "every");
    CHECK(sim_yaml_time(every, "every", &t, &e) == SIM_OK && t == 300 * SIM_SEC);

    /* errors about a --set value say so */
    CHECK(sim_yaml_set(r, "federation.deadline=5 mni", &e) == SIM_OK);
    CHECK(sim_yaml_time(sim_yaml_get(fed, "deadline"), "deadline", &t, &e) == SIM_EINVAL);
    CHECK_ERR(e, "--set: deadline: unknown time unit 'mni' (use ns, us, ms, s, min, h, d)");

    /* flow values are YAML */
    CHECK(sim_yaml_set(r, "tags=[1, 2]", &e) == SIM_OK);
    sim_yaml *tags = sim_yaml_get(r, "tags");
    CHECK(tags && tags->kind == SIM_YAML_SEQ && tags->n == 2 &&
          strcmp(tags->items[1]->value, "2") == 0 && strcmp(tags->items[1]->file, "--set") == 0);
    CHECK(sim_yaml_set(r, "dataset={name: fashion-mnist, alpha: 0.1}", &e) == SIM_OK);
    sim_yaml *ds = sim_yaml_get(r, "dataset");
    CHECK(ds && ds->kind == SIM_YAML_MAP && ds->n == 2 && ds->key_line[1] == 0);
    CHECK(sim_yaml_double(sim_yaml_get(ds, "alpha"), "alpha", 0, 1, &d, &e) == SIM_OK && d == 0.1);
    CHECK(sim_yaml_set(r, "name='yes'", &e) == SIM_OK);
    CHECK(sim_yaml_get(r, "name")->quoted && strcmp(sim_yaml_get(r, "name")->value, "yes") == 0);
    CHECK(sim_yaml_set(r, "note=", &e) == SIM_OK);
    CHECK(sim_yaml_get(r, "note")->kind == SIM_YAML_SCALAR &&
          strcmp(sim_yaml_get(r, "note")->value, "") == 0);

    /* sequence items by index; one past the end appends */
    CHECK(sim_yaml_set(r, "devices.mix.0.share=0.7", &e) == SIM_OK);
    sim_yaml *mix = sim_yaml_get(sim_yaml_get(r, "devices"), "mix");
    CHECK(strcmp(sim_yaml_get(mix->items[0], "share")->value, "0.7") == 0);
    CHECK(sim_yaml_set(r, "devices.mix.2.profile=phone-high", &e) == SIM_OK);
    CHECK(mix->n == 3 && strcmp(sim_yaml_get(mix->items[2], "profile")->value, "phone-high") == 0);
    CHECK(sim_yaml_set(r, "devices.mix.1=server", &e) == SIM_OK);
    CHECK(mix->items[1]->kind == SIM_YAML_SCALAR && strcmp(mix->items[1]->value, "server") == 0);
    CHECK(sim_yaml_set(r, "tags.2=3", &e) == SIM_OK && tags->n == 3);

    /* "empty:" is null, which a --set may turn into a map */
    CHECK(sim_yaml_set(r, "empty.x=1", &e) == SIM_OK);
    CHECK(sim_yaml_get(sim_yaml_get(r, "empty"), "x") != NULL);

    check_set_error(r, "federation.mode", SIM_EINVAL,
                    "--set: 'federation.mode' is not key.path=value");
    check_set_error(r, "=5", SIM_EINVAL, "--set: '=5' has no key path before '='");
    check_set_error(r, "a..b=1", SIM_EINVAL, "--set: 'a..b=1': empty key in path 'a..b'");
    check_set_error(r, "a.=1", SIM_EINVAL, "--set: 'a.=1': empty key in path 'a.'");
    check_set_error(r, "federation.mode.x.y=1", SIM_EINVAL,
                    "--set: 'federation.mode.x.y=1': 'federation.mode' is a scalar ('sync'), not "
                    "a map");
    check_set_error(r, "devices.mix.first.share=1", SIM_EINVAL,
                    "--set: 'devices.mix.first.share=1': 'devices.mix' is a sequence of 3; 'first' "
                    "is not an index in 0..3");
    check_set_error(r, "devices.mix.4=1", SIM_EINVAL,
                    "--set: 'devices.mix.4=1': 'devices.mix' is a sequence of 3; '4' is not an "
                    "index in 0..3");
    check_set_error(r, "tags=[1, 2", SIM_EFORMAT,
                    "--set: 'tags=[1, 2': did not find expected ',' or ']' (while parsing a flow "
                    "sequence at 1:1) (at 2:1 of the value)");
    check_set_error(r, "tags=*a", SIM_EFORMAT,
                    "--set: 'tags=*a': aliases (*a) are not supported (at 1:1 of the value)");

    /* an unknown key from --set is reported as coming from --set */
    sim_yaml_mark_used(r);
    CHECK(sim_yaml_set(r, "federation.bogus=1", &e) == SIM_OK);
    CHECK(sim_yaml_check_used(r, &e) == SIM_EINVAL);
    CHECK_ERR(e, "--set: unknown key 'bogus'");
    sim_yaml_free(r);

    /* a set on a document that was empty */
    r = load("");
    CHECK(sim_yaml_set(r, "a.b=[x, {y: 1}]", &e) == SIM_OK);
    char *out = write_str(r);
    CHECK_MSG(out && strcmp(out, "a:\n  b:\n  - x\n  - y: 1\n") == 0, "wrote \"%s\"", out);
    free(out);
    sim_yaml_free(r);
    r = load("just a scalar");
    check_set_error(r, "a=1", SIM_EINVAL,
                    "--set: 'a=1': the root is a scalar ('just a scalar'), not a map");
    sim_yaml_free(r);
}

static void test_write(void)
{
    /* text that must come back as the same strings: quoting where plain would misread */
    const char *tricky = "plain: fmnist\n"
                         "num: 0.5\n"
                         "str_num: '0.5'\n"
                         "str_bool: \"yes\"\n"
                         "str_null: 'null'\n"
                         "tagged: !!str 5\n"
                         "colon: 'a: b'\n"
                         "hash: 'x #y'\n"
                         "dash: '- x'\n"
                         "lead: ' x'\n"
                         "trail: 'x '\n"
                         "empty_str: ''\n"
                         "null_value:\n"
                         "multi: \"line1\\nline2\"\n"
                         "literal: |\n  l1\n  l2\n"
                         "unicode: \"\xc2\xb5s \\u00e9\"\n"
                         "bracket: '[not a list]'\n"
                         "'key: with colon': 1\n"
                         "'': empty key\n"
                         "'123': numeric key\n"
                         "nested: {a: [1, [2, 3], {b: c}], d: {}}\n"
                         "empty_seq: []\n";
    sim_yaml *a = load(tricky);
    if (!a) return;
    char *text = write_str(a);
    sim_yaml *b = NULL;
    sim_err e = {0};
    CHECK(text && sim_yaml_load_string(&b, text, "written", &e) == SIM_OK);
    CHECK_MSG(b && sim_yaml_same(a, b), "round trip differs:\n%s", text);
    /* block style, plain where plain is safe */
    CHECK(text && strstr(text, "plain: fmnist\nnum: 0.5\n"));
    CHECK(text && strstr(text, "nested:\n  a:\n  - 1\n  - - 2\n    - 3\n  - b: c\n  d: {}\n"));
    CHECK(text && strstr(text, "str_num: '0.5'\n"));
    CHECK(text && strstr(text, "tagged: '5'\n"));
    CHECK(text && strstr(text, "null_value:\n"));
    /* writing what was read back is a fixed point */
    char *text2 = b ? write_str(b) : NULL;
    CHECK(text2 && strcmp(text, text2) == 0);
    free(text);
    free(text2);
    sim_yaml_free(b);

    /* through a real file, with load_file */
    char path[] = "/tmp/test_sim_yaml_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    CHECK(sim_yaml_write(a, f, &e) == SIM_OK);
    fclose(f);
    b = NULL;
    CHECK(sim_yaml_load_file(&b, path, &e) == SIM_OK);
    CHECK(b && sim_yaml_same(a, b) && strcmp(b->file, path) == 0);
    sim_yaml_free(b);
    unlink(path);

    /* a missing file names itself */
    b = (sim_yaml *)1;
    CHECK(sim_yaml_load_file(&b, path, &e) == SIM_EIO && b == NULL);
    CHECK(strcmp(e.file, path) == 0 && strstr(e.msg, "cannot open") && e.line == 0);
    /* a directory, or a device that would be read forever, is refused at once */
    CHECK(sim_yaml_load_file(&b, "/tmp", &e) == SIM_EIO && b == NULL);
    CHECK(strcmp(e.file, "/tmp") == 0 && strstr(e.msg, "cannot open: it is a directory"));
    CHECK(sim_yaml_load_file(&b, "/dev/zero", &e) == SIM_EIO && b == NULL);
    CHECK(strcmp(e.file, "/dev/zero") == 0 && strstr(e.msg, "it is a device, not a file"));

    /* a full disk is a write error, not silence */
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        CHECK(sim_yaml_write(a, full, &e) == SIM_EIO);
        CHECK(strstr(e.msg, "cannot write YAML") != NULL);
        fclose(full);
    }
    sim_yaml_free(a);
}

/* a syntax error in a file reports the file's name and the position */
/* sim_yaml_same: the settings, not their order in a map */
static void test_same(void)
{
    const char *base = "a: 1\nm: {x: 1, y: [p, q]}\nn: {x: 2}\n";
    const char *same[] = {"m: {y: [p, q], x: 1}\nn: {x: 2}\na: 1\n", NULL};
    const char *other[] = {
            "a: 1\nm: {x: 1, y: [q, p]}\nn: {x: 2}\n",       /* sequence order */
            "a: 1\nm: {x: 2, y: [p, q]}\nn: {x: 1}\n",       /* values swapped between maps */
            "a: 1\nm: {x: 1, y: [p, q]}\nn: {x: 2}\nb: 0\n", /* a key more */
            "a: 1\nm: {x: 1, y: [p, q]}\n",                  /* a key less */
            "a: '1'\nm: {x: 1, y: [p, q]}\nn: {x: 2}\n",     /* quoted */
            "a: [1]\nm: {x: 1, y: [p, q]}\nn: {x: 2}\n",     /* kind */
            "a: 1\nm: {x: 1, z: [p, q]}\nn: {x: 2}\n",       /* key name */
            NULL};
    sim_yaml *a = load(base);
    for (int k = 0; a && k < 2; k++)
        for (const char *const *t = k ? other : same; *t; t++) {
            sim_yaml *b = load(*t);
            CHECK_MSG(b && sim_yaml_same(a, b) == !k && sim_yaml_same(b, a) == !k,
                      "same(\"%s\", \"%s\") should be %d", base, *t, !k);
            sim_yaml_free(b);
        }
    sim_yaml_free(a);
}

static void test_file_error(void)
{
    char path[] = "/tmp/test_sim_yaml_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char text[] = "a: 1\nb:\n  - x\n  y: 2\n";
    CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    sim_yaml *r = (sim_yaml *)1;
    sim_err e = {0};
    CHECK(sim_yaml_load_file(&r, path, &e) == SIM_EFORMAT && r == NULL);
    CHECK(strcmp(e.file, path) == 0 && e.line == 4 && e.col == 3);
    unlink(path);
}

int main(void)
{
    test_structure();
    test_load_errors();
    test_unknown_keys();
    test_check_keys();
    test_names();
    test_typed();
    test_set();
    test_write();
    test_same();
    test_file_error();
    return CHECK_DONE();
}
