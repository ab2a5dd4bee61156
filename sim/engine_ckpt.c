/* sim/engine_ckpt.c -- the engine's checkpoints (engine.h): its whole state at an event boundary
 * as one msgpack payload, and back.
 *
 * sim/checkpoint.c is the file around the payload (trailer, checksum, atomic replace, the build
 * id) and knows nothing of msgpack or the engine; this file is the payload. They stay apart so
 * that a damaged file is refused before a byte of it is parsed, and so that each is fuzzed on its
 * own (tests/fuzz/fuzz_checkpoint.c feeds both).
 *
 * The payload is one msgpack array, the parts of ckpt_parts in order:
 *   ["fedsim-checkpoint", CKPT_VERSION, name, seed, scenario_hash, n_clients,
 *    [bytes of metrics.tsv, clients.tsv, events.msgpack, timeline.tsv],
 *    [state_fields...], [total_fields...],
 *    arrived (sync: client ids), buffered (async: [buffered_fields...]...),
 *    selection state (sim_sel_policy.save, or nil),
 *    [next_seq, [[event_fields...]...] in heap-array order], clients ([client_fields...]...),
 *    server state (fl_algo.server_save), the writer's build (sim_checkpoint_build),
 *    selection observations ([observed_fields...]...), the state store's commit tag]
 * then the network's and the batteries' parts when the run has them. Messages are bin or nil;
 * uniform's permutation is raw native-order uint32 (the same build reads it back). The heap
 * array is stored as is, so the restored queue pops in the same order.
 *
 * The clients' private states are not in the payload: a client record keeps only its state's
 * length, and the states are in the run folder's state store (sim/store.h), committed for each
 * checkpoint under a tag the payload names. A checkpoint costs what changed since the last one,
 * not the population.
 *
 * Every record (the protocol state, the totals, a buffered update, an event, a client) is one
 * field table that both writes and reads it: a field's name, kind, member and, for an integer, the
 * range it is read back in. A refusal names the part, the record and the field.
 */
#include "sim/engine_int.h"

#include "nn/pack.h"
#include "sim/checkpoint.h"
#include "sim/record.h"

#include <assert.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A checkpoint every checkpoint_every rounds, once per round. */
int sim_eng_ckpt_due(const sim_engine *e)
{
    int every = e->spec.checkpoint_every;
    return every > 0 && e->round % every == 0 && e->ckpt_round != e->round;
}

/* Version 7 moved the clients' private states out of the checkpoint into the state store
 * (sim/store.h); earlier versions, which carry them, are not read. */
enum { CKPT_VERSION = 7 };
static const char ckpt_magic[] = "fedsim-checkpoint";

/* ---------------------------------------------------------------------------------------- */
/* the records (sim/record.h) */

/* what integers' ranges are relative to, known only when reading: the clients' count, the
 * checkpoint's time, sim_eng_arrival_cap, 1 when sync */
enum { BY_CONST, BY_N, BY_NOW, BY_CAP, BY_SYNC, BY_COUNT };

/* clang-format off */
#define K(v) {BY_CONST, (v)}
#define BY(ref, v) {BY_##ref, (v)}
#define I32 K(INT32_MAX)
#define I64 K(INT64_MAX)
#define INT(st, m, lo, hi) {#m, SIM_F_INT, offsetof(st, m), sizeof(((st *)0)->m), 0, lo, hi}
#define U64(st, m) {#m, SIM_F_U64, offsetof(st, m), sizeof(((st *)0)->m), 0, K(0), K(0)}
#define F64(st, m) {#m, SIM_F_F64, offsetof(st, m), sizeof(((st *)0)->m), 0, K(0), K(0)}
#define WORDS(st, m) {#m, SIM_F_WORDS, offsetof(st, m), sizeof(((st *)0)->m), 0, K(0), K(0)}
#define BLOB(st, m, l) {#m, SIM_F_BLOB, offsetof(st, m), sizeof(void *), offsetof(st, l), K(0), K(0)}
#define MSG(st, m, l) {#m, SIM_F_MSG, offsetof(st, m), sizeof(void *), offsetof(st, l), K(0), K(0)}
/* clang-format on */
#define COUNT(t) (sizeof(t) / sizeof((t)[0]))

