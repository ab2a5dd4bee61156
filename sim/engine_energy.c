/* sim/engine_energy.c -- the engine's side of energy and batteries (devices/energy.h): runs in
 * which some client's profile has power figures (the scenario's devices.energy) keep a sim_energy
 * per client (e->en); without, e->en is NULL and nothing here is called.
 *
 * The hooks, each a call from the loop:
 *   eligible (engine.c)         a client below its battery's floor takes no job, nor one that
 *                               does not charge under federation.participation: charging-only
 *   engine_jobs.c               at dispatch the battery is brought to now
 *                               (sim_eng_energy_start); the job's death time comes from its
 *                               phases (sim_eng_energy_death): when it comes before the job's
 *                               end the job is lost then. A job placed after its dispatch (the
 *                               lookahead) is priced from the battery as it was at dispatch,
 *                               which nothing moves meanwhile (the client is busy: eligible
 *                               does not test it), and a death before the job's training could
 *                               end at the earliest is known at dispatch (the training's length
 *                               does not matter to it)
 *   handle (engine.c)           at a job's end, arrived or lost, its energy is counted and
 *                               drawn (sim_eng_energy_job_end)
 *   sync.c, async.c             a round or refill that found no client waits for a battery's
 *                               recharge, or its charging to start, as for a client coming
 *                               online (sim_eng_next_change)
 *   sim_eng_sel_client          what a selection policy sees of a battery (sim_eng_energy_view)
 *   outputs.c                   each event's energy and reason, clients.tsv's columns
 * A battery is moved forward only at those calls, at the event's time, so a resumed run and a
 * run with any worker count do the same arithmetic in the same order. Between jobs a battery
 * draws its profile's idle power; during a job each phase's.
 */
#include "sim/engine_int.h"

#include "nn/pack.h"
#include "sim/record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sim_eng_has_energy(const sim_engine *e)
{
    return e->en != NULL;
}

int sim_eng_energy_new(sim_engine *e, sim_err *err)
{
    int any = 0;
    for (int32_t c = 0; c < e->n && !any; c++)
        any = e->spec.devices[c].power.set;
    if (!any) return SIM_OK;
    if (e->net)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "devices.energy with a network: not supported yet (a job's phase times, "
                        "which its battery's floor is found from, are known only as its flows "
                        "end)");
    e->en = sim_xcalloc((size_t)e->n, sizeof *e->en);
    for (int32_t c = 0; c < e->n; c++) {
        const dev_profile *p = &e->spec.devices[c];
        sim_rng r;
        sim_rng_seed(&r, e->spec.seed, SIM_RNG_AVAIL, (uint64_t)c); /* as the client's avail */
        dev_batt_init(&e->en[c].b, &p->battery, &p->avail, &r, e->spec.seed, c);
    }
    return SIM_OK;
}

void sim_eng_energy_free(sim_engine *e)
{
    free(e->en);
    e->en = NULL;
}

int sim_eng_energy_ok(sim_engine *e, int32_t c)
{
    const dev_profile *p = &e->spec.devices[c];
    dev_batt_advance(&e->en[c].b, &p->battery, e->now, p->power.idle_w);
    return dev_batt_ok(&e->en[c].b, &p->battery);
}

void sim_eng_energy_start(sim_engine *e, int32_t c)
{
    const dev_profile *p = &e->spec.devices[c];
    dev_batt_advance(&e->en[c].b, &p->battery, e->now, p->power.idle_w);
}

sim_time sim_eng_energy_death(const sim_engine *e, int32_t c, sim_time down_end, sim_time train_end,
                              sim_time up_end, sim_time end)
{
    const dev_profile *p = &e->spec.devices[c];
    sim_time d =
            dev_batt_death(&e->en[c].b, &p->battery, &p->power, down_end, train_end, up_end, end);
    return d < end ? d : DEV_TIME_NEVER;
}

