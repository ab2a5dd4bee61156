/* algos/fednova.c -- FedNova (Wang, Liu, Liang, Joshi, Poor, NeurIPS 2020, "Tackling the Objective
 * Inconsistency Problem in Heterogeneous Federated Optimization"): FedAvg whose server divides each
 * client's model change by how far that client's local optimizer carries a gradient, so a client
 * that ran more local steps (local_epochs over more samples) no longer pulls the global model
 * toward its own objective's optimum.
 *
 * Client i runs FedAvg's job (algos/fedavg.h: τ_i local steps from the received x, momentum
 * restarted at zero) and uploads its change Δ_i = y_i − x followed by its normalizer a_i =
 * ‖a_i‖₁ as one msgpack float64 (9 bytes more than FedAvg's upload). nn/'s momentum step (the
 * PyTorch form, nn_model_sgd_step) is v_t = ρ v_{t−1} + g_t, w_t = w_{t−1} − η v_t, v_0 = 0, so
 * v_t = Σ_{s≤t} ρ^{t−s} g_s and
 *     Δ_i = −η Σ_{t=1..τ} v_t = −η Σ_{s=1..τ} c_s g_s,   c_s = Σ_{k=0..τ−s} ρ^k = (1 −
 * ρ^{τ−s+1})/(1 − ρ), a_i = Σ_s c_s = Σ_{k=1..τ} (1 − ρ^k)/(1 − ρ) = [τ − ρ(1 − ρ^τ)/(1 − ρ)]/(1 −
 * ρ), the paper's normalizer for momentum SGD; ρ = 0 gives a_i = τ_i (and ρ = 1 the limit
 * τ(τ+1)/2). With a constant gradient g the change is exactly −η a_i g, so Δ_i/a_i is −η times a
 * weighted mean of the job's gradients. a_i is computed as the counter the derivation sums
 * (c ← ρc + 1, a ← a + c: the authors' form), which needs no case for ρ = 1 and loses nothing
 * to cancellation when ρ is near 1. Weight decay and clipping act on the gradient g itself (the
 * decay is part of the local objective, as in the authors' code) and leave a_i alone.
 *
 * Server, over the clients absorbed since the last aggregation (weight_i and mass_i as the engine
 * passes them: FedAvg's sample count or 1, an async update's weight lowered by staleness):
 *     x ← x + η_g · τ_eff · Σ_i weight_i (Δ_i/a_i) / M,   τ_eff = Σ_i mass_i a_i / M,   M = Σ_i
 * mass_i, η_g = algorithm.server_lr. In sync runs weight = mass and this is the paper's x − η_g
 * τ_eff Σ p_i η d_i with p_i = mass_i/M. τ_eff weights by mass rather than weight so that staleness
 * discounts an update once (in its term), not twice; either way, equal a_i give FedAvg's step
 * exactly.
 *
 * Choices where the paper is silent or that fedsim's settings force:
 *   - A client with no samples (τ_i = 0, a_i = 0, Δ_i = 0) still uploads (FedAvg's bytes) but
 *     counts nowhere: not in the sum, not in τ_eff and not in M. It has no local objective, so its
 *     share p_i of the global one is 0 (with sample weights its mass is 0 anyway; with uniform
 *     weights counting it would shrink both τ_eff and the mean and so the step twice).
 *   - No proximal term: algorithm.mu (whose default 0.01 is FedProx's) is ignored, as FedAvg
 *     ignores it. The paper's FedProx normalizer [1 − (1 − ημ)^τ]/(ημ) holds for plain SGD; with
 *     momentum fedsim's FedProx puts μ(w − x) into g before the momentum buffer, which no closed
 *     form above covers, and a FedNova silently run as FedProx would surprise. FedNova+prox would
 *     be an algorithm of its own.
 *   - Momentum restarts every job (no FL_KEEPS_MOMENTUM): a kept buffer would carry the previous
 *     job's gradients into Δ_i, outside a_i.
 *   - A message whose a_i is not a float64 that τ steps can give (0, or finite and ≥ 1), or with
 *     bytes after it, is refused (SIM_EFORMAT) before anything is added.
 * Sums run in double in the engine's client-id order. The checkpoint holds x and the
 * accumulators Σ weight·Δ/a, M and Σ mass·a.
 */
#include "algos/fedavg.h"

#include "nn/pack.h"

#include <math.h>
#include <string.h>

/* FedAvg's server (first, so its functions take this one) and Σ mass_i a_i. */
typedef struct nova {
    fl_fedavg_server s; /* acc: Σ weight·Δ/a; mass: Σ mass over clients with a > 0 */
    double tau_mass;    /* Σ mass·a */
} nova;

enum { NOVA_NORM_BYTES = 9 }; /* a_i as a msgpack float64: 0xcb and 8 bytes */

