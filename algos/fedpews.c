/* algos/fedpews.c -- FedPeWS (Tastan et al., CPAL 2025; shared/specs/002-fedpews.md): a warmup of
 * the first W rounds in which every client learns a personal neuron mask and trains and sends only
 * that subnetwork, then plain FedAvg or FedProx (the base, as in fedavg.c) on the full model.
 *
 * Warmup step (Alg. 1), on one minibatch:
 *   Procedure I  (mask): draw m̃ ~ Bernoulli(σ(s)); run the dense model with each dropped unit's
 *     outgoing weights zeroed (= gating its activation after the ReLU), so a dropped unit's mask
 *     gradient ∂f/∂m̃_j = Σ G·W over those outgoing weights is still informative; then
 *     s_j −= η_s·(∂f/∂m̃_j − 2λ(σ(s_j) − θ_{g∖i,j}))·σ'(s_j)  (straight-through through the sample);
 *   Procedure II (weights): a fresh m̃; the subnetwork it keeps (a unit with its incoming and
 *     outgoing weights: the spec's AND rule) is trained as a narrowed model, so the kernels really
 *     do less work.
 * After the last step a fresh m̃ is drawn and the client uploads that subnetwork's change and θ_i.
 * FedPeWS-Fixed gives client k the k-th of N contiguous groups of every hidden layer instead.
 *
 * The server averages each parameter over the clients whose subnetwork holds it (uncovered ones
 * stay), takes a server step η_g, and sends each client the mean of the others' θ (θ_{g∖i}, the
 * diversity target). Each client's θ_i is its row in the engine's store (fl_rows: out of core for
 * large populations); the server keeps only the exact sum of all rows, so a download costs O(h)
 * for h hidden units whatever the number of clients. Messages are sub-model messages
 * (submodel.h): the warmup upload is the neuron bitmap plus the live values, so warmup rounds
 * really send less. Mask statistics of every warmup round go to masks.tsv.
 */
#include "algos/algo.h"
#include "algos/submodel.h"
#include "nn/pack.h"
#include "nn/train.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { FULL, LEARNED, FIXED };

/* FedPeWS's settings (`algorithm.pews:`; spec 002): a warmup of the first `warmup` rounds in
 * which clients train and send personal subnetworks, then the base algorithm. */
typedef struct pews_config {
    int prox;          /* base FedProx (mu from the algorithm map) instead of FedAvg */
    double tau;        /* the warmup as a share τ of the rounds */
    int fixed;         /* FedPeWS-Fixed: disjoint contiguous neuron groups, no mask learning */
    double lambda;     /* weight of the mask-diversity reward */
    double mask_lr;    /* η_s, plain SGD on the neuron scores */
    double score_init; /* s at the start (0: keep probability 0.5) */
    int theta_binary;  /* others' masks as their last binary masks instead of σ(s) */
    int warmup;        /* W = round(τ·rounds): warmup rounds */
} pews_config;

static const char *const BASES[] = {"fedavg", "fedprox", NULL};
static const char *const MODES[] = {"learned", "fixed", NULL};
static const char *const THETA[] = {"prob", "binary", NULL};

#define K(field) .offset = offsetof(pews_config, field)
static const sim_key KEYS[] = {
        {"base", SIM_KEY_CHOICE, K(prox), .dflt = "fedavg", .words = BASES,
         .doc = "`fedavg` or `fedprox` (with `algorithm.mu`), after the warmup"},
        {"warmup", SIM_KEY_DOUBLE, K(tau), .dflt = "0.125", .lo = 0, .hi = 1, .unit = "of rounds",
         .doc = "τ: the warmup is the first round(τ·rounds) rounds"},
        {"mode", SIM_KEY_CHOICE, K(fixed), .dflt = "learned", .words = MODES,
         .doc = "`learned` masks, or `fixed`: client k trains the k-th of N contiguous groups of "
                "every hidden layer (FedPeWS-Fixed)"},
        {"lambda", SIM_KEY_DOUBLE, K(lambda), .dflt = "1", .lo = 0, .hi = 1e6,
         .doc = "weight λ of the mask-diversity reward"},
        {"mask_lr", SIM_KEY_DOUBLE, K(mask_lr), .dflt = "0.1", .lo = 0, .hi = 1e6,
         .doc = "η_s, plain SGD on the scores"},
        {"score_init", SIM_KEY_DOUBLE, K(score_init), .dflt = "0", .lo = -100, .hi = 100,
         .doc = "initial scores (0: keep probability 0.5)"},
        {"theta", SIM_KEY_CHOICE, K(theta_binary), .dflt = "prob", .words = THETA,
         .doc = "the others' masks as their probabilities σ(s), or `binary`: their last binary "
                "masks"},
        {0},
};
#undef K

