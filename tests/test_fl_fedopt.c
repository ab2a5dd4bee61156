/* tests/test_fl_fedopt.c -- FedOpt (algos/fedopt.c): FedAdam, FedYogi and FedAdagrad.
 *   - Three aggregations of crafted uploads (two clients of different weight and mass, the
 *     second's weight lowered below its mass as async staleness does) for each kind: x, m and v
 *     after each against the paper's Algorithm 2 computed here in double (m and v within a few
 *     double roundings, x within the float rounding of each step); Yogi's v meets both signs of
 *     v − Δ², and a zero coordinate. An aggregation with nothing absorbed changes nothing; a
 *     checkpoint restored into a fresh server steps to the same bits, and one of FedAvg's is
 *     refused.
 *   - The keys: a bad kind, an out-of-range or unit β, a zero τ are errors at their file:line:col;
 *     the defaults are written back into the scenario; algorithm.server_lr other than 1 is
 *     refused at its key when fedopt runs.
 *   - scenarios/tiny.yaml with each kind for 5 rounds learns: the global model's accuracy is above
 *     chance and its loss below the initial model's (the same run at lr 0); a run stopped after a
 *     checkpoint at round 2 and resumed ends as the straight run does.
 */
#include "algos/algo.h"
#include "nn/pack.h"
#include "sim/checkpoint.h"
#include "sim/engine.h"
#include "sim/scenario.h"
#include "tests/check.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const KIND[] = {"adam", "yogi", "adagrad"};

static const nn_layout *lay;

/* Client c's upload at aggregation t, coordinate j of the arena: small values of both signs,
 * zero at j = 0 and in the arena's alignment padding (which no message carries); at the third
 * step a third of the coordinates shrink, so that Yogi's v exceeds Δ² there. */
static float delta(int t, int c, size_t j)
{
    int live = 0;
    for (int i = 0; i < lay->n; i++)
        live |= j >= lay->t[i].off && j < lay->t[i].off + (size_t)lay->t[i].rows * lay->t[i].cols;
    if (j == 0 || !live) return 0;
    float d = (float)((int)((j * 7 + (size_t)t * 3 + (size_t)c * 5) % 11) - 5) * 0.01f;
    if (c == 1) d += 0.003f;
    return t == 2 && j % 3 == 0 ? d * 0.05f : d;
}

/* |err| in units of tol (a nonzero error against a zero tolerance is infinite) */
static double ratio(double err, double tol)
{
    return err == 0 ? 0 : fabs(err) / tol;
}

