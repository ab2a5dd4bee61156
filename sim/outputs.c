/* sim/outputs.c -- the run's outputs (engine.h): metrics.tsv, clients.tsv, events.msgpack and
 * timeline.tsv in the run folder (and, with a network, links.tsv, which engine_net.c writes), the
 * text trace, the progress line and the algorithm's report.
 *
 * metrics.tsv's columns are one table (metrics_cols, then the algorithm's own: fl_algo.columns),
 * which writes both the header and every row, so the two cannot disagree; columns that exist only
 * in some runs carry their condition.
 * Every write is checked as it is made (sim_out): the first failure is kept and stops the run
 * (sim_eng_outputs_failed), never a crash or a silently short file.
 */
#include "sim/engine_int.h"

#include "nn/pack.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const out_names[OUT_COUNT] = {"metrics.tsv", "clients.tsv", "events.msgpack",
                                                 "timeline.tsv"};

void sim_eng_ckpt_path(const sim_engine *e, char *buf, size_t n)
{
    snprintf(buf, n, "%s/checkpoint.msgpack", e->spec.out_dir);
}

/* ---------------------------------------------------------------------------------------- */
/* metrics.tsv */

/* How a value prints: every value is a double, integers among them exactly. */
enum { COL_INT, COL_TIME, COL_G6, COL_F6 };

/* A column (or a family of them): its header name, its format, where its value is in
 * sim_metrics. shifts: one column per eval.shift, named name + the shift (%g), the i-th's value
 * i doubles after off. has: the column is there only when it returns nonzero (NULL: always).
 * A run's columns are this table resolved once (resolve_columns), the algorithm's appended;
 * header and rows walk that.
 */
typedef struct metrics_col_spec {
    const char *name;
    int fmt; /* COL_* */
    size_t off;
    int shifts;
    int (*has)(const sim_engine *e);
} metrics_col_spec;

#define M(field) offsetof(sim_metrics, field)
static const metrics_col_spec metrics_cols[] = {
        {"round", COL_INT, M(round), 0, NULL},
        {"sim_time_s", COL_TIME, M(time_s), 0, NULL},
        {"bytes_up", COL_INT, M(bytes_up), 0, NULL},
        {"bytes_down", COL_INT, M(bytes_down), 0, NULL},
        {"client_flops", COL_G6, M(flops), 0, NULL},
        {"client_energy_j", COL_TIME, M(energy_j), 0, sim_eng_has_energy}, /* to the nJ */
        {"acc_global", COL_F6, M(acc_global), 0, NULL},
        {"loss_global", COL_F6, M(loss_global), 0, NULL},
        {"acc_pers_mean", COL_F6, M(mean), 0, NULL},
        {"acc_pers_p10", COL_F6, M(p10), 0, NULL},
        {"acc_pers_pooled", COL_F6, M(pooled), 0, NULL},
        {"participants", COL_INT, M(participants), 0, NULL},
        {"dropped", COL_INT, M(dropped), 0, NULL},
        {"density", COL_F6, M(density), 0, NULL},
        {"acc_shift_", COL_F6, M(shift), 1, NULL},
        /* the base algorithm's evaluation, from this same training */
        {"acc_base_mean", COL_F6, M(base_mean), 0, sim_eng_has_base},
        {"acc_base_p10", COL_F6, M(base_p10), 0, sim_eng_has_base},
        {"acc_base_shift_", COL_F6, M(base_shift), 1, sim_eng_has_base},
        {"acc_val_mean", COL_F6, M(val), 0, sim_eng_has_val},
};
#undef M

