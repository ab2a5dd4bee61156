/* tests/test_dev_energy.c -- job energy and batteries (devices/energy.h), worked by hand:
 *   - a job's energy over its three phases, whole and cut short;
 *   - a battery that reaches its floor mid-training, at the exact nanosecond (without charging,
 *     and with charging that slows the fall), and a job it survives;
 *   - charging back above the floor: the first nanosecond the level is above it, the battery
 *     then allowed again; charging while offline on an always-online device never comes;
 *     a charging process of its own (a trace) is followed;
 *   - initial levels drawn per client from their own stream, within the bounds;
 *   - the power and energy units, and the keys: values, defaults, and errors at file:line:col
 *     naming the key.
 */
#include "devices/energy.h"
#include "devices/profile.h"
#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S SIM_SEC

static void test_job_energy(void)
{
    /* download 1 s at 1 W, training 2 s at 2 W, upload 0.5 s at 1.5 W: 1 + 4 + 0.75 J */
    dev_power pw = {.set = 1, .down_w = 1, .train_w = 2, .up_w = 1.5, .idle_w = 0.25};
    sim_time t0 = 10 * S;
    CHECK(dev_energy_job(&pw, t0, t0 + S, t0 + 3 * S, t0 + 7 * S / 2, DEV_TIME_NEVER) == 5.75);
    /* lost 1 s into training: 1 + 2 J */
    CHECK(dev_energy_job(&pw, t0, t0 + S, t0 + 3 * S, t0 + 7 * S / 2, t0 + 2 * S) == 3);
    /* lost during the download */
    CHECK(dev_energy_job(&pw, t0, t0 + S, t0 + 3 * S, t0 + 7 * S / 2, t0 + S / 4) == 0.25);
    /* without an upload (up_end = train_end) */
    CHECK(dev_energy_job(&pw, t0, t0 + S, t0 + 3 * S, t0 + 3 * S, DEV_TIME_NEVER) == 5);
}

static dev_battery battery(double cap_j, double init, double floor, double charge_w,
                           dev_charge_when when)
{
    return (dev_battery){.capacity_j = cap_j,
                         .init_lo = init,
                         .init_hi = init,
                         .floor = floor,
                         .charge_w = charge_w,
                         .when = when};
}

static dev_batt start(const dev_battery *spec, sim_time at)
{
    dev_batt b;
    dev_avail_spec always = {0};
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_AVAIL, 0);
    dev_batt_init(&b, spec, &always, &r, 1, 0);
    b.at = at;
    return b;
}

static void test_death(void)
{
    /* 10 J at 50% = 5 J, floor 20% = 2 J; download 0.5 s at 1 W leaves 4.5 J, then training at
     * 2 W reaches 2 J after 1.25 s: 1.75 s after the start */
    dev_power pw = {.set = 1, .down_w = 1, .train_w = 2, .up_w = 1.5};
    dev_battery spec = battery(10, 0.5, 0.2, 0, DEV_CHARGE_NEVER);
    sim_time t0 = 3 * S + 7; /* an odd start: the answer is an offset from it */
    dev_batt b = start(&spec, t0);
    CHECK(b.level_j == 5);
    sim_time down = t0 + S / 2, train = t0 + 4 * S, up = t0 + 5 * S;
    sim_time d = dev_batt_death(&b, &spec, &pw, down, train, up, up);
    CHECK_EQ_I64(d, t0 + 1750000000);
    /* the prediction works on a copy: b has not moved */
    CHECK(b.at == t0 && b.level_j == 5);
    /* the job ends (offline) before then: no death */
    CHECK(dev_batt_death(&b, &spec, &pw, down, train, up, d - 1) == DEV_TIME_NEVER);
    CHECK(dev_batt_death(&b, &spec, &pw, down, train, up, d) == d);
    /* advanced through the phases to d, the level is at the floor (to rounding) */
    dev_batt_advance(&b, &spec, down, pw.down_w);
    dev_batt_advance(&b, &spec, d, pw.train_w);
    CHECK_MSG(fabs(b.level_j - 2) < 1e-9, "level at death %.17g", b.level_j);
    /* charging at 1 W the whole time: the download costs nothing net, training falls at 1 W:
     * 5 - 2 = 3 J in 3 s, 3.5 s after the start */
    dev_battery ch = battery(10, 0.5, 0.2, 1, DEV_CHARGE_ALWAYS);
    b = start(&ch, t0);
    CHECK_EQ_I64(dev_batt_death(&b, &ch, &pw, down, train, up, up), t0 + 3500000000);
    /* a job it survives: 0.5 + 2 x 1 + 1.5 x 0.2 J from 5 J leaves 2.2 J */
    b = start(&spec, t0);
    sim_time up2 = t0 + 17 * S / 10;
    CHECK(dev_batt_death(&b, &spec, &pw, down, t0 + 3 * S / 2, up2, up2) == DEV_TIME_NEVER);
    /* no battery: never */
    dev_battery none = {0};
    b = start(&none, t0);
    CHECK(dev_batt_death(&b, &none, &pw, down, train, up, up) == DEV_TIME_NEVER);
    CHECK(dev_batt_ok(&b, &none));
}

