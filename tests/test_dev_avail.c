/* tests/test_dev_avail.c -- availability processes (always, Markov, trace) and the trace file
 * format: values at and around breakpoints and the loop wrap, next-change times, determinism of
 * the Markov streams, their long-run statistics, and positioned errors for bad trace files.
 */
#include "devices/avail.h"
#include "devices/profile.h"
#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define H   (3600 * SIM_SEC)
#define MIN (60 * SIM_SEC)

static dev_trace *trace_of(const char *text, dev_trace_kind kind)
{
    dev_trace *t;
    sim_err err = {0};
    int rc = dev_trace_parse(&t, text, "a.trace", kind, &err);
    CHECK_MSG(rc == SIM_OK, "trace: %s", err.msg);
    return t;
}

static void test_always(void)
{
    dev_avail_spec s = {0};
    dev_avail_proc p;
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_AVAIL, 0);
    dev_avail_init(&p, &s, &r);
    CHECK(dev_avail_online(&p, 0));
    CHECK(dev_avail_next_change(&p, 0) == DEV_TIME_NEVER);
    CHECK(dev_avail_online(&p, 1000 * H));
    CHECK(dev_avail_next_change(&p, 1000 * H) == DEV_TIME_NEVER);
}

static void test_trace_values(void)
{
    /* a day: online from midnight, offline 8 h - 20 h, looping daily */
    dev_trace *t = trace_of("# a working day\n"
                            "loop 24 h   # period\n"
                            "\n"
                            "0 s   1\n"
                            "8 h   0     # leaves for work\n"
                            "20 h  1\n",
                            DEV_TRACE_AVAIL);
    CHECK(t->n == 3 && t->period == 24 * H);
    CHECK(dev_trace_value(t, 0) == 1);
    CHECK(dev_trace_value(t, 8 * H - 1) == 1);
    CHECK(dev_trace_value(t, 8 * H) == 0); /* a change at t is in effect at t */
    CHECK(dev_trace_value(t, 20 * H - 1) == 0);
    CHECK(dev_trace_value(t, 20 * H) == 1);
    CHECK(dev_trace_value(t, 24 * H - 1) == 1);
    CHECK(dev_trace_value(t, 24 * H) == 1); /* the wrap */
    CHECK(dev_trace_value(t, 24 * H + 8 * H - 1) == 1);
    CHECK(dev_trace_value(t, 24 * H + 8 * H) == 0);
    CHECK(dev_trace_value(t, 1000 * 24 * H + 9 * H) == 0);
    CHECK_EQ_I64(dev_trace_next_change(t, 0), 8 * H);
    CHECK_EQ_I64(dev_trace_next_change(t, 8 * H - 1), 8 * H);
    CHECK_EQ_I64(dev_trace_next_change(t, 8 * H), 20 * H);
    /* from the evening, the point at 0 s of the next day repeats 1: the next change is 8 h later */
    CHECK_EQ_I64(dev_trace_next_change(t, 20 * H), 32 * H);
    CHECK_EQ_I64(dev_trace_next_change(t, 24 * H - 1), 32 * H);
    CHECK_EQ_I64(dev_trace_next_change(t, 24 * H), 32 * H);
    CHECK_EQ_I64(dev_trace_next_change(t, 32 * H), 44 * H);
    dev_trace_free(t);

    /* Looping, first point after 0: before it the previous period's last value holds, in the
     * first period too. "30min" (no blank) and "1.5 h" are accepted time spellings. */
    t = trace_of("loop 2 h\n30min 1\n1.5 h 0\n", DEV_TRACE_AVAIL);
    CHECK(dev_trace_value(t, 0) == 0);
    CHECK(dev_trace_value(t, 30 * MIN) == 1);
    CHECK(dev_trace_value(t, 2 * H + 29 * MIN) == 0);
    CHECK(dev_trace_value(t, 2 * H + 30 * MIN) == 1);
    CHECK_EQ_I64(dev_trace_next_change(t, 0), 30 * MIN);
    CHECK_EQ_I64(dev_trace_next_change(t, 90 * MIN), 2 * H + 30 * MIN);
    CHECK_EQ_I64(dev_trace_next_change(t, 2 * H), 2 * H + 30 * MIN);
    dev_trace_free(t);

    /* not looping: 1 before the first point, the last value for ever */
    t = trace_of("5 s 0\n10 s 1\n", DEV_TRACE_AVAIL);
    CHECK(dev_trace_value(t, 0) == 1 && dev_trace_value(t, 5 * SIM_SEC) == 0);
    CHECK(dev_trace_value(t, 10 * SIM_SEC) == 1 && dev_trace_value(t, 1000 * H) == 1);
    CHECK_EQ_I64(dev_trace_next_change(t, 0), 5 * SIM_SEC);
    CHECK_EQ_I64(dev_trace_next_change(t, 5 * SIM_SEC), 10 * SIM_SEC);
    CHECK(dev_trace_next_change(t, 10 * SIM_SEC) == DEV_TIME_NEVER);
    dev_trace_free(t);

    /* repeated values are not changes; a loop with one value never changes */
    t = trace_of("loop 3 s\n0 s 1\n1 s 1\n2 s 1\n", DEV_TRACE_AVAIL);
    CHECK(dev_trace_next_change(t, 0) == DEV_TIME_NEVER);
    dev_trace_free(t);
    t = trace_of("0 s 0.5\n1 s 0.5\n2 s 2\n", DEV_TRACE_SPEED);
    CHECK(dev_trace_value(t, 1500 * SIM_MS) == 0.5 && dev_trace_value(t, 2 * SIM_SEC) == 2);
    CHECK_EQ_I64(dev_trace_next_change(t, 0), 2 * SIM_SEC);
    dev_trace_free(t);

    /* a copy with another period shares nothing */
    t = trace_of("0 s 1\n1 s 0\n", DEV_TRACE_AVAIL);
    dev_trace *c, *bad;
    sim_err err = {0};
    CHECK(dev_trace_with_period(&c, t, 2 * SIM_SEC, &err) == SIM_OK);
    CHECK(dev_trace_value(c, 2 * SIM_SEC) == 1 && dev_trace_value(t, 2 * SIM_SEC) == 0);
    CHECK(dev_trace_with_period(&bad, t, 1 * SIM_SEC, &err) == SIM_EINVAL && bad == NULL);
    CHECK(dev_trace_ref(t) == t && t->refs == 2);
    dev_trace_free(t);
    dev_trace_free(t);
    dev_trace_free(c);
    dev_trace_free(NULL);
}

