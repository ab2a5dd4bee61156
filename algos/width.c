/* algos/width.c -- the width-scaling family: HeteroFL (Diao et al., ICLR 2021) trains each client
 * on the first ⌈p·C⌉ channels of every hidden layer; FjORD (Horváth et al., NeurIPS 2021) draws a
 * new width for every job (ordered dropout); FedRolex (Alam et al., NeurIPS 2022) trains a window
 * of ⌈p·C⌉ channels that rolls by one channel per round (start at round mod C), so every channel
 * gets trained by the weak clients too. The output layer and the input stay full. A client's
 * width is either one for all (width.p; FjORD: max) or follows its capacity r_i: the largest grid
 * width p_i with p_i² ≤ r_i, since a p-wide model costs about p² of the full one.
 *
 * FjORD (ordered dropout, as spec 004's baseline table has it: kd on, dp = 1/16) receives and
 * sends the sub-model of its widest width p_i, and every local step also draws a nested width p:
 * a grid width below p_i, as the released code of Pa3dFL's Table 1 draws it (p_i itself when it
 * is the narrowest; with one width for all, uniform in [min, max]). With `width.kd`
 * (the default) the step trains the widest model on the labels and the p-wide one on the widest
 * one's softened outputs (self-distillation: loss CE(full) + CE(sub, softmax(full)), gradients
 * summed, one SGD step); without, it trains the p-wide model alone. Each step's FLOPs are those
 * of the widths it ran.
 *
 * HeteroFL's Scaler (`width.scaler`, off unless asked for): a p-wide sub-model multiplies each
 * hidden layer's conv/linear output by 1/p, so a narrow client's sums over fewer channels keep
 * the full model's scale; it applies when the sub-model trains and when it is evaluated at width
 * p (HeteroFL's code leaves it out at evaluation, where its static batch norm re-normalizes; these
 * models have no normalization to do that). HeteroFL's code has it on, always with that batch
 * norm; without one the 1/p gains compound over the layers (×16 per layer at p = 1/16) and
 * training breaks: width-fmnist's Hetero clients, HeteroFL at round 10: 43% global and 10%
 * personalized accuracy with it, 73% and 72% without. So it stays an option.
 *
 * What a client really does is the narrowed model: the down message is the global model's
 * sub-model at the job's width, the client trains it (the kernels run the smaller GEMMs, so its
 * FLOPs and time fall roughly with p²), and the up message is the change of those parameters only.
 * Both messages are sub-model messages (submodel.h: the kept units and the live values). The
 * server averages every global parameter over the clients whose sub-model holds it (HeteroFL's
 * rule), weighted as the engine says (sample count, or 1 with `weighting: uniform`); a parameter
 * nobody trained stays as it was.
 *
 * Under `compression:` a message's "data" is the compressed message of the same live values
 * (algos/compress.c, the sub-model a slice of the layout), so its length follows the width. Error
 * feedback's residual is kept over the whole model (full-model coordinates): a job adds it to
 * the live values it sends and leaves the rest of it as it was. FedRolex's window moves every
 * round (a client's width stays the same from job to job), so what a client's upload left out of
 * a channel its next window drops waits, whole, for a job whose window holds it again.
 *
 * Widths are a pure function of (seed, client, round), so a cost-only job knows its size without
 * a message. Personalized evaluation runs each client at its own width (FjORD: at max); the
 * global model is evaluated at width.eval. FedRolex evaluates the windows of the latest round
 * sent: that round's clients trained them together, nested at one start, while a fixed window
 * (channel 0 on) was last trained as a whole up to C rounds before: width-fmnist's Hetero run
 * at round 30, mean personalized accuracy 80.5% against 73.0% with the windows at channel 0,
 * bottom decile 78.3% against 45.0%.
 */
#include "algos/width.h"

#include "algos/submodel.h"
#include "nn/ops.h"
#include "nn/pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { HETEROFL, FJORD, FEDROLEX };

/* The family's settings (`algorithm.width:`). With by = fixed, HeteroFL and FedRolex train every
 * client at width p and FjORD draws a width uniformly in [min, max] for every job (ordered
 * dropout). With by = capacity, client i's width is the largest p_i on the grid with p_i² ≤ r_i
 * (its capacity, fl_env.capacity), and FjORD draws among the grid widths up to p_i. The grid:
 * multiples of step (FjORD, FedRolex), or step·2^j halvings from 1 (HeteroFL); step is also the
 * narrowest width. eval is the width of the global model evaluated. */
