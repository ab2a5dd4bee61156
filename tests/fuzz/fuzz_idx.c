/* tests/fuzz/fuzz_idx.c -- fuzzes IDX image/label files (nn_idx_load in nn/data.c), plain or
 * gzip'd: the input is an images file, then a line "--labels", then a labels file.
 *
 * A pair that loads must be what nn/data.h promises: n images of 1 x h x w pixels in [0, 1] and n
 * labels below the class count. Loaded a second time with 10 classes, it loads only if its labels
 * fit, and then to the same samples.
 */
#include "nn/data.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *part[FUZZ_MAX_PARTS];
    size_t len[FUZZ_MAX_PARTS];
    int np = fuzz_split(data, size, "\n--labels\n", part, len);
    char images[1024], labels[1024];
    fuzz_write(images, "images-idx3-ubyte", part[0], len[0]);
    fuzz_write(labels, "labels-idx1-ubyte", np > 1 ? part[1] : "", np > 1 ? len[1] : 0);
    fuzz_parts_free(part, np);

    nn_dataset d, d10;
    sim_err err = {0};
    int rc = nn_idx_load(&d, images, labels, 0, &err);
    if (rc) {
        fuzz_require(err.msg[0] && !d.x && !d.y && !d.n);
        return 0;
    }
    fuzz_require(d.n > 0 && d.c == 1 && d.h > 0 && d.w > 0 && d.classes > 0);
    size_t features = (size_t)d.h * (size_t)d.w;
    for (size_t i = 0; i < (size_t)d.n * features; i++)
        fuzz_require(d.x[i] >= 0 && d.x[i] <= 1);
    for (int i = 0; i < d.n; i++)
        fuzz_require(d.y[i] >= 0 && d.y[i] < d.classes);
    rc = nn_idx_load(&d10, images, labels, 10, &err);
    fuzz_require((rc == SIM_OK) == (d.classes <= 10));
    if (!rc) {
        fuzz_require(d10.n == d.n && d10.classes == 10);
        fuzz_require(!memcmp(d10.y, d.y, sizeof(int32_t) * (size_t)d.n));
        fuzz_require(!memcmp(d10.x, d.x, sizeof(float) * (size_t)d.n * features));
    }
    nn_dataset_destroy(&d10);
    nn_dataset_destroy(&d);
    return 0;
}
