/* sim/cmd_warn.c -- what `fedsim check` prices per device class, and the warnings check and run
 * print (sim/cmd.h): clients that can never contribute, and settings that run as asked but may
 * not be what was meant.
 *
 * "Never contribute" is said only where it can be decided before the run:
 *   memory    the device cannot hold the model the client trains: the engine never selects it
 *             (the same test as the engine's, sim_width_memory and dev_fits);
 *   online    the availability process, started from the client's own stream as the engine
 *             starts it, is offline at 0 and never changes before max_time (without max_time:
 *             never at all; a Markov process always comes back, so only a trace can be);
 *   deadline  sync rounds with a deadline dispatch every job at the round's start and close at
 *             the deadline at the latest, so a job that takes longer always arrives late; the
 *             job is the client's class's round-1 job as `check` prices it (the algorithm's
 *             width, budget or masks and messages) scaled to the client's own samples, at its
 *             device's speed at time 0 (a speed trace or a later round's job may differ);
 *   mix       a devices.mix entry with a share above 0 that gets no client once the shares are
 *             rounded to whole clients.
 * A client is named under its first reason in that order, never twice.
 */
#include "sim/cmd.h"
#include "sim/cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sim_cli_prices_init(sim_cli_prices *p, const sim_scenario *sc, int price, sim_err *err)
{
    memset(p, 0, sizeof *p);
    int n = sc->part.n_clients, B = sc->cfg.batch_size;
    nn_model_init(&p->m, &sc->arch, B);
    nn_model_step_cost(&p->m, B, &p->step);
    p->mem = (double)nn_model_memory_bytes(&p->m, B);
    p->cls = sim_xcalloc((size_t)(n > 0 ? n : 1), sizeof *p->cls);
    p->of = sim_xmalloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    /* classes in order of their first client; a client's class by its device's name */
    for (int c = 0; c < n; c++) {
        int k = 0;
        while (k < p->n_cls && strcmp(p->cls[k].name, sc->devices[c].name))
            k++;
        if (k == p->n_cls)
            p->cls[p->n_cls++] = (sim_cli_class){.name = sc->devices[c].name, .first = c};
        p->of[c] = k;
    }
    /* how many of a class's clients hold the model they train (their width's), as the engine
     * decides; p->need[c] is what client c's training needs */
    p->need = sim_xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    double width = 1, need = p->mem;
    for (int c = 0; c < n; c++) {
        double w = sim_client_width(&sc->spec, c);
        if (w != width) need = sim_width_memory(&sc->spec, width = w, &p->m);
        p->need[c] = need;
        sim_cli_class *k = &p->cls[p->of[c]];
        k->count++;
        k->fit += dev_fits(&sc->devices[c], need);
    }
    if (!price) return 0;
    /* Each class's job as the algorithm prices its first client's in round 1 (a cost-only job:
     * the width, budget or masks it trains and the messages it exchanges), against FedAvg's on
     * the same samples: the ratios are what the algorithm saves (or adds) in training. */
    fl_env env = sc->spec.env;
    env.cost_only = 1;
    void *server = sc->spec.algo->server_new(&env, err), *dense = NULL;
    if (server) dense = fl_dense->server_new(&env, err);
    if (!dense) {
        if (server) sc->spec.algo->server_free(server);
        return -1;
    }
    fl_worker wk;
    fl_worker_init(&wk);
    int rc = 0;
    for (int k = 0; k < p->n_cls && !rc; k++) {
        sim_cli_class *cl = &p->cls[k];
        int c = cl->first;
        const dev_profile *d = &sc->devices[c];
        fl_job job = {c,
                      0,
                      NULL,
                      sc->spec.algo->job_down(server, c, 0, NULL),
                      NULL,
                      0,
                      (uint64_t)c << 32};
        fl_job ref = {c, 0, NULL, fl_dense->job_down(dense, c, 0, NULL), NULL, 0, job.stream};
        fl_result res, rd;
        fl_result_init(&res);
        fl_result_init(&rd);
        if (sc->spec.algo->client_train(&env, &job, &wk, &res, err) ||
            fl_dense->client_train(&env, &ref, &wk, &rd, err))
            rc = -1;
        dev_work rw = sim_cost_work(&res.cost, res.steps);
        double work = dev_work_flops(d, &rw);
        cl->ratio = rd.cost.flops > 0 ? work / rd.cost.flops : 1;
        cl->act_ratio = rd.cost.bytes > 0 ? res.cost.bytes / rd.cost.bytes : 1;
        cl->step_ratio = rd.steps > 0 ? (double)res.steps / rd.steps : 1;
        cl->down_bytes = sim_message_bytes(&sc->spec, job.down_len);
        cl->up_bytes = sim_message_bytes(&sc->spec, res.up_bytes);
        fl_result_destroy(&res);
        fl_result_destroy(&rd);
    }
    fl_worker_destroy(&wk);
    sc->spec.algo->server_free(server);
    fl_dense->server_free(dense);
    p->priced = !rc;
    return rc;
}

