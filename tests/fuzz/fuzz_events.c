/* tests/fuzz/fuzz_events.c -- fuzzes the events.msgpack reader behind `fedsim events`
 * (sim/events.c, with nn_msgpack_check): the input is an event log.
 *
 * Besides not crashing, the reader keeps its promises: reading the bytes in memory
 * (sim_events_list_buf) and as a stream (sim_events_list, which buffers at most
 * SIM_EVENTS_MAX_OBJECT) agree on the verdict and the listing, and checking only (out NULL)
 * agrees with listing; a refusal names the input; and a log that is accepted is refused once its
 * last byte is cut off (a truncated log is never a complete one).
 */
#include "sim/events.h"
#include "tests/fuzz/fuzz.h"

/* The verdict on data[0..size) and, with list, the listing (*text, *n; the caller frees). */
static int list(const uint8_t *data, size_t size, int stream, int want, char **text, size_t *n)
{
    sim_err err = {0};
    FILE *out = want ? open_memstream(text, n) : NULL;
    if (want && !out) abort();
    int rc;
    if (stream) {
        /* fmemopen takes a writable buffer, and refuses a size of 0 */
        void *copy = malloc(size ? size : 1);
        if (!copy) abort();
        if (size) memcpy(copy, data, size);
        FILE *in = size ? fmemopen(copy, size, "rb") : fopen("/dev/null", "rb");
        if (!in) abort();
        rc = sim_events_list(in, "events.msgpack", out, &err);
        fclose(in);
        free(copy);
    } else {
        rc = sim_events_list_buf(data, size, "events.msgpack", out, &err);
    }
    if (out) fclose(out);
    fuzz_require(rc <= 0);
    if (rc) fuzz_require(err.msg[0] && !strcmp(err.file, "events.msgpack"));
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int rc = list(data, size, 0, 1, &a, &na);
    fuzz_require(list(data, size, 1, 1, &b, &nb) == rc);
    fuzz_require(na == nb && !memcmp(a, b, na));
    free(a);
    free(b);
    fuzz_require(list(data, size, 0, 0, NULL, NULL) == rc);
    if (rc == 0 && size > 0) fuzz_require(list(data, size - 1, 0, 0, NULL, NULL) != 0);
    return 0;
}
