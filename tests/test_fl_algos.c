/* tests/test_fl_algos.c -- algorithm invariants through the fl_algo interface: FedProx with mu = 0
 * is FedAvg bit for bit; one client with one local step makes FedAvg plain SGD; aggregating
 * identical updates returns that update; a malformed update is rejected; cost-only mode reports
 * exactly the FLOPs real training executes; local-only sends nothing and keeps its model;
 * FedAvg-FT evaluates a client after an epoch of fine-tuning on its own samples, which fits them
 * better than the global model does, and leaves the global model as it was; FedPer and LG-FedAvg
 * send only their shared part and keep the personal one; Ditto trains twice, sends FedAvg's
 * update and keeps a personal model; APFL's step moves v along α·∇f(v̄) and α along the
 * derivative of the loss in α (a finite-difference check), and evaluates αv + (1 − α)w. */
#include "algos/algo.h"
#include "nn/pack.h"
#include "nn/train.h"
#include "sim/rng.h"
#include "tests/algos.h"
#include "tests/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static nn_dataset train, test;
static nn_partition part;
static nn_arch arch;

/* One job of client in round 0 whose batch order comes from `stream`. */
static void train_job_stream(const fl_algo *a, const fl_env *env, void *server, int client,
                             fl_result *res, fl_worker *w, uint64_t stream)
{
    msgpack_sbuffer down;
    msgpack_sbuffer_init(&down);
    a->job_down(server, client, 0, &down);
    fl_job job = {client, 0, down.data, down.size, NULL, 0, stream};
    sim_err err = {0};
    fl_result_init(res);
    int rc = a->client_train(env, &job, w, res, &err);
    CHECK_MSG(rc == SIM_OK, "%s train: %s", a->name, err.msg);
    msgpack_sbuffer_destroy(&down);
}

/* ... with the stream the engine gives a sync job */
static void train_job(const fl_algo *a, const fl_env *env, void *server, int client, fl_result *res,
                      fl_worker *w)
{
    train_job_stream(a, env, server, client, res, w, (uint64_t)client << 32);
}

/* The α an APFL job keeps: the float64 after its personal model in the private state (-1: none). */
static double apfl_alpha(const fl_result *r)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    double a = -1;
    while (msgpack_unpack_next(&u, r->priv.data, r->priv.size, &off) == MSGPACK_UNPACK_SUCCESS)
        if (u.data.type == MSGPACK_OBJECT_FLOAT64) a = u.data.via.f64;
    msgpack_unpacked_destroy(&u);
    return a;
}

