/* tests/test_sim_golden.c -- golden outputs: every algorithm's short run, byte for byte.
 *
 * Why: issue 38 redesigns the engine, the scenario loader and every algorithm, and must not change
 * what any run writes. These files were recorded with the binary before that redesign; a change
 * to any of them is a change of behaviour, found at its first differing line.
 *
 * What: each case below (scenarios/tiny.yaml, every registered algorithm on it for 3 or 4 rounds
 * with the --set overrides that reach its distinctive phases, and the protocols' variants: async,
 * a sync deadline with over-commit, FjORD sized by capacity) is run three ways by $FEDSIM_BIN,
 * its outputs compared with tests/golden/<case>/:
 *   check.txt      `fedsim check`: stdout, exit status and stderr (the source folder as <root>,
 *                  the state cache's default budget, a share of this machine's memory, as <budget>)
 *   cost/          `fedsim run --cost-only`: metrics.tsv, clients.tsv, timeline.tsv, masks.tsv
 *                  (when the algorithm writes one), and events.txt: `fedsim events` of
 *                  events.msgpack, after a first line with the size and FNV-1a hash of its bytes
 *   trained/       the same outputs of the run with its training math
 *
 * Why the same bytes on any x86-64 machine (the suite runs on AMD Zen 4 and Intel Sapphire
 * Rapids, whose OpenBLAS picks other kernels):
 * - Every run uses OPENBLAS_CORETYPE=Prescott (OpenBLAS's SSE3 kernels: no FMA, the same
 *   instructions on every x86-64 CPU), OPENBLAS_NUM_THREADS=1 and --workers 0 (the test checks
 *   that fedsim reports Prescott). With a kernel set forced, what OpenBLAS still takes from the CPU
 *   is the L2 size (kernel/setparam-ref.c), which sets the Prescott GEMM's blocks over M and N
 *   (sgemm_p, and sgemm_r from it), never over K: C is cut into other tiles, and each element's
 *   sum over K runs in the same Q-blocks and order.
 * - fedsim's own kernels (nn/ops.c and the rest) are built for the test with -O1 and no -march,
 *   so they are baseline x86-64 code; nothing in the project dispatches on the CPU at run time
 *   (no __builtin_cpu_supports, target attributes or ifuncs outside sim/blas.c's kernel choice,
 *   which an OPENBLAS_CORETYPE set by the caller turns off). -std=c11 keeps GCC from contracting
 *   a*b+c into an FMA even where one exists.
 * - glibc's libm (exp, log, pow, cos: the data generator's and partition's draws, softmax, the
 *   gates) has ifunc variants chosen by the CPU's FMA and AVX2; every x86-64 CPU with both (Intel
 *   since Haswell, AMD since Zen: Zen 4 and Sapphire Rapids both) gets the same variant. On a CPU
 *   without them, or not x86-64, the test says SKIP and compares nothing.
 *
 * Cost-only runs and `fedsim check` hold no trained value (times, bytes and FLOPs from counts,
 * the data's and partition's draws), so they do not depend on the BLAS kernels at all; trained
 * runs (accuracies, losses, masks, sparsity-driven byte counts) hold on the conditions above. The
 * release build (-O3 -march=native) is not relied on: forced to Prescott on Zen 4 it wrote the
 * same bytes, and the same trained outputs came on the Haswell kernels and with --workers 2.
 *
 * How a later session uses it: `make test` runs it; a failure names the case, the file and the
 * first differing line. Regenerate only when an output changes on purpose:
 * `FEDSIM_GOLDEN_UPDATE=1 build/test/tests/test_sim_golden` (from the repository root) rewrites
 * every golden file, then review `git diff tests/golden` and name the outputs that changed, and
 * why, in the commit and the closing note. A case whose golden files are missing fails; the
 * update records them. Cases run from the repository root (the scenario paths are relative). */
