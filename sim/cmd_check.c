/* sim/cmd_check.c -- `fedsim check`: a scenario validated and resolved, with what one job of the
 * average client costs on each device of the mix (priced as the algorithm prices round 1's),
 * whether the model fits, the clients' private states on disk and in memory, and warnings.
 */
#include "nn/pack.h"
#include "sim/budget.h"
#include "sim/cmd.h"
#include "sim/cost.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

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

/* The clients' private states (issue 41): one's size, measured, and what the run would need. */
typedef struct state_plan {
    size_t state;     /* what the store keeps for a client that trained: its private state and
                         the server's row for it (0: the algorithm keeps neither) */
    size_t row;       /* of it, the server's row (fl_rows) */
    int client;       /* the client whose job measured it, -1 when none was trained */
    double clients;   /* clients that may end the run holding a state, at most */
    double disk;      /* RUN_DIR/state.mdb's predicted bytes */
    double budget;    /* the cache's bytes (--state-memory, or sim_state_budget_default) */
    int budget_given; /* --state-memory was */
    char dir[1100];   /* the run folder a `fedsim run` with the same arguments writes */
    double free_disk; /* bytes free there (statvfs), or FEDSIM_TEST_DISK_FREE's */
    int free_known;   /* free_disk could be read */
} state_plan;

/* The server's rows as a measure: none read, the longest put kept (ctx: a size_t). */
static int row_none(void *ctx, int32_t c, void *row, size_t len)
{
    (void)ctx, (void)c, (void)row, (void)len;
    return 0;
}

static void row_ignore(void *ctx, int32_t c, const char *what)
{
    (void)ctx, (void)c, (void)what; /* none is read */
}

static void row_measure(void *ctx, int32_t c, const void *row, size_t len)
{
    size_t *most = ctx;
    (void)c, (void)row;
    if (len > *most) *most = len;
}

/* One real job (not cost-only) of the client with the fewest samples (the cheapest to train), of
 * one local step, on the server as server_new makes it: its result's private state is what the
 * engine keeps for every client that has trained, and the row the server's absorbing and
 * aggregating it writes for the client, if the algorithm keeps per-client rows. Their size into p;
 * a cost-only scenario trains nothing and keeps no state. -1 with err when the algorithm fails. */
static int measure_state(const sim_scenario *sc, state_plan *p, sim_err *err)
{
    p->client = -1;
    if (sc->spec.env.cost_only) return 0;
    int c = -1;
    for (int i = 0; i < sc->part.n_clients; i++)
        if (sc->part.n[i] > 0 && (c < 0 || sc->part.n[i] < sc->part.n[c])) c = i;
    if (c < 0) return 0;
    /* one local step: a state's shape (the models, masks or momentum kept) does not depend on
     * how long the job trains, and a scenario's smallest client may still train for minutes */
    fl_config cfg = *sc->spec.env.cfg;
    cfg.local_steps = 1;
    fl_env env = sc->spec.env;
    env.cfg = &cfg;
    size_t row = 0;
    fl_rows rows = {row_none, row_measure, row_ignore, &row};
    env.rows = &rows;
    const fl_algo *a = sc->spec.algo;
    void *server = a->server_new(&env, err);
    if (!server) return -1;
    msgpack_sbuffer down;
    msgpack_sbuffer_init(&down);
    size_t len = a->job_down(server, c, 0, &down);
    fl_job job = {c, 0, down.data, len, NULL, 0, (uint64_t)c << 32};
    fl_worker wk;
    fl_worker_init(&wk);
    fl_result res;
    fl_result_init(&res);
    int rc = a->client_train(&env, &job, &wk, &res, err);
    if (!rc && res.up_bytes > 0) { /* the rows the server keeps for it, if any */
        rc = a->server_absorb(server, c, res.up.data, res.up.size, 1, 1, err);
        if (!rc) a->server_aggregate(server);
    }
    if (!rc) {
        p->state = res.priv.size + row;
        p->row = row;
        p->client = c;
    }
    fl_result_destroy(&res);
    fl_worker_destroy(&wk);
    msgpack_sbuffer_destroy(&down);
    a->server_free(server);
    return rc ? -1 : 0;
}

/* Jobs a run keeps in flight at most: a sync round's selection (per_round x over_commit), or
 * async's concurrency; no more than the clients. */
static int jobs_in_flight(const sim_scenario *sc)
{
    const sim_fed_config *f = &sc->spec.fed;
    int n = sc->part.n_clients;
    int k = f->mode == SIM_SYNC ? (int)ceil(f->per_round * f->over_commit - 1e-9) : f->concurrency;
    return k < n ? k : n;
}

/* The rest of p from its measured state: how many clients may hold one (a sync run dispatches
 * rounds x its selection's jobs at most; async's dispatches are not bounded as cheaply: every
 * client), the database's size, and the free space where the run would write it. */