static void resolve_columns(sim_engine *e)
{
    size_t n_spec = sizeof metrics_cols / sizeof metrics_cols[0];
    int ns = e->spec.eval.n_shift;
    e->mcol = sim_xmalloc(sizeof *e->mcol * (n_spec * (size_t)(ns > 0 ? ns : 1) + FL_MAX_COLUMNS));
    e->n_mcol = 0;
    for (size_t i = 0; i < n_spec; i++) {
        const metrics_col_spec *s = &metrics_cols[i];
        if (s->has && !s->has(e)) continue;
        for (int k = 0; k < (s->shifts ? ns : 1); k++) {
            sim_metrics_col *c = &e->mcol[e->n_mcol++];
            if (s->shifts)
                snprintf(c->name, sizeof c->name, "%s%g", s->name, e->spec.eval.shift[k]);
            else
                snprintf(c->name, sizeof c->name, "%s", s->name);
            c->fmt = s->fmt;
            c->off = s->off + sizeof(double) * (size_t)k;
        }
    }
    /* the algorithm's own, their values in sim_metrics.algo (eval.c reads them) */
    const fl_column *ac = e->spec.algo->columns;
    for (int i = 0; ac && ac[i].name; i++) {
        assert(i < FL_MAX_COLUMNS && strlen(ac[i].name) < FL_COLUMN_NAME && ac[i].value);
        for (int j = 0; j < e->n_mcol; j++)
            assert(strcmp(e->mcol[j].name, ac[i].name)); /* a name is unique in the file */
        sim_metrics_col *c = &e->mcol[e->n_mcol++];
        snprintf(c->name, sizeof c->name, "%s", ac[i].name);
        c->fmt = ac[i].format == FL_COL_INT ? COL_INT : ac[i].format == FL_COL_G6 ? COL_G6 : COL_F6;
        c->off = offsetof(sim_metrics, algo) + sizeof(double) * (size_t)i;
    }
}

void sim_eng_metrics_row(sim_engine *e, const sim_metrics *row)
{
    sim_out *m = &e->out[OUT_METRICS];
    if (!m->f) return;
    for (int i = 0; i < e->n_mcol; i++) {
        const sim_metrics_col *c = &e->mcol[i];
        double v;
        memcpy(&v, (const char *)row + c->off, sizeof v);
        const char *sep = i ? "\t" : "";
        switch (c->fmt) {
        case COL_INT:
            sim_out_printf(m, "%s%.0f", sep, v);
            break;
        case COL_TIME:
            sim_out_printf(m, "%s%.9f", sep, v);
            break;
        case COL_G6:
            sim_out_printf(m, "%s%.6g", sep, v);
            break;
        default:
            sim_out_printf(m, "%s%.6f", sep, v);
        }
    }
    sim_out_printf(m, "\n");
    sim_out_flush(m, 0, NULL); /* a failure is kept in m->errnum */
}

static void metrics_header(sim_engine *e)
{
    sim_out *m = &e->out[OUT_METRICS];
    const sim_run_spec *spec = &e->spec;
    sim_out_printf(m, "# fedsim run %s seed=%llu algorithm=%s clients=%d", spec->name,
                   (unsigned long long)spec->seed, spec->algo->name, e->n);
    if (sim_eng_has_base(e)) sim_out_printf(m, " base=%s", spec->algo->base);
    /* eval.clients: the personalized columns are over a fixed sample of the clients */
    int n_split = 0, k = spec->eval.personalized ? sim_eng_eval_sample(e, NULL, &n_split) : 0;
    if (spec->eval.personalized && k < n_split)
        sim_out_printf(m, " eval_clients=%d/%d", k, n_split);
    sim_out_printf(m, "\n");
    for (int i = 0; i < e->n_mcol; i++)
        sim_out_printf(m, "%s%s", i ? "\t" : "", e->mcol[i].name);
    sim_out_printf(m, "\n");
    /* the columns, for readers of a run going on (plots, summary); a failure is in errnum */
    sim_out_flush(m, 0, NULL);
}

/* ---------------------------------------------------------------------------------------- */
/* the event log, the trace and the timeline */

static int write_events_cb(void *data, const char *buf, size_t len)
{
    sim_out *o = data;
    sim_out_write(o, buf, len);
    return o->errnum ? -1 : 0;
}

/* The first write that failed, to an output or the trace, as the run's error (a run must not go
 * on, and above all not checkpoint or finish, past output it lost). */
int sim_eng_outputs_failed(sim_engine *e, sim_err *err)
{
    for (int i = 0; i < OUT_COUNT; i++)
        if (e->out[i].errnum) return sim_out_flush(&e->out[i], 0, err);
    if (e->links_out.errnum) return sim_out_flush(&e->links_out, 0, err);
    if (e->eval_failed) {
        if (err) *err = e->eval_err;
        return e->eval_failed;
    }
    if (e->rows_failed) return sim_eng_rows_failed(e, err);
    if (e->trace_errnum)
        return sim_fail(err, SIM_EIO, e->spec.trace_path ? e->spec.trace_path : "trace", 0, 0,
                        "cannot write: %s", strerror(e->trace_errnum));
    return SIM_OK;
}

