/* tests/test_sim_energy.c -- energy and batteries in scenarios and runs (devices.energy,
 * sim/engine_energy.c), on the tiny scenario with power figures on both its devices and a
 * battery on its slow one:
 *   - the keys: off (the default), profiles keep no figures and nothing is written into the
 *     resolved scenario; a devices.profiles entry giving power while it is off is refused at its
 *     line and column; with a network, refused;
 *   - batteries that never reach their floor change nothing but clients.tsv's energy columns and
 *     metrics.tsv's client_energy_j: timeline and the other columns are those of the run without;
 *   - every client's energy_j is its timeline's phases times their powers, and metrics.tsv's last
 *     client_energy_j their sum;
 *   - without charging or idle draw, a battery that dies has drawn exactly capacity - floor, and
 *     takes no job after; with charging, a round-1 job dies at the nanosecond its level meets the
 *     floor (worked from the initial level), and a client charged back takes jobs again;
 *   - cost-only charges what the real run does; 0 and 2 workers write the same files.
 * Resume with batteries is tested with the other checkpoints (test_sim_checkpoint.c). The binary
 * is $FEDSIM_BIN (make test sets it). */
#include "tests/check.h"
#include "tests/files.h"
#include "tests/scenario_text.h"

#include "sim/units.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char dir[64];
static const char *bin;

/* tiny.yaml's slow and fast profiles with power figures; the battery is the caller's */
#define POWER                                                                                      \
    "--set devices.energy=true "                                                                   \
    "--set 'devices.profiles.slow.power={train: 2 W, up: 1.5 W, down: 1 W, idle: 0.25 W}' "        \
    "--set 'devices.profiles.fast.power={train: 5 W, up: 2 W, down: 0.5 W, idle: 0.1 W}' "
static const double slow_w[3] = {1, 2, 1.5}, fast_w[3] = {0.5, 5, 2}; /* down, train, up */
/* no charging, no idle draw: a dead battery has drawn capacity - floor = 6 J */
#define DIES                                                                                       \
    "--set 'devices.profiles.slow.power={train: 2 W, up: 1.5 W, down: 1 W}' "                      \
    "--set 'devices.profiles.slow.battery={capacity: 8 J, floor: 25%}' --set rounds=8"
/* from 4 J, charging at 1 W: the first job's training (2 W) dies 2 s after its download */
#define CHARGES                                                                                    \
    "--set 'devices.profiles.slow.battery={capacity: 8 J, floor: 25%, initial: 50%, "              \
    "charging: {rate: 1 W, when: always}}' --set rounds=10"

static int status_of(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run(const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s run scenarios/tiny.yaml -q --plots none --out %s/%s %s >/dev/null 2>%s/%s.err",
             bin, dir, name, args, dir, name);
    return status_of(system(cmd));
}

static char *file_of(const char *name, const char *file)
{
    char p[200];
    size_t n;
    snprintf(p, sizeof p, "%s/%s/%s", dir, name, file);
    return test_slurp(p, &n);
}

/* Field k (0-based) of a tab-separated line, as a number (NaN when absent). */
static double field(const char *line, int k)
{
    for (int i = 0; i < k && line; i++) {
        line = strpbrk(line, "\t\n");
        line = line && *line == '\t' ? line + 1 : NULL;
    }
    return line ? strtod(line, NULL) : NAN;
}

