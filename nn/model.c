/* nn/model.c -- model instances: arena, workspace, forward/backward through the layer list, SGD,
 * and the active-channel lists behind width slicing and row masks (see model.h).
 *
 * Activations are compact: a layer narrowed to n of its C channels produces (n, B, H, W) for convs
 * or (B, n) for linears, and the next layer reads only the matching input columns of its weight.
 * Weights are used in place when both the output and input lists are contiguous ranges (every
 * prefix width, every unmasked layer) and gathered into a per-layer scratch otherwise; gradients
 * of gathered weights are computed compact and scattered back.
 */
#include "nn/model.h"

#include "nn/ops.h"
#include "sim/keys.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nn_work {
    float *block;                 /* owns out, d0, d1, col, x0, xhat, invstd */
    float *out[NN_MAX_LAYERS];    /* output activations, compact */
    float *kept[NN_MAX_LAYERS];   /* conv: what forward keeps for backward (unfolded or
                                     transformed input), owned separately; NULL when too large
                                     (then recomputed) */
    float *xhat[NN_MAX_LAYERS];   /* batch-norm normalized input */
    float *invstd[NN_MAX_LAYERS]; /* batch-norm 1/σ per active channel */
    float *d0, *d1;               /* activation-gradient ping-pong */
    float *col;                   /* im2col scratch */
    float *x0;                    /* CBHW copy of a multi-channel input */
    float *wg[NN_MAX_LAYERS];     /* gathered weights (lazily allocated, full size) */
    float *dwg[NN_MAX_LAYERS];    /* their gradients */
    int *rl[NN_MAX_LAYERS];       /* gathered weights: which active output rows they hold (an
                                     element mask that drops a whole row leaves it out) */
    int nl[NN_MAX_LAYERS];        /* how many; the active outputs' count when none is dropped */
    float *vg[NN_MAX_LAYERS]; /* gathered bias / bn vectors: 4 × C (b, db or γ, β, μ, σ²) */
    const float *wp[NN_MAX_LAYERS]; /* weight the last forward used, and its row stride */
    int ldw[NN_MAX_LAYERS];
    int gathered[NN_MAX_LAYERS]; /* weights came from wg */
    double dens[NN_MAX_LAYERS];  /* element-mask density of the block the last forward used */
    int *ident;                  /* 0, 1, 2, … up to the widest layer */
    int *scratch_list;           /* a list being built, as wide as ident */
    const float *in;             /* input of the last forward, (B, features) */
    const int32_t *y;            /* its labels */
    int B;
    float scaled;   /* the narrow_scale the last forward applied */
    uint8_t *run_t; /* the tensor of each of m->runs */
} nn_work;
_Static_assert(NN_MAX_TENSORS <= 256, "run_t holds tensor indices in a byte");

/* ---------------------------------------------------------------------------------------- */
/* architectures */

static int add_tensor(nn_arch *a, const char *name, int rows, int cols, int trainable)
{
    nn_layout *L = &a->layout;
    assert(L->n < NN_MAX_TENSORS);
    nn_tensor *t = &L->t[L->n];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->off = L->n_floats;
    t->trainable = trainable;
    size_t n = (size_t)rows * cols;
    L->n_params += n;
    L->n_floats += (n + NN_ALIGN - 1) / NN_ALIGN * NN_ALIGN;
    return L->n++;
}

/* Shape of the tensor flowing out of the last layer (the next layer's input). */
static void cur_shape(const nn_arch *a, int *c, int *h, int *w)
{
    if (a->n == 0) {
        *c = a->in_c;
        *h = a->in_h;
        *w = a->in_w;
    } else {
        *c = a->l[a->n - 1].oc;
        *h = a->l[a->n - 1].oh;
        *w = a->l[a->n - 1].ow;
    }
}

static nn_layer *push(nn_arch *a, nn_op op)
{
    assert(a->n < NN_MAX_LAYERS);
    nn_layer *l = &a->l[a->n];
    memset(l, 0, sizeof *l);
    l->op = op;
    cur_shape(a, &l->c, &l->h, &l->w);
    l->oc = l->c;
    l->oh = l->h;
    l->ow = l->w;
    l->blk = 1;
    l->wt = l->bt = l->rmt = l->rvt = -1;
    a->n++;
    return l;
}

/* The channels a width p keeps of C: ⌈p·C⌉, at least one. A NAME@p model and the p-narrowed
 * full model both count with it, so they have the same shapes. */
static int width_channels(double p, int C)
{
    int n = (int)ceil(p * C - 1e-9);
    return n < 1 ? 1 : n;
}

/* out, or its width's share for the first n_thin conv/linear layers of a NAME@width model. */
static int thin(const nn_arch *a, int out)
{
    int k = 0;
    for (int i = 0; i < a->n; i++)
        k += a->l[i].op == NN_CONV || a->l[i].op == NN_LINEAR;
    return k < a->n_thin ? width_channels(a->width, out) : out;
}

static void add_conv(nn_arch *a, const char *name, int out, int k, int pad, int bias)
{
    out = thin(a, out);
    nn_layer *l = push(a, NN_CONV);
    char nm[24];
    l->oc = out;
    l->k = k;
    l->s = 1;
    l->p = pad;
    l->oh = nn_conv_out(l->h, k, 1, pad);
    l->ow = nn_conv_out(l->w, k, 1, pad);
    l->narrow = 1;
    snprintf(nm, sizeof nm, "%s.w", name);
    l->wt = add_tensor(a, nm, out, l->c * k * k, 1);
    if (bias) {
        snprintf(nm, sizeof nm, "%s.b", name);
        l->bt = add_tensor(a, nm, out, 1, 1);
    }
}

static void add_linear(nn_arch *a, const char *name, int out, int bias)
{
    out = thin(a, out);
    int c, h, w;
    cur_shape(a, &c, &h, &w);
    int blk = 1;
    if (a->n > 0 && a->l[a->n - 1].op == NN_FLATTEN) blk = a->l[a->n - 1].h * a->l[a->n - 1].w;
    nn_layer *l = push(a, NN_LINEAR);
    char nm[24];
    l->c = c * h * w;
    l->h = l->w = 1;
    l->blk = blk;
    l->oc = out;
    l->oh = l->ow = 1;
    l->narrow = 1;
    snprintf(nm, sizeof nm, "%s.w", name);
    l->wt = add_tensor(a, nm, out, l->c, 1);
    if (bias) {
        snprintf(nm, sizeof nm, "%s.b", name);
        l->bt = add_tensor(a, nm, out, 1, 1);
    }
}

static void add_simple(nn_arch *a, nn_op op)
{
    /* ReLU then max-pool is run as max-pool then ReLU: relu(max(x)) = max(relu(x)) exactly, with
     * the same gradient (the argmax of a window with a positive maximum is the same, and a window
     * without one passes no gradient either way), and the ReLU then touches a quarter of the
     * values. */
    if (op == NN_MAXPOOL && a->n > 0 && a->l[a->n - 1].op == NN_RELU) {
        a->n--;
        add_simple(a, NN_MAXPOOL);
        add_simple(a, NN_RELU);
        return;
    }
    nn_layer *l = push(a, op);
    if (op == NN_MAXPOOL) {
        l->oh = l->h / 2;
        l->ow = l->w / 2;
    } else if (op == NN_FLATTEN) {
        l->oc = l->c * l->h * l->w;
        l->oh = l->ow = 1;
    }
}

