/* tests/test_sim_cli.c -- the fedsim binary end to end: the tiny scenario's event trace matches
 * the golden file byte for byte (tests/golden/tiny.trace; regenerate deliberately with
 * FEDSIM_GOLDEN_UPDATE=1 and review the diff), the same scenario and seed give byte-identical
 * output files, another seed gives others, bad scenarios fail with exit status 2 and a message
 * naming file:line:col and the key, settings that may not be what was meant are warned of
 * (pFedGate budgets, capacities a model exceeds), and OpenBLAS runs on kernels that use the CPU
 * (or the user's, when OPENBLAS_CORETYPE names them). The binary is $FEDSIM_BIN (make test sets
 * it); its help and usages: test_sim_commands. */
#include "sim/units.h"
#include "tests/check.h"
#include "tests/files.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static const char *bin;

/* Run "BIN run scenarios/tiny.yaml --out ARGS" quietly; returns the exit status. */
static int run_tiny(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s run scenarios/tiny.yaml --out %s >/dev/null", bin, args);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Run fedsim on a scenario text; returns the exit status and leaves stderr in `msg`. */
static int run_bad(const char *yaml, char *msg, size_t n)
{
    char path[128], errp[128];
    snprintf(path, sizeof path, "%s/bad.yaml", dir);
    snprintf(errp, sizeof errp, "%s/err.txt", dir);
    FILE *f = fopen(path, "w");
    fputs(yaml, f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s check %s >/dev/null 2>%s", bin, path, errp);
    int st = system(cmd);
    size_t len;
    char *e = test_slurp(errp, &len);
    snprintf(msg, n, "%s", e ? e : "");
    free(e);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *good =
        "seed: 1\nrounds: 2\ndataset: {name: synth-pews-3.2k}\n"
        "partition: {scheme: iid, clients: 4}\nmodel: fedpews-mlp\n"
        "algorithm: {name: fedavg, local_steps: 2, batch_size: 16}\n"
        "federation: {per_round: 2}\n"
        "devices:\n"
        "  profiles:\n"
        "    d: {compute: 1 GFLOPS, up: 4 Mbps, down: 8 Mbps, latency: 10 ms, memory: 1 GiB}\n"
        "  mix: [{profile: d, share: 1}]\n";

/* Replace the first occurrence of `from` in good with `to` (the bad variants). */
static const char *variant(const char *from, const char *to)
{
    static char buf[2048];
    const char *p = strstr(good, from);
    if (!p) return good;
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - good), good, to, p + strlen(from));
    return buf;
}

/* Whether msg holds the parts of want ('*'-separated) in order. */
static int has_parts(const char *msg, const char *want)
{
    for (;;) {
        size_t n = strcspn(want, "*");
        char part[512];
        snprintf(part, sizeof part, "%.*s", (int)n, want);
        const char *at = strstr(msg, part);
        if (!at) return 0;
        msg = at + n;
        if (!want[n]) return 1;
        want += n + 1;
    }
}

static void test_bad(void)
{
    char msg[1024];
    CHECK_MSG(run_bad(good, msg, sizeof msg) == 0, "the good scenario passes check: %s", msg);
    static const struct {
        const char *from, *to, *want; /* want: a part of the message; '*' stands for any text */
    } cases[] = {
            {"up: 4 Mbps", "up: 4", "bad.yaml:10:32: up: '4' has no unit"},
            {"rounds: 2", "roundz: 2", "bad.yaml:2:1: unknown key 'roundz'"},
            {"down: 8 Mbps", "down: -8 Mbps", "bad.yaml:10:46: down: '-8 Mbps' is negative"},
            {"share: 1}", "share: 0.7}", "bad.yaml:11:8: devices.mix: shares sum to 0.7"},
            {"{name: synth-pews-3.2k}", "{name: fashion-mnist, dir: /nonexistent}",
             "bad.yaml:3:32: dataset.dir: '/nonexistent/train-images-idx3-ubyte.gz': cannot "
             "open: No such file or directory"},
            /* names become file names (runs/NAME-SEED) and header text (metrics.tsv) */
            {"seed: 1", "name: \"a\\nb\"\nseed: 1",
             "bad.yaml:1:7: name: 'a\\nb' is not a usable name: it has a control character"},
            {"seed: 1", "name: ../../../x\nseed: 1",
             "bad.yaml:1:7: name: '../../../x' is not a usable name: it starts with '.'"},
            {"seed: 1", "name: a/b\nseed: 1", "bad.yaml:1:7: name: 'a/b' is not a usable name"},
            {"seed: 1", "name: a b\nseed: 1", "it has a space"},
            {"    d: {", "    d x: {",
             "bad.yaml:10:5: profile name: 'd x' is not a usable name: it has a space"},
            /* unknown keys are reported before a file is opened: not the partition file the
             * typo leaves unnamed, not the trace, nor the dataset of a good key */
            {"{scheme: iid, clients: 4}", "{scheme: file, path: p.txt}",
             "bad.yaml:4:27: unknown key 'path'"},
            {"{scheme: iid, clients: 4}", "{scheme: file}",
             "bad.yaml:4:12: partition: scheme file needs file"},
            {"{scheme: iid, clients: 4}", "{scheme: file, file: nope.txt}",
             "bad.yaml:4:27: partition.file: '/*/nope.txt': cannot open: No such file or "
             "directory"},
            {"rounds: 2\ndataset: {name: synth-pews-3.2k}",
             "roundz: 2\ndataset: {name: fashion-mnist, dir: /nonexistent}",
             "bad.yaml:2:1: unknown key 'roundz'"},
            {"{name: synth-pews-3.2k}",
             "{name: idx, train_images: a, train_labels: b, test_images: c, test_lables: d}",
             "bad.yaml:3:72: unknown key 'test_lables'"},
            {"devices:\n", "devices:\n  catalog: nope.yaml\n",
             "bad.yaml:9:3: devices.catalog: '/*/nope.yaml': cannot open: No such file or "
             "directory"},
            {"memory: 1 GiB}", "memory: 1 GiB, speed: {file: nope.trace}}",
             "bad.yaml:10:93: file: trace '/*/nope.trace': cannot open trace: No such file"},
            /* a device or a directory is refused, not read forever or half-read */
            {"{scheme: iid, clients: 4}", "{scheme: file, file: /dev/zero}",
             "bad.yaml:4:27: partition.file: '/dev/zero': cannot open: it is a device, not a "
             "file"},
            {"devices:\n", "devices:\n  catalog: /tmp\n",
             "bad.yaml:9:3: devices.catalog: '/tmp': cannot open: it is a directory"},
            {"memory: 1 GiB}", "memory: 1 GiB, speed: {file: /dev/urandom}}",
             "bad.yaml:10:93: file: trace '/dev/urandom': cannot open trace: it is a device"},
            {"memory: 1 GiB}",
             "memory: 1 GiB, availability: {kind: trace, file: nope.trace, lop: 1 h}}",
             "bad.yaml:10:131: unknown key 'lop'"},
            {"name: fedavg", "name: fedsgd", "bad.yaml:6:19: algorithm: unknown name 'fedsgd'"},
            {"latency: 10 ms", "latency: 10 MB", "not a time unit"},
            {"name: fedavg", "name: dmpfl, dmpfl: {sparsity: 1.5}",
             "bad.yaml:6:44: sparsity: 1.5 is out of range"},
            {"name: fedavg", "name: dmpfl, dmpfl: {phase1: 0.8, phase2a: 0.5}",
             "bad.yaml:6:56: dmpfl: phase1 0.8 + phase2a 0.5 is more than a whole iteration"},
            {"batch_size: 16}\nfederation: {per_round: 2}",
             "batch_size: 16, pfedgate: {eval: own}}\n"
             "federation: {mode: async, concurrency: 2, buffer: 2}",
             "bad.yaml:6:76: eval: own needs federation.mode: sync"},
            {"name: fedavg", "name: ditto, momentum: 0.9, persistent_momentum: true",
             "bad.yaml:6:62: persistent_momentum: ditto restarts its momentum every job"},
            {"name: fedavg, local_steps: 2, batch_size: 16",
             "name: pfedgate, local_steps: 2, batch_size: 1",
             "bad.yaml:6:57: batch_size: pfedgate's model has batch norm"},
            {"name: fedavg", "name: apfl, apfl: {alpha: 1.5}",
             "bad.yaml:6:39: alpha: 1.5 is out of range [0, 1]"},
            {"name: fedavg", "name: apfl, apfl: {adapt: maybe}",
             "bad.yaml:6:39: adapt: 'maybe' is not a boolean"},
            {"name: fedavg", "name: pfedhn, pfedhn: {eval: best}",
             "bad.yaml:6:42: eval: 'best' is not one of generated, trained"},
            {"name: fedavg", "name: pfedhn, pfedhn: {layers: 9}",
             "bad.yaml:6:44: layers: 9 is out of range [0, 8]"},
            {"name: fedavg", "name: fedavg, persistent_momentum: true",
             "persistent_momentum: true needs momentum > 0"},
            {"name: fedavg", "name: pa3dfl, weight_decay: 0.01",
             "bad.yaml:6:41: weight_decay: pa3dfl's clients take plain SGD steps"},
            {"clients: 4}", "clients: 4, local_test: 0, local_val: 0.5}",
             "bad.yaml:4:64: local_val is a share of each client's local test split, and "
             "local_test is 0"},
            {"clients: 4}", "clients: 4, local_val: 1}",
             "bad.yaml:4:49: local_val: 1 is out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_bad(variant(cases[i].from, cases[i].to), msg, sizeof msg);
        CHECK_MSG(rc == 2, "'%s' exits with 2, not %d", cases[i].to, rc);
        CHECK_MSG(has_parts(msg, cases[i].want), "'%s': message '%s' lacks '%s'", cases[i].to, msg,
                  cases[i].want);
        CHECK_MSG(strchr(msg, '\n') == msg + strlen(msg) - 1, "'%s': one line: '%s'", cases[i].to,
                  msg);
    }
}

/* A name that is not a file name runs nothing and makes no folder (without --out a run's folder
 * is runs/NAME-SEED, under the working folder); a name left out is the file's, with what a name
 * cannot hold as '_'; a catalog's profile names are names too; a sweep's --vary value names a
 * folder and a row of summary.tsv, and cannot hold a control character. */
static void test_names(void)
{
    char sub[160], path[200], cmd[1024], out[200];
    snprintf(sub, sizeof sub, "%s/names/a/b", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s", sub);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/esc.yaml", sub);
    FILE *f = fopen(path, "w");
    fprintf(f, "name: ../../x\n%s", good);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "b=$(realpath %s) && cd %s && \"$b\" run esc.yaml -q --plots none 2>/dev/null", bin,
             sub);
    int st = system(cmd);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 2, "name: ../../x: exit 2");
    snprintf(out, sizeof out, "%s/names/a/x-1", dir);
    CHECK_MSG(access(out, F_OK) != 0, "name: ../../x made no folder %s", out);
    snprintf(out, sizeof out, "%s/runs", sub);
    CHECK_MSG(access(out, F_OK) != 0, "name: ../../x made no %s", out);

    snprintf(path, sizeof path, "%s/sp ace.yaml", sub);
    f = fopen(path, "w");
    fputs(good, f);
    fclose(f);
    snprintf(out, sizeof out, "%s/names.txt", dir);
    snprintf(cmd, sizeof cmd, "%s check '%s' > %s", bin, path, out);
    CHECK(system(cmd) == 0);
    size_t len;
    char *txt = test_slurp(out, &len);
    CHECK_MSG(txt && strstr(txt, "\nname: sp_ace\n"), "the default name: %s", txt ? txt : "");
    free(txt);
    /* a sweep's default folder is named from the file's stem the same way */
    snprintf(cmd, sizeof cmd,
             "b=$(realpath %s) && cd %s && \"$b\" sweep 'sp ace.yaml' --vary seed=1 -q "
             "--plots none >/dev/null 2>&1",
             bin, sub);
    CHECK(system(cmd) == 0);
    snprintf(out, sizeof out, "%s/runs/sweep-sp_ace/summary.tsv", sub);
    CHECK_MSG(access(out, F_OK) == 0, "the sweep wrote %s", out);

    snprintf(path, sizeof path, "%s/cat.yaml", sub);
    f = fopen(path, "w");
    fputs("profiles:\n  \"d\\tx\": {compute: 1 GFLOPS, up: 4 Mbps, down: 8 Mbps, latency: 10 ms, "
          "memory: 1 GiB}\n",
          f);
    fclose(f);
    char yaml[2048];
    snprintf(yaml, sizeof yaml, "%s",
             variant("devices:\n", "devices:\n  catalog: names/a/b/cat.yaml\n"));
    char msg[1024];
    CHECK(run_bad(yaml, msg, sizeof msg) == 2);
    CHECK_MSG(strstr(msg, "cat.yaml:2:3: profile name: 'd\\tx' is not a usable name: it has a "
                          "control character"),
              "a catalog's profile name: %s", msg);

    snprintf(out, sizeof out, "%s/sweep", dir);
    snprintf(cmd, sizeof cmd,
             "%s sweep scenarios/tiny.yaml --vary 'algorithm.lr=0.1\t' --out %s -q --plots none "
             ">/dev/null 2>%s/sweep.err",
             bin, out, dir);
    st = system(cmd);
    snprintf(path, sizeof path, "%s/sweep.err", dir);
    txt = test_slurp(path, &len);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 2 && txt &&
                      strstr(txt, "--vary: a control character in a value"),
              "a --vary value with a tab: %s", txt ? txt : "");
    CHECK_MSG(access(out, F_OK) != 0, "it made no folder %s", out);
    free(txt);
}

