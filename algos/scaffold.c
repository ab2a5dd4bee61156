/* algos/scaffold.c -- SCAFFOLD (Karimireddy et al., ICML 2020, "SCAFFOLD: Stochastic Controlled
 * Averaging for Federated Learning"), Algorithm 1 with option II: FedAvg (algos/fedavg.h) whose
 * clients correct their local steps for drift by control variates.
 *
 * The server holds the global model x and a control variate c (zero at the start); client i holds
 * its own c_i (zero before its first job) in its private state. A job receives (x, c), sets y = x
 * and takes its K local steps (the job's steps) with its lr η (decayed by round as every job's),
 *     y ← y − η (g_i(y) − c_i + c),
 * the correction c − c_i added to the minibatch gradient before the SGD step (fl_local_sgd_with's
 * hook); then, option II,
 *     c_i⁺ = c_i − c + (x − y) / (K η),
 * keeps c_i⁺ and uploads Δy = y − x and Δc = c_i⁺ − c_i. The server, over the set S of updates
 * an aggregation absorbs,
 *     x ← x + η_g · Σ_S weight_i Δy_i / Σ_S mass_i     (FedAvg's step, η_g = algorithm.server_lr)
 *     c ← c + (1/N) Σ_S Δc_i                            (N = every client of the federation),
 * so c stays the mean of the c_i of all N clients. Each message is two parameter messages
 * (nn/pack.h) back to back, down [x][c] and up [Δy][Δc]: twice FedAvg's bytes both ways. Under
 * `compression:` each of the two is compressed on its own (algos/compress.c: part 0 and 1), with
 * a residual of its own under error feedback; a compressed Δc leaves c off the mean of the c_i
 * by what it left out until error feedback sends it.
 *
 * Choices where the paper is silent:
 * - Async staleness weights scale Δy only, as FedAvg's (through weight); Δc is added as it is.
 *   The client keeps its c_i⁺ whole whatever the age of the c it was computed with, so scaling Δc
 *   would leave c off the mean of the c_i.
 * - Plain SGD (FL_PLAIN_SGD: momentum and weight_decay refused). Option II reads the mean
 *   corrected gradient off (x − y)/(Kη), which holds only when each step moves y by exactly η times
 *   it; heavy-ball momentum makes it a mean of momentum buffers instead (≈ g/(1 − β) late in a job,
 *   less early), a bias depending on K and β that the correction would then carry. (Weight decay,
 *   a gradient term, would fit; the flag refuses both, and the paper has neither.) A gradient
 *   clip (algorithm.clip) clips the corrected gradient, the step's direction, and c_i⁺ then
 *   follows the clipped steps. persistent_momentum does not apply.
 * - The control variates live on the trainable parameters (the model's live runs); elsewhere
 *   (batch norm's running statistics) they stay zero, and Δy carries those as FedAvg's does.
 * - A job that takes no step (a client without samples, or an lr decayed to 0) uploads Δy = 0 and
 *   Δc = 0 and keeps c_i: option II's division by Kη is not made.
 * - x and c are float, as every model the server sends; the sums are double, in client-id order.
 * - The engine commits a job's private state when its training ends: a job whose upload is then
 *   lost (a client going offline, a sync round closing without it) keeps its c_i⁺ while its Δc
 *   never reaches c, which then differs from the mean of the c_i by that Δc/N. The paper assumes
 *   every upload arrives.
 */
#include "algos/fedavg.h"

#include "nn/pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct scaffold {
    fl_fedavg_server f; /* x, Σ weight·Δy and Σ mass: FedAvg's */
    float *c;           /* n_floats: the server's control variate */
    float *dc;          /* n_floats: an unpacked Δc */
    double *acc_c;      /* n_floats: Σ Δc since the last aggregation */
} scaffold;

static void *scaffold_new(const fl_env *env, sim_err *err)
{
    (void)err;
    size_t nf = env->arch->layout.n_floats;
    scaffold *s = sim_xcalloc(1, sizeof *s);
    fl_fedavg_init(&s->f, env);
    s->c = sim_xcalloc(nf, sizeof(float));
    s->dc = sim_xcalloc(nf, sizeof(float));
    s->acc_c = sim_xcalloc(nf, sizeof(double));
    return s;
}

