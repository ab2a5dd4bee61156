/* tests/test_sim_network.c -- `network:` in scenarios and runs (sim/scenario_net.c,
 * sim/engine_net.c), on the tiny scenario:
 *   - the keys: no section reads and writes nothing; a group takes its share of the clients of
 *     the devices it lists, and only those; defaults written; errors at file:line:col naming the
 *     key (no unit, an unknown device, a group without a name or named twice); links all
 *     unlimited are no network; network.assign's file puts the clients it lists behind the
 *     groups it names and no others, and its errors name both files' lines;
 *   - a run whose links are never the bottleneck is the run without a network, file for file
 *     (clients.tsv aside: its net_wait_s column, all 0);
 *   - four clients downloading at once through a server link slower than their own share it
 *     equally: every download of the first round ends at 4 x 8 x bytes / capacity plus the
 *     latency, to the ns that timeline.tsv prints, and clients.tsv's net_wait_s is at least the
 *     download's wait; `fedsim check` predicts that bound;
 *   - links.tsv (with a network only): no link ever carries more than its capacity, and the area
 *     under each link's steps is the bits its flows delivered: the server's downlink the
 *     clients' bytes down, its uplink their bytes up, a group's uplink its clients' bytes up.
 * Resume with a network is tested with the other checkpoints (test_sim_checkpoint.c). The binary
 * is $FEDSIM_BIN (make test sets it). */
#include "tests/check.h"
#include "tests/files.h"
#include "tests/scenario_text.h"

#include "sim/units.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char dir[64];
static const char *bin;

/* tiny.yaml's text with more lines appended */
static char *tiny_with(const char *more)
{
    size_t n;
    char *t = test_slurp("scenarios/tiny.yaml", &n);
    if (!t) return NULL;
    char *s = malloc(n + strlen(more) + 2);
    snprintf(s, n + strlen(more) + 2, "%s\n%s", t, more);
    free(t);
    return s;
}

/* Load tiny.yaml plus more: the return code, the error in msg. */
static int load(sim_scenario *sc, const char *more, char *msg, size_t n)
{
    char *text = tiny_with(more);
    int rc = text ? test_load_scenario(sc, text, msg, n) : SIM_EIO;
    free(text);
    return rc;
}

static void expect_error(const char *more, const char *what)
{
    sim_scenario sc;
    char msg[512];
    int rc = load(&sc, more, msg, sizeof msg);
    CHECK_MSG(rc != 0 && strstr(msg, what), "'%s' should fail with '%s': got '%s'", more, what,
              msg);
    if (!rc) sim_scenario_destroy(&sc);
}

static void test_keys(void)
{
    sim_scenario sc;
    char msg[512];
    CHECK_MSG(load(&sc, "", msg, sizeof msg) == 0, "%s", msg);
    CHECK(sc.spec.net == NULL && !sim_yaml_get(sc.doc, "network"));
    sim_scenario_destroy(&sc);

    /* tiny's 8 clients are half slow, half fast: a group of half the fast ones takes 2 */
    CHECK_MSG(load(&sc,
                   "network:\n  server: {down: 10 Mbps}\n  groups:\n"
                   "    - {name: cell, up: 1 Mbps, devices: [fast], share: 0.5}\n"
                   "    - {name: wifi, down: 3 Mbps}\n",
                   msg, sizeof msg) == 0,
              "%s", msg);
    CHECK(sc.spec.net != NULL);
    if (sc.spec.net) {
        const sim_net_config *nc = sc.spec.net;
        CHECK(nc->server_down == 10e6 && isinf(nc->server_up) && nc->n_groups == 2);
        CHECK(nc->groups[0].up == 1e6 && isinf(nc->groups[0].down));
        int in[2] = {0, 0}, wrong = 0;
        for (int c = 0; c < sc.part.n_clients; c++) {
            if (nc->group_of[c] == 0) wrong += strcmp(sc.devices[c].name, "fast") != 0;
            if (nc->group_of[c] >= 0) in[nc->group_of[c]]++;
        }
        CHECK_MSG(in[0] == 2 && wrong == 0, "cell: %d clients, %d not fast", in[0], wrong);
        /* wifi: share 1 (written as the default) of the 6 no group took */
        CHECK_MSG(in[1] == 6, "wifi: %d clients", in[1]);
        const sim_yaml *w = sim_yaml_get(
                sim_yaml_get(sim_yaml_get(sc.doc, "network"), "groups")->items[1], "share");
        CHECK(w && !strcmp(w->value, "1"));
    }
    sim_scenario_destroy(&sc);

    /* every link unlimited: no network */
    CHECK_MSG(load(&sc, "network:\n  groups: [{name: open}]\n", msg, sizeof msg) == 0, "%s", msg);
    CHECK(sc.spec.net == NULL);
    sim_scenario_destroy(&sc);

    expect_error("network: {server: {down: 1000}}", "s.yaml:18:26: down: '1000' has no unit");
    expect_error("network: {groups: [{name: a, devices: [fats]}]}",
                 "s.yaml:18:40: devices: no client has the device profile 'fats'");
    expect_error("network: {groups: [{up: 1 Mbps}]}", "s.yaml:18:20: network.groups: each group "
                                                      "needs a name");
    expect_error("network: {groups: [{name: a}, {name: a}]}",
                 "s.yaml:18:32: name: a second group 'a'");
    expect_error("network: {groups: [{name: a, share: 2}]}", "share");
    expect_error("network: {server: {dwn: 1 Gbps}}", "unknown key 'dwn'; did you mean 'down'?");
}