/* Every event: [time_ns, kind, client, round, bytes, flops] in events.msgpack (with energy,
 * energy_j and reason after them: sim_eng_energy_event), and as one text line in the trace when
 * one is asked for. */
void sim_eng_log_event(sim_engine *e, int kind, int32_t who, double bytes, double flops)
{
    e->tot.events++;
    double joules = 0;
    const char *reason = "";
    if (e->en) sim_eng_energy_event(e, kind, who, &joules, &reason);
    if (e->out[OUT_EVENTS].f) {
        msgpack_packer *pk = &e->events_pk;
        msgpack_pack_array(pk, e->en ? 8 : 6);
        msgpack_pack_int64(pk, e->now);
        msgpack_pack_int(pk, kind);
        msgpack_pack_int32(pk, who);
        msgpack_pack_int32(pk, e->round);
        msgpack_pack_double(pk, bytes);
        msgpack_pack_double(pk, flops);
        if (e->en) {
            msgpack_pack_double(pk, joules);
            nn_pack_str(pk, reason);
        }
    }
    if (e->spec.trace && !e->trace_errnum) {
        errno = 0;
        char en[64] = "";
        if (e->en)
            snprintf(en, sizeof en, " energy=%.9f%s%s", joules, *reason ? " reason=" : "", reason);
        if (fprintf(e->spec.trace,
                    "[%16.9f] %-13s client=%d round=%d from=%d bytes=%.0f flops=%.0f%s\n",
                    sim_time_to_s(e->now), sim_event_names[kind], who, e->round,
                    who >= 0 ? e->c[who].job_round : -1, bytes, flops, en) < 0)
            e->trace_errnum = errno ? errno : EIO;
    }
}

/* One job phase of client c in timeline.tsv, written when it ends (finished, lost or late). */
void sim_eng_timeline_row(sim_engine *e, int32_t c, const char *phase, sim_time start,
                          const char *outcome)
{
    if (!e->out[OUT_TIMELINE].f) return;
    /* seconds printed exactly from integer ns: a million-job run writes millions of these rows,
     * and integer formatting is several times cheaper than %.9f of a double */
    sim_out_printf(&e->out[OUT_TIMELINE], "%d\t%d\t%s\t%lld.%09lld\t%lld.%09lld\t%s\t%s\n", c,
                   e->c[c].job_round, phase, (long long)(start / SIM_SEC),
                   (long long)(start % SIM_SEC), (long long)(e->now / SIM_SEC),
                   (long long)(e->now % SIM_SEC), outcome, e->spec.devices[c].name);
}

/* Flush what observers read, then let them look (engine.h: on_tick). A failed flush is kept in
 * the output's errnum, which stops the run (sim_eng_outputs_failed). */
void sim_eng_tick(sim_engine *e, int final)
{
    if (!e->spec.on_tick) return;
    if (e->out[OUT_TIMELINE].f) sim_out_flush(&e->out[OUT_TIMELINE], 0, NULL);
    if (e->links_out.f) sim_out_flush(&e->links_out, 0, NULL);
    e->spec.on_tick(e->spec.tick_arg, e->round, final);
}

