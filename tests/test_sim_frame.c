/* tests/test_sim_frame.c -- a result frame carries every field of a result: each nn_cost term
 * (walked through nn_cost_terms, so a new term is covered without a line here), the messages, the
 * loss and the steps, from sim_frame_serve's packer through sim_frame_take_result's reader;
 * nn_cost_terms describes nn_cost exactly (every double of the struct once, each name once); and
 * the sums over it: nn_cost_add scales the work terms and leaves samples alone, nn_cost_add_diff
 * adds every term's growth.
 */
#include "nn/model.h"
#include "sim/frame.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

/* Term i of every result gets its own value, none a multiple of another's by a power of 2 (so a
 * term read from a neighbour's slot, or packed twice, cannot match). */
static double term_value(int i)
{
    return 1e9 * (i + 1) + 0.25 * (i + 3);
}

/* A stand-in algorithm: its result is made of known, distinct values. */
static int fake_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                      sim_err *err)
{
    (void)env, (void)w, (void)err;
    for (int i = 0; i < NN_COST_N; i++)
        *nn_cost_at(&res->cost, i) = term_value(i);
    msgpack_sbuffer_write(&res->up, "up!", 3);
    res->up_bytes = 3;
    msgpack_sbuffer_write(&res->priv, "private", 7);
    res->loss = 0.625;
    res->steps = 17 + job->client;
    return 0;
}

static void test_terms(void)
{
    CHECK_EQ_I64(sizeof(nn_cost), NN_COST_N * sizeof(double));
    unsigned seen = 0;
    for (int i = 0; i < NN_COST_N; i++) {
        size_t off = nn_cost_terms[i].off;
        CHECK_MSG(off % sizeof(double) == 0 && off < sizeof(nn_cost), "%s at %zu",
                  nn_cost_terms[i].name, off);
        seen |= 1u << (off / sizeof(double));
        for (int j = 0; j < i; j++)
            CHECK_MSG(strcmp(nn_cost_terms[i].name, nn_cost_terms[j].name), "%s twice",
                      nn_cost_terms[i].name);
    }
    CHECK_EQ_I64(seen, (1u << NN_COST_N) - 1);
    /* the members are where the table says (two spelled out: the rest are the same macro) */
    nn_cost c = {0};
    c.flops = 1, c.samples = 2;
    for (int i = 0; i < NN_COST_N; i++) {
        const char *n = nn_cost_terms[i].name;
        CHECK_MSG(nn_cost_get(&c, i) == (!strcmp(n, "flops")     ? 1
                                         : !strcmp(n, "samples") ? 2
                                                                 : 0),
                  "%s", n);
    }
}

static void test_sums(void)
{
    nn_cost to, c, before;
    for (int i = 0; i < NN_COST_N; i++) {
        *nn_cost_at(&to, i) = 1;
        *nn_cost_at(&c, i) = term_value(i);
        *nn_cost_at(&before, i) = 0.5 * term_value(i);
    }
    nn_cost_add(&to, &c, 4);
    for (int i = 0; i < NN_COST_N; i++) {
        double want = nn_cost_terms[i].work ? 1 + 4 * term_value(i) : 1;
        CHECK_MSG(nn_cost_get(&to, i) == want, "add: %s %.17g, want %.17g", nn_cost_terms[i].name,
                  nn_cost_get(&to, i), want);
    }
    CHECK(to.samples == 1 && to.flops == 1 + 4 * term_value(0)); /* the flags, spelled out */
    nn_cost_add_diff(&to, &c, &before);
    for (int i = 0; i < NN_COST_N; i++) {
        double want = (nn_cost_terms[i].work ? 1 + 4 * term_value(i) : 1) +
                      (term_value(i) - 0.5 * term_value(i));
        CHECK_MSG(nn_cost_get(&to, i) == want, "diff: %s %.17g, want %.17g", nn_cost_terms[i].name,
                  nn_cost_get(&to, i), want);
    }
}

static void test_result_round_trip(void)
{
    nn_partition part = {.n_clients = 4};
    fl_env env = {.part = &part};
    fl_algo fake = {.name = "fake", .client_train = fake_train};
    msgpack_sbuffer job, res;
    msgpack_sbuffer_init(&job);
    msgpack_sbuffer_init(&res);
    sim_err err = {0};
    fl_job j = {.client = 2, .round = 5, .stream = 9};
    CHECK(sim_frame_job(&job, &j, &err) == SIM_OK);
    CHECK(sim_frame_serve(&fake, &env, NULL, 0, 0, 1, job.data + SIM_FRAME_PREFIX,
                          job.size - SIM_FRAME_PREFIX, &res) == SIM_OK);
    CHECK_EQ_I64(sim_frame_len((const unsigned char *)res.data), res.size - SIM_FRAME_PREFIX);

    sim_job_out o;
    memset(&o, 0, sizeof o);
    fl_result_init(&o.res);
    const char *why = NULL;
    int rc = sim_frame_take_result(res.data + SIM_FRAME_PREFIX, res.size - SIM_FRAME_PREFIX, 2, 5,
                                   &o, &why);
    CHECK_MSG(rc == SIM_OK && o.rc == 0, "taken: %s", why ? why : "");
    for (int i = 0; i < NN_COST_N; i++)
        CHECK_MSG(nn_cost_get(&o.res.cost, i) == term_value(i), "%s: sent %.17g, read %.17g",
                  nn_cost_terms[i].name, term_value(i), nn_cost_get(&o.res.cost, i));
    CHECK(o.res.up_bytes == 3 && o.res.up.size == 3 && !memcmp(o.res.up.data, "up!", 3));
    CHECK(o.res.priv.size == 7 && !memcmp(o.res.priv.data, "private", 7));
    CHECK(o.res.loss == 0.625 && o.res.steps == 19);
    fl_result_destroy(&o.res);

    /* a term that is negative is refused, whichever it is */
    for (int i = 0; i < NN_COST_N; i++) {
        /* the cost terms are the frame's doubles after the first 3 bytes of header: find term i's
         * 9-byte float64 (0xcb + 8 bytes) by its value and negate its sign bit */
        unsigned char *b = (unsigned char *)res.data + SIM_FRAME_PREFIX;
        size_t n = res.size - SIM_FRAME_PREFIX, at = 0;
        for (size_t k = 0; k + 9 <= n && !at; k++) {
            if (b[k] != 0xcb) continue;
            uint64_t u = 0;
            for (int q = 1; q <= 8; q++)
                u = u << 8 | b[k + q];
            double v;
            memcpy(&v, &u, sizeof v);
            if (v == term_value(i)) at = k + 1;
        }
        CHECK_MSG(at, "%s not found in the frame", nn_cost_terms[i].name);
        if (!at) continue;
        b[at] ^= 0x80;
        memset(&o, 0, sizeof o);
        fl_result_init(&o.res);
        CHECK_MSG(sim_frame_take_result(b, n, 2, 5, &o, &why) == SIM_EFORMAT, "negative %s refused",
                  nn_cost_terms[i].name);
        fl_result_destroy(&o.res);
        b[at] ^= 0x80;
    }
    msgpack_sbuffer_destroy(&job);
    msgpack_sbuffer_destroy(&res);
}

int main(void)
{
    test_terms();
    test_sums();
    test_result_round_trip();
    return CHECK_DONE();
}
