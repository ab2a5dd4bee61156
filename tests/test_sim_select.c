/* tests/test_sim_select.c -- the client selection policies (sim/select.h).
 *
 * Each policy's pick on a view built by hand, against values worked out by hand: Oort's scores
 * for three clients (utility, staleness bonus, system penalty; T given and T from the explored
 * durations' percentile), its exploration/exploitation split and blacklisting; power-of-choice
 * (losses ranked, unknown first; draws weighted by samples); fastest (k shortest, deadline_only);
 * available (P(online through the job) per availability kind). Then the engine: the view holds
 * only arrived reports (a client never selected has no loss; a job in flight's loss is not
 * shown). Then through $FEDSIM_BIN on scenarios/tiny.yaml, each non-uniform policy, sync (and
 * async for two): the same outputs with 0 and 2 workers, and stopped after a checkpoint and
 * resumed the same as straight through. uniform's outputs are the goldens' (test_sim_golden).
 */
#include "tests/check.h"
#include "tests/files.h"

#include "sim/engine_int.h"
#include "sim/scenario.h"
#include "sim/select.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* ---- a view by hand ---- */

typedef struct fake {
    sim_sel_client c[16];
    int32_t cand[16];
} fake;

static void fake_client(const void *ctx, int32_t c, sim_sel_client *out)
{
    *out = ((const fake *)ctx)->c[c];
}

/* a client never heard from */
static sim_sel_client fresh(int samples)
{
    return (sim_sel_client){.samples = samples,
                            .predicted_s = NAN,
                            .loss = NAN,
                            .duration_s = NAN,
                            .last_round = -1};
}

/* a client whose last job (selected in last) reported loss after duration seconds */
static sim_sel_client seen(int samples, double loss, double duration, int last)
{
    sim_sel_client c = fresh(samples);
    c.loss = loss, c.duration_s = duration, c.last_round = last;
    c.jobs = c.arrived = 1;
    return c;
}

static sim_sel_view view_of(fake *f, int n, int round)
{
    for (int i = 0; i < n; i++)
        f->cand[i] = i;
    return (sim_sel_view){
            .round = round, .n = n, .cand = f->cand, .n_cand = n, .client = fake_client, .ctx = f};
}

static const void *load(sim_sel_config *c, const char *text)
{
    sim_err err = {0};
    int rc = sim_sel_config_load(c, text, NULL, &err);
    CHECK_MSG(rc == SIM_OK, "%s: %s", text, err.msg);
    return rc ? NULL : c->cfg;
}

static int pick(const sim_sel_policy *p, const void *cfg, const sim_sel_view *v, int k,
                int32_t *out, uint64_t seed)
{
    sim_rng r;
    sim_rng_seed(&r, seed, p->purpose, 0);
    return p->pick(NULL, cfg, v, k, out, &r);
}

static int has(const int32_t *ids, int n, int32_t c)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == c) return 1;
    return 0;
}

static void test_oort_scores(void)
{
    sim_sel_config sc;
    fake f = {0};
    /* round 4 (Oort's 5th): U = 200, 50, 100 of max 200; bonus sqrt(0.1·ln 5/(last + 1)) */
    f.c[0] = seen(100, 2.0, 5, 3);
    f.c[1] = seen(50, 1.0, 20, 1);
    f.c[2] = seen(200, 0.5, 10, 0);
    sim_sel_view v = view_of(&f, 3, 4);
    double s[3], T;
    const void *cfg = load(&sc, "{name: oort, oort: {alpha: 2, duration: 10 s}}");
    if (!cfg) return;
    sim_sel_oort_scores(cfg, &v, s, &T);
    CHECK(fabs(T - 10) < 1e-12);
    CHECK_MSG(fabs(s[0] - 1.200589) < 1e-5, "c0: 1 + 0.200589 (no penalty: 5 s < T), got %.6f",
              s[0]);
    CHECK_MSG(fabs(s[1] - 0.133419) < 1e-5, "c1: (0.25 + 0.283676)·(10/20)², got %.6f", s[1]);
    CHECK_MSG(fabs(s[2] - 0.901178) < 1e-5, "c2: 0.5 + 0.401178 (t = T: no penalty), got %.6f",
              s[2]);
    /* a job that counted its samples' losses: L is their rms (3), not the mean (2); c1 counted
     * none and keeps its mean: U = 300, 50, 100 of max 300 */
    f.c[0].loss_rms = 3.0;
    sim_sel_oort_scores(cfg, &v, s, &T);
    CHECK_MSG(fabs(s[0] - 1.200589) < 1e-5 && fabs(s[2] - (1.0 / 3 + 0.401178)) < 1e-5 &&
                      fabs(s[1] - (50.0 / 300 + 0.283676) / 4) < 1e-5,
              "by the rms loss: %.6f %.6f %.6f", s[0], s[1], s[2]);
    f.c[0].loss_rms = 0;
    sim_sel_config_destroy(&sc);
    /* T from the durations: the 0.3 share into [5, 10, 20] is index 0, 5 s */
    cfg = load(&sc, "{name: oort, oort: {alpha: 2}}");
    if (!cfg) return;
    sim_sel_oort_scores(cfg, &v, s, &T);
    CHECK(fabs(T - 5) < 1e-12);
    CHECK_MSG(fabs(s[1] - 0.533676 / 16) < 1e-5, "c1 penalized (5/20)², got %.6f", s[1]);
    CHECK_MSG(fabs(s[2] - 0.901178 / 4) < 1e-5, "c2 penalized (5/10)², got %.6f", s[2]);
    /* an unexplored client has no score */
    f.c[1] = fresh(50);
    sim_sel_oort_scores(cfg, &v, s, &T);
    CHECK(isnan(s[1]) && !isnan(s[0]));
    sim_sel_config_destroy(&sc);
}

