/* sim/engine_net.c -- the engine's transfers as flows over shared links (`network:`, sim/net.h).
 *
 * Without a network a job's phases are priced back to back at dispatch (dev_price) and their
 * events scheduled at once. With one, a download or an upload is a flow whose end moves whenever
 * another flow on its links starts or ends, so each phase is scheduled when the one before ends:
 *   dispatch      the download's flow starts (no bytes: the dispatch reaches the device after its
 *                 latency, as without a network), and the job's loss is scheduled at the instant
 *                 its client goes offline, which any later event of the job then finds;
 *   flow end      (SIM_EV_FLOW_END, at the earliest finish of a flow) the flows due are
 *                 stopped, in client order, and each one's phase's event (download_done,
 *                 upload_done) follows after its client's latency, the last bit's propagation;
 *   download_done the training is priced from now on (dev_compute_ns, the client's speed trace
 *                 from here) and scheduled;
 *   train_done    the upload's flow starts (a job without an upload has arrived).
 * One SIM_EV_FLOW_END is queued for the whole network, at its earliest finish (e->net_next),
 * rather than one per flow, which every change of rates would move: a solve then costs one push
 * however many flows it moves. An event at a time no flow finishes any more (its flows moved
 * later) finds none due and does nothing. A lost job's flow is freed at the instant it is
 * lost; a late upload keeps its flow until it is sent. sim_eng_net_settle runs before time moves
 * on, so the flows of a whole dispatch batch, or of the many downloads that end together, are
 * solved once; a checkpoint holds the changes not yet solved (the links they touched) rather than
 * solving them, so a resumed run solves when the straight run does.
 *
 * Links: 0 and 1 the server's up and down, 2 + 2g and 3 + 2g group g's. An unlimited link is on
 * no path. links.tsv has a row for a link each time its load (the sum of its flows' rates)
 * changes, at the settle that changes it: time, link (server.up, server.down, GROUP.up,
 * GROUP.down), bit/s carried, capacity; the load holds until the link's next row, so the area
 * under a link's steps is the bits it carried. A client's own link caps its flows (sim/net.h).
 * busy_until (what sync's retry of an empty round waits for) is, while a job is out, its end as far
 * as it is known: the current phase's end plus the later phases priced alone, never before now.
 */
#include "sim/engine_int.h"

#include "sim/record.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static sim_time sat_add(sim_time a, sim_time b)
{
    return a == DEV_TIME_NEVER || b == DEV_TIME_NEVER || a > DEV_TIME_NEVER - b ? DEV_TIME_NEVER
                                                                                : a + b;
}

void sim_eng_net_new(sim_engine *e)
{
    e->net_next = -1;
    const sim_net_config *nc = e->spec.net;
    int n_links = 2 + 2 * nc->n_groups;
    double *bps = sim_xmalloc(sizeof(double) * (size_t)n_links);
    bps[0] = nc->server_up;
    bps[1] = nc->server_down;
    for (int g = 0; g < nc->n_groups; g++) {
        bps[2 + 2 * g] = nc->groups[g].up;
        bps[3 + 2 * g] = nc->groups[g].down;
    }
    e->net = sim_net_new(n_links, bps, e->n);
    free(bps);
    e->nj = sim_xcalloc((size_t)e->n, sizeof *e->nj);
    e->link_used = sim_xcalloc((size_t)n_links, sizeof *e->link_used);
    e->links_len = -1;
}

void sim_eng_net_free(sim_engine *e)
{
    sim_net_free(e->net);
    free(e->nj);
    free(e->link_used);
}

/* ---------------------------------------------------------------------------------------- */
/* links.tsv */

static void link_name(const sim_engine *e, int l, char *buf, size_t n)
{
    const char *dir = l % 2 ? "down" : "up";
    if (l < 2)
        snprintf(buf, n, "server.%s", dir);
    else
        snprintf(buf, n, "%s.%s", e->spec.net->groups[(l - 2) / 2].name, dir);
}

static double link_bps(const sim_engine *e, int l)
{
    const sim_net_config *nc = e->spec.net;
    if (l < 2) return l ? nc->server_down : nc->server_up;
    return l % 2 ? nc->groups[(l - 2) / 2].down : nc->groups[(l - 2) / 2].up;
}

