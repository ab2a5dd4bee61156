/* tests/test_dev_phones.c -- the measured phones (issue 45): fedsim's predicted step time for the
 * LeNet the Meizu 16T trained (model lenet-mnn, catalog profiles meizu-16t and meizu-16t-1.7ghz)
 * against every measured row of devices/phones/ondevice_train.tsv, within 15%, each error printed;
 * the catalog's figures are fedsim's own fit of those rows (dev_fit_step_cost) on the FLOPs fedsim
 * counts; and devices.population: draws as devices/population.h says (RAM as memory, compute and
 * overhead scaled by score^0.65, bandwidth from a user's normal above the floor), deterministic per
 * seed and client, its share and count of clients, and its errors.
 */
#include "devices/catalog.h"
#include "devices/population.h"
#include "nn/model.h"
#include "sim/cost.h"
#include "sim/scenario.h"
#include "tests/check.h"
#include "tests/files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The LeNet rows of one configuration of the measured table: batch sizes and seconds a step. */
static int lenet_rows(const char *config, int *batch, double *secs, int cap)
{
    FILE *f = fopen("devices/phones/ondevice_train.tsv", "r");
    CHECK(f != NULL);
    if (!f) return 0;
    char line[256], cfg[64], model[64];
    int n = 0, b;
    double ms;
    while (fgets(line, sizeof line, f))
        if (line[0] != '#' && sscanf(line, "%63s %63s %d %lf", cfg, model, &b, &ms) == 4 &&
            !strcmp(cfg, config) && !strcmp(model, "Lenet") && n < cap) {
            batch[n] = b;
            secs[n++] = ms / 1e3;
        }
    fclose(f);
    return n;
}

/* The FLOPs of one training step of lenet-mnn at batch B, as the engine counts them. */
static nn_cost lenet_step(int B)
{
    nn_arch a;
    sim_err err = {0};
    CHECK_MSG(nn_arch_build(&a, "lenet-mnn", 1, 28, 28, 10, &err) == SIM_OK, "%s", err.msg);
    nn_model m;
    nn_model_init(&m, &a, B);
    nn_cost c;
    nn_model_step_cost(&m, B, &c);
    nn_model_destroy(&m);
    return c;
}

static void test_lenet_validation(void)
{
    nn_arch a;
    sim_err err = {0};
    CHECK(nn_arch_build(&a, "lenet-mnn", 1, 28, 28, 10, &err) == SIM_OK);
    CHECK_MSG(a.layout.n_params == 349980, "lenet-mnn has %zu parameters, the phones' LeNet 349980",
              a.layout.n_params);
    /* 2 FLOPs a MAC: forward 2.212 M MACs, weight gradients the same, input gradients all but
     * conv1's 0.288 M (devices/phones/derive.py's count, from ondevice/models.md) */
    CHECK(lenet_step(1).flops == 12696000.0);

    dev_catalog cat;
    CHECK(dev_catalog_load(&cat, "devices/catalog.yaml", &err) == SIM_OK);
    static const char *const configs[][2] = {{"meizu-16t", "MEIZU_Core_f0"},
                                             {"meizu-16t-1.7ghz", "MEIZU_Freq_1708800"}};
    for (int k = 0; k < 2; k++) {
        const dev_profile *p = dev_catalog_find(&cat, configs[k][0]);
        CHECK_MSG(p != NULL, "catalog lacks %s", configs[k][0]);
        if (!p) continue;
        CHECK(strstr(p->source, configs[k][1]) != NULL);
        int batch[16];
        double secs[16], flops[16];
        int n = lenet_rows(configs[k][1], batch, secs, 16);
        CHECK_MSG(n >= 5, "%s: %d rows", configs[k][1], n);
        printf("  %s (%s): predicted vs measured ms a step\n", p->name, configs[k][1]);
        double worst = 0;
        for (int i = 0; i < n; i++) {
            nn_cost c = lenet_step(batch[i]);
            flops[i] = c.flops;
            dev_work w = sim_cost_work(&c, 1);
            double pred = (double)dev_compute_ns(p, &w, 0) / 1e9, e = pred / secs[i] - 1;
            printf("    batch %2d: %7.3f vs %7.3f  %+5.1f%%\n", batch[i], pred * 1e3, secs[i] * 1e3,
                   100 * e);
            CHECK_MSG(fabs(e) <= 0.15, "%s batch %d: %+.1f%%", p->name, batch[i], 100 * e);
            if (fabs(e) > worst) worst = fabs(e);
        }
        printf("    worst %.1f%%\n", 100 * worst);
        /* the catalog's figures are fedsim's own fit of these rows, rounded to 3-4 digits */
        double C, o;
        CHECK(dev_fit_step_cost(flops, NULL, secs, n, &C, NULL, &o) == 0);
        printf("    fit: %.4g GFLOPS, step_overhead %.4g ms; catalog %.4g GFLOPS, %.4g ms\n",
               C / 1e9, o * 1e3, p->compute_flops / 1e9, (double)p->step_overhead_ns / 1e6);
        CHECK(fabs(p->compute_flops / C - 1) < 0.005);
        CHECK(fabs((double)p->step_overhead_ns / 1e9 / o - 1) < 0.005);
    }
    dev_catalog_destroy(&cat);
}