static const sim_field state_fields[] = {
        INT(sim_engine, now, K(0), I64),
        INT(sim_engine, round, K(0), I32),
        INT(sim_engine, round_open, K(0), K(1)),
        INT(sim_engine, target, K(0), I32),
        INT(sim_engine, in_flight, K(0), BY(N, 0)),
        /* entries arrived or buf holds; buf's others stay NULL, so it owns what it read */
        INT(sim_engine, n_arrived, K(0), BY(CAP, -1)),
        U64(sim_engine, next_job),
        U64(sim_engine, dispatches),
        INT(sim_engine, participants, K(0), I32),
        INT(sim_engine, next_eval_time, K(0), I64),
        INT(sim_engine, retry_at, K(-1), I64),
        INT(sim_engine, eval_round, K(-1), I32),
        INT(sim_engine, start_pending, K(0), BY(SYNC, 0)),
};

static const sim_field total_fields[] = {
        F64(sim_totals, bytes_up),
        F64(sim_totals, bytes_down),
        F64(sim_totals, flops),
        INT(sim_totals, jobs, K(0), I64),
        INT(sim_totals, dropped, K(0), I64),
        INT(sim_totals, late, K(0), I64),
        INT(sim_totals, excluded, K(0), BY(N, 0)),
        INT(sim_totals, events, K(0), I64),
        F64(sim_totals, acc_global),
        F64(sim_totals, loss_global),
        F64(sim_totals, acc_pers),
};

static const sim_field buffered_fields[] = {
        INT(sim_buffered, client, K(0), BY(N, -1)),
        INT(sim_buffered, staleness, K(0), I32),
        MSG(sim_buffered, up, up_len),
        F64(sim_buffered, weight),
};

/* events the engine queued; queued_kind checks the pair (kind, who) */
static const sim_field event_fields[] = {
        INT(sim_event, at, BY(NOW, 0), I64),
        U64(sim_event, seq),
        INT(sim_event, kind, K(0), K(SIM_EV_FLOW_END)),
        INT(sim_event, who, K(-1), BY(N, -1)),
        U64(sim_event, arg),
};

static const sim_field client_fields[] = {
        /* what dev_avail_init cannot rebuild: the process's position and its stream */
        INT(sim_client, avail.on, K(0), K(1)),
        INT(sim_client, avail.until, K(INT64_MIN), I64),
        INT(sim_client, avail.last, K(INT64_MIN), BY(NOW, 0)), /* queries never go back */
        WORDS(sim_client, avail.rng.s),
        INT(sim_client, busy, K(0), K(1)),
        INT(sim_client, job_round, K(0), I32),
        U64(sim_client, job_id),
        INT(sim_client, busy_until, K(INT64_MIN), I64),
        MSG(sim_client, up, up_len),
        INT(sim_client, priv_len, K(0), I64), /* the state itself is in the store */
        BLOB(sim_client, pending_priv, pending_priv_len),
        F64(sim_client, weight),
        F64(sim_client, job_flops),
        INT(sim_client, job_start, K(INT64_MIN), I64),
        INT(sim_client, job_down_end, K(INT64_MIN), I64),
        INT(sim_client, job_train_end, K(INT64_MIN), I64),
        INT(sim_client, jobs, K(0), I32),
        INT(sim_client, arrived, K(0), I32),
        INT(sim_client, lost, K(0), I32),
        INT(sim_client, late, K(0), I32),
        F64(sim_client, bytes_up),
        F64(sim_client, bytes_down),
        F64(sim_client, flops),
        INT(sim_client, busy_ns, K(INT64_MIN), I64),
        F64(sim_client, acc),
};