typedef struct width_config {
    int by_capacity, halving;
    double step, p, min, max;
    int kd;     /* FjORD: self-distil the nested width from the widest (else train it alone) */
    int scaler; /* HeteroFL's Scaler: a p-wide sub-model's hidden outputs ×1/p, in training and
                   evaluation (nn_model's narrow_scale) */
    double eval;
} width_config;

static const char *const BY[] = {"fixed", "capacity", NULL};
static const char *const GRIDS[] = {"step", "halving", NULL};

/* HeteroFL's grid halves (1, 1/2, … 1/16, its code's levels); FjORD's and FedRolex's go in steps
 * of 1/16 (theirs). */
static void grid_default(const sim_key_ctx *ctx, char *buf, size_t n)
{
    snprintf(buf, n, "%s", GRIDS[!strcmp(ctx->algorithm, "heterofl")]);
}

/* the global model: full with by = capacity, else the width trained (FjORD: max) */
static void eval_default(const sim_key_ctx *ctx, char *buf, size_t n)
{
    const width_config *c = ctx->config;
    snprintf(buf, n, "%.17g",
             c->by_capacity                     ? 1
             : !strcmp(ctx->algorithm, "fjord") ? c->max
                                                : c->p);
}

static int width_check(void *block, const sim_yaml *map, const sim_key_ctx *ctx, sim_err *err)
{
    const width_config *c = block;
    if (c->scaler && !strcmp(ctx->algorithm, "fjord")) /* its nested widths change within a step */
        return sim_yaml_fail(sim_yaml_get(map, "scaler"), err,
                             "width: scaler is for HeteroFL and FedRolex, not FjORD");
    if (c->min > c->max)
        return sim_yaml_fail(sim_yaml_get(map, "min"), err, "width: min %g is above max %g", c->min,
                             c->max);
    return SIM_OK;
}

#define K(field) .offset = offsetof(width_config, field)
static const sim_key KEYS[] = {
        {"by", SIM_KEY_CHOICE, K(by_capacity), .dflt = "fixed", .words = BY,
         .doc = "`fixed`: the widths below; `capacity`: client i trains the largest grid width p_i "
                "with p_i² ≤ r_i, its `devices.capacity` (a p-wide model costs about p² of the "
                "full one); FjORD sends the p_i-wide sub-model and draws each step's nested width "
                "among the grid widths below p_i (as the released code of Pa3dFL's Table 1 does; "
                "the narrowest width trains alone)"},
        {"grid", SIM_KEY_CHOICE, K(halving), .dflt = "halving (HeteroFL), else step",
         .dflt_fn = grid_default, .words = GRIDS,
         .doc = "the widths `by: capacity` chooses from: multiples of `step`, or 1, 1/2, 1/4, … "
                "down to `step`"},
        {"step", SIM_KEY_DOUBLE, K(step), .dflt = "0.0625", .lo = 1.0 / 1024, .hi = 1,
         .doc = "the grid's step, and its narrowest width"},
        {"p", SIM_KEY_DOUBLE, K(p), .dflt = "0.5", .lo = 1e-6, .hi = 1,
         .doc = "`by: fixed`: HeteroFL's and FedRolex's width for every client"},
        {"min", SIM_KEY_DOUBLE, K(min), .dflt = "0.4", .lo = 1e-6, .hi = 1,
         .doc = "`by: fixed`: FjORD's clients send the `max`-wide sub-model, and each step's "
                "nested width is uniform in [`min`, `max`]"},
        {"max", SIM_KEY_DOUBLE, K(max), .dflt = "0.6", .lo = 1e-6, .hi = 1,
         .doc = "`by: fixed`: the width of the sub-model FjORD's clients send, and the widest "
                "nested width (see `min`)"},
        {"kd", SIM_KEY_BOOL, K(kd), .dflt = "true",
         .doc = "FjORD: each step trains the widest model on the labels and the nested width on "
                "its softened outputs (self-distillation, one SGD step on the summed gradients; "
                "spec 004's baseline); `false`: each step trains the nested width alone"},
        {"scaler", SIM_KEY_BOOL, K(scaler), .dflt = "false",
         .doc = "HeteroFL's Scaler (its code, spec 004): a p-wide sub-model multiplies every "
                "hidden layer's conv/linear output by 1/p, so its thinner sums keep the full "
                "model's scale; in training and in evaluation at width p (HeteroFL's code skips it "
                "at evaluation, where its static batch norm re-normalizes; these models have no "
                "normalization to do that). Off by default: without normalization the 1/p gains "
                "compound over the layers and training breaks (width-fmnist Hetero, HeteroFL at "
                "round 10: 43% global / 10% personalized accuracy with it, 73% / 72% without). "
                "HeteroFL and FedRolex only"},
        {"eval", SIM_KEY_DOUBLE, K(eval), .dflt = "1 by capacity, else p (FjORD: max)",
         .dflt_fn = eval_default, .lo = 1e-6, .hi = 1,
         .doc = "width of the global model when evaluated (clients are evaluated at their own "
                "width)"},
        {0},
};
#undef K

