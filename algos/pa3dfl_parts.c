/* algos/pa3dfl_parts.c -- Pa3dFL's layer decomposition and hyper-network (pa3dfl.h): the small
 * GEMMs that recover a client's weights from its factors and chain their gradients back, Eq. 32,
 * and the hyper-network's generation and backward pass. algos/pa3dfl.c runs the algorithm. */
#include "algos/pa3dfl.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int fl_p3_net_build(fl_p3_net *d, const nn_arch *a, double p_min, sim_err *err)
{
    memset(d, 0, sizeof *d);
    int last = -1;
    for (int i = 0; i < a->n; i++) {
        if (a->l[i].op == NN_CONV || a->l[i].op == NN_LINEAR) last = i;
        if (a->l[i].op == NN_BATCHNORM) /* its parameters would be neither factor */
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "pa3dfl: %s has batch norm", a->name);
    }
    if (last != a->n - 1 || a->l[last].op != NN_LINEAR)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "pa3dfl: %s does not end on a linear head",
                        a->name);
    d->nb = (int)lround(1 / p_min);
    if (!(p_min > 0 && p_min <= 1) || fabs(d->nb * p_min - 1) > 1e-9)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0, "pa3dfl: p_min %g is not 1/n", p_min);
    for (int i = 0; i < last; i++) {
        const nn_layer *l = &a->l[i];
        if (l->op != NN_CONV && l->op != NN_LINEAR) continue;
        fl_p3_layer *q = &d->l[d->n];
        q->li = i;
        q->S = l->c;
        q->T = l->oc;
        q->kk = l->op == NN_CONV ? l->k * l->k : 1;
        q->first = d->n == 0;
        q->lin = l->op == NN_LINEAR;
        if (l->oc % d->nb)
            return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                            "pa3dfl: %d channels of layer %d do not split into 1/p_min = %d blocks",
                            l->oc, i, d->nb);
        q->nb = d->nb;
        q->R1 = l->oc / d->nb;
        int mn = q->S < q->T ? q->S : q->T;
        q->R2 = l->op == NN_CONV ? (mn > q->kk ? mn : q->kk) : q->R1; /* Eq. 14 */
        q->u_off = d->n_u;
        q->v_off = d->n_v;
        d->n_u += (size_t)q->kk * q->R1 * q->R2;
        d->n_v += (size_t)q->R2 * q->nb * q->S;
        d->n++;
    }
    d->head_li = last;
    d->d_pen = a->l[last].c;
    d->K = a->l[last].oc;
    if (d->d_pen % d->nb)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "pa3dfl: the head's %d inputs do not split into %d blocks", d->d_pen,
                        d->nb);
    d->n_gen = d->n_v + (size_t)d->K * d->d_pen + (size_t)d->K;
    return SIM_OK;
}

int fl_p3_blocks(const fl_p3_net *d, double p)
{
    int kb = (int)lround(p * d->nb);
    return kb < 1 ? 1 : kb > d->nb ? d->nb : kb;
}

/* Inputs a kb-block client keeps of layer q. */
static int kept_in(const fl_p3_layer *q, int kb)
{
    return q->first ? q->S : q->S / q->nb * kb;
}

size_t fl_p3_kept(const fl_p3_net *d, int kb)
{
    size_t n = 0;
    for (int k = 0; k < d->n; k++)
        n += (size_t)d->l[k].R2 * kb * kept_in(&d->l[k], kb);
    return n + (size_t)d->K * (d->d_pen / d->nb * kb) + (size_t)d->K;
}

enum { TO_KEPT, TO_FULL, STEP, SUMSQ };

/* Visit the kept stretches of a personal vector in order and copy them (TO_KEPT, TO_FULL), step
 * them (STEP: full −= lr·kept, then kept = 0, kept being a gen-space gradient) or return their
 * sum of squares (SUMSQ, kept being a gen-space gradient). */