/* tiny.yaml with more lines appended (NAME for its @) as dir/NAME.yaml and tsv (unless
 * NULL) as dir/NAME.tsv, loaded: the return code, the error in msg. */
static int load_assign(sim_scenario *sc, const char *name, const char *more, const char *tsv,
                       char *msg, size_t n)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s.tsv", dir, name);
    FILE *f = tsv ? fopen(p, "w") : NULL;
    if (f) fputs(tsv, f), fclose(f);
    char named[512];
    const char *at = strchr(more, '@');
    snprintf(named, sizeof named, "%.*s%s%s", at ? (int)(at - more) : (int)strlen(more), more,
             at ? name : "", at ? at + 1 : "");
    char *text = tiny_with(named);
    snprintf(p, sizeof p, "%s/%s.yaml", dir, name);
    f = fopen(p, "w");
    if (!text || !f) return SIM_EIO;
    fputs(text, f), fclose(f), free(text);
    sim_err err = {0};
    int rc = sim_scenario_load(sc, p, NULL, 0, &err);
    msg[0] = 0;
    if (rc) sim_err_format(&err, msg, n);
    return rc;
}

static void assign_error(const char *name, const char *more, const char *tsv, const char *what)
{
    sim_scenario sc;
    char msg[512];
    int rc = load_assign(&sc, name, more, tsv, msg, sizeof msg);
    CHECK_MSG(rc != 0 && strstr(msg, what), "%s should fail with '%s': got '%s'", name, what, msg);
    if (!rc) sim_scenario_destroy(&sc);
}

