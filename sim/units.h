/* sim/units.h -- quantities with explicit units, as scenario and device files write them.
 *
 * Every value in a file carries its unit ("8 GFLOPS", "20 Mbps", "40 ms", "2 GiB", "30 min"); a
 * bare number or a unit of the wrong kind is an error, because a silently misread unit runs the
 * wrong experiment. Parsers return SIM_OK or SIM_EINVAL with a message naming the accepted units
 * (the caller adds file:line:col). Simulated time is int64 nanoseconds (sim_time); durations
 * computed in seconds are converted once, rounding to the nearest nanosecond. A leaf header: any
 * layer may include it.
 */
#ifndef SIM_UNITS_H
#define SIM_UNITS_H

#include "sim/base.h"

#include <stdint.h>

typedef int64_t sim_time; /* nanoseconds since the start of the simulation */

#define SIM_NS  ((sim_time)1)
#define SIM_US  ((sim_time)1000)
#define SIM_MS  ((sim_time)1000000)
#define SIM_SEC ((sim_time)1000000000)

/* seconds → ns, rounded to nearest; asserts the result fits */
sim_time sim_time_from_s(double s);
double sim_time_to_s(sim_time t);

/* All parsers: a decimal number >= 0 (no nan, inf or hex), optional blanks, then one of the
 * spellings listed, case-sensitive; blanks around the whole are ignored. *out is untouched on
 * error. */
/* "40 ms", "1.5 s", "30 min", "2 h", "1 d", "250 us" (or µs), "10 ns" → ns, rounded to nearest */
int sim_parse_time(const char *s, sim_time *out, sim_err *err);
/* "2 GiB", "512 MB", "100 kB", "12 B" → bytes; SI (kB, MB, GB, TB; "KB" is taken as kB = 1000)
 * and IEC (KiB, MiB, GiB, TiB) */
int sim_parse_bytes(const char *s, double *out, sim_err *err);
/* "20 Mbps", "1.5 Gbps", "800 kbps", "100 bps", "2 Tbps" → bit/s (also "Mbit/s" forms, and
 * bytes a second: "10 GB/s" is 80 Gbps) */
int sim_parse_rate(const char *s, double *out, sim_err *err);
/* "8 GFLOPS", "1.2 TFLOPS", "500 MFLOPS" (k..P prefixes) → FLOP/s (also "GFLOP/s" forms) */
int sim_parse_flops(const char *s, double *out, sim_err *err);
/* "2 W", "500 mW" → watts */
int sim_parse_power(const char *s, double *out, sim_err *err);
/* "15 Wh", "800 mWh", "54 kJ", "10 J" → joules */
int sim_parse_energy(const char *s, double *out, sim_err *err);

/* Readable forms for messages and tables: "1.50 GiB", "20.0 Mbps", "8.00 GFLOPS", "1.25 s" (three
 * significant digits in the largest unit reached; bytes in IEC units). */
void sim_format_bytes(char *buf, size_t n, double bytes);
void sim_format_rate(char *buf, size_t n, double bps);
void sim_format_flops(char *buf, size_t n, double flops);
void sim_format_time(char *buf, size_t n, sim_time t);

#endif /* SIM_UNITS_H */