static void *nova_new(const fl_env *env, sim_err *err)
{
    (void)err;
    nova *s = sim_xcalloc(1, sizeof *s);
    fl_fedavg_init(&s->s, env);
    return s;
}

/* ‖a‖₁ of τ momentum-ρ steps from a zero buffer (the header's derivation). */
static double nova_norm(int64_t tau, double rho)
{
    double c = 0, a = 0;
    for (int64_t t = 0; t < tau; t++) {
        c = rho * c + 1;
        a += c;
    }
    return a;
}

static int nova_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                      sim_err *err)
{
    int rc = fl_fedavg_train(env, job, w, res, 0, err);
    if (rc || env->cost_only) {
        res->up_bytes += NOVA_NORM_BYTES;
        return rc;
    }
    int n = env->part->n[job->client];
    msgpack_packer pk;
    msgpack_packer_init(&pk, &res->up, msgpack_sbuffer_write);
    msgpack_pack_double(&pk, nova_norm(n > 0 ? fl_job_steps(env, n) : 0, env->cfg->momentum));
    res->up_bytes = res->up.size;
    return SIM_OK;
}

/* up = [Δ as a parameter message][a as float64]; nothing is added unless both are valid. */
static int nova_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                       double mass, sim_err *err)
{
    nova *s = p;
    (void)client;
    size_t end = 0;
    int rc = nn_msgpack_check(up, len, 0, &end, NULL, "up message", err);
    if (!rc) rc = fl_up_unpack(s->s.env, s->s.scratch, up, end, err);
    if (rc) return rc;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = end;
    int ok = end < len && !nn_msgpack_next(&u, up, len, &off, NULL, NULL) &&
             u.data.type == MSGPACK_OBJECT_FLOAT64 && off == len;
    double a = ok ? u.data.via.f64 : 0;
    msgpack_unpacked_destroy(&u);
    if (!ok)
        return sim_fail(
                err, SIM_EFORMAT, "up message", 0, 0,
                "the model change should be followed by a_i, one float64, and nothing more");
    /* τ >= 1 steps give a_i >= 1 (its first term is 1); τ = 0 gives 0 */
    if (!(a == 0 || (a >= 1 && isfinite(a))))
        return sim_fail(err, SIM_EFORMAT, "up message", 0, 0,
                        "a_i = %g is neither 0 nor in [1, inf)", a);
    if (a == 0) return SIM_OK; /* no steps: no share (header) */
    size_t nf = s->s.env->arch->layout.n_floats;
    double c = weight / a;
    for (size_t j = 0; j < nf; j++)
        s->s.acc[j] += c * (double)s->s.scratch[j];
    s->s.mass += mass;
    s->tau_mass += mass * a;
    return SIM_OK;
}

static void nova_aggregate(void *p)
{
    nova *s = p;
    size_t nf = s->s.env->arch->layout.n_floats;
    if (s->s.mass > 0) {
        double step = s->s.env->cfg->server_lr * (s->tau_mass / s->s.mass) / s->s.mass;
        for (size_t j = 0; j < nf; j++)
            s->s.global[j] += (float)(step * s->s.acc[j]);
    }
    memset(s->s.acc, 0, nf * sizeof(double));
    s->s.mass = 0;
    s->tau_mass = 0;
    s->s.version++;
}

/* [FedAvg's [x, Σ weight·Δ/a, M], Σ mass·a] */
static void nova_save(void *p, msgpack_packer *pk)
{
    nova *s = p;
    msgpack_pack_array(pk, 2);
    fl_fedavg_save(&s->s, pk);
    msgpack_pack_double(pk, s->tau_mass);
}

static int nova_load(void *p, const msgpack_object *o, sim_err *err)
{
    nova *s = p;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2 ||
        o->via.array.ptr[1].type != MSGPACK_OBJECT_FLOAT64)
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0, "server state does not fit fednova");
    int rc = fl_fedavg_load(&s->s, &o->via.array.ptr[0], err);
    if (!rc) s->tau_mass = o->via.array.ptr[1].via.f64;
    return rc;
}

const fl_algo fl_fednova = {
        .version = FL_ALGO_VERSION,
        .name = "fednova",
        .summary = "FedNova: client updates normalized by their local steps (momentum-aware), "
                   "rescaled by the mean",
        .flags = FL_HAS_GLOBAL | FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST,
        .server_new = nova_new,
        .server_free = fl_fedavg_free,
        .job_down = fl_fedavg_down,
        .client_train = nova_train,
        .server_absorb = nova_absorb,
        .server_aggregate = nova_aggregate,
        .eval_params = fl_fedavg_eval,
        .server_save = nova_save,
        .server_load = nova_load,
};