/* what the selection policy's view shows of a client, and the report of its job in flight */
static const sim_field observed_fields[] = {
        F64(sim_client, seen_loss),
        F64(sim_client, seen_duration_s),
        INT(sim_client, seen_steps, K(0), I32),
        INT(sim_client, last_selected, K(-1), I32),
        F64(sim_client, job_loss),
        INT(sim_client, job_steps, K(0), I32),
        F64(sim_client, seen_loss_rms),
        F64(sim_client, job_loss_rms),
};

/* ---------------------------------------------------------------------------------------- */
/* the payload's parts */

/* What the parts share while the payload is written or read. */
typedef struct ckpt_ctx {
    sim_engine *e;
    uint64_t out_len[OUT_COUNT]; /* the outputs' lengths, flushed */
    int64_t lim[BY_COUNT];       /* reading: the values ranges are relative to */
    const char *path;            /* reading: what errors name */
    char why[160];               /* reading: what a part refused (a record and its field) */
} ckpt_ctx;

static int ckpt_bad(const char *path, const char *what, sim_err *err)
{
    return sim_fail(err, SIM_EFORMAT, path, 0, 0, "malformed checkpoint (%s); not loaded", what);
}

/* A part of the payload: elems top-level elements, written by pack and read by unpack, which
 * returns SIM_OK, REFUSED with x->why saying what is malformed, or an error it reported in err
 * (negative). */
enum { REFUSED = 1 };
typedef struct ckpt_part {
    const char *name; /* in a refusal: "malformed checkpoint (NAME: why)" */
    int elems;
    void (*pack)(ckpt_ctx *x, msgpack_packer *pk);
    int (*unpack)(ckpt_ctx *x, const msgpack_object *o, sim_err *err);
} ckpt_part;

/* Record i of a list (or the only one, i < 0) was refused at field `field`. */
static int refused(ckpt_ctx *x, const char *what, long i, const char *field)
{
    if (i < 0)
        snprintf(x->why, sizeof x->why, "%s", field);
    else
        snprintf(x->why, sizeof x->why, "%s %ld: %s", what, i, field);
    return REFUSED;
}

/* Read exactly count records of table t from the array o into base (stride bytes apart). */
static int read_list(ckpt_ctx *x, const msgpack_object *o, const sim_field *t, size_t n, void *base,
                     size_t stride, size_t count, const char *what)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != count)
        return refused(x, what, -1, "the count");
    for (size_t i = 0; i < count; i++) {
        const char *bad =
                sim_record_read(&o->via.array.ptr[i], t, n, (char *)base + i * stride, x->lim);
        if (bad) return refused(x, what, (long)i, bad);
    }
    return SIM_OK;
}

static void pack_header(ckpt_ctx *x, msgpack_packer *pk)
{
    const sim_engine *e = x->e;
    nn_pack_str(pk, ckpt_magic);
    msgpack_pack_int(pk, CKPT_VERSION);
    nn_pack_str(pk, e->spec.name ? e->spec.name : "");
    msgpack_pack_uint64(pk, e->spec.seed);
    msgpack_pack_uint64(pk, e->spec.scenario_hash);
    msgpack_pack_int(pk, e->n);
}

/* The magic and version are read before the parts (ckpt_restore); the name is for people reading
 * the file (the hash covers it). */
static int unpack_header(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    sim_engine *e = x->e;
    uint64_t seed, hash;
    int64_t n;
    if (sim_record_read_u64(&o[3], &seed) || sim_record_read_u64(&o[4], &hash) ||
        nn_unpack_int(&o[5], 0, INT32_MAX, &n))
        return refused(x, NULL, -1, "seed, scenario or clients");
    if (seed != e->spec.seed || hash != e->spec.scenario_hash || n != e->n)
        return sim_fail(err, SIM_EINVAL, x->path, 0, 0,
                        "the checkpoint belongs to another scenario (seed, clients or the text of "
                        "scenario.yaml differ from when it was written); not loaded");
    return SIM_OK;
}