static void scaffold_free(void *p)
{
    scaffold *s = p;
    if (!s) return;
    fl_fedavg_destroy(&s->f);
    free(s->c);
    free(s->dc);
    free(s->acc_c);
    free(s);
}

/* [x][c] */
static size_t scaffold_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    scaffold *s = p;
    if (!out) return 2 * s->f.msg_bytes;
    size_t before = out->size;
    fl_fedavg_down(&s->f, client, round, out);
    fl_down_pack(s->f.env, s->c, client, round, 1, out);
    return out->size - before;
}

/* Where the first of a message's two parameter messages ends (*mid), checking that the second
 * one fills the rest: the framing alone, the parameters are read by fl_down_unpack/fl_up_unpack. */
static int split_pair(const void *buf, size_t len, size_t *mid, const char *what, sim_err *err)
{
    size_t end;
    int rc = nn_msgpack_check(buf, len, 0, mid, NULL, what, err);
    if (rc) return rc;
    if (*mid == len)
        return sim_fail(err, SIM_EFORMAT, what, 0, 0,
                        "one parameter message where SCAFFOLD sends two (model, control variate)");
    rc = nn_msgpack_check((const char *)buf + *mid, len - *mid, *mid, &end, NULL, what, err);
    if (!rc && *mid + end != len)
        rc = sim_fail(err, SIM_EFORMAT, what, 0, 0, "%zu bytes after the control variate",
                      len - *mid - end);
    return rc;
}

/* The step's correction c − c_i, added to the minibatch gradient of every live parameter. */
static void add_correction(nn_model *m, void *ctx)
{
    const float *corr = ctx;
    for (size_t k = 0; k < m->n_runs; k++) {
        size_t off = m->runs[k][0];
        for (uint32_t j = 0; j < m->runs[k][1]; j++)
            m->grads[off + j] += corr[off + j];
    }
}

static int scaffold_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                          sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    size_t nf = env->arch->layout.n_floats, mid = 0;
    if (env->cost_only) {
        fl_local_sgd_with(env, job, m, 0, add_correction, NULL, res);
        if (!w->msg_bytes) w->msg_bytes = fl_dense_msg_bytes(env->arch);
        int packed = env->comp_up && env->comp_up->scheme != NN_COMP_NONE;
        res->up_bytes = 2 * (packed ? fl_up_bytes(env) : w->msg_bytes);
        return SIM_OK;
    }
    float *c = sim_xcalloc(3 * nf, sizeof(float)), *ci = c + nf, *corr = ci + nf;
    int rc = split_pair(job->down, job->down_len, &mid, "down message", err);
    if (!rc) rc = fl_down_unpack(env, m->params, job->down, mid, err);
    if (!rc) rc = fl_down_unpack(env, c, (const char *)job->down + mid, job->down_len - mid, err);
    if (!rc && job->priv) /* else c_i = 0: the client's first job */
        rc = nn_unpack_params(ci, env->arch, job->priv, job->priv_len, "private state", err);
    if (rc) {
        free(c);
        return rc;
    }
    memcpy(w->ref, m->params, nf * sizeof(float)); /* x */
    for (size_t j = 0; j < nf; j++)
        corr[j] = c[j] - ci[j];
    fl_local_sgd_with(env, job, m, 0, add_correction, corr, res);
    int n = env->part->n[job->client];
    int64_t K = n > 0 ? fl_job_steps(env, n) : 0;
    double lr = fl_job_lr(env, job);
    memset(corr, 0, nf * sizeof(float)); /* now Δc: zero where there is no control variate */
    if (K > 0 && lr > 0)
        for (size_t k = 0; k < m->n_runs; k++) {
            size_t off = m->runs[k][0];
            for (size_t j = off; j < off + m->runs[k][1]; j++) {
                /* option II: Δc = c_i⁺ − c_i = (x − y)/(Kη) − c */
                double d = ((double)w->ref[j] - m->params[j]) / ((double)K * lr) - c[j];
                corr[j] = (float)d;
                ci[j] = (float)(ci[j] + d);
            }
        }
    for (size_t j = 0; j < nf; j++) /* Δy = y − x, in place in ref */
        w->ref[j] = m->params[j] - w->ref[j];
    nn_pack_params(&res->priv, env->arch, ci); /* first: the residuals follow it */
    rc = fl_up_pack(env, job, w->ref, 0, res, err);
    if (!rc) rc = fl_up_pack(env, job, corr, 1, res, err);
    free(c);
    return rc;
}

