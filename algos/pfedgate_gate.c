/* algos/pfedgate_gate.c -- pFedGate's gating layer (pfedgate.h; spec 000 §2.4): a client's small
 * network that reads a batch and gives the block importances G and scales M the algorithm
 * (algos/pfedgate.c) selects and scales the model's blocks by. SwitchNorm over the input channels,
 * then one or two paths of FC + BatchNorm1d + sigmoid averaged over the batch; the FC and BN use
 * nn/ops.h's kernels, SwitchNorm is its own (see switchnorm_forward). All its state lives in one
 * float array, so the client's private state is that array.
 */
#include "algos/pfedgate.h"

#include "nn/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Offsets in p: SwitchNorm γ, β (C each), mean and variance mixing logits (3 each); per path the
 * FC weight (L × d_X), its bias, BN γ, β (L each); then the running statistics: SwitchNorm's
 * batch mean and variance (C each), per path BN's (L each). */
typedef struct gate_at {
    size_t sg, sb, mw, vw, w[2], b[2], bg[2], bb[2], srm, srv, rm[2], rv[2];
} gate_at;

static gate_at gate_offsets(const fl_pg_gate *g)
{
    gate_at o;
    size_t dx = (size_t)g->C * g->HW, at = 0, L = (size_t)g->L;
    o.sg = at, at += (size_t)g->C;
    o.sb = at, at += (size_t)g->C;
    o.mw = at, at += 3;
    o.vw = at, at += 3;
    for (int k = 0; k < 2; k++) {
        int q = k < g->paths ? k : 0;
        if (q != k) {
            o.w[k] = o.w[0], o.b[k] = o.b[0], o.bg[k] = o.bg[0], o.bb[k] = o.bb[0];
            continue;
        }
        o.w[k] = at, at += L * dx;
        o.b[k] = at, at += L;
        o.bg[k] = at, at += L;
        o.bb[k] = at, at += L;
    }
    o.srm = at, at += (size_t)g->C;
    o.srv = at, at += (size_t)g->C;
    for (int k = 0; k < 2; k++) {
        int q = k < g->paths ? k : 0;
        if (q != k) {
            o.rm[k] = o.rm[0], o.rv[k] = o.rv[0];
            continue;
        }
        o.rm[k] = at, at += L;
        o.rv[k] = at, at += L;
    }
    return o;
}

/* The work buffers: the normalized input and x̂ (B·d_X each); per (n, c) the mixed mean and
 * 1/σ, and the statistics the mixing weights see (in, ln, bn for mean and variance: 6); per path
 * the FC output, BN x̂ and 1/σ, the sigmoid; and the gradients of the FC output and input. */
typedef struct gate_work {
    float *xn, *xh, *mu, *is, *st, *z[2], *zh[2], *inv[2], *sg[2], *dz, *dxn;
} gate_work;

static gate_work gate_buffers(const fl_pg_gate *g)
{
    gate_work w;
    size_t B = (size_t)g->max_batch, dx = (size_t)g->C * g->HW, L = (size_t)g->L;
    size_t nc = B * (size_t)g->C;
    float *p = g->work;
    w.xn = p, p += B * dx;
    w.xh = p, p += B * dx;
    w.mu = p, p += nc;
    w.is = p, p += nc;
    w.st = p, p += 6 * nc;
    for (int k = 0; k < 2; k++) {
        w.z[k] = p, p += B * L;
        w.zh[k] = p, p += B * L;
        w.inv[k] = p, p += L;
        w.sg[k] = p, p += B * L;
    }
    w.dz = p, p += B * L + L; /* and a spare L after the batch's: see backward */
    w.dxn = p;                /* 2 × B·d_X: one per path */
    return w;
}

