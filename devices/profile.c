/* devices/profile.c -- device profiles: the cost model, YAML reading and per-client draws
 * (see profile.h).
 */
#include "devices/profile.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* base + s seconds rounded to the nearest ns, or DEV_TIME_NEVER when that does not fit. The
 * bound stays below 2^63 ns with room for base, which callers keep well under it. */
static sim_time add_seconds(sim_time base, double s)
{
    if (!(s < 9.2e9)) return DEV_TIME_NEVER; /* also catches NaN */
    sim_time d = sim_time_from_s(s);
    if (d > DEV_TIME_NEVER - base) return DEV_TIME_NEVER;
    return base + d;
}

/* FLOPs the device does in one period of a looping speed trace. */
static double work_per_period(const dev_trace *t, double compute)
{
    double w = (double)t->at[0] * t->value[t->n - 1]; /* [0, at[0]) still runs the last value */
    for (size_t i = 0; i < t->n; i++) {
        sim_time end = i + 1 < t->n ? t->at[i + 1] : t->period;
        w += (double)(end - t->at[i]) * t->value[i];
    }
    return compute * (w / 1e9);
}

double dev_work_flops(const dev_profile *p, const dev_work *w)
{
    double flops = w->flops, flops_masked = w->flops_masked, flops_masked_nnz = w->flops_masked_nnz;
    assert(flops >= 0 && flops_masked >= 0 && flops_masked_nnz >= 0);
    /* sums of per-layer counts may differ in the last bits: tolerate that, catch real mix-ups */
    assert(flops_masked_nnz <= flops_masked * (1 + 1e-9) &&
           "more unmasked FLOPs than masked-layer FLOPs");
    double skipped = flops_masked > flops_masked_nnz ? flops_masked - flops_masked_nnz : 0;
    double work = flops - p->sparse_eff * skipped;
    return work > 0 ? work : 0;
}

sim_time dev_compute_ns(const dev_profile *p, const dev_work *w, sim_time start)
{
    double steps = w->steps, bytes = w->bytes;
    assert(p->compute_flops > 0 && "profile without compute");
    assert(start >= 0 && steps >= 0 && bytes >= 0);
    /* the overhead and the memory traffic as the work they stand for at full speed, so a speed
     * trace scales them alike */
    double work =
            dev_work_flops(p, w) + p->compute_flops * steps * ((double)p->step_overhead_ns / 1e9);
    if (p->mem_bandwidth_bps > 0) work += p->compute_flops * (8 * bytes / p->mem_bandwidth_bps);
    if (work <= 0) return 0;
    const dev_trace *tr = p->speed;
    if (!tr) return add_seconds(0, work / p->compute_flops);

    sim_time t = start;
    if (tr->period) {
        /* Skip whole periods up front: every window of one period does the same work, so the
         * walk below never has more than about two periods of points left to cross. */
        double wp = work_per_period(tr, p->compute_flops);
        if (wp <= 0) return DEV_TIME_NEVER;
        double k = floor(work / wp) - 1;
        if (k > 0) {
            if (k * (double)tr->period >= 4e18) return DEV_TIME_NEVER;
            t += (sim_time)k * tr->period;
            work -= k * wp;
        }
    }
    for (;;) {
        double rate = p->compute_flops * dev_trace_value(tr, t);
        sim_time next = dev_trace_next_change(tr, t);
        if (next == DEV_TIME_NEVER)
            return rate > 0 ? add_seconds(t - start, work / rate) : DEV_TIME_NEVER;
        if (rate > 0) {
            double can = rate * ((double)(next - t) / 1e9);
            if (work <= can) {
                sim_time d = add_seconds(t - start, work / rate);
                return d < next - start ? d : next - start; /* rounding never crosses next */
            }
            work -= can;
        }
        t = next;
    }
}

/* a + b, saturating at DEV_TIME_NEVER (a phase that never ends) */
static sim_time sat_add(sim_time a, sim_time b)
{
    return b == DEV_TIME_NEVER || a > DEV_TIME_NEVER - b ? DEV_TIME_NEVER : a + b;
}

