/* sim/units.c -- strict parsing and human-readable formatting of quantities with units.
 *
 * A value is a plain decimal number (no sign other than a harmless "+" or "-0", no hex, no inf or
 * nan), optional spaces or tabs, then exactly one of the spellings in the kind's table below.
 * Spellings are case-sensitive because case carries meaning across kinds ("MB" is bytes, "Mb"
 * would be bits), so only documented spellings are accepted and everything else is an error that
 * lists the accepted units. Each parser leaves *out untouched on error.
 */
#include "sim/units.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct unit {
    const char *name;
    double scale; /* value of one unit in the kind's base (ns, B, bit/s, FLOP/s) */
} unit;

typedef struct unit_kind {
    const char *noun; /* "'MB' is not a <noun> unit" */
    const char *hint; /* the spellings we suggest; aliases are accepted but not advertised */
    const unit *units;
    size_t n;
} unit_kind;

/* The micro prefix comes as U+00B5 MICRO SIGN (what keyboards type) or U+03BC GREEK SMALL LETTER MU
 * (what some editors substitute); both are accepted, written as UTF-8 escapes so this file stays
 * ASCII. */
static const unit time_units[] = {
        {"ns", 1.0}, {"us", 1e3},   {"\xc2\xb5s", 1e3}, {"\xce\xbcs", 1e3}, {"ms", 1e6},
        {"s", 1e9},  {"min", 60e9}, {"h", 3600e9},      {"d", 86400e9},
};

/* "KB" is taken as 1000 like the other SI spellings: JEDEC's 1024 would make "KB" and "kB"
 * differ by 2.4%, and anyone who means 1024 can write KiB. */
static const unit byte_units[] = {
        {"B", 1.0},
        {"kB", 1e3},
        {"KB", 1e3},
        {"MB", 1e6},
        {"GB", 1e9},
        {"TB", 1e12},
        {"KiB", 1024.0},
        {"MiB", 1024.0 * 1024.0},
        {"GiB", 1024.0 * 1024.0 * 1024.0},
        {"TiB", 1024.0 * 1024.0 * 1024.0 * 1024.0},
};

static const unit rate_units[] = {
        {"bps", 1.0},   {"kbps", 1e3},   {"Mbps", 1e6},   {"Gbps", 1e9},   {"Tbps", 1e12},
        {"bit/s", 1.0}, {"kbit/s", 1e3}, {"Mbit/s", 1e6}, {"Gbit/s", 1e9}, {"Tbit/s", 1e12},
        {"B/s", 8.0},   {"kB/s", 8e3},   {"MB/s", 8e6},   {"GB/s", 8e9},   {"TB/s", 8e12},
};

static const unit flops_units[] = {
        {"FLOPS", 1.0},   {"kFLOPS", 1e3},  {"MFLOPS", 1e6},   {"GFLOPS", 1e9},
        {"TFLOPS", 1e12}, {"PFLOPS", 1e15}, {"FLOP/s", 1.0},   {"kFLOP/s", 1e3},
        {"MFLOP/s", 1e6}, {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15},
};

/* power and energy (devices/energy.h): a battery's capacity is usually quoted in Wh */
static const unit power_units[] = {{"W", 1.0}, {"mW", 1e-3}, {"kW", 1e3}};
static const unit energy_units[] = {
        {"J", 1.0}, {"kJ", 1e3}, {"Wh", 3600.0}, {"mWh", 3.6}, {"kWh", 3.6e6},
};

static const unit_kind time_kind = {"time", "ns, us, ms, s, min, h, d", time_units,
                                    SIM_ARRAY_LEN(time_units)};
static const unit_kind byte_kind = {"size", "B, kB, MB, GB, TB, KiB, MiB, GiB, TiB", byte_units,
                                    SIM_ARRAY_LEN(byte_units)};
static const unit_kind rate_kind = {"rate",
                                    "bps, kbps, Mbps, Gbps, Tbps, B/s, kB/s, MB/s, GB/s, TB/s",
                                    rate_units, SIM_ARRAY_LEN(rate_units)};
