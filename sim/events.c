/* sim/events.c -- check and list an events.msgpack (see events.h). */
#include "sim/events.h"

#include "nn/pack.h"
#include "sim/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* a run with energy (devices.energy) adds the last two */
static const char *const fields[] = {"time_ns", "kind",  "client",   "round",
                                     "bytes",   "flops", "energy_j", "reason"};

typedef struct ev_reader {
    const char *what;
    FILE *out;    /* NULL: check only */
    int header;   /* the header map has been read */
    int n_kinds;  /* kinds the header names (a prefix of sim_event_names) */
    int n_fields; /* 6, or 8 with energy */
    size_t base;  /* stream offset of the bytes being decoded */
} ev_reader;

static int str_is(const msgpack_object *o, const char *s)
{
    return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
           !memcmp(o->via.str.ptr, s, o->via.str.size);
}

static int is_float(const msgpack_object *o)
{
    return o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32;
}

/* The header: the field names as the engine writes them, and kinds whose names are those this
 * fedsim gives them (an older log may know fewer). */
static int take_header(ev_reader *r, const msgpack_object *o, size_t at, sim_err *err)
{
    const msgpack_object *f = nn_map_get(o, "fields"), *k = nn_map_get(o, "kinds");
    int ok = f && k && f->type == MSGPACK_OBJECT_ARRAY &&
             (f->via.array.size == 6 || f->via.array.size == 8) &&
             k->type == MSGPACK_OBJECT_ARRAY && k->via.array.size >= 1 &&
             k->via.array.size <= SIM_EV_COUNT;
    for (uint32_t i = 0; ok && i < f->via.array.size; i++)
        ok = str_is(&f->via.array.ptr[i], fields[i]);
    for (uint32_t i = 0; ok && i < k->via.array.size; i++)
        ok = str_is(&k->via.array.ptr[i], sim_event_names[i]);
    if (!ok)
        return sim_fail(err, SIM_EFORMAT, r->what, 0, 0,
                        "byte %zu: not a fedsim event log (no header naming its fields and event "
                        "kinds)",
                        at);
    r->header = 1;
    r->n_kinds = (int)k->via.array.size;
    r->n_fields = (int)f->via.array.size;
    if (r->out)
        fprintf(r->out, "time_s\tkind\tclient\tround\tbytes\tflops%s\n",
                r->n_fields == 8 ? "\tenergy_j\treason" : "");
    return SIM_OK;
}

static int take_record(ev_reader *r, const msgpack_object *o, size_t at, sim_err *err)
{
    const msgpack_object *v = o->via.array.ptr;
    int64_t t, kind, client, round;
    int energy = r->n_fields == 8;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != (uint32_t)r->n_fields ||
        nn_unpack_int(&v[0], 0, INT64_MAX, &t) || nn_unpack_int(&v[1], 0, r->n_kinds - 1, &kind) ||
        nn_unpack_int(&v[2], -1, INT32_MAX, &client) ||
        nn_unpack_int(&v[3], 0, INT32_MAX, &round) || !is_float(&v[4]) || !is_float(&v[5]) ||
        (energy && (!is_float(&v[6]) || v[7].type != MSGPACK_OBJECT_STR || v[7].via.str.size > 16 ||
                    memchr(v[7].via.str.ptr, '\t', v[7].via.str.size) ||
                    memchr(v[7].via.str.ptr, '\n', v[7].via.str.size))))
        return sim_fail(err, SIM_EFORMAT, r->what, 0, 0,
                        "byte %zu: not an event record [time_ns, kind, client, round, bytes, "
                        "flops%s]",
                        at, energy ? ", energy_j, reason" : "");
    if (r->out) {
        fprintf(r->out, "%.9f\t%s\t%lld\t%lld\t%.0f\t%.0f", (double)t * 1e-9, sim_event_names[kind],
                (long long)client, (long long)round, v[4].via.f64, v[5].via.f64);
        if (energy)
            fprintf(r->out, "\t%.9f\t%.*s", v[6].via.f64, (int)v[7].via.str.size, v[7].via.str.ptr);
        fprintf(r->out, "\n");
    }
    return SIM_OK;
}

