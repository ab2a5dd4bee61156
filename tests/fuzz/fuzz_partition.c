/* tests/fuzz/fuzz_partition.c -- fuzzes partition files (nn_partition_file in nn/partition.c):
 * the input is one file of per-client index lines over a training set of 1000 samples (labels
 * i mod 10; the file reader needs no pixels).
 *
 * A file that loads must give what nn/partition.h promises: no empty client, each list sorted,
 * every index in range and used once. The partition then gets a holdout test split and a
 * validation split, which must keep every client's samples (train + test + validation).
 */
#include "nn/partition.h"
#include "tests/fuzz/fuzz.h"

#define N_TRAIN 1000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int32_t y[N_TRAIN];
    static unsigned char seen[N_TRAIN];
    for (int i = 0; i < N_TRAIN; i++)
        y[i] = i % 10;
    nn_dataset train = {.n = N_TRAIN, .c = 1, .h = 1, .w = 1, .classes = 10, .y = y};
    char path[1024];
    fuzz_write(path, "input.part", data, size);
    nn_partition p;
    sim_err err = {0};
    if (nn_partition_file(&p, &train, path, &err)) {
        fuzz_require(err.msg[0] && !p.n_clients && !p.idx);
        return 0;
    }
    memset(seen, 0, sizeof seen);
    int *before = malloc(sizeof(int) * (size_t)p.n_clients);
    if (!before) abort();
    for (int k = 0; k < p.n_clients; k++) {
        fuzz_require(p.n[k] > 0 && p.n_test[k] == 0);
        before[k] = p.n[k];
        for (int i = 0; i < p.n[k]; i++) {
            int32_t v = p.idx[k][i];
            fuzz_require(v >= 0 && v < N_TRAIN && !seen[v]);
            fuzz_require(i == 0 || v > p.idx[k][i - 1]);
            seen[v] = 1;
        }
    }
    if (!nn_partition_local_test(&p, &train, &train, 0.25, 1, 7, &err) &&
        !nn_partition_local_val(&p, &train, 0.5, 7, &err))
        for (int k = 0; k < p.n_clients; k++)
            fuzz_require(p.n[k] >= 1 && p.n[k] + p.n_test[k] + p.n_val[k] == before[k]);
    free(before);
    nn_partition_destroy(&p);
    return 0;
}
