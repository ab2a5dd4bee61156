/* tests/test_fl_pfedhn.c -- pFedHN through the fl_algo interface: each client receives the shared
 * part its embedding generates (its length is the cost-only prediction; two clients get different
 * ones; a client without an embedding row has the N(0, 1) draws of its own stream, and one with a
 * row has that row) and trains as FedPer does; the hyper-network's gradient of Σ_k ⟨generated_k −
 * trained_k, generated_k(φ)⟩, φ's and the embeddings' as the server's saved state holds them,
 * passes a central finite-difference check through the generated messages; the step moves φ and
 * the absorbed clients' embedding rows (no other) by −lr times the mean gradient, its norm
 * clipped; the evaluated model is the generated shared part with the client's head (or, with
 * eval: trained, its last job's model); a foreign message or state is refused; the saved state
 * (a checkpoint's) is as long for 40 clients as for 4: the embeddings are not in it. */
#include "algos/algo.h"
#include "nn/pack.h"
#include "tests/algos.h"
#include "tests/check.h"
#include "tests/fljob.h"
#include "tests/rows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static nn_dataset train, test;
static nn_partition part;
static nn_arch arch;
static test_rows rows; /* the server's embedding rows */
enum { DE = 3 };       /* the embedding width hn_conf sets */

/* m's floats of one part of FedPer's split (head 0: every tensor but the last layer's W and b,
 * in layout order; 1: those two) into v; returns their count. */
static size_t part_of(const float *params, int head, float *v)
{
    const nn_layout *L = &arch.layout;
    size_t k = 0;
    for (int t = 0; t < L->n; t++) {
        if ((t >= L->n - 2) != head) continue;
        size_t n = (size_t)L->t[t].rows * L->t[t].cols;
        if (v) memcpy(v + k, params + L->t[t].off, n * sizeof(float));
        k += n;
    }
    return k;
}

/* Client c's down message and its shared floats (malloc'd; *n gets their count). */
static float *generated(void *s, int c, size_t *n, msgpack_sbuffer *down)
{
    msgpack_sbuffer_init(down);
    fl_pfedhn.job_down(s, c, 0, down);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    float *v = NULL;
    const msgpack_object *o = NULL;
    if (msgpack_unpack_next(&u, down->data, down->size, &off) == MSGPACK_UNPACK_SUCCESS &&
        (o = nn_map_get(&u.data, "shared")) && o->type == MSGPACK_OBJECT_BIN) {
        *n = o->via.bin.size / 4;
        v = malloc(o->via.bin.size + 4);
        if (nn_unpack_f32(v, *n, o, "down", NULL)) free(v), v = NULL;
    }
    msgpack_unpacked_destroy(&u);
    return v; /* NULL: no "shared" */
}

/* The server's saved state [[φ (float32 bin), Σ gradients (float64 bin), replies], clients
 * absorbed (int32 bin), their embeddings' Σ gradients (float64 bin)]: copies of φ and of the
 * gradient sum (malloc'd), *n_phi their length, and, when eg is given, every client's embedding
 * gradient (DE each, zero when not absorbed) in eg. */
static void saved(void *s, float **phi, double **grad, size_t *n_phi, double *eg)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    fl_pfedhn.server_save(s, &pk);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CHECK(msgpack_unpack_next(&u, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS);
    CHECK(u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 3);
    const msgpack_object *o = u.data.via.array.ptr, *a = o[0].via.array.ptr;
    *n_phi = a[0].via.bin.size / sizeof(float);
    *phi = malloc(a[0].via.bin.size);
    *grad = malloc(a[1].via.bin.size);
    memcpy(*phi, a[0].via.bin.ptr, a[0].via.bin.size);
    memcpy(*grad, a[1].via.bin.ptr, a[1].via.bin.size);
    size_t n = o[1].via.bin.size / sizeof(int32_t);
    CHECK(o[2].via.bin.size == n * DE * sizeof(double));
    if (eg) memset(eg, 0, sizeof(double) * DE * (size_t)part.n_clients);
    for (size_t k = 0; eg && k < n; k++) {
        int32_t c;
        memcpy(&c, o[1].via.bin.ptr + k * sizeof c, sizeof c);
        CHECK(c >= 0 && c < part.n_clients);
        memcpy(eg + (size_t)c * DE, o[2].via.bin.ptr + k * DE * sizeof(double),
               DE * sizeof(double));
    }
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

/* The length of s's saved state. */
static size_t saved_bytes(void *s)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    fl_pfedhn.server_save(s, &pk);
    size_t n = sb.size;
    msgpack_sbuffer_destroy(&sb);
    return n;
}

