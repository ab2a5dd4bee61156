/* devices/profile.h -- a device profile and the cost model that turns work into simulated time.
 *
 * A profile is what a client's device can do: compute (FLOP/s), uplink and downlink (bit/s), a
 * per-transfer latency, memory, an optional capacity in (0, 1], a sparse efficiency, a memory
 * bandwidth, a per-step overhead, an availability process and an optional speed trace. The cost
 * model (DESIGN.md section 5, plus the memory and overhead terms):
 *
 *   compute time  = (effective FLOPs + compute x (8 x activation bytes / mem_bandwidth
 *                   + steps x step_overhead)) / (compute x speed factor), integrated over the
 *                   speed trace
 *                   effective FLOPs = flops - sparse_eff x (flops_masked - flops_masked_nnz)
 *   transfer time = latency + 8 x bytes / bandwidth            (per direction, per message)
 *   fits          = peak training bytes <= memory
 *   capacity      = the profile's own value, else min(1, memory / full-model bytes,
 *                   compute / reference compute)               (dev_capacity)
 *
 * step_overhead (0 unless given) is the time an SGD step takes beyond its FLOPs at the sustained
 * rate: kernel launches, memory-bound element-wise work, the input layer's unfolding, all of
 * which do not shrink with a narrowed or sparse model. Without it a pa3dfl-cnn 1/8 as wide
 * trains 52x faster than the full one, as its FLOPs say; an AMD EPYC core ran it 14x faster
 * (`fedsim calibrate` fits the figures for a model on the machine it runs on). A speed trace
 * slows it too.
 *
 * mem_bandwidth (0 = not modelled, unless given) prices the activations a job writes (nn_cost's
 * bytes: each layer's output, its input gradient, a convolution's unfolded input). They grow
 * with a model's width where its FLOPs grow with the width's square, so a narrowed model spends
 * a larger share of its time on them: on an AMD EPYC core FLOPs and step_overhead alone missed
 * pa3dfl-cnn's time per step by up to 12.5% over widths 1 to 1/16, all three terms (17.7 GB/s)
 * by 4.1%.
 *
 * Durations are computed in double seconds and rounded once to the nearest ns. dev_price strings
 * one job's download, training and upload together; the engine and `fedsim check` both price jobs
 * through it.
 *
 * In a file a profile is a YAML map with units in every value:
 *   {compute: 8 GFLOPS, up: 10 Mbps, down: 40 Mbps, latency: 40 ms, memory: 2 GiB,
 *    capacity: 0.5, sparse_eff: 0.3, mem_bandwidth: 10 GB/s, step_overhead: 1.5 ms,
 *    availability: {kind: markov, mean_on: 30 min, mean_off: 1 h},
 *    speed: {file: load.trace, loop: 1 d}, source: "what the figures come from",
 *    power: {train: 2 W, up: 1.2 W, down: 0.9 W, idle: 0.05 W},
 *    battery: {capacity: 15 Wh, initial: {uniform: [30%, 100%]}, floor: 20%,
 *              charging: {rate: 10 W, when: online}}}
 * and compute, up, down, latency and memory may instead be per-client distributions,
 *   {lognormal: 20 Mbps, sigma: 0.5, min: 1 Mbps, max: 1 Gbps}   median 20 Mbps, log-space sigma,
 *                                                               optional clamps
 *   {uniform: [5 Mbps, 50 Mbps]}                                 uniform between the bounds
 * which dev_profile_draw turns into one client's concrete figures.
 *
 * A zeroed dev_profile with compute, up, down and memory set (> 0) is a valid concrete profile:
 * always online, nominal speed, no distributions. Profiles own references to their traces, so
 * copies go through dev_profile_copy and every profile ends with dev_profile_destroy.
 */
#ifndef DEV_PROFILE_H
#define DEV_PROFILE_H

#include "devices/avail.h"
#include "devices/energy.h"
#include "devices/trace.h"
#include "sim/base.h"
#include "sim/keys.h"
#include "sim/rng.h"
#include "sim/units.h"
#include "sim/yaml.h"

#include <stddef.h>

#define DEV_MAX_NAME 48

/* The figures a distribution may replace, in the order dev_profile_draw draws them. */
typedef enum dev_field {
    DEV_FIELD_COMPUTE, /* compute_flops */
    DEV_FIELD_UP,      /* up_bps */
    DEV_FIELD_DOWN,    /* down_bps */
    DEV_FIELD_LATENCY, /* latency_ns */
    DEV_FIELD_MEMORY,  /* memory_bytes */
    DEV_FIELD_COUNT,
} dev_field;

