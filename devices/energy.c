/* devices/energy.c -- job energy, batteries and their keys (see energy.h).
 *
 * A battery's level is piecewise linear in time: on a stretch where the device's draw and the
 * charging state are constant it moves at (charge - draw) W, clamped to [0, capacity] (exact at
 * the stretch's end, since the level is monotone on it). Every function walks those stretches in
 * the same order, so a prediction made at dispatch and the level the engine later advances to
 * are the same arithmetic.
 */
#include "devices/energy.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stretches a prediction walks before it gives up (a charging process that flips for ever
 * without the level getting anywhere, such as a looping trace that never charges). */
#define MAX_STRETCHES 1000000

static double seg_j(double w, sim_time a, sim_time b, sim_time end)
{
    if (b > end) b = end;
    return b > a ? w * ((double)(b - a) * 1e-9) : 0;
}

double dev_energy_job(const dev_power *pw, sim_time start, sim_time down_end, sim_time train_end,
                      sim_time up_end, sim_time end)
{
    double j = seg_j(pw->down_w, start, down_end, end);
    j += seg_j(pw->train_w, down_end, train_end, end);
    j += seg_j(pw->up_w, train_end, up_end, end);
    return j;
}

void dev_batt_init(dev_batt *b, const dev_battery *spec, const dev_avail_spec *avail,
                   const sim_rng *avail_stream, uint64_t seed, int32_t c)
{
    memset(b, 0, sizeof *b);
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_ENERGY, (uint64_t)c);
    double f = spec->init_lo;
    if (spec->init_hi > spec->init_lo) f += (spec->init_hi - spec->init_lo) * sim_rng_uniform(&r);
    b->level_j = spec->capacity_j * f;
    static const dev_avail_spec always = {0};
    switch (spec->when) {
    case DEV_CHARGE_ONLINE:
    case DEV_CHARGE_OFFLINE:
        dev_avail_init(&b->chg, avail, avail_stream);
        break;
    case DEV_CHARGE_OWN:
        dev_avail_init(&b->chg, &spec->process, &r);
        break;
    default:
        dev_avail_init(&b->chg, &always, &r);
        break;
    }
    b->chg_invert = spec->when == DEV_CHARGE_OFFLINE || spec->when == DEV_CHARGE_NEVER;
}

/* One stretch from b->at towards t: how long (to t, or to the charging process's next change
 * before it) and the charging power on it. A battery that never charges is one stretch. */
static sim_time stretch(dev_batt *b, const dev_battery *spec, sim_time t, double *charge_w)
{
    if (!(spec->charge_w > 0)) {
        *charge_w = 0;
        return t;
    }
    int on = dev_avail_online(&b->chg, b->at) != b->chg_invert;
    *charge_w = on ? spec->charge_w : 0;
    sim_time next = dev_avail_next_change(&b->chg, b->at);
    return next < t ? next : t;
}

static void move(dev_batt *b, const dev_battery *spec, sim_time to, double net_w)
{
    double l = b->level_j + net_w * ((double)(to - b->at) * 1e-9);
    b->level_j = l < 0 ? 0 : l > spec->capacity_j ? spec->capacity_j : l;
    b->at = to;
}

void dev_batt_advance(dev_batt *b, const dev_battery *spec, sim_time t, double draw_w)
{
    assert(t >= b->at && "a battery's level moves forward only");
    if (!(spec->capacity_j > 0)) {
        b->at = t;
        return;
    }
    while (b->at < t) {
        double ch;
        sim_time to = stretch(b, spec, t, &ch);
        move(b, spec, to, ch - draw_w);
    }
}

int dev_batt_charging(const dev_batt *b, const dev_battery *spec, sim_time t)
{
    if (!(spec->charge_w > 0)) return 0;
    dev_avail_proc p = b->chg;
    return dev_avail_online(&p, t) != b->chg_invert;
}

sim_time dev_batt_charge_change(const dev_batt *b, const dev_battery *spec, sim_time t)
{
    if (!(spec->charge_w > 0)) return DEV_TIME_NEVER;
    dev_avail_proc p = b->chg;
    return dev_avail_next_change(&p, t);
}

int dev_batt_ok(const dev_batt *b, const dev_battery *spec)
{
    return !(spec->capacity_j > 0) || b->level_j > spec->floor * spec->capacity_j;
}