static int pews_check(void *block, const sim_yaml *map, const sim_key_ctx *ctx, sim_err *err)
{
    pews_config *c = block;
    (void)map, (void)err;
    c->warmup = (int)floor(c->tau * ctx->rounds + 0.5);
    return SIM_OK;
}

const fl_section fl_pews_section = {
        .name = "pews",
        .keys = KEYS,
        .size = sizeof(pews_config),
        .check = pews_check,
        .doc = "FedPeWS, spec 002; checked for the others. During the warmup each client draws "
               "neuron "
               "masks from its scores s (Bernoulli(σ(s))), alternately steps s (on the loss and "
               "the "
               "reward λ‖σ(s) − θ of the others‖²) and the weights of the subnetwork it kept, and "
               "uploads "
               "that subnetwork only; the server averages each parameter over the clients that "
               "hold it. "
               "Then the base algorithm runs on the full model. `masks.tsv` in the run folder has "
               "each "
               "warmup round's mask density per client, unit and parameter coverage, and mean "
               "pairwise "
               "overlap.",
};

/* FedPeWS's mask samples; index: the job's batch stream */
enum { RNG_MASKS = 9 };
static const fl_stream STREAMS[] = {{"fedpews.masks", RNG_MASKS}, {0}};

static const pews_config *conf(const fl_config *c)
{
    return c->own;
}

static int phase(const fl_config *c, int32_t round)
{
    return round >= conf(c)->warmup ? FULL : conf(c)->fixed ? FIXED : LEARNED;
}

static double sigmoid(double x)
{
    return 1 / (1 + exp(-x));
}

/* FedPeWS-Fixed: client k's group of every hidden layer, N contiguous groups, larger first. */
static void fixed_keep(const nn_arch *a, int k, int n, uint8_t *keep)
{
    int u = 0;
    for (int i = 0; i < a->n; i++) {
        if (!a->l[i].narrow) continue;
        int w = a->l[i].oc, base = w / n, extra = w % n, g = k % n;
        int start = g * base + (g < extra ? g : extra), size = base + (g < extra);
        for (int j = 0; j < w; j++)
            keep[u + j] = j >= start && j < start + size;
        u += w;
    }
}

/* Row masks of m from a units vector (one entry per hidden unit, in layer order). */
static void set_units(nn_model *m, const uint8_t *keep)
{
    const uint8_t *rows[NN_MAX_LAYERS] = {0};
    for (int i = 0, u = 0; i < m->arch.n; i++)
        if (m->arch.l[i].narrow) {
            rows[i] = keep + u;
            u += m->arch.l[i].oc;
        }
    nn_model_set_row_masks(m, rows);
}

/* The units m is narrowed to, as a vector. */
static void get_units(const nn_model *m, uint8_t *keep)
{
    for (int i = 0, u = 0; i < m->arch.n; i++) {
        if (!m->arch.l[i].narrow) continue;
        if (!m->list[i]) {
            memset(keep + u, 1, (size_t)m->arch.l[i].oc);
        } else {
            memset(keep + u, 0, (size_t)m->arch.l[i].oc);
            for (int j = 0; j < m->nlist[i]; j++)
                keep[u + m->list[i][j]] = 1;
        }
        u += m->arch.l[i].oc;
    }
}

/* A message: the sub-model of m as narrowed, values from v, and θ when theta is non-NULL. */
static void pack_msg(msgpack_sbuffer *sb, const nn_model *m, const float *v, const float *theta,
                     int h)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, theta ? 3 : 2);
    fl_sub_pack(&pk, m, v);
    if (theta) {
        nn_pack_str(&pk, "theta");
        nn_pack_f32(&pk, theta, (size_t)h);
    }
}

static size_t msg_bytes(const nn_arch *a, size_t live, int with_theta)
{
    size_t tb = 4 * (size_t)fl_sub_units(a);
    return 1 + fl_sub_bytes(a, live) + (with_theta ? 6 + (tb < 256 ? 2 : 3) + tb : 0);
}

/* Unpack a message into v and m's narrowing; theta (h floats) gets "theta" when asked for.
 * *has_theta tells whether it was there. */