/* m and v from the server's checkpoint: [FedAvg's sums, m, v] */
static void moments(const fl_algo *a, void *s, double *m, double *v, size_t nf)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    a->server_save(s, &pk);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int ok = msgpack_unpack_next(&u, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS &&
             u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 3;
    const msgpack_object *o = ok ? u.data.via.array.ptr : NULL;
    ok = ok && o[1].type == MSGPACK_OBJECT_BIN && o[1].via.bin.size == nf * sizeof(double) &&
         o[2].type == MSGPACK_OBJECT_BIN && o[2].via.bin.size == nf * sizeof(double);
    CHECK_MSG(ok, "fedopt's server state is [sums, m, v]");
    if (ok) {
        memcpy(m, o[1].via.bin.ptr, nf * sizeof(double));
        memcpy(v, o[2].via.bin.ptr, nf * sizeof(double));
    }
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

/* Absorb aggregation t's two uploads (client 1: weight 3, mass 3; client 2: weight 2.5, mass 5)
 * and aggregate. */
static void step(const fl_algo *a, void *s, const nn_arch *arch, int t)
{
    size_t nf = arch->layout.n_floats;
    float *d = malloc(nf * sizeof(float));
    static const double weight[2] = {3, 2.5}, mass[2] = {3, 5};
    for (int c = 0; c < 2; c++) {
        for (size_t j = 0; j < nf; j++)
            d[j] = delta(t, c, j);
        msgpack_sbuffer up;
        msgpack_sbuffer_init(&up);
        nn_pack_params(&up, arch, d);
        sim_err err = {0};
        CHECK_MSG(a->server_absorb(s, c + 1, up.data, up.size, weight[c], mass[c], &err) == SIM_OK,
                  "absorb: %s", err.msg);
        msgpack_sbuffer_destroy(&up);
    }
    a->server_aggregate(s);
    free(d);
}

static void test_steps(void)
{
    const fl_algo *a = fl_algo_find("fedopt");
    CHECK(a != NULL && (a->flags & FL_HAS_GLOBAL));
    if (!a) return;
    nn_arch arch;
    sim_err err = {0};
    CHECK(nn_arch_build(&arch, "mlp:4-3-2", 1, 1, 4, 2, &err) == SIM_OK);
    size_t nf = arch.layout.n_floats;
    lay = &arch.layout;
    nn_model g;
    nn_model_init(&g, &arch, 1);
    double *m = malloc(nf * sizeof(double)), *v = malloc(nf * sizeof(double));
    double *x = malloc(nf * sizeof(double)), *rm = malloc(nf * sizeof(double));
    double *rv = malloc(nf * sizeof(double)), *tol = malloc(nf * sizeof(double));
    double *dmax = malloc(nf * sizeof(double));
    const double lr = 0.05, b1 = 0.8, b2 = 0.95, tau = 1e-3;
    for (int k = 0; k < 3; k++) {
        char text[160];
        snprintf(text, sizeof text,
                 "{name: fedopt, fedopt: {kind: %s, lr: %g, beta1: %g, beta2: %g, tau: %g}}",
                 KIND[k], lr, b1, b2, tau);
        fl_config cfg;
        CHECK_MSG(fl_config_load(&cfg, text, NULL, &err) == SIM_OK, "%s", err.msg);
        fl_env env = {&cfg, &arch, NULL, NULL, NULL, 11, 0, NULL, NULL, NULL, NULL};
        void *s = a->server_new(&env, &err);
        CHECK_MSG(s != NULL, "%s", err.msg);
        if (!s) continue;
        a->eval_params(s, -1, NULL, 0, &g);
        for (size_t j = 0; j < nf; j++)
            x[j] = g.params[j], rm[j] = 0, rv[j] = tau * tau, tol[j] = 0, dmax[j] = 0;
        int up = 0, down = 0; /* Yogi's signs of v − Δ² met */
        for (int t = 0; t < 3; t++) {
            step(a, s, &arch, t);
            double worst_x = 0, worst_mv = 0; /* in units of each one's tolerance */
            a->eval_params(s, -1, NULL, 0, &g);
            moments(a, s, m, v, nf);
            for (size_t j = 0; j < nf; j++) {
                double d = (3.0 * delta(t, 0, j) + 2.5 * delta(t, 1, j)) / 8, d2 = d * d;
                dmax[j] = fmax(dmax[j], fabs(d));
                rm[j] = b1 * rm[j] + (1 - b1) * d;
                if (k == 0) rv[j] = b2 * rv[j] + (1 - b2) * d2;
                if (k == 1) {
                    up += rv[j] > d2, down += rv[j] < d2;
                    rv[j] -= (1 - b2) * d2 * (rv[j] > d2 ? 1 : rv[j] < d2 ? -1 : 0);
                }
                if (k == 2) rv[j] += d2;
                x[j] += lr * rm[j] / (sqrt(rv[j]) + tau);
                /* x is a float rounded once a step: half an ulp of |x| each, 2^-24 relative */
                tol[j] += ldexp(fabs(x[j]), -24) * (1 + 1e-6);
                /* m and v: a few double operations on terms no larger than these */
                double tm = 16 * DBL_EPSILON * (fabs(rm[j]) + dmax[j]);
                double tv = 16 * DBL_EPSILON * (rv[j] + dmax[j] * dmax[j]);
                worst_x = fmax(worst_x, ratio(g.params[j] - x[j], tol[j]));
                worst_mv = fmax(worst_mv, fmax(ratio(m[j] - rm[j], tm), ratio(v[j] - rv[j], tv)));
            }
            CHECK_MSG(worst_x <= 1, "%s step %d: x off by %.3g of its float tolerance", KIND[k],
                      t + 1, worst_x);
            CHECK_MSG(worst_mv <= 1, "%s step %d: m or v off by %.3g of its tolerance", KIND[k],
                      t + 1, worst_mv);
            printf("%s step %d: x within %.3g of its tolerance, m and v within %.3g\n", KIND[k],
                   t + 1, worst_x, worst_mv);
        }
        if (k == 1)
            CHECK_MSG(up > 0 && down > 0, "Yogi met v > Δ² %d and v < Δ² %d times", up, down);

        /* nothing absorbed: no step (x, m and v as they were) */
        float *x0 = malloc(nf * sizeof(float));
        double *m0 = malloc(nf * sizeof(double)), *v0 = malloc(nf * sizeof(double));
        a->eval_params(s, -1, NULL, 0, &g);
        memcpy(x0, g.params, nf * sizeof(float));
        moments(a, s, m0, v0, nf);
        a->server_aggregate(s);
        a->eval_params(s, -1, NULL, 0, &g);
        moments(a, s, m, v, nf);
        CHECK_MSG(!memcmp(x0, g.params, nf * sizeof(float)) &&
                          !memcmp(m0, m, nf * sizeof(double)) &&
                          !memcmp(v0, v, nf * sizeof(double)),
                  "%s: an aggregation without mass changed the state", KIND[k]);

        /* the checkpoint restored into a fresh server: the next step is the same to the bit */
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        a->server_save(s, &pk);
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        CHECK(msgpack_unpack_next(&u, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS);
        void *s2 = a->server_new(&env, &err);
        CHECK_MSG(a->server_load(s2, &u.data, &err) == SIM_OK, "%s", err.msg);
        step(a, s, &arch, 1);
        step(a, s2, &arch, 1);
        a->eval_params(s, -1, NULL, 0, &g);
        memcpy(x0, g.params, nf * sizeof(float));
        a->eval_params(s2, -1, NULL, 0, &g);
        CHECK_MSG(!memcmp(x0, g.params, nf * sizeof(float)), "%s: restored server steps alike",
                  KIND[k]);
        msgpack_unpacked_destroy(&u);
        msgpack_sbuffer_destroy(&sb);
        /* FedAvg's state (no m, v) is refused */
        const fl_algo *fa = fl_algo_find("fedavg");
        void *sf = fa->server_new(&env, &err);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        fa->server_save(sf, &pk);
        msgpack_unpacked_init(&u);
        off = 0;
        CHECK(msgpack_unpack_next(&u, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS);
        CHECK(a->server_load(s2, &u.data, &err) == SIM_EFORMAT && strstr(err.msg, "fedopt"));
        msgpack_unpacked_destroy(&u);
        msgpack_sbuffer_destroy(&sb);
        fa->server_free(sf);
        a->server_free(s2);
        free(x0), free(m0), free(v0);
        a->server_free(s);
        fl_config_destroy(&cfg);
    }
    free(m), free(v), free(x), free(rm), free(rv), free(tol), free(dmax);
    nn_model_destroy(&g);
}

/* fl_config_load's status; msg gets its formatted error */
static int load(const char *text, char *msg, size_t cap)
{
    fl_config c;
    sim_err err = {0};
    int rc = fl_config_load(&c, text, NULL, &err);
    sim_err_format(&err, msg, cap);
    fl_config_destroy(&c);
    return rc;
}

static void test_keys(void)
{
    char msg[700];
    static const struct {
        const char *text, *want;
    } bad[] = {
            {"{name: fedopt,\n fedopt: {kind: sgd}}", "config:2:17: kind: 'sgd' is not one of"},
            {"{name: fedopt,\n fedopt: {beta2: 1.5}}", "config:2:18: beta2: 1.5 is out of range"},
            {"{name: fedopt,\n fedopt: {beta1: -0.1}}", "config:2:18: beta1: -0.1 is out of range"},
            {"{name: fedopt,\n fedopt: {beta1: 1}}", "config:2:18: beta1: must be below 1"},
            {"{name: fedopt,\n fedopt: {beta2: 1}}", "config:2:18: beta2: must be below 1"},
            {"{name: fedopt,\n fedopt: {tau: 0}}", "config:2:16: tau: 0 is out of range"},
            {"{name: fedopt,\n fedopt: {lr: -1}}", "config:2:15: lr: -1 is out of range"},
            /* checked when another algorithm runs, too */
            {"{name: fedavg,\n fedopt: {kind: sgd}}", "config:2:17: kind: 'sgd'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = load(bad[i].text, msg, sizeof msg);
        CHECK_MSG(rc == SIM_EINVAL && strstr(msg, bad[i].want), "%s: %s", bad[i].want, msg);
    }
    /* the defaults, read and written back into the scenario */
    sim_yaml *doc = NULL;
    sim_err err = {0};
    fl_config c;
    sim_key_ctx ctx = {.rounds = 10, .clients = 4};
    CHECK(sim_yaml_load_string(&doc, "{name: fedopt}", "config", &err) == SIM_OK);
    CHECK_MSG(fl_config_read(&c, doc, "", &ctx, &err) == SIM_OK, "%s", err.msg);
    const sim_yaml *sec = sim_yaml_get(doc, "fedopt");
    static const char *const key[] = {"kind", "lr", "beta1", "beta2", "tau"};
    static const char *const want[] = {"adam", "0.01", "0.9", "0.99", "0.001"};
    for (int i = 0; i < 5; i++) {
        const sim_yaml *n = sim_yaml_get(sec, key[i]);
        int ok = n && n->value &&
                 (i ? strtod(n->value, NULL) == strtod(want[i], NULL) : !strcmp(n->value, want[i]));
        CHECK_MSG(ok, "default %s: %s (want %s)", key[i], n && n->value ? n->value : "absent",
                  want[i]);
    }
    fl_config_destroy(&c);
    sim_yaml_free(doc);
    /* algorithm.server_lr: FedOpt's η is its own lr; another server_lr is refused at its key, but
     * only when fedopt runs (its section beside FedAvg leaves FedAvg's server_lr alone) */
    CHECK(fl_config_load(&c, "{name: fedopt,\n server_lr: 0.5}", NULL, &err) == SIM_EINVAL);
    CHECK_MSG(err.line == 2 && err.col == 13 && strstr(err.msg, "server_lr: 0.5") &&
                      strstr(err.msg, "fedopt.lr"),
              "server_lr refused: config:%d:%d: %s", err.line, err.col, err.msg);
    fl_config_destroy(&c);
    CHECK(fl_config_load(&c, "{name: fedavg, server_lr: 0.5, fedopt: {kind: yogi}}", NULL, &err) ==
          SIM_OK);
    fl_config_destroy(&c);
}

/* tiny.yaml with the overrides; totals in *t, SIM_OK or the error. out_dir and stop: a run
 * stopped after the checkpoint of that round; payload: resumed from it. */
static int run_tiny(const char *const *sets, int n, const char *out_dir, int stop,
                    const void *payload, size_t len, sim_totals *t)
{
    sim_scenario sc;
    sim_err err = {0};
    int rc = sim_scenario_load(&sc, "scenarios/tiny.yaml", sets, n, &err);
    if (!rc) {
        sc.spec.quiet = 1;
        sc.spec.out_dir = out_dir;
        sc.spec.stop_after_round = stop;
        sc.spec.resume = payload != NULL;
        sc.spec.resume_payload = payload;
        sc.spec.resume_len = len;
        sim_engine *e;
        rc = sim_engine_new(&e, &sc.spec, &err);
        if (!rc) {
            rc = sim_engine_run(e, &err);
            sim_engine_totals(e, t);
            sim_engine_free(e);
        }
        sim_scenario_destroy(&sc);
    }
    CHECK_MSG(rc == SIM_OK, "tiny run: %s", err.msg);
    return rc;
}

static void test_runs(void)
{
    sim_totals t, t0, yogi = {0};
    char kind[64];
    const char *sets[] = {"algorithm.name=fedopt", kind, "algorithm.fedopt.lr=0"};
    for (int k = 0; k < 3; k++) {
        snprintf(kind, sizeof kind, "algorithm.fedopt.kind=%s", KIND[k]);
        if (run_tiny(sets, 3, NULL, 0, NULL, 0, &t0) || run_tiny(sets, 2, NULL, 0, NULL, 0, &t))
            continue;
        /* 4 classes; 0.35 is well above the initial model's (a lr 0 run: chance) */
        printf("%s: accuracy %.4f, loss %.4f (at lr 0: %.4f, %.4f)\n", KIND[k], t.acc_global,
               t.loss_global, t0.acc_global, t0.loss_global);
        CHECK_MSG(t.round == 5 && t.acc_global > 0.35 && t.loss_global < t0.loss_global,
                  "%s learns: accuracy %.4f, loss %.4f (at lr 0: %.4f, %.4f)", KIND[k],
                  t.acc_global, t.loss_global, t0.acc_global, t0.loss_global);
        if (k == 1) yogi = t;
    }
    /* Yogi stopped at round 2's checkpoint and resumed ends as its straight run above did */
    char dir[] = "/tmp/fedsim-fedopt-XXXXXX", path[96];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(kind, sizeof kind, "algorithm.fedopt.kind=yogi");
    sim_totals cut, resumed;
    void *payload = NULL;
    size_t len = 0;
    sim_err err = {0};
    snprintf(path, sizeof path, "%s/checkpoint.msgpack", dir);
    if (!run_tiny(sets, 2, dir, 2, NULL, 0, &cut))
        CHECK_MSG(sim_checkpoint_read(path, &payload, &len, &err) == SIM_OK, "%s", err.msg);
    if (payload && !run_tiny(sets, 2, NULL, 0, payload, len, &resumed))
        CHECK_MSG(cut.round == 2 && resumed.round == 5 && resumed.acc_global == yogi.acc_global &&
                          resumed.loss_global == yogi.loss_global,
                  "resumed at 2: round %d, accuracy %.6f, loss %.9f (straight: %.6f, %.9f)",
                  resumed.round, resumed.acc_global, resumed.loss_global, yogi.acc_global,
                  yogi.loss_global);
    free(payload);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    test_steps();
    test_keys();
    test_runs();
    return CHECK_DONE();
}