static void test_charging(void)
{
    /* 1 J below a 2 J floor, charging 0.75 W against 0.25 W idle: 0.5 W net, 2 s to the floor,
     * above it from the next ns */
    dev_power pw = {.set = 1, .down_w = 1, .train_w = 2, .up_w = 1.5, .idle_w = 0.25};
    dev_battery spec = battery(10, 0.1, 0.2, 0.75, DEV_CHARGE_ALWAYS);
    sim_time t0 = 5 * S;
    dev_batt b = start(&spec, t0);
    CHECK(b.level_j == 1 && !dev_batt_ok(&b, &spec));
    sim_time up = dev_batt_above(&b, &spec, &pw);
    CHECK_EQ_I64(up, t0 + 2 * S + 1);
    dev_batt_advance(&b, &spec, up - 1, pw.idle_w);
    CHECK_MSG(!dev_batt_ok(&b, &spec), "at the floor, not above: %.17g", b.level_j);
    dev_batt_advance(&b, &spec, up, pw.idle_w);
    CHECK_MSG(dev_batt_ok(&b, &spec), "above the floor: %.17g", b.level_j);
    /* full after 18 s, and no fuller */
    dev_batt_advance(&b, &spec, t0 + 100 * S, pw.idle_w);
    CHECK(b.level_j == 10);
    /* charging while offline on an always-online device, or slower than idle: never */
    dev_battery off = battery(10, 0.1, 0.2, 0.75, DEV_CHARGE_OFFLINE);
    b = start(&off, t0);
    CHECK(dev_batt_above(&b, &off, &pw) == DEV_TIME_NEVER);
    dev_battery slow = battery(10, 0.1, 0.2, 0.25, DEV_CHARGE_ALWAYS);
    b = start(&slow, t0);
    CHECK(dev_batt_above(&b, &slow, &pw) == DEV_TIME_NEVER);
    /* idle drains an idle battery that does not charge: 1 J at 0.25 W lasts 4 s, then 0 */
    b = start(&off, t0);
    dev_batt_advance(&b, &off, t0 + 2 * S, pw.idle_w);
    CHECK(b.level_j == 0.5);
    dev_batt_advance(&b, &off, t0 + 10 * S, pw.idle_w);
    CHECK(b.level_j == 0);
}

