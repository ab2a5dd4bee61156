/* tests/test_fl_width.c -- HeteroFL, FjORD and FedRolex (algos/width.c): at width 1 HeteroFL is
 * FedAvg bit for bit; at width p a message holds exactly the sub-model's parameters and its FLOPs
 * fall; the server averages each parameter over the clients that hold it (a parameter only the
 * wider client holds gets that client's change in full, one nobody holds stays put); FjORD's
 * widths are a deterministic draw in [min, max]; cost-only jobs report the real FLOPs and bytes; a
 * malformed message is rejected. Widths by capacity: the grid width with p² ≤ r (the Pa3dFL spec's
 * table of widths over r = 1 %, 2 %, … 100 %), FjORD drawing only grid widths up to it;
 * FedRolex's window rolls one channel per round. HeteroFL's Scaler changes what a narrow job
 * trains and how it is evaluated; it is off unless asked for, and FjORD refuses it. */
#include "algos/submodel.h"
#include "algos/width.h"
#include "nn/pack.h"
#include "tests/algos.h"
#include "tests/check.h"
#include "tests/scenario_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nn_dataset train, test;
static nn_partition part;
static nn_arch arch;

static void job_at(const fl_algo *a, const fl_env *env, void *server, int client, int round,
                   fl_result *res, fl_worker *w)
{
    msgpack_sbuffer down;
    msgpack_sbuffer_init(&down);
    size_t n = a->job_down(server, client, round, &down);
    CHECK(n == down.size && n == a->job_down(server, client, round, NULL));
    fl_job j = {client, round, down.data, down.size, NULL, 0, (uint64_t)client << 32};
    sim_err err = {0};
    fl_result_init(res);
    CHECK_MSG(a->client_train(env, &j, w, res, &err) == SIM_OK, "%s: %s", a->name, err.msg);
    msgpack_sbuffer_destroy(&down);
}

static void job(const fl_algo *a, const fl_env *env, void *server, int client, fl_result *res,
                fl_worker *w)
{
    job_at(a, env, server, client, 0, res, w);
}

/* The live map of a model narrowed to width p. */
static void live_at(nn_model *m, double p)
{
    nn_model_reset_narrowing(m);
    if (p < 1) nn_model_set_width(m, p, 0);
}

/* `algorithm.width.scaler`: off unless asked for, and an error naming file, line and key for
 * FjORD. */
static void test_scaler_key(void)
{
    const char *alg[] = {"algorithm: {name: heterofl}\n", "algorithm: {name: fedrolex}\n",
                         "algorithm: {name: fedrolex, width: {scaler: true}}\n",
                         "algorithm:\n  name: fjord\n  width: {scaler: true}\n"};
    for (int k = 0; k < 4; k++) {
        char text[256], msg[700];
        snprintf(text, sizeof text, "dataset: {name: synth-pews-3.2k}\nmodel: fedpews-mlp\n%s",
                 alg[k]);
        sim_scenario sc;
        int rc = test_load_scenario(&sc, text, msg, sizeof msg);
        if (k < 3) {
            CHECK_MSG(rc == SIM_OK, "%s", msg);
            if (!rc) {
                const sim_yaml *sv = sim_yaml_get(
                        sim_yaml_get(sim_yaml_get(sc.doc, "algorithm"), "width"), "scaler");
                CHECK(sv && !strcmp(sv->value, k == 2 ? "true" : "false"));
                sim_scenario_destroy(&sc);
            }
        } else {
            CHECK_MSG(rc != SIM_OK && strstr(msg, "s.yaml:5") && strstr(msg, "scaler"), "%s", msg);
        }
    }
}

/* cfg's width settings as the scenario's loader reads `algorithm.width: {KEYS}` for cfg's name
 * (the family's own defaults for the keys not given: min 0.4, max 0.6, step 1/16, no scaler) */
static void wconf(fl_config *cfg, const char *keys)
{
    char text[256];
    snprintf(text, sizeof text, "{name: %s, width: {%s}}", cfg->name, keys);
    test_own(cfg, text);
}

