/* sim/engine_ckpt.c -- the engine's checkpoints (engine.h): its whole state at an event boundary
 * as one msgpack payload, and back. sim/checkpoint.c frames the payload in its file.
 */
#include "sim/engine_int.h"

#include "nn/pack.h"
#include "sim/checkpoint.h"

#include <stdlib.h>
#include <string.h>

/* A checkpoint every checkpoint_every rounds, once per round. */
int sim_eng_ckpt_due(const sim_engine *e)
{
    int every = e->spec.checkpoint_every;
    return every > 0 && e->round % every == 0 && e->ckpt_round != e->round;
}

/* The payload is one msgpack array:
 *   ["fedsim-checkpoint", CKPT_VERSION, name, seed, scenario_hash, n_clients,
 *    [bytes of metrics.tsv, clients.tsv, events.msgpack, timeline.tsv],
 *    [now, round, round_open, target, in_flight, n_arrived, next_job, dispatches, participants,
 *     next_eval_time, retry_at, eval_round, start_pending],
 *    [bytes_up, bytes_down, flops, jobs, dropped, late, excluded, events, acc_global, loss_global,
 *     acc_pers],
 *    arrived (sync: client ids), buffered (async: [client, staleness, up, up_len, weight]...),
 *    perm (bin of n uint32), [next_seq, [[at, seq, kind, who, arg]...] in heap-array order],
 *    clients ([avail_on, avail_until, avail_last, [rng words], busy, job_round, job_id,
 *              busy_until, up, up_len, priv, pending_priv, weight, job_flops, job_start,
 *              job_down_end, job_train_end, jobs, completed, lost, late, bytes_up, bytes_down,
 *              flops, busy_ns, acc]...),
 *    server state (fl_algo.server_save), the writer's build (sim_checkpoint_build)]
 * Messages are bin or nil; perm is raw native-order uint32 (the same build reads it back). The
 * heap array is stored as is, so the restored queue pops in the same order. */

enum { CKPT_VERSION = 5, CKPT_FIELDS = 16, CKPT_CLIENT_FIELDS = 26 };
static const char ckpt_magic[] = "fedsim-checkpoint";

static void pack_blob(msgpack_packer *pk, const void *p, size_t n)
{
    if (!p) {
        msgpack_pack_nil(pk);
        return;
    }
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, p, n);
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* Flush the outputs to disk and write the checkpoint; the lengths saved are what resume keeps,
 * so they must be on disk before a checkpoint counts them, and no checkpoint may follow a lost
 * write (the one before it stays, and resumes the run). */