void sim_eng_progress(sim_engine *e, int final)
{
    if (e->spec.quiet) return;
    /* on a terminal one line refreshes every second; in a log, a line every 10 seconds */
    int tty = isatty(fileno(stderr));
    double w = sim_eng_wall_s();
    if (!final && w - e->wall_last < (tty ? 1.0 : 10.0)) return;
    e->wall_last = w;
    int total = e->spec.fed.rounds;
    int done = e->round - e->rounds_at_start;
    double el = w - e->wall_start, eta = done > 0 ? el * (total - e->round) / done : 0;
    char t[32], up[32], down[32];
    sim_format_time(t, sizeof t, e->now);
    sim_format_bytes(up, sizeof up, e->tot.bytes_up);
    sim_format_bytes(down, sizeof down, e->tot.bytes_down);
    /* no accuracy before the first evaluation, nor ever in a --cost-only run: none shown */
    double acc = isnan(e->tot.acc_global) ? e->tot.acc_pers : e->tot.acc_global;
    char acc_text[32] = "";
    if (!isnan(acc)) snprintf(acc_text, sizeof acc_text, "  acc %.4f", acc);
    fprintf(stderr, "%s%s %d/%d  sim %s  up %s down %s%s  wall %.0fs  eta %.0fs%s", tty ? "\r" : "",
            e->spec.fed.mode == SIM_SYNC ? "round" : "aggregation", e->round, total, t, up, down,
            acc_text, el, eta, tty ? "   " : "\n");
    if (final && tty) fprintf(stderr, "\n");
}

/* ---------------------------------------------------------------------------------------- */
/* opening and closing */

int sim_eng_outputs_create(sim_engine *e, sim_err *err)
{
    char path[1100];
    sim_eng_ckpt_path(e, path, sizeof path);
    unlink(path); /* a stale checkpoint of an earlier run here would resume the wrong run */
    int rc = SIM_OK;
    for (int i = 0; i < OUT_COUNT && !rc; i++) {
        snprintf(path, sizeof path, "%s/%s", e->spec.out_dir, out_names[i]);
        rc = sim_out_open(&e->out[i], path, "wb", err);
    }
    if (!rc && e->net) rc = sim_eng_net_links_open(e, 0, err);
    return rc;
}

/* Resume: every output must still hold at least what the checkpoint counted (all are checked
 * before any is cut), then each is cut back to that length and written on from there. */
int sim_eng_outputs_reopen(sim_engine *e, const uint64_t out_len[OUT_COUNT], sim_err *err)
{
    char path[OUT_COUNT][1100];
    for (int i = 0; i < OUT_COUNT; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", e->spec.out_dir, out_names[i]);
        struct stat st;
        if (stat(path[i], &st))
            return sim_fail(err, SIM_EIO, path[i], 0, 0, "cannot resume: %s", strerror(errno));
        if ((uint64_t)st.st_size < out_len[i])
            return sim_fail(err, SIM_EINVAL, path[i], 0, 0,
                            "cannot resume: %lld bytes, shorter than the %llu the checkpoint "
                            "counted",
                            (long long)st.st_size, (unsigned long long)out_len[i]);
    }
    for (int i = 0; i < OUT_COUNT; i++) {
        int rc = sim_out_open(&e->out[i], path[i], "r+b", err);
        if (rc) return rc;
        if (ftruncate(fileno(e->out[i].f), (off_t)out_len[i]) || fseeko(e->out[i].f, 0, SEEK_END))
            return sim_fail(err, SIM_EIO, path[i], 0, 0, "cannot resume: %s", strerror(errno));
    }
    return e->net ? sim_eng_net_links_open(e, 1, err) : SIM_OK;
}

int sim_eng_outputs_begin(sim_engine *e, sim_err *err)
{
    resolve_columns(e);
    if (e->out[OUT_EVENTS].f)
        msgpack_packer_init(&e->events_pk, &e->out[OUT_EVENTS], write_events_cb);
    if (e->resumed) return SIM_OK; /* the files already hold their headers */
    if (e->out[OUT_METRICS].f) metrics_header(e);
    if (e->out[OUT_TIMELINE].f) {
        sim_out_printf(&e->out[OUT_TIMELINE],
                       "# fedsim run %s: one row per job phase that ended (ok, lost, or "
                       "late: uploaded after its round closed)\n",
                       e->spec.name);
        sim_out_printf(&e->out[OUT_TIMELINE],
                       "client\tround\tphase\tstart_s\tend_s\toutcome\tdevice\n");
    }
    if (e->out[OUT_CLIENTS].f) {
        char en[64];
        sim_eng_energy_cols(e, -1, en, sizeof en);
        sim_out_printf(&e->out[OUT_CLIENTS],
                       "client\tdevice\texcluded\tjobs\tarrived\taggregated\tlate\tlost\t"
                       "bytes_up\t"
                       "bytes_down\tflops\tbusy_s\t%s%sacc_final\n",
                       e->net ? "net_wait_s\t" : "", en);
    }
    if (e->out[OUT_EVENTS].f) {
        /* header: the field names and the kind names, so the file describes itself */
        msgpack_packer *pk = &e->events_pk;
        msgpack_pack_map(pk, 2);
        nn_pack_str(pk, "fields");
        static const char *const fields[] = {"time_ns", "kind",  "client",   "round",
                                             "bytes",   "flops", "energy_j", "reason"};
        int nf = e->en ? 8 : 6; /* energy_j and reason with energy only */
        msgpack_pack_array(pk, (size_t)nf);
        for (int i = 0; i < nf; i++)
            nn_pack_str(pk, fields[i]);
        nn_pack_str(pk, "kinds");
        msgpack_pack_array(pk, SIM_EV_COUNT);
        for (int i = 0; i < SIM_EV_COUNT; i++)
            nn_pack_str(pk, sim_event_names[i]);
    }
    return sim_eng_outputs_failed(e, err);
}

