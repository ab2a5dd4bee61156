/* tests/test_sim_checkstate.c -- `fedsim check`'s client states, memory and disk (issue 41),
 * through the fedsim binary ($FEDSIM_BIN) on scenarios/tiny.yaml (8 clients, 4 a round):
 * - Ditto: the state check reports is the size of the private state a real job of the client it
 *   names returns, trained here through the library (sim_scenario_load, the algorithm's
 *   server_new, job_down and client_train), and that client has the fewest samples; the disk
 *   figure is every state's 4 KiB pages twice (one checkpoint's copy), for 8 clients over 3
 *   rounds and 4 over 1 (a sync run dispatches rounds x per_round jobs at most); FedAvg has no
 *   state;
 * - --state-memory: given, it is the budget shown, and a budget under the states says what
 *   share the cache holds; absent, the budget is sim_state_budget_default(); a bad unit is
 *   refused, naming the option and the unit;
 * - the disk warning: FEDSIM_TEST_DISK_FREE=1000 (fewer bytes than the states need) makes check
 *   warn, and --strict fail; plenty of space, no warning. */
#include "algos/algo.h"
#include "sim/budget.h"
#include "sim/scenario.h"
#include "sim/units.h"
#include "tests/check.h"
#include "tests/files.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char dir[64];
static const char *bin;

/* fedsim check tiny.yaml ARGS with env before it: its exit status, stdout into out (caller
 * frees), stderr into msg. */
static int check(const char *env, const char *args, char **out, char *msg, size_t n)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s check scenarios/tiny.yaml %s >%s/out 2>%s/err", env, bin, args,
             dir, dir);
    int st = system(cmd), rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char p[128];
    size_t len;
    snprintf(p, sizeof p, "%s/out", dir);
    *out = test_slurp(p, &len);
    snprintf(p, sizeof p, "%s/err", dir);
    char *e = test_slurp(p, &len);
    snprintf(msg, n, "%s", e ? e : "");
    free(e);
    return rc;
}

/* The line of out starting with start, into line[n] ("" when none). */
static void line_of(const char *out, const char *start, char *line, size_t n)
{
    const char *l = out ? strstr(out, start) : NULL;
    snprintf(line, n, "%.*s", l ? (int)strcspn(l, "\n") : 0, l ? l : "");
}

/* Client c's private state after one job of round 0 on a fresh server of scenarios/tiny.yaml
 * with the --set words sets: its bytes, or -1. */
static long real_state(const char *const *sets, int n_sets, int c, int *fewest)
{
    sim_scenario sc;
    sim_err err = {0};
    if (sim_scenario_load(&sc, "scenarios/tiny.yaml", sets, n_sets, &err)) return -1;
    *fewest = 1;
    for (int i = 0; i < sc.part.n_clients; i++)
        *fewest &= sc.part.n[i] >= sc.part.n[c];
    const fl_algo *a = sc.spec.algo;
    void *server = a->server_new(&sc.spec.env, &err);
    long bytes = -1;
    if (server) {
        msgpack_sbuffer down;
        msgpack_sbuffer_init(&down);
        size_t len = a->job_down(server, c, 0, &down);
        fl_job job = {c, 0, down.data, len, NULL, 0, (uint64_t)c << 32};
        fl_worker wk;
        fl_worker_init(&wk);
        fl_result res;
        fl_result_init(&res);
        if (!a->client_train(&sc.spec.env, &job, &wk, &res, &err)) bytes = (long)res.priv.size;
        fl_result_destroy(&res);
        fl_worker_destroy(&wk);
        msgpack_sbuffer_destroy(&down);
        a->server_free(server);
    }
    sim_scenario_destroy(&sc);
    return bytes;
}