void sim_cli_prices_destroy(sim_cli_prices *p)
{
    nn_model_destroy(&p->m);
    free(p->cls);
    free(p->of);
    free(p->need);
    memset(p, 0, sizeof *p);
}

void sim_cli_price_job(const sim_cli_prices *p, int k, const dev_profile *d, double flops,
                       double act, double steps, dev_phases *ph)
{
    const sim_cli_class *cl = &p->cls[k];
    /* the dense training scaled by the algorithm's ratios (its FLOPs are executed ones already,
     * nothing masked is left to skip) */
    dev_job aj = {.work = {.flops = flops * cl->ratio,
                           .bytes = act * cl->act_ratio,
                           .steps = steps * cl->step_ratio},
                  .down_bytes = cl->down_bytes,
                  .up_bytes = cl->up_bytes};
    dev_price(d, &aj, 0, ph);
}

/* Client c's dense job as its training counts it: its steps over its own samples, each epoch
 * ending on a short batch (fl_steps_cost, a cost-only job's), priced by its class's ratios. */
static void price_client(const sim_cli_prices *p, const sim_scenario *sc, int c, dev_phases *ph)
{
    int n = sc->part.n[c];
    int64_t steps = fl_job_steps(&sc->spec.env, n);
    nn_cost job = {0};
    fl_steps_cost(&p->m, n, sc->cfg.batch_size, steps, &job);
    sim_cli_price_job(p, p->of[c], &sc->devices[c], job.flops, job.bytes, (double)steps, ph);
}

void sim_cli_predict_jobs(const sim_cli_prices *p, const sim_scenario *sc, double *out_s,
                          double *out_j)
{
    for (int c = 0; c < sc->part.n_clients; c++) {
        dev_phases ph;
        price_client(p, sc, c, &ph);
        out_s[c] = ph.up_end == DEV_TIME_NEVER ? INFINITY : 1e-9 * (double)ph.up_end;
        if (out_j)
            out_j[c] = dev_energy_job(&sc->devices[c].power, 0, ph.down_end, ph.train_end,
                                      ph.up_end, DEV_TIME_NEVER);
    }
}

/* Whether client c's device is offline from 0 until the run's horizon (max_time, or for ever). */
static int never_online(const sim_scenario *sc, int c)
{
    const dev_avail_spec *s = &sc->devices[c].avail;
    if (s->kind != DEV_AVAIL_TRACE) return 0; /* always, or Markov: online again some time */
    sim_rng r;
    sim_rng_seed(&r, sc->spec.seed, SIM_RNG_AVAIL, (uint64_t)c); /* as the engine's */
    dev_avail_proc proc;
    dev_avail_init(&proc, s, &r);
    if (dev_avail_online(&proc, 0)) return 0;
    sim_time next = dev_avail_next_change(&proc, 0), end = sc->spec.fed.max_time;
    return end > 0 ? next >= end : next == DEV_TIME_NEVER;
}

/* Clients that train a wider model than their devices.capacity affords (a p-wide model costs
 * about p² of the full one; p counts NAME@p's width too). Capacities derived from a device's
 * memory and compute are left out: the engine already enforces those (memory fit, time). */
static int capacity_warning(const sim_scenario *sc, char *msg, size_t cap)
{
    const char *at = strchr(sc->model, '@');
    double pm = at ? strtod(at + 1, NULL) : 1, rmin = 1;
    int n = sc->part.n_clients, over = 0;
    for (int c = 0; c < n; c++) {
        if (sc->capacity_derived && !(sc->devices[c].capacity > 0)) continue;
        double p = sim_client_width(&sc->spec, c) * pm;
        if (p * p <= sc->capacity[c] * (1 + 1e-9)) continue;
        over++;
        rmin = fmin(rmin, sc->capacity[c]);
    }
    if (!over) return 0;
    double q = 1; /* the widest 1/2^k model such a client can afford */
    while (q * q > rmin * (1 + 1e-9) && q > 1.0 / 1024)
        q /= 2;
    snprintf(msg, cap,
             "%d of %d clients train a wider model than their devices.capacity r_i affords "
             "(width² ≤ r_i; r_i down to %.3g): %s does not narrow %s that far here. Every "
             "client can afford model: %.*s@%g",
             over, n, rmin, sc->spec.algo->name, sc->model,
             (int)(at ? (size_t)(at - sc->model) : strlen(sc->model)), sc->model, q);
    return 1;
}

/* "X", or "X to Y" when the two formatted figures differ. */
static void range_of(char *buf, size_t n, const char *lo, const char *hi)
{
    if (!strcmp(lo, hi))
        snprintf(buf, n, "%s", lo);
    else
        snprintf(buf, n, "%s to %s", lo, hi);
}