typedef enum dev_dist_kind {
    DEV_DIST_FIXED = 0, /* the field's value is the value */
    DEV_DIST_LOGNORMAL, /* median a, log-space sigma b, clamped to [lo, hi] */
    DEV_DIST_UNIFORM,   /* uniform in [a, b] */
} dev_dist_kind;

/* Parameters are in the field's base unit: FLOP/s, bit/s, ns (as a double) or bytes. */
typedef struct dev_dist {
    dev_dist_kind kind;
    double a, b;   /* LOGNORMAL: median, sigma; UNIFORM: low, high */
    double lo, hi; /* LOGNORMAL: clamps (0 and INFINITY when not given) */
} dev_dist;

/* A rate drawn afresh for each transfer: Normal(mean, sigma) bit/s, redrawn below floor (64
 * tries, then floor). sigma 0: none (the profile's fixed rate). */
typedef struct dev_rate_dist {
    double mean, sigma, floor;
} dev_rate_dist;
double dev_rate_draw(const dev_rate_dist *d, sim_rng *r);

typedef struct dev_profile {
    char name[DEV_MAX_NAME]; /* catalog or scenario name, "" when anonymous */
    char source[160];        /* where its figures come from (`source:`), "" unsaid */
    double compute_flops;    /* sustained FLOP/s, > 0 */
    double up_bps;           /* uplink bit/s, > 0 */
    double down_bps;         /* downlink bit/s, > 0 */
    /* per-transfer draws of the rates (devices.population): a job's download and upload each
     * take a rate from Normal(mean, sigma) redrawn below floor (dev_rate_draw), when sigma > 0;
     * up_bps and down_bps are then the means (what `fedsim check` prices by) */
    dev_rate_dist up_draw, down_draw;
    sim_time latency_ns;            /* added to every transfer, >= 0 */
    double memory_bytes;            /* memory a training job may use, > 0 */
    double capacity;                /* (0, 1], or 0 = derive with dev_capacity */
    double sparse_eff;              /* [0, 1]: share of masked-out FLOPs actually saved */
    double mem_bandwidth_bps;       /* >= 0 bit/s for activation traffic, 0 = not modelled */
    sim_time step_overhead_ns;      /* >= 0: time per SGD step beyond its FLOPs */
    dev_avail_spec avail;           /* when it is online (zeroed = always) */
    dev_trace *speed;               /* speed factor over time (owned reference), NULL = always 1 */
    dev_dist dist[DEV_FIELD_COUNT]; /* per-client distributions; while one is not FIXED its field
                                       holds the nominal value: the median, or the midpoint */
    dev_power power;                /* what it draws (devices/energy.h); unset: no energy */
    dev_battery battery;            /* capacity 0: none (owns its charging trace's reference) */
} dev_profile;

/* A job's work as a device sees it (sim/cost.c makes it from the job's nn_cost and steps).
 * flops is what the job computed counting masked weights as dense; flops_masked is the dense count
 * of the unstructured-masked layers and flops_masked_nnz the part of it on unmasked weights
 * (0 <= nnz <= masked <= flops); bytes the activations it wrote; steps its SGD steps. */
typedef struct dev_work {
    double flops, flops_masked, flops_masked_nnz;
    double bytes;
    double steps;
} dev_work;

/* A job to price: its work, and its messages' bytes on the wire (>= 0, 0 = none). An upload of 0
 * bytes is not sent: the job is done when its training ends. A download of 0 bytes takes the
 * latency when down_always is set (the engine: the dispatch itself reaches the device), no time
 * otherwise (`fedsim check`'s rows). */
typedef struct dev_job {
    dev_work work;
    double down_bytes, up_bytes;
    int down_always;
} dev_job;

/* When a job's phases end, run back to back on one device: the download from the start, the
 * training from the download's end (so a speed trace applies from there), the upload from the
 * training's end. A phase that never ends (speed 0 for ever, or beyond int64 ns) is
 * DEV_TIME_NEVER, and so is every end from it on. */
typedef struct dev_phases {
    sim_time down, train, up;             /* durations; up 0 without an upload */
    sim_time down_end, train_end, up_end; /* instants; up_end = train_end without an upload */
    double flops;                         /* what the device executes: dev_work_flops */
} dev_phases;