void dev_price(const dev_profile *p, const dev_job *job, sim_time start, dev_phases *out)
{
    assert(start >= 0 && job->down_bytes >= 0 && job->up_bytes >= 0);
    out->down = job->down_bytes > 0 || job->down_always
                        ? dev_transfer_ns(p->latency_ns, job->down_bytes, p->down_bps)
                        : 0;
    out->down_end = sat_add(start, out->down);
    out->train = dev_compute_ns(p, &job->work, out->down_end);
    out->train_end = sat_add(out->down_end, out->train);
    out->up = job->up_bytes > 0 ? dev_transfer_ns(p->latency_ns, job->up_bytes, p->up_bps) : 0;
    out->up_end = sat_add(out->train_end, out->up);
    out->flops = dev_work_flops(p, &job->work);
}

/* Weighted least squares over the terms in `use` (bit 0 FLOPs, 1 bytes, 2 the constant):
 * minimizes sum_i (x . term_i / t_i - 1)^2, the relative error, by Gauss-Jordan elimination on
 * the normal equations. x[k] is set for every term used, 0 for the others. Returns the residual,
 * or INFINITY when the terms are not independent over the points. */
static double fit_terms(const double *flops, const double *bytes, const double *secs, int n,
                        unsigned use, double x[3])
{
    int col[3], k = 0;
    x[0] = x[1] = x[2] = 0;
    for (int j = 0; j < 3; j++)
        if (use >> j & 1) col[k++] = j;
    double M[3][4] = {{0}}, d[3];
    for (int i = 0; i < n; i++) {
        double term[3] = {flops[i], bytes ? bytes[i] : 0, 1}, a[3];
        for (int r = 0; r < k; r++)
            a[r] = term[col[r]] / secs[i];
        for (int r = 0; r < k; r++) {
            for (int c = 0; c < k; c++)
                M[r][c] += a[r] * a[c];
            M[r][k] += a[r];
        }
    }
    for (int r = 0; r < k; r++)
        d[r] = M[r][r];
    for (int r = 0; r < k; r++) {
        int piv = r;
        for (int q = r + 1; q < k; q++)
            if (fabs(M[q][r]) > fabs(M[piv][r])) piv = q;
        for (int c = 0; c <= k; c++) {
            double t = M[r][c];
            M[r][c] = M[piv][c];
            M[piv][c] = t;
        }
        /* a pivot lost to cancellation against its column's own scale: terms proportional
         * over these points (the same width twice, say) */
        if (!(fabs(M[r][r]) > 1e-9 * d[r])) return INFINITY;
        for (int q = 0; q < k; q++) {
            if (q == r) continue;
            double f = M[q][r] / M[r][r];
            for (int c = r; c <= k; c++)
                M[q][c] -= f * M[r][c];
        }
    }
    for (int r = 0; r < k; r++)
        x[col[r]] = M[r][k] / M[r][r];
    double res = 0;
    for (int i = 0; i < n; i++) {
        double e = (x[0] * flops[i] + x[1] * (bytes ? bytes[i] : 0) + x[2]) / secs[i] - 1;
        res += e * e;
    }
    return res;
}

int dev_fit_step_cost(const double *flops, const double *bytes, const double *secs, int n,
                      double *compute, double *bandwidth, double *overhead_s)
{
    /* Non-negative least squares by enumeration: the constrained optimum is the unconstrained
     * one over the terms it keeps, so the best fit with every coefficient positive, among the
     * subsets of terms holding FLOPs, is it. A fit needs as many points as terms, and one with
     * the bandwidth more (with as many, its exact fit ties with the overhead's). */
    double best = INFINITY, bx[3] = {0};
    for (unsigned use = 1; use < 8; use += 2) {
        int k = 1 + (use >> 1 & 1) + (use >> 2 & 1);
        if ((use & 2 && (!bytes || k >= n)) || k > n) continue;
        double x[3], r = fit_terms(flops, bytes, secs, n, use, x);
        if (x[0] > 0 && x[1] >= 0 && x[2] >= 0 && r < best) {
            best = r;
            memcpy(bx, x, sizeof bx);
        }
    }
    if (!(best < INFINITY)) return -1;
    *compute = 1 / bx[0];
    if (bandwidth) *bandwidth = bx[1] > 0 ? 1 / bx[1] : 0;
    *overhead_s = bx[2];
    return 0;
}

