/* tests/test_fl_compress.c -- compression as FedAvg's job uses it (algos/compress.c): error
 * feedback's residual carried across two jobs of a client through its private state, beside its
 * persistent momentum (what was sent plus the last residual is the sum of the true updates, and
 * the momentum, hence the training, is the uncompressed run's), and each upload's charged length
 * being its message's, within the cost-only bound. */
#include "algos/algo.h"
#include "nn/pack.h"
#include "sim/scenario.h"
#include "tests/check.h"
#include "tests/fljob.h"

#include <stdlib.h>
#include <string.h>

static size_t priced; /* fl_up_bytes of the last two_jobs: what cost-only mode charges */

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
 * (n_floats) and its last residual (zero when none) into e. */
static void two_jobs(const char *const *sets, int n_sets, int part, float *d1, float *d2, float *e,
                     size_t *bytes)
{
    sim_scenario sc;
    sim_err err = {0};
    int rc = sim_scenario_load(&sc, "scenarios/tiny.yaml", sets, n_sets, &err);
    CHECK_MSG(rc == SIM_OK, "tiny.yaml: %s", err.msg);
    if (rc) return;
    const fl_env *env = &sc.spec.env;
    const fl_algo *a = sc.spec.algo;
    void *s = a->server_new(env, &err);
    fl_worker w;
    fl_worker_init(&w);
    fl_result r1, r2;
    test_job(a, env, s, 0, 0, NULL, 0, &r1, &w);
    test_job(a, env, s, 0, 1, r1.priv.data, r1.priv.size, &r2, &w);
    size_t nf = sc.arch.layout.n_floats, n = sc.arch.layout.n_params;
    size_t o1 = part_at(&r1, part), o2 = part_at(&r2, part);
    CHECK(fl_up_unpack(env, d1, r1.up.data + o1, r1.up.size - o1, &err) == SIM_OK);
    CHECK(fl_up_unpack(env, d2, r2.up.data + o2, r2.up.size - o2, &err) == SIM_OK);
    for (int i = 0; i < 2; i++) { /* the charged length is the message's, within the bound */
        const fl_result *r = i ? &r2 : &r1;
        CHECK_EQ_I64(r->up_bytes, r->up.size);
        size_t most = (strcmp(a->name, "scaffold") ? 1 : 2) * fl_up_bytes(env); /* [Δy][Δc] */
        CHECK_MSG(r->up_bytes <= most, "%zu bytes sent, %zu priced", r->up_bytes, most);
        bytes[i] = r->up_bytes;
    }
    priced = fl_up_bytes(env);
    memset(e, 0, nf * sizeof(float));
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    float *v = calloc(n, sizeof(float));
    for (size_t off = 0; off < r2.priv.size;) {
        if (nn_msgpack_next(&u, r2.priv.data, r2.priv.size, &off, "priv", &err)) break;
        const msgpack_object *o = nn_map_get(&u.data, part ? "residual1" : "residual");
        if (o) {
            CHECK(nn_unpack_f32(v, n, o, "residual", &err) == SIM_OK);
            nn_comp_scatter(&sc.arch, v, e);
        }
    }
    free(v);
    msgpack_unpacked_destroy(&u);
    fl_result_destroy(&r1);
    fl_result_destroy(&r2);
    fl_worker_destroy(&w);
    a->server_free(s);
    sim_scenario_destroy(&sc);
}

enum { MAXF = 1 << 16 };
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
    size_t nf = 0, kept = 0, bad = 0, moved = 0;
    for (size_t j = 0; j < MAXF; j++)
        if (d1[j] != 0 || d2[j] != 0) nf = j + 1;
    for (size_t j = 0; j < nf; j++) {
        double got = (double)s1[j] + (double)s2[j] + (double)e[j], want = (double)d1[j] + d2[j];
        double tol = (fabs((double)d2[j]) + fabs((double)d1[j] - s1[j])) * 0x1p-24;
        if (fabs(got - want) > tol) bad++;
        kept += s1[j] != 0;
        moved += e[j] != 0 && s2[j] == 0 && d2[j] != e[j]; /* e2 holds part of e1 */
    }
    CHECK_MSG(nf > 1000 && bad == 0, "%s: %zu of %zu values: sent + residual != true updates", what,
              bad, nf);
    CHECK_MSG(kept > 0 && kept < nf / 10, "%s: %zu of %zu kept", what, kept, nf);
    CHECK_MSG(moved > 0, "%s: the second residual carries the first's", what);
    /* without error feedback what is left out is lost: the identity fails */
    topk[2 + n_plain] = "compression.up.error_feedback=false";
    two_jobs(topk, 3 + n_plain, part, s1, s2, e, bytes);
    bad = 0;
    for (size_t j = 0; j < nf; j++)
        bad += e[j] != 0 || fabs((double)s1[j] + s2[j] - ((double)d1[j] + d2[j])) >
                                    1e-3 * (fabs((double)d1[j]) + fabs((double)d2[j]));
    CHECK_MSG(bad > nf / 2, "%s: without error feedback no residual is kept (%zu of %zu)", what,
              bad, nf);
}

int main(void)
{
    /* FedAvg with momentum kept from job to job: the second job trains from the first's
     * momentum, which the residual must leave in place */
    const char *plain[] = {"algorithm.momentum=0.5", "algorithm.persistent_momentum=true"};
    check_feedback(plain, 2, 0, "fedavg");
    /* SCAFFOLD: Δy and Δc each with a residual of its own, beside c_i */
    const char *scaffold[] = {"algorithm.name=scaffold"};
    check_feedback(scaffold, 1, 0, "scaffold dy");
    check_feedback(scaffold, 1, 1, "scaffold dc");
    /* every other scheme: the charged length is the message's and what cost-only prices */
    size_t bytes[2], dense[2];
    two_jobs(plain, 2, 0, d1, d2, z, dense);
    const char *schemes[] = {"qsgd", "sign", "fp16", "bf16", "randk"};
    for (int i = 0; i < 5; i++) {
        char set[64];
        snprintf(set, sizeof set, "compression.up.scheme=%s", schemes[i]);
        const char *sets[] = {plain[0], plain[1], set, "compression.down.scheme=fp16"};
        two_jobs(sets, 4, 0, s1, s2, e, bytes);
        CHECK_MSG(bytes[0] < dense[0] && bytes[0] == priced && bytes[1] == priced,
                  "%s: %zu, %zu bytes, %zu priced", schemes[i], bytes[0], bytes[1], priced);
    }
    return CHECK_DONE();
}
