/* tests/fuzz/fuzz_trace.c -- fuzzes device trace files (devices/trace.c): the input is one trace
 * file, loaded as an availability trace and as a speed trace.
 *
 * A trace that loads must keep the promises of devices/trace.h (times strictly increasing from 0,
 * the loop period after the last point, values in range), and its lookups must agree with each
 * other: dev_trace_next_change lies after the time asked, the value has changed there and not just
 * before. They are asked around every point (the first 64), in the first periods of a loop.
 */
#include "devices/trace.h"
#include "tests/fuzz/fuzz.h"

#include <math.h>

/* value and next change at time at, checked against each other */
static void probe(const dev_trace *t, sim_time at)
{
    if (at < 0) return;
    double v = dev_trace_value(t, at);
    sim_time next = dev_trace_next_change(t, at);
    fuzz_require(next > at);
    if (next == DEV_TIME_NEVER) return;
    fuzz_require(dev_trace_value(t, next) != v);
    fuzz_require(dev_trace_value(t, next - 1) == v);
}

static void check(const dev_trace *t)
{
    fuzz_require(t->n >= 1 && t->at[0] >= 0);
    for (size_t i = 0; i < t->n; i++) {
        fuzz_require(i == 0 || t->at[i] > t->at[i - 1]);
        if (t->kind == DEV_TRACE_AVAIL)
            fuzz_require(t->value[i] == 0 || t->value[i] == 1);
        else
            fuzz_require(t->value[i] >= 0 && isfinite(t->value[i]));
    }
    fuzz_require(t->period == 0 || t->period > t->at[t->n - 1]);
    int periods = t->period && t->period < DEV_TIME_NEVER / 4 ? 3 : 1;
    for (int k = 0; k < periods; k++)
        for (size_t i = 0; i < t->n && i < 64; i++) {
            sim_time at = k * t->period + t->at[i];
            probe(t, at - 1);
            probe(t, at);
            probe(t, at + 1);
        }
    probe(t, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_write(path, "input.trace", data, size);
    for (int kind = 0; kind < 2; kind++) {
        dev_trace *t = NULL, *c = NULL;
        sim_err err = {0};
        if (dev_trace_load(&t, path, kind ? DEV_TRACE_SPEED : DEV_TRACE_AVAIL, &err)) {
            fuzz_require(!t && err.msg[0]);
            continue;
        }
        check(t);
        /* the same points looping, as a profile's `loop` override makes them */
        sim_time last = t->at[t->n - 1];
        if (last < DEV_TIME_NEVER / 8 && !dev_trace_with_period(&c, t, 2 * last + 1, &err)) {
            check(c);
            dev_trace_free(c);
        }
        dev_trace_free(dev_trace_ref(t));
        dev_trace_free(t);
    }
    return 0;
}
