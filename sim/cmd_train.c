/* sim/cmd_train.c -- `fedsim train`: a model trained centrally, test accuracy per epoch; and the
 * loading of a model and its data that `fedsim calibrate` shares with it.
 */
#include "nn/data.h"
#include "nn/train.h"
#include "sim/cmd.h"
#include "sim/rng.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int parse_train(train_opts *o, int argc, char **argv)
{
    *o = (train_opts){"lenet5-caffe", "fashion-mnist", NULL, 1, 64, 0, 1, 0.01, 0.9, 0, 0, 1, 1};
    for (int i = 0; i < argc; i++) {
        const char *k, *v;
        char key[64];
        if (sim_cli_next_option("train", argc, argv, &i, key, &k, &v)) return -1;
        double x;
        int rc = 0;
        if (!strcmp(k, "--model"))
            o->model = v;
        else if (!strcmp(k, "--data"))
            o->data = v;
        else if (!strcmp(k, "--data-dir"))
            o->data_dir = v;
        else if (!strcmp(k, "--epochs"))
            rc = sim_cli_parse_num(k, v, 1, 1e6, &x), o->epochs = (int)x;
        else if (!strcmp(k, "--batch"))
            rc = sim_cli_parse_num(k, v, 1, 65536, &x), o->batch = (int)x;
        else if (!strcmp(k, "--lr"))
            rc = sim_cli_parse_num(k, v, 0, 1e3, &o->lr);
        else if (!strcmp(k, "--momentum"))
            rc = sim_cli_parse_num(k, v, 0, 1, &o->momentum);
        else if (!strcmp(k, "--weight-decay"))
            rc = sim_cli_parse_num(k, v, 0, 1, &o->weight_decay);
        else if (!strcmp(k, "--clip"))
            rc = sim_cli_parse_num(k, v, 0, 1e9, &o->clip);
        else if (!strcmp(k, "--width"))
            rc = sim_cli_parse_num(k, v, 1e-6, 1, &o->width);
        else if (!strcmp(k, "--seed"))
            rc = sim_cli_parse_num(k, v, 0, 9e15, &x), o->seed = (unsigned long long)x;
        else if (!strcmp(k, "--test-subset"))
            rc = sim_cli_parse_num(k, v, 0, 1e9, &x), o->test_subset = (int)x;
        else if (!strcmp(k, "--threads"))
            rc = sim_cli_parse_num(k, v, 1, 256, &x), o->threads = (int)x;
        else {
            fprintf(stderr, "fedsim train: unknown option '%s'\n", k);
            return -1;
        }
        if (rc) return -1;
    }
    return 0;
}

static int load_data(const train_opts *o, nn_dataset *train, nn_dataset *test, sim_err *err)
{
    if (!strcmp(o->data, "fashion-mnist")) return nn_fmnist_load(train, test, o->data_dir, err);
    if (!strcmp(o->data, "synth-pews-32k"))
        return nn_synth_pews_make(train, test, 2000, o->seed, err);
    if (!strcmp(o->data, "synth-pews-3.2k"))
        return nn_synth_pews_make(train, test, 200, o->seed, err);
    return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                    "unknown dataset '%s' (known: fashion-mnist, synth-pews-32k, synth-pews-3.2k)",
                    o->data);
}

/* o's dataset and the architecture of o's model on it; 2 after printing why not (nothing to
 * free then). */
int sim_cli_load_model_data(const train_opts *o, nn_dataset *train, nn_dataset *test, nn_arch *arch)
{
    sim_err err = {0};
    *train = *test = (nn_dataset){0};
    if (!load_data(o, train, test, &err) &&
        !nn_arch_build(arch, o->model, train->c, train->h, train->w, train->classes, &err))
        return 0;
    nn_dataset_destroy(train);
    nn_dataset_destroy(test);
    return sim_cli_print_err(&err);
}

/* A model of arch for batches of B, initialized from o's seed, trained at width p. */
void sim_cli_make_model(nn_model *m, const nn_arch *arch, const train_opts *o, int B, double p)
{
    nn_model_init(m, arch, B);
    sim_rng r;
    sim_rng_seed(&r, o->seed, SIM_RNG_INIT_WEIGHTS, 0);
    nn_model_init_params(m, &r);
    if (p < 1) nn_model_set_width(m, p, 0);
}

