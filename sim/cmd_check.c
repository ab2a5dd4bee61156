/* sim/cmd_check.c -- `fedsim check`: a scenario validated and resolved, with what one job of the
 * average client costs on each device of the mix (priced as the algorithm prices round 1's),
 * whether the model fits, and warnings.
 */
#include "nn/pack.h"
#include "sim/cmd.h"
#include "sim/cost.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* With `network:`, what a round's downloads take on the server's downlink, shared by the round's
 * fan-out: all of them cross it at once, so the last cannot end before it has carried every one.
 * A bound, not the run's figure: groups, own links slower than their share and (async) staggered
 * starts make it longer, which the table's download column (a client alone) brackets. */
static void print_contention(const sim_scenario *sc, double msg, sim_time lo, sim_time hi)
{
    const sim_fed_config *f = &sc->spec.fed;
    int n = sc->part.n_clients;
    int k = f->mode == SIM_SYNC ? (int)ceil(f->per_round * f->over_commit - 1e-9) : f->concurrency;
    if (k > n) k = n;
    double d = sc->spec.net->server_down;
    char cap[32], m[32], all[32], a[32], b[32];
    sim_format_bytes(m, sizeof m, msg);
    sim_format_time(a, sizeof a, lo);
    sim_format_time(b, sizeof b, hi);
    if (!isfinite(d)) {
        printf("# network: the server's downlink is unlimited; a download takes what its own link "
               "and its group's allow (alone: %s to %s)\n",
               a, b);
        return;
    }
    sim_format_rate(cap, sizeof cap, d);
    sim_format_time(all, sizeof all, sim_time_from_s(8.0 * msg * k / d));
    printf("# network: %s %d downloads of %s at once on the server's %s downlink: the last ends "
           "no sooner than %s (8 x bytes x %d / capacity); alone on its own link one takes %s "
           "to %s\n",
           f->mode == SIM_SYNC ? "a round starts (per_round x over_commit)"
                               : "async keeps (concurrency) up to",
           k, m, cap, all, k, a, b);
}

/* With devices.energy: each device's table job in joules, phase by phase (power x the phase's
 * time), and how many of them a battery affords from full down to its floor (idle and charging
 * aside: what the jobs alone take). */
static void print_energy(const sim_scenario *sc, const sim_cli_prices *pr, double flops, double act,
                         int steps)
{
    int any = 0;
    for (int k = 0; k < pr->n_cls; k++)
        any |= sc->devices[pr->cls[k].first].power.set;
    if (!any) return;
    printf("# energy per device, the same job; jobs a full battery affords down to its floor "
           "(idle and charging aside):\n");
    printf("# %-20s %12s %12s %12s %12s %12s\n", "device", "download", "train", "upload", "job",
           "per battery");
    for (int k = 0; k < pr->n_cls; k++) {
        const sim_cli_class *cl = &pr->cls[k];
        const dev_profile *d = &sc->devices[cl->first];
        if (!d->power.set) {
            printf("# %-20s %12s\n", cl->name, "no power figures");
            continue;
        }
        dev_phases ph;
        sim_cli_price_job(pr, k, d, flops, act, steps, &ph);
        double j[3] = {dev_energy_job(&d->power, 0, ph.down_end, 0, 0, DEV_TIME_NEVER),
                       dev_energy_job(&d->power, ph.down_end, ph.down_end, ph.train_end,
                                      ph.train_end, DEV_TIME_NEVER),
                       dev_energy_job(&d->power, ph.train_end, ph.train_end, ph.train_end,
                                      ph.up_end, DEV_TIME_NEVER)};
        double job =
                dev_energy_job(&d->power, 0, ph.down_end, ph.train_end, ph.up_end, DEV_TIME_NEVER);
        char per[32] = "mains";
        const dev_battery *b = &d->battery;
        if (b->capacity_j > 0)
            snprintf(per, sizeof per, "%.0f",
                     job > 0 ? floor(b->capacity_j * (1 - b->floor) / job) : INFINITY);
        printf("# %-20s %10.4g J %10.4g J %10.4g J %10.4g J %12s\n", cl->name, j[0], j[1], j[2],
               job, per);
    }
}