static void pack_lengths(ckpt_ctx *x, msgpack_packer *pk)
{
    sim_record_pack_words(pk, x->out_len, OUT_COUNT);
}

static int unpack_lengths(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    (void)err;
    return sim_record_read_words(o, x->out_len, OUT_COUNT) ? refused(x, NULL, -1, "not 4 lengths")
                                                           : SIM_OK;
}

static void pack_state(ckpt_ctx *x, msgpack_packer *pk)
{
    sim_record_pack(pk, state_fields, COUNT(state_fields), x->e);
}

static int unpack_state(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    (void)err;
    const char *bad = sim_record_read(o, state_fields, COUNT(state_fields), x->e, x->lim);
    x->lim[BY_NOW] = x->e->now;
    return bad ? refused(x, NULL, -1, bad) : SIM_OK;
}

static void pack_totals(ckpt_ctx *x, msgpack_packer *pk)
{
    sim_record_pack(pk, total_fields, COUNT(total_fields), &x->e->tot);
}

static int unpack_totals(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    (void)err;
    const char *bad = sim_record_read(o, total_fields, COUNT(total_fields), &x->e->tot, x->lim);
    return bad ? refused(x, NULL, -1, bad) : SIM_OK;
}

/* sync: the clients whose update arrived this round; async: none */
static void pack_arrived(ckpt_ctx *x, msgpack_packer *pk)
{
    const sim_engine *e = x->e;
    int k = e->spec.fed.mode == SIM_SYNC ? e->n_arrived : 0;
    msgpack_pack_array(pk, (size_t)k);
    for (int i = 0; i < k; i++)
        msgpack_pack_int32(pk, e->arrived[i]);
}

static int unpack_arrived(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    (void)err;
    sim_engine *e = x->e;
    int k = e->spec.fed.mode == SIM_SYNC ? e->n_arrived : 0;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != (uint32_t)k)
        return refused(x, NULL, -1, "the count");
    for (int i = 0; i < k; i++) {
        int64_t c;
        if (nn_unpack_int(&o->via.array.ptr[i], 0, e->n - 1, &c))
            return refused(x, "arrival", i, "client");
        e->arrived[i] = (int32_t)c;
    }
    return SIM_OK;
}

/* async: the updates waiting for the next aggregation; sync: none */
static void pack_buffered(ckpt_ctx *x, msgpack_packer *pk)
{
    const sim_engine *e = x->e;
    size_t k = e->spec.fed.mode == SIM_SYNC ? 0 : (size_t)e->n_arrived;
    sim_record_pack_list(pk, buffered_fields, COUNT(buffered_fields), e->buf, sizeof *e->buf, k);
}

static int unpack_buffered(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    (void)err;
    sim_engine *e = x->e;
    size_t k = e->spec.fed.mode == SIM_SYNC ? 0 : (size_t)e->n_arrived;
    return read_list(x, o, buffered_fields, COUNT(buffered_fields), e->buf, sizeof *e->buf, k,
                     "update");
}

/* The selection policy's state (sim_sel_policy.save): uniform's permutation, as the bin of its n
 * uint32 it always was; nil for a policy without state. */
static void pack_selection(ckpt_ctx *x, msgpack_packer *pk)
{
    const sim_engine *e = x->e;
    if (e->sel_state)
        e->sel->save(e->sel_state, pk);
    else
        msgpack_pack_nil(pk);
}

static int unpack_selection(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    sim_engine *e = x->e;
    if (!e->sel_state)
        return o->type == MSGPACK_OBJECT_NIL ? SIM_OK : refused(x, NULL, -1, "not nil");
    (void)err;
    sim_err why = {0};
    if (!e->sel->load(e->sel_state, o, &why)) return SIM_OK;
    snprintf(x->why, sizeof x->why, "%.150s", why.msg); /* what the policy refused, cut to fit */
    return REFUSED;
}