static void plan_states(const sim_scenario *sc, state_plan *p)
{
    int n = sc->part.n_clients;
    double jobs = sc->spec.fed.mode == SIM_SYNC ? (double)sc->spec.fed.rounds * jobs_in_flight(sc)
                                                : INFINITY;
    p->clients = p->state ? (jobs < n ? jobs : n) : 0;
    p->disk = sim_state_disk_bytes(p->state, p->clients);
    /* as run names it, and the nearest folder of it that exists already, for statvfs */
    sim_cli_run_dir(sc, p->dir, sizeof p->dir);
    char at[1100];
    snprintf(at, sizeof at, "%s", p->dir);
    struct statvfs vfs;
    for (;;) {
        if (!statvfs(at, &vfs)) {
            p->free_disk = (double)vfs.f_bavail * (double)vfs.f_frsize;
            p->free_known = 1;
            break;
        }
        if (errno != ENOENT || !strcmp(at, ".")) break; /* unknown: no warning */
        char *slash = strrchr(at, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(at, sizeof at, ".");
    }
    /* test hook (tests only): the free bytes to assume, to see the warning without a full disk */
    const char *hook = getenv("FEDSIM_TEST_DISK_FREE");
    if (hook) p->free_disk = strtod(hook, NULL), p->free_known = 1;
}

/* The states' block of check's output: a state's size, on disk, the cache, and memory overall
 * (datasets and models, the cache, and each job in flight's state and messages). */
static void print_states(const sim_scenario *sc, const sim_cli_prices *pr, const state_plan *p,
                         double msg)
{
    char b[32], d[32];
    sim_format_bytes(b, sizeof b, p->budget);
    if (sc->spec.env.cost_only)
        printf("# client state: none (cost-only: nothing is trained)\n");
    else if (!p->state)
        printf("# client state: none (%s keeps nothing between a client's jobs; measured: one "
               "job of client %d)\n",
               sc->spec.algo->name, p->client);
    else {
        char s[32];
        sim_format_bytes(s, sizeof s, (double)p->state);
        sim_format_bytes(d, sizeof d, p->disk);
        char of[64] = "";
        if (p->row) snprintf(of, sizeof of, ", %zu of them the server's row for it", p->row);
        printf("# client state: %s per client (%zu bytes%s, measured: one job of client %d), up "
               "to %.0f clients\n",
               s, p->state, of, p->client, p->clients);
        double all = (double)p->state * p->clients;
        char in[64] = "all in memory";
        if (all > p->budget)
            snprintf(in, sizeof in, "%.0f%% of them in memory, the rest read from disk",
                     floor(100 * p->budget / all));
        printf("#   = %s on disk in %s/state.mdb (4 KiB pages, twice: one checkpoint's "
               "changes copied); cache budget %s (--state-memory%s): %s\n",
               d, p->dir, b, p->budget_given ? "" : "'s default, a quarter of RAM", in);
    }
    /* what the process holds: the datasets, the model it trains and evaluates, the server's */
    double data = 0;
    const nn_dataset *sets[2] = {&sc->train, &sc->test};
    for (int i = 0; i < 2; i++)
        data += (double)sets[i]->n * (nn_dataset_features(sets[i]) + 1 + !!sets[i]->group) * 4;
    double base = data + pr->mem + msg, cache = (double)p->state * p->clients;
    if (cache > p->budget) cache = p->budget;
    int k = jobs_in_flight(sc);
    /* a job's messages as the table prices round 1's (a one-step job's may differ: sparse
     * uploads), the largest of any device's */
    double job = 0;
    for (int i = 0; i < pr->n_cls; i++) {
        double m = pr->cls[i].down_bytes + pr->cls[i].up_bytes;
        job = m > job ? m : job;
    }
    job += (double)(p->state - p->row); /* its new private state; the row stays put */
    char t[32], m[32], c[32], j[32];
    sim_format_bytes(t, sizeof t, base + cache + k * job);
    sim_format_bytes(m, sizeof m, base);
    sim_format_bytes(c, sizeof c, cache);
    sim_format_bytes(j, sizeof j, k * job);
    printf("# memory: about %s resident (datasets and model %s, cache %s, %d jobs in flight x "
           "(state + messages) %s)\n",
           t, m, c, k, j);
}

static int cmd_check(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    run_opts o;
    state_plan sp = {0};
    if (sim_cli_parse_run(&o, argc, argv, OPTS_CHECK)) return SIM_CLI_BAD_ARGS;
    sp.budget_given = o.state_memory > 0;
    sp.budget = sp.budget_given ? o.state_memory : (double)sim_state_budget_default();
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
    if (measure_state(&sc, &sp, &err)) {
        sim_cli_prices_destroy(&pr);
        sim_scenario_destroy(&sc);
        return sim_cli_print_err(&err);
    }
    plan_states(&sc, &sp);
    int warned = sim_cli_warnings(&sc, &pr, stdout, "# warning: ");
    if (sp.free_known && sp.free_disk < sp.disk) {
        char d[32], f[32];
        sim_format_bytes(d, sizeof d, sp.disk);
        sim_format_bytes(f, sizeof f, sp.free_disk);
        printf("# warning: the clients' states need about %s on disk (%s/state.mdb) and %s is "
               "free there\n",
               d, sp.dir, f);
        warned++;
    }
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
    print_states(&sc, &pr, &sp, msg);
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
        "                    [--state-memory SIZE]\n"
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
        "warnings. --strict: warnings are errors (exit 2). --set and --seed as run's.\n"
        "\n"
        "The clients' private states: one job of the client with the fewest samples is\n"
        "trained to measure a state's size (none for an algorithm without one), and from\n"
        "it the states' size on disk (RUN_DIR/state.mdb, up to every client that trains),\n"
        "the share the cache holds and the run's resident memory are predicted; a warning\n"
        "when the disk where the run would write has less free space than the states need.\n"
        "--state-memory SIZE: the cache's budget to predict with (2 GiB, 512 MB; default:\n"
        "what fedsim run uses, a quarter of the machine's memory).\n";

const sim_command sim_cmd_check = {
        .name = "check",
        .summary = "validate a scenario; print it resolved, each device's job cost and warnings",
        .usage = check_usage,
        .fn = cmd_check,
};
