/* tests/fuzz/fuzz_units.c -- fuzzes the unit parsers (sim/units.c): the input is one value as a
 * scenario, catalog or trace writes it ("20 Mbps", "1.5 h"), read as each of the four kinds.
 *
 * Beyond not crashing, a value that parses must survive the trip through its readable form: what
 * sim_format_* prints (three significant digits) parses again, as the same kind, to within 1%.
 * Checked from 1 to 1e18 base units, where the printed form is short and keeps its digits.
 */
#include "sim/units.h"
#include "tests/fuzz/fuzz.h"

#include <math.h>

typedef int (*parse_fn)(const char *, double *, sim_err *);
typedef void (*format_fn)(char *, size_t, double);

static int parse_time_d(const char *s, double *out, sim_err *err)
{
    sim_time t;
    int rc = sim_parse_time(s, &t, err);
    if (!rc) *out = (double)t;
    return rc;
}

static void format_time_d(char *buf, size_t n, double v)
{
    sim_format_time(buf, n, (sim_time)v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const parse_fn parse[4] = {parse_time_d, sim_parse_bytes, sim_parse_rate,
                                      sim_parse_flops};
    static const format_fn format[4] = {format_time_d, sim_format_bytes, sim_format_rate,
                                        sim_format_flops};
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    for (int k = 0; k < 4; k++) {
        double v = -1, back = -1;
        sim_err err = {0};
        if (parse[k](s, &v, &err)) {
            fuzz_require(err.msg[0] && v == -1); /* an error says why and leaves *out alone */
            continue;
        }
        fuzz_require(v >= 0 && isfinite(v));
        char buf[64];
        format[k](buf, sizeof buf, v);
        if (v < 1 || v > 1e18) continue;
        fuzz_require(parse[k](buf, &back, &err) == SIM_OK);
        fuzz_require(fabs(back - v) <= 0.01 * v);
    }
    free(s);
    return 0;
}