double dev_rate_draw(const dev_rate_dist *d, sim_rng *r)
{
    for (int i = 0; i < 64; i++) {
        double x = d->mean + d->sigma * sim_rng_normal(r);
        if (x >= d->floor && x > 0) return x;
    }
    return d->floor > 0 ? d->floor : d->mean;
}

sim_time dev_transfer_ns(sim_time latency, double bytes, double bps)
{
    assert(latency >= 0 && bytes >= 0 && bps > 0);
    return add_seconds(latency, 8.0 * bytes / bps);
}

int dev_fits(const dev_profile *p, double bytes)
{
    return bytes <= p->memory_bytes;
}

double dev_capacity(const dev_profile *p, double full_model_bytes, double ref_compute_flops)
{
    if (p->capacity > 0) return p->capacity;
    double c = 1.0;
    if (full_model_bytes > 0 && p->memory_bytes / full_model_bytes < c)
        c = p->memory_bytes / full_model_bytes;
    if (ref_compute_flops > 0 && p->compute_flops / ref_compute_flops < c)
        c = p->compute_flops / ref_compute_flops;
    return c;
}

void dev_profile_copy(dev_profile *dst, const dev_profile *src)
{
    assert(dst != src);
    *dst = *src;
    dev_trace_ref(dst->speed);
    dev_trace_ref(dst->avail.trace);
    dev_battery_copy(&dst->battery, &src->battery);
}

void dev_profile_destroy(dev_profile *p)
{
    if (!p) return;
    dev_avail_spec_destroy(&p->avail);
    dev_battery_destroy(&p->battery);
    dev_trace_free(p->speed);
    memset(p, 0, sizeof *p);
}

int dev_profile_has_dist(const dev_profile *p)
{
    for (int f = 0; f < DEV_FIELD_COUNT; f++)
        if (p->dist[f].kind != DEV_DIST_FIXED) return 1;
    return 0;
}

static double field_get(const dev_profile *p, int f)
{
    switch (f) {
    case DEV_FIELD_COMPUTE:
        return p->compute_flops;
    case DEV_FIELD_UP:
        return p->up_bps;
    case DEV_FIELD_DOWN:
        return p->down_bps;
    case DEV_FIELD_LATENCY:
        return (double)p->latency_ns;
    default:
        return p->memory_bytes;
    }
}

static void field_set(dev_profile *p, int f, double v)
{
    switch (f) {
    case DEV_FIELD_COMPUTE:
        p->compute_flops = v;
        break;
    case DEV_FIELD_UP:
        p->up_bps = v;
        break;
    case DEV_FIELD_DOWN:
        p->down_bps = v;
        break;
    case DEV_FIELD_LATENCY:
        p->latency_ns = (sim_time)llround(v);
        break;
    default:
        p->memory_bytes = v;
        break;
    }
}

typedef int field_reader(const sim_yaml *node, const char *what, double *out, sim_err *err);

static int read_time_ns(const sim_yaml *node, const char *what, double *out, sim_err *err)
{
    sim_time t;
    int rc = sim_yaml_time(node, what, &t, err);
    if (!rc) *out = (double)t;
    return rc;
}

static const struct {
    const char *key;
    field_reader *read;
    int zero_ok; /* latency may be 0; compute, bandwidth and memory must be > 0 */
    const char *example;
} fields[DEV_FIELD_COUNT] = {
        {"compute", sim_yaml_flops, 0, "8 GFLOPS"}, {"up", sim_yaml_rate, 0, "10 Mbps"},
        {"down", sim_yaml_rate, 0, "40 Mbps"},      {"latency", read_time_ns, 1, "40 ms"},
        {"memory", sim_yaml_bytes, 0, "2 GiB"},
};