int sim_eng_net_links_open(sim_engine *e, int resume, sim_err *err)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/links.tsv", e->spec.out_dir);
    if (resume && e->links_len >= 0) { /* as sim_eng_outputs_reopen does the others */
        struct stat st;
        if (stat(path, &st))
            return sim_fail(err, SIM_EIO, path, 0, 0, "cannot resume: %s", strerror(errno));
        if (st.st_size < e->links_len)
            return sim_fail(err, SIM_EINVAL, path, 0, 0,
                            "cannot resume: %lld bytes, shorter than the %lld the checkpoint "
                            "counted",
                            (long long)st.st_size, (long long)e->links_len);
        int rc = sim_out_open(&e->links_out, path, "r+b", err);
        if (rc) return rc;
        if (ftruncate(fileno(e->links_out.f), (off_t)e->links_len) ||
            fseeko(e->links_out.f, 0, SEEK_END))
            return sim_fail(err, SIM_EIO, path, 0, 0, "cannot resume: %s", strerror(errno));
        return SIM_OK;
    }
    int rc = sim_out_open(&e->links_out, path, "wb", err);
    if (rc) return rc;
    sim_out_printf(&e->links_out,
                   "# fedsim run %s: a row each time a shared link's load changes (the sum of "
                   "its flows' rates, held until its next row)\n"
                   "time_s\tlink\tused_bps\tcapacity_bps\n",
                   e->spec.name);
    return SIM_OK;
}

/* The rows of the links whose load changed since their last one. */
static void link_rows(sim_engine *e)
{
    int n = sim_net_links(e->net);
    double *load = sim_xmalloc(sizeof(double) * (size_t)n);
    sim_net_link_loads(e->net, load);
    for (int l = 0; l < n; l++) {
        if (load[l] == e->link_used[l]) continue;
        char name[80];
        link_name(e, l, name, sizeof name);
        sim_out_printf(&e->links_out, "%lld.%09lld\t%s\t%.17g\t%.17g\n",
                       (long long)(e->now / SIM_SEC), (long long)(e->now % SIM_SEC), name, load[l],
                       link_bps(e, l));
        e->link_used[l] = load[l];
    }
    free(load);
}

/* Client c's job as far as it is known: when it ends, at the earliest, and no later than its
 * loss (see the header). */
static void project(sim_engine *e, int32_t c)
{
    sim_client *cl = &e->c[c];
    const sim_netjob *j = &e->nj[c];
    sim_time lat = e->spec.devices[c].latency_ns, t = e->now;
    sim_time flow_end = sim_net_finish(e->net, c);
    if (flow_end < 0) flow_end = sat_add(j->flow_start, j->own_ns); /* not solved yet */
    switch (j->phase) {
    case SIM_NJ_DOWN:
        t = sat_add(sat_add(sat_add(flow_end, lat), j->train_est), j->up_est);
        break;
    case SIM_NJ_TRAIN:
        t = sat_add(cl->job_train_end, j->up_est);
        break;
    case SIM_NJ_UP:
        t = sat_add(flow_end, lat);
        break;
    default:
        break;
    }
    if (t < e->now) t = e->now;
    cl->busy_until = t < j->off ? t : j->off;
}

/* Client c's transfer of bytes (> 0) in direction dir (0 up, 1 down) starts now. */
static void start_flow(sim_engine *e, int32_t c, int dir, double bytes)
{
    const sim_net_config *nc = e->spec.net;
    sim_netjob *j = &e->nj[c];
    int path[SIM_NET_PATH], np = 0, g = nc->group_of[c];
    double grp = g < 0 ? INFINITY : dir ? nc->groups[g].down : nc->groups[g].up;
    double srv = dir ? nc->server_down : nc->server_up;
    if (isfinite(grp)) path[np++] = 2 + 2 * g + dir;
    if (isfinite(srv)) path[np++] = dir;
    double down, up; /* this job's rates (drawn per transfer, or the profile's) */
    sim_eng_job_rates(e, c, e->c[c].job_id, &down, &up);
    double bps = dir ? down : up;
    /* the old model's duration, less its latency: what the flow takes at its own cap alone */
    j->own_ns = dev_transfer_ns(0, bytes, bps);
    j->flow_start = e->now;
    sim_net_start(e->net, c, e->now, 8.0 * bytes, bps, path, np);
    e->links_touched = 1;
}

