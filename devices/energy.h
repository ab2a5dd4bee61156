/* devices/energy.h -- what a job costs a device in energy, and a battery that runs out.
 *
 * A profile's power figures (`power: {train: 2 W, up: 1.2 W, down: 0.9 W, idle: 0.05 W}`) are
 * the device's draw in each phase of a job (download, training, upload) and between jobs (idle).
 * A job's energy is each phase's power times its simulated duration (dev_energy_job): what
 * clients.tsv's energy_j sums. The idle draw is the device's own, not the job's: it drains the
 * battery between jobs, and is not counted in energy_j.
 *
 * A battery (`battery: {capacity: 15 Wh, initial: 80% | {uniform: [30%, 100%]}, floor: 20%,
 * charging: {rate: 10 W, when: online}}`) holds a level in joules. It charges at `rate` whenever
 * its charging process is on: `when` is never, always, online or offline (the client's
 * availability process, or its complement: phones charging while they are eligible, or while
 * they are away), or a process of its own written as `availability:` is ({kind: markov, ...},
 * {kind: trace, file: ..., loop: 24 h}). The level changes at (charge - draw) W, a constant on
 * every stretch where neither the phase nor the charging process changes, and stays within
 * [0, capacity]. So when a job would bring it down to its floor is known at the job's dispatch
 * from its phase times (dev_batt_death): the engine loses the job at that nanosecond, and the
 * client takes no job until charging brings it above the floor again (dev_batt_above).
 *
 * A battery's state (dev_batt) is its level at a time and its charging process. The level moves
 * forward only (dev_batt_advance, at non-decreasing times); the predictions work on a copy.
 */
#ifndef DEV_ENERGY_H
#define DEV_ENERGY_H

#include "devices/avail.h"
#include "sim/base.h"
#include "sim/rng.h"
#include "sim/units.h"
#include "sim/yaml.h"

/* Watts; set 0 without power figures (no energy counted). */
typedef struct dev_power {
    int set;
    double train_w, up_w, down_w, idle_w;
} dev_power;

typedef enum dev_charge_when {
    DEV_CHARGE_NEVER = 0,
    DEV_CHARGE_ALWAYS,
    DEV_CHARGE_ONLINE,  /* while the client's availability process is online */
    DEV_CHARGE_OFFLINE, /* while it is offline */
    DEV_CHARGE_OWN,     /* its own process (dev_battery.process) */
} dev_charge_when;

/* capacity_j 0: no battery (mains powered: nothing runs out). */
typedef struct dev_battery {
    double capacity_j;
    double init_lo, init_hi; /* initial level, a fraction of capacity: uniform in [lo, hi] per
                                client (lo == hi: that level) */
    double floor;            /* [0, 1): the share of capacity a job may not go below */
    double charge_w;         /* charging rate, W (0: never charges) */
    dev_charge_when when;
    dev_avail_spec process; /* DEV_CHARGE_OWN: when it charges (one owned trace reference) */
} dev_battery;

/* One battery in a run. */
typedef struct dev_batt {
    double level_j; /* at time at */
    sim_time at;
    dev_avail_proc chg; /* when it charges (an ALWAYS process for never and always) */
    int chg_invert;     /* charging = !online(chg): offline and never */
} dev_batt;

/* The energy of a job whose phases run [start, down_end), [down_end, train_end),
 * [train_end, up_end), cut at end (the job lost then; end >= up_end: all of it). */
double dev_energy_job(const dev_power *pw, sim_time start, sim_time down_end, sim_time train_end,
                      sim_time up_end, sim_time end);

/* Start client c's battery: its level drawn from (seed, SIM_RNG_ENERGY, c) (uniform in
 * [init_lo, init_hi]; nothing drawn when they are equal), its charging process the client's
 * availability (stream avail, as the engine seeds it) or its own, from the same energy stream.
 * A profile without a battery gives a battery the predictions never stop. */
void dev_batt_init(dev_batt *b, const dev_battery *spec, const dev_avail_spec *avail,
                   const sim_rng *avail_stream, uint64_t seed, int32_t c);
/* Move the level on from b->at to t (>= b->at) with the device drawing draw_w. */
void dev_batt_advance(dev_batt *b, const dev_battery *spec, sim_time t, double draw_w);
/* The first instant a job starting at b->at with these phase ends (as dev_energy_job) brings the
 * level down to the floor, before end; DEV_TIME_NEVER when it does not (or without a battery). */
sim_time dev_batt_death(const dev_batt *b, const dev_battery *spec, const dev_power *pw,
                        sim_time down_end, sim_time train_end, sim_time up_end, sim_time end);
/* 1 when it charges at t (>= b->at; the charging process read on a copy), and the first time
 * after t it starts or stops (DEV_TIME_NEVER: never). A battery that never charges (rate 0)
 * does not charge. */
int dev_batt_charging(const dev_batt *b, const dev_battery *spec, sim_time t);
sim_time dev_batt_charge_change(const dev_batt *b, const dev_battery *spec, sim_time t);
/* 1 when the level is above the floor (always, without a battery). */
int dev_batt_ok(const dev_batt *b, const dev_battery *spec);
/* When the level, drawing idle power from b->at on, is first above the floor: b->at when it is
 * already, DEV_TIME_NEVER when charging never gets it there. */
sim_time dev_batt_above(const dev_batt *b, const dev_battery *spec, const dev_power *pw);

/* Read `power:` and `battery:` maps (devices/profile.c calls them): units mandatory, errors at
 * the value's file:line:col. On error *out is zeroed. */
int dev_power_from_yaml(dev_power *out, const sim_yaml *node, sim_err *err);
int dev_battery_from_yaml(dev_battery *out, const sim_yaml *node, sim_err *err);
/* Copy (taking a trace reference) and destroy (dropping it, zeroing b). */
void dev_battery_copy(dev_battery *dst, const dev_battery *src);
void dev_battery_destroy(dev_battery *b);
/* ", power train 2 W up 1.2 W down 0.9 W idle 0.05 W, battery 15 Wh from 30-100% floor 20%
 * charging 10 W online" or "" */
void dev_energy_describe(const dev_power *pw, const dev_battery *b, char *buf, size_t n);

#endif /* DEV_ENERGY_H */