static void test_oort_split(void)
{
    sim_sel_config sc;
    fake f = {0};
    /* clients 0..4 explored with scores rising with the id (same loss, more samples), 5..9 not */
    for (int i = 0; i < 5; i++)
        f.c[i] = seen(100 * (i + 1), 1, 1, 0);
    for (int i = 5; i < 10; i++)
        f.c[i] = fresh(100);
    sim_sel_view v = view_of(&f, 10, 0);
    const void *cfg = load(&sc, "{name: oort, oort: {epsilon: 0.5, epsilon_decay: 0.5, "
                                "epsilon_min: 0.25}}");
    if (!cfg) return;
    int32_t out[10];
    for (uint64_t seed = 1; seed <= 20; seed++) {
        int got = pick(&sim_sel_oort, cfg, &v, 4, out, seed);
        int explored = 0;
        for (int i = 0; i < got; i++)
            explored += out[i] < 5;
        CHECK_MSG(got == 4 && explored == 2 && has(out, got, 4) && has(out, got, 3),
                  "round 0, ε 0.5: the two best explored and two unexplored (seed %llu)",
                  (unsigned long long)seed);
        for (int i = 1; i < got; i++)
            CHECK(out[i - 1] < out[i]); /* client-id order */
    }
    v.round = 3; /* ε = max(0.5·0.5³, 0.25) = 0.25: three exploit */
    int got = pick(&sim_sel_oort, cfg, &v, 4, out, 1);
    CHECK_MSG(got == 4 && has(out, got, 4) && has(out, got, 3) && has(out, got, 2) &&
                      !has(out, got, 1) && !has(out, got, 0),
              "round 3: the three best explored and one unexplored");
    sim_sel_config_destroy(&sc);
    /* blacklisting: the best client, selected 3 times, is left out while others remain */
    cfg = load(&sc, "{name: oort, oort: {epsilon: 0, epsilon_min: 0, blacklist_rounds: 2}}");
    if (!cfg) return;
    f.c[4].jobs = 3;
    got = pick(&sim_sel_oort, cfg, &v, 3, out, 1);
    CHECK_MSG(got == 3 && !has(out, got, 4) && has(out, got, 3) && has(out, got, 2) &&
                      has(out, got, 1),
              "blacklisted client 4 skipped for the next best");
    got = pick(&sim_sel_oort, cfg, &v, 10, out, 1);
    CHECK_MSG(got == 10 && has(out, got, 4), "a blacklisted client fills when none else is left");
    sim_sel_config_destroy(&sc);
}

