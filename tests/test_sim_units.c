/* tests/test_sim_units.c -- every accepted unit spelling gives its exact value, and everything a
 * user could get wrong (no unit, a unit of another kind, a typo, a sign, nan, trailing text) is an
 * error whose message names the accepted units; the formatters pick a readable scale. */
#include "sim/units.h"
#include "tests/check.h"

#include <string.h>

/* parse s as a time and compare with want (exact); returns nothing, counts a check */
#define CHECK_TIME(s, want)                                                                        \
    do {                                                                                           \
        sim_time t_ = -1;                                                                          \
        sim_err e_ = {0};                                                                          \
        int rc_ = sim_parse_time((s), &t_, &e_);                                                   \
        CHECK_MSG(rc_ == SIM_OK && t_ == (sim_time)(want),                                         \
                  "time '%s': rc %d, %lld, want %lld: %s", (s), rc_, (long long)t_,                \
                  (long long)(want), e_.msg);                                                      \
    } while (0)

/* parse s with fn and require the exact double want */
#define CHECK_DBL(fn, s, want)                                                                     \
    do {                                                                                           \
        double v_ = -1;                                                                            \
        sim_err e_ = {0};                                                                          \
        int rc_ = fn((s), &v_, &e_);                                                               \
        CHECK_MSG(rc_ == SIM_OK && v_ == (double)(want), "%s('%s'): rc %d, %.17g, want %.17g: %s", \
                  #fn, (s), rc_, v_, (double)(want), e_.msg);                                      \
    } while (0)

/* parse s with fn, require SIM_EINVAL, an untouched output and a message containing frag */
#define CHECK_BAD(fn, s, frag)                                                                     \
    do {                                                                                           \
        double v_ = 123.0;                                                                         \
        sim_err e_ = {0};                                                                          \
        int rc_ = fn((s), &v_, &e_);                                                               \
        CHECK_MSG(rc_ == SIM_EINVAL && v_ == 123.0 && strstr(e_.msg, (frag)),                      \
                  "%s('%s'): rc %d, msg \"%s\", want \"%s\"", #fn, (s), rc_, e_.msg, (frag));      \
    } while (0)

static int parse_time_d(const char *s, double *out, sim_err *err)
{
    sim_time t = 123; /* same sentinel as CHECK_BAD, so "untouched" can be checked */
    int rc = sim_parse_time(s, &t, err);
    *out = (double)t;
    return rc;
}

static void test_time(void)
{
    CHECK_TIME("10 ns", 10);
    CHECK_TIME("250 us", 250000);
    CHECK_TIME("250 \xc2\xb5s", 250000);
    CHECK_TIME("250 \xce\xbcs", 250000);
    CHECK_TIME("40 ms", 40000000);
    CHECK_TIME("1.5 s", 1500000000);
    CHECK_TIME("30 min", 1800000000000LL);
    CHECK_TIME("2 h", 7200000000000LL);
    CHECK_TIME("1 d", 86400000000000LL);
    CHECK_TIME("0.1 s", 100000000);  /* 0.1 * 1e9 is not exact in binary: rounded, not truncated */
    CHECK_TIME("0.0000000016 s", 2); /* 1.6 ns rounds to nearest */
    CHECK_TIME("0 s", 0);
    CHECK_TIME("-0 s", 0);
    CHECK_TIME("+3 ms", 3000000);
    CHECK_TIME("1e3 ms", SIM_SEC);
    CHECK_TIME(".5 s", SIM_SEC / 2);
    CHECK_TIME("5. s", 5 * SIM_SEC);
    /* spacing */
    CHECK_TIME("40ms", 40000000);
    CHECK_TIME("40  ms", 40000000);
    CHECK_TIME("40\tms", 40000000);
    CHECK_TIME("  40 ms  ", 40000000);
    CHECK_TIME("100000 d", 8640000000000000000LL);

    CHECK_BAD(parse_time_d, "40", "'40' has no unit (use ns, us, ms, s, min, h, d)");
    CHECK_BAD(parse_time_d, "40 MB", "'MB' is not a time unit (use ns,");
    CHECK_BAD(parse_time_d, "40 sec", "unknown time unit 'sec'");
    CHECK_BAD(parse_time_d, "40 S", "unknown time unit 'S'"); /* case matters */
    CHECK_BAD(parse_time_d, "-1 s", "'-1 s' is negative");
    CHECK_BAD(parse_time_d, "200000 d", "too long");
    CHECK_BAD(parse_time_d, "", "empty time");
}

static void test_bytes(void)
{
    CHECK_DBL(sim_parse_bytes, "12 B", 12);
    CHECK_DBL(sim_parse_bytes, "100 kB", 1e5);
    CHECK_DBL(sim_parse_bytes, "100 KB", 1e5);
    CHECK_DBL(sim_parse_bytes, "512 MB", 512e6);
    CHECK_DBL(sim_parse_bytes, "3 GB", 3e9);
    CHECK_DBL(sim_parse_bytes, "2 TB", 2e12);
    CHECK_DBL(sim_parse_bytes, "1 KiB", 1024);
    CHECK_DBL(sim_parse_bytes, "1.5 MiB", 1572864);
    CHECK_DBL(sim_parse_bytes, "2 GiB", 2147483648.0);
    CHECK_DBL(sim_parse_bytes, "1 TiB", 1099511627776.0);
    CHECK_DBL(sim_parse_bytes, "2GiB", 2147483648.0);
    CHECK_DBL(sim_parse_bytes, "2   GiB", 2147483648.0);

    CHECK_BAD(sim_parse_bytes, "512", "'512' has no unit (use B, kB, MB, GB, TB, KiB,");
    CHECK_BAD(sim_parse_bytes, "512 Mbps", "'Mbps' is not a size unit");
    CHECK_BAD(sim_parse_bytes, "512 mb", "unknown size unit 'mb'");
    CHECK_BAD(sim_parse_bytes, "512 Mb", "unknown size unit 'Mb'");
    CHECK_BAD(sim_parse_bytes, "512 kiB", "unknown size unit 'kiB'");
    CHECK_BAD(sim_parse_bytes, "-1 kB", "negative");
    CHECK_BAD(sim_parse_bytes, "1e999 B", "out of range");
    CHECK_BAD(sim_parse_bytes, "1e300 TiB", "out of range");
}

static void test_rate(void)
{
    CHECK_DBL(sim_parse_rate, "100 bps", 100);
    CHECK_DBL(sim_parse_rate, "800 kbps", 8e5);
    CHECK_DBL(sim_parse_rate, "20 Mbps", 2e7);
    CHECK_DBL(sim_parse_rate, "1.5 Gbps", 1.5e9);
    CHECK_DBL(sim_parse_rate, "2 Tbps", 2e12);
    CHECK_DBL(sim_parse_rate, "100 bit/s", 100);
    CHECK_DBL(sim_parse_rate, "800 kbit/s", 8e5);
    CHECK_DBL(sim_parse_rate, "20 Mbit/s", 2e7);
    CHECK_DBL(sim_parse_rate, "1.5 Gbit/s", 1.5e9);
    CHECK_DBL(sim_parse_rate, "2 Tbit/s", 2e12);
    CHECK_DBL(sim_parse_rate, "10 GB/s", 8e10); /* bytes a second, as memory bandwidth is given */
    CHECK_DBL(sim_parse_rate, "1 kB/s", 8e3);
    CHECK_DBL(sim_parse_rate, "3 B/s", 24);
    CHECK_DBL(sim_parse_rate, "20Mbps", 2e7);
    CHECK_DBL(sim_parse_rate, "20  Mbps", 2e7);

    CHECK_BAD(sim_parse_rate, "20",
              "'20' has no unit (use bps, kbps, Mbps, Gbps, Tbps, B/s, kB/s, MB/s, GB/s, TB/s)");
    CHECK_BAD(sim_parse_rate, "20 MB",
              "'MB' is not a rate unit (use bps, kbps, Mbps, Gbps, Tbps, B/s, kB/s, MB/s, GB/s, "
              "TB/s)");
    CHECK_BAD(sim_parse_rate, "20 GFLOPS", "'GFLOPS' is not a rate unit");
    CHECK_BAD(sim_parse_rate, "20 mbps", "unknown rate unit 'mbps'");
    CHECK_BAD(sim_parse_rate, "20 MBps", "unknown rate unit 'MBps'");
    CHECK_BAD(sim_parse_rate, "20 Mbps extra",
              "unexpected 'extra' after the unit in '20 Mbps extra'");
    CHECK_BAD(sim_parse_rate, "20 Mbps,", "unknown rate unit 'Mbps,'");
    CHECK_BAD(sim_parse_rate, "nan Mbps", "'nan Mbps' is not a number with a rate unit");
    CHECK_BAD(sim_parse_rate, "NaN Mbps", "is not a number");
    CHECK_BAD(sim_parse_rate, "inf Mbps", "is not a number");
    CHECK_BAD(sim_parse_rate, "0x10 Mbps", "unknown rate unit 'x10'");
    CHECK_BAD(sim_parse_rate, "Mbps", "is not a number");
    CHECK_BAD(sim_parse_rate, "-20 Mbps", "negative");
    CHECK_BAD(sim_parse_rate, "", "empty rate");
    CHECK_BAD(sim_parse_rate, "   ", "empty rate");
    {
        double v = 5;
        sim_err e = {0};
        CHECK(sim_parse_rate(NULL, &v, &e) == SIM_EINVAL && v == 5 && strstr(e.msg, "empty rate"));
    }
    CHECK_BAD(sim_parse_rate, "1.2.3 Mbps", "unknown rate unit '.3'");
    CHECK_BAD(sim_parse_rate, "2e Mbps", "unknown rate unit 'e'");
}

static void test_flops(void)
{
    CHECK_DBL(sim_parse_flops, "7 FLOPS", 7);
    CHECK_DBL(sim_parse_flops, "3 kFLOPS", 3e3);
    CHECK_DBL(sim_parse_flops, "500 MFLOPS", 5e8);
    CHECK_DBL(sim_parse_flops, "8 GFLOPS", 8e9);
    CHECK_DBL(sim_parse_flops, "1.2 TFLOPS", 1.2e12);
    CHECK_DBL(sim_parse_flops, "2 PFLOPS", 2e15);
    CHECK_DBL(sim_parse_flops, "7 FLOP/s", 7);
    CHECK_DBL(sim_parse_flops, "3 kFLOP/s", 3e3);
    CHECK_DBL(sim_parse_flops, "500 MFLOP/s", 5e8);
    CHECK_DBL(sim_parse_flops, "8 GFLOP/s", 8e9);
    CHECK_DBL(sim_parse_flops, "1.2 TFLOP/s", 1.2e12);
    CHECK_DBL(sim_parse_flops, "2 PFLOP/s", 2e15);
    CHECK_DBL(sim_parse_flops, "8GFLOPS", 8e9);

    CHECK_BAD(sim_parse_flops, "8", "'8' has no unit (use FLOPS, kFLOPS, MFLOPS, GFLOPS,");
    CHECK_BAD(sim_parse_flops, "8 Gbps", "'Gbps' is not a FLOPS unit");
    CHECK_BAD(sim_parse_flops, "8 Gflops", "unknown FLOPS unit 'Gflops'");
    CHECK_BAD(sim_parse_flops, "8 GFLOPS x", "unexpected 'x'");
}

static void test_seconds(void)
{
    CHECK_EQ_I64(sim_time_from_s(1.5), 1500000000);
    CHECK_EQ_I64(sim_time_from_s(0.1), 100000000);
    CHECK_EQ_I64(sim_time_from_s(2.4e-9), 2);
    CHECK_EQ_I64(sim_time_from_s(2.6e-9), 3);
    CHECK_EQ_I64(sim_time_from_s(-1.0), -SIM_SEC);
    CHECK_EQ_I64(sim_time_from_s(9.2e9), 9200000000000000000LL);
    CHECK_NEAR(sim_time_to_s(1500000000), 1.5, 0);
    CHECK_NEAR(sim_time_to_s(SIM_MS), 1e-3, 1e-18);
}

/* format with fn and compare the whole string */
#define CHECK_FMT(fn, v, want)                                                                     \
    do {                                                                                           \
        char b_[64];                                                                               \
        fn(b_, sizeof b_, (v));                                                                    \
        CHECK_MSG(strcmp(b_, (want)) == 0, "%s(%s) = \"%s\", want \"%s\"", #fn, #v, b_, (want));   \
    } while (0)

static void test_format(void)
{
    CHECK_FMT(sim_format_bytes, 0, "0 B");
    CHECK_FMT(sim_format_bytes, 12, "12 B");
    CHECK_FMT(sim_format_bytes, 1023, "1023 B");
    CHECK_FMT(sim_format_bytes, 1024, "1.00 KiB");
    CHECK_FMT(sim_format_bytes, 1536.0 * 1024 * 1024, "1.50 GiB");
    CHECK_FMT(sim_format_bytes, 1722000, "1.64 MiB");
    CHECK_FMT(sim_format_bytes, 1048575, "1.00 MiB"); /* 1023.999 KiB would print as "1024" */
    CHECK_FMT(sim_format_rate, 2e7, "20.0 Mbps");
    CHECK_FMT(sim_format_rate, 999.9e6, "1.00 Gbps");
    CHECK_FMT(sim_format_rate, 800e3, "800 kbps");
    CHECK_FMT(sim_format_rate, 100, "100 bps");
    CHECK_FMT(sim_format_rate, 0, "0 bps");
    CHECK_FMT(sim_format_flops, 8e9, "8.00 GFLOPS");
    CHECK_FMT(sim_format_flops, 1.2e15, "1.20 PFLOPS");
    CHECK_FMT(sim_format_flops, 3e18, "3000 PFLOPS");
    CHECK_FMT(sim_format_time, 1250 * SIM_MS, "1.25 s");
    CHECK_FMT(sim_format_time, 0, "0 ns");
    CHECK_FMT(sim_format_time, 999, "999 ns");
    CHECK_FMT(sim_format_time, 1500, "1.50 us");
    CHECK_FMT(sim_format_time, 40 * SIM_MS, "40.0 ms");
    CHECK_FMT(sim_format_time, 30 * 60 * SIM_SEC, "30.0 min");
    CHECK_FMT(sim_format_time, 59999 * SIM_MS, "1.00 min"); /* not "60.0 s" */
    CHECK_FMT(sim_format_time, 36 * 3600 * SIM_SEC, "1.50 d");
    CHECK_FMT(sim_format_time, -40 * SIM_MS, "-40.0 ms");

    /* formatting, then parsing back, stays within the three shown digits */
    double vals[] = {1, 12.5, 999, 1e3, 4.2e6, 9.99e8, 1.2345e12};
    for (size_t i = 0; i < SIM_ARRAY_LEN(vals); i++) {
        char b[64];
        double back = -1;
        sim_format_rate(b, sizeof b, vals[i]);
        CHECK_MSG(sim_parse_rate(b, &back, NULL) == SIM_OK &&
                          fabs(back - vals[i]) <= vals[i] * 5e-3,
                  "rate %g -> \"%s\" -> %g", vals[i], b, back);
        sim_format_flops(b, sizeof b, vals[i]);
        CHECK_MSG(sim_parse_flops(b, &back, NULL) == SIM_OK &&
                          fabs(back - vals[i]) <= vals[i] * 5e-3,
                  "flops %g -> \"%s\" -> %g", vals[i], b, back);
        sim_format_bytes(b, sizeof b, vals[i]);
        CHECK_MSG(sim_parse_bytes(b, &back, NULL) == SIM_OK &&
                          fabs(back - vals[i]) <= vals[i] * 5e-3,
                  "bytes %g -> \"%s\" -> %g", vals[i], b, back);
        sim_time t = (sim_time)(vals[i] * 1e3), tb = -1;
        sim_format_time(b, sizeof b, t);
        CHECK_MSG(sim_parse_time(b, &tb, NULL) == SIM_OK &&
                          fabs((double)(tb - t)) <= (double)t * 5e-3,
                  "time %lld -> \"%s\" -> %lld", (long long)t, b, (long long)tb);
    }
}

int main(void)
{
    test_time();
    test_bytes();
    test_rate();
    test_flops();
    test_seconds();
    test_format();
    return CHECK_DONE();
}