static void test_own_process(void)
{
    /* charging on its own daily-style trace: plugged in from 10 s to 20 s of every 30 s */
    sim_err err = {0};
    sim_yaml *y = NULL;
    FILE *f = fopen("/tmp/fedsim-energy-c.trace", "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("loop 30 s\n0 s 0\n10 s 1\n20 s 0\n", f);
    fclose(f);
    char doc[400];
    snprintf(doc, sizeof doc,
             "capacity: 10 J\ninitial: 10%%\nfloor: 20%%\n"
             "charging: {rate: 1.25 W, when: {kind: trace, file: "
             "/tmp/fedsim-energy-c.trace}}\n");
    CHECK(sim_yaml_load_string(&y, doc, "b.yaml", &err) == 0);
    dev_battery spec;
    int rc = dev_battery_from_yaml(&spec, y, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    remove("/tmp/fedsim-energy-c.trace");
    if (rc) {
        sim_yaml_free(y);
        return;
    }
    CHECK(spec.when == DEV_CHARGE_OWN && spec.charge_w == 1.25);
    dev_power pw = {.set = 1, .train_w = 2, .idle_w = 0.25};
    dev_avail_spec always = {0};
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_AVAIL, 0);
    dev_batt b;
    dev_batt_init(&b, &spec, &always, &r, 1, 0);
    /* 1 J at 0, idle 0.25 W until 10 s: 0 J by 4 s; then 1 W net from 10 s: above 2 J from
     * 12 s + 1 ns */
    CHECK(b.level_j == 1);
    CHECK_EQ_I64(dev_batt_above(&b, &spec, &pw), 12 * S + 1);
    dev_batt_advance(&b, &spec, 25 * S, pw.idle_w);
    /* 0 J at 10 s, +1 W over [10, 20) s: 10 J (full); then idle alone over [20, 25) s */
    CHECK_MSG(fabs(b.level_j - 8.75) < 1e-12, "level %.17g", b.level_j);
    dev_battery_destroy(&spec);
    sim_yaml_free(y);
}

static void test_initial_draws(void)
{
    dev_battery spec = battery(100, 0.3, 0.2, 0, DEV_CHARGE_NEVER);
    spec.init_hi = 1.0;
    dev_avail_spec always = {0};
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_AVAIL, 0);
    double lo = 1e9, hi = -1, sum = 0;
    int n = 2000;
    for (int c = 0; c < n; c++) {
        dev_batt b;
        dev_batt_init(&b, &spec, &always, &r, 9, c);
        lo = fmin(lo, b.level_j), hi = fmax(hi, b.level_j), sum += b.level_j;
        dev_batt again;
        dev_batt_init(&again, &spec, &always, &r, 9, c);
        if (c < 3) CHECK(again.level_j == b.level_j); /* a function of (seed, client) */
    }
    CHECK_MSG(lo >= 30 && hi < 100 && lo < 31 && hi > 99, "levels %g..%g", lo, hi);
    CHECK_MSG(fabs(sum / n - 65) < 1.5, "mean level %g", sum / n);
    dev_batt a, b;
    dev_batt_init(&a, &spec, &always, &r, 9, 0);
    dev_batt_init(&b, &spec, &always, &r, 10, 0);
    CHECK(a.level_j != b.level_j); /* another seed, another draw */
}

static void test_units(void)
{
    sim_err err = {0};
    double x = 0;
    CHECK(sim_parse_power("2 W", &x, &err) == 0 && x == 2);
    CHECK(sim_parse_power("500 mW", &x, &err) == 0 && x == 0.5);
    CHECK(sim_parse_energy("15 Wh", &x, &err) == 0 && x == 54000);
    CHECK(sim_parse_energy("800 mWh", &x, &err) == 0 && fabs(x - 2880) < 1e-9);
    CHECK(sim_parse_energy("3 kJ", &x, &err) == 0 && x == 3000);
    CHECK(sim_parse_power("2", &x, &err) != 0 && strstr(err.msg, "no unit"));
    CHECK(sim_parse_power("2 Wh", &x, &err) != 0 && strstr(err.msg, "not a power unit"));
    CHECK(sim_parse_energy("2 W", &x, &err) != 0 && strstr(err.msg, "not an energy unit"));
}

/* A profile from text; the error message (with file:line:col) in msg. */
static int profile_of(const char *text, dev_profile *p, char *msg, size_t n)
{
    sim_err err = {0};
    sim_yaml *y = NULL;
    int rc = sim_yaml_load_string(&y, text, "p.yaml", &err);
    if (!rc) rc = dev_profile_from_yaml(p, y, NULL, &err);
    msg[0] = 0;
    if (rc) sim_err_format(&err, msg, n);
    sim_yaml_free(y);
    return rc;
}

#define BASE "{compute: 1 GFLOPS, up: 1 Mbps, down: 1 Mbps, latency: 0 ms, memory: 1 GiB, "

static void expect_error(const char *text, const char *what)
{
    dev_profile p;
    char msg[512];
    int rc = profile_of(text, &p, msg, sizeof msg);
    CHECK_MSG(rc != 0 && strstr(msg, what), "%s: expected '%s', got '%s'", text, what, msg);
    if (!rc) dev_profile_destroy(&p);
}