static double visit_kept(const fl_p3_net *d, int kb, int op, float lr, float *full, float *kept)
{
    double ss = 0;
    size_t at = 0;
    int dk = d->d_pen / d->nb * kb;
    for (int k = 0; k <= d->n; k++) {
        const fl_p3_layer *q = &d->l[k];
        int head = k == d->n, rows = head ? d->K + 1 : q->R2 * kb;
        for (int r = 0; r < rows; r++) {
            /* the head: K weight rows of dk, then the K biases as one stretch */
            size_t off = head ? d->n_v + (size_t)r * d->d_pen
                              : q->v_off + ((size_t)(r / kb) * q->nb + r % kb) * q->S;
            size_t len = head ? (r < d->K ? (size_t)dk : (size_t)d->K) : (size_t)kept_in(q, kb);
            float *f = full + off, *g = op >= STEP ? kept + off : kept + at;
            if (op == TO_KEPT) memcpy(g, f, sizeof(float) * len);
            if (op == TO_FULL) memcpy(f, g, sizeof(float) * len);
            if (op == STEP)
                for (size_t c = 0; c < len; c++) {
                    f[c] -= lr * g[c];
                    g[c] = 0;
                }
            for (size_t c = 0; op == SUMSQ && c < len; c++)
                ss += (double)g[c] * g[c];
            at += len;
        }
    }
    return ss;
}

void fl_p3_gather(const fl_p3_net *d, int kb, const float *full, float *kept)
{
    visit_kept(d, kb, TO_KEPT, 0, (float *)(uintptr_t)full, kept);
}

void fl_p3_scatter(const fl_p3_net *d, int kb, const float *kept, float *full)
{
    visit_kept(d, kb, TO_FULL, 0, full, (float *)(uintptr_t)kept);
}

void fl_p3_sgd_kept(const fl_p3_net *d, int kb, float lr, float *v, float *dv)
{
    visit_kept(d, kb, STEP, lr, v, dv);
}

double fl_p3_kept_sumsq(const fl_p3_net *d, int kb, const float *dv)
{
    float *g = (float *)(uintptr_t)dv;
    return visit_kept(d, kb, SUMSQ, 0, g, g);
}

/* FLOPs of layer q's recovery at kb blocks. */
static double layer_compose_flops(const fl_p3_layer *q, int kb)
{
    return 2.0 * kb * q->R1 * kept_in(q, kb) * q->kk * q->R2;
}

double fl_p3_compose_flops(const fl_p3_net *d, int kb)
{
    double f = 0;
    for (int k = 0; k < d->n; k++)
        f += layer_compose_flops(&d->l[k], kb);
    return f;
}

/* The weight tensor of layer q in an arena, and its row stride. */
static float *weights(const nn_arch *a, const fl_p3_layer *q, float *arena, int *ld)
{
    const nn_tensor *t = &a->layout.t[a->l[q->li].wt];
    *ld = t->cols;
    return arena + t->off;
}

double fl_p3_compose(const fl_p3_net *d, const nn_arch *a, int kb, const float *u, const float *v,
                     float *params)
{
    for (int k = 0; k < d->n; k++) {
        const fl_p3_layer *q = &d->l[k];
        int Sk = kept_in(q, kb), ldv = q->nb * q->S, ldw;
        float *W = weights(a, q, params, &ldw);
        const float *U = u + q->u_off, *V = v + q->v_off;
        for (int j = 0; j < kb; j++) {
            if (q->kk == 1) /* rows j·R1 … j·R1 + R1 − 1 at once: u (R1×R2) · v_j (R2×S') */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, q->R1, Sk, q->R2, 1, U,
                            q->R2, V + (size_t)j * q->S, ldv, 0, W + (size_t)j * q->R1 * ldw, ldw);
            else /* channel c = j·R1 + i, stored (s, kernel position): v_jᵀ (S'×R2) · u_iᵀ */
                for (int i = 0; i < q->R1; i++)
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, Sk, q->kk, q->R2, 1,
                                V + (size_t)j * q->S, ldv, U + (size_t)i * q->kk * q->R2, q->R2, 0,
                                W + (size_t)(j * q->R1 + i) * ldw, q->kk);
        }
    }
    return fl_p3_compose_flops(d, kb);
}

/* FLOPs of layer q's factor gradients in batch form (four GEMMs a block). */
static double layer_batch_flops(const fl_p3_layer *q, int kb, int B)
{
    return 4.0 * kb * B * q->R2 * (kept_in(q, kb) + q->R1);
}