const fl_section fl_width_section = {
        .name = "width",
        .keys = KEYS,
        .size = sizeof(width_config),
        .check = width_check,
        .doc = "HeteroFL, FjORD, FedRolex, and `by: capacity` for Local; checked for the others. A "
               "width "
               "p keeps ⌈p·C⌉ channels of every hidden layer (the first ones; FedRolex: from "
               "channel "
               "round mod C, wrapping, and its clients are evaluated on the windows of the latest "
               "round); "
               "messages carry only that sub-model, and the server averages each parameter over "
               "the "
               "clients that hold it. The memory check (`devices`) uses the model a client really "
               "trains.",
};

/* FjORD's width draws; index: client << 32 | round */
enum { RNG_WIDTH = 8 };
static const fl_stream STREAMS[] = {{"fjord.width", RNG_WIDTH}, {0}};

/* The width section as read (the family's own; another algorithm's only when present) */
static const width_config *conf(const fl_env *env)
{
    return fl_config_block(env->cfg, &fl_width_section);
}

/* The width a capacity r affords on w's grid: the largest grid width p with p² ≤ r (a p-wide
 * model costs about p² of the full one), and the narrowest, step, when none does. */
static double width_for(const width_config *w, double r)
{
    if (w->halving) {
        double p = 1;
        while (p * p > r && p / 2 >= w->step * (1 - 1e-9))
            p /= 2;
        return p;
    }
    int top = (int)floor(1 / w->step + 1e-9), k = (int)floor(sqrt(r) / w->step + 1e-9);
    if (k > top) k = top;
    while (k < top && ((k + 1) * w->step) * ((k + 1) * w->step) <= r)
        k++;
    while (k > 1 && (k * w->step) * (k * w->step) > r)
        k--;
    return k < 1 ? w->step : k == top ? 1.0 : k * w->step;
}

double fl_width_for(const fl_env *env, double r)
{
    return width_for(conf(env), r);
}

static double capacity_width(const fl_env *env, int32_t client)
{
    return width_for(conf(env), env->capacity ? env->capacity[client] : 1);
}

double fl_width_by_capacity(const fl_env *env, int32_t client)
{
    const width_config *w = conf(env);
    return w && w->by_capacity ? capacity_width(env, client) : 1;
}

typedef struct width_server {
    const fl_env *env; /* borrowed */
    int kind;
    float *global;  /* n_floats */
    fl_sub_acc acc; /* the round's changes, per parameter */
    float *scratch; /* n_floats: an unpacked message */
    nn_model m;     /* its live map tells which parameters a width holds */
    int32_t round;  /* the latest round a model was sent for (FedRolex's evaluation window) */
} width_server;

/* The widest model client may train: its capacity's grid width, or the scenario's. */
static double top_width(const fl_env *env, int kind, int32_t client)
{
    const width_config *w = conf(env);
    if (w->by_capacity) return capacity_width(env, client);
    return kind == FJORD ? w->max : w->p;
}

double fl_fjord_draw(const fl_env *env, double top, sim_rng *r)
{
    const width_config *w = conf(env);
    double u = sim_rng_uniform(r);
    if (!w->by_capacity) return w->min + (w->max - w->min) * u;
    if (w->halving) { /* the halvings of top down to step */
        int levels = 0;
        while (top / (2 << levels) >= w->step * (1 - 1e-9))
            levels++;
        return levels ? top / (2 << (int)(u * levels)) : top;
    }
    int k = (int)floor(top / w->step + 1e-9) - 1; /* the multiples of step below top */
    return k > 0 ? w->step * (1 + (int)(u * k)) : top;
}

/* FedRolex's window starts at channel round mod C of every layer; the others at channel 0. */
static void narrow(nn_model *m, int kind, double width, int32_t round)
{
    nn_model_set_width(m, width, kind == FEDROLEX ? round : 0);
}