static int unpack_msg(nn_model *m, float *v, float *theta, int *has_theta, const void *buf,
                      size_t len, const char *what, sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc;
    *has_theta = 0;
    if (!buf || nn_msgpack_next(&u, buf, len, &off, NULL, NULL)) {
        rc = sim_fail(err, SIM_EFORMAT, what, 0, 0, "not a msgpack map");
    } else if (!(rc = fl_sub_unpack(m, v, &u.data, what, err))) {
        const msgpack_object *t = nn_map_get(&u.data, "theta");
        if (t) {
            rc = nn_unpack_f32(theta, (size_t)fl_sub_units(&m->arch), t, what, err);
            *has_theta = !rc;
        }
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* server */

/* Σ_k θ_k of a unit, exactly: a float in [0, 1] is an integer multiple of 2^-149 below 2^150, so
 * the sum over fewer than 2^31 clients is an integer (in units of 2^-149) below 2^181, kept in
 * three 64-bit limbs, least significant first. The server moves it by each new row less the old
 * one; in floating point that sum would depend on the order rows changed in (1 + 2^-60 − 1 is 0
 * in double), here it is the same as summed afresh. */
enum { LIMBS = 3, FIX_SHIFT = 149 };

/* f (in [0, 1], not NaN) as an integer multiple of 2^-149. */
static void fix_of(float f, uint64_t q[LIMBS])
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    uint32_t e = b >> 23 & 0xff, m = b & 0x7fffff; /* the sign of -0 ignored */
    assert(e < 128 && "a row entry above 1");
    q[0] = q[1] = q[2] = 0;
    if (!e) { /* zero or subnormal: m units */
        q[0] = m;
        return;
    }
    uint64_t v = m | 1u << 23; /* f = v · 2^(e − 150) = v · 2^(e − 1) units */
    int sh = (int)e - 1, w = sh / 64, r = sh % 64; /* sh <= 126: w <= 1 */
    q[w] = v << r;
    if (r) q[w + 1] = v >> (64 - r);
}

static void fix_add(uint64_t *a, const uint64_t *b)
{
    uint64_t carry = 0;
    for (int i = 0; i < LIMBS; i++) {
        uint64_t t = a[i] + b[i], c = t < b[i];
        a[i] = t + carry;
        carry = c | (a[i] < t);
    }
}

static void fix_sub(uint64_t *a, const uint64_t *b)
{
    uint64_t borrow = 0;
    for (int i = 0; i < LIMBS; i++) {
        uint64_t t = a[i] - b[i], c = a[i] < b[i];
        a[i] = t - borrow;
        borrow = c | (t < borrow);
    }
}

/* q · 2^-149 rounded to the nearest double, ties to even. */
static double fix_to_double(const uint64_t q[LIMBS])
{
    int top = LIMBS - 1;
    while (top > 0 && !q[top])
        top--;
    int p = 64 * top; /* the highest bit set */
    for (uint64_t x = q[top] >> 1; x; x >>= 1)
        p++;
    if (p < 53) return ldexp((double)q[0], -FIX_SHIFT); /* exact */
    int s = p - 52, w = s / 64, r = s % 64;             /* s bits below the 53 kept */
    uint64_t m = q[w] >> r;
    if (r && w + 1 < LIMBS) m |= q[w + 1] << (64 - r);
    w = (s - 1) / 64, r = (s - 1) % 64; /* the first bit dropped, and the ones below it */
    int half = q[w] >> r & 1, below = (q[w] & ((UINT64_C(1) << r) - 1)) != 0;
    for (int i = 0; i < w; i++)
        below |= q[i] != 0;
    m += half && (below || (m & 1)); /* m <= 2^53: exact in a double */
    return ldexp((double)m, s - FIX_SHIFT);
}

typedef struct pews_server {
    const fl_env *env; /* borrowed */
    int n, h;          /* clients, hidden units */
    int32_t round;     /* aggregations so far */
    float *global;     /* n_floats */
    fl_sub_acc acc;
    float *scratch; /* n_floats: an unpacked message */
    /* Θ: client i's θ_i (its last mask probabilities, h floats) is its row in env->rows; a
     * client without one has the initial row, σ(score_init) everywhere */
    float init;
    uint64_t *sum;  /* h × LIMBS: Σ_k θ_k over every client, exactly (fix_of), NaNs left out */
    uint32_t *nans; /* h: the clients whose θ_k is NaN there (diverged scores) */
    float *row;     /* h: a client's row, as read or about to be put */
    float *loo;     /* h: θ_{g∖i} for the message being built */
    uint8_t *units; /* h: the units of the message being absorbed */
    int32_t *up_id; /* this round's warmup uploaders, in absorb order (masks.tsv) */
    uint8_t *up_units; /* n_up × h: the units each of them uploaded */
    int n_up, cap_up;
    nn_model m; /* its live map tells which parameters a message holds */
    char *log;  /* masks.tsv rows so far */
    size_t log_len;
} pews_server;

static void *pews_new(const fl_env *env, sim_err *err)
{
    (void)err;
    pews_server *s = sim_xcalloc(1, sizeof *s);
    size_t nf = env->arch->layout.n_floats;
    s->env = env;
    s->n = env->part->n_clients;
    s->h = fl_sub_units(env->arch);
    s->global = sim_xcalloc(nf, sizeof(float));
    s->scratch = sim_xcalloc(nf, sizeof(float));
    fl_sub_acc_init(&s->acc, nf);
    s->init = (float)sigmoid(conf(env->cfg)->score_init);
    uint64_t one[LIMBS], all[LIMBS] = {0};
    fix_of(s->init, one);
    for (int b = 30; b >= 0; b--) { /* all = n · one: every client's initial row */
        fix_add(all, all);
        if (s->n >> b & 1) fix_add(all, one);
    }
    s->sum = sim_xmalloc(sizeof(uint64_t) * LIMBS * ((size_t)s->h + 1));
    for (int j = 0; j < s->h; j++)
        memcpy(s->sum + (size_t)j * LIMBS, all, sizeof all);
    s->nans = sim_xcalloc((size_t)s->h + 1, sizeof(uint32_t));
    s->row = sim_xcalloc((size_t)s->h + 1, sizeof(float));
    s->loo = sim_xcalloc((size_t)s->h + 1, sizeof(float));
    s->units = sim_xcalloc((size_t)s->h + 1, 1);
    s->log = sim_xstrdup("");
    nn_model_init(&s->m, env->arch, 1);
    fl_init_params(&s->m, env);
    memcpy(s->global, s->m.params, nf * sizeof(float));
    return s;
}

static void pews_free(void *p)
{
    pews_server *s = p;
    if (!s) return;
    nn_model_destroy(&s->m);
    fl_sub_acc_free(&s->acc);
    free(s->global);
    free(s->scratch);
    free(s->sum);
    free(s->nans);
    free(s->row);
    free(s->loo);
    free(s->units);
    free(s->up_id);
    free(s->up_units);
    free(s->log);
    free(s);
}

/* Client's θ_i into s->row: its row, or the initial one (also for a row that is not
 * probabilities, which fl_row_bad reports: only a damaged store gives one). */
static void read_row(pews_server *s, int32_t client)
{
    if (fl_row_get(s->env, client, s->row, sizeof(float) * (size_t)s->h)) {
        int j = 0;
        while (j < s->h && (isnan(s->row[j]) || (s->row[j] >= 0 && s->row[j] <= 1)))
            j++;
        if (j == s->h) return;
        fl_row_bad(s->env, client, "a value outside [0, 1]");
    }
    for (int j = 0; j < s->h; j++)
        s->row[j] = s->init;
}

/* Client's new θ_i: theta (h floats), or with theta NULL its units as 0 and 1; the sums move
 * from its old row to it. */
static void put_row(pews_server *s, int32_t client, const float *theta)
{
    read_row(s, client);
    uint64_t q[LIMBS];
    for (int j = 0; j < s->h; j++) {
        float old = s->row[j], t = theta ? theta[j] : s->units[j];
        uint64_t *col = s->sum + (size_t)j * LIMBS;
        if (isnan(old)) {
            s->nans[j]--;
        } else {
            fix_of(old, q);
            fix_sub(col, q);
        }
        if (isnan(t)) {
            s->nans[j]++;
        } else {
            fix_of(t, q);
            fix_add(col, q);
        }
        s->row[j] = t;
    }
    fl_row_put(s->env, client, s->row, sizeof(float) * (size_t)s->h);
}

/* θ_{g∖i} = (Σ_k θ_k − θ_i)/(n − 1), in O(h): the exact sum less the client's own row, rounded
 * to a double once, which is what summing the others' rows in double gave whenever that sum was
 * exact; NaN where another client's θ_k is. */
static void leave_one_out(pews_server *s, int32_t client)
{
    read_row(s, client);
    uint64_t d[LIMBS], own[LIMBS];
    for (int j = 0; j < s->h; j++) {
        int own_nan = isnan(s->row[j]) != 0;
        if (s->nans[j] > (uint32_t)own_nan) {
            s->loo[j] = NAN;
            continue;
        }
        memcpy(d, s->sum + (size_t)j * LIMBS, sizeof d);
        if (!own_nan) {
            fix_of(s->row[j], own);
            fix_sub(d, own);
        }
        s->loo[j] = (float)(fix_to_double(d) / (s->n - 1));
    }
}

static size_t pews_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out)
{
    pews_server *s = p;
    int ph = phase(s->env->cfg, round), theta = ph == LEARNED && s->n > 1;
    nn_model_reset_narrowing(&s->m);
    if (ph == FIXED) {
        uint8_t *keep = sim_xmalloc((size_t)s->h + 1);
        fixed_keep(s->env->arch, client, s->n, keep);
        set_units(&s->m, keep);
        free(keep);
    }
    if (!out) return msg_bytes(s->env->arch, nn_model_live_count(&s->m), theta);
    if (theta) leave_one_out(s, client);
    size_t before = out->size;
    pack_msg(out, &s->m, s->global, theta ? s->loo : NULL, s->h);
    return out->size - before;
}