/* Every one of k states of b bytes on 4 KiB pages (a 16-byte header each), twice. */
static void disk_text(long b, int k, char *buf, size_t n)
{
    long pages = (b + 16 + 4095) / 4096;
    char s[32];
    sim_format_bytes(s, sizeof s, 2.0 * k * pages * 4096);
    snprintf(buf, n, "#   = %s on disk in runs/tiny-7/state.mdb", s);
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    snprintf(dir, sizeof dir, "/tmp/fedsim-checkstate-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char *out, msg[1024], line[1024], want[256];

    /* Ditto: the state a real job keeps, its client the one with the fewest samples */
    CHECK(check("", "--set algorithm.name=ditto", &out, msg, sizeof msg) == 0);
    line_of(out, "# client state: ", line, sizeof line);
    long bytes = -1;
    int client = -1, k = -1;
    const char *at = strchr(line, '(');
    if (at) sscanf(at, "(%ld bytes, measured: one job of client %d)", &bytes, &client);
    at = strstr(line, "up to ");
    if (at) sscanf(at, "up to %d clients", &k);
    const char *ditto[] = {"algorithm.name=ditto"};
    int fewest = 0;
    long real = client >= 0 ? real_state(ditto, 1, client, &fewest) : -2;
    CHECK_MSG(bytes > 0 && bytes == real && k == 8,
              "Ditto's state as check says (%ld bytes of client %d, %d clients) is a real job's "
              "(%ld bytes), for all 8 clients: %s",
              bytes, client, k, real, line);
    CHECK_MSG(fewest, "client %d has the fewest samples", client);
    CHECK_MSG(bytes >= 4 * 14884, "Ditto's state holds its personal model (%ld bytes)", bytes);
    disk_text(bytes, 8, want, sizeof want);
    CHECK_MSG(strstr(out, want), "disk: %s", want);
    char budget[32];
    sim_format_bytes(budget, sizeof budget, (double)sim_state_budget_default());
    snprintf(want, sizeof want,
             "cache budget %s (--state-memory's default, a quarter of RAM): "
             "all in memory\n",
             budget);
    CHECK_MSG(strstr(out, want), "the default budget: %s", want);
    CHECK_MSG(out && strstr(out, "\n# memory: about "), "a memory line");
    free(out);

    /* one round: 4 jobs, so 4 states at most */
    CHECK(check("", "--set algorithm.name=ditto --set rounds=1", &out, msg, sizeof msg) == 0);
    CHECK_MSG(out && strstr(out, " bytes, measured: one job of client ") &&
                      strstr(out, "), up to 4 clients\n"),
              "rounds=1: up to 4 clients");
    disk_text(bytes, 4, want, sizeof want);
    CHECK_MSG(out && strstr(out, want), "rounds=1 disk: %s", want);
    free(out);

    /* FedAvg keeps no state */
    CHECK(check("", "", &out, msg, sizeof msg) == 0);
    line_of(out, "# client state: ", line, sizeof line);
    CHECK_MSG(!strncmp(line, "# client state: none (fedavg keeps nothing", 42), "FedAvg: %s", line);
    CHECK_MSG(out && !strstr(out, "on disk in"), "FedAvg: nothing on disk");
    free(out);

    /* --state-memory; under the states' 466 KiB the cache holds a share */
    CHECK(check("", "--set algorithm.name=ditto --state-memory 2GiB", &out, msg, sizeof msg) == 0);
    CHECK_MSG(out && strstr(out, "cache budget 2.00 GiB (--state-memory): all in memory\n"),
              "--state-memory 2GiB is the budget");
    free(out);
    CHECK(check("", "--set algorithm.name=ditto --state-memory 100KiB", &out, msg, sizeof msg) ==
          0);
    CHECK_MSG(out && strstr(out, "cache budget 100 KiB (--state-memory): 21% of them in memory, "
                                 "the rest read from disk\n"),
              "--state-memory 100KiB: a fifth of the 8 states");
    free(out);
    CHECK(check("", "--state-memory 5XB", &out, msg, sizeof msg) == 2);
    CHECK_MSG(strstr(msg, "fedsim: --state-memory: unknown size unit 'XB'"), "5XB refused: %s",
              msg);
    free(out);

    /* the disk warning, as a warning (--strict fails on it) */
    CHECK(check("FEDSIM_TEST_DISK_FREE=1000", "--set algorithm.name=ditto", &out, msg,
                sizeof msg) == 0);
    line_of(out, "# warning: the clients' states need", line, sizeof line);
    disk_text(bytes, 8, want, sizeof want);
    char need[64];
    sscanf(want, "#   = %63[^o]", need); /* "960 KiB " */
    CHECK_MSG(line[0] && strstr(line, need) && strstr(line, "and 1000 B is free there"),
              "warned: %s", line);
    free(out);
    CHECK(check("FEDSIM_TEST_DISK_FREE=1000", "--set algorithm.name=ditto --strict", &out, msg,
                sizeof msg) == 2);
    CHECK_MSG(strstr(msg, "check --strict: 1 warning"), "--strict: %s", msg);
    free(out);
    CHECK(check("FEDSIM_TEST_DISK_FREE=1e15", "--set algorithm.name=ditto", &out, msg,
                sizeof msg) == 0);
    CHECK_MSG(out && !strstr(out, "# warning: the clients' states"), "room enough: no warning");
    free(out);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return CHECK_DONE();
}
