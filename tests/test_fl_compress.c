/* tests/test_fl_compress.c -- compression as algorithms' jobs use it (algos/compress.c): error
 * feedback's residual carried across two jobs of a client through its private state, beside its
 * persistent momentum (what was sent plus the last residual is the sum of the true updates, and
 * the momentum, hence the training, is the uncompressed run's), and each upload's charged length
 * being its message's and what cost-only mode charges (topk: at most that). The same for messages
 * that are part of the model: FedRep's and pFedHN's shared layers (the true update is the dense
 * upload, the trained layers, minus what was received; the residual is over the shared part) and
 * FedRolex's sub-model, whose window moves between the two jobs (the residual over the whole
 * model keeps what the first job left out of the channel the second drops). And the split
 * family's servers, which add the changes a compressed upload carries where they took the dense
 * upload's trained layers: LG-FedAvg's mean model and pFedHN's step are the dense ones when
 * topk keeps every value. */
#include "algos/algo.h"
#include "algos/submodel.h"
#include "nn/pack.h"
#include "sim/scenario.h"
#include "tests/check.h"
#include "tests/fljob.h"
#include "tests/rows.h"

#include <stdlib.h>
#include <string.h>

enum { MAXF = 1 << 16 }; /* floats a vector compared may hold */
static size_t n_shared;  /* the split family's shared values, as the last download held them */
static size_t priced;    /* what cost-only mode charges for the last two_jobs' uploads */
static test_rows rows;   /* pFedHN's embeddings */

/* How an algorithm's upload reads (the vectors compared are in its coordinates): the whole
 * model (n_floats), the split family's shared part (its n_shared values in layout order), the
 * width family's sub-model (n_floats, zero where the sub-model holds nothing). */
enum { WHOLE, SPLIT, WIDTH };
static int kind_of(const char *algo)
{
    return !strcmp(algo, "fedrep") || !strcmp(algo, "fedper") || !strcmp(algo, "lg-fedavg") ||
                           !strcmp(algo, "pfedhn")
                   ? SPLIT
           : !strcmp(algo, "heterofl") || !strcmp(algo, "fjord") || !strcmp(algo, "fedrolex")
                   ? WIDTH
                   : WHOLE;
}

/* The values of the "shared" float32 bin of a split-family message at buf into v; their count. */
static size_t shared_of(const void *buf, size_t len, float *v)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0, n = 0;
    const msgpack_object *o = NULL;
    if (!nn_msgpack_next(&u, buf, len, &off, "msg", NULL) && (o = nn_map_get(&u.data, "shared")) &&
        o->type == MSGPACK_OBJECT_BIN) {
        n = o->via.bin.size / 4;
        CHECK(nn_unpack_f32(v, n, o, "shared", NULL) == SIM_OK);
    }
    msgpack_unpacked_destroy(&u);
    return n;
}

/* A job's update decoded into d: a whole-model upload's vector at offset at; the change of the
 * split family's shared part (the dense upload minus the dense download's shared part, or the
 * compressed change); the width family's change, scattered at its sub-model's parameters. */
static void decode_up(const fl_env *env, int kind, const fl_result *r, const msgpack_sbuffer *down,
                      size_t at, float *d, nn_model *m)
{
    sim_err err = {0};
    if (kind == WHOLE) {
        CHECK(fl_up_unpack(env, d, r->up.data + at, r->up.size - at, &err) == SIM_OK);
    } else if (kind == SPLIT) {
        static float got[MAXF];
        size_t n = n_shared = shared_of(down->data, down->size, got);
        memset(d, 0, MAXF * sizeof(float));
        if (!n) return; /* a compressed download: only the lengths are checked */
        if (fl_comp_up(env)) {
            CHECK(nn_comp_decode_buf(d, n, r->up.data, r->up.size, NULL, "up", &err) == SIM_OK);
        } else {
            CHECK(shared_of(r->up.data, r->up.size, d) == n);
            for (size_t j = 0; j < n; j++)
                d[j] -= got[j];
        }
    } else {
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        memset(d, 0, env->arch->layout.n_floats * sizeof(float));
        CHECK(nn_msgpack_next(&u, r->up.data, r->up.size, &off, "up", &err) == SIM_OK);
        const msgpack_object *data = fl_sub_unpack_units(m, &u.data, "up", &err);
        fl_slice sl = {m->live, NULL};
        CHECK(data && (fl_comp_up(env) ? fl_comp_decode(env, d, &sl, data, "up", &err)
                                       : fl_sub_unpack(m, d, &u.data, "up", &err)) == SIM_OK);
        msgpack_unpacked_destroy(&u);
    }
}