static void test_poc(void)
{
    sim_sel_config sc;
    fake f = {0};
    f.c[0] = seen(100, 0.5, 1, 0);
    f.c[1] = fresh(100);
    f.c[2] = seen(100, 2.0, 1, 0);
    f.c[3] = seen(100, 1.0, 1, 0);
    sim_sel_view v = view_of(&f, 4, 1);
    const void *cfg = load(&sc, "{name: power-of-choice, power-of-choice: {d: 4}}");
    if (!cfg) return;
    int32_t out[4];
    int got = pick(&sim_sel_poc, cfg, &v, 2, out, 3);
    CHECK_MSG(got == 2 && out[0] == 1 && out[1] == 2,
              "all four drawn: the unknown loss, then the highest (2.0)");
    got = pick(&sim_sel_poc, cfg, &v, 3, out, 3);
    CHECK_MSG(got == 3 && out[0] == 1 && out[1] == 2 && out[2] == 3, "then 1.0");
    sim_sel_config_destroy(&sc);
    /* d = 2 of three: a client without samples is never drawn while two with samples remain,
     * however high its loss; samples 900 against 100 win the single draw about 90% of times */
    cfg = load(&sc, "{name: power-of-choice, power-of-choice: {d: 2}}");
    if (!cfg) return;
    f.c[0] = seen(900, 1, 1, 0);
    f.c[1] = seen(100, 1, 1, 0);
    f.c[2] = seen(0, 9, 1, 0);
    v = view_of(&f, 3, 1);
    int zero = 0;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        got = pick(&sim_sel_poc, cfg, &v, 1, out, seed);
        zero += got == 1 && out[0] == 2;
    }
    CHECK_MSG(zero == 0, "the client without samples was drawn %d times", zero);
    sim_sel_config_destroy(&sc);
    cfg = load(&sc, "{name: power-of-choice, power-of-choice: {d: 1}}");
    if (!cfg) return;
    v = view_of(&f, 2, 1);
    int big = 0;
    for (uint64_t seed = 1; seed <= 2000; seed++)
        big += pick(&sim_sel_poc, cfg, &v, 1, out, seed) == 1 && out[0] == 0;
    CHECK_MSG(big > 1740 && big < 1860, "900 of 1000 samples drawn %d of 2000 (1800 ± 60)", big);
    sim_sel_config_destroy(&sc);
}

static void test_fastest(void)
{
    sim_sel_config sc;
    fake f = {0};
    double t[5] = {3, 1, 2, 1, NAN};
    for (int i = 0; i < 5; i++) {
        f.c[i] = fresh(10);
        f.c[i].predicted_s = t[i];
    }
    sim_sel_view v = view_of(&f, 5, 0);
    const void *cfg = load(&sc, "{name: fastest}");
    if (!cfg) return;
    int32_t out[5];
    int got = pick(&sim_sel_fastest, cfg, &v, 2, out, 1);
    CHECK_MSG(got == 2 && out[0] == 1 && out[1] == 3, "the two 1 s jobs");
    got = pick(&sim_sel_fastest, cfg, &v, 3, out, 1);
    CHECK_MSG(got == 3 && out[0] == 1 && out[1] == 2 && out[2] == 3, "then the 2 s one");
    sim_sel_config_destroy(&sc);
    sim_fed_config fed = {.mode = SIM_SYNC, .deadline = 2500000000};
    sim_key_ctx ctx = {.parent = &fed};
    sim_err err = {0};
    CHECK(sim_sel_config_load(&sc, "{name: fastest, fastest: {deadline_only: true}}", &ctx, &err) ==
          SIM_OK);
    v.deadline = fed.deadline;
    got = pick(&sim_sel_fastest, sc.cfg, &v, 5, out, 1);
    CHECK_MSG(got == 3 && out[0] == 1 && out[1] == 2 && out[2] == 3,
              "deadline_only, 2.5 s: the three that make it, got %d", got);
    got = pick(&sim_sel_fastest, sc.cfg, &v, 1, out, 1);
    CHECK(got == 1 && out[0] >= 1 && out[0] <= 3);
    sim_sel_config_destroy(&sc);
    /* without a deadline it is refused at the key */
    fed.deadline = 0;
    CHECK(sim_sel_config_load(&sc, "{name: fastest, fastest: {deadline_only: true}}", &ctx, &err) ==
                  SIM_EINVAL &&
          strstr(err.msg, "deadline_only: needs") && err.line == 1);
    sim_sel_config_destroy(&sc);
}

