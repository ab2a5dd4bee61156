/* devices/trace.h -- piecewise-constant traces of a device over simulated time: availability
 * (0 = offline, 1 = online) and speed (a factor on the profile's compute, e.g. 0.5 under load).
 *
 * File format (after SimGrid's profiles, with fedsim's mandatory units):
 *
 *     # comment (anywhere; a '#' starts a comment to the end of the line)
 *     loop 24 h        # optional, at most once: the trace repeats with this period
 *     0 s     1        # <time with unit> <value>, one point per line
 *     8 h     0
 *     19.5 h  1
 *
 * A point's value holds from its time until the next point's. Times are strictly increasing and
 * at least 0. Availability values are exactly 0 or 1; speed values are finite numbers >= 0
 * (0 = no progress). Without `loop`, the value before the first point is 1 (online / nominal
 * speed) and the last value holds forever. With `loop P`, every time is < P and the trace is
 * periodic: value(t) = value(t mod P), and before the first point of a period the last point's
 * value of the previous period still holds (so a looping trace is the same in every period,
 * including the first). SimGrid's LOOPAFTER counts its delay from the last event instead; a
 * period is what day/week traces are written against, so fedsim takes the period.
 * Errors name file:line:col of the offending token.
 *
 * Workload: a trace is loaded once and shared by every client whose profile names it (a million
 * clients may share one), so it is immutable and reference-counted; lookups are a binary search,
 * O(log points), with no per-client state. Reference counts are not atomic: profiles are built and
 * copied on the coordinator's thread only.
 */
#ifndef DEV_TRACE_H
#define DEV_TRACE_H

#include "sim/base.h"
#include "sim/units.h"

#include <stddef.h>
#include <stdint.h>

/* "never": the state does not change again, or a job never finishes (INT64_MAX). */
#define DEV_TIME_NEVER ((sim_time)INT64_MAX)

typedef enum dev_trace_kind {
    DEV_TRACE_AVAIL, /* values 0 or 1 */
    DEV_TRACE_SPEED, /* values >= 0, a factor on compute */
} dev_trace_kind;

typedef struct dev_trace {
    dev_trace_kind kind; /* ro */
    sim_time *at;        /* ro, n point times, strictly increasing, >= 0 (owned) */
    double *value;       /* ro, n values (owned) */
    size_t n;            /* ro, >= 1 */
    sim_time period;     /* ro, > at[n-1] when looping, 0 when not */
    char *file;          /* ro, where it was read from, for messages (owned) */
    int refs;            /* private: references held; freed when it drops to 0 */
} dev_trace;

/* Read a trace file. On success *out holds one reference; on error *out is NULL and err names
 * file:line:col. */
int dev_trace_load(dev_trace **out, const char *path, dev_trace_kind kind, sim_err *err);
/* The same from text in memory; name stands in for the file in messages and in t->file. */
int dev_trace_parse(dev_trace **out, const char *text, const char *name, dev_trace_kind kind,
                    sim_err *err);
/* Take one more reference (returns t); t may be NULL. */
dev_trace *dev_trace_ref(dev_trace *t);
/* Drop one reference; the last one frees the trace. Accepts NULL. */
void dev_trace_free(dev_trace *t);
/* A copy with another loop period (0 = no loop), sharing nothing with t. Fails (SIM_EINVAL) when
 * a point lies at or after the new period. */
int dev_trace_with_period(dev_trace **out, const dev_trace *t, sim_time period, sim_err *err);

/* The value at time at (>= 0). */
double dev_trace_value(const dev_trace *t, sim_time at);
/* The first time > at where the value differs from dev_trace_value(t, at), or DEV_TIME_NEVER. */
sim_time dev_trace_next_change(const dev_trace *t, sim_time at);

#endif /* DEV_TRACE_H */