/* conv + ReLU + 2×2 max-pool, the block every CNN here is made of */
static void add_conv_block(nn_arch *a, const char *name, int out, int k, int pad, int bias)
{
    add_conv(a, name, out, k, pad, bias);
    add_simple(a, NN_RELU);
    add_simple(a, NN_MAXPOOL);
}

/* Batch norm over the features of the layer before (pFedGate's gate normalizes this way). */
static void add_bn(nn_arch *a, int idx)
{
    nn_layer *l = push(a, NN_BATCHNORM);
    char nm[24];
    snprintf(nm, sizeof nm, "bn%d.g", idx);
    l->wt = add_tensor(a, nm, l->c, 1, 1);
    snprintf(nm, sizeof nm, "bn%d.b", idx);
    l->bt = add_tensor(a, nm, l->c, 1, 1);
    snprintf(nm, sizeof nm, "bn%d.mean", idx);
    l->rmt = add_tensor(a, nm, l->c, 1, 0);
    snprintf(nm, sizeof nm, "bn%d.var", idx);
    l->rvt = add_tensor(a, nm, l->c, 1, 0);
}

/* The classifier head is never narrowed: its outputs are the classes. */
static void finish(nn_arch *a)
{
    for (int i = a->n - 1; i >= 0; i--)
        if (a->l[i].op == NN_LINEAR || a->l[i].op == NN_CONV) {
            a->l[i].narrow = 0;
            break;
        }
}

static int build_mlp(nn_arch *a, const char *spec, const char *name, int bn, sim_err *err)
{
    int widths[NN_MAX_LAYERS], n = 0;
    const char *s = spec;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0 || v > 1000000 || n >= NN_MAX_LAYERS / 2)
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                            "model '%s': widths must be positive integers joined by '-'", name);
        widths[n++] = (int)v;
        s = end;
        if (*s == '-')
            s++;
        else if (*s)
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "model '%s': unexpected '%c' in widths",
                            name, *s);
    }
    if (n < 2)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "model '%s': needs at least input and output widths", name);
    int feat = a->in_c * a->in_h * a->in_w;
    if (widths[0] != feat || widths[n - 1] != a->classes)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "model '%s': the data has %d features and %d classes, the model %d and %d",
                        name, feat, a->classes, widths[0], widths[n - 1]);
    a->in_c = feat;
    a->in_h = a->in_w = 1;
    for (int i = 1; i < n; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "fc%d", i);
        add_linear(a, nm, widths[i], 1);
        if (i == n - 1) break;
        if (bn) add_bn(a, i);
        add_simple(a, NN_RELU);
    }
    return SIM_OK;
}

static int need_image(const nn_arch *a, const char *name, int min_hw, sim_err *err)
{
    if (a->in_h < min_hw || a->in_w < min_hw)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "model '%s' needs images of at least %dx%d, the data has %dx%dx%d", name,
                        min_hw, min_hw, a->in_c, a->in_h, a->in_w);
    return SIM_OK;
}

/* The model called name (without a @width suffix), its hidden layers thinned to width. */
static int build_named(nn_arch *a, const char *name, int c, int h, int w, int classes, double width,
                       int n_thin, sim_err *err)
{
    memset(a, 0, sizeof *a);
    a->width = width;
    a->n_thin = n_thin;
    snprintf(a->name, sizeof a->name, "%s", name);
    a->in_c = c;
    a->in_h = h;
    a->in_w = w;
    a->classes = classes;
    int rc = SIM_OK;
    if (c <= 0 || h <= 0 || w <= 0 || classes < 2)
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                      "model '%s': bad input shape %dx%dx%d or %d "
                      "classes",
                      name, c, h, w, classes);
    else if (!strncmp(name, "mlp:", 4))
        rc = build_mlp(a, name + 4, name, 0, err);
    else if (!strncmp(name, "mlpbn:", 6))
        rc = build_mlp(a, name + 6, name, 1, err);
    else if (!strcmp(name, "fedpews-mlp"))
        rc = build_mlp(a, "5-32-64-128-32-4", name, 0, err);
    else if (!strcmp(name, "cnn2") || !strcmp(name, "pa3dfl-cnn") || !strcmp(name, "leaf-cnn")) {
        int leaf = name[0] == 'l', pad = leaf ? 0 : 2; /* LEAF's convs are unpadded */
        if ((rc = need_image(a, name, leaf ? 16 : 8, err)) == SIM_OK) {
            add_conv_block(a, "conv1", 32, 5, pad, 1);
            add_conv_block(a, "conv2", 64, 5, pad, 1);
            add_simple(a, NN_FLATTEN);
            add_linear(a, "fc1", leaf ? 2048 : 512, 1);
            add_simple(a, NN_RELU);
            if (name[0] == 'p') {
                add_linear(a, "fc2", 128, 1);
                add_simple(a, NN_RELU);
            }
            add_linear(a, "head", classes, 1);
        }
    } else if (!strcmp(name, "lenet5-caffe")) {
        if ((rc = need_image(a, name, 16, err)) == SIM_OK) {
            add_conv_block(a, "conv1", 20, 5, 0, 0);
            add_conv_block(a, "conv2", 50, 5, 0, 0);
            add_simple(a, NN_FLATTEN);
            add_linear(a, "fc3", 500, 0);
            add_simple(a, NN_RELU);
            add_linear(a, "fc4", classes, 0);
        }
    } else if (!strcmp(name, "lenet-mnn")) {
        /* the LeNet the phones of devices/phones/ trained (MNN's Lenet.cpp in the
         * Benchmark-On-Device-Training fork): no ReLU after the convolutions, fc 400, biases */
        if ((rc = need_image(a, name, 16, err)) == SIM_OK) {
            add_conv(a, "conv1", 20, 5, 0, 1);
            add_simple(a, NN_MAXPOOL);
            add_conv(a, "conv2", 50, 5, 0, 1);
            add_simple(a, NN_MAXPOOL);
            add_simple(a, NN_FLATTEN);
            add_linear(a, "ip1", 400, 1);
            add_simple(a, NN_RELU);
            add_linear(a, "ip2", classes, 1);
        }
    } else if (!strcmp(name, "fedpews-cnn")) {
        if ((rc = need_image(a, name, 8, err)) == SIM_OK) {
            static const int widths[3] = {32, 64, 128};
            for (int i = 0; i < 3; i++) {
                char nm[16];
                snprintf(nm, sizeof nm, "conv%d", i + 1);
                add_conv_block(a, nm, widths[i], 3, 1, 1);
            }
            add_simple(a, NN_FLATTEN);
            add_linear(a, "head", classes, 1);
        }
    } else {
        static const char *const known[] = {"cnn2",        "lenet5-caffe", "pa3dfl-cnn", "leaf-cnn",
                                            "fedpews-mlp", "fedpews-cnn",  "lenet-mnn",  NULL};
        const char *near = sim_keys_closest(name, known);
        char mean[64] = "";
        if (near) snprintf(mean, sizeof mean, "; did you mean '%s'?", near);
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                      "unknown model '%s'%s (known: mlp:W0-W1-..., mlpbn:W0-W1-..., cnn2, "
                      "lenet5-caffe, lenet-mnn, pa3dfl-cnn, leaf-cnn, "
                      "fedpews-mlp, fedpews-cnn)",
                      name, mean);
    }
    if (rc == SIM_OK && a->n > 0 && a->l[a->n - 1].oc != classes)
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0, "model '%s' does not end in %d outputs", name,
                      classes);
    if (rc != SIM_OK) {
        memset(a, 0, sizeof *a);
        return rc;
    }
    finish(a);
    return SIM_OK;
}

