/* devices/avail.h -- when a client's device is online: the availability process of a profile.
 *
 * Three processes:
 *   ALWAYS  online at every time.
 *   MARKOV  two-state on/off with exponential holding times of means mean_on and mean_off. The
 *           state at t = 0 is drawn from the stationary distribution (online with probability
 *           mean_on / (mean_on + mean_off)); since holding times are exponential, the remaining
 *           time in the first state has the same law, so the process is stationary from t = 0.
 *           Segments are drawn lazily from the client's own sim_rng stream, so one client's
 *           process never shifts another's, and a million idle clients cost nothing until asked.
 *   TRACE   a 0/1 trace file (devices/trace.h), shared by all clients of the profile, optionally
 *           shifted per client by `offset` (a fixed time, or uniform in [0, loop period) drawn from
 *           the client's stream, so that clients sharing a daily trace do not all leave at once).
 *
 * A spec (dev_avail_spec) is part of a profile; a process (dev_avail_proc, 88 bytes) is the
 * per-client state. The engine queries a process at non-decreasing times (asserted): state
 * changes at t take effect at t, i.e. dev_avail_online(p, t) already reports the new state and
 * dev_avail_next_change(p, t) is the first change strictly after t. A checkpoint (sim/engine.c)
 * saves on, until, last and rng, and restores them into a process fresh from dev_avail_init, which
 * rebuilds every other field.
 */
#ifndef DEV_AVAIL_H
#define DEV_AVAIL_H

#include "devices/trace.h"
#include "sim/base.h"
#include "sim/rng.h"
#include "sim/units.h"
#include "sim/yaml.h"

#include <stdint.h>

typedef enum dev_avail_kind {
    DEV_AVAIL_ALWAYS = 0, /* the zeroed spec is "always online" */
    DEV_AVAIL_MARKOV,
    DEV_AVAIL_TRACE,
} dev_avail_kind;

typedef struct dev_avail_spec {
    dev_avail_kind kind;
    sim_time mean_on_ns, mean_off_ns; /* MARKOV: mean holding times, > 0 */
    dev_trace *trace;                 /* TRACE: 0/1 trace (one owned reference) */
    sim_time offset_ns;               /* TRACE: client time t reads the trace at t + offset */
    int offset_random;                /* TRACE: offset uniform in [0, period) per client */
} dev_avail_spec;

typedef struct dev_avail_proc {
    dev_avail_kind kind;              /* private, all fields */
    int on;                           /* MARKOV: the current state */
    sim_time until;                   /* MARKOV: end of the current state's holding time */
    sim_time mean_on_ns, mean_off_ns; /* MARKOV */
    sim_time offset_ns;               /* TRACE */
    const dev_trace *trace;           /* TRACE: borrowed from the spec, must outlive the proc */
    sim_time last;                    /* the latest time asked about (queries never go back) */
    sim_rng rng;                      /* MARKOV: holding times; copied from the caller's stream */
} dev_avail_proc;

/* Start a client's process. stream is that client's own stream, e.g.
 * sim_rng_seed(&r, seed, SIM_RNG_AVAIL, client); it is copied, and read only by MARKOV and a
 * random TRACE offset. The spec's trace must outlive p. Never fails. */
void dev_avail_init(dev_avail_proc *p, const dev_avail_spec *s, const sim_rng *stream);
/* 1 when online at t, 0 when offline. t must not be before an earlier query's time. */
int dev_avail_online(dev_avail_proc *p, sim_time t);
/* The first time > t at which the state flips, or DEV_TIME_NEVER. Same ordering rule. */
sim_time dev_avail_next_change(dev_avail_proc *p, sim_time t);

/* Spec lifetime: copy takes its own trace reference; destroy drops it and zeroes s (= ALWAYS). */
void dev_avail_spec_copy(dev_avail_spec *dst, const dev_avail_spec *src);
void dev_avail_spec_destroy(dev_avail_spec *s);

/* Read `availability:` from YAML: the scalar `always`, or a map
 *   {kind: always} | {kind: markov, mean_on: 30 min, mean_off: 90 min}
 *   | {kind: trace, file: PATH, loop: 24 h | false, offset: 2 h | random}
 * A relative PATH is taken from the directory of the YAML file that names it. `loop` overrides the
 * trace file's own `loop` line (false turns it off). Keys read are marked used; unknown keys are
 * left for the caller's sim_yaml_check_used. On error *out is zeroed and err names file:line:col.
 */
int dev_avail_spec_from_yaml(dev_avail_spec *out, const sim_yaml *node, sim_err *err);
/* "always", "markov(on 30.0 min, off 1.50 h)", "trace(day.trace, loop 1.00 d)" */
void dev_avail_spec_describe(const dev_avail_spec *s, char *buf, size_t n);

/* Shared with profile.c: read a trace named by a YAML map {file: PATH, loop: ...} (relative paths
 * from the YAML file's directory). The caller has read its own keys of the map (availability's
 * kind and offset): any other is reported as unknown before the file is opened. */
int dev_trace_from_yaml(dev_trace **out, const sim_yaml *map, dev_trace_kind kind, sim_err *err);

#endif /* DEV_AVAIL_H */