static int starts(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

static int col_of(const char *header, const char *name)
{
    int k = 0;
    for (const char *p = header; *p && *p != '\n'; k++) {
        size_t n = strcspn(p, "\t\n");
        if (n == strlen(name) && !strncmp(p, name, n)) return k;
        p += n;
        if (*p == '\t') p++;
    }
    return -1;
}

#define MAXC 8
typedef struct client_row {
    int slow, jobs, arrived, lost, battery_lost;
    double energy, end;
} client_row;

/* clients.tsv of run name into rows[8]; 0 when it does not read */
static int clients_of(const char *name, client_row *rows)
{
    char *t = file_of(name, "clients.tsv");
    if (!t) return 0;
    int ce = col_of(t, "energy_j"), cb = col_of(t, "battery_lost"), cend = col_of(t, "battery_end");
    int n = 0;
    for (char *p = strchr(t, '\n'); p && p[1] && n < MAXC; p = strchr(p + 1, '\n'), n++) {
        const char *l = p + 1;
        rows[n] = (client_row){.slow = !strncmp(strchr(l, '\t') + 1, "slow", 4),
                               .jobs = (int)field(l, 3),
                               .arrived = (int)field(l, 4),
                               .lost = (int)field(l, 7),
                               .battery_lost = (int)field(l, cb),
                               .energy = field(l, ce),
                               .end = field(l, cend)};
    }
    free(t);
    return n == MAXC && ce > 0 && cb > 0 && cend > 0;
}

/* timeline.tsv's rows of run name: client, phase (0 down, 1 train, 2 up), start, end, lost */
typedef struct phase_row {
    int client, phase, lost;
    double start, end;
} phase_row;

static int timeline_of(const char *name, phase_row *rows, int max)
{
    char *t = file_of(name, "timeline.tsv");
    int n = 0;
    for (char *p = t ? strchr(strchr(t, '\n') + 1, '\n') : NULL; p && p[1] && n < max;
         p = strchr(p + 1, '\n')) {
        const char *l = p + 1, *ph = strchr(strchr(l, '\t') + 1, '\t') + 1;
        rows[n++] = (phase_row){.client = (int)field(l, 0),
                                .phase = !strncmp(ph, "download", 8) ? 0
                                         : !strncmp(ph, "train", 5)  ? 1
                                                                     : 2,
                                .lost = strstr(l, "\tlost\t") != NULL &&
                                        strstr(l, "\tlost\t") < strchr(l, '\n'),
                                .start = field(l, 3),
                                .end = field(l, 4)};
    }
    free(t);
    return n;
}

static double last_metric(const char *name, const char *col)
{
    char *t = file_of(name, "metrics.tsv");
    if (!t) return NAN;
    char *h = strchr(t, '\n') + 1; /* after the comment line */
    int k = col_of(h, col);
    size_t len = strlen(t);
    size_t i = len - 1;
    while (i > 0 && t[i - 1] != '\n')
        i--;
    double v = k >= 0 ? field(t + i, k) : NAN;
    free(t);
    return v;
}

/* tiny.yaml with its devices: section replaced by devices (a line) */
static int load_devices(sim_scenario *sc, const char *devices, char *msg, size_t n)
{
    size_t len;
    /* a federation line among devices replaces tiny's too */
    const char *from = strstr(devices, "federation:") ? "federation:" : "devices:";
    char *t = test_slurp("scenarios/tiny.yaml", &len), *cut = t ? strstr(t, from) : NULL;
    if (!cut) return free(t), snprintf(msg, n, "no tiny.yaml"), -1;
    *cut = 0;
    char text[4096];
    snprintf(text, sizeof text, "%s%s\neval: {every: 1}\n", t, devices);
    free(t);
    return test_load_scenario(sc, text, msg, n);
}

static void expect_error(const char *devices, const char *what)
{
    sim_scenario sc;
    char msg[512];
    int rc = load_devices(&sc, devices, msg, sizeof msg);
    CHECK_MSG(rc != 0 && strstr(msg, what), "'%s' should fail with '%s': got '%s'", devices, what,
              msg);
    if (!rc) sim_scenario_destroy(&sc);
}

static void test_keys(void)
{
    size_t n;
    char *t = test_slurp("scenarios/tiny.yaml", &n), msg[512];
    sim_scenario sc;
    int rc = t ? test_load_scenario(&sc, t, msg, sizeof msg) : -1;
    CHECK_MSG(rc == 0, "%s", msg);
    if (!rc) {
        const sim_yaml *d = sim_yaml_get(sc.doc, "devices");
        CHECK(d && !sim_yaml_get(d, "energy")); /* nothing written: check's output unchanged */
        sim_scenario_destroy(&sc);
    }
    free(t);
    /* the catalog's measured phone has figures; off, they are left out */
    for (int on = 0; on < 2; on++) {
        char devices[128];
        snprintf(devices, sizeof devices,
                 "devices: {energy: %s, mix: [{profile: meizu-16t, share: 1}]}",
                 on ? "true" : "false");
        rc = load_devices(&sc, devices, msg, sizeof msg);
        CHECK_MSG(rc == 0, "%s", msg);
        if (!rc) {
            CHECK_MSG(sc.devices[0].power.set == on && (sc.devices[0].battery.capacity_j > 0) == on,
                      "energy %d: the catalog's figures %s", on, on ? "used" : "left out");
            sim_scenario_destroy(&sc);
        }
    }
    expect_error(
            "devices: {profiles: {p: {base: laptop, power: {train: 2 W, up: 1 W, down: 1 W}}}, "
            "mix: [{profile: p, share: 1}]}",
            "s.yaml:11:47: power: the energy model is off (set devices.energy: true)");
    expect_error("devices: {energy: maybe}", "s.yaml:11:19: energy: 'maybe' is not a boolean");
    expect_error("devices: {energy: true, profiles: {p: {base: laptop, power: {train: 2}}}, "
                 "mix: [{profile: p, share: 1}]}",
                 "s.yaml:11:69: train: '2' has no unit");
}

static void test_refusals(void)
{
    CHECK(run("net", POWER "--set 'network={server: {down: 1 Gbps}}'") != 0);
    char p[200];
    size_t n;
    snprintf(p, sizeof p, "%s/net.err", dir);
    char *e = test_slurp(p, &n);
    CHECK_MSG(e && strstr(e, "devices.energy with a network: not supported yet"), "%s", e ? e : "");
    free(e);
}

/* energy_j against the timeline, client by client; the metrics' total against their sum */
static void check_accounting(const char *name)
{
    client_row c[MAXC];
    phase_row ph[512];
    CHECK_MSG(clients_of(name, c), "%s: clients.tsv", name);
    int n = timeline_of(name, ph, 512);
    CHECK(n > 0);
    double want[MAXC] = {0}, total = 0;
    for (int i = 0; i < n; i++) {
        const double *w = c[ph[i].client].slow ? slow_w : fast_w;
        want[ph[i].client] += w[ph[i].phase] * (ph[i].end - ph[i].start);
    }
    for (int k = 0; k < MAXC; k++) {
        CHECK_MSG(fabs(c[k].energy - want[k]) <= 1e-5 * want[k] + 1e-9,
                  "%s: client %d energy_j %.9g, timeline %.9g", name, k, c[k].energy, want[k]);
        total += c[k].energy;
    }
    double m = last_metric(name, "client_energy_j");
    CHECK_MSG(fabs(m - total) <= 1e-5 * total, "%s: client_energy_j %.9g, clients %.9g", name, m,
              total);
}

static void test_runs(void)
{
    /* batteries that never reach their floor: the run without, plus the energy columns */
    CHECK(run("plain", "--cost-only --set rounds=8") == 0);
    CHECK(run("full", "--cost-only " POWER "--set 'devices.profiles.slow.battery={capacity: 1 kJ, "
                      "floor: 10%}' --set rounds=8") == 0);
    char *a = file_of("plain", "timeline.tsv"), *b = file_of("full", "timeline.tsv");
    CHECK_MSG(a && b && !strcmp(a, b), "batteries that last change the timeline");
    free(a), free(b);
    a = file_of("plain", "clients.tsv"), b = file_of("full", "clients.tsv");
    CHECK_MSG(a && !strstr(a, "energy_j"), "no energy: no energy columns");
    CHECK(b && strstr(b, "\tbusy_s\tenergy_j\tbattery_lost\tbattery_end\tacc_final\n"));
    free(a), free(b);
    check_accounting("full");

    /* dying without charging: 6 J drawn, at the floor, no job after */
    CHECK(run("dies", "--cost-only " POWER DIES) == 0);
    client_row c[MAXC];
    phase_row ph[512];
    int died = 0;
    if (clients_of("dies", c)) {
        int n = timeline_of("dies", ph, 512);
        for (int k = 0; k < MAXC; k++) {
            if (!c[k].battery_lost) continue;
            died++;
            CHECK_MSG(c[k].battery_lost == 1 && fabs(c[k].energy - 6) < 1e-5 && c[k].end == 0.25,
                      "client %d: %d deaths, %.9g J, ends at %g", k, c[k].battery_lost, c[k].energy,
                      c[k].end);
            double death = -1, after = 0;
            for (int i = 0; i < n; i++)
                if (ph[i].client == k && ph[i].lost) death = ph[i].end;
            for (int i = 0; i < n; i++)
                after += ph[i].client == k && ph[i].start >= death;
            CHECK_MSG(death > 0 && after == 0, "client %d: jobs after its battery died", k);
        }
    }
    CHECK_MSG(died >= 2, "%d batteries died", died);
    check_accounting("dies");

    /* every battery dead and none charging: the run stops, and says why */
    CHECK(run("all-dead", "--cost-only " POWER DIES " --set 'devices.mix=[{profile: slow, share: "
                          "1}]'") != 0);
    char ep[200];
    size_t elen;
    snprintf(ep, sizeof ep, "%s/all-dead.err", dir);
    char *msg = test_slurp(ep, &elen);
    CHECK_MSG(msg && strstr(msg, "no client can take part now or later (all excluded, out of "
                                 "battery or offline for good)"),
              "%s", msg ? msg : "");
    free(msg);

    /* charging: round 1's jobs on slow devices die 2 s into training to the ns; a client
     * charged back takes a job that arrives */
    CHECK(run("charges", "--workers 0 " POWER CHARGES) == 0);
    check_accounting("charges");
    int first = 0, back = 0;
    if (clients_of("charges", c)) {
        int n = timeline_of("charges", ph, 512);
        for (int i = 0; i < n; i++) {
            if (!c[ph[i].client].slow || ph[i].phase != 1) continue;
            if (ph[i].start < 1 && ph[i].lost) {
                first++;
                CHECK_MSG(llround(ph[i].end * 1e9) == llround(ph[i].start * 1e9) + 2000000000,
                          "client %d died at %.9f, trained from %.9f", ph[i].client, ph[i].end,
                          ph[i].start);
            }
        }
        for (int k = 0; k < MAXC; k++)
            back += c[k].battery_lost > 0 && c[k].arrived > 0;
    }
    CHECK_MSG(first >= 2, "%d round-1 deaths", first);
    CHECK_MSG(back >= 1, "no client charged back took a job that arrived");

    /* the events: each phase's energy, summing to the client's; battery deaths named */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s events %s/charges/events.msgpack >%s/charges.events", bin, dir,
             dir);
    CHECK(status_of(system(cmd)) == 0);
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/charges.events", dir);
    char *ev = test_slurp(p, &len);
    CHECK(ev && starts(ev, "time_s\tkind\tclient\tround\tbytes\tflops\tenergy_j\treason\n"));
    double sum[MAXC] = {0};
    int battery = 0, offline = 0, deaths = 0;
    for (char *l = ev ? strchr(ev, '\n') : NULL; l && l[1]; l = strchr(l + 1, '\n')) {
        int who = (int)field(l + 1, 2);
        if (who >= 0 && who < MAXC) sum[who] += field(l + 1, 6);
        char *end = strchr(l + 1, '\n');
        battery += end && end - l > 9 && !strncmp(end - 8, "\tbattery", 8);
        offline += end && end - l > 9 && !strncmp(end - 8, "\toffline", 8);
    }
    free(ev);
    if (clients_of("charges", c))
        for (int i = 0; i < MAXC; i++) {
            CHECK_MSG(fabs(sum[i] - c[i].energy) <= 1e-6 * c[i].energy + 1e-9,
                      "client %d: events %.9f J, clients.tsv %.9f J", i, sum[i], c[i].energy);
            deaths += c[i].battery_lost;
        }
    CHECK_MSG(battery == deaths && battery > 0 && offline == 0,
              "%d job_lost for the battery (clients.tsv: %d), %d offline", battery, deaths,
              offline);
    snprintf(cmd, sizeof cmd, "%s events %s/plain/events.msgpack >%s/plain.events", bin, dir, dir);
    CHECK(status_of(system(cmd)) == 0);
    snprintf(p, sizeof p, "%s/plain.events", dir);
    ev = test_slurp(p, &len);
    CHECK_MSG(ev && starts(ev, "time_s\tkind\tclient\tround\tbytes\tflops\n"),
              "no energy: the six fields");
    free(ev);

    /* acc_energy beside acc_time and acc_bytes, for a run with energy only */
    if (status_of(system("command -v gnuplot >/dev/null")) == 0) {
        snprintf(cmd, sizeof cmd,
                 "%s plot %s/charges >/dev/null 2>&1 && %s plot %s/plain "
                 ">/dev/null 2>&1",
                 bin, dir, bin, dir);
        CHECK(status_of(system(cmd)) == 0);
        snprintf(p, sizeof p, "%s/charges/acc_energy.png", dir);
        CHECK_MSG(test_readable(p), "no %s", p);
        snprintf(p, sizeof p, "%s/plain/acc_energy.png", dir);
        CHECK_MSG(!test_readable(p), "a run without energy got %s", p);
    } else {
        printf("no gnuplot: acc_energy.png not checked\n");
    }

    /* cost-only draws the same energy; two workers write the same files */
    CHECK(run("charges-cost", "--cost-only " POWER CHARGES) == 0);
    client_row r[MAXC], k[MAXC];
    if (clients_of("charges", r) && clients_of("charges-cost", k))
        for (int i = 0; i < MAXC; i++)
            CHECK_MSG(r[i].energy == k[i].energy &&
                              (r[i].end == k[i].end || (isnan(r[i].end) && isnan(k[i].end))) &&
                              r[i].battery_lost == k[i].battery_lost,
                      "client %d: cost-only %.9g J, real %.9g J", i, k[i].energy, r[i].energy);
    CHECK(last_metric("charges", "client_energy_j") ==
          last_metric("charges-cost", "client_energy_j"));
    CHECK(run("charges-w2", "--workers 2 " POWER CHARGES) == 0);
    CHECK(test_same_outputs(dir, "charges", "charges-w2", 1));
}