int nn_arch_build(nn_arch *a, const char *name, int c, int h, int w, int classes, sim_err *err)
{
    const char *at = strchr(name, '@');
    if (!at) return build_named(a, name, c, h, w, classes, 1, 0, err);
    char base[64], *end;
    double p = strtod(at + 1, &end);
    if (at == name || at - name >= (long)sizeof base || end == at + 1 || *end || !(p > 0 && p <= 1))
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "model '%s': expected NAME@WIDTH with a width in (0, 1]", name);
    snprintf(base, sizeof base, "%.*s", (int)(at - name), name);
    /* built once in full to count its conv/linear layers: all but the head get thinner */
    int rc = build_named(a, base, c, h, w, classes, 1, 0, err), n_param = 0;
    for (int i = 0; rc == SIM_OK && i < a->n; i++)
        n_param += a->l[i].op == NN_CONV || a->l[i].op == NN_LINEAR;
    if (rc == SIM_OK) rc = build_named(a, base, c, h, w, classes, p, n_param - 1, err);
    if (rc == SIM_OK) snprintf(a->name, sizeof a->name, "%s", name);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* instances */

static int is_param(const nn_layer *l)
{
    return l->op == NN_CONV || l->op == NN_LINEAR;
}

/* Floats a conv/linear layer with no active outputs writes at batch B. */
static long out_floats(const nn_layer *l, int no, int B)
{
    if (l->op == NN_LINEAR) return (long)B * no;
    return (long)no * B * nn_conv_out(l->h, l->k, l->s, l->p) * nn_conv_out(l->w, l->k, l->s, l->p);
}

static void scale_f32(float *x, float s, long n)
{
    for (long i = 0; i < n; i++)
        x[i] *= s;
}

/* Active input list of layer i: the output list of the layer before (identity at the input). */
static const int *in_list(const nn_model *m, int i, int *n);

static const int *out_list(const nn_model *m, int i, int *n)
{
    const nn_layer *l = &m->arch.l[i];
    if (m->list[i]) {
        *n = m->nlist[i];
        return m->list[i];
    }
    if (is_param(l)) {
        *n = l->oc;
        return m->work->ident;
    }
    return in_list(m, i, n); /* relu, pool, bn and flatten keep their input's channels */
}

static const int *in_list(const nn_model *m, int i, int *n)
{
    if (i == 0) {
        *n = m->arch.l[0].c; /* the data's channels are never narrowed */
        return m->work->ident;
    }
    return out_list(m, i - 1, n);
}

/* A list is usable in place when it is a contiguous ascending range. */
static int contiguous(const int *list, int n)
{
    for (int j = 1; j < n; j++)
        if (list[j] != list[0] + j) return 0;
    return 1;
}

/* A conv layer keeps its unfolded (im2col) or transformed (Winograd) input from forward to
 * backward, saving the work of a second pass, when that is at most this many floats for the
 * whole batch; else backward recomputes it in cache-sized chunks. */
#define NN_KEEP_FLOATS (4L << 20)

/* Floats a conv layer keeps at batch B, for whichever input channel count a narrowing feeds it */
static size_t kept_floats(const nn_layer *l, int B)
{
    size_t n = 0;
    for (int c = 1; c <= l->c; c++) {
        size_t k = nn_conv_kept(B, c, l->h, l->w, l->k, l->s, l->p);
        if (k > n) n = k;
    }
    return n;
}

static int keep_conv(const nn_layer *l, int B)
{
    return kept_floats(l, B) <= (size_t)NN_KEEP_FLOATS;
}

static size_t max_sz(size_t a, size_t b)
{
    return a > b ? a : b;
}

void nn_model_init(nn_model *m, const nn_arch *a, int max_batch)
{
    assert(max_batch > 0 && a->n > 0);
    memset(m, 0, sizeof *m);
    m->arch = *a;
    m->max_batch = max_batch;
    m->narrow_scale = 1.0f;
    size_t nf = a->layout.n_floats;
    m->params = sim_xcalloc(3 * nf, sizeof(float));
    m->grads = m->params + nf;
    m->mom = m->params + 2 * nf;
    m->live = sim_xcalloc(nf, 1);
    nn_work *w = sim_xcalloc(1, sizeof *w);
    m->work = w;

    /* One block for all batch-sized buffers, sized for the full width. */
    size_t B = (size_t)max_batch, total = 0, dmax = (size_t)a->classes * B, colmax = 0, xo = 0;
    int widest = a->in_c;
    size_t off[NN_MAX_LAYERS], xh[NN_MAX_LAYERS], is[NN_MAX_LAYERS];
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        size_t in = (size_t)l->c * l->h * l->w * B, out = (size_t)l->oc * l->oh * l->ow * B;
        off[i] = total;
        total += out;
        dmax = max_sz(dmax, max_sz(in, out));
        if (l->oc > widest) widest = l->oc;
        if (l->c > widest) widest = l->c;
        /* the unfolding chunk depends on the channels a narrowed model feeds the layer, and a
         * narrower input can take a larger chunk: size for every count up to the full one */
        for (int c = 1; l->op == NN_CONV && c <= l->c; c++)
            colmax = max_sz(colmax,
                            nn_conv_scratch(max_batch, c, l->h, l->w, l->oc, l->k, l->s, l->p));
        if (l->op == NN_BATCHNORM) {
            xh[i] = total;
            total += in;
            is[i] = total;
            total += (size_t)l->c;
        }
        if (l->op == NN_CONV && keep_conv(l, max_batch))
            w->kept[i] = sim_xmalloc(sizeof(float) * kept_floats(l, max_batch));
    }
    if (a->l[0].op == NN_CONV && a->in_c > 1) {
        xo = total;
        total += (size_t)a->in_c * a->in_h * a->in_w * B;
    }
    size_t d0 = total, d1 = d0 + dmax, col = d1 + dmax;
    total = col + colmax;
    w->block = sim_xcalloc(total, sizeof(float));
    for (int i = 0; i < a->n; i++) {
        w->out[i] = w->block + off[i];
        if (a->l[i].op == NN_BATCHNORM) {
            w->xhat[i] = w->block + xh[i];
            w->invstd[i] = w->block + is[i];
        }
    }
    w->d0 = w->block + d0;
    w->d1 = w->block + d1;
    w->col = w->block + col;
    w->x0 = xo ? w->block + xo : NULL;
    w->ident = sim_xmalloc(sizeof(int) * (size_t)widest);
    for (int j = 0; j < widest; j++)
        w->ident[j] = j;
    w->scratch_list = sim_xmalloc(sizeof(int) * (size_t)widest);
    nn_model_reset_narrowing(m);
}

void nn_model_destroy(nn_model *m)
{
    if (!m || !m->work) return;
    nn_work *w = m->work;
    for (int i = 0; i < NN_MAX_LAYERS; i++) {
        free(w->kept[i]);
        free(w->wg[i]);
        free(w->dwg[i]);
        free(w->rl[i]);
        free(w->vg[i]);
        free(m->list[i]);
    }
    free(w->ident);
    free(w->scratch_list);
    free(w->block);
    free(w->run_t);
    free(w);
    free(m->params);
    free(m->live);
    free(m->runs);
    memset(m, 0, sizeof *m);
}