void sim_eng_net_start(sim_engine *e, int32_t c, double down_bytes, uint64_t seq)
{
    sim_client *cl = &e->c[c];
    sim_netjob *j = &e->nj[c];
    j->work = (dev_work){0};
    j->off = dev_avail_next_change(&cl->avail, e->now);
    j->train_est = j->up_est = 0; /* until the job is placed (sim_eng_net_work) */
    j->phase = SIM_NJ_DOWN;
    j->flow_start = e->now;
    j->own_ns = 0;
    cl->job_start = e->now;
    cl->job_down_end = cl->job_train_end = DEV_TIME_NEVER; /* not known yet */
    if (j->off != DEV_TIME_NEVER)
        sim_queue_push_seq(&e->q, j->off, SIM_EV_JOB_LOST, c, cl->job_id, seq + 2);
    if (down_bytes > 0) {
        start_flow(e, c, 1, down_bytes);
    } else { /* nothing to send: the dispatch reaches the device after its latency */
        sim_time t = sat_add(e->now, e->spec.devices[c].latency_ns);
        if (t <= j->off) sim_queue_push_seq(&e->q, t, SIM_EV_DOWNLOAD_DONE, c, cl->job_id, seq);
    }
    project(e, c);
}

void sim_eng_net_work(sim_engine *e, int32_t c, const dev_job *job, const dev_phases *ph)
{
    sim_netjob *j = &e->nj[c];
    j->work = job->work;
    j->train_est = ph->train;
    j->up_est = ph->up;
    e->c[c].job_flops = ph->flops;
    project(e, c);
}

void sim_eng_net_settle(sim_engine *e)
{
    const sim_event *next = sim_queue_peek(&e->q);
    if (next && next->at == e->now) return; /* more changes may come at this instant */
    const int32_t *ch;
    int n = sim_net_settle(e->net, e->now, &ch);
    for (int i = 0; i < n; i++)
        project(e, ch[i]);
    if (e->links_touched && e->links_out.f) link_rows(e);
    e->links_touched = 0;
    sim_time t = sim_net_next(e->net);
    /* queued, unless it is already (a duplicate would only cost a pop) */
    if (t >= 0 && t != e->net_next) {
        sim_eng_schedule(e, t, SIM_EV_FLOW_END, -1, 0);
        e->net_next = t;
    }
}

/* Client c's flow ends now. */
static void flow_end(sim_engine *e, int32_t c)
{
    sim_client *cl = &e->c[c];
    sim_netjob *j = &e->nj[c];
    sim_net_stop(e->net, c, e->now);
    e->links_touched = 1;
    sim_time waited = e->now - j->flow_start - j->own_ns;
    if (waited > 0) j->wait_ns += waited; /* a flow alone can end a rounding's ns early */
    sim_time t = sat_add(e->now, e->spec.devices[c].latency_ns);
    if (t <= j->off)
        sim_eng_schedule(e, t, j->phase == SIM_NJ_DOWN ? SIM_EV_DOWNLOAD_DONE : SIM_EV_UPLOAD_DONE,
                         c, cl->job_id);
    project(e, c);
}

int sim_eng_net_flow_end(sim_engine *e, const sim_event *ev)
{
    if (ev->at == e->net_next) e->net_next = -1; /* the queued one: no longer queued */
    int n = sim_net_count(e->net);
    int32_t *due = sim_xmalloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    int k = sim_net_due(e->net, e->now, due);
    for (int i = 0; i < k; i++)
        flow_end(e, due[i]);
    free(due);
    return SIM_OK;
}

void sim_eng_net_download_done(sim_engine *e, int32_t c)
{
    sim_client *cl = &e->c[c];
    sim_netjob *j = &e->nj[c];
    j->phase = SIM_NJ_TRAIN;
    cl->job_down_end = e->now;
    sim_time d = dev_compute_ns(&e->spec.devices[c], &j->work, e->now);
    cl->job_train_end = sat_add(e->now, d);
    if (d == DEV_TIME_NEVER && j->off == DEV_TIME_NEVER) /* it can never finish: lost now */
        sim_eng_schedule(e, e->now, SIM_EV_JOB_LOST, c, cl->job_id);
    else if (cl->job_train_end <= j->off)
        sim_eng_schedule(e, cl->job_train_end, SIM_EV_TRAIN_DONE, c, cl->job_id);
    project(e, c);
}

void sim_eng_net_train_done(sim_engine *e, int32_t c)
{
    e->nj[c].phase = SIM_NJ_UP;
    start_flow(e, c, 0, sim_message_bytes(&e->spec, e->c[c].up_len));
    project(e, c);
}