static void test_assign(void)
{
    /* tiny's 8 clients: 1, 5 and 6 behind the cell, 3 behind the wifi, the rest behind none,
     * whatever their devices; the file named relative to the scenario's folder */
#define NET                                                                                        \
    "network:\n  server: {down: 10 Mbps}\n  assign: @.tsv\n  groups:\n"                            \
    "    - {name: cell, down: 1 Mbps}\n    - {name: wifi, up: 3 Mbps}\n"
    sim_scenario sc;
    char msg[512];
    int rc = load_assign(&sc, "a", NET,
                         "# which client sits where\nclient\tgroup\n5\tcell\n1\tcell\n"
                         "\n3\twifi\r\n6\tcell\n",
                         msg, sizeof msg);
    CHECK_MSG(rc == 0, "%s", msg);
    if (!rc) {
        static const int want[8] = {-1, 0, -1, 1, -1, 0, 0, -1};
        int bad = 0;
        for (int c = 0; c < 8; c++)
            bad += sc.spec.net->group_of[c] != want[c];
        CHECK_MSG(bad == 0 && sc.part.n_clients == 8, "%d clients in the wrong group", bad);
        /* the resolved scenario names the file wherever it is read from */
        const sim_yaml *a = sim_yaml_get(sim_yaml_get(sc.doc, "network"), "assign");
        CHECK_MSG(a && a->value[0] == '/' && strstr(a->value, "/a.tsv"), "assign: %s",
                  a ? a->value : "absent");
        /* and no share written for a group the file fills */
        const sim_yaml *g0 = sim_yaml_get(sim_yaml_get(sc.doc, "network"), "groups")->items[0];
        CHECK(!sim_yaml_get(g0, "share") && sc.spec.net->groups[0].down == 1e6);
        sim_scenario_destroy(&sc);
    }
    /* errors at the file's line (and column), naming the scenario's line */
    assign_error("b1", NET, "client\tgroup\n1\tcell\n8\tcell\n",
                 "b1.tsv:3:1: network.assign: client '8' is not a client id (the scenario's "
                 "clients are 0 to 7) (named at ");
    assign_error("b2", NET, "client\tgroup\n1\tcell\n2\tcel\n",
                 "b2.tsv:3:3: network.assign: no group named 'cel' in network.groups (named at ");
    assign_error("b3", NET, "client\tgroup\n1\tcell\n1\twifi\n",
                 "b3.tsv:3:1: network.assign: client 1 a second time (line 2)");
    assign_error("b4", NET, "id\tgroup\n1\tcell\n",
                 "b4.tsv:1:1: network.assign: expected the header 'client<TAB>group'");
    assign_error("b5", NET, "client\tgroup\n-1\tcell\n",
                 "b5.tsv:2:1: network.assign: client '-1' is not a client id");
    assign_error("b6", NET, "client\tgroup\n1 cell\n",
                 "b6.tsv:2:1: network.assign: expected two tab-separated fields");
    /* the scenario's own line: tiny's 17, then network:, server:, assign: */
    char where[320];
    snprintf(where, sizeof where, "(named at %s/b8.yaml:20:11)", dir);
    assign_error("b8", NET, "client\tgroup\n9\tcell\n", where);
    snprintf(where, sizeof where, "%s/b7.yaml:20:11: network.assign: '%s/b7.tsv': cannot open", dir,
             dir);
    assign_error("b7", NET, NULL, where);
    assign_error("b9",
                 "network:\n  assign: @.tsv\n  groups:\n    - {name: cell, down: 1 Mbps, share: "
                 "0.5}\n",
                 "client\tgroup\n",
                 "b9.yaml:21:34: share: the groups' clients come from "
                 "network.assign");
#undef NET
}