/* Δy into FedAvg's sums (weight scales it, mass normalizes), Δc into its own sum as it is; a
 * malformed message changes neither. */
static int scaffold_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                           double mass, sim_err *err)
{
    scaffold *s = p;
    size_t mid, nf = s->f.env->arch->layout.n_floats;
    int rc = split_pair(up, len, &mid, "up message", err);
    if (!rc) rc = fl_up_unpack(s->f.env, s->dc, (const char *)up + mid, len - mid, err);
    if (!rc) rc = fl_fedavg_absorb(&s->f, client, up, mid, weight, mass, err);
    if (rc) return rc;
    for (size_t j = 0; j < nf; j++)
        s->acc_c[j] += (double)s->dc[j];
    return SIM_OK;
}

static void scaffold_aggregate(void *p)
{
    scaffold *s = p;
    size_t nf = s->f.env->arch->layout.n_floats;
    double n = s->f.env->part->n_clients; /* N, not |S|: c stays the mean over every client */
    fl_fedavg_aggregate(&s->f);
    for (size_t j = 0; j < nf; j++)
        s->c[j] += (float)(s->acc_c[j] / n);
    memset(s->acc_c, 0, nf * sizeof(double));
}

/* [FedAvg's [x, Σ weight·Δy, Σ mass], [c, Σ Δc, 0]] (c's sum has no mass: it is divided by N) */
static void scaffold_save(void *p, msgpack_packer *pk)
{
    scaffold *s = p;
    msgpack_pack_array(pk, 2);
    fl_fedavg_save(&s->f, pk);
    fl_save_sums(pk, s->c, s->acc_c, 0, s->f.env->arch->layout.n_floats);
}

static int scaffold_load(void *p, const msgpack_object *o, sim_err *err)
{
    scaffold *s = p;
    double none;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2)
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "server state does not fit scaffold (not [model, control variate])");
    const msgpack_object *a = o->via.array.ptr;
    int rc = fl_fedavg_load(&s->f, &a[0], err);
    if (!rc)
        rc = fl_load_sums(&a[1], s->c, s->acc_c, &none, s->f.env->arch->layout.n_floats,
                          s->f.env->cfg->name, err);
    return rc;
}

/* metrics.tsv's c_norm: ‖c‖₂, the size of the drift correction every client applies (c is saved
 * in checkpoints, so a resumed run writes the same rows) */
static double c_norm(const void *p)
{
    const scaffold *s = p;
    double sum = 0;
    for (size_t j = 0; j < s->f.env->arch->layout.n_floats; j++)
        sum += (double)s->c[j] * s->c[j];
    return sqrt(sum);
}

static const fl_column COLUMNS[] = {{"c_norm", FL_COL_G6, c_norm}, {0}};

const fl_algo fl_scaffold = {
        .version = FL_ALGO_VERSION,
        .name = "scaffold",
        .summary = "SCAFFOLD: FedAvg with control variates correcting client drift (option II)",
        .flags = FL_HAS_GLOBAL | FL_PLAIN_SGD | FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST,
        .server_new = scaffold_new,
        .server_free = scaffold_free,
        .job_down = scaffold_down,
        .client_train = scaffold_train,
        .server_absorb = scaffold_absorb,
        .server_aggregate = scaffold_aggregate,
        .eval_params = fl_fedavg_eval,
        .server_save = scaffold_save,
        .server_load = scaffold_load,
        .columns = COLUMNS,
};