void nn_model_init_params(nn_model *m, sim_rng *r)
{
    const nn_arch *a = &m->arch;
    memset(m->params, 0, sizeof(float) * a->layout.n_floats);
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        if (is_param(l)) {
            const nn_tensor *t = &a->layout.t[l->wt];
            double bound = 1.0 / sqrt((double)t->cols); /* fan_in = in·k·k */
            for (size_t j = 0; j < (size_t)t->rows * t->cols; j++)
                m->params[t->off + j] = (float)((2 * sim_rng_uniform(r) - 1) * bound);
            if (l->bt >= 0) {
                const nn_tensor *b = &a->layout.t[l->bt];
                for (int j = 0; j < b->rows; j++)
                    m->params[b->off + j] = (float)((2 * sim_rng_uniform(r) - 1) * bound);
            }
        } else if (l->op == NN_BATCHNORM) {
            for (int j = 0; j < l->c; j++) {
                m->params[a->layout.t[l->wt].off + j] = 1.0f;
                m->params[a->layout.t[l->rvt].off + j] = 1.0f;
            }
        }
    }
    memset(m->mom, 0, sizeof(float) * a->layout.n_floats);
}

void nn_model_init_fit_live(nn_model *m)
{
    const nn_arch *a = &m->arch;
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        if (!is_param(l)) continue;
        const nn_tensor *t = &a->layout.t[l->wt];
        for (int r = 0; r < t->rows; r++) {
            const uint8_t *live = m->live + t->off + (size_t)r * t->cols;
            int f = 0;
            for (int j = 0; j < t->cols; j++)
                f += live[j];
            if (f == 0 || f == t->cols) continue;
            /* U(±1/√cols) scaled by √(cols/f) is U(±1/√f) */
            float g = (float)sqrt((double)t->cols / f);
            float *w = m->params + t->off + (size_t)r * t->cols;
            for (int j = 0; j < t->cols; j++)
                if (live[j]) w[j] *= g;
            if (l->bt >= 0) m->params[a->layout.t[l->bt].off + r] *= g;
        }
    }
}

/* Whether run r lies in a tensor marked in skip (NULL: none). */
static int run_skipped(const nn_model *m, size_t r, const uint8_t *skip)
{
    return skip && skip[m->work->run_t[r]];
}

static void zero_runs(nn_model *m, const uint8_t *skip)
{
    for (size_t r = 0; r < m->n_runs; r++)
        if (!run_skipped(m, r, skip))
            memset(m->grads + m->runs[r][0], 0, sizeof(float) * m->runs[r][1]);
}

void nn_model_zero_grad(nn_model *m)
{
    zero_runs(m, NULL);
}

/* ---------------------------------------------------------------------------------------- */
/* narrowing */

/* Recompute the live map (and the runs) from the lists and masks, leaving gradients alone. */
static void refresh_map(nn_model *m)
{
    const nn_arch *a = &m->arch;
    memset(m->live, 0, a->layout.n_floats);
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        int ni, no;
        const int *il = in_list(m, i, &ni), *ol = out_list(m, i, &no);
        if (is_param(l)) {
            const nn_tensor *t = &a->layout.t[l->wt];
            int run = l->op == NN_CONV ? l->k * l->k : l->blk;
            const uint8_t *mask = m->emask[l->wt];
            for (int r = 0; r < no; r++)
                for (int j = 0; j < ni; j++) {
                    size_t base = (size_t)ol[r] * t->cols + (size_t)il[j] * run;
                    uint8_t *lv = m->live + t->off + base;
                    if (!mask)
                        memset(lv, 1, (size_t)run);
                    else
                        for (int q = 0; q < run; q++)
                            lv[q] = mask[base + q] != 0;
                }
            if (l->bt >= 0)
                for (int r = 0; r < no; r++)
                    m->live[a->layout.t[l->bt].off + ol[r]] = 1;
        } else if (l->op == NN_BATCHNORM) {
            int tt[4] = {l->wt, l->bt, l->rmt, l->rvt};
            for (int q = 0; q < 4; q++)
                for (int r = 0; r < ni; r++)
                    m->live[a->layout.t[tt[q]].off + il[r]] = 1;
        }
    }
    /* Live stretches of trainable tensors, for SGD and zero_grad. */
    m->n_runs = 0;
    size_t cap = 64;
    nn_work *w = m->work;
    free(m->runs);
    free(w->run_t);
    m->runs = sim_xmalloc(sizeof *m->runs * cap);
    w->run_t = sim_xmalloc(cap);
    for (int ti = 0; ti < a->layout.n; ti++) {
        const nn_tensor *t = &a->layout.t[ti];
        if (!t->trainable) continue;
        size_t end = t->off + (size_t)t->rows * t->cols;
        for (size_t j = t->off; j < end;) {
            /* live bytes are 0 or 1: memchr finds a run's start, 8 ones at a time its end */
            const uint8_t *lv = m->live, *start = memchr(lv + j, 1, end - j);
            if (!start) break;
            j = (size_t)(start - lv);
            size_t k = j;
            for (uint64_t word; k + 8 <= end; k += 8) {
                memcpy(&word, lv + k, 8);
                if (word != 0x0101010101010101u) break;
            }
            while (k < end && lv[k])
                k++;
            if (m->n_runs == cap) {
                m->runs = sim_xrealloc(m->runs, sizeof *m->runs * (cap *= 2));
                w->run_t = sim_xrealloc(w->run_t, cap);
            }
            m->runs[m->n_runs][0] = (uint32_t)j;
            m->runs[m->n_runs][1] = (uint32_t)(k - j);
            w->run_t[m->n_runs] = (uint8_t)ti;
            m->n_runs++;
            j = k;
        }
    }
}

/* The live map, then zero gradients: outside the live set they stay zero from here on, since
 * backward never writes them. */
static void refresh(nn_model *m)
{
    refresh_map(m);
    memset(m->grads, 0, sizeof(float) * m->arch.layout.n_floats);
}

static void set_list(nn_model *m, int li, const int *idx, int n)
{
    free(m->list[li]);
    m->list[li] = sim_xmalloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    memcpy(m->list[li], idx, sizeof(int) * (size_t)n);
    m->nlist[li] = n;
}

/* The lists of width p (see nn_model_set_width), without refreshing. */
static void width_lists(nn_model *m, double p, long shift)
{
    assert(p > 0 && p <= 1);
    const nn_arch *a = &m->arch;
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        if (!l->narrow) continue;
        int C = l->oc, n = width_channels(p, C);
        int start = (int)(shift % C);
        int *idx = sim_xmalloc(sizeof(int) * (size_t)n);
        for (int j = 0; j < n; j++)
            idx[j] = (start + j) % C;
        set_list(m, i, idx, n);
        free(idx);
    }
}

void nn_model_set_width(nn_model *m, double p, long shift)
{
    width_lists(m, p, shift);
    refresh(m);
}

void nn_model_nest_width(nn_model *m, double p)
{
    width_lists(m, p, 0);
    refresh_map(m);
}

void nn_model_set_rows(nn_model *m, int li, const uint8_t *keep)
{
    const nn_layer *l = &m->arch.l[li];
    assert(l->narrow && "only hidden conv/linear layers take row masks");
    int *idx = sim_xmalloc(sizeof(int) * (size_t)l->oc), n = 0;
    for (int j = 0; j < l->oc; j++)
        if (keep[j]) idx[n++] = j;
    set_list(m, li, idx, n);
    free(idx);
    refresh(m);
}