/* Where vector `part` of an upload starts (SCAFFOLD's [Δy][Δc]: part 1 follows part 0). */
static size_t part_at(const fl_result *r, int part)
{
    size_t off = 0, end;
    for (int p = 0; p < part; p++) {
        CHECK(nn_msgpack_check(r->up.data + off, r->up.size - off, off, &end, NULL, "up", NULL) ==
              SIM_OK);
        off += end;
    }
    return off;
}

/* Client 0's two jobs from the same global model (rounds 0 and 1, the second with the first's
 * private state) under tiny.yaml with sets; vector `part` of their uploads decoded into d1, d2
 * (decode_up's coordinates) and its last residual (zero when none) into e. */
static void two_jobs(const char *const *sets, int n_sets, int part, float *d1, float *d2, float *e,
                     size_t *bytes)
{
    sim_scenario sc;
    sim_err err = {0};
    int rc = sim_scenario_load(&sc, "scenarios/tiny.yaml", sets, n_sets, &err);
    CHECK_MSG(rc == SIM_OK, "tiny.yaml: %s", err.msg);
    if (rc) return;
    fl_env *env = &sc.spec.env;
    env->rows = test_rows_api(&rows);
    const fl_algo *a = sc.spec.algo;
    void *s = a->server_new(env, &err);
    fl_worker w;
    fl_worker_init(&w);
    fl_result r1, r2;
    int kind = kind_of(a->name);
    nn_model m;
    nn_model_init(&m, env->arch, 1);
    msgpack_sbuffer down; /* the split family's, the same for both jobs */
    msgpack_sbuffer_init(&down);
    a->job_down(s, 0, 0, &down);
    test_job(a, env, s, 0, 0, NULL, 0, &r1, &w);
    test_job(a, env, s, 0, 1, r1.priv.data, r1.priv.size, &r2, &w);
    size_t nf = sc.arch.layout.n_floats, n = sc.arch.layout.n_params;
    decode_up(env, kind, &r1, &down, part_at(&r1, part), d1, &m);
    decode_up(env, kind, &r2, &down, part_at(&r2, part), d2, &m);
    env->cost_only = 1; /* what cost-only mode charges for the same jobs */
    fl_result c1;
    test_job(a, env, s, 0, 1, NULL, 0, &c1, &w);
    env->cost_only = 0;
    priced = c1.up_bytes;
    fl_result_destroy(&c1);
    CHECK(kind != WHOLE || priced == (strcmp(a->name, "scaffold") ? 1 : 2) * fl_up_bytes(env));
    for (int i = 0; i < 2; i++) { /* the charged length is the message's, within the bound */
        const fl_result *r = i ? &r2 : &r1;
        CHECK_EQ_I64(r->up_bytes, r->up.size);
        CHECK_MSG(r->up_bytes <= priced, "%zu bytes sent, %zu priced", r->up_bytes, priced);
        bytes[i] = r->up_bytes;
    }
    memset(e, 0, nf * sizeof(float));
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    float *v = calloc(n, sizeof(float));
    for (size_t off = 0; off < r2.priv.size;) {
        if (nn_msgpack_next(&u, r2.priv.data, r2.priv.size, &off, "priv", &err)) break;
        const msgpack_object *o = nn_map_get(&u.data, part ? "residual1" : "residual");
        if (o && kind == SPLIT) /* over the shared part alone */
            CHECK(nn_unpack_f32(e, n_shared, o, "residual", &err) == SIM_OK);
        else if (o) {
            CHECK(nn_unpack_f32(v, n, o, "residual", &err) == SIM_OK);
            nn_comp_scatter(&sc.arch, v, e);
        }
    }
    free(v);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&down);
    nn_model_destroy(&m);
    fl_result_destroy(&r1);
    fl_result_destroy(&r2);
    fl_worker_destroy(&w);
    a->server_free(s);
    test_rows_free(&rows);
    sim_scenario_destroy(&sc);
}

static float d1[MAXF], d2[MAXF], e[MAXF], s1[MAXF], s2[MAXF], z[MAXF];

/* Error feedback over two jobs, vector `part` of the upload: sent + residual = the true updates
 * (d1, d2 from the run without compression, `plain`). e1 = d1 − s1 exactly (topk keeps values),
 * so s1 + s2 + e2 = s1 + fl(d2 + e1), within d2 + e1's float rounding of d1 + d2. */