/* An uploaded θ_i holds probabilities: in [0, 1], or NaN where the client's scores diverged. */
static int check_theta(const float *t, int h, sim_err *err)
{
    for (int j = 0; j < h; j++)
        if (!(t[j] >= 0 && t[j] <= 1) && !isnan(t[j]))
            return sim_fail(err, SIM_EFORMAT, "up message", 0, 0,
                            "theta[%d] = %g is not a probability", j, (double)t[j]);
    return SIM_OK;
}

/* A warmup upload's units (s->units), for this round's masks.tsv row. */
static void note_upload(pews_server *s, int32_t client)
{
    if (s->n_up == s->cap_up) {
        s->cap_up = s->cap_up ? 2 * s->cap_up : 16;
        s->up_id = sim_xrealloc(s->up_id, sizeof(int32_t) * (size_t)s->cap_up);
        s->up_units = sim_xrealloc(s->up_units, (size_t)s->cap_up * (size_t)s->h + 1);
    }
    s->up_id[s->n_up] = client;
    memcpy(s->up_units + (size_t)s->n_up * s->h, s->units, (size_t)s->h);
    s->n_up++;
}

static int pews_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                       double mass, sim_err *err)
{
    pews_server *s = p;
    int binary = conf(s->env->cfg)->theta_binary;
    float *theta = sim_xmalloc(sizeof(float) * ((size_t)s->h + 1));
    int has_theta;
    int rc = unpack_msg(&s->m, s->scratch, theta, &has_theta, up, len, "up message", err);
    if (!rc && has_theta && !binary) rc = check_theta(theta, s->h, err);
    if (!rc) {
        fl_sub_acc_add(&s->acc, &s->m, s->scratch, weight, mass);
        get_units(&s->m, s->units);
        if (phase(s->env->cfg, s->round) != FULL) note_upload(s, client);
        if (has_theta) put_row(s, client, binary ? NULL : theta);
    }
    free(theta);
    return rc;
}