/* text must fail to parse at line:col with what in the message */
static void expect_trace_error(const char *text, dev_trace_kind kind, int line, int col,
                               const char *what)
{
    dev_trace *t = (dev_trace *)1;
    sim_err err = {0};
    int rc = dev_trace_parse(&t, text, "bad.trace", kind, &err);
    char buf[1024];
    sim_err_format(&err, buf, sizeof buf);
    CHECK_MSG(rc < 0 && t == NULL, "accepted: %s", text);
    CHECK_MSG(err.line == line && err.col == col && !strcmp(err.file, "bad.trace"),
              "want bad.trace:%d:%d, got %s", line, col, buf);
    CHECK_MSG(strstr(err.msg, what) != NULL, "want '%s' in '%s'", what, buf);
}

static void test_trace_errors(void)
{
    expect_trace_error("0 s 1\nsoon 0\n", DEV_TRACE_AVAIL, 2, 1, "bad time");
    expect_trace_error("0 s 1\n  30 0\n", DEV_TRACE_AVAIL, 2, 3, "no unit");
    expect_trace_error("0 s 1\n30 MB 0\n", DEV_TRACE_AVAIL, 2, 1, "not a time unit");
    expect_trace_error("0 s 1\n5 s 0\n3 s 1\n", DEV_TRACE_AVAIL, 3, 1, "strictly increasing");
    expect_trace_error("0 s 1\n0 s 0\n", DEV_TRACE_AVAIL, 2, 1, "strictly increasing");
    expect_trace_error("0 s 1\n5 s 2\n", DEV_TRACE_AVAIL, 2, 5, "must be 0 (offline) or 1");
    expect_trace_error("0 s 1\n5 s on\n", DEV_TRACE_AVAIL, 2, 5, "must be 0 (offline) or 1");
    expect_trace_error("0 s 1\n5 s  -0.5\n", DEV_TRACE_SPEED, 2, 6, "plain number >= 0");
    expect_trace_error("0 s inf\n", DEV_TRACE_SPEED, 1, 5, "plain number >= 0");
    expect_trace_error("0 s 1\n5s\n", DEV_TRACE_AVAIL, 2, 1, "found one token");
    expect_trace_error("# nothing\n\n", DEV_TRACE_AVAIL, 0, 0, "no points");
    expect_trace_error("loop 5 s\n0 s 1\n6 s 0\n", DEV_TRACE_AVAIL, 1, 6, "after the last point");
    expect_trace_error("loop 5 s\n0 s 1\nloop 6 s\n", DEV_TRACE_AVAIL, 3, 1, "second 'loop'");
    expect_trace_error("loop\n0 s 1\n", DEV_TRACE_AVAIL, 1, 1, "needs a period");
    expect_trace_error("loop 0 s\n0 s 1\n", DEV_TRACE_AVAIL, 1, 6, "> 0");
    expect_trace_error("0 s 1\r\n1 s x\r\n", DEV_TRACE_AVAIL, 2, 5, "must be 0"); /* CRLF */

    dev_trace *t;
    sim_err err = {0};
    /* the shipped example loads: on 7 + 0.5 + 2 = 9.5 h of 24 */
    CHECK(dev_trace_load(&t, "devices/traces/example-day.trace", DEV_TRACE_AVAIL, &err) == SIM_OK);
    if (t) {
        CHECK(t->period == 24 * H && t->n == 5);
        CHECK(dev_trace_value(t, 3 * H) == 1 && dev_trace_value(t, 9 * H) == 0);
        CHECK_EQ_I64(dev_trace_next_change(t, 23 * H), 24 * H + 7 * H);
        dev_trace_free(t);
    }
    CHECK(dev_trace_load(&t, "/nonexistent/day.trace", DEV_TRACE_AVAIL, &err) == SIM_EIO);
    CHECK(t == NULL && strstr(err.msg, "cannot open") &&
          !strcmp(err.file, "/nonexistent/day.trace"));
}

