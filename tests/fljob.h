/* tests/fljob.h -- one client job of an algorithm as the engine runs it, for the algorithm tests:
 * the down message (whose length must match the cost-only answer), client_train on it, the
 * result in res. Include tests/check.h first. */
#ifndef TESTS_FLJOB_H
#define TESTS_FLJOB_H

#include "algos/algo.h"

static inline void test_job(const fl_algo *a, const fl_env *env, void *server, int client,
                            int round, const void *priv, size_t priv_len, fl_result *res,
                            fl_worker *w)
{
    msgpack_sbuffer down;
    msgpack_sbuffer_init(&down);
    size_t n = a->job_down(server, client, round, &down);
    CHECK(n == down.size && n == a->job_down(server, client, round, NULL));
    fl_job j = {client,
                round,
                down.data,
                down.size,
                priv,
                priv_len,
                (uint64_t)client << 32 | (uint32_t)round};
    sim_err err = {0};
    fl_result_init(res);
    CHECK_MSG(a->client_train(env, &j, w, res, &err) == SIM_OK, "%s: %s", a->name, err.msg);
    msgpack_sbuffer_destroy(&down);
}

#endif /* TESTS_FLJOB_H */