#include "sim/budget.h"
#include "sim/units.h"
#include "tests/check.h"
#include "tests/files.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* A case: a scenario and its overrides (each one word, passed as --set WORD). */
static const struct {
    const char *name, *scenario, *sets;
} cases[] = {
        {"tiny", "scenarios/tiny.yaml", ""},
        {"fedavg", "scenarios/tiny.yaml", "algorithm.name=fedavg rounds=3"},
        {"fedprox", "scenarios/tiny.yaml", "algorithm.name=fedprox rounds=3"},
        {"local", "scenarios/tiny.yaml", "algorithm.name=local rounds=3"},
        {"spafl", "scenarios/tiny.yaml", "algorithm.name=spafl rounds=3"},
        {"spafl-local", "scenarios/tiny.yaml", "algorithm.name=spafl-local rounds=3"},
        {"heterofl", "scenarios/tiny.yaml", "algorithm.name=heterofl rounds=3"},
        {"fjord", "scenarios/tiny.yaml", "algorithm.name=fjord rounds=3"},
        {"fedrolex", "scenarios/tiny.yaml", "algorithm.name=fedrolex rounds=3"},
        /* two warmup rounds of personal subnetworks, then FedAvg (tiny's 0.125 has none) */
        {"fedpews", "scenarios/tiny.yaml",
         "algorithm.name=fedpews rounds=3 algorithm.pews.warmup=0.67"},
        {"pfedgate", "scenarios/tiny.yaml", "algorithm.name=pfedgate rounds=3"},
        {"fedavg-ft", "scenarios/tiny.yaml", "algorithm.name=fedavg-ft rounds=3"},
        /* one iteration over 4 rounds: phases 1, 2a and 2b all run (2 iterations in 3 rounds
         * leave only phase 2b, which uploads nothing) */
        {"dmpfl", "scenarios/tiny.yaml",
         "algorithm.name=dmpfl rounds=4 algorithm.dmpfl.iterations=1"},
        {"dmpfl+", "scenarios/tiny.yaml",
         "algorithm.name=dmpfl+ rounds=4 algorithm.dmpfl.iterations=1"},
        {"fedper", "scenarios/tiny.yaml", "algorithm.name=fedper rounds=3"},
        {"lg-fedavg", "scenarios/tiny.yaml", "algorithm.name=lg-fedavg rounds=3"},
        {"fedrep", "scenarios/tiny.yaml", "algorithm.name=fedrep rounds=3"},
        {"ditto", "scenarios/tiny.yaml", "algorithm.name=ditto rounds=3"},
        {"apfl", "scenarios/tiny.yaml", "algorithm.name=apfl rounds=3"},
        {"pa3dfl", "scenarios/tiny.yaml", "algorithm.name=pa3dfl rounds=3"},
        {"pfedhn", "scenarios/tiny.yaml", "algorithm.name=pfedhn rounds=3"},
        /* the protocols and sizing the engine owns */
        {"async", "tests/golden/tiny-async.yaml", ""},
        {"deadline", "scenarios/tiny.yaml",
         "rounds=3 federation.deadline=1s federation.over_commit=1.5"},
        {"fjord-capacity", "scenarios/tiny.yaml",
         "algorithm.name=fjord rounds=3 algorithm.width.by=capacity devices.capacity=uniform"},
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* a run's outputs compared as they are (masks.tsv: only algorithms that write one) */
static const char *const outs[] = {"metrics.tsv", "clients.tsv", "timeline.tsv", "masks.tsv"};

static const char *bin;
static char tmp[64];
static int update;

/* Run a shell command; its exit status, or -1 when it did not exit. */
static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Write n bytes to path; 0, or -1 after saying why. */
static int write_file(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        printf("cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    int ok = fwrite(data, 1, n, f) == n;
    if (fclose(f)) ok = 0;
    if (!ok) printf("cannot write %s: %s\n", path, strerror(errno));
    return ok ? 0 : -1;
}

/* Compare the file `got` with the golden file `want`, both read whole; on a difference, say which
 * line differs first and show both. With FEDSIM_GOLDEN_UPDATE set, the golden becomes `got`. */
static void compare(const char *what, const char *got, size_t n_got, const char *want)
{
    if (update) {
        CHECK_MSG(write_file(want, got, n_got) == 0, "%s: golden file written", want);
        return;
    }
    size_t n_want;
    char *w = test_slurp(want, &n_want);
    if (!w) {
        CHECK_MSG(0, "%s: no golden file %s (record it with FEDSIM_GOLDEN_UPDATE=1)", what, want);
        return;
    }
    if (n_want == n_got && !memcmp(w, got, n_got)) {
        CHECK(1);
        free(w);
        return;
    }
    /* the first line that differs, 1-based, and where it starts in each */
    size_t line = 1, start = 0, i = 0;
    while (i < n_got && i < n_want && got[i] == w[i]) {
        if (got[i] == '\n') line++, start = i + 1;
        i++;
    }
    int lw = (int)strcspn(w + start, "\n"),
        lg = (int)(n_got > start ? strcspn(got + start, "\n") : 0);
    CHECK_MSG(0, "%s differs from %s at line %zu:\n  golden: %.*s%s\n  now:    %.*s%s", what, want,
              line, lw > 300 ? 300 : lw, w + start, start >= n_want ? "(end of file)" : "",
              lg > 300 ? 300 : lg, n_got > start ? got + start : "",
              start >= n_got ? "(end of file)" : "");
    free(w);
}

/* Compare a file the run wrote with its golden file. */
static void compare_file(const char *what, const char *path, const char *want)
{
    size_t n;
    char *got = test_slurp(path, &n);
    if (!got) {
        CHECK_MSG(0, "%s: the run wrote no %s", what, path);
        return;
    }
    compare(what, got, n, want);
    free(got);
}

/* FNV-1a, 64 bits: events.msgpack's bytes summarized in the line above its text. */
static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/* The --set arguments of a case, one per word of sets. */
static void set_args(const char *sets, char *out, size_t n)
{
    size_t k = 0;
    out[0] = 0;
    while (*sets) {
        size_t w = strcspn(sets, " ");
        if (w) k += (size_t)snprintf(out + k, n - k, " --set '%.*s'", (int)w, sets);
        sets += w;
        while (*sets == ' ')
            sets++;
    }
}

/* `fedsim check`: its stdout, exit status and stderr as one text; the source folder fedsim was
 * built in (the default device catalog's path) becomes <root>, the same in every checkout, and
 * the state cache's default budget (a quarter of this machine's memory) <budget>. */
static void run_check(int c, const char *sets)
{
    char cmd[2048], out[160], err[160];
    snprintf(out, sizeof out, "%s/check.out", tmp);
    snprintf(err, sizeof err, "%s/check.err", tmp);
    snprintf(cmd, sizeof cmd, "%s check %s%s >%s 2>%s; echo \"--- exit $?\" >>%s", bin,
             cases[c].scenario, sets, out, err, out);
    CHECK_MSG(sh(cmd) == 0, "%s: fedsim check ran", cases[c].name);
    size_t no, ne;
    char *o = test_slurp(out, &no), *e = test_slurp(err, &ne);
    if (!o || !e) {
        CHECK_MSG(0, "%s: fedsim check's output is missing", cases[c].name);
        free(o), free(e);
        return;
    }
    size_t cap = 2 * (no + ne) + 64, n = 0;
    char *text = malloc(cap);
    char size[32], budget[96];
    sim_format_bytes(size, sizeof size, (double)sim_state_budget_default());
    snprintf(budget, sizeof budget, "cache budget %s (--state-memory's default", size);
    const char *from[2] = {FEDSIM_ROOT, budget},
               *to[2] = {"<root>", "cache budget <budget> (--state-memory's default"};
    const char *parts[2] = {o, e};
    for (int p = 0; p < 2; p++) {
        if (p) n += (size_t)snprintf(text + n, cap - n, "--- stderr\n");
        for (const char *s = parts[p]; *s;) {
            int r = 0;
            while (r < 2 && strncmp(s, from[r], strlen(from[r])))
                r++;
            if (r < 2) {
                n += (size_t)snprintf(text + n, cap - n, "%s", to[r]);
                s += strlen(from[r]);
            } else {
                text[n++] = *s++;
            }
        }
    }
    char what[160], want[300];
    snprintf(what, sizeof what, "%s: check", cases[c].name);
    snprintf(want, sizeof want, "tests/golden/%s/check.txt", cases[c].name);
    compare(what, text, n, want);
    free(text), free(o), free(e);
}

/* `fedsim run` (cost-only or trained) into a fresh folder; its outputs against the golden ones. */
static void run_case(int c, const char *sets, int cost_only)
{
    const char *mode = cost_only ? "cost" : "trained";
    char dir[160], cmd[2048], err[200], what[200], want[300], path[300];
    snprintf(dir, sizeof dir, "%s/%s", tmp, mode);
    snprintf(err, sizeof err, "%s/run.err", tmp);
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && %s run %s%s%s --out %s -q --workers 0 --plots none "
             "--checkpoint-minutes 0 >/dev/null 2>%s",
             dir, bin, cases[c].scenario, sets, cost_only ? " --cost-only" : "", dir, err);
    int rc = sh(cmd);
    if (rc != 0) {
        size_t n;
        char *e = test_slurp(err, &n);
        CHECK_MSG(0, "%s: fedsim run (%s) exits %d: %s", cases[c].name, mode, rc, e ? e : "");
        free(e);
        return;
    }
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, outs[i]);
        snprintf(what, sizeof what, "%s: %s %s", cases[c].name, mode, outs[i]);
        snprintf(want, sizeof want, "tests/golden/%s/%s/%s", cases[c].name, mode, outs[i]);
        if (!strcmp(outs[i], "masks.tsv") && !test_readable(path)) {
            /* an algorithm that writes none must keep writing none */
            if (update)
                remove(want);
            else
                CHECK_MSG(!test_readable(want), "%s: the run wrote none, the golden run did", what);
            continue;
        }
        compare_file(what, path, want);
    }
    /* events.msgpack: its size and hash, then its text (where a difference is found and shown) */
    snprintf(path, sizeof path, "%s/events.msgpack", dir);
    size_t nm, nt;
    char *m = test_slurp(path, &nm);
    snprintf(cmd, sizeof cmd, "%s events %s >%s/events.body", bin, dir, tmp);
    CHECK_MSG(m && sh(cmd) == 0, "%s: %s events.msgpack read by fedsim events", cases[c].name,
              mode);
    snprintf(path, sizeof path, "%s/events.body", tmp);
    char *t = test_slurp(path, &nt);
    if (m && t) {
        char *text = malloc(nt + 128);
        int h = snprintf(text, 128, "# events.msgpack: %zu bytes, FNV-1a 64 %016llx\n", nm,
                         (unsigned long long)fnv1a(m, nm));
        memcpy(text + h, t, nt);
        snprintf(what, sizeof what, "%s: %s events", cases[c].name, mode);
        snprintf(want, sizeof want, "tests/golden/%s/%s/events.txt", cases[c].name, mode);
        compare(what, text, (size_t)h + nt, want);
        free(text);
    }
    free(m), free(t);
}