/* Move client c's battery through its job's phases (they started at job_start) up to t. */
static void through_job(sim_engine *e, int32_t c, sim_time t)
{
    const dev_profile *p = &e->spec.devices[c];
    const sim_client *cl = &e->c[c];
    dev_batt *b = &e->en[c].b;
    const sim_time ends[3] = {cl->job_down_end, cl->job_train_end, t};
    const double draw[3] = {p->power.down_w, p->power.train_w, p->power.up_w};
    for (int i = 0; i < 3; i++)
        if (b->at < t) dev_batt_advance(b, &p->battery, ends[i] < t ? ends[i] : t, draw[i]);
}

int sim_eng_energy_job_end(sim_engine *e, int32_t c)
{
    const dev_profile *p = &e->spec.devices[c];
    const sim_client *cl = &e->c[c];
    sim_energy *en = &e->en[c];
    double j = dev_energy_job(&p->power, cl->job_start, cl->job_down_end, cl->job_train_end, e->now,
                              e->now);
    en->energy_j += j;
    e->energy_j += j;
    through_job(e, c, e->now);
    int died = en->job_dies;
    en->job_dies = 0;
    if (died) {
        /* at the floor, whatever the last bits of the sums say: charging must lift it above */
        double floor_j = p->battery.floor * p->battery.capacity_j;
        if (en->b.level_j > floor_j) en->b.level_j = floor_j;
        en->battery_lost++;
    }
    return died;
}

void sim_eng_energy_view(const sim_engine *e, int32_t c, double *battery_j, double *charging_w)
{
    const dev_battery *b = &e->spec.devices[c].battery;
    const dev_batt *bt = &e->en[c].b;
    if (b->capacity_j > 0) *battery_j = bt->level_j - b->floor * b->capacity_j;
    *charging_w = dev_batt_charging(bt, b, bt->at) ? b->charge_w : 0;
}

int sim_eng_energy_charging(sim_engine *e, int32_t c)
{
    const dev_profile *p = &e->spec.devices[c];
    if (!(p->battery.capacity_j > 0)) return 1;
    dev_batt_advance(&e->en[c].b, &p->battery, e->now, p->power.idle_w);
    return dev_batt_charging(&e->en[c].b, &p->battery, e->now);
}

sim_time sim_eng_next_change(sim_engine *e, int32_t c)
{
    sim_client *cl = &e->c[c];
    sim_time t = dev_avail_next_change(&cl->avail, e->now);
    if (!e->en) return t;
    const dev_profile *p = &e->spec.devices[c];
    if (e->spec.fed.charging_only && p->battery.capacity_j > 0) { /* it may start charging */
        sim_time ch = dev_batt_charge_change(&e->en[c].b, &p->battery, e->now);
        if (ch < t) t = ch;
    }
    if (sim_eng_energy_ok(e, c)) return t;
    sim_time up = dev_batt_above(&e->en[c].b, &p->battery, &p->power);
    return up < t ? up : t;
}

void sim_eng_energy_event(const sim_engine *e, int kind, int32_t who, double *joules,
                          const char **reason)
{
    if (who < 0) return;
    const sim_client *cl = &e->c[who];
    const dev_power *pw = &e->spec.devices[who].power;
    switch (kind) {
    case SIM_EV_DOWNLOAD_DONE:
        *joules = pw->down_w * sim_time_to_s(e->now - cl->job_start);
        break;
    case SIM_EV_TRAIN_DONE:
        *joules = pw->train_w * sim_time_to_s(e->now - cl->job_down_end);
        break;
    case SIM_EV_UPLOAD_DONE:
        *joules = pw->up_w * sim_time_to_s(e->now - cl->job_train_end);
        break;
    case SIM_EV_JOB_LOST:
        *joules = e->now < cl->job_down_end ? pw->down_w * sim_time_to_s(e->now - cl->job_start)
                  : e->now < cl->job_train_end
                          ? pw->train_w * sim_time_to_s(e->now - cl->job_down_end)
                          : pw->up_w * sim_time_to_s(e->now - cl->job_train_end);
        *reason = e->en[who].job_dies ? "battery" : "offline";
        break;
    default:
        break;
    }
}