static void test_available(void)
{
    dev_avail_spec always = {0}, m10 = {.kind = DEV_AVAIL_MARKOV, .mean_on_ns = 10000000000},
                   m100 = {.kind = DEV_AVAIL_MARKOV, .mean_on_ns = 100000000000};
    CHECK(sim_sel_stay_online(&always, 0, 5) == 1);
    CHECK(fabs(sim_sel_stay_online(&m10, 0, 5) - 0.606531) < 1e-6);  /* exp(-0.5) */
    CHECK(fabs(sim_sel_stay_online(&m100, 0, 5) - 0.951229) < 1e-6); /* exp(-0.05) */
    /* a 10 s loop on [0, 4), off [4, 5), on [5, 10): one 9 s online span across the loop */
    dev_trace *tr = NULL;
    sim_err err = {0};
    CHECK(dev_trace_parse(&tr, "loop 10 s\n0 s 1\n4 s 0\n5 s 1\n", "t", DEV_TRACE_AVAIL, &err) ==
          SIM_OK);
    if (!tr) return;
    dev_avail_spec rnd = {.kind = DEV_AVAIL_TRACE, .trace = tr, .offset_random = 1};
    dev_avail_spec fix = {.kind = DEV_AVAIL_TRACE, .trace = tr};
    CHECK_MSG(fabs(sim_sel_stay_online(&rnd, 0, 3) - 6.0 / 9) < 1e-12, "random offset: (9−3)/9");
    CHECK(sim_sel_stay_online(&rnd, 0, 10) == 0);
    CHECK(sim_sel_stay_online(&fix, 0, 3) == 1);            /* on until 4 s */
    CHECK(sim_sel_stay_online(&fix, 0, 5) == 0);            /* off at 4 s */
    CHECK(sim_sel_stay_online(&fix, 6000000000, 5) == 1);   /* 6 s: on until 14 s */
    CHECK(sim_sel_stay_online(&fix, 6000000000, 8.5) == 0); /* past 14 s */
    /* the ranking: always first, then the longer-lived Markov, ties by the stream */
    fake f = {0};
    dev_profile d[3] = {{.avail = m10}, {.avail = always}, {.avail = m100}};
    for (int i = 0; i < 3; i++) {
        f.c[i] = fresh(10);
        f.c[i].predicted_s = 5;
        f.c[i].device = &d[i];
    }
    sim_sel_view v = view_of(&f, 3, 0);
    int32_t out[3];
    int got = pick(&sim_sel_available, NULL, &v, 2, out, 1);
    CHECK_MSG(got == 2 && out[0] == 1 && out[1] == 2, "always and mean_on 100 s");
    dev_trace_free(tr);
}

/* a bad key of a policy's section is an error at its line and column, naming it */
static void test_keys(void)
{
    sim_sel_config sc;
    sim_err err = {0};
    CHECK(sim_sel_config_load(&sc, "name: oort\noort:\n  alpha: -1\n", NULL, &err) == SIM_EINVAL &&
          err.line == 3 && err.col == 10 && strstr(err.msg, "alpha"));
    sim_sel_config_destroy(&sc);
    CHECK(sim_sel_config_load(&sc, "name: oort\noort: {alpah: 1}\n", NULL, &err) == SIM_EINVAL &&
          err.line == 2 && strstr(err.msg, "alpah"));
    sim_sel_config_destroy(&sc);
    CHECK(sim_sel_config_load(&sc, "name: fastst\n", NULL, &err) == SIM_EINVAL &&
          strstr(err.msg, "unknown name 'fastst'; did you mean 'fastest'?"));
    sim_sel_config_destroy(&sc);
    /* a policy's section beside another's is read and checked too (a sweep over the name) */
    CHECK(sim_sel_config_load(&sc, "name: oort\nfastest: {deadline_only: maybe}\n", NULL, &err) ==
                  SIM_EINVAL &&
          err.line == 2 && strstr(err.msg, "deadline_only"));
    sim_sel_config_destroy(&sc);
    CHECK(sim_sel_config_load(&sc, "{}", NULL, &err) == SIM_OK && sc.policy == &sim_sel_uniform);
    sim_sel_config_destroy(&sc);
}

/* ---- the engine's view: arrived reports only ---- */

static void test_engine_view(void)
{
    sim_scenario sc;
    sim_err err = {0};
    const char *sets[] = {"federation.per_round=2", "federation.over_commit=1.5",
                          "federation.selection.name=oort"};
    if (sim_scenario_load(&sc, "scenarios/tiny.yaml", sets, 3, &err)) {
        CHECK_MSG(0, "tiny.yaml: %s", err.msg);
        return;
    }
    sc.spec.quiet = 1;
    sc.spec.stop_after_round = 1;
    sim_engine *e = NULL;
    CHECK_MSG(sim_engine_new(&e, &sc.spec, &err) == SIM_OK, "%s", err.msg);
    if (e) CHECK_MSG(sim_engine_run(e, &err) == SIM_OK, "%s", err.msg);
    int never = 0, in_flight = 0, reported = 0;
    for (int32_t c = 0; e && c < e->n; c++) {
        sim_sel_client v;
        sim_eng_sel_client(e, c, &v);
        const sim_client *cl = &e->c[c];
        CHECK(v.samples == sc.part.n[c] && v.device == &sc.devices[c] && v.jobs == cl->jobs);
        if (v.jobs == 0) {
            never++;
            CHECK_MSG(v.last_round == -1 && isnan(v.loss) && isnan(v.loss_rms) &&
                              isnan(v.duration_s),
                      "client %d never selected: nothing known", c);
        }
        if (v.arrived == 0) CHECK_MSG(isnan(v.loss), "client %d: no report, no loss", c);
        if (cl->busy) {
            in_flight++;
            CHECK_MSG(!(v.loss == cl->job_loss) && !(v.loss_rms == cl->job_loss_rms),
                      "client %d: the job in flight's loss is hidden", c);
        }
        if (v.arrived > 0) {
            reported++;
            CHECK(isfinite(v.loss) && v.duration_s > 0 && v.steps > 0);
            /* FedAvg's jobs count every training sample's loss */
            CHECK_MSG(isfinite(v.loss_rms) && v.loss_rms > 0, "client %d: rms loss %g", c,
                      v.loss_rms);
        }
    }
    CHECK_MSG(never > 0 && in_flight > 0 && reported > 0,
              "the run has clients never selected (%d), in flight (%d) and reported (%d)", never,
              in_flight, reported);
    sim_engine_free(e);
    sim_scenario_destroy(&sc);
}