static const unit_kind flops_kind = {"FLOPS", "FLOPS, kFLOPS, MFLOPS, GFLOPS, TFLOPS, PFLOPS",
                                     flops_units, SIM_ARRAY_LEN(flops_units)};

static const unit_kind power_kind = {"power", "W, mW, kW", power_units, SIM_ARRAY_LEN(power_units)};
static const unit_kind energy_kind = {"energy", "J, kJ, Wh, mWh, kWh", energy_units,
                                      SIM_ARRAY_LEN(energy_units)};

static const unit_kind *const all_kinds[] = {&time_kind,  &byte_kind,  &rate_kind,
                                             &flops_kind, &power_kind, &energy_kind};

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static const unit *find_unit(const unit_kind *k, const char *name, size_t len)
{
    for (size_t i = 0; i < k->n; i++)
        if (strlen(k->units[i].name) == len && memcmp(k->units[i].name, name, len) == 0)
            return &k->units[i];
    return NULL;
}

/* Length of the decimal number at the start of s ([+-]digits[.digits][e[+-]digits], at least one
 * digit), or 0. Scanning it ourselves keeps strtod from accepting "inf", "nan" or "0x1p3", and
 * stops "2e" from eating the start of a unit. */
static size_t number_len(const char *s)
{
    size_t i = 0, digits = 0;
    if (s[i] == '+' || s[i] == '-') i++;
    while (is_digit(s[i]))
        i++, digits++;
    if (s[i] == '.') {
        i++;
        while (is_digit(s[i]))
            i++, digits++;
    }
    if (!digits) return 0;
    if (s[i] == 'e' || s[i] == 'E') {
        size_t j = i + 1;
        if (s[j] == '+' || s[j] == '-') j++;
        if (is_digit(s[j])) {
            while (is_digit(s[j]))
                j++;
            i = j;
        }
    }
    return i;
}

/* Parse "<number> <unit>" for kind k into base units (number times the unit's scale). */
static int parse_quantity(const char *s, const unit_kind *k, double *out, sim_err *err)
{
    if (!s) s = "";
    const char *p = s;
    while (is_blank(*p))
        p++;
    if (!*p) return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "empty %s (use %s)", k->noun, k->hint);

    size_t nlen = number_len(p);
    if (!nlen)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "'%s' is not a number with a %s unit (use %s)",
                        s, k->noun, k->hint);
    char num[64];
    if (nlen >= sizeof num)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "'%s': number too long", s);
    memcpy(num, p, nlen);
    num[nlen] = '\0';
    errno = 0;
    double v = strtod(num, NULL);
    if (errno == ERANGE && fabs(v) > 1.0)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "'%s' is out of range", s);
    if (v < 0.0) return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "'%s' is negative", s);
    v = fabs(v); /* "-0" is zero, not negative zero */

    p += nlen;
    while (is_blank(*p))
        p++;
    const char *u = p;
    while (*p && !is_blank(*p))
        p++;
    size_t ulen = (size_t)(p - u);
    while (is_blank(*p))
        p++;
    if (!ulen) {
        /* print the number as written, without surrounding blanks */
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "'%s' has no unit (use %s)", num, k->hint);
    }
    const unit *un = find_unit(k, u, ulen);
    if (!un) {
        for (size_t i = 0; i < SIM_ARRAY_LEN(all_kinds); i++)
            if (all_kinds[i] != k && find_unit(all_kinds[i], u, ulen))
                return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "'%.*s' is not %s %s unit (use %s)",
                                (int)ulen, u, strchr("aeiou", k->noun[0]) ? "an" : "a", k->noun,
                                k->hint);
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "unknown %s unit '%.*s' (use %s)", k->noun,
                        (int)ulen, u, k->hint);
    }
    if (*p)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "unexpected '%s' after the unit in '%s'", p,
                        s);
    double x = v * un->scale;
    if (!isfinite(x)) return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "'%s' is out of range", s);
    *out = x;
    return SIM_OK;
}

sim_time sim_time_from_s(double s)
{
    double ns = s * 1e9;
    /* 2^63 is exactly representable; anything strictly below it rounds into int64 range */
    assert(isfinite(ns) && ns < 9223372036854775808.0 && ns >= -9223372036854775808.0 &&
           "duration does not fit in int64 nanoseconds");
    return (sim_time)llround(ns);
}