static void pack_queue(ckpt_ctx *x, msgpack_packer *pk)
{
    const sim_queue *q = &x->e->q;
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint64(pk, q->next_seq);
    sim_record_pack_list(pk, event_fields, COUNT(event_fields), q->ev, sizeof *q->ev, q->n);
}

/* 1 when the engine queues events of this kind for who (sim_eng_schedule's callers): a job's
 * phases for a client, the round's and the async refill's for none (-1). handle() trusts both. */
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
    case SIM_EV_FLOW_END: /* with a network only: unpack_queue checks */
        return who == -1;
    default:
        return 0;
    }
}

static int unpack_queue(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    (void)err;
    sim_queue *q = &x->e->q;
    uint64_t next_seq;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2 ||
        sim_record_read_u64(&o->via.array.ptr[0], &next_seq) ||
        o->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY)
        return refused(x, NULL, -1, "not [next_seq, events]");
    const msgpack_object *evs = &o->via.array.ptr[1];
    for (uint32_t i = 0; i < evs->via.array.size; i++) {
        sim_event ev;
        const char *bad = sim_record_read(&evs->via.array.ptr[i], event_fields, COUNT(event_fields),
                                          &ev, x->lim);
        if (!bad && ev.seq >= next_seq) bad = "seq";
        if (!bad && (!queued_kind(ev.kind, ev.who) || (ev.kind == SIM_EV_FLOW_END && !x->e->net)))
            bad = "kind";
        if (bad) return refused(x, "event", i, bad);
        /* pushing in heap-array order with seq forced reproduces the array exactly */
        q->next_seq = ev.seq;
        sim_queue_push(q, ev.at, ev.kind, ev.who, ev.arg);
        if (q->ev[i].seq != ev.seq) return refused(x, "event", i, "not a heap");
    }
    q->next_seq = next_seq;
    return SIM_OK;
}

static void pack_clients(ckpt_ctx *x, msgpack_packer *pk)
{
    const sim_engine *e = x->e;
    sim_record_pack_list(pk, client_fields, COUNT(client_fields), e->c, sizeof *e->c, (size_t)e->n);
}

static int unpack_clients(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    (void)err;
    sim_engine *e = x->e;
    return read_list(x, o, client_fields, COUNT(client_fields), e->c, sizeof *e->c, (size_t)e->n,
                     "client");
}

static void pack_server(ckpt_ctx *x, msgpack_packer *pk)
{
    x->e->spec.algo->server_save(x->e->server, pk);
}

static int unpack_server(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    int rc = x->e->spec.algo->server_load(x->e->server, o, err);
    if (rc) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return sim_fail(err, rc, x->path, 0, 0, "%s; not loaded", why);
    }
    return SIM_OK;
}

static void pack_build(ckpt_ctx *x, msgpack_packer *pk)
{
    (void)x;
    nn_pack_str(pk, sim_checkpoint_build());
}

/* Another build's checkpoint resumes, with a warning: its rounds may round differently. */
static int unpack_build(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    (void)err;
    char theirs[256];
    if (o->type == MSGPACK_OBJECT_STR)
        snprintf(theirs, sizeof theirs, "%.*s", (int)o->via.str.size, o->via.str.ptr);
    else
        return refused(x, NULL, -1, "not a string");
    const char *build = sim_checkpoint_build();
    if (strcmp(theirs, build))
        fprintf(stderr,
                "fedsim: warning: %s was written by another build (%s; this one: %s): the run "
                "goes on, but its remaining rounds can round differently from an uninterrupted "
                "run's\n",
                x->path, theirs, build);
    return SIM_OK;
}

static void pack_observed(ckpt_ctx *x, msgpack_packer *pk)
{
    const sim_engine *e = x->e;
    sim_record_pack_list(pk, observed_fields, COUNT(observed_fields), e->c, sizeof *e->c,
                         (size_t)e->n);
}

static int unpack_observed(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    (void)err;
    sim_engine *e = x->e;
    return read_list(x, o, observed_fields, COUNT(observed_fields), e->c, sizeof *e->c,
                     (size_t)e->n, "client");
}