void sim_eng_net_job_end(sim_engine *e, int32_t c)
{
    sim_client *cl = &e->c[c];
    if (sim_net_flow_of(e->net, c)) {
        sim_net_stop(e->net, c, e->now);
        e->links_touched = 1;
    }
    e->nj[c].phase = SIM_NJ_IDLE;
    cl->busy_ns += e->now - cl->job_start;
    cl->busy_until = e->now;
}

/* ---------------------------------------------------------------------------------------- */
/* checkpoints: [flows in id order, the clients' netjobs, the links changed and not yet solved,
 * net_next, [links.tsv's length, each link's load as its last row gave it, each link's load as
 * the net keeps it]] (a checkpoint of before links.tsv has 4: the file is then written anew from
 * the resume on) */

/* clang-format off */
#define INT(st, m, lo, hi) {#m, SIM_F_INT, offsetof(st, m), sizeof(((st *)0)->m), 0, {0, lo}, {0, hi}}
#define F64(st, m) {#m, SIM_F_F64, offsetof(st, m), sizeof(((st *)0)->m), 0, {0, 0}, {0, 0}}
/* clang-format on */
#define COUNT(t) (sizeof(t) / sizeof((t)[0]))

static const sim_field flow_fields[] = {
        INT(sim_net_flow, id, 0, INT32_MAX),
        INT(sim_net_flow, n_path, 0, SIM_NET_PATH),
        INT(sim_net_flow, path[0], 0, INT32_MAX),
        INT(sim_net_flow, path[1], 0, INT32_MAX),
        F64(sim_net_flow, cap),
        F64(sim_net_flow, size),
        F64(sim_net_flow, rem),
        F64(sim_net_flow, rate),
        INT(sim_net_flow, t0, 0, INT64_MAX),
        INT(sim_net_flow, finish, -1, INT64_MAX),
};

static const sim_field netjob_fields[] = {
        F64(sim_netjob, work.flops),
        F64(sim_netjob, work.flops_masked),
        F64(sim_netjob, work.flops_masked_nnz),
        F64(sim_netjob, work.bytes),
        F64(sim_netjob, work.steps),
        INT(sim_netjob, off, 0, INT64_MAX),
        INT(sim_netjob, train_est, 0, INT64_MAX),
        INT(sim_netjob, up_est, 0, INT64_MAX),
        INT(sim_netjob, flow_start, 0, INT64_MAX),
        INT(sim_netjob, own_ns, 0, INT64_MAX),
        INT(sim_netjob, wait_ns, 0, INT64_MAX),
        INT(sim_netjob, phase, SIM_NJ_IDLE, SIM_NJ_UP),
};

void sim_eng_net_pack(sim_engine *e, msgpack_packer *pk)
{
    int n = sim_net_count(e->net);
    sim_net_flow *fl = sim_xcalloc((size_t)(n > 0 ? n : 1), sizeof *fl);
    sim_net_flows(e->net, fl);
    int *dirty = sim_xmalloc(sizeof(int) * (size_t)sim_net_links(e->net));
    int nd = sim_net_dirty_links(e->net, dirty);
    int64_t len = 0;
    if (e->links_out.f && !sim_out_flush(&e->links_out, 1, NULL)) len = ftello(e->links_out.f);
    msgpack_pack_array(pk, 5);
    sim_record_pack_list(pk, flow_fields, COUNT(flow_fields), fl, sizeof *fl, (size_t)n);
    sim_record_pack_list(pk, netjob_fields, COUNT(netjob_fields), e->nj, sizeof *e->nj,
                         (size_t)e->n);
    msgpack_pack_array(pk, (size_t)nd);
    for (int i = 0; i < nd; i++)
        msgpack_pack_int(pk, dirty[i]);
    msgpack_pack_int64(pk, e->net_next);
    int nl = sim_net_links(e->net);
    double *load = sim_xmalloc(sizeof(double) * (size_t)nl);
    sim_net_link_loads(e->net, load);
    msgpack_pack_array(pk, 2 * (size_t)nl + 1);
    msgpack_pack_int64(pk, len);
    for (int l = 0; l < nl; l++)
        msgpack_pack_double(pk, e->link_used[l]);
    for (int l = 0; l < nl; l++)
        msgpack_pack_double(pk, load[l]);
    free(load);
    free(fl);
    free(dirty);
}