/* One quantity that must satisfy the field's sign rule. */
static int read_quantity(const sim_yaml *v, int f, const char *what, double *out, sim_err *err)
{
    int rc = fields[f].read(v, what, out, err);
    if (rc) return rc;
    if (!fields[f].zero_ok && !(*out > 0))
        return sim_yaml_fail(v, err, "%s must be > 0 (e.g. %s)", what, fields[f].example);
    return SIM_OK;
}

/* A field given as a value with unit or as a distribution map. */
static int read_field(const sim_yaml *v, int f, double *value, dev_dist *dist, sim_err *err)
{
    const char *key = fields[f].key;
    memset(dist, 0, sizeof *dist);
    if (v->kind == SIM_YAML_SCALAR) return read_quantity(v, f, key, value, err);
    if (v->kind != SIM_YAML_MAP)
        return sim_yaml_fail(v, err,
                             "%s: expected a value with unit (e.g. %s) or a distribution "
                             "({lognormal: %s, sigma: 0.5} or {uniform: [lo, hi]})",
                             key, fields[f].example, fields[f].example);
    const sim_yaml *ln = sim_yaml_get(v, "lognormal"), *un = sim_yaml_get(v, "uniform");
    int rc;
    if (ln && un) return sim_yaml_fail(v, err, "%s: give one of lognormal or uniform", key);
    if (ln) {
        dist->kind = DEV_DIST_LOGNORMAL;
        dist->lo = 0;
        dist->hi = INFINITY;
        if ((rc = read_quantity(ln, f, "lognormal", &dist->a, err))) return rc;
        if (!(dist->a > 0))
            return sim_yaml_fail(ln, err, "lognormal median must be > 0 (e.g. %s)",
                                 fields[f].example);
        const sim_yaml *s = sim_yaml_get(v, "sigma");
        if (!s)
            return sim_yaml_fail(v, err, "%s: lognormal needs 'sigma' (log-space, e.g. 0.5)", key);
        if ((rc = sim_yaml_double(s, "sigma", 0.0, 10.0, &dist->b, err))) return rc;
        const sim_yaml *mn = sim_yaml_get(v, "min"), *mx = sim_yaml_get(v, "max");
        if (mn && (rc = read_quantity(mn, f, "min", &dist->lo, err))) return rc;
        if (mx && (rc = read_quantity(mx, f, "max", &dist->hi, err))) return rc;
        if (dist->lo > dist->hi) return sim_yaml_fail(mx, err, "%s: max is below min", key);
        *value = fmin(fmax(dist->a, dist->lo), dist->hi);
        return SIM_OK;
    }
    if (un) {
        dist->kind = DEV_DIST_UNIFORM;
        if (un->kind != SIM_YAML_SEQ || un->n != 2)
            return sim_yaml_fail(un, err, "%s: uniform takes [low, high], e.g. [%s, %s]", key,
                                 fields[f].example, fields[f].example);
        if ((rc = read_quantity(un->items[0], f, "uniform low", &dist->a, err))) return rc;
        if ((rc = read_quantity(un->items[1], f, "uniform high", &dist->b, err))) return rc;
        if (dist->a > dist->b)
            return sim_yaml_fail(un->items[1], err, "%s: uniform high is below low", key);
        *value = 0.5 * (dist->a + dist->b);
        return SIM_OK;
    }
    return sim_yaml_fail(v, err, "%s: a distribution map needs 'lognormal' or 'uniform'", key);
}