/* Give the server a saved state [[n floats, n zero doubles, 0], no clients, no gradients]: φ
 * with no gradient pending, or, with n not its φ's length, a foreign state; returns load's
 * status. */
static int load_phi(void *s, const float *phi, size_t n_phi)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    double *zero = calloc(n_phi, sizeof(double));
    msgpack_pack_array(&pk, 3);
    fl_save_sums(&pk, phi, zero, 0, n_phi);
    msgpack_pack_bin(&pk, 0);
    msgpack_pack_bin(&pk, 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = msgpack_unpack_next(&u, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS
                     ? fl_pfedhn.server_load(s, &u.data, NULL)
                     : SIM_EFORMAT;
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    free(zero);
    return rc;
}

/* Σ_k ⟨g_k, generated_k⟩ over clients 1 and 2 at the server's φ (NaN when a message lacks its
 * shared part). */
static double objective(void *s, float *const *g)
{
    double L = 0;
    for (int k = 0; k < 2; k++) {
        size_t n;
        msgpack_sbuffer d;
        float *v = generated(s, k + 1, &n, &d);
        if (!v) L = NAN;
        for (size_t j = 0; v && j < n; j++)
            L += (double)g[k][j] * v[j];
        free(v);
        msgpack_sbuffer_destroy(&d);
    }
    return L;
}

/* pFedHN's settings as the scenario's loader reads them: this test's network, clip and eval */
static void hn_conf(fl_config *cfg, double clip, const char *eval)
{
    char text[256];
    snprintf(text, sizeof text,
             "{name: pfedhn, pfedhn: {embed: 3, hidden: 8, layers: 1, lr: 0.1, clip: %.17g, eval: "
             "%s}}",
             clip, eval);
    test_own(cfg, text);
}

int main(void)
{
    sim_err err = {0};
    CHECK(nn_synth_pews_make(&train, &test, 200, 3, &err) == SIM_OK);
    CHECK(nn_partition_iid(&part, &train, 4, 3, &err) == SIM_OK);
    CHECK(nn_arch_build(&arch, "fedpews-mlp", 5, 1, 1, 4, &err) == SIM_OK);
    fl_config cfg = {.name = "pfedhn",
                     .local_epochs = 1,
                     .batch_size = 16,
                     .lr = 0.05,
                     .momentum = 0.5,
                     .lr_decay = 1,
                     .server_lr = 1};
    hn_conf(&cfg, 0, "generated");
    fl_env env = {&cfg, &arch, &train, &test, &part, 9, 0, NULL, NULL, NULL, test_rows_api(&rows)},
           envc = env;
    envc.cost_only = 1;
    const nn_layout *L = &arch.layout;
    size_t nf = L->n_floats, n_sh = part_of(NULL, 0, NULL), n_head = part_of(NULL, 1, NULL);
    float *pa = malloc(nf * 4), *pb = malloc(nf * 4);

    /* each client gets its own generated shared part, the cost-only length, the same for a seed */
    void *s = fl_pfedhn.server_new(&env, &err), *s2 = fl_pfedhn.server_new(&env, &err);
    CHECK_MSG(s && s2, "server_new: %s", err.msg);
    size_t n1, n2;
    msgpack_sbuffer d1, d2, d1b;
    float *gen1 = generated(s, 1, &n1, &d1), *gen2 = generated(s, 2, &n2, &d2);
    free(generated(s2, 1, &n1, &d1b));
    if (!gen1 || !gen2) return CHECK_DONE() + !!printf("FAIL: no \"shared\" in a down message\n");
    CHECK_EQ_I64(n1, n_sh);
    CHECK(d1.size == fl_pfedhn.job_down(s, 1, 0, NULL) && d1.size < fl_dense_msg_bytes(&arch));
    CHECK(memcmp(gen1, gen2, n_sh * 4) != 0);
    CHECK(d1b.size == d1.size && !memcmp(d1b.data, d1.data, d1.size));
    msgpack_sbuffer_destroy(&d1b);
    fl_pfedhn.server_free(s2);
    nn_partition many;
    CHECK(nn_partition_iid(&many, &train, 40, 3, &err) == SIM_OK);
    fl_env env40 = env;
    env40.part = &many;
    s2 = fl_pfedhn.server_new(&env40, &err);
    CHECK_MSG(s2 && saved_bytes(s2) == saved_bytes(s),
              "the saved state does not grow with the clients: %zu bytes for 40, %zu for 4",
              s2 ? saved_bytes(s2) : 0, saved_bytes(s));
    fl_pfedhn.server_free(s2);
    nn_partition_destroy(&many);

    /* an embedding is the client's row, or without one the N(0, 1) draws of its stream, which
     * the rows of clients 1 to 3 are set to here */
    float e0[4][DE];
    for (int c = 1; c <= 3; c++) {
        sim_rng r;
        sim_rng_seed(&r, 9, fl_algo_stream("pfedhn.embed"), (uint64_t)c);
        for (int k = 0; k < DE; k++)
            e0[c][k] = (float)sim_rng_normal(&r);
    }
    float *gen3 = generated(s, 3, &n1, &d1b), *gen3b, *gen3c;
    msgpack_sbuffer_destroy(&d1b);
    rows.api.put(rows.api.ctx, 3, e0[3], sizeof e0[3]);
    gen3b = generated(s, 3, &n1, &d1b);
    msgpack_sbuffer_destroy(&d1b);
    CHECK_MSG(gen3 && gen3b && !memcmp(gen3, gen3b, n_sh * 4),
              "a client without a row is encoded from its stream's draws");
    float moved[DE] = {e0[3][0] + 1, e0[3][1], e0[3][2]};
    rows.api.put(rows.api.ctx, 3, moved, sizeof moved);
    gen3c = generated(s, 3, &n1, &d1b);
    msgpack_sbuffer_destroy(&d1b);
    CHECK_MSG(gen3c && memcmp(gen3, gen3c, n_sh * 4), "a client's row is its embedding");
    free(gen3), free(gen3b), free(gen3c);
    for (int c = 1; c <= 2; c++)
        rows.api.put(rows.api.ctx, c, e0[c], sizeof e0[c]);

    /* a job: FedPer's training (its FLOPs), cost-only the same FLOPs and upload length */
    fl_worker w;
    fl_worker_init(&w);
    fl_result r[2], rc0, rper;
    for (int k = 0; k < 2; k++)
        test_job(&fl_pfedhn, &env, s, k + 1, 0, NULL, 0, &r[k], &w);
    fl_job cj = {1, 0, NULL, 0, NULL, 0, (uint64_t)1 << 32};
    fl_result_init(&rc0);
    CHECK(fl_pfedhn.client_train(&envc, &cj, &w, &rc0, &err) == SIM_OK);
    CHECK(rc0.cost.flops == r[0].cost.flops && rc0.up_bytes == r[0].up.size);
    void *sp = fl_fedper.server_new(&env, &err);
    test_job(&fl_fedper, &env, sp, 1, 0, NULL, 0, &rper, &w);
    CHECK_MSG(rper.cost.flops == r[0].cost.flops && rper.up.size == r[0].up.size,
              "pFedHN's job costs FedPer's: %g FLOPs, %zu bytes up", r[0].cost.flops, r[0].up.size);
    fl_result_destroy(&rper);
    fl_fedper.server_free(sp);
    CHECK(r[0].priv.size > 0);

    /* the gradient the server takes from two replies against central differences */
    float *g[2];
    for (int k = 0; k < 2; k++) {
        g[k] = malloc(n_sh * 4);
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        CHECK(msgpack_unpack_next(&u, r[k].up.data, r[k].up.size, &off) == MSGPACK_UNPACK_SUCCESS);
        CHECK(nn_unpack_f32(g[k], n_sh, nn_map_get(&u.data, "shared"), "up", &err) == SIM_OK);
        msgpack_unpacked_destroy(&u);
        const float *gen = k ? gen2 : gen1;
        for (size_t j = 0; j < n_sh; j++)
            g[k][j] = gen[j] - g[k][j];
    }
    for (int k = 0; k < 2; k++)
        CHECK(fl_pfedhn.server_absorb(s, k + 1, r[k].up.data, r[k].up.size, 1, 1, &err) == SIM_OK);
    float *phi0, *phi;
    double *G, *unused, EG[4 * DE], eg2[4 * DE];
    size_t n_phi;
    saved(s, &phi0, &G, &n_phi, EG);
    phi = malloc(n_phi * sizeof(float));
    memcpy(phi, phi0, n_phi * sizeof(float));
    double worst = 0, eps = 1e-3;
    int checked = 0, nonzero = 0, loaded = 1;
    for (size_t j = 0; j < n_phi; j += j < 200 ? 1 : 211) { /* the encoder whole, then a sample */
        phi[j] = phi0[j] + (float)eps;
        loaded &= load_phi(s, phi, n_phi) == SIM_OK;
        double up = objective(s, g);
        phi[j] = phi0[j] - (float)eps;
        loaded &= load_phi(s, phi, n_phi) == SIM_OK;
        double lo = objective(s, g);
        phi[j] = phi0[j];
        double fd = (up - lo) / ((double)(phi0[j] + (float)eps) - (phi0[j] - (float)eps));
        worst = fmax(worst, fabs(fd - G[j]) / fmax(0.1, fabs(G[j])));
        if (isnan(fd)) worst = INFINITY;
        checked++, nonzero += fabs(G[j]) > 1e-3;
    }
    for (int c = 1; c <= 2; c++) /* the embeddings, through their rows */
        for (int k = 0; k < DE; k++) {
            float *e = rows.row[c];
            e[k] = e0[c][k] + (float)eps;
            double up = objective(s, g);
            e[k] = e0[c][k] - (float)eps;
            double lo = objective(s, g);
            e[k] = e0[c][k];
            double fd = (up - lo) / ((double)(e0[c][k] + (float)eps) - (e0[c][k] - (float)eps)),
                   an = EG[c * DE + k];
            worst = fmax(worst, fabs(fd - an) / fmax(0.1, fabs(an)));
            if (isnan(fd)) worst = INFINITY;
            checked++, nonzero += fabs(an) > 1e-3;
        }
    for (int k = 0; k < DE; k++) /* no gradient for clients not absorbed */
        CHECK(EG[k] == 0 && EG[3 * DE + k] == 0);
    CHECK(loaded);
    CHECK_MSG(worst < 1e-2 && nonzero > checked / 4,
              "hyper-network gradient vs central differences: worst relative error %g over %d "
              "entries (%d not ~0)",
              worst, checked, nonzero);

    /* the step: φ − lr·(mean gradient), its norm clipped */
    double gn = 0;
    for (size_t j = 0; j < n_phi; j++)
        gn += G[j] * G[j] / 4;
    for (int j = 0; j < 4 * DE; j++)
        gn += EG[j] * EG[j] / 4;
    gn = sqrt(gn);
    for (int clip = 0; clip <= 1; clip++) {
        hn_conf(&cfg, clip ? gn / 4 : 0, "generated");
        CHECK(load_phi(s, phi0, n_phi) == SIM_OK);
        for (int c = 1; c <= 2; c++)
            rows.api.put(rows.api.ctx, c, e0[c], sizeof e0[c]);
        for (int k = 0; k < 2; k++)
            CHECK(fl_pfedhn.server_absorb(s, k + 1, r[k].up.data, r[k].up.size, 3, 3, &err) ==
                  SIM_OK);
        fl_pfedhn.server_aggregate(s);
        free(phi);
        saved(s, &phi, &unused, &n_phi, eg2);
        double off = 0, step = 0, sc = clip ? 0.25 : 1;
        for (size_t j = 0; j < n_phi; j++) {
            off = fmax(off, fabs(phi[j] - (phi0[j] - 0.1 * sc * G[j] / 2)));
            step += ((double)phi[j] - phi0[j]) * ((double)phi[j] - phi0[j]);
        }
        for (int c = 1; c <= 2; c++)
            for (int k = 0; k < DE; k++) {
                float now = ((const float *)rows.row[c])[k];
                off = fmax(off, fabs(now - (e0[c][k] - 0.1 * sc * EG[c * DE + k] / 2)));
                step += ((double)now - e0[c][k]) * ((double)now - e0[c][k]);
            }
        CHECK(!memcmp(rows.row[3], moved, sizeof moved) && rows.row[0] == NULL);
        for (int j = 0; j < 4 * DE; j++)
            off = fmax(off, fabs(eg2[j])); /* the gradient cleared */
        CHECK_MSG(off < 1e-5 && unused[0] == 0,
                  "step %d: φ moved by −lr·mean gradient (×%g; off by %g), the sum cleared", clip,
                  sc, off);
        if (clip) CHECK_NEAR(sqrt(step), 0.1 * gn / 4, 1e-3 * gn);
        free(unused);
    }

    /* evaluation: the shared part generated now and the client's head; eval: trained, the model
     * its job left; a client without a job: the initial head */
    nn_model m, ref;
    nn_model_init(&m, &arch, 1);
    nn_model_init(&ref, &arch, 1);
    size_t nn_;
    msgpack_sbuffer dnow;
    float *now = generated(s, 1, &nn_, &dnow);
    CHECK(nn_unpack_params(ref.params, &arch, r[0].priv.data, r[0].priv.size, "priv", &err) ==
          SIM_OK);
    fl_pfedhn.eval_params(s, 1, r[0].priv.data, r[0].priv.size, &m);
    part_of(m.params, 0, pa);
    CHECK(now && !memcmp(pa, now, n_sh * 4));
    part_of(m.params, 1, pa), part_of(ref.params, 1, pb);
    CHECK(!memcmp(pa, pb, n_head * 4));
    CHECK(now && memcmp(now, gen1, n_sh * 4) != 0); /* the step moved it */
    hn_conf(&cfg, gn / 4, "trained");
    fl_pfedhn.eval_params(s, 1, r[0].priv.data, r[0].priv.size, &m);
    CHECK(!memcmp(m.params, ref.params, nf * 4));
    fl_pfedhn.eval_params(s, 3, NULL, 0, &m);
    float *init = fl_initial_params(&env);
    free(now), msgpack_sbuffer_destroy(&dnow);
    now = generated(s, 3, &nn_, &dnow);
    part_of(m.params, 0, pa);
    CHECK(now && !memcmp(pa, now, n_sh * 4));
    part_of(m.params, 1, pa), part_of(init, 1, pb);
    CHECK(!memcmp(pa, pb, n_head * 4));
    hn_conf(&cfg, gn / 4, "generated");

    /* a FedAvg message and a FedAvg server state are refused */
    msgpack_sbuffer dense;
    msgpack_sbuffer_init(&dense);
    nn_pack_params(&dense, &arch, init);
    CHECK(fl_pfedhn.server_absorb(s, 1, dense.data, dense.size, 1, 1, &err) == SIM_EFORMAT);
    CHECK(load_phi(s, init, nf) == SIM_EFORMAT);

    msgpack_sbuffer_destroy(&dense);
    msgpack_sbuffer_destroy(&dnow);
    msgpack_sbuffer_destroy(&d1);
    msgpack_sbuffer_destroy(&d2);
    free(now), free(init), free(pa), free(pb), free(phi), free(phi0), free(G), free(gen1),
            free(gen2);
    for (int k = 0; k < 2; k++)
        free(g[k]), fl_result_destroy(&r[k]);
    fl_result_destroy(&rc0);
    nn_model_destroy(&m), nn_model_destroy(&ref);
    fl_worker_destroy(&w);
    fl_pfedhn.server_free(s);
    nn_partition_destroy(&part);
    nn_dataset_destroy(&train);
    nn_dataset_destroy(&test);
    fl_config_destroy(&cfg);
    test_rows_free(&rows);
    return CHECK_DONE();
}