/* eval.shift: one column per share; share 0 is the unshifted mean; the same outputs whatever
 * the number of workers (DM-PFL+, whose private state and per-sample choice cross processes). */
static void test_shift(void)
{
    char a[160], b[160], opts[400], pa[200], pb[200];
    snprintf(a, sizeof a, "%s/shift0", dir);
    snprintf(b, sizeof b, "%s/shift2", dir);
    const char *set = "--set algorithm.name=dmpfl+ --set 'eval.shift=[0, 0.5, 1]' -q";
    snprintf(opts, sizeof opts, "%s %s --workers 0", a, set);
    CHECK(run_tiny(opts) == 0);
    snprintf(opts, sizeof opts, "%s %s --workers 2", b, set);
    CHECK(run_tiny(opts) == 0);
    snprintf(pa, sizeof pa, "%s/metrics.tsv", a);
    snprintf(pb, sizeof pb, "%s/metrics.tsv", b);
    CHECK_MSG(test_same_file(pa, pb), "eval.shift: metrics identical with 0 and 2 workers");
    size_t len;
    char *txt = test_slurp(pa, &len);
    CHECK(txt &&
          strstr(txt, "\tdensity\tacc_shift_0\tacc_shift_0.5\tacc_shift_1\tacc_base_mean\t"
                      "acc_base_p10\tacc_base_shift_0\tacc_base_shift_0.5\tacc_base_shift_1\n"));
    int rows = 0, same = 1;
    for (char *line = txt ? strchr(strstr(txt, "acc_shift_1"), '\n') : NULL; line && line[1];
         line = strchr(line + 1, '\n')) {
        double v[16];
        int n = sscanf(line + 1, "%lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf",
                       &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10],
                       &v[11], &v[12], &v[13], &v[14], &v[15]);
        rows++; /* acc_pers_mean is column 8, acc_shift_0 column 14 */
        same &= n == 16 && v[7] == v[13] && v[15] >= 0 && v[15] <= 1;
    }
    CHECK_MSG(rows == 6 && same, "%d rows (rounds 0..5) with acc_shift_0 = acc_pers_mean", rows);
    free(txt);
}