/* quantile q of n sorted values (nearest rank) */
static double quantile(const double *v, int n, double q)
{
    int i = (int)ceil(q * n) - 1;
    return v[i < 0 ? 0 : i];
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_population_draws(void)
{
    dev_population pop;
    sim_err err = {0};
    int rc = dev_population_load(&pop, "devices/phones/ai_benchmark.tsv",
                                 "devices/phones/bandwidth.tsv", &err);
    CHECK_MSG(rc == SIM_OK, "%s", err.msg);
    if (rc) return;
    CHECK(pop.n_phones == 333 && pop.n_users == 19);
    pop.ref_score = 3120;
    pop.exponent = 0.65;
    pop.floor = 0.1;
    dev_catalog cat;
    CHECK(dev_catalog_load(&cat, "devices/catalog.yaml", &err) == SIM_OK);
    const dev_profile *ref = dev_catalog_find(&cat, "meizu-16t");
    CHECK(ref != NULL);
    if (!ref) return;
    enum { N = 4000 };
    static double score[N], list[333], up[N], down[N], ram[N], listram[333];
    for (int i = 0; i < pop.n_phones; i++) {
        list[i] = pop.phones[i].score;
        listram[i] = pop.phones[i].ram_bytes;
    }
    int bad = 0, below = 0;
    for (int c = 0; c < N; c++) {
        sim_rng r;
        sim_rng_seed(&r, 1, SIM_RNG_PHONES, (uint64_t)c);
        dev_profile p;
        int ph, us;
        dev_population_draw(&pop, ref, &r, &p, &ph, &us);
        const dev_phone *d = &pop.phones[ph];
        const dev_net_user *u = &pop.users[us];
        double s = pow(d->score / 3120, 0.65);
        bad += p.memory_bytes != d->ram_bytes;
        bad += fabs(p.compute_flops / (ref->compute_flops * s) - 1) > 1e-12;
        bad += llabs(p.step_overhead_ns - llround((double)ref->step_overhead_ns / s)) > 0;
        /* the user's means, and per-transfer draws from the user's normal above the floor */
        bad += p.latency_ns != ref->latency_ns || p.up_bps != u->up_mean ||
               p.down_bps != u->down_mean;
        bad += p.up_draw.mean != u->up_mean || p.up_draw.sigma != u->up_sigma ||
               p.up_draw.floor != 0.1 * u->up_mean || p.down_draw.mean != u->down_mean ||
               p.down_draw.sigma != u->down_sigma || p.down_draw.floor != 0.1 * u->down_mean;
        sim_rng t; /* one transfer each way, as the engine draws a job's */
        sim_rng_seed(&t, 1, SIM_RNG_TRANSFER, (uint64_t)c + 1);
        down[c] = dev_rate_draw(&p.down_draw, &t);
        up[c] = dev_rate_draw(&p.up_draw, &t);
        bad += up[c] < p.up_draw.floor || down[c] < p.down_draw.floor;
        below += up[c] < u->up_mean;
        score[c] = d->score;
        ram[c] = p.memory_bytes;
        /* the same seed and client draw the same phone */
        sim_rng_seed(&r, 1, SIM_RNG_PHONES, (uint64_t)c);
        dev_profile q;
        dev_population_draw(&pop, ref, &r, &q, NULL, NULL);
        bad += memcmp(&p, &q, sizeof p) != 0;
        dev_profile_destroy(&q);
        dev_profile_destroy(&p);
    }
    CHECK_MSG(bad == 0, "%d draws differ from their phone, user or repeat", bad);
    /* a transfer's rate is below its user's mean about half the time: the floor cuts little of
     * the normal */
    CHECK_MSG(below > 0.4 * N && below < 0.6 * N, "%d of %d up draws below the mean", below, N);
    qsort(score, N, sizeof *score, cmp_double);
    qsort(list, 333, sizeof *list, cmp_double);
    qsort(ram, N, sizeof *ram, cmp_double);
    qsort(listram, 333, sizeof *listram, cmp_double);
    qsort(up, N, sizeof *up, cmp_double);
    qsort(down, N, sizeof *down, cmp_double);
    printf("  quantile   score drawn/list     RAM GiB drawn/list   up Mbps   down Mbps\n");
    static const double qs[] = {0.1, 0.25, 0.5, 0.75, 0.9};
    for (int i = 0; i < 5; i++) {
        double a = quantile(score, N, qs[i]), b = quantile(list, 333, qs[i]);
        printf("  p%-3.0f %12.0f %8.0f %12.2f %8.2f %9.1f %9.1f\n", 100 * qs[i], a, b,
               quantile(ram, N, qs[i]) / (1 << 30), quantile(listram, 333, qs[i]) / (1 << 30),
               quantile(up, N, qs[i]) / 1e6, quantile(down, N, qs[i]) / 1e6);
        CHECK_MSG(fabs(a / b - 1) < 0.15, "score p%.0f: drawn %.0f, list %.0f", 100 * qs[i], a, b);
    }
    dev_catalog_destroy(&cat);
    dev_population_destroy(&pop);

    /* a malformed row names its file and line */
    FILE *f = fopen("build/test_dev_phones.tsv", "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("# c\nmodel\tcpu\tram_gib\tyear\tcpu_f_score\nA\tX\t4\t2019\t100\nB\tY\tfour\t2019\t9\n",
          f);
    CHECK(fclose(f) == 0);
    CHECK(dev_population_load(&pop, "build/test_dev_phones.tsv", "devices/phones/bandwidth.tsv",
                              &err) == SIM_EFORMAT);
    CHECK(err.line == 4 && strstr(err.file, "test_dev_phones.tsv") && pop.phones == NULL);
    CHECK(dev_population_load(&pop, "devices/phones/ai_benchmark.tsv", "build/nonexistent.tsv",
                              &err) == SIM_EIO);
    CHECK(strstr(err.msg, "cannot open bandwidth list") != NULL);
    remove("build/test_dev_phones.tsv");
}

/* tiny.yaml with a population: how many clients, which, deterministic per seed */
static int load(sim_scenario *sc, const char *pop, const char *seed, sim_err *err)
{
    const char *sets[] = {pop, seed};
    return sim_scenario_load(sc, "scenarios/tiny.yaml", sets, 2, err);
}

static int phones(const sim_scenario *sc)
{
    int k = 0;
    for (int c = 0; c < sc->part.n_clients; c++)
        k += !strcmp(sc->devices[c].name, "phones");
    return k;
}

static void test_population_scenario(void)
{
    sim_scenario a, b;
    sim_err err = {0};
    int rc = load(&a, "devices.population={phones: 0.5}", "seed=7", &err);
    CHECK_MSG(rc == SIM_OK, "%s", err.msg);
    if (rc) return;
    CHECK(a.n_population == 4 && phones(&a) == 4);
    CHECK(load(&b, "devices.population={phones: 0.5}", "seed=7", &err) == SIM_OK);
    for (int c = 0; c < 8; c++)
        CHECK(!strcmp(a.devices[c].name, b.devices[c].name) &&
              a.devices[c].compute_flops == b.devices[c].compute_flops &&
              a.devices[c].up_bps == b.devices[c].up_bps);
    sim_scenario_destroy(&b);
    CHECK(load(&b, "devices.population={phones: 0.5}", "seed=8", &err) == SIM_OK);
    int differ = 0;
    for (int c = 0; c < 8; c++)
        differ += a.devices[c].up_bps != b.devices[c].up_bps;
    CHECK(differ > 0);
    sim_scenario_destroy(&b);
    sim_scenario_destroy(&a);
    /* a count, all, none; the mix keeps its shares among the rest */
    CHECK(load(&a, "devices.population={phones: 3}", "seed=7", &err) == SIM_OK && phones(&a) == 3);
    sim_scenario_destroy(&a);
    CHECK(load(&a, "devices.population={phones: 1}", "seed=7", &err) == SIM_OK && phones(&a) == 8);
    sim_scenario_destroy(&a);
    CHECK(load(&a, "devices.population={phones: 0}", "seed=7", &err) == SIM_OK && phones(&a) == 0);
    sim_scenario_destroy(&a);
    /* errors name the key */
    CHECK(load(&a, "devices.population={phones: 2.5}", "seed=7", &err) < 0);
    CHECK_MSG(strstr(err.msg, "phones: 2.5 is neither a share") != NULL, "%s", err.msg);
    CHECK(load(&a, "devices.population={phones: 9}", "seed=7", &err) < 0);
    CHECK(load(&a, "devices.population={reference: toaster}", "seed=7", &err) < 0);
    CHECK_MSG(strstr(err.msg, "reference: no profile 'toaster'") != NULL, "%s", err.msg);
    CHECK(load(&a, "devices.population={list: /nonexistent.tsv}", "seed=7", &err) < 0);
    CHECK_MSG(strstr(err.msg, "devices.population.list: '/nonexistent.tsv': cannot open"), "%s",
              err.msg);
    CHECK(load(&a, "devices.population={bandwidth: /nonexistent.tsv}", "seed=7", &err) < 0);
    CHECK_MSG(strstr(err.msg, "devices.population.bandwidth: '/nonexistent.tsv': cannot open"),
              "%s", err.msg);
    CHECK(load(&a, "devices.population={phone: 1}", "seed=7", &err) < 0);
    CHECK_MSG(strstr(err.msg, "'phone'") != NULL, "%s", err.msg);
}

/* Runs on the population: each transfer draws its own rate (a client's downloads of the same
 * model take different times), the same outputs with 0 and 2 workers, and a run stopped after a
 * checkpoint and resumed equals the straight run (the draws are a function of the job). */
static void test_population_runs(void)
{
    const char *bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    char dir[] = "/tmp/fedsim-phones-XXXXXX", cmd[2048];
    if (!mkdtemp(dir)) return;
    const char *args = "run scenarios/tiny.yaml -q --plots none --set rounds=6 "
                       "--set 'devices.population={phones: 1}' --checkpoint-every 2";
    snprintf(cmd, sizeof cmd,
             "%s %s --workers 0 --out %s/w0 >/dev/null 2>&1 && %s %s --workers 2 --out %s/w2 "
             ">/dev/null 2>&1 && FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2 %s %s --workers 0 --out "
             "%s/r >/dev/null 2>&1; %s resume %s/r -q --plots none >/dev/null 2>&1",
             bin, args, dir, bin, args, dir, bin, args, dir, bin, dir);
    CHECK(system(cmd) == 0);
    CHECK_MSG(test_same_outputs(dir, "w0", "w2", 1), "population: 0 and 2 workers agree");
    CHECK_MSG(test_same_outputs(dir, "w0", "r", 1), "population: resumed = straight");
    /* a client's downloads (the same dense model each round) with different durations */
    char path[300];
    snprintf(path, sizeof path, "%s/w0/timeline.tsv", dir);
    size_t len;
    char *t = test_slurp(path, &len);
    double first[64];
    int seen[64] = {0}, differ = 0, pairs = 0;
    for (char *l = t; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        int c, r;
        double s0, s1;
        char ph[16];
        if (sscanf(l, "%d\t%d\t%15s\t%lf\t%lf\tok", &c, &r, ph, &s0, &s1) != 5 ||
            strcmp(ph, "download") || c < 0 || c >= 64)
            continue;
        if (seen[c]++) {
            pairs++;
            differ += fabs((s1 - s0) - first[c]) > 1e-9;
        } else {
            first[c] = s1 - s0;
        }
    }
    CHECK_MSG(pairs > 3 && differ == pairs,
              "a client's later downloads take other times than its first: %d of %d", differ,
              pairs);
    free(t);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!check_failed && system(cmd)) printf("could not remove %s\n", dir);
}

int main(void)
{
    test_lenet_validation();
    test_population_draws();
    test_population_scenario();
    test_population_runs();
    return CHECK_DONE();
}
