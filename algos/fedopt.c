/* algos/fedopt.c -- FedOpt (Reddi et al., "Adaptive Federated Optimization", ICLR 2021): FedAdam,
 * FedYogi and FedAdagrad (`algorithm.fedopt.kind`), FedAvg's clients under an adaptive server.
 *
 * Clients run FedAvg's job (fl_fedavg_train) and upload the change of their model. The server
 * takes the pseudo-gradient Δ_t = Σ weight_i·Δ_i / Σ mass_i (FedAvg's absorb: in client-id order,
 * in double) and steps, per coordinate, as Algorithm 2 of the paper:
 *     m_t = β1·m_{t−1} + (1 − β1)·Δ_t
 *     v_t = v_{t−1} + Δ_t²                                   (adagrad)
 *     v_t = β2·v_{t−1} + (1 − β2)·Δ_t²                       (adam)
 *     v_t = v_{t−1} − (1 − β2)·Δ_t²·sign(v_{t−1} − Δ_t²)     (yogi; sign(0) = 0)
 *     x_{t+1} = x_t + η·m_t / (√v_t + τ)
 * Choices where the paper leaves room, and why:
 *   - m_{−1} = 0 and v_{−1} = τ², the smallest start the paper allows (v_{−1} ≥ τ²): a larger one
 *     damps the first rounds by an amount nothing in the method sets. With |Δ| ≫ τ, FedAdam's and
 *     FedYogi's first step is then about η·(1 − β1)/√(1 − β2) per coordinate (η with the
 *     defaults).
 *   - No bias correction: Algorithm 2 has none (τ and v_{−1} keep the early steps bounded).
 *   - β1 applies to all three kinds, as in Algorithm 2 (FedAdagrad keeps momentum too); Adagrad
 *     does not use β2.
 *   - m and v are doubles on the server; x is the global model the clients receive (floats, as
 *     FedAvg's), each step computed in double and rounded once.
 *   - An aggregation with no mass (nothing absorbed) is no step: x, m and v stay as they were
 *     (a zero Δ would still decay m and v and move x by η·m/(√v + τ)).
 *   - η is `algorithm.fedopt.lr`; `algorithm.server_lr` must stay 1 (refused otherwise, at the
 *     key, by the section's check), since a second factor on η would give one number two names,
 *     and an ignored key a run other than the one asked for.
 * Async (FedBuff-style buffers) works as FedAvg's: staleness lowers an update's weight, not its
 * mass. Checkpoints hold x, FedAvg's sums, m and v.
 */
#include "algos/fedavg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ADAM, YOGI, ADAGRAD };
static const char *const KINDS[] = {"adam", "yogi", "adagrad", NULL};

/* `algorithm.fedopt:` */
typedef struct fedopt_config {
    int kind;
    double lr, beta1, beta2, tau;
} fedopt_config;

#define K(field) .offset = offsetof(fedopt_config, field)
static const sim_key KEYS[] = {
        {"kind", SIM_KEY_CHOICE, K(kind), .dflt = "adam", .words = KINDS,
         .doc = "the server's optimizer: FedAdam, FedYogi or FedAdagrad"},
        /* the paper tunes η per task and kind; 10^-2 is the low end of what it found best for
         * FedAdam and FedYogi on its image tasks, a safe start whose first steps move each
         * weight by about η */
        {"lr", SIM_KEY_DOUBLE, K(lr), .dflt = "0.01", .lo = 0, .hi = 10,
         .doc = "server learning rate η (tuned per task; the paper's adam, yogi: 1e-2..1e-1)"},
        {"beta1", SIM_KEY_DOUBLE, K(beta1), .dflt = "0.9", .lo = 0, .hi = 1,
         .doc = "β1 in [0, 1): decay of the server's momentum m"},
        {"beta2", SIM_KEY_DOUBLE, K(beta2), .dflt = "0.99", .lo = 0, .hi = 1,
         .doc = "β2 in [0, 1): decay of the second moment v (adam, yogi)"},
        {"tau", SIM_KEY_DOUBLE, K(tau), .dflt = "0.001", .lo = 1e-8, .hi = 10,
         .doc = "adaptivity τ: added to √v, and v starts at τ²"},
        {0},
};
#undef K

/* β = 1 would freeze m (no step ever) or v (FedAdam then steps by η·m/(2τ)) */
static int fedopt_check(void *block, const sim_yaml *map, const sim_key_ctx *ctx, sim_err *err)
{
    const fedopt_config *c = block;
    const fl_config *shared = ctx->parent;
    if (c->beta1 >= 1)
        return sim_yaml_fail(sim_yaml_get(map, "beta1"), err, "beta1: must be below 1");
    if (c->beta2 >= 1)
        return sim_yaml_fail(sim_yaml_get(map, "beta2"), err, "beta2: must be below 1");
    /* η is fedopt.lr: a second factor would give one number two names (only when fedopt runs:
     * a fedopt section beside another algorithm is checked, and that one's server_lr is its own) */
    if (shared && !strcmp(ctx->algorithm, "fedopt") && shared->server_lr != 1)
        return sim_yaml_fail(sim_yaml_get(ctx->parent_map, "server_lr"), err,
                             "server_lr: %g: fedopt steps by fedopt.lr (server_lr must be 1)",
                             shared->server_lr);
    return SIM_OK;
}