/* The train and upload times of `fedsim check`'s row for the fast device of tiny.yaml with sets. */
static int check_fast_row(const char *sets, sim_time *train, sim_time *up)
{
    char out[160], cmd[1024];
    snprintf(out, sizeof out, "%s/row.txt", dir);
    snprintf(cmd, sizeof cmd, "%s check scenarios/tiny.yaml %s | grep '^# fast ' > %s", bin, sets,
             out);
    size_t len;
    char *txt = system(cmd) ? NULL : test_slurp(out, &len);
    double tv, uv;
    char tu[16], uu[16], ts[40], us[40];
    int ok = txt && sscanf(txt, "# %*s %*d %*f %*s %lf %15s %lf %15s", &tv, tu, &uv, uu) == 4;
    free(txt);
    if (!ok) return 0;
    snprintf(ts, sizeof ts, "%g %s", tv, tu);
    snprintf(us, sizeof us, "%g %s", uv, uu);
    sim_err err = {0};
    return !sim_parse_time(ts, train, &err) && !sim_parse_time(us, up, &err);
}

/* The last line of `fedsim help` under the environment prefix env: the kernels in use. */
static char *kernels(const char *env)
{
    char cmd[512], path[128];
    snprintf(path, sizeof path, "%s/kernels.txt", dir);
    snprintf(cmd, sizeof cmd, "env %s %s help | tail -n 1 > %s", env, bin, path);
    size_t len;
    return system(cmd) == 0 ? test_slurp(path, &len) : NULL;
}