/* An upload of the round: its client and its index in up_id. */
typedef struct upload_ref {
    int32_t client;
    int at;
} upload_ref;

static int cmp_upload(const void *pa, const void *pb)
{
    const upload_ref *a = pa, *b = pb;
    if (a->client != b->client) return a->client < b->client ? -1 : 1;
    return (a->at > b->at) - (a->at < b->at);
}

/* One masks.tsv row for a warmup round: density of each client's subnetwork, the units and
 * parameters some client covered, and the mean pairwise Jaccard overlap of the masks; the
 * clients in id order, a client that uploaded twice with its last units. */
static void log_round(pews_server *s)
{
    upload_ref *u = sim_xmalloc(sizeof *u * ((size_t)s->n_up + 1));
    for (int i = 0; i < s->n_up; i++)
        u[i] = (upload_ref){s->up_id[i], i};
    qsort(u, (size_t)s->n_up, sizeof *u, cmp_upload);
    int k = 0, cover = 0, pairs = 0;
    for (int i = 0; i < s->n_up; i++) {
        if (k && u[k - 1].client == u[i].client) k--;
        u[k++] = u[i];
    }
    double dsum = 0, dmin = 1, dmax = 0, jac = 0;
    char dens[4096] = "";
    for (int i = 0; i < k; i++) {
        const uint8_t *a = s->up_units + (size_t)u[i].at * s->h;
        int on = 0;
        for (int j = 0; j < s->h; j++)
            on += a[j];
        double d = s->h ? (double)on / s->h : 1;
        dsum += d, dmin = fmin(dmin, d), dmax = fmax(dmax, d);
        size_t l = strlen(dens);
        snprintf(dens + l, sizeof dens - l, "%s%d:%.4f", l ? "," : "", u[i].client, d);
        for (int i2 = 0; i2 < i; i2++) {
            const uint8_t *b = s->up_units + (size_t)u[i2].at * s->h;
            int both = 0, any = 0;
            for (int j = 0; j < s->h; j++)
                both += a[j] && b[j], any += a[j] || b[j];
            jac += any ? (double)both / any : 1;
            pairs++;
        }
    }
    for (int j = 0; j < s->h; j++) {
        int any = 0;
        for (int i = 0; i < k && !any; i++)
            any = s->up_units[(size_t)u[i].at * s->h + j];
        cover += any;
    }
    free(u);
    const nn_layout *L = &s->env->arch->layout;
    size_t held = 0;
    for (int t = 0; t < L->n; t++)
        for (size_t j = 0; j < (size_t)L->t[t].rows * L->t[t].cols; j++)
            held += s->acc.mass[L->t[t].off + j] > 0;
    char row[4600];
    int len = snprintf(row, sizeof row, "%d\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%s\n",
                       s->round, k, k ? dsum / k : 0, k ? dmin : 0, k ? dmax : 0,
                       s->h ? (double)cover / s->h : 1, (double)held / (double)L->n_params,
                       pairs ? jac / pairs : NAN, dens);
    s->log = sim_xrealloc(s->log, s->log_len + (size_t)len + 1);
    memcpy(s->log + s->log_len, row, (size_t)len + 1);
    s->log_len += (size_t)len;
}