/* The check line of device name after the line starting with header, its fields after the name
 * into v (times parsed, joules read): how many were read. */
static int check_row(const char *text, const char *header, const char *name, double *v, int max)
{
    const char *h = strstr(text, header), *l = h;
    char key[64];
    snprintf(key, sizeof key, "\n# %s ", name);
    if (!h || !(l = strstr(h, key))) return 0;
    l += strlen(key);
    int n = 0;
    while (n < max) {
        while (*l == ' ')
            l++;
        char *end;
        double x = strtod(l, &end);
        if (end == l) break;
        const char *u = end + 1; /* a unit after one space: "ms", "s", "J" */
        size_t ul = strcspn(u, " \n");
        char q[64];
        snprintf(q, sizeof q, "%.*s %.*s", (int)(end - l), l, (int)ul, u);
        sim_time t;
        sim_err err;
        if (ul == 1 && *u == 'J')
            v[n++] = x;
        else if (*end == ' ' && ul && !sim_parse_time(q, &t, &err))
            v[n++] = sim_time_to_s(t);
        else {
            v[n++] = x; /* a bare number (clients, per battery) */
            l = end;
            continue;
        }
        l = u + ul;
    }
    return n;
}

static void test_check(void)
{
    char cmd[1024], p[200];
    size_t n;
    snprintf(cmd, sizeof cmd,
             "%s check scenarios/tiny.yaml " POWER
             "--set 'devices.profiles.slow.battery={capacity: 100 J, floor: 25%%}' >%s/check.txt",
             bin, dir);
    CHECK(status_of(system(cmd)) == 0);
    snprintf(p, sizeof p, "%s/check.txt", dir);
    char *t = test_slurp(p, &n);
    double tm[5] = {0}, j[5] = {0};
    /* clients, download, train, upload, job: the times; download, train, upload, job (J), jobs */
    int nt = t ? check_row(t, "# per device", "slow", tm, 5) : 0;
    int nj = t ? check_row(t, "# energy per device", "slow", j, 5) : 0;
    CHECK_MSG(nt == 5 && nj == 5, "check's rows: %d and %d fields in\n%s", nt, nj, t ? t : "");
    if (nt == 5 && nj == 5) {
        for (int k = 0; k < 3; k++) /* the times are printed to 3 digits, the joules to 4 */
            CHECK_MSG(fabs(j[k] - slow_w[k] * tm[k + 1]) <= 5e-3 * j[k], "phase %d: %g J, %g s", k,
                      j[k], tm[k + 1]);
        CHECK(fabs(j[3] - (j[0] + j[1] + j[2])) <= 1e-3 * j[3]);
        CHECK_MSG(j[4] == floor(75 / j[3]) || j[4] == floor(75 / j[3] * (1 + 1e-4)) ||
                          j[4] == floor(75 / j[3] * (1 - 1e-4)),
                  "jobs per battery %g, job %g J", j[4], j[3]);
    }
    double f[5];
    CHECK_MSG(t && check_row(t, "# energy per device", "fast", f, 5) == 4 &&
                      strstr(strstr(t, "# energy per device"), "mains"),
              "fast, without a battery: mains");
    free(t);
    snprintf(cmd, sizeof cmd, "%s check scenarios/tiny.yaml >%s/check0.txt", bin, dir);
    CHECK(status_of(system(cmd)) == 0);
    snprintf(p, sizeof p, "%s/check0.txt", dir);
    t = test_slurp(p, &n);
    CHECK_MSG(t && !strstr(t, "# energy"), "no energy: check says nothing of it");
    free(t);
}