static void test_keys(void)
{
    dev_profile p;
    char msg[512];
    int rc = profile_of(BASE "power: {train: 2 W, up: 1200 mW, down: 0.9 W, idle: 50 mW},\n"
                             " battery: {capacity: 15 Wh, initial: {uniform: [30%, 100%]}, "
                             "floor: 0.2, charging: {rate: 10 W, when: online}}}",
                        &p, msg, sizeof msg);
    CHECK_MSG(rc == 0, "%s", msg);
    if (!rc) {
        CHECK(p.power.set && p.power.train_w == 2 && p.power.up_w == 1.2 && p.power.down_w == 0.9 &&
              p.power.idle_w == 0.05);
        CHECK(p.battery.capacity_j == 54000 && p.battery.init_lo == 0.3 && p.battery.init_hi == 1 &&
              p.battery.floor == 0.2 && p.battery.charge_w == 10 &&
              p.battery.when == DEV_CHARGE_ONLINE);
        char d[1024];
        dev_profile_describe(&p, d, sizeof d);
        CHECK_MSG(strstr(d, "power train 2 W up 1.2 W down 0.9 W idle 0.05 W, battery 15 Wh from "
                            "30-100% floor 20% charging 10 W online"),
                  "%s", d);
        dev_profile_destroy(&p);
    }
    /* defaults: idle 0, full, floor 0, no charging; a profile without power has none */
    rc = profile_of(BASE "power: {train: 2 W, up: 1 W, down: 1 W}, battery: {capacity: 1 kJ}}", &p,
                    msg, sizeof msg);
    CHECK_MSG(rc == 0, "%s", msg);
    if (!rc) {
        CHECK(p.power.idle_w == 0 && p.battery.init_lo == 1 && p.battery.init_hi == 1 &&
              p.battery.floor == 0 && p.battery.charge_w == 0);
        dev_profile_destroy(&p);
    }
    rc = profile_of(BASE "}", &p, msg, sizeof msg);
    CHECK(rc == 0 && !p.power.set && p.battery.capacity_j == 0);
    if (!rc) dev_profile_destroy(&p);
    /* errors, each at its line and column and naming the key */
    expect_error(BASE "power: {train: 2, up: 1 W, down: 1 W}}",
                 "p.yaml:1:92: train: '2' has no unit");
    expect_error(BASE "power: {train: 2 W, down: 1 W}}", "power: missing 'up'");
    expect_error(BASE "power: {train: 2 W, up: 1 W, down: 1 W, cpu: 1 W}}", "cpu");
    expect_error(BASE "battery: {capacity: 15 Wh}}", "needs power figures");
    expect_error(BASE "power: {train: 2 W, up: 1 W, down: 1 W}, battery: {capacity: 15 W}}",
                 "capacity: 'W' is not an energy unit");
    expect_error(BASE "power: {train: 2 W, up: 1 W, down: 1 W}, battery: {floor: 20%}}",
                 "missing 'capacity'");
    expect_error(BASE "power: {train: 2 W, up: 1 W, down: 1 W}, battery: {capacity: 1 Wh, "
                      "floor: 120%}}",
                 "floor: 120% is not between 0 and 100%");
    expect_error(BASE "power: {train: 2 W, up: 1 W, down: 1 W}, battery: {capacity: 1 Wh, "
                      "initial: {uniform: [90%, 30%]}}}",
                 "uniform high is below low");
    expect_error(BASE "power: {train: 2 W, up: 1 W, down: 1 W}, battery: {capacity: 1 Wh, "
                      "charging: {rate: 1 W, when: sometimes}}}",
                 "when: 'sometimes' is not online, offline, always, never");
    expect_error(BASE "power: {train: 2 W, up: 1 W, down: 1 W}, battery: {capacity: 1 Wh, "
                      "charging: {when: online}}}",
                 "charging: missing 'rate'");
    expect_error(BASE "power: {train: 2 W, up: 1 W, down: 1 W}, battery: {capacity: 1 Wh, "
                      "initial: lots}}",
                 "initial: 'lots' is not a share");
}

int main(void)
{
    test_job_energy();
    test_death();
    test_charging();
    test_own_process();
    test_initial_draws();
    test_units();
    test_keys();
    return CHECK_DONE();
}
