/* tests/test_fl_dmpfl.c -- DM-PFL (algos/dmpfl.c): Eq. 4's composition on a hand example; masks
 * at exactly 1 − S after every prune/regrow, the just-pruned regrowable with their values and new
 * positions at zero; the phase schedule; the server's Eq. 5 keeping the old value where no client
 * covers a position, and its 30 % vote; message sizes equal to their encoded lengths, and phase
 * 2b's single download; then a short federated run on a Fashion-MNIST subset that learns (global,
 * personal and DM-PFL+ accuracies far above chance) and leaves shared weights alone in phase 2b.
 * The top-k selection against a brute-force count, ties included.
 */
#include "algos/dmpfl.h"
#include "nn/pack.h"
#include "nn/train.h"
#include "tests/algos.h"
#include "tests/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The server's checkpoint state: saved into sb, unpacked into u (the caller destroys both). */
static void server_state(const fl_algo *a, void *server, msgpack_sbuffer *sb, msgpack_unpacked *u)
{
    msgpack_sbuffer_init(sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    a->server_save(server, &pk);
    msgpack_unpacked_init(u);
    size_t off = 0;
    CHECK(msgpack_unpack_next(u, sb->data, sb->size, &off) == MSGPACK_UNPACK_SUCCESS);
}

/* The server's w_g, read from its checkpoint (the first element of dmpfl_save's array). */
static void server_wg(const fl_algo *a, void *server, float *wg, size_t nf)
{
    msgpack_sbuffer sb;
    msgpack_unpacked u;
    server_state(a, server, &sb, &u);
    const msgpack_object *e = &u.data.via.array.ptr[0];
    CHECK(e->type == MSGPACK_OBJECT_BIN && e->via.bin.size == nf * sizeof(float));
    memcpy(wg, e->via.bin.ptr, nf * sizeof(float));
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

static void test_compose_readjust(void)
{
    sim_err err = {0};
    nn_arch a;
    CHECK(nn_arch_build(&a, "mlp:4-3-2", 1, 1, 4, 2, &err) == SIM_OK);
    fl_dm_shape sh;
    fl_dm_shape_init(&sh, &a, 0.5, -1); /* an MLP: every weight masked */
    const nn_tensor *w1 = &a.layout.t[a.l[0].wt], *b1 = &a.layout.t[a.l[0].bt];
    CHECK(sh.masked[a.l[0].wt] && !sh.masked[a.l[0].bt] && sh.keep[a.l[0].wt] == 6);
    CHECK_EQ_I64(sh.n_masked, 12 + 6);
    CHECK_EQ_I64(sh.n_dense, 3 + 2);
    fl_dm_shape sk;
    fl_dm_shape_init(&sk, &a, 0.5, 1); /* skip_first: layer 1 dense */
    CHECK(!sk.masked[a.l[0].wt] && sk.n_dense == 12 + 3 + 2);

    /* Eq. 4 on w1's first four positions: both masks, m_c only, m_g only, neither */
    size_t nf = a.layout.n_floats, o = w1->off;
    float *wg = calloc(nf, 4), *wc = calloc(nf, 4), *th = calloc(nf, 4);
    uint8_t *mg = calloc(nf, 1), *mc = calloc(nf, 1);
    for (size_t j = 0; j < nf; j++)
        wg[j] = 1 + (float)j, wc[j] = -1 - (float)j;
    mg[o] = mc[o] = 1; /* shared: w_g */
    mc[o + 1] = 1;     /* private: w_c */
    mg[o + 2] = 1;     /* global only: not in θ_c */
    fl_dm_compose(th, &sh, wg, mg, wc, mc);
    CHECK(th[o] == wg[o] && th[o + 1] == wc[o + 1] && th[o + 2] == 0 && th[o + 3] == 0);
    CHECK(th[b1->off] == wg[b1->off] && th[b1->off + 2] == wg[b1->off + 2]); /* biases: shared */

    /* readjust: density stays exactly 1 − S per tensor, whatever α and the gradient */
    uint8_t *m = calloc(nf, 1);
    float *w = calloc(nf, 4), *g = calloc(nf, 4);
    sim_rng r;
    sim_rng_seed(&r, 5, SIM_RNG_TEST, 1);
    for (size_t j = 0; j < nf; j++)
        w[j] = (float)sim_rng_normal(&r);
    for (int t = 0; t < a.layout.n; t++)
        if (sh.masked[t])
            fl_dm_topk(m + a.layout.t[t].off, w + a.layout.t[t].off, NULL,
                       (size_t)a.layout.t[t].rows * a.layout.t[t].cols, sh.keep[t]);
    int always = 1;
    for (int it = 0; it < 20; it++) {
        for (size_t j = 0; j < nf; j++)
            g[j] = (float)sim_rng_normal(&r);
        fl_dm_readjust(&sh, w, m, g, 0.05 * it);
        for (int t = 0; t < a.layout.n; t++) {
            if (!sh.masked[t]) continue;
            size_t on = 0, n = (size_t)a.layout.t[t].rows * a.layout.t[t].cols;
            for (size_t j = 0; j < n; j++)
                on += m[a.layout.t[t].off + j];
            always &= on == sh.keep[t];
        }
        for (size_t j = o; j < o + 12; j++)
            always &= m[j] || w[j] == 0; /* inactive weights are zero */
    }
    CHECK_MSG(always, "every tensor keeps exactly ⌈(1 − S)·n⌉ after each readjust");
    /* a sparser mask is refilled to the target */
    memset(m + o, 0, 12);
    m[o] = 1;
    fl_dm_readjust(&sh, w, m, g, 0.5);
    CHECK_EQ_I64(fl_dm_count(&sh, m), sh.n_keep);

    /* w1 active at 0..5 with |w| = 1..6, α = 1/6 prunes exactly position 0; a large gradient
     * there regrows it with its value, a large gradient at 7 makes 7 new at 0 instead */
    memset(m + o, 0, 12);
    for (int j = 0; j < 12; j++)
        w[o + j] = j < 6 ? (float)(j + 1) : 0;
    memset(m + o, 1, 6);
    memset(g, 0, nf * 4);
    g[o] = 9;
    fl_dm_readjust(&sh, w, m, g, 1.0 / 6);
    CHECK(m[o] == 1 && w[o] == 1 && m[o + 6] == 0);
    g[o] = 0, g[o + 7] = -9;
    fl_dm_readjust(&sh, w, m, g, 1.0 / 6);
    CHECK(m[o] == 0 && w[o] == 0 && m[o + 7] == 1 && w[o + 7] == 0 && m[o + 5] && w[o + 5] == 6);
    free(wg), free(wc), free(th), free(mg), free(mc), free(m), free(w), free(g);
}

static void test_schedule(void)
{
    fl_dmpfl_config c = {.iterations = 2, .rounds = 300, .phase1 = 0.5, .phase2a = 0.25};
    int cnt[3] = {0};
    for (int t = 0; t < 300; t++)
        cnt[fl_dm_phase_of(&c, t)]++;
    CHECK(cnt[0] == 150 && cnt[1] == 74 && cnt[2] == 76);
    CHECK(fl_dm_phase_of(&c, 74) == FL_DM_P1 && fl_dm_phase_of(&c, 75) == FL_DM_P2A);
    CHECK(fl_dm_phase_of(&c, 111) == FL_DM_P2A && fl_dm_phase_of(&c, 112) == FL_DM_P2B);
    CHECK(fl_dm_phase_of(&c, 150) == FL_DM_P1 && fl_dm_phase_of(&c, 299) == FL_DM_P2B);
    c.iterations = 0;
    CHECK(fl_dm_phase_of(&c, 299) == FL_DM_P1);
    c.alpha = 0.5, c.anneal = 1;
    CHECK_NEAR(fl_dm_alpha(&c, 0), 0.5, 1e-12);
    CHECK_NEAR(fl_dm_alpha(&c, 150), 0.25, 1e-12);
}

/* A job of client c in round t with the given private state; returns the server's down length. */
static size_t job(const fl_algo *a, const fl_env *env, void *s, fl_worker *w, int c, int t,
                  const msgpack_sbuffer *priv, fl_result *res)
{
    msgpack_sbuffer down;
    msgpack_sbuffer_init(&down);
    size_t len = a->job_down(s, c, t, &down);
    CHECK(len == down.size);
    fl_job j = {c,
                t,
                down.data,
                down.size,
                priv && priv->size ? priv->data : NULL,
                priv ? priv->size : 0,
                (uint64_t)c << 32 | (uint32_t)t};
    sim_err err = {0};
    fl_result_init(res);
    CHECK_MSG(a->client_train(env, &j, w, res, &err) == SIM_OK, "train: %s", err.msg);
    msgpack_sbuffer_destroy(&down);
    return len;
}

static void keep_priv(msgpack_sbuffer *priv, const fl_result *res)
{
    if (!res->priv.size) return;
    msgpack_sbuffer_clear(priv);
    msgpack_sbuffer_write(priv, res->priv.data, res->priv.size);
}

/* fl_dm_topk picks the k largest |key| among the candidates, ties to the lower index: against
 * counting, for each position, the candidates that come before it, on keys with many ties and
 * both signs, for every k from 0 to past the candidates' count. */
static void test_topk(void)
{
    enum { N = 300 };
    float key[N];
    uint8_t cand[N], out[N];
    sim_rng r;
    sim_rng_seed(&r, 11, SIM_RNG_TEST, 2);
    size_t m = 0;
    for (int i = 0; i < N; i++) {
        key[i] = (float)((int)(sim_rng_uniform(&r) * 21) - 10) / 4; /* 21 values: ties */
        cand[i] = sim_rng_uniform(&r) < 0.7;
        m += cand[i];
    }
    int ok = 1;
    for (size_t k = 0; k <= m + 2; k++) {
        memset(out, 0, N);
        fl_dm_topk(out, key, cand, N, k);
        for (int i = 0; i < N; i++) {
            size_t ahead = 0; /* candidates that precede i in the order */
            for (int j = 0; j < N; j++)
                ahead += cand[j] && (fabsf(key[j]) > fabsf(key[i]) ||
                                     (fabsf(key[j]) == fabsf(key[i]) && j < i));
            ok &= out[i] == (cand[i] && ahead < k);
        }
    }
    CHECK_MSG(ok, "top-k among %zu candidates, ties to the lower index, for every k", m);
}

int main(void)
{
    test_compose_readjust();
    test_topk();
    test_schedule();

    sim_err err = {0};
    nn_dataset train = {0}, test = {0};
    int rc = nn_fmnist_load(&train, &test, NULL, &err);
    CHECK_MSG(rc == SIM_OK, "load Fashion-MNIST: %s: %s", err.file, err.msg);
    if (rc) return CHECK_DONE();
    nn_partition part;
    CHECK(nn_partition_dirichlet(&part, &train, 150, 0.3, 50, 3, &err) == SIM_OK);
    CHECK(nn_partition_local_test(&part, &train, &test, 0.25, 1, 3, &err) == SIM_OK);
    nn_arch arch;
    CHECK(nn_arch_build(&arch, "mlp:784-64-10", 1, 28, 28, 10, &err) == SIM_OK);
    const int C = 8, T = 16;
    fl_config cfg = {.name = "dmpfl",
                     .local_epochs = 2,
                     .batch_size = 32,
                     .lr = 0.05,
                     .lr_decay = 1,
                     .server_lr = 1};
    fl_dmpfl_config dm = {.density = 0.5,
                          .skip_first = -1,
                          .iterations = 1,
                          .rounds = T,
                          .phase1 = 0.5,
                          .phase2a = 0.25,
                          .alpha = 0.3,
                          .anneal = 1,
                          .readjust_every = 1,
                          .vote = 0.3};
    cfg.own = &dm;
    fl_env env = {&cfg, &arch, &train, &test, &part, 11, 0, NULL, NULL, NULL, NULL};
    size_t nf = arch.layout.n_floats;
    fl_dm_shape sh;
    fl_dm_shape_init(&sh, &arch, 0.5, -1);

    /* message sizes: the encoded length, packed or predicted */
    uint8_t *mask = calloc(nf, 1);
    float *vals = calloc(nf, 4);
    for (size_t j = 0; j < nf; j += 3)
        mask[j] = 1;
    for (int wm = 0; wm < 2; wm++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        fl_dm_pack(&sb, &sh, wm, mask, vals);
        CHECK_EQ_I64(sb.size, fl_dm_msg_bytes(&sh, wm, fl_dm_count(&sh, mask)));
        msgpack_sbuffer_destroy(&sb);
    }

    const fl_algo *a = &fl_dmpfl;
    void *s = a->server_new(&env, &err);
    fl_worker w;
    fl_worker_init(&w);
    msgpack_sbuffer priv[8];
    for (int c = 0; c < C; c++)
        msgpack_sbuffer_init(&priv[c]);
    float *before = malloc(nf * 4), *after = malloc(nf * 4);
    server_wg(a, s, before, nf);

    /* Eq. 5 by hand: two uploads covering different positions */
    dm.vote = 0.5; /* with 2 clients: positions both chose */
    fl_result r0, r1;
    size_t d0 = job(a, &env, s, &w, 0, 0, NULL, &r0);
    CHECK_EQ_I64(d0, fl_dm_msg_bytes(&sh, 1, sh.n_keep)); /* m_g⁰ at exactly 1 − S */
    CHECK_EQ_I64(r0.up_bytes, r0.up.size);
    CHECK_EQ_I64(r0.up.size, fl_dm_msg_bytes(&sh, 1, sh.n_keep));
    job(a, &env, s, &w, 1, 0, NULL, &r1);
    uint8_t *m0 = calloc(nf, 1), *m1 = calloc(nf, 1);
    float *v0 = calloc(nf, 4), *v1 = calloc(nf, 4);
    int got;
    CHECK(fl_dm_unpack(&sh, r0.up.data, r0.up.size, m0, &got, v0, "u0", &err) == SIM_OK && got);
    CHECK(fl_dm_unpack(&sh, r1.up.data, r1.up.size, m1, &got, v1, "u1", &err) == SIM_OK && got);
    CHECK(a->server_absorb(s, 0, r0.up.data, r0.up.size, 3, 3, &err) == SIM_OK);
    CHECK(a->server_absorb(s, 1, r1.up.data, r1.up.size, 1, 1, &err) == SIM_OK);
    a->server_aggregate(s);
    server_wg(a, s, after, nf);
    int n_none = 0, n_one = 0, n_both = 0, eq5 = 1, vote = 1;
    nn_model em;
    nn_model_init(&em, &arch, 64);
    a->eval_params(s, -1, NULL, 0, &em);
    const nn_layout *L = &arch.layout;
    for (int t = 0; t < L->n; t++)
        for (size_t j = L->t[t].off; j < L->t[t].off + (size_t)L->t[t].rows * L->t[t].cols; j++) {
            int a0 = !sh.masked[t] || m0[j], a1 = !sh.masked[t] || m1[j];
            double want = a0 && a1 ? (3.0 * v0[j] + v1[j]) / 4
                          : a0     ? v0[j]
                          : a1     ? v1[j]
                                   : before[j];
            eq5 &= fabs(after[j] - want) <= 1e-6 * (1 + fabs(want));
            n_none += !a0 && !a1, n_one += a0 != a1, n_both += a0 && a1;
            /* more than 0.5 · 2 votes: both clients, or the position is not in θ_g */
            vote &= !sh.masked[t] || (a0 && a1) || em.params[j] == 0;
        }
    CHECK_MSG(eq5, "Eq. 5 per position over the covering clients, old value elsewhere");
    CHECK_MSG(n_none > 0 && n_one > 0 && n_both > 0, "positions covered by 0/1/2: %d %d %d", n_none,
              n_one, n_both);
    CHECK(vote);
    /* a malformed upload is an error */
    a->job_down(s, 2, 1, NULL);
    CHECK(a->server_absorb(s, 2, r0.up.data, r0.up.size / 2, 1, 1, &err) == SIM_EFORMAT);
    a->server_aggregate(s);
    fl_result_destroy(&r0), fl_result_destroy(&r1);
    a->server_free(s);
    dm.vote = 0.3;

    /* a short run: rounds 0..7 phase 1, 8..11 phase 2a, 12..15 phase 2b */
    s = a->server_new(&env, &err);
    for (int t = 0; t < T; t++) {
        fl_dm_phase ph = fl_dm_phase_of(&dm, t);
        for (int c = 0; c < C; c++) {
            if ((c + t) % 2) continue; /* half the clients each round */
            nn_model_reset_narrowing(&em);
            a->eval_params(s, c, priv[c].data, priv[c].size, &em);
            memcpy(before, em.params, nf * 4);
            fl_result r;
            size_t d = job(a, &env, s, &w, c, t, &priv[c], &r);
            if (ph == FL_DM_P2B) CHECK(r.up_bytes == 0 && r.up.size == 0);
            /* phase 2b: one download per client per phase */
            if (ph == FL_DM_P2B && t >= 14) CHECK_EQ_I64(d, 0);
            if (ph == FL_DM_P2B && t < 14) CHECK(d > 0);
            keep_priv(&priv[c], &r);
            CHECK(a->server_absorb(s, c, r.up.size ? r.up.data : NULL, r.up.size, part.n[c],
                                   part.n[c], &err) == SIM_OK);
            if (ph == FL_DM_P2B) { /* the client's shared weights are w_g's, its private ones
                                      trained */
                memset(m0, 0, nf);
                CHECK(fl_dm_unpack(&sh, priv[c].data, priv[c].size, m0, &got, v0, "priv", &err) ==
                      SIM_OK);
                a->eval_params(s, -1, NULL, 0, &em);
                int same = 1, moved = 0;
                for (int t2 = 0; t2 < L->n; t2++)
                    for (size_t j = L->t[t2].off;
                         j < L->t[t2].off + (size_t)L->t[t2].rows * L->t[t2].cols; j++)
                        if (!sh.masked[t2] || (m0[j] && em.params[j] != 0))
                            same &= v0[j] == em.params[j];
                a->eval_params(s, c, priv[c].data, priv[c].size, &em);
                for (size_t j = 0; j < nf; j++)
                    moved |= em.params[j] != before[j];
                CHECK(moved && same);
            }
            fl_result_destroy(&r);
        }
        a->server_aggregate(s);
    }
    a->eval_params(s, -1, NULL, 0, &em);
    double g = nn_evaluate(&em, &test, NULL, 2000, NULL), pc = 0, pp = 0;
    for (int c = 0; c < C; c++) {
        double dens = 0;
        pp += fl_dmpfl_plus.eval_client(s, c, priv[c].data, priv[c].size, &train, part.test_idx[c],
                                        part.n_test[c], &em, &dens) /
              C;
        a->eval_params(s, c, priv[c].data, priv[c].size, &em);
        pc += nn_evaluate(&em, &train, part.test_idx[c], part.n_test[c], NULL) / C;
        CHECK_NEAR(dens, 0.5, 0.01);
    }
    /* DM-PFL+ reuses a client's base entropies for its next test set (the engine's shifted
     * splits): the second half of each client's split scored right after its first half, and
     * after another client's split, equals that half scored by a server restored from this one's
     * checkpoint, which has nothing to reuse */
    msgpack_sbuffer ck;
    msgpack_unpacked cku;
    server_state(a, s, &ck, &cku);
    int differ = 0;
    for (int c = 0; c < C; c++) {
        int h = part.n_test[c] / 2, o = (c + 1) % C, rest = part.n_test[c] - h;
        const int32_t *second = part.test_idx[c] + h;
        double dens = 0, reused, after_other, fresh;
        fl_dmpfl_plus.eval_client(s, c, priv[c].data, priv[c].size, &train, part.test_idx[c], h,
                                  &em, &dens);
        reused = fl_dmpfl_plus.eval_client(s, c, priv[c].data, priv[c].size, &train, second, rest,
                                           &em, &dens);
        fl_dmpfl_plus.eval_client(s, o, priv[o].data, priv[o].size, &train, part.test_idx[o],
                                  part.n_test[o], &em, &dens);
        after_other = fl_dmpfl_plus.eval_client(s, c, priv[c].data, priv[c].size, &train, second,
                                                rest, &em, &dens);
        void *s2 = fl_dmpfl_plus.server_new(&env, &err);
        CHECK(fl_dmpfl_plus.server_load(s2, &cku.data, &err) == SIM_OK);
        fresh = fl_dmpfl_plus.eval_client(s2, c, priv[c].data, priv[c].size, &train, second, rest,
                                          &em, &dens);
        fl_dmpfl_plus.server_free(s2);
        differ += reused != fresh || after_other != fresh;
    }
    msgpack_unpacked_destroy(&cku);
    msgpack_sbuffer_destroy(&ck);
    CHECK_MSG(differ == 0, "DM-PFL+: %d clients scored differently with reused base entropies",
              differ);
    printf("dmpfl short run: global %.3f, personal %.3f, DM-PFL+ %.3f\n", g, pc, pp);
    CHECK_MSG(g > 0.4, "global accuracy %.3f (chance 0.1)", g);
    CHECK_MSG(pc > 0.6 && pc > g, "personal accuracy %.3f above the global %.3f", pc, g);
    CHECK_MSG(pp > 0.5, "DM-PFL+ accuracy %.3f", pp);

    for (int c = 0; c < C; c++)
        msgpack_sbuffer_destroy(&priv[c]);
    a->server_free(s);
    fl_worker_destroy(&w);
    nn_model_destroy(&em);
    free(mask), free(vals), free(before), free(after), free(m0), free(m1), free(v0), free(v1);
    nn_partition_destroy(&part);
    nn_dataset_destroy(&train);
    nn_dataset_destroy(&test);
    return CHECK_DONE();
}