static void test_selection(void)
{
    /* a full slow battery (6 J above its floor) cannot afford a slow job (about 8 J): uniform
     * sends some anyway, and they die; available ranks them after the fast clients */
    const char *bat = "--cost-only " POWER
                      "--set 'devices.profiles.slow.battery={capacity: 8 J, floor: 25%, initial: "
                      "{uniform: [30%, 100%]}}' --set federation.per_round=2 --set rounds=8 ";
    char args[1024];
    int lost[2] = {0, 0};
    static const char *const pol[2] = {"uniform", "available"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "%s--set federation.selection.name=%s", bat, pol[i]);
        CHECK_MSG(run(pol[i], args) == 0, "%s", pol[i]);
        client_row c[MAXC];
        if (clients_of(pol[i], c))
            for (int k = 0; k < MAXC; k++)
                lost[i] += c[k].battery_lost;
    }
    CHECK_MSG(lost[0] > 0 && lost[1] == 0, "jobs lost to batteries: uniform %d, available %d",
              lost[0], lost[1]);

    /* charging-only: slow devices charge from 0 to 3 s of every 10 s, and take jobs then only */
    char trace[128], p[200];
    snprintf(trace, sizeof trace, "%s/c.trace", dir);
    FILE *f = fopen(trace, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("loop 10 s\n0 s 1\n3 s 0\n", f);
    fclose(f);
    for (int only = 0; only < 2; only++) {
        snprintf(args, sizeof args,
                 "--cost-only " POWER "--set 'devices.profiles.slow.battery={capacity: 100 J, "
                 "charging: {rate: 1 W, when: {kind: trace, file: %s}}}' --set rounds=80 %s",
                 trace, only ? "--set federation.participation=charging-only" : "");
        const char *name = only ? "charging-only" : "any";
        CHECK_MSG(run(name, args) == 0, "%s", name);
        phase_row ph[1024];
        client_row c[MAXC];
        int n = timeline_of(name, ph, 1024), outside = 0, later = 0;
        if (!clients_of(name, c)) continue;
        for (int i = 0; i < n; i++) {
            if (!c[ph[i].client].slow || ph[i].phase != 0) continue;
            double in = fmod(ph[i].start, 10);
            outside += !(in < 3);
            later += ph[i].start >= 10;
        }
        if (only)
            CHECK_MSG(outside == 0 && later > 0,
                      "charging-only: %d slow jobs started outside charging, %d after 10 s",
                      outside, later);
        else
            CHECK_MSG(outside > 0, "any: the slow devices' jobs all started while charging");
    }
    /* slow devices alone: a round waits for a battery to start charging */
    snprintf(args, sizeof args,
             "--cost-only " POWER "--set 'devices.profiles.slow.battery={capacity: 100 J, "
             "charging: {rate: 1 W, when: {kind: trace, file: %s}}}' --set rounds=4 "
             "--set federation.participation=charging-only "
             "--set 'devices.mix=[{profile: slow, share: 1}]'",
             trace);
    CHECK_MSG(run("waits", args) == 0, "a round waits for charging");
    phase_row ph[256];
    int n = timeline_of("waits", ph, 256), outside = 0;
    double last = 0;
    for (int i = 0; i < n; i++)
        if (ph[i].phase == 0) outside += !(fmod(ph[i].start, 10) < 3), last = ph[i].start;
    CHECK_MSG(outside == 0 && last >= 30, "%d jobs outside charging; the last at %g s", outside,
              last);
    (void)p;
    expect_error("devices: {mix: [{profile: laptop, share: 1}]}\nfederation: {per_round: 4, "
                 "participation: charging-only}",
                 "s.yaml:11:43: participation: charging-only needs devices.energy: true");
    expect_error("devices: {mix: [{profile: laptop, share: 1}]}\nfederation: {per_round: 4, "
                 "participation: charging}",
                 "s.yaml:11:43: participation: 'charging' is not any or charging-only");
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-energy-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_keys();
    test_refusals();
    test_check();
    test_runs();
    test_selection();
    if (!check_failed) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
    }
    return CHECK_DONE();
}
