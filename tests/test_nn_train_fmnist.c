/* tests/test_nn_train_fmnist.c -- the centralized sanity run: lenet5-caffe trained for one epoch
 * on the full Fashion-MNIST training set must reach at least 85% test accuracy. This is the
 * end-to-end proof that kernels, model wiring, SGD, the IDX loader and the batcher agree; a bug
 * in any of them shows up as an accuracy far below the ~86.5% this configuration reaches. */
#include "nn/data.h"
#include "nn/model.h"
#include "nn/train.h"
#include "tests/check.h"

int main(void)
{
    nn_dataset train = {0}, test = {0};
    sim_err err = {0};
    int rc = nn_fmnist_load(&train, &test, NULL, &err);
    CHECK_MSG(rc == SIM_OK, "load Fashion-MNIST: %s: %s", err.file, err.msg);
    if (rc) return CHECK_DONE();
    nn_arch a;
    CHECK(nn_arch_build(&a, "lenet5-caffe", train.c, train.h, train.w, train.classes, &err) ==
          SIM_OK);
    nn_model m;
    nn_model_init(&m, &a, 32);
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_INIT_WEIGHTS, 0);
    nn_model_init_params(&m, &r);
    sim_rng_seed(&r, 1, SIM_RNG_BATCHES, 0);
    nn_batcher b;
    nn_batcher_init(&b, &train, NULL, train.n, 32, 0, &r);
    nn_sgd opt = {0.02f, 0.9f, 0, 0};
    int B, steps = 0;
    while ((B = nn_batcher_next(&b))) {
        nn_model_train_step(&m, &opt, b.x, b.y, B);
        steps++;
    }
    CHECK_EQ_I64(steps, (60000 + 31) / 32);
    CHECK_EQ_I64((long long)m.cost.samples, 60000);
    double loss, acc = nn_evaluate(&m, &test, NULL, test.n, &loss);
    printf("lenet5-caffe, 1 epoch: test accuracy %.4f, loss %.4f\n", acc, loss);
    CHECK_MSG(acc >= 0.85, "test accuracy %.4f after one epoch (want >= 0.85)", acc);
    /* training FLOPs: forward 2·2,293,000 per sample, backward twice that minus conv1's dx */
    double per = m.cost.flops / 60000;
    CHECK_MSG(per > 13.0e6 && per < 14.5e6, "%.3g FLOPs per training sample", per);
    nn_batcher_destroy(&b);
    nn_model_destroy(&m);
    nn_dataset_destroy(&train);
    nn_dataset_destroy(&test);
    return CHECK_DONE();
}