/* The widest model a client trains (fl_algo.client_width). */
static double heterofl_width(const fl_env *env, int32_t client)
{
    return top_width(env, HETEROFL, client);
}

static double fjord_width(const fl_env *env, int32_t client)
{
    return top_width(env, FJORD, client);
}

/* A message: the sub-model of m as narrowed now, with values from v (submodel.h); with comp,
 * only its "units" and the "data" key, whose value (the compressed values) the caller appends. */
static void pack_sub(msgpack_sbuffer *sb, const nn_model *m, const float *v, int comp)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    if (comp) {
        fl_sub_pack_units(&pk, m);
        nn_pack_str(&pk, "data");
    } else {
        fl_sub_pack(&pk, m, v);
    }
}

/* The length of a message of n live values, compressed by c (NULL: dense). */
static size_t sub_bytes(const nn_arch *a, const nn_comp *c, size_t n)
{
    return 1 + (c ? fl_sub_head_bytes(a) + nn_comp_bytes(c, n) : fl_sub_bytes(a, n)); /* + map */
}

/* Narrow m by a message and read its values into v's live entries, compressed by c or dense. */
static int unpack_sub(const fl_env *env, const nn_comp *c, nn_model *m, float *v, const void *buf,
                      size_t len, const char *what, sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = SIM_OK;
    if (!buf || nn_msgpack_next(&u, buf, len, &off, NULL, NULL)) {
        rc = sim_fail(err, SIM_EFORMAT, what, 0, 0, "not a msgpack map");
    } else if (c) {
        const msgpack_object *data = fl_sub_unpack_units(m, &u.data, what, err);
        fl_slice sl = {m->live, NULL};
        rc = data ? fl_comp_decode(env, v, &sl, data, what, err) : SIM_EFORMAT;
    } else {
        rc = fl_sub_unpack(m, v, &u.data, what, err);
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

static void *server_new(const fl_env *env, int kind)
{
    width_server *s = sim_xcalloc(1, sizeof *s);
    size_t nf = env->arch->layout.n_floats;
    s->env = env;
    s->kind = kind;
    s->global = sim_xcalloc(nf, sizeof(float));
    s->scratch = sim_xcalloc(nf, sizeof(float));
    fl_sub_acc_init(&s->acc, nf);
    nn_model_init(&s->m, env->arch, 1);
    fl_init_params(&s->m, env);
    memcpy(s->global, s->m.params, nf * sizeof(float));
    return s;
}

static void *heterofl_new(const fl_env *env, sim_err *err)
{
    (void)err;
    return server_new(env, HETEROFL);
}

static void *fjord_new(const fl_env *env, sim_err *err)
{
    (void)err;
    return server_new(env, FJORD);
}

static void *fedrolex_new(const fl_env *env, sim_err *err)
{
    (void)err;
    return server_new(env, FEDROLEX);
}

static void width_free(void *p)
{
    width_server *s = p;
    if (!s) return;
    nn_model_destroy(&s->m);
    free(s->global);
    free(s->scratch);
    fl_sub_acc_free(&s->acc);
    free(s);
}

static size_t width_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    width_server *s = p;
    const nn_comp *c = fl_comp_down(s->env);
    narrow(&s->m, s->kind, top_width(s->env, s->kind, client), round);
    if (!out) return sub_bytes(s->env->arch, c, nn_model_live_count(&s->m));
    if (round > s->round) s->round = round;
    size_t before = out->size;
    pack_sub(out, &s->m, s->global, c != NULL);
    fl_slice sl = {s->m.live, NULL};
    if (c) fl_down_encode(s->env, s->global, &sl, client, round, 0, out);
    return out->size - before;
}

/* The work of one training step of m as narrowed now, at batch B. */
static void add_step_cost(nn_cost *to, const nn_model *m, int B)
{
    nn_cost c;
    nn_model_step_cost(m, B, &c);
    nn_cost_add(to, &c, 1);
}

/* FjORD's local steps on m (at width top): the draws come from the job's own stream, so cost-only
 * jobs run the same widths without training. */
static void fjord_steps(const fl_env *env, const fl_job *job, nn_model *m, double top,
                        fl_result *res)
{
    const fl_config *cfg = env->cfg;
    int kd = conf(env)->kd, K = m->arch.classes;
    sim_rng r;
    sim_rng_seed(&r, env->seed, RNG_WIDTH,
                 (uint64_t)(uint32_t)job->client << 32 | (uint32_t)job->round);
    if (env->cost_only) {
        int n = env->part->n[job->client], B = cfg->batch_size;
        if (n <= 0) return;
        int64_t steps = fl_job_steps(env, n);
        for (int64_t st = 0; st < steps; st++) {
            int nb = fl_job_batch(st, n, B);
            double p = fl_fjord_draw(env, top, &r);
            if (kd) add_step_cost(&res->cost, m, nb);
            if (!kd || p < top) {
                nn_model_nest_width(m, p);
                add_step_cost(&res->cost, m, nb);
                nn_model_nest_width(m, top);
            }
            res->cost.samples += nb;
        }
        fl_count_steps(res, steps);
        return;
    }
    fl_loop L;
    if (!fl_loop_start(&L, env, job, m)) return;
    nn_sgd opt = {(float)L.lr, (float)cfg->momentum, (float)cfg->weight_decay, (float)cfg->clip};
    memset(m->mom, 0, sizeof(float) * m->arch.layout.n_floats); /* momentum is per job */
    float *q = sim_xmalloc(sizeof(float) * (size_t)cfg->batch_size * K);
    for (int nb; (nb = fl_loop_next(&L));) {
        double p = fl_fjord_draw(env, top, &r);
        nn_model_zero_grad(m);
        if (kd) {
            L.loss += nn_model_forward(m, L.b.x, L.b.y, nb, 1);
            nn_model_backward(m);
            if (p < top) {
                nn_softmax(q, m->logits, nb, K);
                nn_model_nest_width(m, p);
                nn_model_forward_soft(m, L.b.x, q, nb);
                nn_model_backward(m);
                nn_model_nest_width(m, top);
            }
        } else {
            nn_model_nest_width(m, p);
            L.loss += nn_model_forward(m, L.b.x, L.b.y, nb, 1);
            nn_model_backward(m);
            nn_model_nest_width(m, top);
        }
        nn_model_sgd_step(m, &opt);
    }
    free(q);
    fl_loop_finish(&L, res);
}

/* A job's local steps: FjORD's nested widths, or plain SGD at the job's width. */
static void local_steps(const fl_env *env, const fl_job *job, nn_model *m, int kind, double top,
                        fl_result *res)
{
    if (kind == FJORD)
        fjord_steps(env, job, m, top, res);
    else
        fl_local_sgd(env, job, m, 0, NULL, res);
}

/* The message carries the sub-model's units, so a worker needs to know nothing of the kind but
 * in cost-only mode, where there is no message. */
static int width_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res, int kind,
                       sim_err *err)
{
    nn_model *m = fl_worker_model(w, env);
    size_t nf = env->arch->layout.n_floats;
    const nn_comp *cu = fl_comp_up(env);
    double top = top_width(env, kind, job->client);
    if (env->cost_only) {
        narrow(m, kind, top, job->round);
        local_steps(env, job, m, kind, top, res);
        res->up_bytes = sub_bytes(env->arch, cu, nn_model_live_count(m));
        return SIM_OK;
    }
    int rc = unpack_sub(env, fl_comp_down(env), m, m->params, job->down, job->down_len,
                        "down message", err);
    if (rc) return rc;
    memcpy(w->ref, m->params, nf * sizeof(float));
    if (conf(env)->scaler) m->narrow_scale = (float)(1 / top);
    local_steps(env, job, m, kind, top, res);
    m->narrow_scale = 1.0f;         /* the worker's model serves other jobs and evaluations */
    for (size_t j = 0; j < nf; j++) /* the upload is the change of the live parameters */
        w->ref[j] = m->params[j] - w->ref[j];
    pack_sub(&res->up, m, w->ref, cu != NULL);
    fl_slice sl = {m->live, NULL}; /* the residual over the whole model */
    if (cu) rc = fl_up_encode(env, job, w->ref, &sl, 0, res, err);
    res->up_bytes = res->up.size;
    return rc;
}

