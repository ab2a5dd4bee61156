/* tests/test_fl_registry.c -- the registry's promises: every algorithm is written against the
 * current fl_algo (FL_ALGO_VERSION) and its section is one the registry reads; no two random
 * streams (the core purposes of sim/rng.h and every algorithm's declared ones) share an id; and
 * the capabilities an algorithm declares are what the loader enforces: persistent_momentum only
 * where FL_KEEPS_MOMENTUM, batch_size 1 refused under FL_NEEDS_BATCH2, momentum refused under
 * FL_PLAIN_SGD, each error at the key's file:line:col; and an algorithm that refuses
 * `compression:` has a reason to give. */
#include "algos/algo.h"
#include "tests/check.h"

#include <string.h>

static void test_versions_and_sections(void)
{
    int n = 0;
    for (int i = 0; fl_algos[i]; i++, n++) {
        const fl_algo *a = fl_algos[i];
        CHECK_MSG(a->version == FL_ALGO_VERSION, "%s: version %d", a->name, a->version);
        CHECK_MSG(a->server_new && a->client_train && a->eval_params && a->server_save,
                  "%s: a required slot is empty", a->name);
        CHECK_MSG(fl_algo_find(a->name) == a, "%s: found by its name", a->name);
        int known = !a->section;
        for (int k = 0; fl_sections[k]; k++)
            known |= fl_sections[k] == a->section;
        CHECK_MSG(known, "%s: its section is not in fl_sections", a->name);
        /* a refusal of `compression:` says why (fl_algo.no_compress) */
        int both = (a->flags & FL_COMPRESS_UP) && (a->flags & FL_COMPRESS_DOWN);
        CHECK_MSG(both == !a->no_compress, "%s: compression %s, %s reason", a->name,
                  both ? "applies" : "is refused", a->no_compress ? "a" : "no");
    }
    CHECK(n >= 20);
}

static void test_stream_ids(void)
{
    const char *tag[128];
    uint64_t id[128];
    int n = 0;
    for (int i = 0; sim_rng_core[i]; i++, n++)
        tag[n] = "core", id[n] = sim_rng_core[i];
    for (int i = 0; fl_algos[i]; i++)
        for (const fl_stream *s = fl_algos[i]->streams; s && s->tag; s++) {
            int seen = 0; /* a family's members may declare the same stream */
            for (int k = 0; k < n; k++)
                seen |= !strcmp(tag[k], s->tag) && id[k] == fl_stream_id(s);
            if (!seen && n < 128) tag[n] = s->tag, id[n++] = fl_stream_id(s);
        }
    CHECK(n > 10);
    int clashes = 0;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (id[a] == id[b]) {
                clashes++;
                printf("streams %s and %s share id %llu\n", tag[a], tag[b],
                       (unsigned long long)id[a]);
            }
    CHECK_MSG(clashes == 0, "%d stream ids used twice", clashes);
    /* the ids the results depend on stay as they were */
    CHECK(fl_algo_stream("fjord.width") == 8 && fl_algo_stream("fedpews.masks") == 9 &&
          fl_algo_stream("dmpfl.grad_batch") == 10 && fl_algo_stream("pa3dfl.init") == 12 &&
          fl_algo_stream("pfedhn.init") == 13);
    /* a hashed id lies above every core purpose */
    fl_stream h = {"new.thing", 0};
    CHECK(fl_stream_id(&h) > 0xffffffffull && fl_stream_id(&h) == fl_stream_id(&h));
}

/* Load text as an algorithm map: SIM_OK, or the error formatted into msg. */
static int load(const char *text, char *msg, size_t cap)
{
    fl_config c;
    sim_err err = {0};
    int rc = fl_config_load(&c, text, NULL, &err);
    sim_err_format(&err, msg, cap);
    fl_config_destroy(&c);
    return rc;
}

static void test_flags_honoured(void)
{
    char msg[700];
    int keepers = 0, others = 0;
    for (int i = 0; fl_algos[i]; i++) {
        const fl_algo *a = fl_algos[i];
        char text[256];
        snprintf(text, sizeof text, "{name: %s, momentum: 0.9,\n persistent_momentum: true}",
                 a->name);
        int rc = load(text, msg, sizeof msg);
        if (a->flags & FL_KEEPS_MOMENTUM) {
            keepers++;
            CHECK_MSG(rc == SIM_OK, "%s keeps momentum: %s", a->name, msg);
        } else {
            others++;
            CHECK_MSG(rc == SIM_EINVAL && strstr(msg, "config:2:23: persistent_momentum: ") &&
                              strstr(msg, "restarts its momentum every job"),
                      "%s: %s", a->name, msg);
        }
        snprintf(text, sizeof text, "{name: %s,\n  momentum: 0.9}", a->name);
        rc = load(text, msg, sizeof msg);
        if (a->flags & FL_PLAIN_SGD)
            CHECK_MSG(rc == SIM_EINVAL && strstr(msg, "config:2:13: momentum: ") &&
                              strstr(msg, "plain SGD"),
                      "%s: %s", a->name, msg);
        else
            CHECK_MSG(rc == SIM_OK, "%s with momentum: %s", a->name, msg);
        snprintf(text, sizeof text, "{name: %s,\n  batch_size: 1}", a->name);
        rc = load(text, msg, sizeof msg);
        if (a->flags & FL_NEEDS_BATCH2)
            CHECK_MSG(rc == SIM_EINVAL && strstr(msg, "config:2:15: batch_size: "), "%s: %s",
                      a->name, msg);
        else
            CHECK_MSG(rc == SIM_OK, "%s with batch 1: %s", a->name, msg);
    }
    CHECK(keepers >= 3 && others >= 3);
    /* the chosen algorithm's section gets its defaults, another present section is checked */
    fl_config c;
    sim_err err = {0};
    CHECK(fl_config_load(&c, "{name: ditto, apfl: {alpha: 0.2}}", NULL, &err) == SIM_OK);
    CHECK(c.own != NULL && *(const double *)c.own == 0.1); /* ditto.lambda's default */
    fl_config_destroy(&c);
    CHECK(load("{name: ditto, apfl: {alpha: 2}}", msg, sizeof msg) == SIM_EINVAL &&
          strstr(msg, "alpha: 2 is out of range"));
    CHECK(load("{name: ditto, apfl: {alfa: 0.2}}", msg, sizeof msg) == SIM_EINVAL &&
          strstr(msg, "unknown key 'alfa'"));
    CHECK(load("{name: fedsgd}", msg, sizeof msg) == SIM_EINVAL &&
          strstr(msg, "unknown name 'fedsgd'"));
}

int main(void)
{
    test_versions_and_sections();
    test_stream_ids();
    test_flags_honoured();
    return CHECK_DONE();
}