int sim_eng_ckpt_write(sim_engine *e, sim_err *err)
{
    if (!e->spec.out_dir) return SIM_OK;
    uint64_t len[4];
    int rc = sim_eng_outputs_failed(e, err);
    for (int i = 0; i < 4 && !rc; i++) {
        rc = sim_out_flush(&e->out[i], 1, err);
        len[i] = (uint64_t)ftello(e->out[i].f);
    }
    if (rc) return rc;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pkr, *pk = &pkr;
    msgpack_packer_init(pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(pk, CKPT_FIELDS);
    pack_str(pk, ckpt_magic);
    msgpack_pack_int(pk, CKPT_VERSION);
    pack_str(pk, e->spec.name ? e->spec.name : "");
    msgpack_pack_uint64(pk, e->spec.seed);
    msgpack_pack_uint64(pk, e->spec.scenario_hash);
    msgpack_pack_int(pk, e->n);
    msgpack_pack_array(pk, 4);
    for (int i = 0; i < 4; i++)
        msgpack_pack_uint64(pk, len[i]);
    msgpack_pack_array(pk, 13);
    msgpack_pack_int64(pk, e->now);
    msgpack_pack_int(pk, e->round);
    msgpack_pack_int(pk, e->round_open);
    msgpack_pack_int(pk, e->target);
    msgpack_pack_int(pk, e->in_flight);
    msgpack_pack_int(pk, e->n_arrived);
    msgpack_pack_uint64(pk, e->next_job);
    msgpack_pack_uint64(pk, e->dispatches);
    msgpack_pack_int(pk, e->participants);
    msgpack_pack_int64(pk, e->next_eval_time);
    msgpack_pack_int64(pk, e->retry_at);
    msgpack_pack_int(pk, e->eval_round);
    msgpack_pack_int(pk, e->start_pending);
    const sim_totals *t = &e->tot;
    msgpack_pack_array(pk, 11);
    msgpack_pack_double(pk, t->bytes_up);
    msgpack_pack_double(pk, t->bytes_down);
    msgpack_pack_double(pk, t->flops);
    msgpack_pack_int64(pk, t->jobs);
    msgpack_pack_int64(pk, t->dropped);
    msgpack_pack_int64(pk, t->late);
    msgpack_pack_int64(pk, t->excluded);
    msgpack_pack_int64(pk, t->events);
    msgpack_pack_double(pk, t->acc_global);
    msgpack_pack_double(pk, t->loss_global);
    msgpack_pack_double(pk, t->acc_pers);
    int sync = e->spec.fed.mode == SIM_SYNC;
    msgpack_pack_array(pk, sync ? (size_t)e->n_arrived : 0);
    for (int i = 0; sync && i < e->n_arrived; i++)
        msgpack_pack_int32(pk, e->arrived[i]);
    msgpack_pack_array(pk, sync ? 0 : (size_t)e->n_arrived);
    for (int i = 0; !sync && i < e->n_arrived; i++) {
        const sim_buffered *b = &e->buf[i];
        msgpack_pack_array(pk, 5);
        msgpack_pack_int32(pk, b->client);
        msgpack_pack_int32(pk, b->staleness);
        pack_blob(pk, b->up, b->up_len);
        msgpack_pack_uint64(pk, b->up_len);
        msgpack_pack_double(pk, b->weight);
    }
    pack_blob(pk, e->perm, sizeof(uint32_t) * (size_t)e->n);
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint64(pk, e->q.next_seq);
    msgpack_pack_array(pk, e->q.n);
    for (size_t i = 0; i < e->q.n; i++) {
        const sim_event *ev = &e->q.ev[i];
        msgpack_pack_array(pk, 5);
        msgpack_pack_int64(pk, ev->at);
        msgpack_pack_uint64(pk, ev->seq);
        msgpack_pack_int(pk, ev->kind);
        msgpack_pack_int32(pk, ev->who);
        msgpack_pack_uint64(pk, ev->arg);
    }
    msgpack_pack_array(pk, (size_t)e->n);
    for (int32_t c = 0; c < e->n; c++) {
        const sim_client *cl = &e->c[c];
        msgpack_pack_array(pk, CKPT_CLIENT_FIELDS);
        /* what dev_avail_init cannot rebuild: the process's position and its stream */
        msgpack_pack_int(pk, cl->avail.on);
        msgpack_pack_int64(pk, cl->avail.until);
        msgpack_pack_int64(pk, cl->avail.last);
        msgpack_pack_array(pk, 4);
        for (int k = 0; k < 4; k++)
            msgpack_pack_uint64(pk, cl->avail.rng.s[k]);
        msgpack_pack_int(pk, cl->busy);
        msgpack_pack_int32(pk, cl->job_round);
        msgpack_pack_uint64(pk, cl->job_id);
        msgpack_pack_int64(pk, cl->busy_until);
        pack_blob(pk, cl->up, cl->up_len); /* up, when present, holds up_len bytes */
        msgpack_pack_uint64(pk, cl->up_len);
        pack_blob(pk, cl->priv, cl->priv_len);
        pack_blob(pk, cl->pending_priv, cl->pending_priv_len);
        msgpack_pack_double(pk, cl->weight);
        msgpack_pack_double(pk, cl->job_flops);
        msgpack_pack_int64(pk, cl->job_start);
        msgpack_pack_int64(pk, cl->job_down_end);
        msgpack_pack_int64(pk, cl->job_train_end);
        msgpack_pack_int(pk, cl->jobs);
        msgpack_pack_int(pk, cl->completed);
        msgpack_pack_int(pk, cl->lost);
        msgpack_pack_int(pk, cl->late);
        msgpack_pack_double(pk, cl->bytes_up);
        msgpack_pack_double(pk, cl->bytes_down);
        msgpack_pack_double(pk, cl->flops);
        msgpack_pack_int64(pk, cl->busy_ns);
        msgpack_pack_double(pk, cl->acc);
    }
    e->spec.algo->server_save(e->server, pk);
    pack_str(pk, sim_checkpoint_build());
    char path[1100];
    sim_eng_ckpt_path(e, path, sizeof path);
    rc = sim_checkpoint_write(path, sb.data, sb.size, err);
    msgpack_sbuffer_destroy(&sb);
    e->ckpt_wall = sim_eng_wall_s();
    if (!rc) e->ckpt_round = e->round;
    return rc;
}

/* A cursor over a msgpack array; any mismatch (type, range, count) sets bad and reads zeros. */
typedef struct rd {
    const msgpack_object *o;
    uint32_t n, i;
    int bad;
} rd;

static void rd_init(rd *r, const msgpack_object *o, uint32_t want)
{
    int ok = o && o->type == MSGPACK_OBJECT_ARRAY && (!want || o->via.array.size == want);
    *r = (rd){ok ? o->via.array.ptr : NULL, ok ? o->via.array.size : 0, 0, !ok};
}

static const msgpack_object *rd_next(rd *r)
{
    if (r->i >= r->n) {
        r->bad = 1;
        return NULL;
    }
    return &r->o[r->i++];
}

static int64_t rd_int(rd *r, int64_t lo, int64_t hi)
{
    const msgpack_object *o = rd_next(r);
    int64_t v = 0;
    if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        v = (int64_t)o->via.u64;
    else if (o && o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        v = o->via.i64;
    else
        r->bad = 1;
    if (v < lo || v > hi) r->bad = 1;
    return r->bad ? lo : v;
}

static uint64_t rd_u64(rd *r)
{
    const msgpack_object *o = rd_next(r);
    if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) return o->via.u64;
    r->bad = 1;
    return 0;
}

static double rd_f64(rd *r)
{
    const msgpack_object *o = rd_next(r);
    if (o && (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32))
        return o->via.f64;
    r->bad = 1;
    return 0;
}

/* A bin (copied, owned by the caller) or nil (NULL); *len gets its size. */
static void *rd_blob(rd *r, size_t *len)
{
    const msgpack_object *o = rd_next(r);
    *len = 0;
    if (o && o->type == MSGPACK_OBJECT_NIL) return NULL;
    if (!o || o->type != MSGPACK_OBJECT_BIN) {
        r->bad = 1;
        return NULL;
    }
    *len = o->via.bin.size;
    void *p = sim_xmalloc(*len ? *len : 1);
    memcpy(p, o->via.bin.ptr, *len);
    return p;
}

static void rd_sub(rd *r, rd *sub, uint32_t want)
{
    rd_init(sub, rd_next(r), want);
    if (sub->bad) r->bad = 1;
}

static int ckpt_bad(const char *path, const char *what, sim_err *err)
{
    return sim_fail(err, SIM_EFORMAT, path, 0, 0, "malformed checkpoint (%s); not loaded", what);
}

/* 1 when the engine queues events of this kind for who (schedule's callers): a job's phases for a
 * client, the round's and the async refill's for none (-1). handle() trusts both. */
static int queued_kind(int kind, int32_t who)
{
    switch (kind) {
    case SIM_EV_DOWNLOAD_DONE:
    case SIM_EV_TRAIN_DONE:
    case SIM_EV_UPLOAD_DONE:
    case SIM_EV_JOB_LOST:
        return who >= 0;
    case SIM_EV_ROUND_START:
    case SIM_EV_DEADLINE:
    case SIM_EV_RETRY:
        return who == -1;
    default:
        return 0;
    }
}

/* Restore the state saved by write_checkpoint into e, fresh from construction (clients
 * initialized, server new); the output lengths go to out_len. */
static int restore(sim_engine *e, const msgpack_object *root, uint64_t out_len[4], const char *path,
                   sim_err *err)
{
    rd r, s;
    rd_init(&r, root, 0);
    const msgpack_object *m = rd_next(&r);
    if (r.bad || m->type != MSGPACK_OBJECT_STR || m->via.str.size != strlen(ckpt_magic) ||
        memcmp(m->via.str.ptr, ckpt_magic, m->via.str.size))
        return ckpt_bad(path, "not a fedsim checkpoint", err);
    int64_t version = rd_int(&r, 0, INT32_MAX);
    /* version 4 is this one without the writer's build, its last field */
    if (r.bad || version < CKPT_VERSION - 1 || version > CKPT_VERSION)
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "checkpoint format version %lld; this fedsim reads versions %d and %d; not "
                        "loaded",
                        (long long)version, CKPT_VERSION - 1, CKPT_VERSION);
    if (r.n != CKPT_FIELDS - (version < CKPT_VERSION)) return ckpt_bad(path, "field count", err);
    rd_next(&r); /* the name: for people reading the file; the hash below covers it */
    uint64_t seed = rd_u64(&r), hash = rd_u64(&r);
    int64_t n = rd_int(&r, 0, INT32_MAX);
    if (r.bad) return ckpt_bad(path, "header", err);
    if (seed != e->spec.seed || hash != e->spec.scenario_hash || n != e->n)
        return sim_fail(err, SIM_EINVAL, path, 0, 0,
                        "the checkpoint belongs to another scenario (seed, clients or the text of "
                        "scenario.yaml differ from when it was written); not loaded");
    rd_sub(&r, &s, 4);
    for (int i = 0; i < 4; i++)
        out_len[i] = rd_u64(&s);
    if (s.bad) return ckpt_bad(path, "output lengths", err);
    int sync = e->spec.fed.mode == SIM_SYNC;
    int cap = sim_eng_arrival_cap(&e->spec.fed, e->n);
    rd_sub(&r, &s, 13);
    e->now = rd_int(&s, 0, INT64_MAX);
    e->round = (int)rd_int(&s, 0, INT32_MAX);
    e->round_open = (int)rd_int(&s, 0, 1);
    e->target = (int)rd_int(&s, 0, INT32_MAX);
    e->in_flight = (int)rd_int(&s, 0, n);
    e->n_arrived = 0; /* set below, once arrived or buf holds that many */
    int n_arrived = (int)rd_int(&s, 0, cap - 1);
    e->next_job = rd_u64(&s);
    e->dispatches = rd_u64(&s);
    e->participants = (int)rd_int(&s, 0, INT32_MAX);
    e->next_eval_time = rd_int(&s, 0, INT64_MAX);
    e->retry_at = rd_int(&s, -1, INT64_MAX);
    e->eval_round = (int)rd_int(&s, -1, INT32_MAX);
    e->start_pending = (int)rd_int(&s, 0, sync);
    if (s.bad) return ckpt_bad(path, "protocol state", err);
    sim_totals *t = &e->tot;
    rd_sub(&r, &s, 11);
    t->bytes_up = rd_f64(&s);
    t->bytes_down = rd_f64(&s);
    t->flops = rd_f64(&s);
    t->jobs = (long)rd_int(&s, 0, INT64_MAX);
    t->dropped = (long)rd_int(&s, 0, INT64_MAX);
    t->late = (long)rd_int(&s, 0, INT64_MAX);
    t->excluded = (long)rd_int(&s, 0, n);
    t->events = (long)rd_int(&s, 0, INT64_MAX);
    t->acc_global = rd_f64(&s);
    t->loss_global = rd_f64(&s);
    t->acc_pers = rd_f64(&s);
    if (s.bad) return ckpt_bad(path, "totals", err);
    rd_sub(&r, &s, sync ? (uint32_t)n_arrived : 0);
    for (int i = 0; sync && i < n_arrived; i++)
        e->arrived[i] = (int32_t)rd_int(&s, 0, n - 1);
    if (s.bad || s.i != s.n) return ckpt_bad(path, "arrivals", err);
    rd_sub(&r, &s, sync ? 0 : (uint32_t)n_arrived);
    for (int i = 0; !sync && i < n_arrived; i++) {
        rd b;
        rd_sub(&s, &b, 5);
        sim_buffered *bu = &e->buf[i];
        bu->client = (int32_t)rd_int(&b, 0, n - 1);
        bu->staleness = (int32_t)rd_int(&b, 0, INT32_MAX);
        size_t got;
        bu->up = rd_blob(&b, &got);
        e->n_arrived = i + 1; /* buf[0..i] now owns its messages */
        bu->up_len = (size_t)rd_u64(&b);
        bu->weight = rd_f64(&b);
        if (b.bad || (bu->up && got != bu->up_len)) s.bad = 1;
    }
    if (s.bad || s.i != s.n) return ckpt_bad(path, "async buffer", err);
    e->n_arrived = n_arrived;
    size_t perm_len;
    uint32_t *perm = rd_blob(&r, &perm_len);
    int perm_ok = perm && perm_len == sizeof(uint32_t) * (size_t)n;
    if (perm_ok) { /* a permutation of 0..n-1: seen[] marks each value once */
        char *seen = sim_xcalloc((size_t)n + 1, 1);
        for (int64_t i = 0; i < n && perm_ok; i++)
            perm_ok = perm[i] < (uint64_t)n && !seen[perm[i]]++;
        free(seen);
    }
    if (perm_ok) memcpy(e->perm, perm, perm_len);
    free(perm);
    if (!perm_ok) return ckpt_bad(path, "selection permutation", err);
    rd_sub(&r, &s, 2);
    uint64_t next_seq = rd_u64(&s);
    rd q;
    rd_sub(&s, &q, 0);
    if (s.bad) return ckpt_bad(path, "event queue", err);
    for (uint32_t i = 0; i < q.n; i++) {
        rd ev;
        rd_sub(&q, &ev, 5);
        sim_time at = rd_int(&ev, e->now, INT64_MAX);
        uint64_t seq = rd_u64(&ev);
        int kind = (int)rd_int(&ev, 0, SIM_EV_COUNT - 1);
        int32_t who = (int32_t)rd_int(&ev, -1, n - 1);
        uint64_t arg = rd_u64(&ev);
        if (ev.bad || seq >= next_seq || !queued_kind(kind, who))
            return ckpt_bad(path, "event queue", err);
        /* pushing in heap-array order with seq forced reproduces the array exactly */
        e->q.next_seq = seq;
        sim_queue_push(&e->q, at, kind, who, arg);
        if (e->q.ev[i].seq != seq) return ckpt_bad(path, "event queue is not a heap", err);
    }
    e->q.next_seq = next_seq;
    rd cs;
    rd_sub(&r, &cs, (uint32_t)n);
    if (r.bad) return ckpt_bad(path, "clients", err);
    for (int32_t c = 0; c < n; c++) {
        sim_client *cl = &e->c[c];
        rd f, w;
        rd_sub(&cs, &f, CKPT_CLIENT_FIELDS);
        cl->avail.on = (int)rd_int(&f, 0, 1);
        cl->avail.until = rd_int(&f, INT64_MIN, INT64_MAX);
        cl->avail.last = rd_int(&f, INT64_MIN, e->now); /* queries never go back */
        rd_sub(&f, &w, 4);
        for (int k = 0; k < 4; k++)
            cl->avail.rng.s[k] = rd_u64(&w);
        cl->busy = (int)rd_int(&f, 0, 1);
        cl->job_round = (int32_t)rd_int(&f, 0, INT32_MAX);
        cl->job_id = rd_u64(&f);
        cl->busy_until = rd_int(&f, INT64_MIN, INT64_MAX);
        size_t got;
        cl->up = rd_blob(&f, &got);
        cl->up_len = (size_t)rd_u64(&f);
        if (cl->up && got != cl->up_len) f.bad = 1;
        cl->priv = rd_blob(&f, &cl->priv_len);
        cl->pending_priv = rd_blob(&f, &cl->pending_priv_len);
        cl->weight = rd_f64(&f);
        cl->job_flops = rd_f64(&f);
        cl->job_start = rd_int(&f, INT64_MIN, INT64_MAX);
        cl->job_down_end = rd_int(&f, INT64_MIN, INT64_MAX);
        cl->job_train_end = rd_int(&f, INT64_MIN, INT64_MAX);
        cl->jobs = (int)rd_int(&f, 0, INT32_MAX);
        cl->completed = (int)rd_int(&f, 0, INT32_MAX);
        cl->lost = (int)rd_int(&f, 0, INT32_MAX);
        cl->late = (int)rd_int(&f, 0, INT32_MAX);
        cl->bytes_up = rd_f64(&f);
        cl->bytes_down = rd_f64(&f);
        cl->flops = rd_f64(&f);
        cl->busy_ns = rd_int(&f, INT64_MIN, INT64_MAX);
        cl->acc = rd_f64(&f);
        if (f.bad || w.bad) return ckpt_bad(path, "a client", err);
    }
    const msgpack_object *so = rd_next(&r), *bo = version < CKPT_VERSION ? NULL : rd_next(&r);
    if (r.bad || (bo && bo->type != MSGPACK_OBJECT_STR))
        return ckpt_bad(path, "server state or the writer's build", err);
    int rc = e->spec.algo->server_load(e->server, so, err);
    if (rc) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return sim_fail(err, rc, path, 0, 0, "%s; not loaded", why);
    }
    const char *build = sim_checkpoint_build();
    char theirs[256];
    if (bo)
        snprintf(theirs, sizeof theirs, "%.*s", (int)bo->via.str.size, bo->via.str.ptr);
    else
        snprintf(theirs, sizeof theirs, "unrecorded: format version %lld", (long long)version);
    if (strcmp(theirs, build))
        fprintf(stderr,
                "fedsim: warning: %s was written by another build (%s; this one: %s): the run "
                "goes on, but its remaining rounds can round differently from an uninterrupted "
                "run's\n",
                path, theirs, build);
    return SIM_OK;
}