/* Field `name` of data row `row` (0-based) of metrics.tsv text txt, into out; 0 if absent. */
static int metric_field(const char *txt, const char *name, int row, char *out, size_t n)
{
    const char *head = txt ? strstr(txt, "\nround\t") : NULL;
    if (!head) return 0;
    head++;
    int col = 0;
    size_t len = strlen(name);
    for (const char *h = head; *h != '\n'; h++)
        if (h == head || h[-1] == '\t') {
            if (!strncmp(h, name, len) && (h[len] == '\t' || h[len] == '\n')) break;
            col++;
        }
    const char *line = strchr(head, '\n') + 1;
    for (int r = 0; r < row && *line; r++)
        line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "";
    for (int c = 0; c < col && *line && *line != '\n'; c++)
        line = strchr(line, '\t') ? strchr(line, '\t') + 1 : "";
    size_t w = strcspn(line, "\t\n");
    if (!*line || w == 0 || w >= n) return 0;
    snprintf(out, n, "%.*s", (int)w, line);
    return 1;
}

/* Whether the lines at a and b hold the same words (the columns, whatever their padding). */
static int same_words(const char *a, const char *b)
{
    for (;;) {
        while (*a == ' ')
            a++;
        while (*b == ' ')
            b++;
        size_t la = strcspn(a, " \n"), lb = strcspn(b, " \n");
        if (la != lb || strncmp(a, b, la)) return 0;
        if (!la) return (*a == '\n' || !*a) && (*b == '\n' || !*b);
        a += la, b += lb;
    }
}

/* A run of DM-PFL+ (FedAvg-FT) reports in its acc_base_* columns exactly what a run of DM-PFL
 * (FedAvg) reports as its own personalized accuracy: the training is the same, only the
 * evaluation differs; the methods' own columns differ, and a method without a base has none. */
/* A one-round cost-only run of the tiny scenario with SETS prints `want` on stderr. */
static void run_warns(const char *sets, const char *want)
{
    char cmd[1024], errp[128];
    snprintf(errp, sizeof errp, "%s/warn.txt", dir);
    snprintf(cmd, sizeof cmd,
             "%s run scenarios/tiny.yaml %s --set rounds=1 --cost-only -q --plots none --out "
             "%s/warn > /dev/null 2> %s",
             bin, sets, dir, errp);
    CHECK(system(cmd) == 0);
    size_t len;
    char *txt = test_slurp(errp, &len);
    CHECK_MSG(txt && strstr(txt, want), "fedsim run %s warns: %s", sets, txt ? txt : "(nothing)");
    free(txt);
}

/* What a run reports is what it has: a --cost-only run has no accuracy ("none", not nan, in the
 * progress line and the summary) and draws only the timeline, and its plots line names only that;
 * a run that trains names its accuracy and all three plots. */