int fl_p3_batch_form(const fl_p3_layer *q, int kb, int B)
{
    double dw = 2.0 * B * kb * q->R1 * kept_in(q, kb); /* the weight gradient it spares */
    return q->lin && layer_batch_flops(q, kb, B) < 2 * layer_compose_flops(q, kb) + dw;
}

size_t fl_p3_take_floats(const fl_p3_net *d, int B)
{
    size_t n = 0;
    for (int k = 0; k < d->n; k++)
        n += d->l[k].lin ? (size_t)B * d->l[k].T : 0;
    return n;
}

void fl_p3_take(const fl_p3_net *d, nn_model *m, int kb, int B, float *arena)
{
    for (int k = 0; k < d->n; k++) {
        const fl_p3_layer *q = &d->l[k];
        if (!q->lin) continue;
        nn_model_take_grad_out(m, q->li, arena && fl_p3_batch_form(q, kb, B) ? arena : NULL);
        if (arena) arena += (size_t)m->max_batch * q->T;
    }
}

double fl_p3_backward_flops(const fl_p3_net *d, int kb, int B)
{
    double f = 0;
    for (int k = 0; k < d->n; k++)
        f += fl_p3_batch_form(&d->l[k], kb, B) ? layer_batch_flops(&d->l[k], kb, B)
                                               : 2 * layer_compose_flops(&d->l[k], kb);
    return f;
}

/* out[b][c][r] = in[b][r][c]: each of B rows read as a rows × cols matrix, transposed (the
 * column orders (r, j) and (j, r) of rows of R2·nb). */
static void transpose_rows(float *out, const float *in, int B, int rows, int cols)
{
    for (size_t b = 0, n = (size_t)rows * cols; b < (size_t)B; b++)
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                out[b * n + (size_t)c * rows + r] = in[b * n + (size_t)r * cols + c];
}

/* batch_backward at full width (every block kept, the input not pruned): v (R2 × nb·S) read as
 * R2·nb rows of S, row r·nb + j being block j's row r, so each of the four products is one
 * GEMM over all blocks, and x is packed once a product rather than once a block. */
static void full_batch_backward(const fl_p3_layer *q, int B, const float *x, const float *dy,
                                const float *U, const float *V, float *dU, float *dV)
{
    int S = q->S, R1 = q->R1, R2 = q->R2, nb = q->nb, n = R2 * nb;
    float *z = sim_xmalloc(sizeof(float) * 2 * (size_t)B * n), *zj = z + (size_t)B * n;
    /* z[b][r][j] = x_b·v_j[r]; then in (j, r) order, B·nb rows of R2 beside dy's B·nb rows of R1 */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, n, S, 1, x, S, V, S, 0, z, n);
    transpose_rows(zj, z, B, R2, nb);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R1, R2, B * nb, 1, dy, R1, zj, R2, 1, dU,
                R2);
    /* g_j = dy_j·u in (j, r) order, back to (r, j): dv (as R2·nb rows of S) += gᵀ·x */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B * nb, R2, R1, 1, dy, R1, U, R2, 0, zj,
                R2);
    transpose_rows(z, zj, B, nb, R2);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, S, B, 1, z, n, x, S, 1, dV, S);
    free(z);
}

/* dU += Σ_j dy_jᵀ·(x·v_jᵀ) and dv_j += (dy_j·u)ᵀ·x for linear layer q, from its input x (B × S')
 * and output gradient dy (B × kb·R1; block j is columns j·R1 …). */
static void batch_backward(const fl_p3_layer *q, int kb, int B, const float *x, const float *dy,
                           const float *U, const float *V, float *dU, float *dV)
{
    if (kb == q->nb && kept_in(q, kb) == q->S) { /* x's rows are v's: S long */
        full_batch_backward(q, B, x, dy, U, V, dU, dV);
        return;
    }
    int Sk = kept_in(q, kb), ldv = q->nb * q->S, ldy = kb * q->R1;
    float *z = sim_xmalloc(sizeof(float) * 2 * (size_t)B * q->R2), *g = z + (size_t)B * q->R2;
    for (int j = 0; j < kb; j++) {
        const float *Vj = V + (size_t)j * q->S, *dyj = dy + (size_t)j * q->R1;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, q->R2, Sk, 1, x, Sk, Vj, ldv, 0, z,
                    q->R2);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, q->R1, q->R2, B, 1, dyj, ldy, z, q->R2,
                    1, dU, q->R2);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, q->R2, q->R1, 1, dyj, ldy, U,
                    q->R2, 0, g, q->R2);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, q->R2, Sk, B, 1, g, q->R2, x, Sk, 1,
                    dV + (size_t)j * q->S, ldv);
    }
    free(z);
}