static void check_feedback(const char *const *plain, int n_plain, int part, const char *what)
{
    size_t bytes[2], dense[2];
    two_jobs(plain, n_plain, part, d1, d2, z, dense);
    const char *topk[8] = {"compression.up.scheme=topk", "compression.up.ratio=0.02"};
    for (int i = 0; i < n_plain; i++)
        topk[2 + i] = plain[i];
    two_jobs(topk, 2 + n_plain, part, s1, s2, e, bytes);
    CHECK_MSG(bytes[0] < dense[0] / 10, "%s: topk 2%%: %zu bytes against %zu dense", what, bytes[0],
              dense[0]);
    size_t nf = 0, kept = 0, bad = 0, moved = 0, touched = 0, held = 0;
    for (size_t j = 0; j < MAXF; j++)
        if (d1[j] != 0 || d2[j] != 0) nf = j + 1, touched++;
    for (size_t j = 0; j < nf; j++) {
        double got = (double)s1[j] + (double)s2[j] + (double)e[j], want = (double)d1[j] + d2[j];
        double tol = (fabs((double)d2[j]) + fabs((double)d1[j] - s1[j])) * 0x1p-24;
        if (fabs(got - want) > tol) bad++;
        kept += s1[j] != 0;
        moved += e[j] != 0 && s2[j] == 0 && d2[j] != e[j]; /* e2 holds part of e1 */
        /* a parameter the first job sent part of and the second does not hold (d2 = 0): its
         * residual is the first's, to be sent when a sub-model holds it again */
        held += d2[j] == 0 && d1[j] != s1[j] && e[j] == d1[j] - s1[j];
    }
    CHECK_MSG(nf > 1000 && bad == 0, "%s: %zu of %zu values: sent + residual != true updates", what,
              bad, nf);
    CHECK_MSG(kept > 0 && kept < nf / 10, "%s: %zu of %zu kept", what, kept, nf);
    CHECK_MSG(moved > 0, "%s: the second residual carries the first's", what);
    if (!strcmp(what, "fedrolex"))
        CHECK_MSG(held > 100, "%s: %zu residuals of the channel the window left", what, held);
    /* without error feedback what is left out is lost: the identity fails */
    topk[2 + n_plain] = "compression.up.error_feedback=false";
    two_jobs(topk, 3 + n_plain, part, s1, s2, e, bytes);
    bad = 0;
    for (size_t j = 0; j < nf; j++)
        bad += e[j] != 0 || fabs((double)s1[j] + s2[j] - ((double)d1[j] + d2[j])) >
                                    1e-3 * (fabs((double)d1[j]) + fabs((double)d2[j]));
    CHECK_MSG(bad > touched / 2, "%s: without error feedback no residual is kept (%zu of %zu)",
              what, bad, touched);
}

/* The global model after one aggregation of clients 0 and 1's round-0 jobs (weight = mass =
 * their samples, as in sync rounds) under tiny.yaml with sets, into g (n_floats). */
static void one_round(const char *const *sets, int n_sets, float *g)
{
    sim_scenario sc;
    sim_err err = {0};
    int rc = sim_scenario_load(&sc, "scenarios/tiny.yaml", sets, n_sets, &err);
    CHECK_MSG(rc == SIM_OK, "tiny.yaml: %s", err.msg);
    if (rc) return;
    sc.spec.env.rows = test_rows_api(&rows);
    const fl_env *env = &sc.spec.env;
    const fl_algo *a = sc.spec.algo;
    void *s = a->server_new(env, &err);
    fl_worker w;
    fl_worker_init(&w);
    for (int c = 0; c < 2; c++) {
        fl_result r;
        test_job(a, env, s, c, 0, NULL, 0, &r, &w);
        double n = env->part->n[c];
        CHECK(a->server_absorb(s, c, r.up.data, r.up.size, n, n, &err) == SIM_OK);
        fl_result_destroy(&r);
    }
    a->server_aggregate(s);
    nn_model m;
    nn_model_init(&m, env->arch, 1);
    a->eval_params(s, -1, NULL, 0, &m);
    memcpy(g, m.params, sc.arch.layout.n_floats * sizeof(float));
    nn_model_destroy(&m);
    fl_worker_destroy(&w);
    a->server_free(s);
    test_rows_free(&rows);
    sim_scenario_destroy(&sc);
}