void nn_model_set_row_masks(nn_model *m, const uint8_t *const *keep)
{
    const nn_arch *a = &m->arch;
    int *idx = m->work->scratch_list, changed = 0;
    for (int li = 0; li < a->n; li++) {
        const nn_layer *l = &a->l[li];
        if (!l->narrow) continue;
        int n = 0;
        for (int j = 0; j < l->oc; j++)
            if (!keep[li] || keep[li][j]) idx[n++] = j;
        if (m->list[li] && m->nlist[li] == n && !memcmp(m->list[li], idx, sizeof(int) * (size_t)n))
            continue;
        set_list(m, li, idx, n);
        changed = 1;
    }
    if (changed || m->n_runs == 0) refresh(m);
}

void nn_model_set_mask(nn_model *m, int ti, const uint8_t *mask)
{
    assert(ti >= 0 && ti < m->arch.layout.n);
    m->emask[ti] = mask;
    refresh(m);
}

void nn_model_set_masks(nn_model *m, const uint8_t *const *masks)
{
    for (int t = 0; t < m->arch.layout.n; t++)
        m->emask[t] = masks[t];
    refresh(m);
}

void nn_model_reset_narrowing(nn_model *m)
{
    int narrowed = m->n_runs == 0; /* never refreshed yet */
    for (int i = 0; i < NN_MAX_LAYERS; i++)
        narrowed |= m->list[i] != NULL;
    for (int t = 0; t < NN_MAX_TENSORS; t++)
        narrowed |= m->emask[t] != NULL;
    if (!narrowed) return; /* already dense: refreshing would only cost O(n_floats) */
    for (int i = 0; i < NN_MAX_LAYERS; i++) {
        free(m->list[i]);
        m->list[i] = NULL;
        m->nlist[i] = 0;
    }
    for (int t = 0; t < NN_MAX_TENSORS; t++)
        m->emask[t] = NULL;
    refresh(m);
}

const float *nn_model_features(const nn_model *m)
{
    const nn_arch *a = &m->arch;
    assert(a->n >= 2 && a->l[a->n - 1].op == NN_LINEAR);
    return m->work->out[a->n - 2];
}

double nn_model_unit_density(const nn_model *m)
{
    double s = 0;
    int n = 0;
    for (int i = 0; i < m->arch.n; i++) {
        const nn_layer *l = &m->arch.l[i];
        if (!is_param(l)) continue;
        s += m->list[i] ? (double)m->nlist[i] / l->oc : 1.0;
        n++;
    }
    return n ? s / n : 1.0;
}

size_t nn_model_live_count(const nn_model *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->arch.layout.n_floats; i++)
        n += m->live[i];
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* forward and backward */

/* FLOPs of one GEMM pass of conv/linear layer i at batch B with ni of its input and no of its
 * output channels active: forward, the weight gradient and the input gradient each cost this. */
static double gemm_flops(const nn_layer *l, int ni, int no, int B)
{
    double run = l->op == NN_CONV ? (double)l->k * l->k : (double)l->blk;
    return 2.0 * no * ni * run * B * l->oh * l->ow;
}

/* Non-zero bytes among p[0..n) (a loop the compiler vectorizes). */
static size_t count_nz(const uint8_t *p, size_t n)
{
    size_t c = 0;
    for (size_t j = 0; j < n; j++)
        c += p[j] != 0;
    return c;
}

/* Fraction of non-zero element-mask entries in the weight block layer i uses (1: no mask). */
static double block_density(const nn_model *m, int i)
{
    const nn_layer *l = &m->arch.l[i];
    const uint8_t *mask = m->emask[l->wt];
    if (!mask) return 1.0;
    const nn_tensor *t = &m->arch.layout.t[l->wt];
    int ni, no;
    const int *il = in_list(m, i, &ni), *ol = out_list(m, i, &no);
    int run = l->op == NN_CONV ? l->k * l->k : l->blk;
    size_t nnz = 0, n = (size_t)no * ni * run;
    for (int r = 0; r < no; r++)
        for (int j = 0; j < ni; j++)
            nnz += count_nz(mask + (size_t)ol[r] * t->cols + (size_t)il[j] * run, (size_t)run);
    return n ? (double)nnz / n : 1.0;
}

/* The activation floats layer i writes in a forward (back 0) or backward pass at batch B, as
 * nn_cost.bytes defines them. */
static double act_floats(const nn_model *m, int i, int B, int back)
{
    const nn_layer *l = &m->arch.l[i];
    int ni, no;
    in_list(m, i, &ni);
    out_list(m, i, &no);
    double in = (double)B * ni * (l->op == NN_LINEAR ? l->blk : l->h * l->w);
    double unfold = l->op == NN_CONV ? (double)B * ni * l->k * l->k * l->oh * l->ow : 0;
    if (back) return l->op == NN_RELU ? in : i ? in + unfold : 0;
    switch (l->op) {
    case NN_CONV:
        return unfold + (double)B * no * l->oh * l->ow;
    case NN_LINEAR:
        return (double)B * no;
    case NN_MAXPOOL:
        return (double)B * ni * l->oh * l->ow;
    default:
        return in; /* ReLU, flatten, batch norm */
    }
}

#define NN_COST_ROW(name, work) {#name, offsetof(nn_cost, name), work},
const nn_cost_term nn_cost_terms[NN_COST_N] = {NN_COST_TERMS(NN_COST_ROW)};
#undef NN_COST_ROW

void nn_cost_add(nn_cost *to, const nn_cost *c, double k)
{
    for (int i = 0; i < NN_COST_N; i++)
        if (nn_cost_terms[i].work) *nn_cost_at(to, i) += k * nn_cost_get(c, i);
}

void nn_cost_add_diff(nn_cost *to, const nn_cost *now, const nn_cost *before)
{
    for (int i = 0; i < NN_COST_N; i++)
        *nn_cost_at(to, i) += nn_cost_get(now, i) - nn_cost_get(before, i);
}

static void add_cost(nn_cost *c, double flops, int masked, double density)
{
    c->flops += flops;
    if (masked) {
        c->flops_masked += flops;
        c->flops_masked_nnz += flops * density;
    }
}

/* The (O', I'·run) weight block layer i uses: in place or gathered (times its element mask).
 * Gathering leaves out the output rows the mask drops whole (pFedGate's blocks are mostly whole
 * rows and filters): forward and backward then skip them, and w->rl lists the rows kept. */
static const float *weights_for(nn_model *m, int i, int *ldw)
{
    const nn_layer *l = &m->arch.l[i];
    const nn_tensor *t = &m->arch.layout.t[l->wt];
    nn_work *w = m->work;
    int ni, no;
    const int *il = in_list(m, i, &ni), *ol = out_list(m, i, &no);
    int run = l->op == NN_CONV ? l->k * l->k : l->blk;
    const uint8_t *mask = m->emask[l->wt];
    const float *W = m->params + t->off;
    w->nl[i] = no;
    w->dens[i] = 1.0;
    if (!mask && contiguous(il, ni) && contiguous(ol, no)) {
        w->gathered[i] = 0;
        *ldw = t->cols;
        return W + (no ? (size_t)ol[0] * t->cols : 0) + (ni ? (size_t)il[0] * run : 0);
    }
    if (!w->wg[i]) {
        w->wg[i] = sim_xmalloc(sizeof(float) * (size_t)t->rows * t->cols);
        w->dwg[i] = sim_xmalloc(sizeof(float) * (size_t)t->rows * t->cols);
        w->rl[i] = sim_xmalloc(sizeof(int) * (size_t)l->oc);
    }
    float *g = w->wg[i];
    size_t ld = (size_t)ni * run, nnz = 0;
    int nl = 0, whole = contiguous(il, ni); /* a row's inputs in one stretch */
    for (int r = 0; r < no; r++) {
        size_t kept = 0;
        for (int j = 0; j < ni; j += whole ? ni : 1) {
            size_t src = (size_t)ol[r] * t->cols + (size_t)il[j] * run;
            size_t n = whole ? ld : (size_t)run, c = mask ? count_nz(mask + src, n) : n;
            float *dst = g + nl * ld + (size_t)j * run;
            if (c == n)
                memcpy(dst, W + src, sizeof(float) * n);
            else if (c)
                for (size_t q = 0; q < n; q++)
                    dst[q] = mask[src + q] ? W[src + q] : 0.0f;
            else if (!whole) /* a dropped stretch of a row that may stay (a whole one goes) */
                memset(dst, 0, sizeof(float) * n);
            kept += c;
        }
        nnz += kept;
        if (kept) w->rl[i][nl++] = r;
    }
    w->dens[i] = mask && no && ni ? (double)nnz / ((double)no * ld) : 1.0;
    w->nl[i] = nl;
    w->gathered[i] = 1;
    *ldw = (int)ld;
    return g;
}