/* Whether glibc's libm and OpenBLAS's Prescott kernels are the code the goldens were made with
 * (the header's argument): x86-64 with FMA and AVX2. */
static int same_math(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

int main(void)
{
    if (!same_math()) {
        printf("SKIP golden outputs: they hold on x86-64 CPUs with FMA and AVX2 (glibc's libm "
               "variants), and this CPU is not one\n");
        return CHECK_DONE();
    }
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    update = getenv("FEDSIM_GOLDEN_UPDATE") != NULL;
    /* for the fedsim processes this test starts (its own BLAS has already chosen) */
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    snprintf(tmp, sizeof tmp, "/tmp/fedsim-golden-XXXXXX");
    if (!mkdtemp(tmp)) return 1;

    char cmd[512], path[200];
    snprintf(path, sizeof path, "%s/help.txt", tmp);
    snprintf(cmd, sizeof cmd, "%s help >%s 2>&1", bin, path);
    sh(cmd);
    size_t n;
    char *help = test_slurp(path, &n);
    CHECK_MSG(help && strstr(help, "In use here: Prescott."),
              "fedsim runs on the Prescott kernels the goldens were made with");
    free(help);

    for (size_t c = 0; c < N_CASES; c++) {
        char sets[1024];
        set_args(cases[c].sets, sets, sizeof sets);
        if (update) {
            snprintf(cmd, sizeof cmd, "mkdir -p 'tests/golden/%s/cost' 'tests/golden/%s/trained'",
                     cases[c].name, cases[c].name);
            CHECK_MSG(sh(cmd) == 0, "%s: golden folders made", cases[c].name);
        }
        run_check((int)c, sets);
        run_case((int)c, sets, 1);
        run_case((int)c, sets, 0);
    }
    if (update) printf("golden files rewritten: review `git diff tests/golden`\n");
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    sh(cmd);
    return CHECK_DONE();
}