double fl_p3_compose_backward(const fl_p3_net *d, const nn_model *m, int kb, int B, const float *u,
                              const float *v, float *du, float *dv)
{
    const nn_arch *a = &m->arch;
    for (int k = 0; k < d->n; k++) {
        const fl_p3_layer *q = &d->l[k];
        int Sk = kept_in(q, kb), ldv = q->nb * q->S, ldw;
        const float *U = u + q->u_off, *V = v + q->v_off;
        float *dU = du + q->u_off, *dV = dv + q->v_off;
        if (m->grad_out[q->li]) { /* fl_p3_take chose the batch form */
            int cols;
            const float *x = nn_model_layer_input(m, q->li, &cols);
            assert(cols == Sk && fl_p3_batch_form(q, kb, B));
            batch_backward(q, kb, B, x, m->grad_out[q->li], U, V, dU, dV);
            continue;
        }
        const float *G = weights(a, q, m->grads, &ldw);
        for (int j = 0; j < kb; j++) {
            const float *Vj = V + (size_t)j * q->S;
            float *dVj = dV + (size_t)j * q->S;
            if (q->kk == 1) {
                const float *Gj = G + (size_t)j * q->R1 * ldw; /* (R1 × S') */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, q->R1, q->R2, Sk, 1, Gj, ldw,
                            Vj, ldv, 1, dU, q->R2);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, q->R2, Sk, q->R1, 1, U, q->R2,
                            Gj, ldw, 1, dVj, ldv);
            } else
                for (int i = 0; i < q->R1; i++) {
                    const float *Gc = G + (size_t)(j * q->R1 + i) * ldw; /* (S' × kk) */
                    const float *Ui = U + (size_t)i * q->kk * q->R2;
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, q->R2, Sk, q->kk, 1, Ui,
                                q->R2, Gc, q->kk, 1, dVj, ldv);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, q->kk, q->R2, Sk, 1, Gc,
                                q->kk, Vj, ldv, 1, dU + (size_t)i * q->kk * q->R2, q->R2);
                }
        }
    }
    return fl_p3_backward_flops(d, kb, B);
}

double fl_p3_orth_flops(const fl_p3_net *d)
{
    double f = 0;
    for (int k = 0; k < d->n; k++)
        if (d->l[k].kk > 1) f += 4.0 * d->l[k].kk * d->l[k].R1 * d->l[k].R2 * d->l[k].R2;
    return f;
}

double fl_p3_orth(const fl_p3_net *d, double lambda, const float *u, float *du)
{
    double loss = 0;
    for (int k = 0; k < d->n; k++) {
        const fl_p3_layer *q = &d->l[k];
        if (q->kk == 1) continue; /* linear layers are not regularised (spec §2.10) */
        int rows = q->kk * q->R1, R2 = q->R2;
        const float *U = u + q->u_off;
        float *S = sim_xmalloc(sizeof(float) * (size_t)R2 * R2);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R2, R2, rows, 1, U, R2, U, R2, 0, S,
                    R2);
        for (int r = 0; r < R2; r++) {
            S[(size_t)r * R2 + r] = 0;
            for (int c = 0; c < R2; c++)
                loss += (double)S[(size_t)r * R2 + c] * S[(size_t)r * R2 + c];
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, R2, R2, (float)(4 * lambda), U,
                    R2, S, R2, 1, du + q->u_off, R2);
        free(S);
    }
    return lambda * loss;
}

/* ---------------------------------------------------------------------------------------- */
/* the hyper-network
 *
 * Its encoder stays written out here, not on nn/: its activations are float (rounded from a
 * double sum, after the ReLU), its weight gradients float (each sample's term rounded before it is
 * added), its input gradients double; nn/layers.h keeps activations and every gradient in double,
 * nn/ops.h sums in float (sgemm), and neither gives these bits. The decoder is BLAS already; the
 * attention (a softmax at a learned temperature) and the unit scaling have no nn/ counterpart. */