static int read_profile(dev_profile *out, const sim_yaml *node, int have_base, sim_err *err)
{
    int rc;
    if (node->kind != SIM_YAML_MAP)
        return sim_yaml_fail(node, err,
                             "a device profile is a map (compute, up, down, latency, "
                             "memory, ...)");
    for (int f = 0; f < DEV_FIELD_COUNT; f++) {
        const sim_yaml *v = sim_yaml_get(node, fields[f].key);
        if (!v) {
            if (have_base) continue;
            return sim_yaml_fail(node, err, "missing '%s' (e.g. %s: %s)", fields[f].key,
                                 fields[f].key, fields[f].example);
        }
        double x;
        if ((rc = read_field(v, f, &x, &out->dist[f], err))) return rc;
        field_set(out, f, x);
    }
    const sim_yaml *v;
    if ((v = sim_yaml_get(node, "capacity"))) {
        if (v->kind == SIM_YAML_SCALAR && !strcmp(v->value, "auto")) {
            out->capacity = 0;
        } else {
            if ((rc = sim_yaml_double(v, "capacity", 0.0, 1.0, &out->capacity, err))) return rc;
            if (!(out->capacity > 0))
                return sim_yaml_fail(v, err, "capacity must be in (0, 1], or auto");
        }
    }
    if ((v = sim_yaml_get(node, "sparse_eff")) &&
        (rc = sim_yaml_double(v, "sparse_eff", 0.0, 1.0, &out->sparse_eff, err)))
        return rc;
    if ((v = sim_yaml_get(node, "mem_bandwidth"))) {
        if ((rc = sim_yaml_rate(v, "mem_bandwidth", &out->mem_bandwidth_bps, err))) return rc;
        if (!(out->mem_bandwidth_bps > 0)) /* 0 would read as "free", not as "none" */
            return sim_yaml_fail(v, err,
                                 "mem_bandwidth must be > 0 (leave it out to not price "
                                 "activations)");
    }
    if ((v = sim_yaml_get(node, "step_overhead"))) {
        if ((rc = sim_yaml_time(v, "step_overhead", &out->step_overhead_ns, err))) return rc;
        if (out->step_overhead_ns < 0)
            return sim_yaml_fail(v, err, "step_overhead must be >= 0 (e.g. 1.5 ms)");
    }
    if ((v = sim_yaml_get(node, "source"))) {
        const char *src;
        if ((rc = sim_yaml_str(v, "source", &src, err))) return rc;
        if (strlen(src) >= sizeof out->source)
            return sim_yaml_fail(v, err, "source: at most %zu characters", sizeof out->source - 1);
        snprintf(out->source, sizeof out->source, "%s", src);
    }
    const sim_yaml *avail = sim_yaml_get(node, "availability");
    const sim_yaml *speed = sim_yaml_get(node, "speed");
    const sim_yaml *power = sim_yaml_get(node, "power"), *battery = sim_yaml_get(node, "battery");
    /* every key is read: a misspelled one is reported before a trace file is opened */
    if ((rc = sim_yaml_check_keys(node, err))) return rc;
    if ((v = avail)) {
        dev_avail_spec s;
        if ((rc = dev_avail_spec_from_yaml(&s, v, err))) return rc;
        dev_avail_spec_destroy(&out->avail);
        out->avail = s;
    }
    if ((v = speed)) {
        dev_trace *t = NULL;
        if (v->kind == SIM_YAML_SCALAR && !strcmp(v->value, "none")) {
            t = NULL;
        } else if (v->kind == SIM_YAML_MAP) {
            if ((rc = dev_trace_from_yaml(&t, v, DEV_TRACE_SPEED, err))) return rc;
        } else {
            return sim_yaml_fail(v, err, "speed: expected {file: PATH, loop: ...} or none");
        }
        dev_trace_free(out->speed);
        out->speed = t;
    }
    if ((v = power) && (rc = dev_power_from_yaml(&out->power, v, err))) return rc;
    if ((v = battery)) {
        dev_battery b;
        if ((rc = dev_battery_from_yaml(&b, v, err))) return rc;
        dev_battery_destroy(&out->battery);
        out->battery = b;
    }
    if (out->battery.capacity_j > 0 && !out->power.set)
        return sim_yaml_fail(battery ? battery : node, err,
                             "battery: the profile needs power figures too (power: {train: 2 W, "
                             "up: 1.2 W, down: 0.9 W, idle: 0.05 W})");
    return sim_yaml_check_used(node, err);
}