const char *sim_eng_net_unpack(sim_engine *e, const msgpack_object *o, char *why, size_t n)
{
    if (!o || o->type != MSGPACK_OBJECT_ARRAY ||
        (o->via.array.size != 4 && o->via.array.size != 5) ||
        o->via.array.ptr[0].type != MSGPACK_OBJECT_ARRAY ||
        o->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY ||
        o->via.array.ptr[1].via.array.size != (uint32_t)e->n ||
        o->via.array.ptr[2].type != MSGPACK_OBJECT_ARRAY)
        return "not [flows, a job per client, links changed, next flow end, links.tsv]";
    int n_links = 2 + 2 * e->spec.net->n_groups;
    const msgpack_object *lo = o->via.array.size == 5 ? &o->via.array.ptr[4] : NULL;
    if (lo) {
        if (lo->type != MSGPACK_OBJECT_ARRAY || lo->via.array.size != 2 * (uint32_t)n_links + 1 ||
            lo->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            lo->via.array.ptr[0].via.u64 > INT64_MAX)
            return "links.tsv";
        for (int l = 1; l <= 2 * n_links; l++)
            if (lo->via.array.ptr[l].type != MSGPACK_OBJECT_FLOAT64 &&
                lo->via.array.ptr[l].type != MSGPACK_OBJECT_FLOAT32)
                return "links.tsv";
        e->links_len = (int64_t)lo->via.array.ptr[0].via.u64;
        for (int l = 0; l < n_links; l++)
            e->link_used[l] = lo->via.array.ptr[1 + l].via.f64;
    }
    e->links_touched = 1; /* a change may wait for its settle: rows differ only if so */
    const msgpack_object *nx = &o->via.array.ptr[3];
    if (nx->type == MSGPACK_OBJECT_POSITIVE_INTEGER && nx->via.u64 <= INT64_MAX)
        e->net_next = (sim_time)nx->via.u64;
    else if (nx->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && nx->via.i64 == -1)
        e->net_next = -1;
    else
        return "next flow end";
    const msgpack_object *jobs = o->via.array.ptr[1].via.array.ptr;
    for (int32_t c = 0; c < e->n; c++) {
        const char *bad =
                sim_record_read(&jobs[c], netjob_fields, COUNT(netjob_fields), &e->nj[c], NULL);
        if (!bad && (e->nj[c].phase != SIM_NJ_IDLE) != (e->c[c].busy != 0)) bad = "phase";
        if (bad) {
            snprintf(why, n, "client %d: %s", c, bad);
            return why;
        }
    }
    const msgpack_object *fo = &o->via.array.ptr[0];
    for (uint32_t i = 0; i < fo->via.array.size; i++) {
        sim_net_flow f;
        const char *bad =
                sim_record_read(&fo->via.array.ptr[i], flow_fields, COUNT(flow_fields), &f, NULL);
        if (!bad && (f.id >= e->n || sim_net_flow_of(e->net, f.id))) bad = "id";
        if (!bad && (e->nj[f.id].phase != SIM_NJ_DOWN && e->nj[f.id].phase != SIM_NJ_UP))
            bad = "phase";
        for (int k = 0; !bad && k < f.n_path; k++)
            if (f.path[k] >= n_links) bad = "path";
        if (!bad && !(f.cap > 0 && (f.finish < 0 ? f.rate == 0 && f.rem == f.size : f.rate > 0) &&
                      f.size > 0 && f.rem >= 0 && f.rem <= f.size))
            bad = "rate";
        if (bad) {
            snprintf(why, n, "flow %u: %s", i, bad);
            return why;
        }
        sim_net_restore(e->net, &f);
    }
    const msgpack_object *dl = &o->via.array.ptr[2];
    for (uint32_t i = 0; i < dl->via.array.size; i++) {
        const msgpack_object *l = &dl->via.array.ptr[i];
        if (l->type != MSGPACK_OBJECT_POSITIVE_INTEGER || l->via.u64 >= (uint64_t)n_links) {
            snprintf(why, n, "changed link %u: not a link", i);
            return why;
        }
        sim_net_mark(e->net, (int)l->via.u64);
    }
    if (lo) { /* the loads as kept, once the flows are back (which summed them afresh) */
        double *load = sim_xmalloc(sizeof(double) * (size_t)n_links);
        for (int l = 0; l < n_links; l++)
            load[l] = lo->via.array.ptr[1 + n_links + l].via.f64;
        sim_net_restore_loads(e->net, load);
        free(load);
    }
    return NULL;
}