static int enc_in(const fl_p3_hn *h, int k)
{
    return k ? h->dh : h->de;
}

/* Row stride of the activations: the wider of the embedding and hidden dims. */
static int wide_of(const fl_p3_hn *h)
{
    return h->de > h->dh ? h->de : h->dh;
}

void fl_p3_hn_init(fl_p3_hn *h, const fl_p3_net *d, int N, int de, int dh, int D,
                   const float *bias0, sim_rng *r)
{
    assert(D >= 1 && D <= FL_PA3DFL_MAX_DEPTH);
    memset(h, 0, sizeof *h);
    h->N = N, h->de = de, h->dh = dh, h->D = D, h->nt = d->n + 1;
    for (int t = 0; t < d->n; t++) {
        h->gen_off[t] = d->l[t].v_off;
        h->out[t] = (size_t)d->l[t].R2 * d->l[t].nb * d->l[t].S;
    }
    h->gen_off[d->n] = d->n_v;
    h->out[d->n] = d->n_gen - d->n_v;
    h->n_gen = d->n_gen;
    size_t at = 0;
    h->E = at;
    at += (size_t)N * de;
    for (int k = 0; k < D; k++) {
        h->enc[2 * k] = at;
        at += (size_t)dh * enc_in(h, k);
        h->enc[2 * k + 1] = at;
        at += (size_t)dh;
    }
    h->rho = at;
    at += (size_t)h->nt;
    h->dec_b = at;
    at += h->n_gen;
    h->n_small = at;
    h->dec_w = at;
    at += h->n_gen * dh;
    h->n_phi = at;
    h->phi = sim_xcalloc(h->n_phi, sizeof(float)); /* ρ = 0, decoder weights = 0 */
    for (size_t j = 0; j < (size_t)N * de; j++)
        h->phi[h->E + j] = (float)sim_rng_normal(r);
    for (int k = 0; k < D; k++) {
        double b = 1 / sqrt(enc_in(h, k));
        for (size_t j = h->enc[2 * k]; j < h->enc[2 * k + 1] + (size_t)dh; j++)
            h->phi[j] = (float)((2 * sim_rng_uniform(r) - 1) * b);
    }
    memcpy(h->phi + h->dec_b, bias0, sizeof(float) * h->n_gen);
    h->act = sim_xcalloc((size_t)(D + 1) * N * wide_of(h), sizeof(float));
    h->nrm = sim_xcalloc((size_t)N, sizeof(double));
}

void fl_p3_hn_destroy(fl_p3_hn *h)
{
    if (!h) return;
    free(h->phi);
    free(h->act);
    free(h->nrm);
    memset(h, 0, sizeof *h);
}

/* Activations after encoder layer k (k = 0: the embeddings), N rows of stride wide_of. */
static float *act(const fl_p3_hn *h, int k)
{
    return h->act + (size_t)k * h->N * wide_of(h);
}

void fl_p3_hn_encode(fl_p3_hn *h)
{
    int wd = wide_of(h);
    for (int n = 0; n < h->N; n++)
        memcpy(act(h, 0) + (size_t)n * wd, h->phi + h->E + (size_t)n * h->de,
               sizeof(float) * h->de);
    for (int k = 0; k < h->D; k++) {
        const float *W = h->phi + h->enc[2 * k], *b = h->phi + h->enc[2 * k + 1];
        int in = enc_in(h, k);
        for (int n = 0; n < h->N; n++) {
            const float *x = act(h, k) + (size_t)n * wd;
            float *y = act(h, k + 1) + (size_t)n * wd;
            for (int o = 0; o < h->dh; o++) {
                double s = b[o];
                for (int c = 0; c < in; c++)
                    s += (double)W[(size_t)o * in + c] * x[c];
                y[o] = k < h->D - 1 && s < 0 ? 0 : (float)s; /* no ReLU after the last layer */
            }
        }
    }
    for (int n = 0; h->unit && n < h->N; n++) {
        float *y = act(h, h->D) + (size_t)n * wd;
        double r = 0;
        for (int o = 0; o < h->dh; o++)
            r += (double)y[o] * y[o];
        h->nrm[n] = r = fmax(sqrt(r), 1e-12);
        for (int o = 0; o < h->dh; o++)
            y[o] = (float)(y[o] / r);
    }
}