static void test_reports(void)
{
    char cmd[1024], outp[128], errp[128];
    snprintf(outp, sizeof outp, "%s/rep.out", dir);
    snprintf(errp, sizeof errp, "%s/rep.err", dir);
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s run scenarios/tiny.yaml --set rounds=1 %s --out %s/rep%d > %s 2> %s", bin,
                 k ? "" : "--cost-only", dir, k, outp, errp);
        CHECK(system(cmd) == 0);
        size_t len;
        char *out = test_slurp(outp, &len), *err = test_slurp(errp, &len);
        const char *prog = err ? strstr(err, "round 1/1") : NULL;
        CHECK_MSG(out && err && !strstr(out, "nan") && !strstr(err, "nan"), "no nan reported: %s%s",
                  out ? out : "", err ? err : "");
        if (k == 0) {
            CHECK_MSG(out && strstr(out, "final accuracy none (--cost-only: nothing trained)\n"),
                      "cost-only summary: %s", out ? out : "");
            CHECK_MSG(out && strstr(out, "rep0/timeline.png\n") && !strstr(out, "acc_time"),
                      "cost-only plots line: %s", out ? out : "");
            CHECK_MSG(prog && !strstr(prog, "acc "), "cost-only progress: %s", err ? err : "");
        } else {
            CHECK_MSG(out && strstr(out, "final accuracy 0.") &&
                              strstr(out, "rep1/acc_time.png, acc_bytes.png, timeline.png\n"),
                      "summary and plots: %s", out ? out : "");
            CHECK_MSG(prog && strstr(prog, "  acc 0."), "progress: %s", err ? err : "");
        }
        /* metrics.tsv starts with the initial model: round 0, at time 0, nothing sent yet (an
         * accuracy in a run that trains); then round 1 */
        char path[160], r0[32], r1[32], t0[32], b0[32], a0[32];
        snprintf(path, sizeof path, "%s/rep%d/metrics.tsv", dir, k);
        char *m = test_slurp(path, &len);
        int got = m && metric_field(m, "round", 0, r0, sizeof r0) &&
                  metric_field(m, "round", 1, r1, sizeof r1) &&
                  !metric_field(m, "round", 2, t0, sizeof t0) &&
                  metric_field(m, "sim_time_s", 0, t0, sizeof t0) &&
                  metric_field(m, "bytes_up", 0, b0, sizeof b0) &&
                  metric_field(m, "acc_global", 0, a0, sizeof a0);
        double acc0 = got ? atof(a0) : -1;
        CHECK_MSG(got && !strcmp(r0, "0") && !strcmp(r1, "1") && atof(t0) == 0 &&
                          !strcmp(b0, "0") && (k ? acc0 > 0 && acc0 < 1 : !strcmp(a0, "nan")),
                  "metrics.tsv round 0: %s", m ? m : "");
        free(m);
        free(out);
        free(err);
    }
}

/* The build says one short line per file ("  CC  sim/units.o"), the compiler's command line only
 * with V=1 (a first `make run` scrolled dozens of them). One file, into a folder of its own; the
 * make running the tests passes its flags (its jobserver) in MAKEFLAGS, which this make must not
 * take. */
static void test_build_lines(void)
{
    char cmd[512], outp[128];
    snprintf(outp, sizeof outp, "%s/make.txt", dir);
    for (int v = 0; v < 2; v++) {
        snprintf(cmd, sizeof cmd,
                 "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -B MODE=test "
                 "BUILD=%s/mk V=%d %s/mk/sim/units.o >%s "
                 "2>&1",
                 dir, v, dir, outp);
        CHECK(system(cmd) == 0);
        size_t len;
        char *t = test_slurp(outp, &len);
        if (v == 0)
            CHECK_MSG(t && !strcmp(t, "  CC  sim/units.o\n"), "quiet build line: %s", t ? t : "");
        else
            CHECK_MSG(t && strstr(t, " -c sim/units.c -o ") && !strstr(t, "  CC "),
                      "V=1 build line: %s", t ? t : "");
        free(t);
    }
}

static void test_base(void)
{
    static const struct {
        const char *plus, *base, *set;
    } pairs[] = {{"dmpfl+", "dmpfl", "--set 'eval.shift=[0, 0.5, 1]'"},
                 {"fedavg-ft", "fedavg", "--set algorithm.momentum=0.5"}};
    static const char *const same[] = {"bytes_up", "bytes_down", "client_flops", "acc_global",
                                       "loss_global"};
    static const char *const pairs_col[][2] = {{"acc_base_mean", "acc_pers_mean"},
                                               {"acc_base_p10", "acc_pers_p10"},
                                               {"acc_base_shift_0", "acc_shift_0"},
                                               {"acc_base_shift_0.5", "acc_shift_0.5"},
                                               {"acc_base_shift_1", "acc_shift_1"}};
    for (int p = 0; p < 2; p++) {
        char out[2][160], opts[600], path[200], x[64], y[64];
        char *txt[2];
        size_t len;
        for (int k = 0; k < 2; k++) {
            snprintf(out[k], sizeof out[k], "%s/base-%s", dir, k ? pairs[p].base : pairs[p].plus);
            snprintf(opts, sizeof opts, "%s --set algorithm.name=%s %s -q --workers 0", out[k],
                     k ? pairs[p].base : pairs[p].plus, pairs[p].set);
            CHECK(run_tiny(opts) == 0);
            snprintf(path, sizeof path, "%s/metrics.tsv", out[k]);
            txt[k] = test_slurp(path, &len);
        }
        int rows = 0, ok = 1, differ = 0, ncols = p ? 2 : 5;
        for (int r = 0; metric_field(txt[1], "round", r, x, sizeof x); r++, rows++) {
            for (int i = 0; i < 5; i++)
                ok &= metric_field(txt[0], same[i], r, x, sizeof x) &&
                      metric_field(txt[1], same[i], r, y, sizeof y) && !strcmp(x, y);
            for (int i = 0; i < ncols; i++)
                ok &= metric_field(txt[0], pairs_col[i][0], r, x, sizeof x) &&
                      metric_field(txt[1], pairs_col[i][1], r, y, sizeof y) && !strcmp(x, y);
            differ |= metric_field(txt[0], "acc_pers_mean", r, x, sizeof x) &&
                      metric_field(txt[0], "acc_base_mean", r, y, sizeof y) && strcmp(x, y);
        }
        CHECK_MSG(rows == 6 && ok,
                  "%s: acc_base_* = %s's personalized accuracy, same training "
                  "(%d rows, rounds 0..5)",
                  pairs[p].plus, pairs[p].base, rows);
        CHECK_MSG(differ, "%s: its own accuracy differs from its base's in some row",
                  pairs[p].plus);
        CHECK_MSG(txt[0] && strstr(txt[0], " base=") && txt[1] && !strstr(txt[1], "acc_base") &&
                          !strstr(txt[1], " base="),
                  "%s names its base; %s has no base columns", pairs[p].plus, pairs[p].base);
        /* fedsim summary gives the base its own row, the same as the base's own run's */
        char cmd[1200], sum[200], *line[2] = {NULL, NULL};
        snprintf(sum, sizeof sum, "%s/summary-%d.txt", dir, p);
        for (int g = 0; g < 2; g++) {
            snprintf(cmd, sizeof cmd, "%s summary %s %s --target 0.3 %s > %s", bin, out[0], out[1],
                     g ? "" : "--acc personalized", sum);
            CHECK(system(cmd) == 0);
            char *t = test_slurp(sum, &len);
            char key[200];
            snprintf(key, sizeof key, "\n%s ", out[1]); /* the base's run's row */
            char *b = t ? strstr(t, " [base ") : NULL, *own = t ? strstr(t, key) : NULL;
            if (!g && b && own) {
                line[0] = strchr(b + 1, ']') + 1;
                line[1] = own + strlen(key) - 1;
                CHECK_MSG(same_words(line[0], line[1]),
                          "summary: the [base %s] row is %s's own: %.80s / %.80s", pairs[p].base,
                          pairs[p].base, line[0], line[1]);
            } else {
                CHECK_MSG(g && !b, "summary: a base row by personalized accuracy only");
            }
            free(t);
        }
        free(txt[0]);
        free(txt[1]);
    }
}