/* Rows of a layer that skipped its dropped output rows, in y laid out (nb, no, len): the nl kept
 * rows sit compact at the front as (nb, nl, len); spread them to their places (row rl[k]) and
 * fill the dropped ones with their bias b (per row; 0 without), whose output they are. */
static void expand_rows(float *y, int nb, int no, size_t len, const int *rl, int nl, const float *b)
{
    for (int s = nb - 1; s >= 0; s--) { /* backwards: no row lands on one not yet moved */
        const float *src = y + (size_t)s * nl * len;
        float *dst = y + (size_t)s * no * len;
        for (int r = no - 1, k = nl - 1; r >= 0; r--) {
            if (k >= 0 && rl[k] == r) {
                memmove(dst + r * len, src + k * len, sizeof(float) * len);
                k--;
            } else {
                float v = b ? b[r] : 0.0f;
                for (size_t j = 0; j < len; j++)
                    dst[r * len + j] = v;
            }
        }
    }
}

/* The converse for a gradient dy (nb, no, len): its kept rows compact at the front. */
static void compact_rows(float *dy, int nb, int no, size_t len, const int *rl, int nl)
{
    for (int s = 0; s < nb; s++)
        for (int k = 0; k < nl; k++)
            memmove(dy + ((size_t)s * nl + k) * len, dy + ((size_t)s * no + rl[k]) * len,
                    sizeof(float) * len);
}

/* Scatter-add the compact weight gradient of layer i into grads (masked entries get nothing). */
static void scatter_dw(nn_model *m, int i)
{
    const nn_layer *l = &m->arch.l[i];
    const nn_tensor *t = &m->arch.layout.t[l->wt];
    int ni, no;
    const int *il = in_list(m, i, &ni), *ol = out_list(m, i, &no);
    int run = l->op == NN_CONV ? l->k * l->k : l->blk;
    const uint8_t *mask = m->emask[l->wt];
    const float *g = m->work->dwg[i];
    float *G = m->grads + t->off;
    size_t ld = (size_t)ni * run;
    for (int k = 0; k < m->work->nl[i]; k++)
        for (int j = 0; j < ni; j++) {
            size_t dst = (size_t)ol[m->work->rl[i][k]] * t->cols + (size_t)il[j] * run;
            const float *src = g + k * ld + (size_t)j * run;
            for (int q = 0; q < run; q++)
                if (!mask || mask[dst + q]) G[dst + q] += src[q];
        }
}

/* Per-channel vector v (tensor ti) restricted to the active list: in place or gathered. */
static float *vec_for(nn_model *m, int ti, const int *list, int n, float *scratch)
{
    float *v = m->params + m->arch.layout.t[ti].off;
    if (contiguous(list, n)) return v + (n ? list[0] : 0);
    for (int j = 0; j < n; j++)
        scratch[j] = v[list[j]];
    return scratch;
}

static float *vec_scratch(nn_model *m, int i, int C)
{
    if (!m->work->vg[i]) m->work->vg[i] = sim_xcalloc(8 * (size_t)C, sizeof(float));
    return m->work->vg[i];
}

float nn_model_forward(nn_model *m, const float *x, const int32_t *y, int B, int train)
{
    assert(B > 0 && B <= m->max_batch);
    const nn_arch *a = &m->arch;
    nn_work *w = m->work;
    w->in = x;
    w->y = y;
    w->B = B;
    w->scaled = m->narrow_scale;
    const float *in = x;
    if (a->l[0].op == NN_CONV && a->in_c > 1) {
        nn_transpose_bcn(w->x0, x, B, a->in_c, a->in_h * a->in_w);
        in = w->x0;
    }
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        float *out = w->out[i];
        int ni, no;
        const int *il = in_list(m, i, &ni), *ol = out_list(m, i, &no);
        if (is_param(l)) {
            int ldw;
            const float *wp = weights_for(m, i, &ldw);
            w->wp[i] = wp;
            w->ldw[i] = ldw;
            const float *bp = NULL, *bk; /* biases of the active rows, and of those computed */
            if (l->bt >= 0) bp = vec_for(m, l->bt, ol, no, vec_scratch(m, i, l->oc));
            int nl = w->nl[i], conv = l->op == NN_CONV;
            bk = bp;
            if (nl < no && bp) {
                float *sc = vec_scratch(m, i, l->oc) + 2 * l->oc;
                for (int k = 0; k < nl; k++)
                    sc[k] = bp[w->rl[i][k]];
                bk = sc;
            }
            if (nl && conv)
                nn_conv_forward(out, w->kept[i], w->col, in, wp, ldw, bk, B, ni, l->h, l->w, nl,
                                l->k, l->s, l->p);
            else if (nl)
                nn_linear_forward(out, in, wp, ldw, bk, B, ni * l->blk, nl);
            if (nl < no)
                expand_rows(out, conv ? 1 : B, no, conv ? (size_t)B * l->oh * l->ow : 1, w->rl[i],
                            nl, bp);
            add_cost(&m->cost, gemm_flops(l, ni, no, B), m->emask[l->wt] != NULL, w->dens[i]);
            if (l->narrow && w->scaled != 1.0f) scale_f32(out, w->scaled, out_floats(l, no, B));
        } else if (l->op == NN_RELU) {
            nn_relu_forward(out, in, (long)B * ni * l->h * l->w);
        } else if (l->op == NN_MAXPOOL) {
            nn_maxpool2_forward(out, in, ni * B, l->h, l->w);
        } else if (l->op == NN_FLATTEN) {
            nn_transpose_bcn(out, in, ni, B, l->h * l->w);
        } else if (l->op == NN_BATCHNORM) {
            float *sc = vec_scratch(m, i, l->c);
            float *g = vec_for(m, l->wt, il, ni, sc), *b = vec_for(m, l->bt, il, ni, sc + l->c);
            float *rm = vec_for(m, l->rmt, il, ni, sc + 2 * l->c);
            float *rv = vec_for(m, l->rvt, il, ni, sc + 3 * l->c);
            nn_bn_forward(out, w->xhat[i], w->invstd[i], in, g, b, rm, rv, B, ni, train, 0.1f,
                          1e-5f);
            if (rm == sc + 2 * l->c)
                for (int j = 0; j < ni; j++) {
                    m->params[a->layout.t[l->rmt].off + il[j]] = rm[j];
                    m->params[a->layout.t[l->rvt].off + il[j]] = rv[j];
                }
        }
        m->cost.bytes += 4 * act_floats(m, i, B, 0);
        in = out;
    }
    m->logits = w->out[a->n - 1];
    if (!y) return 0.0f;
    double sq;
    m->loss = nn_softmax_xent_sq(train ? w->d0 : NULL, m->logits, y, B, a->classes, &sq);
    if (train) {            /* what a client reports of its samples' losses (nn_cost.loss_sq) */
        if (isfinite(sq)) { /* a diverged batch: the job's mean loss says so (cost terms are
                               finite numbers, as the result frame checks) */
            m->cost.loss_sq += sq;
            m->cost.loss_n += B;
        }
    }
    return m->loss;
}