/* Decode the complete objects at p[0..n) (the stream's bytes from r->base on); *used gets the
 * bytes decoded. An object cut off at the end waits for more bytes, unless eof. */
static int feed(ev_reader *r, const unsigned char *p, size_t n, int eof, size_t *used, sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t i = 0;
    int rc = SIM_OK;
    while (i < n) {
        size_t len, off = 0;
        int more;
        if ((rc = nn_msgpack_check(p + i, n - i, r->base + i, &len, &more, r->what, err))) {
            if (more && !eof && n - i < SIM_EVENTS_MAX_OBJECT) {
                rc = SIM_OK;          /* wait for more */
            } else if (more && eof) { /* name the record, and say where in it */
                char why[sizeof err->msg];
                snprintf(why, sizeof why, "%s", err ? err->msg : "");
                rc = sim_fail(err, SIM_EFORMAT, r->what, 0, 0,
                              "byte %zu: the log ends inside this object (%s)", r->base + i, why);
            } else if (more)
                rc = sim_fail(err, SIM_EFORMAT, r->what, 0, 0,
                              "byte %zu: an object of more than %d bytes, larger than any an "
                              "event log holds",
                              r->base + i, SIM_EVENTS_MAX_OBJECT);
            break;
        }
        if (len > SIM_EVENTS_MAX_OBJECT) {
            rc = sim_fail(err, SIM_EFORMAT, r->what, 0, 0,
                          "byte %zu: an object of %zu bytes, larger than any an event log holds",
                          r->base + i, len);
            break;
        }
        if ((rc = nn_msgpack_next(&u, p + i, len, &off, r->what, err))) break;
        rc = r->header ? take_record(r, &u.data, r->base + i, err)
                       : take_header(r, &u.data, r->base + i, err);
        if (rc) break;
        i += len;
    }
    msgpack_unpacked_destroy(&u);
    *used = i;
    return rc;
}

/* The end of the log: it had its header, and the listing was written. */
static int finish(const ev_reader *r, sim_err *err)
{
    if (!r->header)
        return sim_fail(err, SIM_EFORMAT, r->what, 0, 0,
                        "byte 0: empty: not a fedsim event log (no header)");
    if (r->out && (fflush(r->out) || ferror(r->out)))
        return sim_fail(err, SIM_EIO, r->what, 0, 0, "cannot write its listing: %s",
                        strerror(errno ? errno : EIO));
    return SIM_OK;
}

int sim_events_list_buf(const void *buf, size_t len, const char *what, FILE *out, sim_err *err)
{
    ev_reader r = {what, out, 0, 0, 0, 0};
    size_t used;
    int rc = feed(&r, buf, buf ? len : 0, 1, &used, err);
    return rc ? rc : finish(&r, err);
}

int sim_events_list(FILE *in, const char *what, FILE *out, sim_err *err)
{
    ev_reader r = {what, out, 0, 0, 0, 0};
    size_t cap = 4096, n = 0; /* buf holds at most one object cut off by the read */
    unsigned char *buf = sim_xmalloc(cap);
    int rc = SIM_OK, eof = 0;
    while (!rc && !eof) {
        if (n == cap) buf = sim_xrealloc(buf, cap *= 2); /* feed keeps it <= the largest object */
        size_t want = cap - n, got = fread(buf + n, 1, want, in);
        n += got;
        if (got < want && ferror(in)) {
            rc = sim_fail(err, SIM_EIO, what, 0, 0, "cannot read: %s", strerror(errno));
            break;
        }
        eof = got < want;
        size_t used;
        rc = feed(&r, buf, n, eof, &used, err);
        memmove(buf, buf + used, n - used);
        n -= used;
        r.base += used;
    }
    free(buf);
    return rc ? rc : finish(&r, err);
}