/* The tag of the store's commit made for this checkpoint (sim_eng_ckpt_write), which holds the
 * clients' private states as they were when it was written. */
static void pack_states(ckpt_ctx *x, msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, x->e->store_tag);
}

/* The store goes back to that commit (sim_store_restore: it may be one ahead, when the run died
 * between committing the next and writing its checkpoint). Tag 0: no client held a state, and
 * the store starts empty. A run without a folder keeps its states in memory and can resume only
 * such a checkpoint. The store is opened only now, so a checkpoint of another run is refused
 * before its state.mdb is looked at. */
static int unpack_states(ckpt_ctx *x, const msgpack_object *o, sim_err *err)
{
    sim_engine *e = x->e;
    if (sim_record_read_u64(o, &e->store_tag)) return refused(x, NULL, -1, "not a tag");
    e->has_states = e->store_tag > 0;
    for (int32_t c = 0; c < e->n && !e->has_states; c++)
        if (e->c[c].priv_len) return refused(x, "client", c, "a state without a commit");
    if (e->has_states && !e->spec.out_dir)
        return sim_fail(err, SIM_EINVAL, x->path, 0, 0,
                        "the clients' private states are in the run folder's state.mdb: resume "
                        "from the folder; not loaded");
    int rc = sim_eng_store_open(e, e->has_states, err); /* an error names state.mdb */
    return rc || !e->has_states ? rc : sim_store_restore(e->store, e->store_tag, err);
}

/* The payload, in order. */
static const ckpt_part ckpt_parts[] = {
        {"header", 6, pack_header, unpack_header},
        {"output lengths", 1, pack_lengths, unpack_lengths},
        {"protocol state", 1, pack_state, unpack_state},
        {"totals", 1, pack_totals, unpack_totals},
        {"arrivals", 1, pack_arrived, unpack_arrived},
        {"async buffer", 1, pack_buffered, unpack_buffered},
        {"selection state", 1, pack_selection, unpack_selection},
        {"event queue", 1, pack_queue, unpack_queue},
        {"clients", 1, pack_clients, unpack_clients},
        {"server state", 1, pack_server, unpack_server},
        {"the writer's build", 1, pack_build, unpack_build},
        {"selection observations", 1, pack_observed, unpack_observed},
        {"client states", 1, pack_states, unpack_states},
};

/* The payload's elements */
static uint32_t payload_len(void)
{
    uint32_t n = 0;
    for (size_t i = 0; i < COUNT(ckpt_parts); i++)
        n += (uint32_t)ckpt_parts[i].elems;
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* writing and reading */

/* Flush the outputs to disk and write the checkpoint; the lengths saved are what resume keeps,
 * so they must be on disk before a checkpoint counts them, and no checkpoint may follow a lost
 * write (the one before it stays, and resumes the run). */
int sim_eng_ckpt_write(sim_engine *e, sim_err *err)
{
    if (!e->spec.out_dir) return SIM_OK;
    ckpt_ctx x = {.e = e};
    /* every job placed: the checkpoint holds none still training on a worker */
    int rc = sim_eng_jobs_due(e, DEV_TIME_NEVER, err);
    if (!rc) rc = sim_eng_outputs_failed(e, err);
    for (int i = 0; i < OUT_COUNT && !rc; i++) {
        rc = sim_out_flush(&e->out[i], 1, err);
        x.out_len[i] = (uint64_t)ftello(e->out[i].f);
    }
    /* The states first, in their own durable commit: a run that dies before the file below is in
     * place resumes from the checkpoint before, whose commit the store can go back to. Until a
     * client holds a state there is nothing to commit (and no state.mdb): the tag stays 0. */
    if (!rc && e->has_states) {
        rc = sim_store_commit(e->store, e->store_tag + 1, err);
        if (!rc) e->store_tag++;
        const char *kill_at = getenv("FEDSIM_TEST_KILL_AFTER_STATE_COMMIT"); /* tests: a crash */
        if (!rc && kill_at && strtoull(kill_at, NULL, 10) == e->store_tag) raise(SIGKILL);
    }
    if (rc) return rc;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, payload_len() + (e->net != NULL) + (e->en != NULL));
    for (size_t i = 0; i < COUNT(ckpt_parts); i++)
        ckpt_parts[i].pack(&x, &pk);
    if (e->net) sim_eng_net_pack(e, &pk);   /* a run with a network: one part more */
    if (e->en) sim_eng_energy_pack(e, &pk); /* with batteries: one more, the last */
    char path[1100];
    sim_eng_ckpt_path(e, path, sizeof path);
    rc = sim_checkpoint_write(path, sb.data, sb.size, err);
    msgpack_sbuffer_destroy(&sb);
    e->ckpt_wall = sim_eng_wall_s();
    if (!rc) e->ckpt_round = e->round;
    return rc;
}