static void test_markov(void)
{
    dev_avail_spec s = {0};
    s.kind = DEV_AVAIL_MARKOV;
    s.mean_on_ns = 30 * MIN;
    s.mean_off_ns = 90 * MIN;

    /* determinism: the same stream gives the same change times, another client's differs */
    dev_avail_proc a, b, c;
    sim_rng ra, rb, rc;
    sim_rng_seed(&ra, 42, SIM_RNG_AVAIL, 5);
    sim_rng_seed(&rb, 42, SIM_RNG_AVAIL, 5);
    sim_rng_seed(&rc, 42, SIM_RNG_AVAIL, 6);
    dev_avail_init(&a, &s, &ra);
    dev_avail_init(&b, &s, &rb);
    dev_avail_init(&c, &s, &rc);
    int same = 1, differ = 0, toggles = 1, increasing = 1;
    sim_time ta = 0, tc = 0;
    for (int i = 0; i < 1000; i++) {
        int before = dev_avail_online(&a, ta);
        sim_time na = dev_avail_next_change(&a, ta);
        sim_time nb = dev_avail_next_change(&b, ta);
        same &= na == nb && before == dev_avail_online(&b, ta);
        increasing &= na > ta;
        /* asking in the middle of the state changes nothing */
        sim_time mid = ta + (na - ta) / 2;
        same &= dev_avail_online(&a, mid) == before && dev_avail_next_change(&a, mid) == na;
        toggles &= dev_avail_online(&a, na) != before; /* and at na the state has flipped */
        ta = na;
        sim_time nc = dev_avail_next_change(&c, tc);
        differ += nc != na;
        tc = nc;
    }
    CHECK(same && increasing && toggles);
    CHECK(differ > 990);

    /* Long-run on-fraction of one client over 100,000 on/off cycles (~23 simulated years).
     * For an alternating renewal process with exponential holding times the delta method gives
     * Var(fraction) ~ 2 on^2 off^2 / (n (on + off)^4) = 0.0703 / n for on = 30 min, off = 90 min,
     * so sd = 0.00084 at n = 1e5: 0.005 is ~6 sd. The mean on-time has sd 30 min / sqrt(n) =
     * 0.32%: 2% is ~6 sd. Seeds are fixed, so this cannot flake; the margins guard a rule change.
     */
    dev_avail_proc p;
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_AVAIL, 0);
    dev_avail_init(&p, &s, &r);
    sim_time t = 0, on_time = 0;
    long on_spells = 0;
    for (long n = 0; n < 200000; n++) {
        int on = dev_avail_online(&p, t);
        sim_time next = dev_avail_next_change(&p, t);
        if (on) on_time += next - t, on_spells++;
        t = next;
    }
    double frac = (double)on_time / (double)t;
    CHECK_NEAR(frac, 0.25, 0.005);
    CHECK_NEAR((double)on_time / (double)on_spells / (double)MIN, 30.0, 0.6);

    /* The state at t = 0 is stationary: over 20,000 clients online with probability 0.25
     * (binomial sd 0.0031; 0.015 is ~5 sd). */
    int online = 0;
    for (int i = 0; i < 20000; i++) {
        sim_rng_seed(&r, 9, SIM_RNG_AVAIL, (uint64_t)i);
        dev_avail_init(&p, &s, &r);
        online += dev_avail_online(&p, 0);
    }
    CHECK_NEAR(online / 20000.0, 0.25, 0.015);

    /* querying far ahead at once gives the same state as walking there */
    sim_rng_seed(&ra, 3, SIM_RNG_AVAIL, 0);
    sim_rng_seed(&rb, 3, SIM_RNG_AVAIL, 0);
    dev_avail_init(&a, &s, &ra);
    dev_avail_init(&b, &s, &rb);
    for (sim_time q = 0; q < 100 * H; q += 7 * MIN)
        (void)dev_avail_online(&a, q);
    CHECK(dev_avail_online(&a, 100 * H) == dev_avail_online(&b, 100 * H));
    CHECK(dev_avail_next_change(&a, 100 * H) == dev_avail_next_change(&b, 100 * H));
}