static int heterofl_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                          sim_err *err)
{
    return width_train(env, job, w, res, HETEROFL, err);
}

static int fjord_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                       sim_err *err)
{
    return width_train(env, job, w, res, FJORD, err);
}

static int fedrolex_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                          sim_err *err)
{
    return width_train(env, job, w, res, FEDROLEX, err);
}

static int width_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                        double mass, sim_err *err)
{
    width_server *s = p;
    (void)client;
    int rc = unpack_sub(s->env, fl_comp_up(s->env), &s->m, s->scratch, up, len, "up message", err);
    if (!rc) fl_sub_acc_add(&s->acc, &s->m, s->scratch, weight, mass);
    return rc;
}

static void width_aggregate(void *p)
{
    width_server *s = p;
    fl_sub_acc_apply(&s->acc, s->global, s->env->cfg->server_lr);
}

static double width_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    width_server *s = p;
    (void)priv, (void)priv_len;
    double at = client < 0 ? conf(s->env)->eval : top_width(s->env, s->kind, client);
    memcpy(m->params, s->global, s->env->arch->layout.n_floats * sizeof(float));
    narrow(m, s->kind, at, s->round);
    m->narrow_scale = conf(s->env)->scaler ? (float)(1 / at) : 1.0f;
    return nn_model_unit_density(m);
}