/* Client i's attention logits s (N) = E'e'_i. */
static void scores(const fl_p3_hn *h, int i, double *s)
{
    int wd = wide_of(h);
    const float *Ep = act(h, h->D), *ei = Ep + (size_t)i * wd;
    for (int n = 0; n < h->N; n++) {
        double x = 0;
        for (int c = 0; c < h->dh; c++)
            x += (double)Ep[(size_t)n * wd + c] * ei[c];
        s[n] = x;
    }
}

/* Tensor t's attention weights a (N) from s, and the mixed embedding e (dh). */
static void attend(const fl_p3_hn *h, int t, const double *s, double *a, float *e)
{
    int wd = wide_of(h);
    double tau = exp(h->phi[h->rho + t]), mx = -INFINITY, sum = 0;
    for (int n = 0; n < h->N; n++)
        mx = fmax(mx, s[n] / tau);
    for (int n = 0; n < h->N; n++)
        sum += a[n] = exp(s[n] / tau - mx);
    for (int n = 0; n < h->N; n++)
        a[n] /= sum;
    const float *Ep = act(h, h->D);
    for (int c = 0; c < h->dh; c++) {
        double x = 0;
        for (int n = 0; n < h->N; n++)
            x += a[n] * Ep[(size_t)n * wd + c];
        e[c] = (float)x;
    }
}

double fl_p3_hn_generate(const fl_p3_hn *h, int i, float *gen)
{
    double *s = sim_xmalloc(sizeof(double) * 2 * (size_t)h->N), *a = s + h->N;
    float *e = sim_xmalloc(sizeof(float) * (size_t)h->dh);
    scores(h, i, s);
    double flops = 2.0 * h->N * h->dh;
    for (int t = 0; t < h->nt; t++) {
        attend(h, t, s, a, e);
        float *y = gen + h->gen_off[t];
        memcpy(y, h->phi + h->dec_b + h->gen_off[t], sizeof(float) * h->out[t]);
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)h->out[t], h->dh, 1,
                    h->phi + h->dec_w + h->gen_off[t] * h->dh, h->dh, e, 1, 1, y, 1);
        flops += 2.0 * h->N * h->dh + 2.0 * (double)h->out[t] * h->dh;
    }
    free(s);
    free(e);
    return flops;
}