static void test_trace_proc(void)
{
    dev_avail_spec s = {0};
    s.kind = DEV_AVAIL_TRACE;
    s.trace = trace_of("loop 24 h\n0 s 1\n8 h 0\n20 h 1\n", DEV_TRACE_AVAIL);
    s.offset_ns = 2 * H; /* this client's day runs 2 h ahead */
    dev_avail_proc p;
    sim_rng r;
    sim_rng_seed(&r, 1, SIM_RNG_AVAIL, 0);
    dev_avail_init(&p, &s, &r);
    CHECK(dev_avail_online(&p, 0));
    CHECK_EQ_I64(dev_avail_next_change(&p, 0), 6 * H);
    CHECK(!dev_avail_online(&p, 6 * H));
    CHECK_EQ_I64(dev_avail_next_change(&p, 6 * H), 18 * H);
    CHECK(dev_avail_online(&p, 18 * H));
    CHECK_EQ_I64(dev_avail_next_change(&p, 18 * H), 30 * H);

    /* random offsets: deterministic per stream, spread over the period */
    s.offset_ns = 0;
    s.offset_random = 1;
    int online = 0, in_range = 1;
    for (int i = 0; i < 2000; i++) {
        sim_rng_seed(&r, 4, SIM_RNG_AVAIL, (uint64_t)i);
        dev_avail_init(&p, &s, &r);
        in_range &= p.offset_ns >= 0 && p.offset_ns < 24 * H;
        online += dev_avail_online(&p, 0);
    }
    CHECK(in_range);
    /* online 12 h of 24: half the clients, binomial sd 0.011 at n = 2000 */
    CHECK_NEAR(online / 2000.0, 0.5, 0.06);
    dev_avail_spec copy;
    dev_avail_spec_copy(&copy, &s);
    CHECK(copy.trace == s.trace && s.trace->refs == 2);
    dev_avail_spec_destroy(&copy);
    dev_avail_spec_destroy(&s);
    CHECK(s.kind == DEV_AVAIL_ALWAYS && s.trace == NULL);
}

static char dir[64];

static void write_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* Parse profile YAML written as dir/p.yaml (so relative trace paths resolve against dir). */
static int profile_file(dev_profile *out, const char *text, sim_err *err)
{
    char path[256];
    write_file("p.yaml", text);
    snprintf(path, sizeof path, "%s/p.yaml", dir);
    sim_yaml *root;
    int rc = sim_yaml_load_file(&root, path, err);
    if (rc) return rc;
    rc = dev_profile_from_yaml(out, root, NULL, err);
    sim_yaml_free(root);
    return rc;
}

#define FULL "compute: 8 GFLOPS\nup: 10 Mbps\ndown: 40 Mbps\nlatency: 40 ms\nmemory: 2 GiB\n"