void fl_pg_gate_init(fl_pg_gate *g, int C, int HW, int L, int paths, int max_batch, sim_rng *r)
{
    memset(g, 0, sizeof *g);
    g->C = C, g->HW = HW, g->L = L, g->paths = paths, g->max_batch = max_batch;
    size_t dx = (size_t)C * HW, Lz = (size_t)L;
    g->n_params = 2 * (size_t)C + 6 + (size_t)paths * (Lz * dx + 3 * Lz);
    g->n_state = g->n_params + 2 * (size_t)C + (size_t)paths * 2 * Lz;
    g->n_saved = g->n_state + g->n_params;
    g->p = sim_xcalloc(g->n_saved, sizeof(float));
    g->v = g->p + g->n_state;
    g->g = sim_xcalloc(g->n_params, sizeof(float));
    g->G = sim_xcalloc(3 * Lz, sizeof(float));
    g->M = g->G + Lz;
    g->Gsum = g->M + Lz;
    size_t B = (size_t)max_batch, nc = B * (size_t)C;
    g->work = sim_xcalloc(4 * B * dx + 8 * nc + 2 * (3 * B * Lz + Lz) + B * Lz + Lz, sizeof(float));
    gate_at o = gate_offsets(g);
    for (int c = 0; c < C; c++)
        g->p[o.sg + (size_t)c] = 1;
    for (int j = 0; j < 3; j++)
        g->p[o.mw + (size_t)j] = g->p[o.vw + (size_t)j] = 1;
    double bound = 1 / sqrt((double)dx);
    for (size_t j = 0; j < Lz * dx; j++)
        g->p[o.w[0] + j] = (float)((2 * sim_rng_uniform(r) - 1) * bound);
    for (size_t j = 0; j < Lz; j++) {
        g->p[o.b[0] + j] = (float)((2 * sim_rng_uniform(r) - 1) * bound);
        g->p[o.bg[0] + j] = 1;
        g->p[o.rv[0] + j] = 1;
    }
    if (paths == 2) { /* the code's deepcopy: the M path starts as the G path */
        memcpy(g->p + o.w[1], g->p + o.w[0], sizeof(float) * (Lz * dx + 3 * Lz));
        memcpy(g->p + o.rm[1], g->p + o.rm[0], sizeof(float) * 2 * Lz);
    }
}

void fl_pg_gate_free(fl_pg_gate *g)
{
    free(g->p);
    free(g->g);
    free(g->G);
    free(g->work);
    memset(g, 0, sizeof *g);
}

static void softmax3(const float *z, double *w)
{
    double m = fmax(fmax(z[0], z[1]), z[2]), s = 0;
    for (int k = 0; k < 3; k++)
        s += w[k] = exp(z[k] - m);
    for (int k = 0; k < 3; k++)
        w[k] /= s;
}

/* SwitchNorm2d (the code's: eps 1e-5, running statistics with momentum 0.9 from 0, unbiased
 * instance variance): y = γ (x − μ)/√(σ² + eps) + β with μ, σ² a softmax mix of the instance,
 * layer and batch statistics. It stays here, not an nn/ layer: its statistics are summed in
 * double and mixed by two 3-way softmaxes, its backward stops at its own parameters (the input is
 * data), and nothing else uses it. */