static void pews_aggregate(void *p)
{
    pews_server *s = p;
    if (phase(s->env->cfg, s->round) != FULL) log_round(s);
    fl_sub_acc_apply(&s->acc, s->global, s->env->cfg->server_lr);
    s->n_up = 0;
    s->round++;
}

static double pews_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m)
{
    pews_server *s = p;
    (void)client, (void)priv, (void)priv_len;
    nn_model_reset_narrowing(m);
    memcpy(m->params, s->global, s->env->arch->layout.n_floats * sizeof(float));
    return 1.0;
}

static void pews_report(void *p, FILE *f)
{
    pews_server *s = p;
    fprintf(f, "# FedPeWS warmup masks: one row per warmup round (0-based); densities are the "
               "fraction of hidden units each client's uploaded subnetwork kept\n");
    fprintf(f, "round\tclients\tdensity_mean\tdensity_min\tdensity_max\tunit_coverage\t"
               "param_coverage\toverlap_mean\tdensities\n");
    fputs(s->log, f);
}

/* [round, clients, global, [acc, mass], Σθ (h × LIMBS), NaN counts (h), masks.tsv so far];
 * arrays as raw native-order bytes. The rows are the engine's, committed with the checkpoint;
 * this round's uploads are not kept, since a round's absorbs and its aggregation are one
 * event. */
static void pews_save(void *p, msgpack_packer *pk)
{
    pews_server *s = p;
    size_t nf = s->env->arch->layout.n_floats, h = (size_t)s->h;
    msgpack_pack_array(pk, 7);
    msgpack_pack_int32(pk, s->round);
    msgpack_pack_int32(pk, s->n);
    msgpack_pack_bin(pk, nf * sizeof(float));
    msgpack_pack_bin_body(pk, s->global, nf * sizeof(float));
    fl_sub_acc_save(&s->acc, pk);
    msgpack_pack_bin(pk, h * LIMBS * sizeof(uint64_t));
    msgpack_pack_bin_body(pk, s->sum, h * LIMBS * sizeof(uint64_t));
    msgpack_pack_bin(pk, h * sizeof(uint32_t));
    msgpack_pack_bin_body(pk, s->nans, h * sizeof(uint32_t));
    msgpack_pack_str(pk, s->log_len);
    msgpack_pack_str_body(pk, s->log, s->log_len);
}

