/* sim/main.c -- the fedsim command line.
 *
 * Until the simulation engine lands, fedsim offers `train`: centralized training of any model on
 * any built-in dataset, which is what `make run` shows and what the client jobs of a federation
 * will run. Errors print as "fedsim: file:line:col: message" and exit with status 2.
 */
#include "nn/data.h"
#include "nn/model.h"
#include "nn/train.h"
#include "sim/base.h"
#include "sim/rng.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
        "usage: fedsim COMMAND [options]\n"
        "\n"
        "fedsim simulates heterogeneous federated learning: real training math per client, and\n"
        "simulated time and bytes from device profiles. The federation engine is not built yet;\n"
        "today fedsim can train one model centrally, the job every client will run.\n"
        "\n"
        "commands:\n"
        "  train      train a model centrally and report test accuracy per epoch\n"
        "  help       show this text\n"
        "\n"
        "train options (defaults in brackets):\n"
        "  --model NAME       mlp:784-200-200-10, mlpbn:..., cnn2, lenet5-caffe, pa3dfl-cnn,\n"
        "                     fedpews-mlp, fedpews-cnn [lenet5-caffe]\n"
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

typedef struct train_opts {
    const char *model, *data, *data_dir;
    int epochs, batch, test_subset, threads;
    double lr, momentum, weight_decay, clip, width;
    unsigned long long seed;
} train_opts;

static int die(const char *msg)
{
    fprintf(stderr, "fedsim: %s\n", msg);
    return 2;
}

static int parse_num(const char *key, const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "fedsim: %s: '%s' is not a number in [%g, %g]\n", key, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_train(train_opts *o, int argc, char **argv)
{
    *o = (train_opts){"lenet5-caffe", "fashion-mnist", NULL, 1, 64, 0, 1, 0.01, 0.9, 0, 0, 1, 1};
    for (int i = 0; i < argc; i++) {
        const char *k = argv[i], *v = NULL;
        char key[64];
        const char *eq = strchr(k, '=');
        if (eq) {
            snprintf(key, sizeof key, "%.*s", (int)(eq - k), k);
            k = key;
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        }
        if (strncmp(k, "--", 2) || !v) {
            fprintf(stderr, "fedsim train: expected --option VALUE, got '%s'\n", argv[i]);
            return -1;
        }
        double x;
        int rc = 0;
        if (!strcmp(k, "--model"))
            o->model = v;
        else if (!strcmp(k, "--data"))
            o->data = v;
        else if (!strcmp(k, "--data-dir"))
            o->data_dir = v;
        else if (!strcmp(k, "--epochs"))
            rc = parse_num(k, v, 1, 1e6, &x), o->epochs = (int)x;
        else if (!strcmp(k, "--batch"))
            rc = parse_num(k, v, 1, 65536, &x), o->batch = (int)x;
        else if (!strcmp(k, "--lr"))
            rc = parse_num(k, v, 0, 1e3, &o->lr);
        else if (!strcmp(k, "--momentum"))
            rc = parse_num(k, v, 0, 1, &o->momentum);
        else if (!strcmp(k, "--weight-decay"))
            rc = parse_num(k, v, 0, 1, &o->weight_decay);
        else if (!strcmp(k, "--clip"))
            rc = parse_num(k, v, 0, 1e9, &o->clip);
        else if (!strcmp(k, "--width"))
            rc = parse_num(k, v, 1e-6, 1, &o->width);
        else if (!strcmp(k, "--seed"))
            rc = parse_num(k, v, 0, 9e15, &x), o->seed = (unsigned long long)x;
        else if (!strcmp(k, "--test-subset"))
            rc = parse_num(k, v, 0, 1e9, &x), o->test_subset = (int)x;
        else if (!strcmp(k, "--threads"))
            rc = parse_num(k, v, 1, 256, &x), o->threads = (int)x;
        else {
            fprintf(stderr, "fedsim train: unknown option '%s' (see fedsim help)\n", k);
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmd_train(int argc, char **argv)
{
    train_opts o;
    if (parse_train(&o, argc, argv)) return 2;
    openblas_set_num_threads(o.threads);
    sim_err err = {0};
    nn_dataset train = {0}, test = {0};
    nn_arch arch;
    char msg[1024];
    if (load_data(&o, &train, &test, &err) ||
        nn_arch_build(&arch, o.model, train.c, train.h, train.w, train.classes, &err)) {
        sim_err_format(&err, msg, sizeof msg);
        nn_dataset_destroy(&train);
        nn_dataset_destroy(&test);
        return die(msg);
    }
    nn_model m;
    nn_model_init(&m, &arch, o.batch);
    sim_rng r;
    sim_rng_seed(&r, o.seed, SIM_RNG_INIT_WEIGHTS, 0);
    nn_model_init_params(&m, &r);
    if (o.width < 1) nn_model_set_width(&m, o.width, 0);
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
        double t0 = now_s(), sum = 0, last = t0;
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
            double t = now_s();
            if (t - last >= 1.0) {
                fprintf(stderr, "\repoch %d: %ld/%d samples, loss %.4f, %.0f samples/s ", e, seen,
                        train.n, sum / (double)seen, (double)seen / (t - t0));
                last = t;
            }
        }
        double wall = now_s() - t0, tl;
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

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "-h")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
    fprintf(stderr, "fedsim: unknown command '%s' (see fedsim help)\n", argv[1]);
    return 2;
}