const char dev_profile_doc[] =
        "A device profile, in the catalog or under `devices.profiles`. `compute`, `up`, `down`, "
        "`latency` and `memory` are required without `base`, and may be per-client "
        "distributions: `{lognormal: 20 Mbps, sigma: 0.5, min: 1 Mbps}` (median, log-space "
        "sigma, optional clamps) or `{uniform: [5 Mbps, 50 Mbps]}`. Trace files hold `<time with "
        "unit> <value>` lines, `#` comments and an optional `loop <period>` line (see "
        "`devices/trace.h`). A client whose device memory cannot hold the training job is never "
        "selected (counted as excluded). `fedsim calibrate` fits `mem_bandwidth`, "
        "`step_overhead` and `compute` for a model on the machine it runs on.";

/* read_profile reads each by its own rules (a value or a distribution, a trace) */
const sim_key dev_profile_keys[] = {
        {"base", SIM_KEY_STRING, .custom = 1,
         .doc = "`devices.profiles` only: the catalog profile this one starts from; the keys "
                "given override its own"},
        {"compute", SIM_KEY_FLOPS, .custom = 1, .doc = "FLOP/s"},
        {"up", SIM_KEY_RATE, .custom = 1, .doc = "upload bandwidth (bit/s)"},
        {"down", SIM_KEY_RATE, .custom = 1, .doc = "download bandwidth (bit/s)"},
        {"latency", SIM_KEY_TIME, .custom = 1, .doc = "per transfer (may be 0)"},
        {"memory", SIM_KEY_SIZE, .custom = 1, .doc = "what a training job may use"},
        {"capacity", SIM_KEY_STRING, .custom = 1, .dflt = "auto",
         .doc = "the client's share of the full model's cost, in (0, 1], or `auto` (see "
                "`devices.capacity`)"},
        {"sparse_eff", SIM_KEY_DOUBLE, .custom = 1, .dflt = "0", .lo = 0, .hi = 1,
         .doc = "how much of unstructured sparsity becomes speed; the FLOPs skipped are not "
                "counted in `client_flops` either"},
        {"mem_bandwidth", SIM_KEY_RATE, .custom = 1, .dflt = "none",
         .doc = "a rate, `10 GB/s` or `80 Gbps`: the activation bytes a job's passes write take "
                "8 × bytes / mem_bandwidth more; they shrink with a narrow model's width where its "
                "FLOPs shrink with the width squared; adds time, not `client_flops`"},
        {"step_overhead", SIM_KEY_TIME, .custom = 1, .dflt = "0",
         .doc = "what each SGD step takes beyond its FLOPs and activations, the work that does not "
                "shrink with a narrow or sparse model; adds time, not `client_flops`"},
        {"availability", SIM_KEY_MAP, .custom = 1, .dflt = "always",
         .doc = "`always`; `{kind: markov, mean_on: 30 min, mean_off: 1 h}`; `{kind: trace, "
                "file: F, loop: 24 h, offset: random}`"},
        {"speed", SIM_KEY_MAP, .custom = 1, .dflt = "none",
         .doc = "`{file: F}`: a speed-factor trace"},
        {"source", SIM_KEY_STRING, .custom = 1,
         .doc = "where the figures come from, for `fedsim devices` (at most 159 characters)"},
        {"power", SIM_KEY_MAP, .custom = 1, .dflt = "none",
         .doc = "`{train: 2 W, up: 1.2 W, down: 0.9 W, idle: 0.05 W}` (W or mW; idle may be left "
                "out: 0): the draw in each phase of a job, and between jobs; a job's energy is "
                "each phase's power × its simulated duration (`energy_j` in clients.tsv). Used "
                "only with `devices.energy: true`"},
        {"battery", SIM_KEY_MAP, .custom = 1, .dflt = "none",
         .doc = "`{capacity: 15 Wh, initial: 80% or {uniform: [30%, 100%]}, floor: 20%, charging: "
                "{rate: 10 W, when: online}}` (initial 100% and floor 0 unless given; `when`: "
                "`online`, `offline`, `always`, `never` or a process written as `availability`). "
                "A job that would take the level down to the floor is lost at that instant, and "
                "the client takes no job until charging brings it above the floor. Needs `power`"},
        {0},
};