static int cmd_check(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    run_opts o;
    if (sim_cli_parse_run(&o, argc, argv, OPTS_CHECK)) return SIM_CLI_BAD_ARGS;
    sim_err err = {0};
    sim_scenario sc;
    if (sim_cli_load_scenario(&sc, &o, &err)) return sim_cli_print_err(&err);
    if (sim_yaml_write(sc.doc, stdout, &err)) {
        sim_scenario_destroy(&sc);
        return sim_cli_print_err(&err);
    }
    /* what a job costs per device class, and which clients can never contribute: computed
     * before the summary is printed, so an algorithm's error comes after the scenario alone */
    sim_cli_prices pr;
    if (sim_cli_prices_init(&pr, &sc, 1, &err)) {
        sim_cli_prices_destroy(&pr);
        sim_scenario_destroy(&sc);
        return sim_cli_print_err(&err);
    }
    /* predicted cost of one job of an average client, per device profile in the mix */
    int n = sc.part.n_clients;
    double avg = 0;
    for (int c = 0; c < n; c++)
        avg += sc.part.n[c];
    avg /= n;
    int B = sc.cfg.batch_size, per_epoch = (int)ceil(avg / B);
    int steps = sc.cfg.local_steps > 0 ? sc.cfg.local_steps : sc.cfg.local_epochs * per_epoch;
    double flops = pr.step.flops * steps, act = pr.step.bytes * steps, mem = pr.mem;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    nn_pack_params(&sb, &sc.arch, pr.m.params);
    double msg = sim_message_bytes(&sc.spec, sb.size);
    msgpack_sbuffer_destroy(&sb);
    char ms[32], mm[32], ma[32];
    sim_format_bytes(ms, sizeof ms, msg);
    sim_format_bytes(mm, sizeof mm, mem);
    sim_format_bytes(ma, sizeof ma, act);
    printf("\n# model %s: %zu parameters; a job of %.0f samples (%d steps of %d) executes %.3g "
           "FLOPs and writes %s of activations; a dense message is %s; training needs %s\n",
           sc.model, sc.arch.layout.n_params, avg, steps, B, flops, ma, ms, mm);
    /* the clients' own splits: what they train on, are tested on and validate on, on average */
    double nt = 0, nv = 0;
    for (int c = 0; c < n; c++) {
        nt += sc.part.n_test ? sc.part.n_test[c] : 0;
        nv += sc.part.n_val ? sc.part.n_val[c] : 0;
    }
    printf("# a client's samples, on average: %.1f to train on, %.1f to test on (its local test "
           "split), %.1f to validate on\n",
           avg, nt / n, nv / n);
    /* what the clients' capacities make of the model, for algorithms that size it by client */
    double rlo = 1, rhi = 0, rsum = 0, wlo = 1, whi = 0, wsum = 0;
    for (int c = 0; c < n && sc.spec.algo->client_width; c++) {
        double r = sc.capacity[c], w = sc.spec.algo->client_width(&sc.spec.env, c);
        rlo = r < rlo ? r : rlo, rhi = r > rhi ? r : rhi, rsum += r;
        wlo = w < wlo ? w : wlo, whi = w > whi ? w : whi, wsum += w;
    }
    if (sc.spec.algo->client_width)
        printf("# capacity r_i: %.3g … %.3g, mean %.3g; models trained %.3g … %.3g wide, mean "
               "%.3g (a sparse one counts as √density wide)\n",
               rlo, rhi, rsum / n, wlo, whi, wsum / n);
    const sim_sel_policy *sel = sc.spec.fed.selection;
    if (sel) /* named in the scenario (none: uniform, and check says nothing, as before) */
        printf("# selection %s: %s\n", sel->name, sel->doc);
    int warned = sim_cli_warnings(&sc, &pr, stdout, "# warning: ");
    /* Each device's row prices the average client's job as the algorithm prices its first
     * client on that device in round 1, the training scaled to the average client's samples. */
    printf("# per device, the average client's job as the algorithm prices round 1's:\n");
    printf("# %-20s %8s %12s %12s %12s %12s %6s\n", "device", "clients", "download", "train",
           "upload", "job", "fits");
    sim_time down_lo = DEV_TIME_NEVER, down_hi = 0;
    for (int k = 0; k < pr.n_cls; k++) {
        const sim_cli_class *cl = &pr.cls[k];
        char fits[32] = "yes";
        if (cl->fit < cl->count)
            snprintf(fits, sizeof fits, cl->fit ? "%d/%d" : "NO", cl->fit, cl->count);
        dev_phases ph;
        sim_cli_price_job(&pr, k, &sc.devices[cl->first], flops, act, steps, &ph);
        char a[32], b[32], cc[32], j[32];
        sim_format_time(a, sizeof a, ph.down);
        sim_format_time(b, sizeof b, ph.train);
        sim_format_time(cc, sizeof cc, ph.up);
        sim_format_time(j, sizeof j, ph.up_end);
        printf("# %-20s %8d %12s %12s %12s %12s %6s\n", cl->name, cl->count, a, b, cc, j, fits);
        down_lo = ph.down < down_lo ? ph.down : down_lo;
        down_hi = ph.down > down_hi ? ph.down : down_hi;
    }
    print_energy(&sc, &pr, flops, act, steps);
    if (sc.spec.net) print_contention(&sc, msg, down_lo, down_hi);
    sim_cli_prices_destroy(&pr);
    sim_scenario_destroy(&sc);
    if (warned && o.strict) {
        fflush(stdout);
        fprintf(stderr, "fedsim: check --strict: %d warning%s (above) count as errors\n", warned,
                warned > 1 ? "s" : "");
        return 2;
    }
    return 0;
}

static const char check_usage[] =
        "usage: fedsim check SCENARIO [--set key=value]... [--seed N] [--strict]\n"
        "\n"
        "Validate, print the resolved scenario and per-device predicted job cost (the\n"
        "average client's, as the algorithm prices its first round: the width, budget or\n"
        "masks trained and the messages sent), memory fit and warnings: settings that run\n"
        "as asked but may not be what was meant, and clients that can never contribute,\n"
        "counted per device with the reason: a device that cannot hold the model (never\n"
        "selected), an availability trace that stays off until max_time (or for ever,\n"
        "without max_time), a sync deadline shorter than the client's predicted job (its\n"
        "round-1 job on its own samples, at the device's speed at time 0: always late),\n"
        "a devices.mix share that rounds to no client. fedsim run prints the same\n"
        "warnings. --strict: warnings are errors (exit 2). --set and --seed as run's.\n";

const sim_command sim_cmd_check = {
        .name = "check",
        .summary = "validate a scenario; print it resolved, each device's job cost and warnings",
        .usage = check_usage,
        .fn = cmd_check,
};