/* With OPENBLAS_CORETYPE unset, fedsim runs on kernels that use the CPU's widest vector units
 * (OpenBLAS falls back to SSE3 ones on CPUs newer than itself); a user's setting is kept. */
static void test_kernels(void)
{
    static const char *const avx512[] = {"SkylakeX.", "Cooperlake.", "SapphireRapids.", NULL};
    static const char *const avx2[] = {
            "Haswell.", "Zen.", "Excavator.", "SkylakeX.", "Cooperlake.", "SapphireRapids.", NULL};
    const char *const *want = NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512cd"))
        want = avx512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = avx2;
    char *txt = kernels("-u OPENBLAS_CORETYPE");
    int ok = txt && strstr(txt, "In use here: ");
    if (ok && want) {
        const char *name = strstr(txt, "In use here: ") + strlen("In use here: ");
        for (ok = 0; *want; want++)
            ok |= !strncmp(name, *want, strlen(*want));
    }
    CHECK_MSG(ok, "unset OPENBLAS_CORETYPE: kernels for this CPU's vector units: %s",
              txt ? txt : "(nothing)");
    free(txt);
    txt = kernels("OPENBLAS_CORETYPE=Haswell");
    CHECK_MSG(txt && strstr(txt, "In use here: Haswell.\n"), "the user's kernels kept: %s",
              txt ? txt : "(nothing)");
    free(txt);
}

/* fedsim calibrate times each width and fits the cost model; its FLOPs and activation bytes per
 * step are the cost model's counts (a half-wide MLP does a quarter of the hidden products, and
 * writes half the hidden activations), and bad options are refused. Times are this machine's:
 * only their form is checked. */