/* ---- through the binary: workers and resume ---- */

static char dir[64];
static const char *bin;

static int status_of(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run(const char *env, const char *name, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s %s run scenarios/tiny.yaml -q --plots none --out %s/%s --set rounds=4 %s "
             ">/dev/null 2>%s/%s.err",
             env, bin, dir, name, args, dir, name);
    return status_of(system(cmd));
}

static int resume(const char *name)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s resume %s/%s -q --plots none --workers 0 >/dev/null 2>&1", bin,
             dir, name);
    return status_of(system(cmd));
}

static void test_runs(void)
{
    static const char *const policies[] = {"oort", "power-of-choice", "fastest", "available"};
    static const char async_set[] =
            "--set federation.mode=async --set federation.concurrency=3 --set federation.buffer=2";
    CHECK(run("", "uniform", "--workers 0") == 0);
    for (int i = 0; i < 4; i++) {
        for (int async = 0; async <= (i % 2 == 0); async++) { /* async: oort, fastest */
            char args[512], a[64], b[64], s[64];
            const char *mode = async ? async_set : "";
            snprintf(a, sizeof a, "%s%s-w0", policies[i], async ? "-async" : "");
            snprintf(b, sizeof b, "%s%s-w2", policies[i], async ? "-async" : "");
            snprintf(s, sizeof s, "%s%s-stop", policies[i], async ? "-async" : "");
            snprintf(args, sizeof args, "--workers 0 --set federation.selection.name=%s %s",
                     policies[i], mode);
            CHECK_MSG(run("", a, args) == 0, "%s", a);
            snprintf(args, sizeof args, "--workers 2 --set federation.selection.name=%s %s",
                     policies[i], mode);
            CHECK_MSG(run("", b, args) == 0, "%s", b);
            CHECK_MSG(test_same_outputs(dir, a, b, 1), "%s: 0 and 2 workers agree", a);
            snprintf(args, sizeof args,
                     "--workers 0 --checkpoint-every 2 --set federation.selection.name=%s %s",
                     policies[i], mode);
            CHECK_MSG(run("FEDSIM_TEST_STOP_AFTER_CHECKPOINT=2", s, args) == 130,
                      "%s stops after its checkpoint", s);
            CHECK_MSG(resume(s) == 0 && test_same_outputs(dir, a, s, 1),
                      "%s: stopped and resumed = straight through", s);
        }
    }
    /* a policy that passes over every client that could take part says so: fastest's
     * deadline_only where no client is predicted to meet 50 ms */
    CHECK(run("", "none",
              "--set federation.selection.name=fastest --set "
              "federation.selection.fastest.deadline_only=true --set federation.deadline=50ms") ==
          2);
    char p[200];
    size_t len;
    snprintf(p, sizeof p, "%s/none.err", dir);
    char *msg = test_slurp(p, &len);
    CHECK_MSG(msg && strstr(msg, "round 0: federation.selection fastest picked none of the 8 "
                                 "clients that can take part"),
              "the policy is named: %s", msg ? msg : "");
    free(msg);
    /* the policies choose otherwise than uniform (so the comparisons above can fail) */
    CHECK_MSG(!test_same_outputs(dir, "uniform", "fastest-w0", 0), "fastest differs from uniform");
    CHECK_MSG(!test_same_outputs(dir, "uniform", "oort-w0", 0), "oort differs from uniform");
}

int main(void)
{
    test_oort_scores();
    test_oort_split();
    test_poc();
    test_fastest();
    test_available();
    test_keys();
    test_engine_view();
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-select-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_runs();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return CHECK_DONE();
}