static int status_of(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Run tiny.yaml into dir/name with the extra arguments; exit status. */
static int run(const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s run scenarios/tiny.yaml -q --plots none --workers 0 --out %s/%s %s "
             ">/dev/null 2>%s/%s.err",
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

/* clients.tsv without its net_wait_s column (the 13th), or NULL when it has none */
static char *without_wait(const char *text)
{
    char *out = malloc(strlen(text) + 1), *o = out;
    int col = 1, found = 0;
    for (const char *p = text; *p; p++) {
        if (col == 13 && *p != '\n') {
            if (*p == '\t') col++;
            found |= p[0] == 'n' && !strncmp(p, "net_wait_s", 10);
            continue;
        }
        *o++ = *p;
        if (*p == '\t') col++;
        if (*p == '\n') col = 1;
    }
    *o = 0;
    if (!found) free(out);
    return found ? out : NULL;
}

static void test_uncontended(void)
{
    CHECK(run("plain", "--set name=same") == 0);
    CHECK(run("wide", "--set name=same --set 'network={server: {up: 1000 Tbps, down: 1000 Tbps}, "
                      "groups: [{name: g, up: 500 Tbps, down: 500 Tbps, share: 0.5}]}'") == 0);
    static const char *const same[] = {"metrics.tsv", "timeline.tsv", "events.msgpack"};
    for (int i = 0; i < 3; i++) {
        char *a = file_of("plain", same[i]), *b = file_of("wide", same[i]);
        CHECK_MSG(a && b && !strcmp(a, b), "%s: unlimited links change it", same[i]);
        free(a), free(b);
    }
    char *a = file_of("plain", "clients.tsv"), *b = file_of("wide", "clients.tsv");
    char *bw = b ? without_wait(b) : NULL;
    CHECK_MSG(a && !strstr(a, "net_wait_s"), "no network: no net_wait_s column");
    CHECK_MSG(bw && !strcmp(a, bw), "clients.tsv: only net_wait_s added");
    /* and every wait is 0: the column holds nothing but zeros */
    int zeros = 0, rows = 0;
    for (const char *p = b ? strchr(b, '\n') : NULL; p && p[1]; p = strchr(p + 1, '\n')) {
        const char *f = p + 1;
        for (int k = 1; k < 13 && f; k++)
            f = strchr(f, '\t') ? strchr(f, '\t') + 1 : NULL;
        rows++;
        zeros += f && !strncmp(f, "0.000000000\t", 12);
    }
    CHECK_MSG(rows == 8 && zeros == 8, "net_wait_s: %d of %d rows 0", zeros, rows);
    free(a), free(b), free(bw);
}

static void test_contended(void)
{
    /* all 8 clients fast (50 Mbps down, 10 ms), 4 per round, the server's downlink 1 Mbps: the
     * four first-round downloads share it, 0.25 Mbps each, and end together */
    CHECK(run("shared", "--set 'devices.mix=[{profile: fast, share: 1}]' --set rounds=1 "
                        "--set 'network={server: {down: 1 Mbps}}'") == 0);
    char *cl = file_of("shared", "clients.tsv"), *tl = file_of("shared", "timeline.tsv");
    CHECK(cl && tl);
    if (!cl || !tl) return;
    /* the download's bytes: a client with one job's bytes_down (the 10th column) */
    double db = 0, wait_min = 1e9;
    int jobs = 0;
    for (char *p = strchr(cl, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
        int c, ex, j;
        char dev[48];
        double bu, bd, fl, busy, wait;
        if (sscanf(p + 1, "%d\t%47s\t%d\t%d\t%*d\t%*d\t%*d\t%*d\t%lf\t%lf\t%lf\t%lf\t%lf", &c, dev,
                   &ex, &j, &bu, &bd, &fl, &busy, &wait) == 9 &&
            j == 1) {
            db = bd;
            jobs++;
            if (wait < wait_min) wait_min = wait;
        }
    }
    CHECK_MSG(jobs == 4 && db > 0, "4 jobs of one download each: %d, %g bytes", jobs, db);
    /* each gets a quarter of 1 Mbps: 8 x db / 250 kbps, then the 10 ms latency */
    sim_time want = sim_time_from_s(8.0 * db / 250e3) + 10 * SIM_MS;
    char expect[64];
    snprintf(expect, sizeof expect, "\tdownload\t0.000000000\t%.9f\tok\t", sim_time_to_s(want));
    int rows = 0;
    for (const char *p = tl; (p = strstr(p, expect)); p++)
        rows++;
    CHECK_MSG(rows == 4, "%d first-round downloads end at %s (want 4):\n%s", rows, expect, tl);
    /* each waited at least what the download took beyond its own link's 8 x db / 50 Mbps */
    double own = sim_time_to_s(sim_time_from_s(8.0 * db / 50e6));
    double waited = sim_time_to_s(want - 10 * SIM_MS) - own;
    CHECK_MSG(wait_min >= waited - 1e-9, "net_wait_s %.9f, the download alone waited %.9f",
              wait_min, waited);
    free(cl), free(tl);
    /* fedsim check predicts that round's downloads: 4 x 8 x db / 1 Mbps, the bound they met */
    char cmd[1024], expect2[192], p[128];
    snprintf(cmd, sizeof cmd,
             "%s check scenarios/tiny.yaml --set 'devices.mix=[{profile: fast, share: 1}]' "
             "--set 'network={server: {down: 1 Mbps}}' >%s/check.txt",
             bin, dir);
    CHECK(status_of(system(cmd)) == 0);
    char t[32];
    sim_format_time(t, sizeof t, sim_time_from_s(8.0 * db * 4 / 1e6));
    snprintf(expect2, sizeof expect2,
             "4 downloads of 58.3 KiB at once on the server's 1.00 Mbps "
             "downlink: the last ends no sooner than %s",
             t);
    snprintf(p, sizeof p, "%s/check.txt", dir);
    size_t n;
    char *ck = test_slurp(p, &n);
    CHECK_MSG(ck && strstr(ck, expect2), "check: want '%s' in:\n%s", expect2, ck ? ck : "");
    free(ck);
}

/* Bits under link's steps in links.tsv text (the load held from a row to the link's next); the
 * rows over capacity, out of time order or unparsed into *bad; the link's last load into *last. */
static double link_area(const char *text, const char *link, int *bad, double *last, int *rows)
{
    double area = 0, t0 = -1, used0 = 0, tprev = 0;
    *last = -1;
    *rows = 0;
    const char *p = strstr(text, "time_s\tlink\tused_bps\tcapacity_bps\n");
    if (!p) return (*bad)++, 0;
    for (p = strchr(p, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
        double t, used, cap;
        char name[64];
        if (sscanf(p + 1, "%lf\t%63s\t%lf\t%lf", &t, name, &used, &cap) != 4) {
            (*bad)++;
            continue;
        }
        *bad += t < tprev || used < 0 || used > cap * (1 + 1e-12);
        tprev = t;
        if (strcmp(name, link)) continue;
        if (t0 >= 0) area += used0 * (t - t0);
        t0 = t, used0 = used, *last = used;
        (*rows)++;
    }
    return area;
}

static void test_links(void)
{
    /* two rounds of four, uploads through the 2 Mbps server uplink and the fast clients' cell
     * (its 1 Mbps uplink), downloads through 8 Mbps: every flow ends before the run does */
    CHECK(run("links", "--set rounds=2 --set 'network={server: {up: 2 Mbps, down: 8 Mbps}, "
                       "groups: [{name: cell, up: 1 Mbps, devices: [fast]}]}'") == 0);
    char *lt = file_of("links", "links.tsv"), *cl = file_of("links", "clients.tsv");
    CHECK_MSG(lt && cl, "links.tsv and clients.tsv written");
    if (!lt || !cl) return free(lt), free(cl);
    double up = 0, down = 0, cell = 0; /* bits the clients sent and received */
    for (char *p = strchr(cl, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
        char dev[48];
        double bu, bd;
        if (sscanf(p + 1, "%*d\t%47s\t%*d\t%*d\t%*d\t%*d\t%*d\t%*d\t%lf\t%lf", dev, &bu, &bd) ==
            3) {
            up += 8 * bu, down += 8 * bd;
            if (!strcmp(dev, "fast")) cell += 8 * bu;
        }
    }
    static const char *const link[] = {"server.down", "server.up", "cell.up"};
    double want[] = {down, up, cell};
    for (int i = 0; i < 3; i++) {
        int bad = 0, rows;
        double last, area = link_area(lt, link[i], &bad, &last, &rows);
        CHECK_MSG(bad == 0 && rows >= 2 && last == 0, "%s: %d bad rows, %d rows, last %g", link[i],
                  bad, rows, last);
        CHECK_MSG(want[i] > 0 && fabs(area - want[i]) <= 1e-9 * want[i],
                  "%s carried %.3f bits, its flows %.3f", link[i], area, want[i]);
    }
    /* the cell's uplink (1 Mbps) is the fast clients' bottleneck: full while one uploads */
    CHECK_MSG(strstr(lt, "\tcell.up\t1000000\t1000000\n"), "cell.up never full:\n%s", lt);
    CHECK_MSG(!strstr(lt, "cell.down"), "an unlimited link has no rows");
    free(lt), free(cl);
    /* no network: no links.tsv */
    char p[200];
    snprintf(p, sizeof p, "%s/plain/links.tsv", dir);
    CHECK(!test_readable(p));
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-net-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_keys();
    test_assign();
    test_uncontended();
    test_contended();
    test_links();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("cannot remove %s\n", dir);
    return CHECK_DONE();
}