const fl_section fl_fedopt_section = {
        .name = "fedopt",
        .keys = KEYS,
        .size = sizeof(fedopt_config),
        .check = fedopt_check,
        .doc = "FedOpt's server optimizer (Reddi et al. 2021, Algorithm 2): clients run FedAvg's "
               "job, the server steps on the mean update Δ by Adam, Yogi or Adagrad, "
               "x += lr·m/(√v + tau), m and v from beta1 and beta2, no bias correction. "
               "`algorithm.server_lr` must stay 1. Read for `fedopt`, checked for the others.",
};

typedef struct fedopt {
    fl_fedavg_server base; /* first: FedAvg's down, absorb and eval take a fedopt */
    double *m, *v;         /* n_floats each */
} fedopt;

static void *fedopt_new(const fl_env *env, sim_err *err)
{
    (void)err;
    const fedopt_config *c = env->cfg->own;
    size_t nf = env->arch->layout.n_floats;
    fedopt *s = sim_xcalloc(1, sizeof *s);
    fl_fedavg_init(&s->base, env);
    s->m = sim_xcalloc(nf, sizeof(double));
    s->v = sim_xmalloc(nf * sizeof(double));
    for (size_t j = 0; j < nf; j++)
        s->v[j] = c->tau * c->tau;
    return s;
}

static void fedopt_free(void *p)
{
    fedopt *s = p;
    if (!s) return;
    fl_fedavg_destroy(&s->base);
    free(s->m);
    free(s->v);
    free(s);
}

static int fedopt_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                        sim_err *err)
{
    return fl_fedavg_train(env, job, w, res, 0, err);
}

static void fedopt_aggregate(void *p)
{
    fedopt *s = p;
    const fedopt_config *c = s->base.env->cfg->own;
    size_t nf = s->base.env->arch->layout.n_floats;
    if (s->base.mass > 0)
        for (size_t j = 0; j < nf; j++) {
            double d = s->base.acc[j] / s->base.mass, d2 = d * d;
            s->m[j] = c->beta1 * s->m[j] + (1 - c->beta1) * d;
            if (c->kind == ADAGRAD)
                s->v[j] += d2;
            else if (c->kind == ADAM)
                s->v[j] = c->beta2 * s->v[j] + (1 - c->beta2) * d2;
            else
                s->v[j] -= (1 - c->beta2) * d2 * ((s->v[j] > d2) - (s->v[j] < d2));
            s->base.global[j] =
                    (float)(s->base.global[j] + c->lr * s->m[j] / (sqrt(s->v[j]) + c->tau));
        }
    memset(s->base.acc, 0, nf * sizeof(double));
    s->base.mass = 0;
    s->base.version++;
}

/* [FedAvg's sums (fl_save_sums), m, v], the arrays as raw native-order bytes */
static void fedopt_save(void *p, msgpack_packer *pk)
{
    fedopt *s = p;
    size_t nf = s->base.env->arch->layout.n_floats;
    msgpack_pack_array(pk, 3);
    fl_fedavg_save(&s->base, pk);
    msgpack_pack_bin(pk, nf * sizeof(double));
    msgpack_pack_bin_body(pk, s->m, nf * sizeof(double));
    msgpack_pack_bin(pk, nf * sizeof(double));
    msgpack_pack_bin_body(pk, s->v, nf * sizeof(double));
}

static int fedopt_load(void *p, const msgpack_object *o, sim_err *err)
{
    fedopt *s = p;
    size_t nf = s->base.env->arch->layout.n_floats;
    const msgpack_object *a =
            o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 3 ? o->via.array.ptr : NULL;
    if (!a || a[1].type != MSGPACK_OBJECT_BIN || a[1].via.bin.size != nf * sizeof(double) ||
        a[2].type != MSGPACK_OBJECT_BIN || a[2].via.bin.size != nf * sizeof(double))
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "server state does not fit fedopt with a %zu-parameter model", nf);
    int rc = fl_fedavg_load(&s->base, &a[0], err);
    if (rc) return rc;
    memcpy(s->m, a[1].via.bin.ptr, nf * sizeof(double));
    memcpy(s->v, a[2].via.bin.ptr, nf * sizeof(double));
    return SIM_OK;
}

const fl_algo fl_fedopt = {
        .version = FL_ALGO_VERSION,
        .name = "fedopt",
        .summary = "FedOpt: FedAvg's clients, the server steps by Adam, Yogi or Adagrad on "
                   "the mean update",
        .flags = FL_HAS_GLOBAL | FL_KEEPS_MOMENTUM | FL_COMPRESS_UP | FL_COMPRESS_DOWN |
                 FL_FIXED_COST,
        .section = &fl_fedopt_section,
        .server_new = fedopt_new,
        .server_free = fedopt_free,
        .job_down = fl_fedavg_down,
        .client_train = fedopt_train,
        .server_absorb = fl_fedavg_absorb,
        .server_aggregate = fedopt_aggregate,
        .eval_params = fl_fedavg_eval,
        .server_save = fedopt_save,
        .server_load = fedopt_load,
};