sim_time dev_batt_death(const dev_batt *b0, const dev_battery *spec, const dev_power *pw,
                        sim_time down_end, sim_time train_end, sim_time up_end, sim_time end)
{
    if (!(spec->capacity_j > 0)) return DEV_TIME_NEVER;
    dev_batt b = *b0; /* the charging process is a value: the copy walks ahead on its own */
    double floor_j = spec->floor * spec->capacity_j;
    const sim_time ends[3] = {down_end, train_end, up_end};
    const double draw[3] = {pw->down_w, pw->train_w, pw->up_w};
    for (int p = 0; p < 3; p++) {
        sim_time t = ends[p] < end ? ends[p] : end;
        while (b.at < t) {
            double ch;
            sim_time to = stretch(&b, spec, t, &ch);
            double net = ch - draw[p];
            if (b.level_j <= floor_j) return b.at;
            if (net < 0) {
                /* the first ns at which level + net x dt <= floor */
                double ns = ceil((b.level_j - floor_j) / -net * 1e9);
                if (ns <= (double)(to - b.at)) return b.at + (sim_time)ns;
            }
            move(&b, spec, to, net);
        }
    }
    return DEV_TIME_NEVER;
}

sim_time dev_batt_above(const dev_batt *b0, const dev_battery *spec, const dev_power *pw)
{
    if (dev_batt_ok(b0, spec)) return b0->at;
    if (!(spec->charge_w > pw->idle_w)) return DEV_TIME_NEVER;
    dev_batt b = *b0;
    double floor_j = spec->floor * spec->capacity_j;
    for (int i = 0; i < MAX_STRETCHES; i++) {
        double ch;
        sim_time to = stretch(&b, spec, DEV_TIME_NEVER, &ch);
        double net = ch - pw->idle_w;
        if (net > 0) {
            /* the first ns at which level + net x dt > floor */
            double ns = floor((floor_j - b.level_j) / net * 1e9) + 1;
            if (ns <= (double)(to - b.at)) return b.at + (sim_time)ns;
        }
        if (to == DEV_TIME_NEVER) return DEV_TIME_NEVER;
        move(&b, spec, to, net);
    }
    return DEV_TIME_NEVER;
}

/* ---------------------------------------------------------------------------------------- */
/* keys */

static int read_watts(const sim_yaml *map, const char *key, int need, double *out, sim_err *err)
{
    const sim_yaml *v = sim_yaml_get(map, key);
    if (!v) {
        if (!need) return SIM_OK;
        return sim_yaml_fail(map, err, "power: missing '%s' (e.g. %s: 2 W)", key, key);
    }
    return sim_yaml_power(v, key, out, err);
}

int dev_power_from_yaml(dev_power *out, const sim_yaml *node, sim_err *err)
{
    memset(out, 0, sizeof *out);
    int rc;
    if (node->kind != SIM_YAML_MAP)
        return sim_yaml_fail(node, err,
                             "power: expected {train: 2 W, up: 1.2 W, down: 0.9 W, idle: 0.05 W}");
    if ((rc = read_watts(node, "train", 1, &out->train_w, err)) ||
        (rc = read_watts(node, "up", 1, &out->up_w, err)) ||
        (rc = read_watts(node, "down", 1, &out->down_w, err)) ||
        (rc = read_watts(node, "idle", 0, &out->idle_w, err)) ||
        (rc = sim_yaml_check_used(node, err))) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->set = 1;
    return SIM_OK;
}

/* A share of the capacity: 20% or 0.2, in [0, 1] */
static int read_fraction(const sim_yaml *v, const char *what, double *out, sim_err *err)
{
    if (v->kind != SIM_YAML_SCALAR)
        return sim_yaml_fail(v, err, "%s: expected a share of the capacity (20%% or 0.2)", what);
    const char *s = v->value;
    size_t n = strlen(s);
    int pct = n > 0 && s[n - 1] == '%';
    char buf[64], *end;
    if (n - pct >= sizeof buf || n - pct == 0)
        return sim_yaml_fail(v, err, "%s: '%s' is not a share (20%% or 0.2)", what, s);
    memcpy(buf, s, n - pct);
    buf[n - pct] = 0;
    double x = strtod(buf, &end);
    while (*end == ' ')
        end++;
    /* strtod's inf, nan and hex are no shares */
    if (*end || end == buf || !isfinite(x) || buf[0] == ' ' || strpbrk(buf, "xX"))
        return sim_yaml_fail(v, err, "%s: '%s' is not a share (20%% or 0.2)", what, s);
    if (pct) x /= 100;
    if (!(x >= 0 && x <= 1))
        return sim_yaml_fail(v, err, "%s: %s is not between 0 and 100%%", what, s);
    *out = x;
    return SIM_OK;
}

