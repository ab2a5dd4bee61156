/* tests/fuzz/fuzz_message.c -- fuzzes the messages algorithms exchange: each algorithm's own
 * decoders of down messages, up messages and private states (algos/), and parameter messages
 * (nn_unpack_params in nn/pack.c), on tiny.yaml run by that algorithm (fuzz_env.h).
 *
 * The first byte s picks the algorithm, fl_algos[s % N], and what the rest is, by (s / N) % 5:
 *   0: the down message of client FUZZ_MSG_CLIENT's job of round FUZZ_MSG_ROUND (client_train);
 *   1: that client's private state, trained with the down message its server sends (client_train);
 *   2: that client's up message (server_absorb after job_down, then server_aggregate);
 *   3: that client's private state evaluated (eval_params);
 *   4: a parameter message of the model (nn_unpack_params).
 * Every server is fresh, so an input does what it did whatever ran before it. Besides not
 * crashing: a refused message is an error saying so and nothing else; a trained job reports an up
 * message of the length it holds, and one trained from the server's own down message (whatever
 * the private state) answers with an up message the server absorbs; a density is in [0, 1]; a
 * parameter message that decodes encodes back to one that decodes to the same bits.
 */
#include "tests/fuzz/fuzz_env.h"

#include "nn/pack.h"

#define FUZZ_MSG_CLIENT 1
#define FUZZ_MSG_ROUND  2
#define FUZZ_MSG_OPS    5

static void train(sim_scenario *sc, fl_worker *w, void *server, const void *down, size_t down_len,
                  const void *priv, size_t priv_len)
{
    const fl_algo *a = sc->spec.algo;
    msgpack_sbuffer real;
    msgpack_sbuffer_init(&real);
    if (!down) { /* the message the server sends */
        a->job_down(server, FUZZ_MSG_CLIENT, FUZZ_MSG_ROUND, &real);
        down = real.data, down_len = real.size;
    }
    fl_job job = {FUZZ_MSG_CLIENT,
                  FUZZ_MSG_ROUND,
                  down,
                  down_len,
                  priv,
                  priv_len,
                  (uint64_t)FUZZ_MSG_CLIENT << 32 | FUZZ_MSG_ROUND};
    fl_result res;
    fl_result_init(&res);
    sim_err err = {0};
    int rc = a->client_train(&sc->spec.env, &job, w, &res, &err);
    if (rc) {
        fuzz_require(rc < 0 && err.msg[0]);
    } else {
        fuzz_require(res.up_bytes == res.up.size && res.steps >= 0);
        /* trained from what the server sent, the client's answer is one the server takes */
        if (real.size && res.up.size) {
            rc = a->server_absorb(server, FUZZ_MSG_CLIENT, res.up.data, res.up.size, 1.0, 1.0,
                                  &err);
            if (rc) fprintf(stderr, "the server refused its client's answer: %s\n", err.msg);
            fuzz_require(rc == SIM_OK);
        }
    }
    fl_result_destroy(&res);
    msgpack_sbuffer_destroy(&real);
}

static void absorb(sim_scenario *sc, void *server, const void *up, size_t len)
{
    const fl_algo *a = sc->spec.algo;
    msgpack_sbuffer down;
    msgpack_sbuffer_init(&down);
    a->job_down(server, FUZZ_MSG_CLIENT, FUZZ_MSG_ROUND, &down);
    sim_err err = {0};
    int rc = a->server_absorb(server, FUZZ_MSG_CLIENT, up, len, 1.0, 1.0, &err);
    if (rc)
        fuzz_require(rc == SIM_EFORMAT && err.msg[0]);
    else
        a->server_aggregate(server);
    msgpack_sbuffer_destroy(&down);
}

static void params(const nn_arch *arch, const void *buf, size_t len)
{
    size_t nf = arch->layout.n_floats;
    float *p = calloc(nf, sizeof *p), *q = calloc(nf, sizeof *q);
    if (!p || !q) abort();
    sim_err err = {0};
    int rc = nn_unpack_params(p, arch, buf, len, "message", &err);
    if (rc) {
        fuzz_require(rc == SIM_EFORMAT && err.msg[0] && !strcmp(err.file, "message"));
    } else {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        nn_pack_params(&sb, arch, p);
        fuzz_require(nn_unpack_params(q, arch, sb.data, sb.size, "message", &err) == SIM_OK);
        fuzz_require(!memcmp(p, q, nf * sizeof *p));
        msgpack_sbuffer_destroy(&sb);
    }
    free(p);
    free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fl_worker w[64];
    static nn_model m[64];
    static int ready[64];
    if (size < 1) return 0;
    int n = fuzz_n_algos(), i = data[0] % n, op = data[0] / n % FUZZ_MSG_OPS;
    const uint8_t *msg = data + 1;
    size_t len = size - 1;
    sim_scenario *sc = fuzz_env(i);
    if (op == 4) {
        params(sc->spec.env.arch, msg, len);
        return 0;
    }
    if (!ready[i]) {
        fl_worker_init(&w[i]);
        nn_model_init(&m[i], sc->spec.env.arch, 256);
        ready[i] = 1;
    }
    sim_err err = {0};
    void *server = sc->spec.algo->server_new(&sc->spec.env, &err);
    fuzz_require(server != NULL);
    if (op == 0) {
        train(sc, &w[i], server, msg, len, NULL, 0);
    } else if (op == 1) {
        train(sc, &w[i], server, NULL, 0, msg, len);
    } else if (op == 2) {
        absorb(sc, server, msg, len);
    } else {
        double d = sc->spec.algo->eval_params(server, FUZZ_MSG_CLIENT, msg, len, &m[i]);
        fuzz_require(d >= 0 && d <= 1);
    }
    sc->spec.algo->server_free(server);
    return 0;
}