int dev_profile_from_yaml(dev_profile *out, const sim_yaml *node, const dev_profile *base,
                          sim_err *err)
{
    assert(out != base);
    if (base)
        dev_profile_copy(out, base);
    else
        memset(out, 0, sizeof *out);
    int rc = read_profile(out, node, base != NULL, err);
    if (rc) dev_profile_destroy(out);
    return rc;
}

void dev_profile_draw(dev_profile *out, const dev_profile *spec, sim_rng *r)
{
    dev_profile_copy(out, spec);
    for (int f = 0; f < DEV_FIELD_COUNT; f++) {
        const dev_dist *d = &spec->dist[f];
        double x;
        switch (d->kind) {
        case DEV_DIST_FIXED:
            continue;
        case DEV_DIST_LOGNORMAL:
            x = d->a * exp(d->b * sim_rng_normal(r));
            x = fmin(fmax(x, d->lo), d->hi);
            break;
        default:
            x = d->a + (d->b - d->a) * sim_rng_uniform(r);
            break;
        }
        field_set(out, f, x);
        memset(&out->dist[f], 0, sizeof out->dist[f]);
    }
}

static void format_value(char *buf, size_t n, int f, double v)
{
    switch (f) {
    case DEV_FIELD_COMPUTE:
        sim_format_flops(buf, n, v);
        break;
    case DEV_FIELD_UP:
    case DEV_FIELD_DOWN:
        sim_format_rate(buf, n, v);
        break;
    case DEV_FIELD_LATENCY:
        sim_format_time(buf, n, (sim_time)llround(v));
        break;
    default:
        sim_format_bytes(buf, n, v);
        break;
    }
}

static void format_field(char *buf, size_t n, const dev_profile *p, int f)
{
    const dev_dist *d = &p->dist[f];
    char a[32], b[32];
    switch (d->kind) {
    case DEV_DIST_FIXED:
        format_value(buf, n, f, field_get(p, f));
        break;
    case DEV_DIST_LOGNORMAL:
        format_value(a, sizeof a, f, d->a);
        snprintf(buf, n, "lognormal(%s, sigma %.3g)", a, d->b);
        break;
    default:
        format_value(a, sizeof a, f, d->a);
        format_value(b, sizeof b, f, d->b);
        snprintf(buf, n, "uniform(%s..%s)", a, b);
        break;
    }
}

void dev_profile_describe(const dev_profile *p, char *buf, size_t n)
{
    char v[DEV_FIELD_COUNT][96], cap[32], av[128], oh[48] = "", bw[48] = "";
    for (int f = 0; f < DEV_FIELD_COUNT; f++)
        format_field(v[f], sizeof v[f], p, f);
    if (p->capacity > 0)
        snprintf(cap, sizeof cap, "%.3g", p->capacity);
    else
        snprintf(cap, sizeof cap, "auto");
    dev_avail_spec_describe(&p->avail, av, sizeof av);
    const char *sp = "";
    if (p->speed) {
        sp = strrchr(p->speed->file, '/');
        sp = sp ? sp + 1 : p->speed->file;
    }
    if (p->mem_bandwidth_bps > 0)
        snprintf(bw, sizeof bw, ", mem_bandwidth %.3g GB/s", p->mem_bandwidth_bps / 8e9);
    if (p->step_overhead_ns > 0) {
        char t[32];
        sim_format_time(t, sizeof t, p->step_overhead_ns);
        snprintf(oh, sizeof oh, ", step_overhead %s", t);
    }
    char en[320];
    dev_energy_describe(&p->power, &p->battery, en, sizeof en);
    snprintf(buf, n,
             "compute %s, up %s, down %s, latency %s, memory %s, capacity %s, sparse_eff %.3g%s%s, "
             "availability %s%s%s%s",
             v[0], v[1], v[2], v[3], v[4], cap, p->sparse_eff, bw, oh, av,
             p->speed ? ", speed " : "", sp, en);
}