static void test_yaml_traces(void)
{
    snprintf(dir, sizeof dir, "/tmp/fedsim-test-dev-XXXXXX");
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    write_file("day.trace", "0 s 1\n8 h 0\n20 h 1\n");
    write_file("load.trace", "loop 2 s\n0 s 1\n1 s 0.5\n");
    write_file("bad.trace", "0 s 1\n8 h 0\n7 h 1\n");

    dev_profile p;
    sim_err err = {0};
    char buf[1024];
    int rc = profile_file(&p,
                          FULL "availability: {kind: trace, file: day.trace, loop: 24 h, "
                               "offset: random}\n"
                               "speed: {file: load.trace}\n",
                          &err);
    sim_err_format(&err, buf, sizeof buf);
    CHECK_MSG(rc == SIM_OK, "%s", buf);
    if (rc == SIM_OK) {
        CHECK(p.avail.kind == DEV_AVAIL_TRACE && p.avail.trace->period == 24 * H);
        CHECK(p.avail.offset_random == 1 && p.speed && p.speed->period == 2 * SIM_SEC);
        /* 1.2e10 FLOPs at 8 GFLOPS with speed 1 then 0.5 each second: 8e9 + 4e9 = 2 s */
        CHECK_EQ_I64(dev_compute_ns(&p, &(dev_work){.flops = 1.2e10}, 0), 2000000000);
        dev_profile_describe(&p, buf, sizeof buf);
        CHECK_MSG(strstr(buf, "trace(day.trace, loop 1.00 d, random offset)") &&
                          strstr(buf, "speed load.trace"),
                  "describe: %s", buf);
        /* copies share the traces by reference */
        dev_profile q;
        dev_profile_copy(&q, &p);
        CHECK(q.speed == p.speed && p.speed->refs == 2 && p.avail.trace->refs == 2);
        dev_profile_destroy(&q);
        CHECK(p.speed->refs == 1);
        dev_profile_destroy(&p);
    }

    /* loop: false turns off the file's loop */
    rc = profile_file(&p, FULL "speed: {file: load.trace, loop: false}\n", &err);
    CHECK(rc == SIM_OK && p.speed && p.speed->period == 0);
    dev_profile_destroy(&p);

    /* errors inside a trace file name the trace file's position */
    rc = profile_file(&p, FULL "availability: {kind: trace, file: bad.trace}\n", &err);
    CHECK(rc < 0 && err.line == 3 && err.col == 1 && strstr(err.file, "bad.trace"));
    /* errors about the reference name the YAML position of the key that named the file */
    rc = profile_file(&p, FULL "availability: {kind: trace, file: missing.trace}\n", &err);
    CHECK(rc < 0 && err.line == 6 && err.col == 29 && strstr(err.file, "p.yaml") &&
          strstr(err.msg, "cannot open"));
    rc = profile_file(&p, FULL "availability: {kind: trace, file: day.trace, offset: random}\n",
                      &err);
    CHECK(rc < 0 && err.line == 6 && err.col == 54 && strstr(err.msg, "looping"));
    rc = profile_file(&p, FULL "availability: {kind: trace, file: day.trace, loop: 10 h}\n", &err);
    CHECK(rc < 0 && err.line == 6 && err.col == 52 && strstr(err.msg, "after the last point"));
    rc = profile_file(&p, FULL "availability: {kind: trace, file: day.trace, period: 1 d}\n", &err);
    CHECK(rc < 0 && err.line == 6 && err.col == 46 && strstr(err.msg, "unknown key 'period'"));
    rc = profile_file(&p, FULL "speed: {file: load.trace, loop: 1 s}\n", &err);
    CHECK(rc < 0 && err.line == 6 && err.col == 33);
    rc = profile_file(&p, FULL "speed: fast\n", &err);
    CHECK(rc < 0 && err.line == 6 && err.col == 8);
    CHECK(p.speed == NULL && p.compute_flops == 0);

    const char *names[] = {"day.trace", "load.trace", "bad.trace", "p.yaml"};
    for (size_t i = 0; i < SIM_ARRAY_LEN(names); i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(void)
{
    test_always();
    test_trace_values();
    test_trace_errors();
    test_markov();
    test_trace_proc();
    test_yaml_traces();
    return CHECK_DONE();
}