void fl_p3_hn_backward(fl_p3_hn *h, int m, const int32_t *clients, float *const *g,
                       float *grad_small, float *grad_dec, double gamma, int nlms)
{
    int N = h->N, dh = h->dh, wd = wide_of(h), nt = h->nt;
    double *s = sim_xmalloc(sizeof(double) * 4 * (size_t)N), *a = s + N, *da = a + N, *ds = da + N;
    float *de = sim_xmalloc(sizeof(float) * (size_t)dh);
    float *es = sim_xmalloc(sizeof(float) * (size_t)m * nt * dh); /* every ê, for the updates */
    float *qs = sim_xmalloc(sizeof(float) * (size_t)m * nt);      /* their decoder step scales */
    double *dEp = sim_xcalloc((size_t)N * wd, sizeof(double));    /* reused for the encoder */
    const float *Ep = act(h, h->D);
    for (int k = 0; k < m; k++) {
        int i = clients[k];
        scores(h, i, s);
        for (int t = 0; t < nt; t++) {
            float *e = es + ((size_t)k * nt + t) * dh;
            const float *gt = g[k] + h->gen_off[t];
            const float *W = h->phi + h->dec_w + h->gen_off[t] * dh;
            attend(h, t, s, a, e);
            /* decoder: db += q·g, dW += q·g ⊗ ê, dê = Wᵀg (with W as generated); q = 1, or
             * 1/(1 + ‖ê‖²) under nlms */
            double ee = 0;
            for (int c = 0; c < dh; c++)
                ee += (double)e[c] * e[c];
            float q = qs[(size_t)k * nt + t] = nlms ? (float)(1 / (1 + ee)) : 1.0f;
            float *db = grad_small + h->dec_b + h->gen_off[t];
            for (size_t j = 0; j < h->out[t]; j++)
                db[j] += q * gt[j];
            if (grad_dec)
                cblas_sger(CblasRowMajor, (int)h->out[t], dh, q, gt, 1, e, 1,
                           grad_dec + h->gen_off[t] * dh, dh);
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)h->out[t], dh, 1, W, dh, gt, 1, 0, de, 1);
            /* attention: a = softmax(s/τ), ê = E'ᵀa */
            double tau = exp(h->phi[h->rho + t]), ada = 0, drho = 0;
            for (int n = 0; n < N; n++) {
                double x = 0;
                for (int c = 0; c < dh; c++)
                    x += (double)Ep[(size_t)n * wd + c] * de[c];
                da[n] = x;
                ada += a[n] * x;
            }
            for (int n = 0; n < N; n++) {
                double dz = a[n] * (da[n] - ada);
                drho -= dz * s[n] / tau; /* ∂/∂ρ = τ·∂/∂τ = −Σ dz·z */
                ds[n] = dz / tau;
            }
            grad_small[h->rho + t] += (float)drho;
            const float *ei = Ep + (size_t)i * wd;
            for (int n = 0; n < N; n++)
                for (int c = 0; c < dh; c++) {
                    dEp[(size_t)n * dh + c] += a[n] * de[c] + ds[n] * ei[c];   /* value, key */
                    dEp[(size_t)i * dh + c] += ds[n] * Ep[(size_t)n * wd + c]; /* query */
                }
        }
    }
    if (!grad_dec) /* every dê is taken: now the rank-1 steps, in place */
        for (int k = 0; k < m; k++)
            for (int t = 0; t < nt; t++)
                cblas_sger(CblasRowMajor, (int)h->out[t], dh,
                           (float)-gamma * qs[(size_t)k * nt + t], g[k] + h->gen_off[t], 1,
                           es + ((size_t)k * nt + t) * dh, 1,
                           h->phi + h->dec_w + h->gen_off[t] * dh, dh);
    /* through the unit scaling y/‖y‖: ∂/∂y = (d − ŷ⟨ŷ, d⟩)/‖y‖ */
    for (int n = 0; h->unit && n < N; n++) {
        double *dn = dEp + (size_t)n * dh, dot = 0;
        const float *yh = Ep + (size_t)n * wd;
        for (int c = 0; c < dh; c++)
            dot += yh[c] * dn[c];
        for (int c = 0; c < dh; c++)
            dn[c] = (dn[c] - yh[c] * dot) / h->nrm[n];
    }
    /* encoder, last layer first; delta holds ∂/∂(layer output) */
    double *delta = dEp, *prev = sim_xmalloc(sizeof(double) * (size_t)N * wd);
    for (int k = h->D - 1; k >= 0; k--) {
        int in = enc_in(h, k);
        const float *W = h->phi + h->enc[2 * k], *X = act(h, k), *Y = act(h, k + 1);
        float *dW = grad_small + h->enc[2 * k], *db = grad_small + h->enc[2 * k + 1];
        for (int n = 0; n < N; n++) {
            double *dl = delta + (size_t)n * dh, *dp = prev + (size_t)n * in;
            if (k < h->D - 1)
                for (int o = 0; o < dh; o++)
                    if (Y[(size_t)n * wd + o] <= 0) dl[o] = 0;
            for (int c = 0; c < in; c++)
                dp[c] = 0;
            for (int o = 0; o < dh; o++) {
                db[o] += (float)dl[o];
                for (int c = 0; c < in; c++) {
                    dW[(size_t)o * in + c] += (float)(dl[o] * X[(size_t)n * wd + c]);
                    dp[c] += dl[o] * W[(size_t)o * in + c];
                }
            }
        }
        /* prev becomes the next delta (row stride in, then dh again for k − 1 ≥ 0) */
        for (size_t j = 0; j < (size_t)N * in; j++)
            delta[j] = prev[j];
    }
    for (size_t j = 0; j < (size_t)N * h->de; j++)
        grad_small[h->E + j] += (float)delta[j];
    free(prev);
    free(dEp);
    free(es);
    free(qs);
    free(de);
    free(s);
}