/* The split family's server adds the mean change a compressed upload carries where it replaces
 * its shared part by the mean of the dense uploads (the trained parts): topk keeping every value
 * sends the change exactly, so both give the same model up to rounding, and a server that took
 * the changes for models would not. */
static void check_split_server(void)
{
    const char *dense[] = {"algorithm.name=lg-fedavg"};
    const char *all[] = {"algorithm.name=lg-fedavg", "compression.up.scheme=topk",
                         "compression.up.ratio=1"};
    one_round(dense, 1, s1);
    one_round(all, 3, s2);
    size_t bad = 0, differ = 0;
    for (size_t j = 0; j < MAXF; j++) {
        bad += fabs((double)s1[j] - s2[j]) > 1e-6 * (1 + fabs((double)s1[j]));
        differ += s1[j] != s2[j];
    }
    CHECK_MSG(bad == 0, "lg-fedavg: %zu parameters off the dense round's mean model", bad);
    printf("lg-fedavg: %zu parameters differ from the dense round's mean (by < 1e-6)\n", differ);
    /* pFedHN's step from the negated changes is the dense one's to the bit (the model generated
     * for client 0 after it), and not from the changes themselves */
    const char *hn[] = {"algorithm.name=pfedhn"};
    const char *hn_all[] = {"algorithm.name=pfedhn", "compression.up.scheme=topk",
                            "compression.up.ratio=1"};
    one_round(hn, 1, s1);
    one_round(hn_all, 3, s2);
    CHECK_MSG(!memcmp(s1, s2, sizeof s1), "pfedhn: the step from the changes is not the dense one");
    const char *hn_still[] = {"algorithm.name=pfedhn", "algorithm.pfedhn.lr=0"};
    one_round(hn_still, 2, z); /* no step */
    differ = 0;
    for (size_t j = 0; j < MAXF; j++)
        differ += z[j] != s1[j];
    CHECK_MSG(differ > 1000, "pfedhn: its step moved %zu parameters", differ);
}

int main(void)
{
    check_split_server();
    /* FedAvg with momentum kept from job to job: the second job trains from the first's
     * momentum, which the residual must leave in place */
    const char *plain[] = {"algorithm.momentum=0.5", "algorithm.persistent_momentum=true"};
    check_feedback(plain, 2, 0, "fedavg");
    /* SCAFFOLD: Δy and Δc each with a residual of its own, beside c_i */
    const char *scaffold[] = {"algorithm.name=scaffold"};
    check_feedback(scaffold, 1, 0, "scaffold dy");
    check_feedback(scaffold, 1, 1, "scaffold dc");
    /* FedRep's shared part: the dense upload is the trained part, the compressed one its change
     * (whose sum is checked), the residual over the shared part beside the personal head */
    const char *fedrep[] = {"algorithm.name=fedrep"};
    check_feedback(fedrep, 1, 0, "fedrep");
    /* pFedHN: the same after its private state, the whole model */
    const char *pfedhn[] = {"algorithm.name=pfedhn"};
    check_feedback(pfedhn, 1, 0, "pfedhn");
    /* FedRolex's sub-model, whose window moves by a channel between the two jobs: the residual
     * over the whole model keeps what the first left out of the channel the second drops */
    const char *fedrolex[] = {"algorithm.name=fedrolex"};
    check_feedback(fedrolex, 1, 0, "fedrolex");
    /* every other scheme: the charged length is the message's and what cost-only prices */
    const char *const *algos[] = {plain, fedrep, fedrolex, pfedhn};
    const char *schemes[] = {"qsgd", "sign", "fp16", "bf16", "randk"};
    for (int k = 0; k < 4; k++) {
        size_t bytes[2], dense[2];
        int na = k ? 1 : 2;
        two_jobs(algos[k], na, 0, d1, d2, z, dense);
        for (int i = 0; i < 5; i++) {
            char set[64];
            snprintf(set, sizeof set, "compression.up.scheme=%s", schemes[i]);
            const char *sets[] = {set, "compression.down.scheme=fp16", algos[k][0], plain[1]};
            two_jobs(sets, 2 + na, 0, s1, s2, e, bytes);
            CHECK_MSG(bytes[0] < dense[0] && bytes[0] == priced && bytes[1] == priced,
                      "%s %s: %zu, %zu bytes, %zu priced", algos[k][0], schemes[i], bytes[0],
                      bytes[1], priced);
        }
    }
    return CHECK_DONE();
}