static void test_calibrate(void)
{
    char out[160], cmd[1024];
    snprintf(out, sizeof out, "%s/cal.txt", dir);
    snprintf(cmd, sizeof cmd,
             "%s calibrate --model fedpews-mlp --data synth-pews-3.2k --batch=16 --widths 1,0.5 "
             "--seconds 0.02 > %s 2>/dev/null",
             bin, out);
    CHECK(system(cmd) == 0);
    size_t len;
    char *txt = test_slurp(out, &len);
    double f[2] = {0}, by[2] = {0}, ms[2] = {0}, w;
    const char *row = txt ? strstr(txt, "err_fitted\n") : NULL;
    int ok = row != NULL;
    for (int i = 0; i < 2 && ok; i++) {
        row = strchr(row, '\n') + 1;
        ok = sscanf(row, "%lf %lf %lf %lf", &w, &f[i], &by[i], &ms[i]) == 4 && w == (i ? 0.5 : 1) &&
             ms[i] > 0;
    }
    /* fedpews-mlp 5-32-64-128-32-4: at width 1/2 the hidden layers keep 16, 32, 64, 16 units.
     * A step of 16 writes 16 x 4 bytes times, forward, the linear outputs 32+64+128+32+4 and as
     * many ReLU outputs but the head's, and backward the ReLU gradients 32+64+128+32 and the
     * input gradients of every linear layer but the first, as many: 1028 floats a sample. */
    CHECK_MSG(ok && f[0] == 1398784 && f[1] < f[0] / 2 && by[0] == 16 * 4 * 1028 &&
                      by[1] == 16 * 4 * (1028 - 4) / 2 + 16 * 4 * 4,
              "calibrate rows: %s", txt ? txt : "(none)");
    CHECK_MSG(txt && strstr(txt, "# fitted: compute ") && strstr(txt, "step_overhead: ") &&
                      strstr(txt, "# FLOPs alone (compute ") &&
                      strstr(txt, "# without mem_bandwidth: compute ") &&
                      strstr(txt, ", mem_bandwidth "),
              "calibrate: %s", txt ? txt : "(none)");
    free(txt);
    static const char *const bad[] = {"--widths 0,1", "--widths 1,x", "--widths ''",
                                      "--widths 1,",  "--seconds 0",  "--batch 100000",
                                      "--model nope", "--bogus 1",    "--batch"};
    for (int i = 0; i < 9; i++) {
        snprintf(cmd, sizeof cmd,
                 "%s calibrate --data synth-pews-3.2k --model fedpews-mlp %s >/dev/null 2>%s", bin,
                 bad[i], out);
        int st = system(cmd);
        txt = test_slurp(out, &len);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 2 && txt && strstr(txt, "fedsim"),
                  "calibrate %s: exit 2 with a message: %s", bad[i], txt ? txt : "");
        free(txt);
    }
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-cli-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char a[128], b[128], c[128], ta[160], tb[160];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(c, sizeof c, "%s/c", dir);
    snprintf(ta, sizeof ta, "%s/a.trace", dir);
    snprintf(tb, sizeof tb, "%s/b.trace", dir);
    char opts[400], cmd[1024];
    snprintf(opts, sizeof opts, "%s -q --trace %s", a, ta);
    CHECK(run_tiny(opts) == 0);
    snprintf(opts, sizeof opts, "%s -q --trace %s", b, tb);
    CHECK(run_tiny(opts) == 0);
    snprintf(opts, sizeof opts, "%s -q --seed 8", c);
    CHECK(run_tiny(opts) == 0);
    snprintf(cmd, sizeof cmd, "cp %s tests/golden/tiny.trace", ta);
    if (getenv("FEDSIM_GOLDEN_UPDATE") && system(cmd)) printf("could not update the golden file\n");
    CHECK_MSG(test_same_file(ta, "tests/golden/tiny.trace"),
              "tiny trace matches tests/golden/tiny.trace");
    static const char *const outs[] = {"metrics.tsv", "clients.tsv", "events.msgpack",
                                       "scenario.yaml"};
    for (int i = 0; i < 4; i++) {
        char pa[200], pb[200], pc[200];
        snprintf(pa, sizeof pa, "%s/%s", a, outs[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, outs[i]);
        snprintf(pc, sizeof pc, "%s/%s", c, outs[i]);
        CHECK_MSG(test_same_file(pa, pb), "%s identical for the same seed", outs[i]);
        if (i < 3) CHECK_MSG(!test_same_file(pa, pc), "%s differs for another seed", outs[i]);
    }
    /* the events dump reads what the run wrote */
    snprintf(opts, sizeof opts, "%s/events.txt", dir);
    snprintf(cmd, sizeof cmd, "%s events %s > %s", bin, a, opts);
    CHECK(system(cmd) == 0);
    size_t len;
    char *txt = test_slurp(opts, &len);
    CHECK(txt && strstr(txt, "upload_done") && strstr(txt, "aggregate"));
    free(txt);
    /* check tells what the clients' capacities make of the model (HeteroFL's halvings of uniform
     * capacities 1/8 … 1: widths 0.25 … 1) */
    snprintf(opts, sizeof opts, "%s/check.txt", dir);
    snprintf(cmd, sizeof cmd,
             "%s check scenarios/tiny.yaml --set algorithm.name=heterofl --set "
             "algorithm.width.by=capacity --set devices.capacity=uniform > %s",
             bin, opts);
    CHECK(system(cmd) == 0);
    txt = test_slurp(opts, &len);
    CHECK_MSG(txt && strstr(txt, "capacity r_i: 0.125 … 1, mean 0.562; models trained 0.25 … 1"),
              "fedsim check: %s", txt ? strstr(txt, "# capacity") : "(nothing)");
    free(txt);
    /* and what a client trains, is tested and validates on: half its local split validates */
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s check scenarios/tiny.yaml %s | grep '^# a client' > %s", bin,
                 k ? "--set partition.local_val=0.5" : "", opts);
        CHECK(system(cmd) == 0);
        txt = test_slurp(opts, &len);
        double tr = 0, t = -1, v = -1;
        int got = txt ? sscanf(txt,
                               "# a client's samples, on average: %lf to train on, %lf to test on "
                               "(its local test split), %lf",
                               &tr, &t, &v)
                      : 0;
        CHECK_MSG(got == 3 && tr > 0 && t > 0 && (k ? v > 0 && fabs(v - t) <= 1 : v == 0),
                  "fedsim check, splits: %s", txt ? txt : "(nothing)");
        free(txt);
    }
    /* and which clients' devices hold the model each trains: with 110 kB, three of the four fast
     * clients' (the run then excludes the fourth, test_sim_engine) */
    snprintf(cmd, sizeof cmd,
             "%s check scenarios/tiny.yaml --set algorithm.name=heterofl --set "
             "algorithm.width.by=capacity --set devices.capacity=uniform --set "
             "'devices.profiles.slow.memory=110 kB' --set 'devices.profiles.fast.memory=110 kB' "
             "| grep '^# fast ' > %s",
             bin, opts);
    CHECK(system(cmd) == 0);
    txt = test_slurp(opts, &len);
    CHECK_MSG(txt && strstr(txt, " 3/4\n"), "fedsim check, fits: %s", txt ? txt : "(nothing)");
    free(txt);
    /* and warns of pFedGate budgets that leave the gate nothing to choose (the output layer then
     * reaches 1 of the 4 classes), but not of budgets that leave it room; a run warns too */
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s check scenarios/tiny.yaml --set algorithm.name=pfedgate --set "
                 "algorithm.pfedgate.s=%s > %s",
                 bin, k ? "0.3" : "0.1", opts);
        CHECK(system(cmd) == 0);
        txt = test_slurp(opts, &len);
        int warned = txt &&
                     strstr(txt, "# warning: pfedgate: 8 of 8 clients have a density budget "
                                 "(0.1 at the least)") &&
                     strstr(txt, "reaches 1 of 4 classes");
        CHECK_MSG(txt && warned == !k, "fedsim check, s = %s: %s", k ? "0.3" : "0.1",
                  txt && strstr(txt, "# warning") ? strstr(txt, "# warning") : "(no warning)");
        free(txt);
    }
    run_warns("--set algorithm.name=pfedgate --set algorithm.pfedgate.s=0.1",
              "fedsim: warning: pfedgate: 8 of 8 clients");
    /* and of clients that train more than their devices.capacity affords (width² > r_i): an
     * explicit capacity (uniform r_i = 1/8 … 1, a number, a profile's) that the algorithm does
     * not size by (or not that far); never of one derived from memory and compute, which the
     * engine enforces */
    static const struct {
        const char *sets, *want; /* want NULL: no capacity warning */
    } cap[] = {
            {"--set devices.capacity=uniform",
             "7 of 8 clients train a wider model than their devices.capacity r_i affords (width² "
             "≤ r_i; r_i down to 0.125): fedavg does not narrow fedpews-mlp that far here. Every "
             "client can afford model: fedpews-mlp@0.25\n"},
            {"--set devices.capacity=0.5", "8 of 8 clients train"},
            {"--set devices.profiles.slow.capacity=0.25", "4 of 8 clients train"},
            {"--set devices.capacity=uniform --set model=fedpews-mlp@0.25", NULL},
            {"--set devices.capacity=uniform --set model=fedpews-mlp@0.5", "1 of 8 clients"},
            {"--set devices.capacity=uniform --set algorithm.name=heterofl "
             "--set algorithm.width.by=capacity",
             NULL},
            {"--set algorithm.name=heterofl --set algorithm.width.p=0.5 "
             "--set devices.capacity=0.25",
             NULL},
            {"--set algorithm.name=heterofl --set algorithm.width.p=0.5 "
             "--set devices.capacity=0.2",
             "8 of 8 clients"},
            {"", NULL},
    };
    for (size_t k = 0; k < sizeof cap / sizeof cap[0]; k++) {
        snprintf(cmd, sizeof cmd, "%s check scenarios/tiny.yaml %s > %s", bin, cap[k].sets, opts);
        CHECK(system(cmd) == 0);
        txt = test_slurp(opts, &len);
        const char *w = txt ? strstr(txt, "# warning: ") : NULL;
        CHECK_MSG(txt && (cap[k].want ? w && strstr(w, cap[k].want) == w + 11 : !w),
                  "fedsim check %s: %s", cap[k].sets, w ? w : "(no warning)");
        free(txt);
    }
    run_warns("--set devices.capacity=0.5", "fedsim: warning: 8 of 8 clients train a wider model");
    /* check prices each device's job as the algorithm does: pFedGate at s = 0.3, on devices that
     * turn sparsity into speed, trains faster and uploads less than FedAvg */
    sim_time t_avg = 0, u_avg = 0, t_gate = 0, u_gate = 0;
    const char *eff = "--set devices.profiles.fast.sparse_eff=1";
    snprintf(opts, sizeof opts, "%s --set algorithm.name=pfedgate --set algorithm.pfedgate.s=0.3",
             eff);
    CHECK(check_fast_row(eff, &t_avg, &u_avg) && check_fast_row(opts, &t_gate, &u_gate));
    CHECK_MSG(t_gate < t_avg && u_gate < u_avg,
              "check: pFedGate %lld / %lld ns, FedAvg %lld / %lld", (long long)t_gate,
              (long long)u_gate, (long long)t_avg, (long long)u_avg);
    /* ... and adds a step overhead per step: tiny's average job has `steps` of them */
    sim_time t_oh, u_oh;
    char mline[160];
    snprintf(mline, sizeof mline, "%s/model.txt", dir);
    snprintf(cmd, sizeof cmd, "%s check scenarios/tiny.yaml | grep '^# model' > %s", bin, mline);
    CHECK(system(cmd) == 0);
    txt = test_slurp(mline, &len);
    const char *at = txt ? strstr(txt, "samples (") : NULL;
    int steps = 0;
    CHECK(at && sscanf(at, "samples (%d steps of", &steps) == 1 && steps > 0);
    free(txt);
    CHECK(check_fast_row("--set 'devices.profiles.fast.step_overhead=1 s'", &t_oh, &u_oh) &&
          check_fast_row("", &t_avg, &u_avg));
    /* (the row prints 3 significant digits) */
    CHECK_MSG(fabs((double)(t_oh - t_avg) / 1e9 - steps) <= 0.005 * steps + 0.01 && u_oh == u_avg,
              "check: step overhead 1 s: train %lld ns, without %lld, %d steps", (long long)t_oh,
              (long long)t_avg, steps);
    test_calibrate();
    test_bad();
    test_names();
    test_shift();
    test_base();
    test_reports();
    test_build_lines();
    test_kernels();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