/* Restore the checkpoint payload buf[0..len) (path names it in errors). */
static int decode_checkpoint(sim_engine *e, const void *buf, size_t len, const char *path,
                             uint64_t out_len[4], sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = nn_msgpack_next(&u, buf, len, &off, path, err);
    if (rc) { /* err says where; the checkpoint's framing is said once, for every cause */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        rc = sim_fail(err, SIM_EFORMAT, path, 0, 0, "malformed checkpoint (%s); not loaded", why);
    } else if (off != len) {
        rc = ckpt_bad(path, "bytes after its msgpack object", err);
    } else {
        rc = restore(e, &u.data, out_len, path, err);
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* Read, verify and restore out_dir/checkpoint.msgpack, or spec.resume_payload (before any output
 * is touched). */
int sim_eng_ckpt_load(sim_engine *e, uint64_t out_len[OUT_COUNT], sim_err *err)
{
    if (e->spec.resume_payload)
        return decode_checkpoint(e, e->spec.resume_payload, e->spec.resume_len,
                                 "checkpoint payload", out_len, err);
    char path[1100];
    sim_eng_ckpt_path(e, path, sizeof path);
    void *buf;
    size_t len;
    int rc = sim_checkpoint_read(path, &buf, &len, err);
    if (rc) return rc;
    rc = decode_checkpoint(e, buf, len, path, out_len, err);
    free(buf);
    return rc;
}