/* [global floats, [acc, mass], round], raw native-order bytes (read back by the same build). */
static void width_save(void *p, msgpack_packer *pk)
{
    width_server *s = p;
    size_t nf = s->env->arch->layout.n_floats;
    msgpack_pack_array(pk, 3);
    msgpack_pack_bin(pk, nf * sizeof(float));
    msgpack_pack_bin_body(pk, s->global, nf * sizeof(float));
    fl_sub_acc_save(&s->acc, pk);
    msgpack_pack_int32(pk, s->round);
}

static int width_load(void *p, const msgpack_object *o, sim_err *err)
{
    width_server *s = p;
    size_t nf = s->env->arch->layout.n_floats;
    const msgpack_object *a =
            o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 3 ? o->via.array.ptr : NULL;
    if (!a || a[0].type != MSGPACK_OBJECT_BIN || a[0].via.bin.size != nf * sizeof(float) ||
        fl_sub_acc_load(&s->acc, &a[1]) || a[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        a[2].via.u64 > INT32_MAX)
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "server state does not fit %s with a %zu-parameter model",
                        s->env->cfg->name, nf);
    memcpy(s->global, a[0].via.bin.ptr, nf * sizeof(float));
    s->round = (int32_t)a[2].via.u64;
    return SIM_OK;
}

const fl_algo fl_heterofl = {
        .version = FL_ALGO_VERSION,
        .name = "heterofl",
        .summary = "HeteroFL: each client trains its width's sub-model (first channels)",
        .doc = "every client trains its width's sub-model: the first channels",
        .flags = FL_HAS_GLOBAL | FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST,
        .section = &fl_width_section,
        .server_new = heterofl_new,
        .server_free = width_free,
        .job_down = width_down,
        .client_train = heterofl_train,
        .server_absorb = width_absorb,
        .server_aggregate = width_aggregate,
        .eval_params = width_eval,
        .server_save = width_save,
        .server_load = width_load,
        .client_width = heterofl_width,
};
const fl_algo fl_fjord = {
        .version = FL_ALGO_VERSION,
        .name = "fjord",
        .summary = "FjORD: ordered dropout, a nested width every step, self-distilled",
        .doc = "ordered dropout: the client's widest sub-model travels, and every local step also "
               "trains a nested width, self-distilled from the widest",
        .flags = FL_HAS_GLOBAL | FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST,
        .section = &fl_width_section,
        .streams = STREAMS,
        .server_new = fjord_new,
        .server_free = width_free,
        .job_down = width_down,
        .client_train = fjord_train,
        .server_absorb = width_absorb,
        .server_aggregate = width_aggregate,
        .eval_params = width_eval,
        .server_save = width_save,
        .server_load = width_load,
        .client_width = fjord_width,
};
const fl_algo fl_fedrolex = {
        .version = FL_ALGO_VERSION,
        .name = "fedrolex",
        .summary = "FedRolex: a window of its width's channels, rolling every round",
        .doc = "a window of its width's channels that rolls by one channel per round",
        .flags = FL_HAS_GLOBAL | FL_COMPRESS_UP | FL_COMPRESS_DOWN | FL_FIXED_COST,
        .section = &fl_width_section,
        .server_new = fedrolex_new,
        .server_free = width_free,
        .job_down = width_down,
        .client_train = fedrolex_train,
        .server_absorb = width_absorb,
        .server_aggregate = width_aggregate,
        .eval_params = width_eval,
        .server_save = width_save,
        .server_load = width_load,
        .client_width = heterofl_width,
};