int sim_eng_outputs_finish(sim_engine *e, sim_err *err)
{
    if (e->out[OUT_CLIENTS].f) { /* its rows mark a finished run (engine.h) */
        /* updates that arrived in time but wait for an aggregation the run ended before (a sync
         * round max_time cut short, an async buffer not yet full): neither aggregated nor late.
         * A closed sync round keeps its arrivals listed until the next one starts. */
        int *waiting = sim_xcalloc((size_t)e->n, sizeof *waiting),
            sync = e->spec.fed.mode == SIM_SYNC;
        for (int i = 0; i < e->n_arrived && (!sync || e->round_open); i++)
            waiting[sync ? e->arrived[i] : e->buf[i].client]++;
        for (int32_t c = 0; c < e->n; c++) {
            const sim_client *cl = &e->c[c];
            /* with a network, net_wait_s before acc_final, which readers take as the last */
            char wait[40] = "";
            if (e->net) snprintf(wait, sizeof wait, "%.9f\t", sim_time_to_s(e->nj[c].wait_ns));
            char en[96]; /* with energy: energy_j, battery_lost, battery_end, before acc_final */
            sim_eng_energy_cols(e, c, en, sizeof en);
            sim_out_printf(&e->out[OUT_CLIENTS],
                           "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%.6g\t%.9f\t%s%s%.6f\n", c,
                           e->spec.devices[c].name, cl->excluded, cl->jobs, cl->arrived,
                           cl->arrived - cl->late - waiting[c], cl->late, cl->lost, cl->bytes_up,
                           cl->bytes_down, cl->flops, sim_time_to_s(cl->busy_ns), wait, en,
                           cl->acc);
        }
        free(waiting);
    }
    /* everything on disk before the checkpoint goes: until then it resumes a failed finish */
    if (e->spec.trace && fflush(e->spec.trace) && !e->trace_errnum) e->trace_errnum = errno;
    int rc = sim_eng_outputs_failed(e, err);
    for (int i = 0; i < OUT_COUNT && !rc; i++)
        rc = sim_out_close(&e->out[i], 1, err);
    if (!rc) rc = sim_out_close(&e->links_out, 1, err);
    return rc;
}

/* Written whole: made in memory, then replacing the file at once (sim_write_file). */
int sim_eng_write_report(sim_engine *e, sim_err *err)
{
    if (!e->spec.out_dir || !e->spec.algo->report || e->spec.env.cost_only) return SIM_OK;
    char path[1100], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", e->spec.out_dir, e->spec.algo->report_file);
    FILE *f = open_memstream(&text, &len);
    if (!f) return sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno));
    e->spec.algo->report(e->server, f);
    int rc = fclose(f) ? sim_fail(err, SIM_EIO, path, 0, 0, "cannot write: %s", strerror(errno))
                       : sim_write_file(path, text, len, err);
    free(text);
    return rc;
}

void sim_eng_outputs_free(sim_engine *e)
{
    for (int i = 0; i < OUT_COUNT; i++) /* closed unchecked only on error or stop paths */
        sim_out_discard(&e->out[i]);
    sim_out_discard(&e->links_out);
    free(e->mcol);
}