double sim_cli_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmd_train(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    train_opts o;
    if (parse_train(&o, argc, argv)) return SIM_CLI_BAD_ARGS;
    openblas_set_num_threads(o.threads);
    nn_dataset train, test;
    nn_arch arch;
    if (sim_cli_load_model_data(&o, &train, &test, &arch)) return 2;
    nn_model m;
    sim_cli_make_model(&m, &arch, &o, o.batch, o.width);
    sim_rng r;
    sim_rng_seed(&r, o.seed, SIM_RNG_BATCHES, 0);
    nn_batcher b;
    nn_batcher_init(&b, &train, NULL, train.n, o.batch, 0, &r);
    nn_sgd opt = {(float)o.lr, (float)o.momentum, (float)o.weight_decay, (float)o.clip};
    int n_test = o.test_subset > 0 && o.test_subset < test.n ? o.test_subset : test.n;
    printf("# fedsim train: model %s (%zu parameters, %zu trained at width %g), data %s "
           "(%d train, %d test), batch %d, lr %g, momentum %g, seed %llu\n",
           o.model, arch.layout.n_params, nn_model_live_count(&m), o.width, o.data, train.n, n_test,
           o.batch, o.lr, o.momentum, o.seed);
    printf("epoch\ttrain_loss\ttest_acc\ttest_loss\twall_s\tsamples_per_s\tgflop\n");
    int rc = 0;
    for (int e = 1; e <= o.epochs && !rc; e++) {
        double t0 = sim_cli_now_s(), sum = 0, last = t0;
        long seen = 0, steps = 0;
        int B;
        while ((B = nn_batcher_next(&b))) {
            float l = nn_model_train_step(&m, &opt, b.x, b.y, B);
            if (!(l == l) || l > 1e30f) {
                fprintf(stderr,
                        "\nfedsim: training diverged (loss %g) at epoch %d step %ld; "
                        "lower --lr\n",
                        (double)l, e, steps);
                rc = 1;
                break;
            }
            sum += (double)l * B;
            seen += B;
            steps++;
            double t = sim_cli_now_s();
            if (t - last >= 1.0) {
                fprintf(stderr, "\repoch %d: %ld/%d samples, loss %.4f, %.0f samples/s ", e, seen,
                        train.n, sum / (double)seen, (double)seen / (t - t0));
                last = t;
            }
        }
        double wall = sim_cli_now_s() - t0, tl;
        fprintf(stderr, "\r%70s\r", "");
        double acc = nn_evaluate(&m, &test, NULL, n_test, &tl);
        printf("%d\t%.4f\t%.4f\t%.4f\t%.1f\t%.0f\t%.1f\n", e, seen ? sum / (double)seen : 0, acc,
               tl, wall, (double)seen / wall, m.cost.flops * 1e-9);
        fflush(stdout);
    }
    nn_batcher_destroy(&b);
    nn_model_destroy(&m);
    nn_dataset_destroy(&train);
    nn_dataset_destroy(&test);
    return rc;
}

static const char train_usage[] =
        "usage: fedsim train [--model NAME] [--data NAME] [--data-dir DIR] [--epochs N]\n"
        "                    [--batch N] [--lr X] [--momentum X] [--weight-decay X]\n"
        "                    [--clip X] [--width P] [--seed N] [--test-subset N]\n"
        "                    [--threads N]\n"
        "\n"
        "Train a model centrally and report test accuracy per epoch: a row per epoch\n"
        "on stdout (train loss, test accuracy and loss, wall seconds, samples/s, GFLOP).\n"
        "\n"
        "options (--option VALUE or --option=VALUE; defaults in brackets):\n"
        "  --model NAME       mlp:784-200-200-10, mlpbn:..., cnn2, lenet5-caffe, lenet-mnn,\n"
        "                     pa3dfl-cnn, fedpews-mlp, fedpews-cnn [lenet5-caffe]\n"
        "  --data NAME        fashion-mnist, synth-pews-32k, synth-pews-3.2k [fashion-mnist]\n"
        "  --data-dir DIR     where Fashion-MNIST's gzip'd IDX files are\n"
        "                     [/usr/share/datasets/fashion-mnist]\n"
        "  --epochs N         passes over the training set [1]\n"
        "  --batch N          minibatch size [64]\n"
        "  --lr X             SGD learning rate [0.01]\n"
        "  --momentum X       SGD momentum [0.9]\n"
        "  --weight-decay X   L2 weight decay [0]\n"
        "  --clip X           clip the gradient norm to X, 0 = off [0]\n"
        "  --width P          train the first ceil(P*C) channels of every hidden layer [1]\n"
        "  --seed N           run seed: weights and batch order [1]\n"
        "  --test-subset N    evaluate on the first N test samples, 0 = all [0]\n"
        "  --threads N        BLAS threads; results are reproducible only with 1 [1]\n";

const sim_command sim_cmd_train = {
        .name = "train",
        .summary = "train a model centrally and report test accuracy per epoch",
        .usage = train_usage,
        .fn = cmd_train,
};