/* Restore the state the parts wrote into e, fresh from construction (clients initialized,
 * server new); the output lengths go to out_len. */
static int restore(sim_engine *e, const msgpack_object *root, uint64_t out_len[OUT_COUNT],
                   const char *path, sim_err *err)
{
    uint32_t n = root->type == MSGPACK_OBJECT_ARRAY ? root->via.array.size : 0;
    const msgpack_object *o = n ? root->via.array.ptr : NULL;
    if (n < 1 || o[0].type != MSGPACK_OBJECT_STR || o[0].via.str.size != strlen(ckpt_magic) ||
        memcmp(o[0].via.str.ptr, ckpt_magic, o[0].via.str.size))
        return ckpt_bad(path, "not a fedsim checkpoint", err);
    int64_t version = 0;
    if (n < 2 || nn_unpack_int(&o[1], 0, INT32_MAX, &version)) version = 0; /* no version */
    if (version != CKPT_VERSION)
        return sim_fail(err, SIM_EFORMAT, path, 0, 0,
                        "checkpoint format version %lld; this fedsim reads version %d; not loaded",
                        (long long)version, CKPT_VERSION);
    if (n != payload_len() + (e->net != NULL) + (e->en != NULL))
        return ckpt_bad(path, "field count", err);
    const msgpack_object *end = o + n;
    ckpt_ctx x = {.e = e, .path = path};
    x.lim[BY_N] = e->n;
    x.lim[BY_CAP] = sim_eng_arrival_cap(&e->spec.fed, e->n);
    x.lim[BY_SYNC] = e->spec.fed.mode == SIM_SYNC;
    for (size_t i = 0; i < COUNT(ckpt_parts); i++) {
        const ckpt_part *p = &ckpt_parts[i];
        int rc = p->unpack(&x, o, err);
        o += p->elems;
        if (rc < 0) return rc;
        if (rc == REFUSED) {
            char what[sizeof x.why + 64];
            snprintf(what, sizeof what, "%s: %s", p->name, x.why);
            return ckpt_bad(path, what, err);
        }
    }
    if (e->net) {
        char why[160], what[200];
        const char *bad = sim_eng_net_unpack(e, o < end ? o : NULL, why, sizeof why);
        if (bad) {
            snprintf(what, sizeof what, "network: %s", bad);
            return ckpt_bad(path, what, err);
        }
        o++;
    }
    if (e->en) {
        char why[160], what[200];
        const char *bad = sim_eng_energy_unpack(e, o < end ? o : NULL, why, sizeof why);
        if (bad) {
            snprintf(what, sizeof what, "energy: %s", bad);
            return ckpt_bad(path, what, err);
        }
    }
    memcpy(out_len, x.out_len, sizeof x.out_len);
    return SIM_OK;
}

/* Restore the checkpoint payload buf[0..len) (path names it in errors). */
static int decode_checkpoint(sim_engine *e, const void *buf, size_t len, const char *path,
                             uint64_t out_len[OUT_COUNT], sim_err *err)
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