static void switchnorm_forward(fl_pg_gate *g, const gate_work *w, const float *x, int B, int train)
{
    gate_at o = gate_offsets(g);
    int C = g->C, HW = g->HW;
    float *st = w->st; /* per (n, c): μ_in, σ²_in, μ_ln, σ²_ln, μ_bn, σ²_bn */
    size_t nc = (size_t)B * C;
    for (int n = 0; n < B; n++)
        for (int c = 0; c < C; c++) {
            const float *xp = x + ((size_t)n * C + c) * HW;
            double s = 0, s2 = 0;
            for (int i = 0; i < HW; i++)
                s += xp[i];
            double m = s / HW;
            for (int i = 0; i < HW; i++)
                s2 += (xp[i] - m) * (xp[i] - m);
            st[(size_t)n * C + c] = (float)m;
            st[nc + (size_t)n * C + c] = (float)(s2 / (HW > 1 ? HW - 1 : 1));
        }
    for (int n = 0; n < B; n++) { /* layer: over the channels of a sample */
        double m = 0, q = 0;
        for (int c = 0; c < C; c++) {
            double mi = st[(size_t)n * C + c];
            m += mi;
            q += st[nc + (size_t)n * C + c] + mi * mi;
        }
        m /= C, q /= C;
        for (int c = 0; c < C; c++) {
            st[2 * nc + (size_t)n * C + c] = (float)m;
            st[3 * nc + (size_t)n * C + c] = (float)(q - m * m);
        }
    }
    for (int c = 0; c < C; c++) { /* batch: over the samples of a channel */
        double m = 0, q = 0;
        if (train) {
            for (int n = 0; n < B; n++) {
                double mi = st[(size_t)n * C + c];
                m += mi;
                q += st[nc + (size_t)n * C + c] + mi * mi;
            }
            m /= B, q = q / B - m * m;
            g->p[o.srm + (size_t)c] = (float)(0.9 * g->p[o.srm + (size_t)c] + 0.1 * m);
            g->p[o.srv + (size_t)c] = (float)(0.9 * g->p[o.srv + (size_t)c] + 0.1 * q);
        } else {
            m = g->p[o.srm + (size_t)c];
            q = g->p[o.srv + (size_t)c];
        }
        for (int n = 0; n < B; n++) {
            st[4 * nc + (size_t)n * C + c] = (float)m;
            st[5 * nc + (size_t)n * C + c] = (float)q;
        }
    }
    double wm[3], wv[3];
    softmax3(g->p + o.mw, wm);
    softmax3(g->p + o.vw, wv);
    for (int n = 0; n < B; n++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            double mu = wm[0] * st[i] + wm[1] * st[2 * nc + i] + wm[2] * st[4 * nc + i];
            double var = wv[0] * st[nc + i] + wv[1] * st[3 * nc + i] + wv[2] * st[5 * nc + i];
            double is = 1 / sqrt(var + 1e-5);
            w->mu[i] = (float)mu;
            w->is[i] = (float)is;
            float gam = g->p[o.sg + (size_t)c], bet = g->p[o.sb + (size_t)c];
            const float *xp = x + i * HW;
            float *h = w->xh + i * HW, *y = w->xn + i * HW;
            for (int k = 0; k < HW; k++) {
                h[k] = (float)((xp[k] - mu) * is);
                y[k] = gam * h[k] + bet;
            }
        }
}

void fl_pg_gate_forward(fl_pg_gate *g, const float *x, int B, int train, double s_min)
{
    gate_at o = gate_offsets(g);
    gate_work w = gate_buffers(g);
    int dx = g->C * g->HW, L = g->L;
    switchnorm_forward(g, &w, x, B, train);
    for (int k = 0; k < g->paths; k++) {
        nn_linear_forward(w.z[k], w.xn, g->p + o.w[k], dx, g->p + o.b[k], B, dx, L);
        nn_bn_forward(w.z[k], w.zh[k], w.inv[k], w.z[k], g->p + o.bg[k], g->p + o.bb[k],
                      g->p + o.rm[k], g->p + o.rv[k], B, L, train, 0.1f, 1e-5f);
        nn_sigmoid_forward(w.sg[k], w.z[k], (long)B * L);
        float *out = k == 0 ? g->Gsum : g->M; /* the batch mean */
        for (int b = 0; b < L; b++)
            out[b] = 0;
        for (int n = 0; n < B; n++)
            for (int b = 0; b < L; b++)
                out[b] += w.sg[k][(size_t)n * L + b] / B;
    }
    if (g->paths == 1) memcpy(g->M, g->Gsum, sizeof(float) * (size_t)L);
    for (int b = 0; b < L; b++)
        g->G[b] = g->Gsum[b] < s_min ? (float)s_min : g->Gsum[b];
    g->B = B;
    g->s_min = s_min;
}

