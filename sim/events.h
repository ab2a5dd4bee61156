/* sim/events.h -- reading a run's events.msgpack back: the check and text listing behind
 * `fedsim events`, on a stream or on bytes in memory (what a fuzz harness calls).
 *
 * The file (the engine writes it, engine.h) is a self-description map {"fields": the six field
 * names, "kinds": the event kinds' names} followed by one array [time_ns, kind, client, round,
 * bytes, flops] per event; a run with energy (devices.energy) names eight fields, each record
 * ending with energy_j (what the phase that ended drew) and reason (a lost job's: "battery" or
 * "offline"; "" otherwise), and its listing has those two columns more. Nothing read is trusted:
 * each object is walked by nn_msgpack_check before msgpack-c unpacks it, and must be what the
 * engine writes. A file that is not a complete event log is an error naming the byte offset: one
 * that does not open with the header, holds anything but records after it, or ends inside one
 * (truncated: the records before it are listed first). The listing is "time_s kind client round
 * bytes flops", tab-separated, one line each.
 */
#ifndef SIM_EVENTS_H
#define SIM_EVENTS_H

#include "sim/base.h"

#include <stdio.h>

/* The largest object an event log holds (its header is a few hundred bytes, a record about 40):
 * a stream is never buffered beyond it. */
enum { SIM_EVENTS_MAX_OBJECT = 1 << 16 };

/* List the event log read from in (named `what` in errors) to out, or only check it when out is
 * NULL. SIM_EFORMAT naming what and the byte offset when it is not a complete event log, SIM_EIO
 * when in cannot be read or out written. */
int sim_events_list(FILE *in, const char *what, FILE *out, sim_err *err);
/* The same on the len bytes at buf. */
int sim_events_list_buf(const void *buf, size_t len, const char *what, FILE *out, sim_err *err);

#endif /* SIM_EVENTS_H */