float nn_model_forward_soft(nn_model *m, const float *x, const float *q, int B)
{
    nn_model_forward(m, x, NULL, B, 1);
    m->loss = nn_softmax_xent_soft(m->work->d0, m->logits, q, B, m->arch.classes);
    return m->loss;
}

/* Whether layer i takes its step opt inside backward: a linear layer whose weights the last
 * forward used in place, trainable, at a size and batch nn_linear_step_fuses, without clipping. */
static int step_fuses(const nn_model *m, int i, const nn_sgd *opt)
{
    const nn_layer *l = &m->arch.l[i];
    if (opt->clip_norm > 0 || l->op != NN_LINEAR || m->work->gathered[i] || m->grad_out[i] ||
        !m->arch.layout.t[l->wt].trainable)
        return 0;
    int ni, no;
    in_list(m, i, &ni);
    out_list(m, i, &no);
    return nn_linear_step_fuses(m->work->B, ni * l->blk, no);
}

/* nn_model_backward; with opt, the layers whose weight tensor is marked in fused (step_fuses)
 * take their step here, from their weight gradient before it is ever stored (their gradients
 * stay untouched). */
static void backward(nn_model *m, const nn_sgd *opt, const uint8_t *fused)
{
    const nn_arch *a = &m->arch;
    nn_work *w = m->work;
    int B = w->B;
    float *dy = w->d0, *dx = w->d1;
    for (int i = a->n - 1; i >= 0; i--) {
        const nn_layer *l = &a->l[i];
        const float *in = i ? w->out[i - 1] : (w->x0 && l->op == NN_CONV ? w->x0 : w->in);
        int ni, no;
        const int *il = in_list(m, i, &ni), *ol = out_list(m, i, &no);
        float *dxp = i ? dx : NULL;
        m->cost.bytes += 4 * act_floats(m, i, B, 1);
        if (is_param(l) && l->narrow && w->scaled != 1.0f) /* out = s·z: dz = s·dout */
            scale_f32(dy, w->scaled, out_floats(l, no, B));
        if (is_param(l)) {
            const nn_tensor *t = &a->layout.t[l->wt];
            float *dw;
            int lddw, nl = w->nl[i], conv = l->op == NN_CONV;
            if (w->gathered[i]) {
                lddw = w->ldw[i];
                dw = w->dwg[i];
                memset(dw, 0, sizeof(float) * (size_t)nl * lddw);
            } else {
                lddw = t->cols;
                dw = m->grads + (w->wp[i] - m->params);
            }
            float *db = NULL;
            int db_gathered = 0;
            if (l->bt >= 0) {
                if (contiguous(ol, no)) {
                    db = m->grads + a->layout.t[l->bt].off + (no ? ol[0] : 0);
                } else {
                    db = vec_scratch(m, i, l->oc) + l->oc;
                    memset(db, 0, sizeof(float) * (size_t)no);
                    db_gathered = 1;
                }
            }
            float *dbk = db; /* the bias gradient of the rows computed */
            if (nl < no) {   /* dropped rows: their bias has a gradient, their weights none */
                int nb = conv ? 1 : B;
                size_t len = conv ? (size_t)B * l->oh * l->ow : 1;
                if (db) {
                    for (int r = 0, k = 0; r < no; r++) {
                        if (k < nl && w->rl[i][k] == r) {
                            k++;
                            continue;
                        }
                        double sum = 0;
                        for (int s = 0; s < nb; s++)
                            for (size_t j = 0; j < len; j++)
                                sum += (double)dy[((size_t)s * no + r) * len + j];
                        db[r] += (float)sum;
                    }
                    dbk = vec_scratch(m, i, l->oc) + 3 * l->oc;
                    memset(dbk, 0, sizeof(float) * (size_t)nl);
                }
                compact_rows(dy, nb, no, len, w->rl[i], nl);
            }
            if (!nl) {
                if (dxp) memset(dxp, 0, sizeof(float) * (size_t)B * ni * l->blk * l->h * l->w);
            } else if (conv) {
                nn_conv_backward(dxp, dw, lddw, dbk, w->kept[i], w->col, dy, in, w->wp[i],
                                 w->ldw[i], B, ni, l->h, l->w, nl, l->k, l->s, l->p);
            } else if (m->grad_out[i]) { /* the caller takes dy; no dW */
                assert(nl == no && !w->gathered[i]);
                memcpy(m->grad_out[i], dy, sizeof(float) * (size_t)B * no);
                nn_linear_backward(dxp, NULL, 0, dbk, dy, in, w->wp[i], w->ldw[i], B, ni * l->blk,
                                   no);
            } else if (fused && fused[l->wt]) {
                size_t off = (size_t)(w->wp[i] - m->params);
                nn_linear_backward(dxp, NULL, 0, db, dy, in, w->wp[i], w->ldw[i], B, ni * l->blk,
                                   no);
                nn_linear_step(m->params + off, m->mom + off, w->ldw[i], dy, in, B, ni * l->blk, no,
                               opt->lr, opt->momentum, opt->weight_decay);
            } else {
                nn_linear_backward(dxp, dw, lddw, dbk, dy, in, w->wp[i], w->ldw[i], B, ni * l->blk,
                                   nl);
            }
            for (int k = 0; dbk != db && k < nl; k++)
                db[w->rl[i][k]] += dbk[k];
            add_cost(&m->cost, gemm_flops(l, ni, no, B) * (!!dxp + !m->grad_out[i]),
                     m->emask[l->wt] != NULL, w->dens[i]);
            if (w->gathered[i]) scatter_dw(m, i);
            if (db_gathered)
                for (int r = 0; r < no; r++)
                    m->grads[a->layout.t[l->bt].off + ol[r]] += db[r];
        } else if (l->op == NN_RELU) {
            nn_relu_backward(dy, dy, w->out[i], (long)B * ni * l->h * l->w);
            continue; /* in place: dy stays the current gradient */
        } else if (l->op == NN_MAXPOOL) {
            if (dxp) nn_maxpool2_backward(dxp, dy, in, w->out[i], ni * B, l->h, l->w);
        } else if (l->op == NN_FLATTEN) {
            if (dxp) nn_transpose_bcn(dxp, dy, B, ni, l->h * l->w);
        } else if (l->op == NN_BATCHNORM) {
            float *sc = vec_scratch(m, i, l->c);
            const float *g = vec_for(m, l->wt, il, ni, sc);
            float *dg = sc + 4 * l->c, *dbb = sc + 5 * l->c;
            memset(dg, 0, sizeof(float) * 2 * (size_t)l->c);
            nn_bn_backward(dxp, dg, dbb, dy, w->xhat[i], w->invstd[i], g, B, ni);
            for (int j = 0; j < ni; j++) {
                m->grads[a->layout.t[l->wt].off + il[j]] += dg[j];
                m->grads[a->layout.t[l->bt].off + il[j]] += dbb[j];
            }
        }
        float *t = dy;
        dy = dx;
        dx = t;
    }
}