int main(void)
{
    sim_err err = {0};
    CHECK(nn_synth_pews_make(&train, &test, 200, 3, &err) == SIM_OK);
    CHECK(nn_partition_iid(&part, &train, 4, 3, &err) == SIM_OK);
    CHECK(nn_arch_build(&arch, "fedpews-mlp", 5, 1, 1, 4, &err) == SIM_OK);
    fl_config cfg = {.name = "fedavg",
                     .local_epochs = 1,
                     .batch_size = 16,
                     .lr = 0.05,
                     .momentum = 0.5,
                     .lr_decay = 1,
                     .server_lr = 1};
    fl_env env = {&cfg, &arch, &train, &test, &part, 9, 0, NULL, NULL, NULL, NULL};
    size_t nf = arch.layout.n_floats;

    /* FedProx with mu = 0 sends exactly FedAvg's update */
    fl_worker w;
    fl_worker_init(&w);
    void *sa = fl_fedavg.server_new(&env, &err), *sp = fl_fedprox.server_new(&env, &err);
    fl_result ra, rp;
    train_job(&fl_fedavg, &env, sa, 1, &ra, &w);
    train_job(&fl_fedprox, &env, sp, 1, &rp, &w);
    CHECK(ra.up.size == rp.up.size && !memcmp(ra.up.data, rp.up.data, ra.up.size));
    CHECK(ra.up_bytes == ra.up.size && ra.steps == (part.n[1] + 15) / 16);
    /* ... and mu > 0 pulls the client back toward the global model: a smaller update */
    cfg.mu = 1.0;
    fl_result rp2;
    train_job(&fl_fedprox, &env, sp, 1, &rp2, &w);
    float *da = malloc(nf * 4), *dp = malloc(nf * 4);
    CHECK(nn_unpack_params(da, &arch, ra.up.data, ra.up.size, "a", &err) == SIM_OK);
    CHECK(nn_unpack_params(dp, &arch, rp2.up.data, rp2.up.size, "p", &err) == SIM_OK);
    double na = 0, np = 0;
    for (size_t j = 0; j < nf; j++)
        na += (double)da[j] * da[j], np += (double)dp[j] * dp[j];
    CHECK_MSG(np < na, "FedProx update norm %g < FedAvg's %g", np, na);
    cfg.mu = 0;

    /* the batch order comes from the job's stream: the same stream gives the same update, another
     * stream (async: a second job of the client from the same model version) another one */
    fl_result rs1, rs2;
    train_job_stream(&fl_fedavg, &env, sa, 1, &rs1, &w, (uint64_t)1 << 32);
    train_job_stream(&fl_fedavg, &env, sa, 1, &rs2, &w, ((uint64_t)1 << 63) | 7);
    CHECK(rs1.up.size == ra.up.size && !memcmp(rs1.up.data, ra.up.data, ra.up.size));
    CHECK(rs2.up.size == ra.up.size && memcmp(rs2.up.data, ra.up.data, ra.up.size));
    fl_result_destroy(&rs1), fl_result_destroy(&rs2);

    /* aggregating the same update twice (any weights) applies exactly that update */
    nn_model g0, g1;
    nn_model_init(&g0, &arch, 1);
    nn_model_init(&g1, &arch, 1);
    fl_fedavg.eval_params(sa, -1, NULL, 0, &g0);
    CHECK(fl_fedavg.server_absorb(sa, 1, ra.up.data, ra.up.size, 3, 3, &err) == SIM_OK);
    CHECK(fl_fedavg.server_absorb(sa, 2, ra.up.data, ra.up.size, 5, 5, &err) == SIM_OK);
    fl_fedavg.server_aggregate(sa);
    fl_fedavg.eval_params(sa, -1, NULL, 0, &g1);
    double worst = 0;
    for (size_t j = 0; j < nf; j++)
        worst = fmax(worst, fabs((double)g1.params[j] - ((double)g0.params[j] + da[j])));
    CHECK_MSG(worst < 1e-6, "identical updates aggregate to that update (off by %g)", worst);

    /* a malformed update is rejected and changes nothing */
    CHECK(fl_fedavg.server_absorb(sa, 1, ra.up.data, ra.up.size / 2, 1, 1, &err) == SIM_EFORMAT);

    /* one client, one step of plain SGD: FedAvg's new global model is that SGD step */
    fl_config one = cfg;
    one.local_steps = 1;
    one.momentum = 0;
    fl_env env1 = env;
    env1.cfg = &one;
    void *s1 = fl_fedavg.server_new(&env1, &err);
    fl_result r1;
    train_job(&fl_fedavg, &env1, s1, 0, &r1, &w);
    CHECK(fl_fedavg.server_absorb(s1, 0, r1.up.data, r1.up.size, part.n[0], part.n[0], &err) ==
          SIM_OK);
    fl_fedavg.server_aggregate(s1);
    fl_fedavg.eval_params(s1, -1, NULL, 0, &g1);
    nn_model m;
    nn_model_init(&m, &arch, 16);
    fl_init_params(&m, &env1); /* the same initial model */
    sim_rng r;
    sim_rng_seed(&r, env.seed, SIM_RNG_BATCHES, 0); /* client 0, round 0 */
    nn_batcher b;
    nn_batcher_init(&b, &train, part.idx[0], part.n[0], 16, 0, &r);
    int B = nn_batcher_next(&b);
    nn_sgd opt = {(float)one.lr, 0, 0, 0};
    nn_model_train_step(&m, &opt, b.x, b.y, B);
    worst = 0;
    for (size_t j = 0; j < nf; j++)
        worst = fmax(worst, fabs((double)g1.params[j] - (double)m.params[j]));
    CHECK_MSG(worst < 1e-6, "FedAvg(1 client, 1 step) = SGD (off by %g)", worst);
    nn_batcher_destroy(&b);

    /* cost-only reports exactly what real training executed */
    fl_env envc = env;
    envc.cost_only = 1;
    fl_result rc;
    fl_job job = {1, 0, NULL, 0, NULL, 0, (uint64_t)1 << 32};
    fl_result_init(&rc);
    CHECK(fl_fedavg.client_train(&envc, &job, &w, &rc, &err) == SIM_OK);
    CHECK_MSG(rc.cost.flops == ra.cost.flops, "cost-only %g FLOPs, real %g", rc.cost.flops,
              ra.cost.flops);
    /* ... also with short last batches over several epochs (800 samples in batches of 30) */
    fl_config odd = cfg;
    odd.batch_size = 30;
    odd.local_epochs = 3;
    fl_env envo = env, envoc = env;
    envo.cfg = envoc.cfg = &odd;
    envoc.cost_only = 1;
    fl_worker wo;
    fl_worker_init(&wo);
    void *so = fl_fedavg.server_new(&envo, &err);
    fl_result real_odd, cost_odd;
    train_job(&fl_fedavg, &envo, so, 1, &real_odd, &wo);
    fl_result_init(&cost_odd);
    CHECK(fl_fedavg.client_train(&envoc, &job, &wo, &cost_odd, &err) == SIM_OK);
    CHECK_MSG(cost_odd.cost.flops == real_odd.cost.flops && cost_odd.steps == real_odd.steps &&
                      real_odd.steps == 3 * 27,
              "short batches: cost-only %g FLOPs %d steps, real %g, %d", cost_odd.cost.flops,
              cost_odd.steps, real_odd.cost.flops, real_odd.steps);
    fl_result_destroy(&real_odd), fl_result_destroy(&cost_odd);
    fl_fedavg.server_free(so);
    fl_worker_destroy(&wo);
    CHECK(rc.up_bytes == ra.up_bytes && rc.up.size == 0);

    /* local-only: nothing to send, the model stays with the client */
    void *sl = fl_local.server_new(&env, &err);
    fl_result rl;
    train_job(&fl_local, &env, sl, 2, &rl, &w);
    CHECK(fl_local.job_down(sl, 2, 0, NULL) == 0 && rl.up_bytes == 0 && rl.priv.size > 0);
    fl_local.eval_params(sl, 2, rl.priv.data, rl.priv.size, &g1);
    nn_model_init_params(&g0, &r); /* anything else */
    CHECK(nn_unpack_params(g0.params, &arch, rl.priv.data, rl.priv.size, "priv", &err) == SIM_OK);
    CHECK(!memcmp(g0.params, g1.params, nf * 4));
    CHECK(!(fl_local.flags & FL_HAS_GLOBAL) && (fl_fedavg.flags & FL_HAS_GLOBAL));

    fl_result_destroy(&ra), fl_result_destroy(&rp), fl_result_destroy(&rp2);
    fl_result_destroy(&r1), fl_result_destroy(&rc), fl_result_destroy(&rl);
    fl_fedprox.server_free(sp), fl_fedavg.server_free(s1);
    fl_local.server_free(sl);
    nn_model_destroy(&m);
    free(da), free(dp);
    CHECK(fl_algo_find("fedprox") == &fl_fedprox && fl_algo_find("nope") == NULL);

    test_own(&cfg, "{name: fedavg-ft, finetune: {epochs: 1}}");
    /* FedAvg-FT: on client 2's own training samples, the fine-tuned model beats the global one */
    void *sf = fl_fedavg_ft.server_new(&env, &err);
    nn_model em;
    nn_model_init(&em, &arch, 64);
    double dens = 0, before, after;
    fl_fedavg_ft.eval_params(sf, -1, NULL, 0, &em);
    before = nn_evaluate(&em, &train, part.idx[2], part.n[2], NULL);
    after = fl_fedavg_ft.eval_client(sf, 2, NULL, 0, &train, part.idx[2], part.n[2], &em, &dens);
    CHECK_MSG(after > before && dens == 1, "fine-tuned %.3f, global %.3f", after, before);
    fl_fedavg_ft.eval_params(sf, -1, NULL, 0, &em);
    CHECK(nn_evaluate(&em, &train, part.idx[2], part.n[2], NULL) == before);
    /* ... after finetune.epochs epochs of the training's optimizer (momentum from zero, weight
     * decay), batches in the order its stream for client 2 draws (a new server: a run's
     * settings do not change, and this one keeps client 2's 1-epoch model) */
    test_own(&cfg, "{name: fedavg-ft, finetune: {epochs: 2}}");
    cfg.weight_decay = 0.01;
    fl_fedavg_ft.server_free(sf);
    sf = fl_fedavg_ft.server_new(&env, &err);
    fl_fedavg_ft.eval_client(sf, 2, NULL, 0, &train, part.idx[2], part.n[2], &em, &dens);
    nn_model ref;
    nn_model_init(&ref, &arch, 64);
    fl_fedavg_ft.eval_params(sf, -1, NULL, 0, &ref);
    sim_rng br;
    sim_rng_seed(&br, env.seed, SIM_RNG_BATCHES, (uint64_t)1 << 62 | 2);
    nn_batcher bt;
    nn_batcher_init(&bt, &train, part.idx[2], part.n[2], cfg.batch_size, 0, &br);
    nn_sgd sgd = {0.05f, 0.5f, 0.01f, 0};
    memset(ref.mom, 0, nf * 4);
    for (int ep = 0; ep < 2; ep++)
        for (int nb; (nb = nn_batcher_next(&bt));)
            nn_model_train_step(&ref, &sgd, bt.x, bt.y, nb);
    nn_batcher_destroy(&bt);
    CHECK_MSG(!memcmp(ref.params, em.params, nf * 4),
              "FedAvg-FT fine-tunes 2 epochs with momentum 0.5 and weight decay 0.01");
    test_own(&cfg, "{name: fedavg-ft, finetune: {epochs: 1}}");
    cfg.weight_decay = 0;
    /* a client's fine-tuned model is reused for its next test set (a shifted split) while the
     * global model stays, and rebuilt once it changes: the same as a fresh server's every time */
    fl_fedavg_ft.server_free(sf);
    sf = fl_fedavg_ft.server_new(&env, &err);
    void *fresh = fl_fedavg_ft.server_new(&env, &err);
    double dens2 = 0, acc_c, acc_f;
    fl_fedavg_ft.eval_client(sf, 2, NULL, 0, &train, part.idx[2], part.n[2], &em, &dens);
    acc_c = fl_fedavg_ft.eval_client(sf, 2, NULL, 0, &train, part.idx[3], part.n[3], &em, &dens);
    acc_f = fl_fedavg_ft.eval_client(fresh, 2, NULL, 0, &train, part.idx[3], part.n[3], &ref,
                                     &dens2);
    CHECK_MSG(acc_c == acc_f && !memcmp(em.params, ref.params, nf * 4),
              "the fine-tuned model reused for another split: %g / %g", acc_c, acc_f);
    fl_result rft;
    train_job(&fl_fedavg_ft, &env, sf, 1, &rft, &w);
    CHECK(fl_fedavg_ft.server_absorb(sf, 1, rft.up.data, rft.up.size, 1, 1, &err) == SIM_OK);
    CHECK(fl_fedavg_ft.server_absorb(fresh, 1, rft.up.data, rft.up.size, 1, 1, &err) == SIM_OK);
    fl_fedavg_ft.server_aggregate(sf), fl_fedavg_ft.server_aggregate(fresh);
    float *before_agg = malloc(nf * 4);
    memcpy(before_agg, em.params, nf * 4);
    acc_c = fl_fedavg_ft.eval_client(sf, 2, NULL, 0, &train, part.idx[3], part.n[3], &em, &dens);
    acc_f = fl_fedavg_ft.eval_client(fresh, 2, NULL, 0, &train, part.idx[3], part.n[3], &ref,
                                     &dens2);
    CHECK_MSG(acc_c == acc_f && !memcmp(em.params, ref.params, nf * 4) &&
                      memcmp(em.params, before_agg, nf * 4) != 0,
              "after an aggregation the client is fine-tuned again from the new global model");
    free(before_agg);
    fl_result_destroy(&rft);
    fl_fedavg_ft.server_free(fresh);
    nn_model_destroy(&ref);
    fl_fedavg_ft.server_free(sf);

    /* FedPer and LG-FedAvg: the upload carries the shared part only (its encoded length is the
     * cost-only prediction), the personal part stays in private state and is what evaluation
     * uses for that client; the server's shared part moves, the personal one does not */
    const fl_algo *splits[] = {&fl_fedper, &fl_lgfedavg, &fl_fedrep};
    for (int k = 0; k < 3; k++) {
        const fl_algo *a = splits[k];
        void *ss = a->server_new(&env, &err);
        fl_result rs, rcost;
        train_job(a, &env, ss, 2, &rs, &w);
        fl_job cj = {2, 0, NULL, 0, NULL, 0, (uint64_t)2 << 32};
        fl_result_init(&rcost);
        CHECK(a->client_train(&envc, &cj, &w, &rcost, &err) == SIM_OK);
        CHECK(rs.up_bytes == rs.up.size && rcost.up_bytes == rs.up.size);
        CHECK_MSG(rcost.cost.flops == rs.cost.flops, "%s: cost-only %g FLOPs, real %g", a->name,
                  rcost.cost.flops, rs.cost.flops);
        CHECK(rs.up.size < fl_dense_msg_bytes(&arch) && rs.priv.size > 0 &&
              a->job_down(ss, 2, 0, NULL) > 0);
        a->eval_params(ss, -1, NULL, 0, &g0); /* the initial model */
        CHECK(a->server_absorb(ss, 2, rs.up.data, rs.up.size, 1, 1, &err) == SIM_OK);
        a->server_aggregate(ss);
        a->eval_params(ss, -1, NULL, 0, &g1); /* shared part: client 2's; personal: initial */
        a->eval_params(ss, 2, rs.priv.data, rs.priv.size, &em); /* client 2's trained model */
        size_t moved = 0, mine = 0;
        int ok = 1;
        for (size_t j = 0; j < nf; j++) {
            if (g1.params[j] != g0.params[j]) moved++, ok &= g1.params[j] == em.params[j];
            if (em.params[j] != g1.params[j]) mine++, ok &= g1.params[j] == g0.params[j];
        }
        CHECK_MSG(moved > 0 && mine > 0 && ok, "%s: shared part moved (%zu), personal kept (%zu)",
                  a->name, moved, mine);
        /* an async staleness weight below the mass: the mean of one model is still that model
         * (it was half of it when the mean of models was normalized by mass) */
        void *st = a->server_new(&env, &err);
        CHECK(a->server_absorb(st, 2, rs.up.data, rs.up.size, 0.5, 1, &err) == SIM_OK);
        a->server_aggregate(st);
        a->eval_params(st, -1, NULL, 0, &g0);
        CHECK_MSG(!memcmp(g0.params, g1.params, nf * sizeof(float)),
                  "%s: a stale update's model averaged as itself", a->name);
        a->server_free(st);
        fl_result_destroy(&rs), fl_result_destroy(&rcost);
        a->server_free(ss);
    }

    /* FedRep: a head epoch is a forward and the head's backward, so a job costs about 4/3 of
     * FedPer's (its body epochs are FedPer's); and the head step is the head's part of full
     * backpropagation, leaving the body alone */
    {
        void *sp1 = fl_fedper.server_new(&env, &err), *sp2 = fl_fedrep.server_new(&env, &err);
        fl_result rp1, rp2x;
        train_job(&fl_fedper, &env, sp1, 2, &rp1, &w);
        train_job(&fl_fedrep, &env, sp2, 2, &rp2x, &w);
        double ratio = rp2x.cost.flops / rp1.cost.flops;
        CHECK_MSG(ratio > 1.2 && ratio < 1.45, "FedRep / FedPer FLOPs %.3f", ratio);
        fl_result_destroy(&rp1), fl_result_destroy(&rp2x);
        fl_fedper.server_free(sp1), fl_fedrep.server_free(sp2);
        nn_model hm, href;
        nn_model_init(&hm, &arch, 16);
        nn_model_init(&href, &arch, 16);
        fl_init_params(&hm, &env);
        memcpy(href.params, hm.params, nf * 4);
        int HB = 16, f = nn_dataset_features(&train);
        float *x = malloc(sizeof(float) * (size_t)(HB * f));
        int32_t y[16];
        for (int i = 0; i < HB; i++) {
            memcpy(x + (size_t)i * f, train.x + (size_t)part.idx[0][i] * f, sizeof(float) * f);
            y[i] = train.y[part.idx[0][i]];
        }
        nn_model_forward(&href, x, y, HB, 1);
        nn_model_zero_grad(&href);
        nn_model_backward(&href);
        nn_model_forward(&hm, x, y, HB, 1);
        double hbefore = hm.cost.flops;
        nn_sgd hopt = {0.5f, 0, 0, 0};
        fl_head_step(&hm, y, HB, &hopt);
        const nn_layer *hl = &arch.l[arch.n - 1];
        size_t h0 = arch.layout.t[hl->wt].off, hw = (size_t)hl->oc * hl->c;
        size_t b0 = arch.layout.t[hl->bt].off, body = 0, off = 0;
        double hworst = 0;
        for (size_t j = 0; j < nf; j++) {
            int in_head = (j >= h0 && j < h0 + hw) || (j >= b0 && j < b0 + (size_t)hl->oc);
            if (in_head)
                hworst = fmax(hworst, fabs(hm.params[j] - (href.params[j] - 0.5f * href.grads[j])));
            else
                body += hm.params[j] != href.params[j];
            off += in_head;
        }
        CHECK_MSG(off == hw + (size_t)hl->oc && hworst < 1e-6 && body == 0,
                  "head step: hworst %g off backprop's, %zu body parameters moved", hworst, body);
        CHECK(hm.cost.flops - hbefore == fl_head_step_flops(&arch, HB));
        free(x);
        nn_model_destroy(&hm), nn_model_destroy(&href);
    }

    /* Ditto: twice FedAvg's FLOPs, the same upload, a personal model in private state */
    test_own(&cfg, "{name: ditto, ditto: {lambda: 0.1}}");
    void *sd = fl_ditto.server_new(&env, &err);
    fl_result rd, rf;
    train_job(&fl_ditto, &env, sd, 1, &rd, &w);
    train_job(&fl_fedavg, &env, sa, 1, &rf, &w);
    CHECK(rd.cost.flops == 2 * rf.cost.flops && rd.priv.size > 0 && rd.up.size == rf.up.size);
    fl_ditto.eval_params(sd, 1, rd.priv.data, rd.priv.size, &em);
    fl_ditto.eval_params(sd, -1, NULL, 0, &g0);
    CHECK(memcmp(g0.params, em.params, nf * 4) != 0);
    fl_result_destroy(&rd), fl_result_destroy(&rf);
    fl_ditto.server_free(sd);

    /* APFL: twice FedAvg's FLOPs (cost-only says the same), FedAvg's upload; a first job's v
     * starts at the received model, where α's gradient ⟨v − w, ∇f⟩ is 0 */
    test_own(&cfg, "{name: apfl, apfl: {alpha: 0.5, adapt: true}}");
    void *sap = fl_apfl.server_new(&env, &err), *sfa = fl_fedavg.server_new(&env, &err);
    fl_result rap, rfa, rapc;
    train_job(&fl_apfl, &env, sap, 1, &rap, &w);
    train_job(&fl_fedavg, &env, sfa, 1, &rfa, &w);
    fl_result_init(&rapc);
    CHECK(fl_apfl.client_train(&envc, &job, &w, &rapc, &err) == SIM_OK);
    CHECK_MSG(rap.cost.flops == 2 * rfa.cost.flops && rapc.cost.flops == rap.cost.flops &&
                      rapc.up_bytes == rap.up.size && rap.up.size == rfa.up.size,
              "APFL: %g FLOPs (cost-only %g), FedAvg %g", rap.cost.flops, rapc.cost.flops,
              rfa.cost.flops);
    CHECK(rap.up.size == rfa.up.size && !memcmp(rap.up.data, rfa.up.data, rap.up.size));
    fl_result_destroy(&rap), fl_result_destroy(&rfa), fl_result_destroy(&rapc);
    fl_fedavg.server_free(sfa);
    {
        /* one plain SGD step from a kept v ≠ w and α = 0.3, against the step done by hand on the
         * same minibatch */
        fl_config oc = cfg;
        memset(oc.blocks, 0, sizeof oc.blocks);
        test_own(&oc, "{name: apfl, apfl: {alpha: 0.5, adapt: true}}");
        oc.local_steps = 1, oc.momentum = 0, oc.lr = 0.2;
        fl_env ae = env;
        ae.cfg = &oc;
        nn_model v, vbar;
        nn_model_init(&v, &arch, 16);
        nn_model_init(&vbar, &arch, 16);
        sim_rng vr;
        sim_rng_seed(&vr, 77, SIM_RNG_INIT_WEIGHTS, 0);
        nn_model_init_params(&v, &vr);
        fl_apfl.eval_params(sap, -1, NULL, 0, &g0); /* w, the global model */
        msgpack_sbuffer priv, down;
        msgpack_sbuffer_init(&priv), msgpack_sbuffer_init(&down);
        nn_pack_params(&priv, &arch, v.params);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &priv, msgpack_sbuffer_write);
        msgpack_pack_double(&pk, 0.3);
        fl_apfl.job_down(sap, 3, 0, &down);
        fl_job aj = {3, 0, down.data, down.size, priv.data, priv.size, (uint64_t)3 << 32};
        fl_result ra1;
        fl_result_init(&ra1);
        CHECK(fl_apfl.client_train(&ae, &aj, &w, &ra1, &err) == SIM_OK);
        sim_rng br3;
        sim_rng_seed(&br3, env.seed, SIM_RNG_BATCHES, (uint64_t)3 << 32);
        nn_batcher b3;
        nn_batcher_init(&b3, &train, part.idx[3], part.n[3], 16, 0, &br3);
        int n3 = nn_batcher_next(&b3);
        /* the loss at v̄(α) = αv + (1 − α)w, and its gradient at α = 0.3 */
        double lossa[2], h = 1e-2;
        for (int k = 0; k < 2; k++) {
            float a = (float)(0.3 + (k ? h : -h));
            for (size_t j = 0; j < nf; j++)
                vbar.params[j] = a * v.params[j] + (1 - a) * g0.params[j];
            lossa[k] = nn_model_forward(&vbar, b3.x, b3.y, n3, 1);
        }
        for (size_t j = 0; j < nf; j++)
            vbar.params[j] = 0.3f * v.params[j] + 0.7f * g0.params[j];
        nn_model_forward(&vbar, b3.x, b3.y, n3, 1);
        nn_model_zero_grad(&vbar);
        nn_model_backward(&vbar);
        double ga = 0, fd = (lossa[1] - lossa[0]) / (2 * h), alpha1, vworst = 0;
        for (size_t j = 0; j < nf; j++)
            ga += (double)(v.params[j] - g0.params[j]) * vbar.grads[j];
        float *v1 = malloc(nf * 4);
        CHECK(nn_unpack_params(v1, &arch, ra1.priv.data, ra1.priv.size, "priv", &err) == SIM_OK);
        for (size_t j = 0; j < nf; j++)
            vworst = fmax(vworst, fabs(v1[j] - (v.params[j] - 0.2f * 0.3f * vbar.grads[j])));
        alpha1 = apfl_alpha(&ra1);
        CHECK_MSG(fabs(ga - fd) < 0.02 * fabs(fd) + 1e-4 && fabs(ga) > 1e-3,
                  "APFL's α gradient %g, finite difference %g", ga, fd);
        CHECK_MSG(fabs(alpha1 - fmin(1, fmax(0, 0.3 - 0.2 * ga))) < 1e-6 && alpha1 != 0.3,
                  "α after one step %g (expected %g)", alpha1, 0.3 - 0.2 * ga);
        CHECK_MSG(vworst < 1e-6, "v after one step off by %g", vworst);
        /* evaluation mixes the kept v with the current global model */
        fl_apfl.eval_params(sap, 3, ra1.priv.data, ra1.priv.size, &em);
        double eworst = 0;
        for (size_t j = 0; j < nf; j++)
            eworst = fmax(eworst, fabs(em.params[j] - ((float)alpha1 * v1[j] +
                                                       (1 - (float)alpha1) * g0.params[j])));
        CHECK_MSG(eworst < 1e-6, "APFL's personal model off αv + (1 − α)w by %g", eworst);
        /* with adapt: false, α stays */
        test_own(&oc, "{name: apfl, apfl: {alpha: 0.5, adapt: false}}");
        fl_result ra2;
        fl_result_init(&ra2);
        CHECK(fl_apfl.client_train(&ae, &aj, &w, &ra2, &err) == SIM_OK);
        alpha1 = apfl_alpha(&ra2);
        CHECK_MSG(alpha1 == 0.3, "adapt: false keeps α (%g)", alpha1);
        /* a private state without its α is refused */
        fl_job bad = aj;
        bad.priv_len = priv.size - 9;
        fl_result ra3;
        fl_result_init(&ra3);
        CHECK(fl_apfl.client_train(&ae, &bad, &w, &ra3, &err) == SIM_EFORMAT);
        fl_result_destroy(&ra1), fl_result_destroy(&ra2), fl_result_destroy(&ra3);
        free(v1);
        nn_batcher_destroy(&b3);
        msgpack_sbuffer_destroy(&priv), msgpack_sbuffer_destroy(&down);
        nn_model_destroy(&v), nn_model_destroy(&vbar);
        fl_config_destroy(&oc);
    }
    fl_apfl.server_free(sap);
    nn_model_destroy(&em), nn_model_destroy(&g0), nn_model_destroy(&g1);
    fl_fedavg.server_free(sa);
    fl_worker_destroy(&w);
    nn_partition_destroy(&part);
    nn_dataset_destroy(&train);
    nn_dataset_destroy(&test);
    fl_config_destroy(&cfg);
    return CHECK_DONE();
}