double sim_time_to_s(sim_time t)
{
    return (double)t / 1e9;
}

int sim_parse_power(const char *s, double *out, sim_err *err)
{
    return parse_quantity(s, &power_kind, out, err);
}

int sim_parse_energy(const char *s, double *out, sim_err *err)
{
    return parse_quantity(s, &energy_kind, out, err);
}

int sim_parse_time(const char *s, sim_time *out, sim_err *err)
{
    double ns;
    int rc = parse_quantity(s, &time_kind, &ns, err);
    if (rc) return rc;
    if (ns >= 9223372036854775808.0)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "'%s' is too long a time (max ~292 years)", s);
    *out = (sim_time)llround(ns);
    return SIM_OK;
}

int sim_parse_bytes(const char *s, double *out, sim_err *err)
{
    return parse_quantity(s, &byte_kind, out, err);
}

int sim_parse_rate(const char *s, double *out, sim_err *err)
{
    return parse_quantity(s, &rate_kind, out, err);
}

int sim_parse_flops(const char *s, double *out, sim_err *err)
{
    return parse_quantity(s, &flops_kind, out, err);
}

/* Print v with three significant digits in the largest unit it reaches ("1.50 GiB", "20.0 Mbps",
 * "512 B"). Units are in increasing order; when rounding would print a value that reaches the next
 * unit ("1000 Mbps", "60.0 s") the next unit is used instead. */
static void format_scaled(char *buf, size_t n, double v, const unit *units, size_t nu)
{
    if (!isfinite(v)) {
        snprintf(buf, n, "%g %s", v, units[0].name);
        return;
    }
    if (v == 0.0) {
        snprintf(buf, n, "0 %s", units[0].name);
        return;
    }
    const char *sign = v < 0 ? "-" : "";
    double a = fabs(v);
    size_t i = 0;
    while (i + 1 < nu && a >= units[i + 1].scale)
        i++;
    for (;;) {
        double x = a / units[i].scale;
        int dec = x >= 100.0 ? 0 : x >= 10.0 ? 1 : 2;
        double shown = round(x * pow(10.0, dec)) / pow(10.0, dec);
        if (i + 1 < nu && shown * units[i].scale >= units[i + 1].scale) {
            i++;
            continue;
        }
        snprintf(buf, n, "%s%.*f %s", sign, dec, x, units[i].name);
        return;
    }
}

static const unit byte_fmt[] = {
        {"B", 1.0},
        {"KiB", 1024.0},
        {"MiB", 1024.0 * 1024.0},
        {"GiB", 1024.0 * 1024.0 * 1024.0},
        {"TiB", 1024.0 * 1024.0 * 1024.0 * 1024.0},
};
static const unit time_fmt[] = {
        {"ns", 1.0},   {"us", 1e3},   {"ms", 1e6},    {"s", 1e9},
        {"min", 60e9}, {"h", 3600e9}, {"d", 86400e9},
};

void sim_format_bytes(char *buf, size_t n, double bytes)
{
    /* whole bytes below 1 KiB print exactly: "12 B", not "12.0 B" */
    if (isfinite(bytes) && fabs(bytes) < 1024.0 && bytes == floor(bytes))
        snprintf(buf, n, "%.0f B", bytes);
    else
        format_scaled(buf, n, bytes, byte_fmt, SIM_ARRAY_LEN(byte_fmt));
}

void sim_format_rate(char *buf, size_t n, double bps)
{
    format_scaled(buf, n, bps, rate_units, 5); /* bps .. Tbps, the advertised spellings */
}

void sim_format_flops(char *buf, size_t n, double flops)
{
    format_scaled(buf, n, flops, flops_units, 6); /* FLOPS .. PFLOPS */
}

void sim_format_time(char *buf, size_t n, sim_time t)
{
    if (t > -1000 && t < 1000)
        snprintf(buf, n, "%lld ns", (long long)t); /* exact below a microsecond */
    else
        format_scaled(buf, n, (double)t, time_fmt, SIM_ARRAY_LEN(time_fmt));
}