/* Price job on p starting at start (>= 0): its phases into *out. The one place the cost model's
 * terms meet: the engine schedules from it and `fedsim check` prints it. */
void dev_price(const dev_profile *p, const dev_job *job, sim_time start, dev_phases *out);

/* The FLOPs the device executes for work: the device's sparse runtime skips sparse_eff of the
 * masked-out part (flops_masked - flops_masked_nnz). */
double dev_work_flops(const dev_profile *p, const dev_work *w);
/* Time to execute work starting at `start` (>= 0). With a speed trace the work is integrated over
 * the trace from start; DEV_TIME_NEVER when it never finishes (speed 0 for ever) or would take
 * longer than int64 ns can count. */
sim_time dev_compute_ns(const dev_profile *p, const dev_work *w, sim_time start);
/* The compute (FLOP/s), memory bandwidth (bytes/s) and step_overhead (seconds) that best predict
 * the measured seconds per step secs[i] of steps of flops[i] FLOPs writing bytes[i] bytes of
 * activations (n >= 1 points, all > 0; bytes NULL: no bandwidth term): least squares on the
 * relative error, since the times span orders of magnitude, with the bandwidth and overhead
 * terms kept >= 0 (the best fit over the subsets of terms that keep them so; a term left out is
 * 0, *bandwidth then meaning none). A fit needs as many points as terms, with the bandwidth one
 * more; points whose terms are proportional (the same width twice) fit fewer terms. Returns 0,
 * or -1 when no fit has a positive compute. */
int dev_fit_step_cost(const double *flops, const double *bytes, const double *secs, int n,
                      double *compute, double *bandwidth, double *overhead_s);
/* latency + 8 x bytes / bps, rounded to the nearest ns (bytes >= 0, bps > 0). */
sim_time dev_transfer_ns(sim_time latency, double bytes, double bps);
/* 1 when a job needing `bytes` of memory fits on the device. */
int dev_fits(const dev_profile *p, double bytes);
/* The profile's capacity when it sets one, else min(1, memory / full_model_bytes,
 * compute / ref_compute_flops): the largest share of the full model's cost (parameters, FLOPs)
 * the device can hold and train at the reference pace. A term whose reference is <= 0 is left out.
 * The reference compute is the scenario's choice, e.g. the fastest profile in the mix. A share,
 * not a width: algorithms that narrow layers take the width whose cost is this share. */
double dev_capacity(const dev_profile *p, double full_model_bytes, double ref_compute_flops);

/* Copy src into dst (taking trace references); dst must not hold anything. */
void dev_profile_copy(dev_profile *dst, const dev_profile *src);
/* Drop trace references and zero p. Accepts NULL. */
void dev_profile_destroy(dev_profile *p);
/* 1 when some field is a distribution (dev_profile_draw would change it). */
int dev_profile_has_dist(const dev_profile *p);

/* Read a profile from a YAML map. With base == NULL, compute, up, down, latency and memory are
 * required; otherwise out starts as a copy of base (name included) and node overrides the keys it
 * has. Every key of node must be known (sim_yaml_check_used on node), so a caller that shares the
 * map with keys of its own reads those first. Zero or negative compute, bandwidth or memory,
 * values without units and out-of-range numbers are errors at the value's file:line:col.
 * out->name is left to the caller (base's name, or ""). On error out is zeroed. out != base. */
int dev_profile_from_yaml(dev_profile *out, const sim_yaml *node, const dev_profile *base,
                          sim_err *err);

/* A profile's keys, for the docs (`fedsim keys devices.profiles`, scenarios/README.md): every one
 * is custom, dev_profile_from_yaml reading each by its own rules; and what the docs say above
 * them. */
extern const sim_key dev_profile_keys[];
extern const char dev_profile_doc[];

/* One client's concrete profile: out = spec with every distribution drawn from r (in dev_field
 * order, one or two numbers per distributed field) and set FIXED. out must be destroyed. */
void dev_profile_draw(dev_profile *out, const dev_profile *spec, sim_rng *r);

/* One line: "compute 13.5 GFLOPS, up 10.0 Mbps, down 40.0 Mbps, latency 40.0 ms, memory 2.00 GiB,
 * capacity auto, sparse_eff 0, availability always", with ", mem_bandwidth 10 GB/s" and
 * ", step_overhead 1.20 ms" after sparse_eff when it has them. */
void dev_profile_describe(const dev_profile *p, char *buf, size_t n);

#endif /* DEV_PROFILE_H */