/* devices.mix entries with a share above 0 that no client got (of those the population left). */
static int mix_warnings(const sim_scenario *sc, const sim_cli_prices *p, FILE *f,
                        const char *prefix)
{
    const sim_yaml *dv = sim_yaml_get(sc->doc, "devices"),
                   *mix = dv ? sim_yaml_get(dv, "mix") : NULL;
    int warned = 0, n = sc->part.n_clients - sc->n_population; /* the mix's clients */
    for (int i = 0; n > 0 && mix && mix->kind == SIM_YAML_SEQ && i < mix->n; i++) {
        const sim_yaml *pn = sim_yaml_get(mix->items[i], "profile"),
                       *sh = sim_yaml_get(mix->items[i], "share");
        if (!pn || !pn->value || !sh || !sh->value || !(strtod(sh->value, NULL) > 0)) continue;
        int got = 0;
        for (int k = 0; k < p->n_cls && !got; k++)
            got = !strcmp(p->cls[k].name, pn->value);
        if (got) continue;
        fprintf(f,
                "%sdevices.mix gives %s a share of %s, which rounds to 0 of %d clients: no "
                "client runs on it (raise its share or the number of clients)\n",
                prefix, pn->value, sh->value, n);
        warned++;
    }
    return warned;
}

int sim_cli_warnings(const sim_scenario *sc, const sim_cli_prices *p, FILE *f, const char *prefix)
{
    int warned = 0, n = sc->part.n_clients;
    char warning[512];
    if (sc->spec.algo->warn && sc->spec.algo->warn(&sc->spec.env, warning, sizeof warning))
        fprintf(f, "%s%s\n", prefix, warning), warned++;
    if (capacity_warning(sc, warning, sizeof warning))
        fprintf(f, "%s%s\n", prefix, warning), warned++;
    warned += mix_warnings(sc, p, f, prefix);
    const sim_fed_config *fed = &sc->spec.fed;
    int deadline = fed->mode == SIM_SYNC && fed->deadline > 0 && p->priced;
    char end[32], dl[32], range[80], have[80];
    sim_format_time(end, sizeof end, fed->max_time);
    sim_format_time(dl, sizeof dl, fed->deadline);
    for (int k = 0; k < p->n_cls; k++) {
        const sim_cli_class *cl = &p->cls[k];
        int unfit = 0, offline = 0, late = 0;
        double need_lo = INFINITY, need_hi = 0, mem_lo = INFINITY, mem_hi = 0;
        sim_time t_lo = DEV_TIME_NEVER, t_hi = 0;
        for (int c = cl->first; c < n; c++) {
            if (p->of[c] != k) continue;
            const dev_profile *d = &sc->devices[c];
            if (!dev_fits(d, p->need[c])) {
                unfit++;
                need_lo = fmin(need_lo, p->need[c]), need_hi = fmax(need_hi, p->need[c]);
                mem_lo = fmin(mem_lo, d->memory_bytes), mem_hi = fmax(mem_hi, d->memory_bytes);
                continue;
            }
            if (never_online(sc, c)) {
                offline++;
                continue;
            }
            if (!deadline) continue;
            dev_phases ph;
            price_client(p, sc, c, &ph);
            if (ph.up_end <= fed->deadline) continue;
            late++;
            t_lo = ph.up_end < t_lo ? ph.up_end : t_lo;
            t_hi = ph.up_end > t_hi ? ph.up_end : t_hi;
        }
        char lo[32], hi[32];
        if (unfit) {
            sim_format_bytes(lo, sizeof lo, need_lo), sim_format_bytes(hi, sizeof hi, need_hi);
            range_of(range, sizeof range, lo, hi);
            sim_format_bytes(lo, sizeof lo, mem_lo), sim_format_bytes(hi, sizeof hi, mem_hi);
            range_of(have, sizeof have, lo, hi);
            fprintf(f,
                    "%s%d of %d clients (%s) cannot hold the model they train: training needs "
                    "%s and their devices have %s of memory: they are never selected\n",
                    prefix, unfit, n, cl->name, range, have);
            warned++;
        }
        if (offline) {
            fprintf(f, "%s%d of %d clients (%s) are never online %s%s: they never get a job\n",
                    prefix, offline, n, cl->name, fed->max_time > 0 ? "before max_time " : "",
                    fed->max_time > 0 ? end : "(their availability trace stays off)");
            warned++;
        }
        if (late) {
            if (t_hi == DEV_TIME_NEVER)
                snprintf(range, sizeof range, "jobs that never finish");
            else {
                sim_format_time(lo, sizeof lo, t_lo), sim_format_time(hi, sizeof hi, t_hi);
                range_of(range, sizeof range, lo, hi);
                strcat(range, " per job");
            }
            fprintf(f,
                    "%s%d of %d clients (%s) need %s (round 1's, predicted) and the deadline "
                    "is %s: their updates will always be late\n",
                    prefix, late, n, cl->name, range, dl);
            warned++;
        }
    }
    return warned;
}