static int read_charging(dev_battery *out, const sim_yaml *node, sim_err *err)
{
    int rc;
    if (node->kind == SIM_YAML_SCALAR && !strcmp(node->value, "none")) return SIM_OK;
    if (node->kind != SIM_YAML_MAP)
        return sim_yaml_fail(node, err,
                             "charging: expected {rate: 10 W, when: online | offline | always | "
                             "never | {kind: markov, ...}} or none");
    const sim_yaml *rate = sim_yaml_get(node, "rate"), *when = sim_yaml_get(node, "when");
    if (!rate) return sim_yaml_fail(node, err, "charging: missing 'rate' (e.g. rate: 10 W)");
    if (!when)
        return sim_yaml_fail(node, err,
                             "charging: missing 'when' (online, offline, always, never, or a "
                             "process as availability: is)");
    if ((rc = sim_yaml_power(rate, "rate", &out->charge_w, err))) return rc;
    static const char *const words[] = {"never", "always", "online", "offline"};
    if (when->kind == SIM_YAML_SCALAR) {
        for (int i = 0; i < 4; i++)
            if (!strcmp(when->value, words[i])) {
                out->when = (dev_charge_when)i;
                return sim_yaml_check_used(node, err);
            }
        return sim_yaml_fail(when, err,
                             "when: '%s' is not online, offline, always, never or a process map",
                             when->value);
    }
    if ((rc = dev_avail_spec_from_yaml(&out->process, when, err))) return rc;
    out->when = DEV_CHARGE_OWN;
    return sim_yaml_check_used(node, err);
}

int dev_battery_from_yaml(dev_battery *out, const sim_yaml *node, sim_err *err)
{
    memset(out, 0, sizeof *out);
    if (node->kind != SIM_YAML_MAP)
        return sim_yaml_fail(node, err,
                             "battery: expected {capacity: 15 Wh, initial: 80%%, floor: 20%%, "
                             "charging: {rate: 10 W, when: online}}");
    const sim_yaml *cap = sim_yaml_get(node, "capacity"), *init = sim_yaml_get(node, "initial"),
                   *fl = sim_yaml_get(node, "floor"), *ch = sim_yaml_get(node, "charging");
    int rc = SIM_OK;
    out->init_lo = out->init_hi = 1;
    if (!cap) rc = sim_yaml_fail(node, err, "battery: missing 'capacity' (e.g. capacity: 15 Wh)");
    if (!rc) rc = sim_yaml_energy(cap, "capacity", &out->capacity_j, err);
    if (!rc && !(out->capacity_j > 0))
        rc = sim_yaml_fail(cap, err, "capacity must be > 0 (e.g. 15 Wh)");
    if (!rc && init) {
        const sim_yaml *u = init->kind == SIM_YAML_MAP ? sim_yaml_get(init, "uniform") : NULL;
        if (init->kind == SIM_YAML_MAP && (!u || u->kind != SIM_YAML_SEQ || u->n != 2))
            rc = sim_yaml_fail(init, err, "initial: a share (80%%) or {uniform: [30%%, 100%%]}");
        else if (u && !(rc = read_fraction(u->items[0], "initial", &out->init_lo, err)) &&
                 !(rc = read_fraction(u->items[1], "initial", &out->init_hi, err)) &&
                 !(rc = sim_yaml_check_used(init, err)) && out->init_hi < out->init_lo)
            rc = sim_yaml_fail(u->items[1], err, "initial: uniform high is below low");
        else if (!u && !(rc = read_fraction(init, "initial", &out->init_lo, err)))
            out->init_hi = out->init_lo;
    }
    if (!rc && fl && !(rc = read_fraction(fl, "floor", &out->floor, err)) && out->floor >= 1)
        rc = sim_yaml_fail(fl, err, "floor must be below 100%%");
    if (!rc && ch) rc = read_charging(out, ch, err);
    if (!rc) rc = sim_yaml_check_used(node, err);
    if (rc) dev_battery_destroy(out);
    return rc;
}

void dev_battery_copy(dev_battery *dst, const dev_battery *src)
{
    *dst = *src;
    dev_trace_ref(dst->process.trace);
}

void dev_battery_destroy(dev_battery *b)
{
    if (!b) return;
    dev_avail_spec_destroy(&b->process);
    memset(b, 0, sizeof *b);
}

void dev_energy_describe(const dev_power *pw, const dev_battery *b, char *buf, size_t n)
{
    buf[0] = 0;
    if (!pw->set) return;
    size_t k = (size_t)snprintf(buf, n, ", power train %.3g W up %.3g W down %.3g W idle %.3g W",
                                pw->train_w, pw->up_w, pw->down_w, pw->idle_w);
    if (!(b->capacity_j > 0) || k >= n) return;
    char when[128];
    static const char *const words[] = {"never", "always", "online", "offline"};
    if (b->when == DEV_CHARGE_OWN)
        dev_avail_spec_describe(&b->process, when, sizeof when);
    else
        snprintf(when, sizeof when, "%s", words[b->when]);
    if (b->init_hi > b->init_lo)
        k += (size_t)snprintf(buf + k, n - k, ", battery %.3g Wh from %.3g-%.3g%%",
                              b->capacity_j / 3600, 100 * b->init_lo, 100 * b->init_hi);
    else
        k += (size_t)snprintf(buf + k, n - k, ", battery %.3g Wh at %.3g%%", b->capacity_j / 3600,
                              100 * b->init_lo);
    if (k < n)
        snprintf(buf + k, n - k, " floor %.3g%% charging %.3g W %s", 100 * b->floor, b->charge_w,
                 b->charge_w > 0 ? when : "never");
}