void nn_model_backward(nn_model *m)
{
    backward(m, NULL, NULL);
}

/* nn_model_sgd_step over the runs outside the tensors marked in skip (NULL: none). */
static float sgd_runs(nn_model *m, const nn_sgd *opt, const uint8_t *skip)
{
    float norm = 0, scale = 1.0f;
    if (opt->clip_norm > 0) {
        double ss = 0;
        for (size_t r = 0; r < m->n_runs; r++)
            ss += nn_sumsq(m->grads + m->runs[r][0], m->runs[r][1]);
        norm = (float)sqrt(ss);
        if (norm > opt->clip_norm) scale = opt->clip_norm / norm;
    }
    float lr = opt->lr, mu = opt->momentum, wd = opt->weight_decay;
    for (size_t r = 0; r < m->n_runs; r++) {
        if (run_skipped(m, r, skip)) continue;
        size_t off = m->runs[r][0];
        float *restrict p = m->params + off, *restrict v = m->mom + off;
        const float *restrict g = m->grads + off;
        if (mu == 0) /* plain SGD: v would only hold d, which nothing reads (momentum is per job) */
            for (uint32_t j = 0; j < m->runs[r][1]; j++)
                p[j] -= lr * (g[j] * scale + wd * p[j]);
        else
            for (uint32_t j = 0; j < m->runs[r][1]; j++) {
                float d = g[j] * scale + wd * p[j];
                v[j] = mu * v[j] + d;
                p[j] -= lr * v[j];
            }
    }
    return norm;
}

float nn_model_sgd_step(nn_model *m, const nn_sgd *opt)
{
    return sgd_runs(m, opt, NULL);
}

/* The gradients are zeroed after the forward (which leaves them alone), once it is known which
 * layers take their step inside backward: theirs are neither zeroed nor stepped here. */
void nn_model_backward_step(nn_model *m, const nn_sgd *opt)
{
    uint8_t fused[NN_MAX_TENSORS] = {0};
    for (int i = 0; i < m->arch.n; i++)
        if (step_fuses(m, i, opt)) fused[m->arch.l[i].wt] = 1;
    zero_runs(m, fused);
    backward(m, opt, fused);
    sgd_runs(m, opt, fused);
}

float nn_model_train_step(nn_model *m, const nn_sgd *opt, const float *x, const int32_t *y, int B)
{
    float loss = nn_model_forward(m, x, y, B, 1);
    nn_model_backward_step(m, opt);
    m->cost.samples += B;
    return loss;
}

int nn_model_evaluate(nn_model *m, const float *x, const int32_t *y, int n, double *loss)
{
    int feat = m->arch.in_c * m->arch.in_h * m->arch.in_w, K = m->arch.classes, correct = 0;
    double sum = 0;
    for (int s = 0; s < n; s += m->max_batch) {
        int B = n - s < m->max_batch ? n - s : m->max_batch;
        sum += (double)nn_model_forward(m, x + (size_t)s * feat, y + s, B, 0) * B;
        for (int b = 0; b < B; b++) {
            const float *z = m->logits + (size_t)b * K;
            int best = 0;
            for (int j = 1; j < K; j++)
                if (z[j] > z[best]) best = j;
            correct += best == y[s + b];
        }
    }
    if (loss) *loss = n ? sum / n : 0;
    return correct;
}

/* forward (train 0) or forward + backward (train 1) of every layer */
static void model_cost(const nn_model *m, int B, int train, nn_cost *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < m->arch.n; i++) {
        const nn_layer *l = &m->arch.l[i];
        c->bytes += 4 * (act_floats(m, i, B, 0) + (train ? act_floats(m, i, B, 1) : 0));
        if (!is_param(l)) continue;
        int ni, no;
        in_list(m, i, &ni);
        out_list(m, i, &no);
        int masked = m->emask[l->wt] != NULL;
        double dens = block_density(m, i), f = gemm_flops(l, ni, no, B);
        /* forward, dW (unless the caller takes dy instead), and dx except at the input */
        add_cost(c, train ? f * (1 + !m->grad_out[i] + !!i) : f, masked, dens);
    }
    c->samples = B;
}

void nn_model_take_grad_out(nn_model *m, int li, float *buf)
{
    assert(li >= 0 && li < m->arch.n && (!buf || m->arch.l[li].op == NN_LINEAR));
    m->grad_out[li] = buf;
}

const float *nn_model_layer_input(const nn_model *m, int li, int *cols)
{
    assert(m->arch.l[li].op == NN_LINEAR);
    int ni;
    in_list(m, li, &ni);
    *cols = ni * m->arch.l[li].blk;
    return li ? m->work->out[li - 1] : m->work->in;
}

void nn_model_step_cost(const nn_model *m, int B, nn_cost *c)
{
    model_cost(m, B, 1, c);
}

void nn_model_forward_cost(const nn_model *m, int B, nn_cost *c)
{
    model_cost(m, B, 0, c);
}

uint64_t nn_model_pattern(const nn_model *m)
{
    const nn_arch *a = &m->arch;
    const nn_work *w = m->work;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        int ni, no;
        in_list(m, i, &ni);
        out_list(m, i, &no);
        long n = (long)w->B * no * l->oh * l->ow;
        if (l->op == NN_RELU)
            for (long j = 0; j < n; j++)
                h = (h ^ (uint64_t)(w->out[i][j] > 0)) * 1099511628211ull;
        else if (l->op == NN_MAXPOOL) {
            const float *in = w->out[i - 1]; /* a pool never comes first */
            for (long j = 0; j < n; j++) {
                long q = j / (l->oh * l->ow), r = j % (l->oh * l->ow);
                const float *x0 = in + (q * l->h + 2 * (r / l->ow)) * l->w + 2 * (r % l->ow);
                h = (h ^ (uint64_t)nn_maxpool2_argmax(x0, w->out[i][j], l->w)) * 1099511628211ull;
            }
        }
    }
    return h;
}

size_t nn_model_memory_bytes(const nn_model *m, int B)
{
    const nn_arch *a = &m->arch;
    size_t floats = 0, dmax = (size_t)a->classes * B, colmax = 0;
    for (int ti = 0; ti < a->layout.n; ti++) {
        const nn_tensor *t = &a->layout.t[ti];
        size_t live = 0;
        for (size_t j = 0; j < (size_t)t->rows * t->cols; j++)
            live += m->live[t->off + j];
        floats += live * (t->trainable ? 3 : 1); /* param, grad, momentum */
    }
    for (int i = 0; i < a->n; i++) {
        const nn_layer *l = &a->l[i];
        int ni, no;
        in_list(m, i, &ni);
        out_list(m, i, &no);
        size_t in = (size_t)ni * (l->op == NN_LINEAR ? l->blk : l->h * l->w) * B;
        size_t out = (size_t)no * l->oh * l->ow * B;
        floats += out;
        dmax = max_sz(dmax, max_sz(in, out));
        if (l->op == NN_CONV) {
            colmax = max_sz(colmax, nn_conv_scratch(B, ni, l->h, l->w, no, l->k, l->s, l->p));
            if (keep_conv(l, B)) floats += nn_conv_kept(B, ni, l->h, l->w, l->k, l->s, l->p);
        }
        if (l->op == NN_BATCHNORM) floats += in + (size_t)ni;
    }
    floats += 2 * dmax + colmax;
    return floats * sizeof(float);
}