static int pews_load(void *p, const msgpack_object *o, sim_err *err)
{
    pews_server *s = p;
    size_t nf = s->env->arch->layout.n_floats, h = (size_t)s->h;
    const msgpack_object *a =
            o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 7 ? o->via.array.ptr : NULL;
    if (!a || a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[0].via.u64 > INT32_MAX ||
        a[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[1].via.u64 != (uint64_t)s->n ||
        a[2].type != MSGPACK_OBJECT_BIN || a[2].via.bin.size != nf * sizeof(float) ||
        fl_sub_acc_load(&s->acc, &a[3]) || a[4].type != MSGPACK_OBJECT_BIN ||
        a[4].via.bin.size != h * LIMBS * sizeof(uint64_t) || a[5].type != MSGPACK_OBJECT_BIN ||
        a[5].via.bin.size != h * sizeof(uint32_t) || a[6].type != MSGPACK_OBJECT_STR)
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "server state does not fit fedpews with %d clients and a %zu-parameter "
                        "model",
                        s->n, nf);
    s->round = (int32_t)a[0].via.u64;
    memcpy(s->global, a[2].via.bin.ptr, nf * sizeof(float));
    memcpy(s->sum, a[4].via.bin.ptr, h * LIMBS * sizeof(uint64_t));
    memcpy(s->nans, a[5].via.bin.ptr, h * sizeof(uint32_t));
    free(s->log);
    s->log_len = a[6].via.str.size;
    s->log = sim_xmalloc(s->log_len + 1);
    memcpy(s->log, a[6].via.str.ptr, s->log_len);
    s->log[s->log_len] = 0;
    s->n_up = 0;
    return SIM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* client */

/* The first conv/linear layer after layer i: the one a unit of i feeds. */
static int next_param(const nn_arch *a, int i)
{
    for (int k = i + 1; k < a->n; k++)
        if (a->l[k].op == NN_CONV || a->l[k].op == NN_LINEAR) return k;
    return -1;
}

/* Procedure I's gate gradient: with every dropped unit's outgoing weights zeroed (a dense model,
 * gates applied), forward and backward the batch, and gm_j = Σ G·W over unit j's outgoing
 * weights, W the original values. */
static void gate_grads(nn_model *m, const uint8_t *keep, const float *x, const int32_t *y, int B,
                       float *stash, double *gm)
{
    const nn_arch *a = &m->arch;
    nn_model_reset_narrowing(m);
    for (int pass = 0; pass < 3; pass++) { /* 0: zero the gated columns, 1: gm, 2: restore */
        if (pass == 1) {
            nn_model_zero_grad(m);
            nn_model_forward(m, x, y, B, 1);
            nn_model_backward(m);
        }
        for (int i = 0, u = 0; i < a->n; i++) {
            if (!a->l[i].narrow) continue;
            const nn_layer *nx = &a->l[next_param(a, i)];
            const nn_tensor *t = &a->layout.t[nx->wt];
            int run = nx->op == NN_CONV ? nx->k * nx->k : nx->blk;
            for (int j = 0; j < a->l[i].oc; j++, u++) {
                if (pass == 1) gm[u] = 0;
                if (keep[u] && pass != 1) continue;
                for (int r = 0; r < t->rows; r++) {
                    size_t o = t->off + (size_t)r * t->cols + (size_t)j * run;
                    for (int q = 0; q < run; q++) {
                        if (pass == 0) {
                            stash[o + q] = m->params[o + q];
                            m->params[o + q] = 0;
                        } else if (pass == 1) {
                            gm[u] += (double)m->grads[o + q] *
                                     (keep[u] ? m->params[o + q] : stash[o + q]);
                        } else {
                            m->params[o + q] = stash[o + q];
                        }
                    }
                }
            }
        }
    }
}

static void sample(sim_rng *r, const float *s, uint8_t *keep, int h)
{
    for (int j = 0; j < h; j++)
        keep[j] = sim_rng_uniform(r) < sigmoid(s[j]);
}

/* The learned warmup's local loop (Procedures I and II on each minibatch); leaves m narrowed to
 * the mask drawn for the upload. */
static void learned_sgd(const fl_env *env, const fl_job *job, nn_model *m, float *s,
                        const float *loo, const float *anchor, uint8_t *keep, fl_result *res)
{
    const fl_config *cfg = env->cfg;
    const pews_config *pc = conf(cfg);
    int h = fl_sub_units(env->arch);
    size_t nf = env->arch->layout.n_floats;
    sim_rng mr;
    sim_rng_seed(&mr, env->seed, RNG_MASKS, job->stream);
    fl_loop L;
    if (fl_loop_start(&L, env, job, m)) {
        double mu = pc->prox ? cfg->mu : 0;
        nn_sgd opt = {(float)L.lr, (float)cfg->momentum, (float)cfg->weight_decay,
                      (float)cfg->clip};
        memset(m->mom, 0, sizeof(float) * nf);
        float *stash = sim_xmalloc(sizeof(float) * nf);
        double *gm = sim_xmalloc(sizeof(double) * ((size_t)h + 1));
        for (int nb; (nb = fl_loop_next(&L));) {
            sample(&mr, s, keep, h); /* Procedure I: the scores, weights frozen */
            gate_grads(m, keep, L.b.x, L.b.y, nb, stash, gm);
            for (int j = 0; j < h; j++) {
                double sg = sigmoid(s[j]), g = gm[j];
                if (loo) g -= 2 * pc->lambda * (sg - loo[j]);
                s[j] -= (float)(pc->mask_lr * g * sg * (1 - sg));
            }
            sample(&mr, s, keep, h); /* Procedure II: the weights of the subnetwork */
            set_units(m, keep);
            nn_model_zero_grad(m);
            L.loss += nn_model_forward(m, L.b.x, L.b.y, nb, 1);
            nn_model_backward(m);
            if (mu > 0) fl_prox_grad(m, mu, anchor);
            nn_model_sgd_step(m, &opt);
        }
        int64_t steps = L.steps;
        fl_loop_finish(&L, res);
        fl_count_steps(res, steps); /* Procedure I's: a step of the scores on every minibatch */
        free(stash);
        free(gm);
    }
    sample(&mr, s, keep, h); /* the subnetwork uploaded (Alg. 1 l.19) */
    set_units(m, keep);
}

/* Cost-only: learned masks are drawn from the initial scores (what training would move them to
 * is unknown without training); a step costs a dense pass (Procedure I) plus the subnetwork's. */
static int train_cost_only(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res)
{
    nn_model *m = fl_worker_model(w, env);
    int ph = phase(env->cfg, job->round), h = fl_sub_units(env->arch);
    uint8_t *keep = sim_xmalloc((size_t)h + 1);
    if (ph == LEARNED) {
        fl_local_sgd(env, job, m, 0, NULL, res); /* Procedure I's dense passes */
        float *s = sim_xmalloc(sizeof(float) * ((size_t)h + 1));
        for (int j = 0; j < h; j++)
            s[j] = (float)conf(env->cfg)->score_init;
        sim_rng r;
        sim_rng_seed(&r, env->seed, RNG_MASKS, job->stream);
        sample(&r, s, keep, h);
        free(s);
        set_units(m, keep);
    } else if (ph == FIXED) {
        fixed_keep(env->arch, job->client, env->part->n_clients, keep);
        set_units(m, keep);
    }
    fl_local_sgd(env, job, m, 0, NULL, res);
    res->up_bytes = msg_bytes(env->arch, nn_model_live_count(m), ph == LEARNED);
    free(keep);
    return SIM_OK;
}

static int pews_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                      sim_err *err)
{
    if (env->cost_only) return train_cost_only(env, job, w, res);
    const pews_config *pc = conf(env->cfg);
    nn_model *m = fl_worker_model(w, env);
    size_t nf = env->arch->layout.n_floats;
    int ph = phase(env->cfg, job->round), h = fl_sub_units(env->arch), has_loo;
    float *loo = sim_xmalloc(sizeof(float) * ((size_t)h + 1));
    int rc = unpack_msg(m, m->params, loo, &has_loo, job->down, job->down_len, "down message", err);
    if (rc) {
        free(loo);
        return rc;
    }
    memcpy(w->ref, m->params, nf * sizeof(float)); /* the received model: anchor, and the base
                                                      of the change uploaded */
    if (ph != LEARNED) {
        fl_local_sgd(env, job, m, pc->prox ? env->cfg->mu : 0, w->ref, res);
    } else {
        float *s = sim_xmalloc(sizeof(float) * ((size_t)h + 1));
        for (int j = 0; j < h; j++)
            s[j] = (float)pc->score_init;
        if (job->priv) {
            msgpack_unpacked u;
            msgpack_unpacked_init(&u);
            size_t off = 0;
            rc = !nn_msgpack_next(&u, job->priv, job->priv_len, &off, NULL, NULL)
                         ? nn_unpack_f32(s, (size_t)h, &u.data, "private state", err)
                         : sim_fail(err, SIM_EFORMAT, "private state", 0, 0, "not msgpack");
            msgpack_unpacked_destroy(&u);
        }
        uint8_t *keep = sim_xmalloc((size_t)h + 1);
        if (!rc) {
            learned_sgd(env, job, m, s, has_loo && pc->lambda > 0 ? loo : NULL, w->ref, keep, res);
            for (int j = 0; j < h; j++)
                loo[j] = (float)sigmoid(s[j]); /* θ_i, sent up */
            msgpack_packer pk;
            msgpack_packer_init(&pk, &res->priv, msgpack_sbuffer_write);
            nn_pack_f32(&pk, s, (size_t)h);
        }
        free(keep);
        free(s);
    }
    if (!rc) {
        for (size_t j = 0; j < nf; j++) /* the upload is the change of the subnetwork */
            w->ref[j] = m->params[j] - w->ref[j];
        pack_msg(&res->up, m, w->ref, ph == LEARNED ? loo : NULL, h);
        res->up_bytes = res->up.size;
    }
    free(loo);
    return rc;
}