int main(void)
{
    sim_err err = {0};
    CHECK(nn_synth_pews_make(&train, &test, 200, 3, &err) == SIM_OK);
    CHECK(nn_partition_iid(&part, &train, 4, 3, &err) == SIM_OK);
    CHECK(nn_arch_build(&arch, "fedpews-mlp", 5, 1, 1, 4, &err) == SIM_OK);
    fl_config cfg = {.name = "heterofl",
                     .local_epochs = 1,
                     .batch_size = 16,
                     .lr = 0.05,
                     .momentum = 0.5,
                     .lr_decay = 1,
                     .server_lr = 1};
    wconf(&cfg, "p: 1, eval: 1, kd: false");
    fl_env env = {&cfg, &arch, &train, &test, &part, 9, 0, NULL, NULL, NULL, NULL};
    size_t nf = arch.layout.n_floats;
    fl_worker w;
    fl_worker_init(&w);
    nn_model g0, g1, lm;
    nn_model_init(&g0, &arch, 1);
    nn_model_init(&g1, &arch, 1);
    nn_model_init(&lm, &arch, 1);

    /* width 1: exactly FedAvg, for HeteroFL and for FedRolex whatever its window's offset (so
     * the Ideal column of Pa3dFL's Table 1 needs one FedAvg run for both) */
    const fl_algo *at1[] = {&fl_heterofl, &fl_fedrolex};
    for (int k = 0; k < 2; k++) {
        void *sh = at1[k]->server_new(&env, &err), *sa = fl_fedavg.server_new(&env, &err);
        int round = 3 * k; /* FedRolex's window starts 3 channels in */
        for (int c = 0; c < 2; c++) {
            fl_result rh, ra;
            job_at(at1[k], &env, sh, c, round, &rh, &w);
            job_at(&fl_fedavg, &env, sa, c, round, &ra, &w);
            CHECK(rh.cost.flops == ra.cost.flops);
            CHECK(at1[k]->server_absorb(sh, c, rh.up.data, rh.up.size, 10 + c, 10 + c, &err) ==
                  SIM_OK);
            CHECK(fl_fedavg.server_absorb(sa, c, ra.up.data, ra.up.size, 10 + c, 10 + c, &err) ==
                  SIM_OK);
            fl_result_destroy(&rh), fl_result_destroy(&ra);
        }
        at1[k]->server_aggregate(sh);
        fl_fedavg.server_aggregate(sa);
        CHECK(at1[k]->eval_params(sh, -1, NULL, 0, &g0) == 1.0);
        fl_fedavg.eval_params(sa, -1, NULL, 0, &g1);
        CHECK_MSG(!memcmp(g0.params, g1.params, nf * sizeof(float)), "%s at width 1 = FedAvg",
                  at1[k]->name);
        at1[k]->server_free(sh), fl_fedavg.server_free(sa);
    }
    void *sh;

    /* the Scaler: a width-0.5 job trains with hidden outputs ×2, so its change differs from the
     * unscaled job's, and the worker's model is left unscaled for what comes next; the client's
     * model is evaluated scaled, the full global one not */
    {
        fl_result r0, r1;
        wconf(&cfg, "p: 0.5, eval: 1, kd: false");
        sh = fl_heterofl.server_new(&env, &err);
        job(&fl_heterofl, &env, sh, 0, &r0, &w);
        wconf(&cfg, "p: 0.5, eval: 1, kd: false, scaler: true");
        job(&fl_heterofl, &env, sh, 0, &r1, &w);
        CHECK(fl_worker_model(&w, &env)->narrow_scale == 1.0f);
        CHECK(r0.up.size == r1.up.size && memcmp(r0.up.data, r1.up.data, r0.up.size));
        CHECK(r0.cost.flops == r1.cost.flops);
        fl_heterofl.eval_params(sh, 0, NULL, 0, &lm); /* the client's own 0.5-wide model */
        CHECK(lm.narrow_scale == 2.0f);
        fl_heterofl.eval_params(sh, -1, NULL, 0, &lm); /* the global model at width.eval = 1 */
        CHECK(lm.narrow_scale == 1.0f);
        wconf(&cfg, "p: 1, eval: 1, kd: false");
        fl_result_destroy(&r0), fl_result_destroy(&r1);
        fl_heterofl.server_free(sh);
    }

    /* client 0 at width 0.5, client 1 at width 1, one aggregation */
    sh = fl_heterofl.server_new(&env, &err);
    fl_heterofl.eval_params(sh, -1, NULL, 0, &g0); /* the initial model, at width 1 */
    fl_result rs, rf, rfull;
    wconf(&cfg, "p: 0.5, eval: 1, kd: false");
    job(&fl_heterofl, &env, sh, 0, &rs, &w);
    wconf(&cfg, "p: 1, eval: 1, kd: false");
    job(&fl_heterofl, &env, sh, 1, &rf, &w);
    job(&fl_heterofl, &env, sh, 0, &rfull, &w);
    live_at(&lm, 0.5);
    size_t n_half = nn_model_live_count(&lm);
    CHECK(n_half < nf / 2);
    /* map, "units" + bin8 of 256 hidden units' bits, "data" + bin16 header, the values */
    CHECK_EQ_I64(rs.up_bytes, 1 + 6 + 2 + 32 + 5 + 3 + 4 * n_half);
    CHECK(rs.cost.flops < 0.5 * rfull.cost.flops);
    CHECK(fl_heterofl.server_absorb(sh, 0, rs.up.data, rs.up.size, 1, 1, &err) == SIM_OK);
    CHECK(fl_heterofl.server_absorb(sh, 1, rf.up.data, rf.up.size, 1, 1, &err) == SIM_OK);
    CHECK(fl_heterofl.server_absorb(sh, 1, rf.up.data, rf.up.size - 7, 1, 1, &err) == SIM_EFORMAT);
    /* a 1-byte bitmap where 256 units need 32 bytes */
    CHECK(fl_heterofl.server_absorb(sh, 1,
                                    "\x82\xa5units\xc4\x01\x00\xa4"
                                    "data\xc4\0",
                                    16, 1, 1, &err) == SIM_EFORMAT);
    fl_heterofl.server_aggregate(sh);
    wconf(&cfg, "p: 1, eval: 1, kd: false");
    fl_heterofl.eval_params(sh, -1, NULL, 0, &g1);
    /* the changes, decoded independently: the half message holds the width-0.5 live values in
     * layout order, the full one every parameter */
    float *dh = calloc(nf, sizeof(float)), *df = calloc(nf, sizeof(float));
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CHECK(msgpack_unpack_next(&u, rs.up.data, rs.up.size, &off) == MSGPACK_UNPACK_SUCCESS);
    float *vals = malloc(sizeof(float) * n_half);
    CHECK(nn_unpack_f32(vals, n_half, &u.data.via.map.ptr[1].val, "half", &err) == SIM_OK);
    for (size_t j = 0, k = 0; j < nf; j++)
        if (lm.live[j]) dh[j] = vals[k++];
    off = 0;
    CHECK(msgpack_unpack_next(&u, rf.up.data, rf.up.size, &off) == MSGPACK_UNPACK_SUCCESS);
    live_at(&lm, 1);
    size_t n_full = nn_model_live_count(&lm);
    float *vf = malloc(sizeof(float) * n_full);
    CHECK(nn_unpack_f32(vf, n_full, &u.data.via.map.ptr[1].val, "full", &err) == SIM_OK);
    for (size_t j = 0, k = 0; j < nf; j++)
        if (lm.live[j]) df[j] = vf[k++];
    msgpack_unpacked_destroy(&u);
    live_at(&lm, 0.5);
    int bad_shared = 0, bad_only = 0, n_only = 0;
    for (size_t j = 0; j < nf; j++) {
        if (!lm.live[j] && df[j] == 0) continue;
        double want = lm.live[j] ? g0.params[j] + ((double)dh[j] + df[j]) / 2
                                 : g0.params[j] + (double)df[j];
        if (fabs(g1.params[j] - want) > 1e-6) lm.live[j] ? bad_shared++ : bad_only++;
        n_only += !lm.live[j];
    }
    CHECK_MSG(bad_shared == 0 && bad_only == 0 && n_only > 0,
              "held by both: %d wrong; held by the full client only (%d): %d wrong", bad_shared,
              n_only, bad_only);
    /* evaluation at width 0.5 narrows the model and reports its density */
    wconf(&cfg, "p: 1, eval: 0.5, kd: false");
    double dens = fl_heterofl.eval_params(sh, -1, NULL, 0, &g1);
    CHECK(dens < 1 && dens > 0.5 && nn_model_live_count(&g1) == n_half);
    fl_result_destroy(&rs), fl_result_destroy(&rf), fl_result_destroy(&rfull);
    fl_heterofl.server_free(sh);
    free(dh), free(df), free(vals), free(vf);

    /* FjORD: the widest sub-model travels; every step adds a nested width in [min, max] trained
     * by self-distillation, so a job costs more than its widest steps alone and less than twice
     * them; without kd only the nested widths train. Cost-only runs the same draws. */
    snprintf(cfg.name, sizeof cfg.name, "fjord");
    wconf(&cfg, "p: 1, eval: 0.5, kd: true");
    void *sj = fl_fjord.server_new(&env, &err);
    live_at(&lm, 0.6);
    size_t top_bytes = 1 + fl_sub_bytes(&arch, nn_model_live_count(&lm));
    for (int c = 0; c < 4; c++)
        CHECK(fl_fjord.job_down(sj, c, 3, NULL) == top_bytes);
    nn_cost top_step;
    nn_model_step_cost(&lm, cfg.batch_size, &top_step);
    int steps = (part.n[2] + cfg.batch_size - 1) / cfg.batch_size;
    double top_flops = top_step.flops * (steps - 1);
    nn_model_step_cost(&lm, part.n[2] - (steps - 1) * cfg.batch_size, &top_step);
    top_flops += top_step.flops; /* the short last batch */
    fl_result rj, rc;
    job(&fl_fjord, &env, sj, 2, &rj, &w);
    CHECK_MSG(rj.cost.flops > top_flops && rj.cost.flops < 2 * top_flops,
              "kd: %g FLOPs for %g at the widest", rj.cost.flops, top_flops);
    CHECK(rj.up_bytes == top_bytes);
    fl_env envc = env;
    envc.cost_only = 1;
    fl_job jc = {2, 0, NULL, 0, NULL, 0, (uint64_t)2 << 32};
    fl_result_init(&rc);
    CHECK(fl_fjord.client_train(&envc, &jc, &w, &rc, &err) == SIM_OK);
    CHECK_MSG(rc.cost.flops == rj.cost.flops && rc.up_bytes == rj.up_bytes &&
                      rc.cost.samples == rj.cost.samples && rc.cost.bytes == rj.cost.bytes,
              "cost-only %g FLOPs %zu B, real %g %zu B", rc.cost.flops, rc.up_bytes, rj.cost.flops,
              rj.up_bytes);
    fl_result_destroy(&rj), fl_result_destroy(&rc);
    wconf(&cfg, "p: 1, eval: 0.5, kd: false");
    job(&fl_fjord, &env, sj, 2, &rj, &w);
    CHECK_MSG(rj.cost.flops < top_flops && rj.cost.flops > 0, "no kd: %g FLOPs for %g",
              rj.cost.flops, top_flops);
    fl_result_init(&rc);
    CHECK(fl_fjord.client_train(&envc, &jc, &w, &rc, &err) == SIM_OK);
    CHECK(rc.cost.flops == rj.cost.flops && rc.cost.bytes == rj.cost.bytes);
    fl_result_destroy(&rj), fl_result_destroy(&rc);
    fl_fjord.server_free(sj);

    /* capacity → width on the 1/16 grid: the widths of r = 1/100 … 1 (spec 004 §3.2's table) */
    fl_config wgc = {.name = "fjord"};
    fl_env wg = env;
    wg.cfg = &wgc;
    test_own(&wgc, "{name: fjord, width: {grid: step, step: 0.0625}}");
    int count[17] = {0}, want[17] = {0, 1, 2, 3, 3, 5, 5, 5, 7, 8, 8, 9, 10, 10, 11, 12, 1};
    int bad = 0;
    for (int i = 0; i < 100; i++) {
        double r = (i + 1) / 100.0, p = fl_width_for(&wg, r), step = 1.0 / 16;
        bad += !(p * p <= r && (p == 1 || (p + step) * (p + step) > r));
        count[(int)lround(p * 16)]++;
    }
    CHECK_MSG(bad == 0, "%d widths not the largest grid width with p^2 <= r", bad);
    CHECK(!memcmp(count, want, sizeof count));
    CHECK(fl_width_for(&wg, 0.001) == 1.0 / 16); /* below the grid: the narrowest */
    /* HeteroFL: 1, 1/2, … 1/16 */
    test_own(&wgc, "{name: fjord, width: {grid: halving, step: 0.0625}}");
    CHECK(fl_width_for(&wg, 1) == 1 && fl_width_for(&wg, 0.3) == 0.5);
    CHECK(fl_width_for(&wg, 0.25) == 0.5 && fl_width_for(&wg, 0.2) == 0.25);
    CHECK(fl_width_for(&wg, 0.01) == 0.0625 && fl_width_for(&wg, 1e-6) == 0.0625);

    /* FjORD by capacity: the client's widest grid width travels, and every draw is a grid width
     * narrower than it (the narrowest client's: its own), each one drawn */
    double capacity[4] = {0.3, 1, 0.05, 0.6};
    env.capacity = capacity;
    wconf(&cfg, "by: capacity, step: 0.25, eval: 1, kd: true");
    sj = fl_fjord.server_new(&env, &err);
    int off_grid = 0, too_wide = 0, seen[5] = {0};
    sim_rng dr;
    sim_rng_seed(&dr, 5, SIM_RNG_TEST, 0);
    for (int c = 0; c < 4; c++) {
        double top = fl_width_for(&env, capacity[c]);
        CHECK(fl_fjord.client_width(&env, c) == top);
        live_at(&lm, top);
        CHECK(fl_fjord.job_down(sj, c, 7, NULL) ==
              1 + fl_sub_bytes(&arch, nn_model_live_count(&lm)));
        for (int d = 0; d < 40; d++) {
            double p = fl_fjord_draw(&env, top, &dr);
            int k = (int)lround(p / 0.25);
            off_grid += k < 1 || k > 4 || fabs(p - 0.25 * k) > 1e-12;
            too_wide += top > 0.25 ? p > top - 1e-12 : p != top;
            if (k >= 1 && k <= 4) seen[k]++;
        }
    }
    CHECK_MSG(off_grid == 0 && too_wide == 0, "%d draws off the grid, %d not below the top",
              off_grid, too_wide);
    CHECK(seen[1] > 0 && seen[2] > 0 && seen[3] > 0 && seen[4] == 0); /* 0.25 … 0.75 drawn */
    /* HeteroFL's halvings: below top, down to the step */
    test_own(&wgc, "{name: fjord, width: {by: capacity, grid: halving, step: 0.0625}}");
    int halvings = 1;
    for (int d = 0; d < 40; d++) {
        double p = fl_fjord_draw(&wg, 0.5, &dr);
        halvings &= p == 0.25 || p == 0.125 || p == 0.0625;
    }
    CHECK(halvings && fl_fjord_draw(&wg, 0.0625, &dr) == 0.0625);
    fl_fjord.server_free(sj);

    /* LocalOnly by capacity (Pa3dFL's Table 1 baseline): each client trains its own width's
     * model, so a weak client's job costs less, and is evaluated at that width */
    {
        void *sl = fl_local.server_new(&env, &err);
        fl_result r_weak, r_full;
        job(&fl_local, &env, sl, 2, &r_weak, &w); /* capacity 0.05: width 0.25 */
        job(&fl_local, &env, sl, 1, &r_full, &w); /* capacity 1: the full model */
        CHECK_MSG(fl_local.client_width(&env, 2) == 0.25 && fl_local.client_width(&env, 1) == 1,
                  "widths %g %g", fl_local.client_width(&env, 2), fl_local.client_width(&env, 1));
        double per_weak = r_weak.cost.flops / part.n[2], per_full = r_full.cost.flops / part.n[1];
        CHECK_MSG(per_weak < 0.5 * per_full, "FLOPs per sample %g at 0.25 vs %g at 1", per_weak,
                  per_full);
        double dl = fl_local.eval_params(sl, 2, r_weak.priv.data, r_weak.priv.size, &lm);
        CHECK(dl < 0.5 && nn_model_live_count(&lm) < nf);
        fl_result_destroy(&r_weak), fl_result_destroy(&r_full);
        fl_local.server_free(sl);
    }

    /* FedRolex: the window of width 0.5 starts at channel round mod C of every hidden layer */
    snprintf(cfg.name, sizeof cfg.name, "fedrolex");
    wconf(&cfg, "p: 0.5, step: 0.0625, eval: 1, kd: false");
    void *sr = fl_fedrolex.server_new(&env, &err);
    int wrong = 0, eval_wrong = 0, eval_moved = 0;
    nn_model at0, atr; /* the windows starting at channel 0 and at the round's */
    nn_model_init(&at0, &arch, 1), nn_model_init(&atr, &arch, 1);
    nn_model_set_width(&at0, 0.5, 0);
    for (int round = 0; round < 70; round += 23) {
        msgpack_sbuffer down;
        msgpack_sbuffer_init(&down);
        fl_fedrolex.job_down(sr, 1, round, &down);
        /* a client is evaluated on the windows of the latest round sent */
        fl_fedrolex.eval_params(sr, 1, NULL, 0, &lm);
        nn_model_set_width(&atr, 0.5, round);
        eval_wrong += memcmp(lm.live, atr.live, nf) != 0;
        eval_moved += memcmp(lm.live, at0.live, nf) != 0;
        msgpack_unpacked_init(&u);
        off = 0;
        CHECK(msgpack_unpack_next(&u, down.data, down.size, &off) == MSGPACK_UNPACK_SUCCESS);
        const unsigned char *bits = (const unsigned char *)u.data.via.map.ptr[0].val.via.bin.ptr;
        for (int i = 0, unit = 0; i < arch.n; i++) {
            if (!arch.l[i].narrow) continue;
            int C = arch.l[i].oc;
            for (int j = 0; j < C; j++, unit++) {
                int in_window = (j - round % C + C) % C < (C + 1) / 2;
                wrong += in_window != ((bits[unit / 8] >> (unit % 8)) & 1);
            }
        }
        msgpack_unpacked_destroy(&u);
        msgpack_sbuffer_destroy(&down);
    }
    CHECK_MSG(wrong == 0, "%d units in or out of FedRolex's window wrongly", wrong);
    CHECK_MSG(eval_wrong == 0 && eval_moved == 3,
              "FedRolex evaluates the latest round's windows: %d wrong, %d of 3 off channel 0",
              eval_wrong, eval_moved);
    nn_model_destroy(&at0), nn_model_destroy(&atr);
    fl_result rr;
    wconf(&cfg, "p: 1, step: 0.0625, eval: 1, kd: false"); /* the full window: FedAvg */
    job(&fl_fedrolex, &env, sr, 0, &rr, &w);
    CHECK(fl_fedrolex.server_absorb(sr, 0, rr.up.data, rr.up.size, 1, 1, &err) == SIM_OK);
    fl_result_destroy(&rr);
    fl_fedrolex.server_free(sr);

    nn_model_destroy(&g0), nn_model_destroy(&g1), nn_model_destroy(&lm);
    fl_worker_destroy(&w);
    fl_config_destroy(&cfg), fl_config_destroy(&wgc);
    test_scaler_key();
    nn_partition_destroy(&part);
    nn_dataset_destroy(&train), nn_dataset_destroy(&test);
    return CHECK_DONE();
}
