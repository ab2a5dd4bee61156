/* tests/test_nn_pack.c -- model parameters survive msgpack round trips bit for bit, the encoded
 * size is what a dense float32 message should cost, and wrong or damaged messages are rejected. */
#include "nn/pack.h"
#include "tests/check.h"

#include <string.h>

int main(void)
{
    sim_rng r;
    sim_rng_seed(&r, 3, SIM_RNG_TEST, 0);
    nn_arch a, b;
    sim_err err = {0};
    CHECK(nn_arch_build(&a, "lenet5-caffe", 1, 28, 28, 10, &err) == SIM_OK);
    CHECK(nn_arch_build(&b, "cnn2", 1, 28, 28, 10, &err) == SIM_OK);
    nn_model m, m2;
    nn_model_init(&m, &a, 1);
    nn_model_init(&m2, &a, 1);
    nn_model_init_params(&m, &r);

    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    nn_pack_params(&sb, &a, m.params);
    /* 430,500 float32 plus a header of names and shapes well under a kilobyte */
    CHECK(sb.size > 430500 * 4 && sb.size < 430500 * 4 + 1024);
    CHECK(nn_unpack_params(m2.params, &a, sb.data, sb.size, "msg", &err) == SIM_OK);
    CHECK(memcmp(m.params, m2.params, sizeof(float) * a.layout.n_floats) == 0);

    /* packing is deterministic: same parameters, same bytes */
    msgpack_sbuffer sb2;
    msgpack_sbuffer_init(&sb2);
    nn_pack_params(&sb2, &a, m2.params);
    CHECK(sb2.size == sb.size && memcmp(sb.data, sb2.data, sb.size) == 0);

    /* a message for another architecture is rejected and leaves the target untouched */
    nn_model c;
    nn_model_init(&c, &b, 1);
    c.params[0] = 42.0f;
    CHECK(nn_unpack_params(c.params, &b, sb.data, sb.size, "msg", &err) == SIM_EFORMAT);
    CHECK(strstr(err.msg, "conv1") != NULL || strstr(err.msg, "tensor") != NULL);
    CHECK(c.params[0] == 42.0f);

    /* every truncation is detected */
    int caught = 0, tries = 0;
    for (size_t cut = 0; cut < sb.size; cut += sb.size / 97 + 1, tries++)
        caught += nn_unpack_params(m2.params, &a, sb.data, cut, "msg", &err) == SIM_EFORMAT;
    CHECK_EQ_I64(caught, tries);
    CHECK(strcmp(err.file, "msg") == 0);

    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&sb2);
    nn_model_destroy(&m);
    nn_model_destroy(&m2);
    nn_model_destroy(&c);
    return CHECK_DONE();
}