/* job_bound: in the phase of learned masks a job's work depends on the masks its scores draw:
 * the cost-only job's steps, at no FLOPs or bytes; in the others (fixed subnetworks, then FedAvg)
 * the cost-only job's work, which is the job's own. */
static void pews_bound(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *lo)
{
    train_cost_only(env, job, w, lo);
    if (phase(env->cfg, job->round) == LEARNED) memset(&lo->cost, 0, sizeof lo->cost);
}

const fl_algo fl_fedpews = {
        .version = FL_ALGO_VERSION,
        .name = "fedpews",
        .summary = "FedPeWS: personal subnetworks in a warmup, then FedAvg/FedProx",
        .doc = "a warmup in which clients learn and send personal subnetworks, then FedAvg or "
               "FedProx",
        .flags = FL_HAS_GLOBAL,
        .section = &fl_pews_section,
        .streams = STREAMS,
        .server_new = pews_new,
        .server_free = pews_free,
        .job_down = pews_down,
        .client_train = pews_train,
        .server_absorb = pews_absorb,
        .server_aggregate = pews_aggregate,
        .eval_params = pews_eval,
        .server_save = pews_save,
        .server_load = pews_load,
        .report_file = "masks.tsv",
        .report = pews_report,
        .job_bound = pews_bound,
        .no_compress = "FedPeWS's messages pair the sub-model its learned neuron masks choose with "
                       "the masks' scores θ, and compressing that pair is not implemented",
};