void fl_pg_gate_fix(fl_pg_gate *g, double v)
{
    gate_at o = gate_offsets(g);
    size_t dx = (size_t)g->C * g->HW, L = (size_t)g->L;
    double logit = v >= 1 ? 40 : log(v / (1 - v)); /* σ(40) rounds to 1 in float */
    for (int k = 0; k < g->paths; k++) {
        memset(g->p + o.w[k], 0, sizeof(float) * L * dx);
        for (size_t j = 0; j < L; j++) {
            g->p[o.b[k] + j] = g->p[o.bg[k] + j] = 0;
            g->p[o.bb[k] + j] = (float)logit;
        }
    }
}

void fl_pg_gate_backward(fl_pg_gate *g, const float *dG, const float *dM)
{
    gate_at o = gate_offsets(g);
    gate_work w = gate_buffers(g);
    int B = g->B, C = g->C, HW = g->HW, dx = C * HW, L = g->L;
    size_t nc = (size_t)B * C, nx = (size_t)B * dx;
    float *dout = w.dz + (size_t)g->max_batch * L; /* the spare: the batch mean's gradient */
    for (int k = 0; k < g->paths; k++) {
        for (int b = 0; b < L; b++) { /* no gradient through the clip where it bit */
            float gG = g->Gsum[b] < g->s_min ? 0.0f : dG[b];
            dout[b] = k == 1 ? dM[b] : g->paths == 1 ? gG + dM[b] : gG;
        }
        for (int n = 0; n < B; n++)
            for (int b = 0; b < L; b++)
                w.dz[(size_t)n * L + b] = dout[b] / B;
        nn_sigmoid_backward(w.dz, w.dz, w.sg[k], (long)B * L);
        nn_bn_backward(w.dz, g->g + o.bg[k], g->g + o.bb[k], w.dz, w.zh[k], w.inv[k],
                       g->p + o.bg[k], B, L);
        nn_linear_backward(w.dxn + (size_t)k * nx, g->g + o.w[k], dx, g->g + o.b[k], w.dz, w.xn,
                           g->p + o.w[k], dx, B, dx, L);
    }
    if (g->paths == 2)
        for (size_t i = 0; i < nx; i++)
            w.dxn[i] += w.dxn[nx + i];
    /* SwitchNorm: only its own parameters (the input is data); μ and σ² move with the mixing
     * weights, through ∂y/∂μ = −γ/σ and ∂y/∂σ² = −γ x̂ / (2σ²) */
    double wm[3], wv[3], gm[3] = {0}, gv[3] = {0};
    softmax3(g->p + o.mw, wm);
    softmax3(g->p + o.vw, wv);
    const float *st = w.st;
    for (int n = 0; n < B; n++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            const float *d = w.dxn + i * HW, *h = w.xh + i * HW;
            double sd = 0, sdh = 0;
            for (int k = 0; k < HW; k++) {
                sd += d[k];
                sdh += (double)d[k] * h[k];
            }
            g->g[o.sg + (size_t)c] += (float)sdh;
            g->g[o.sb + (size_t)c] += (float)sd;
            double gam = g->p[o.sg + (size_t)c], is = w.is[i];
            double dmu = -gam * is * sd, dvar = -0.5 * gam * is * is * sdh;
            for (int k = 0; k < 3; k++) {
                gm[k] += dmu * st[(size_t)(2 * k) * nc + i];
                gv[k] += dvar * st[(size_t)(2 * k + 1) * nc + i];
            }
        }
    for (int j = 0; j < 3; j++) /* through the softmaxes */
        for (int k = 0; k < 3; k++) {
            g->g[o.mw + (size_t)j] += (float)(gm[k] * wm[k] * ((k == j) - wm[j]));
            g->g[o.vw + (size_t)j] += (float)(gv[k] * wv[k] * ((k == j) - wv[j]));
        }
}