void sim_eng_energy_cols(sim_engine *e, int32_t c, char *buf, size_t n)
{
    buf[0] = 0;
    if (!e->en) return;
    if (c < 0) {
        snprintf(buf, n, "energy_j\tbattery_lost\tbattery_end\t");
        return;
    }
    const dev_profile *p = &e->spec.devices[c];
    sim_energy *en = &e->en[c];
    /* a job still out when the run ended: its phases so far, drawn but not counted as a job's */
    if (e->c[c].busy)
        through_job(e, c, e->now);
    else
        dev_batt_advance(&en->b, &p->battery, e->now, p->power.idle_w);
    if (p->battery.capacity_j > 0)
        snprintf(buf, n, "%.9f\t%d\t%.6f\t", en->energy_j, en->battery_lost,
                 en->b.level_j / p->battery.capacity_j);
    else
        snprintf(buf, n, "%.9f\t%d\tnan\t", en->energy_j, en->battery_lost);
}

/* ---------------------------------------------------------------------------------------- */
/* checkpoints: [the total, a record per client] (after the network's part, when there is one) */

/* clang-format off */
#define INT(st, m, lo, hi) {#m, SIM_F_INT, offsetof(st, m), sizeof(((st *)0)->m), 0, {0, lo}, {0, hi}}
#define F64(st, m) {#m, SIM_F_F64, offsetof(st, m), sizeof(((st *)0)->m), 0, {0, 0}, {0, 0}}
#define WORDS(st, m) {#m, SIM_F_WORDS, offsetof(st, m), sizeof(((st *)0)->m), 0, {0, 0}, {0, 0}}
/* clang-format on */
#define COUNT(t) (sizeof(t) / sizeof((t)[0]))

static const sim_field energy_fields[] = {
        F64(sim_energy, b.level_j),
        INT(sim_energy, b.at, 0, INT64_MAX),
        /* the charging process's position and stream (dev_batt_init rebuilt the rest) */
        INT(sim_energy, b.chg.on, 0, 1),
        INT(sim_energy, b.chg.until, INT64_MIN, INT64_MAX),
        INT(sim_energy, b.chg.last, INT64_MIN, INT64_MAX),
        WORDS(sim_energy, b.chg.rng.s),
        F64(sim_energy, energy_j),
        INT(sim_energy, battery_lost, 0, INT32_MAX),
        INT(sim_energy, job_dies, 0, 1),
};

void sim_eng_energy_pack(sim_engine *e, msgpack_packer *pk)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_double(pk, e->energy_j);
    sim_record_pack_list(pk, energy_fields, COUNT(energy_fields), e->en, sizeof *e->en,
                         (size_t)e->n);
}

const char *sim_eng_energy_unpack(sim_engine *e, const msgpack_object *o, char *why, size_t n)
{
    if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2 ||
        o->via.array.ptr[0].type != MSGPACK_OBJECT_FLOAT64 ||
        o->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY ||
        o->via.array.ptr[1].via.array.size != (uint32_t)e->n)
        return "not [energy, a battery per client]";
    e->energy_j = o->via.array.ptr[0].via.f64;
    const msgpack_object *b = o->via.array.ptr[1].via.array.ptr;
    for (int32_t c = 0; c < e->n; c++) {
        const char *bad =
                sim_record_read(&b[c], energy_fields, COUNT(energy_fields), &e->en[c], NULL);
        if (!bad && e->en[c].b.at > e->now) bad = "b.at";
        if (bad) {
            snprintf(why, n, "client %d: %s", c, bad);
            return why;
        }
    }
    return NULL;
}
