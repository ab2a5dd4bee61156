/* nn/ops.c -- layer kernels on OpenBLAS, and their naive references (see ops.h for shapes).
 *
 * Workload: a federated client trains small models (10^4-10^6 parameters) on batches of 10-64,
 * so per-call overhead matters as much as GEMM speed: convolutions are one GEMM per batch (CBHW
 * layout), nothing allocates, and the references exist only to be tested against.
 */
#include "nn/ops.h"

#include <cblas.h>
/* cblas.h pulls in complex.h, whose I macro would clash with the I dimension below. */
#undef I
#include <float.h>
#include <math.h>
#include <string.h>

/* C (M,N; ldc) = alpha·op(A)·op(B) + beta·C. OpenBLAS is not asked for K = 0 (an all-pruned
 * input), where implementations disagree on whether beta = 0 clears C. */
static void gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *Bm,
                 int ldb, float beta, float *Cm, int ldc)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                Cm[(long)i * ldc + j] = beta == 0.0f ? 0.0f : beta * Cm[(long)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, 1.0f, A, lda, Bm, ldb, beta, Cm, ldc);
}

/* ---------------------------------------------------------------------------------------- */
/* linear */

void nn_linear_forward(float *y, const float *x, const float *w, int ldw, const float *b, int B,
                       int I, int O)
{
    gemm(0, 1, B, O, I, x, I, w, ldw, 0.0f, y, O);
    if (b)
        for (int n = 0; n < B; n++)
            for (int o = 0; o < O; o++)
                y[(long)n * O + o] += b[o];
}

void nn_linear_backward(float *dx, float *dw, int lddw, float *db, const float *dy, const float *x,
                        const float *w, int ldw, int B, int I, int O)
{
    gemm(1, 0, O, I, B, dy, O, x, I, 1.0f, dw, lddw);
    if (db)
        for (int n = 0; n < B; n++)
            for (int o = 0; o < O; o++)
                db[o] += dy[(long)n * O + o];
    if (dx) gemm(0, 0, B, I, O, dy, O, w, ldw, 0.0f, dx, I);
}

void nn_linear_forward_ref(float *y, const float *x, const float *w, int ldw, const float *b, int B,
                           int I, int O)
{
    for (int n = 0; n < B; n++)
        for (int o = 0; o < O; o++) {
            double acc = b ? (double)b[o] : 0.0;
            for (int i = 0; i < I; i++)
                acc += (double)x[(long)n * I + i] * (double)w[(long)o * ldw + i];
            y[(long)n * O + o] = (float)acc;
        }
}

void nn_linear_backward_ref(float *dx, float *dw, int lddw, float *db, const float *dy,
                            const float *x, const float *w, int ldw, int B, int I, int O)
{
    for (int o = 0; o < O; o++) {
        for (int i = 0; i < I; i++) {
            double acc = 0;
            for (int n = 0; n < B; n++)
                acc += (double)dy[(long)n * O + o] * (double)x[(long)n * I + i];
            dw[(long)o * lddw + i] += (float)acc;
        }
        if (db) {
            double acc = 0;
            for (int n = 0; n < B; n++)
                acc += (double)dy[(long)n * O + o];
            db[o] += (float)acc;
        }
    }
    if (dx)
        for (int n = 0; n < B; n++)
            for (int i = 0; i < I; i++) {
                double acc = 0;
                for (int o = 0; o < O; o++)
                    acc += (double)dy[(long)n * O + o] * (double)w[(long)o * ldw + i];
                dx[(long)n * I + i] = (float)acc;
            }
}

/* ---------------------------------------------------------------------------------------- */
/* convolution: im2col + one GEMM over the whole batch */

/* Output columns ox in [lo, hi) read input column ox·s − p + kx inside [0, W). */
static void valid_range(int *lo, int *hi, int OW, int W, int kx, int s, int p)
{
    int a = p - kx; /* smallest ox with ox·s >= p − kx */
    *lo = a <= 0 ? 0 : (a + s - 1) / s;
    int b = W - 1 + p - kx; /* largest ox with ox·s <= W − 1 + p − kx */
    *hi = b < 0 ? 0 : b / s + 1;
    if (*hi > OW) *hi = OW;
    if (*lo > *hi) *lo = *hi;
}

/* col (C·k·k, nb·OH·OW) from samples [b0, b0+nb) of x (C,B,H,W); zero in the padding. Rows are
 * short (OW floats), so copies are plain loops: a libc call per row would cost more than the row.
 */
static void im2col(float *col, const float *x, int C, int B, int b0, int nb, int H, int W, int k,
                   int s, int p)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p);
    long N = (long)nb * OH * OW;
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
                float *row = col + ((long)(c * k + ky) * k + kx) * N;
                int lo, hi;
                valid_range(&lo, &hi, OW, W, kx, s, p);
                for (int b = 0; b < nb; b++) {
                    const float *plane = x + ((long)c * B + b0 + b) * H * W;
                    for (int oy = 0; oy < OH; oy++) {
                        float *restrict dst = row + ((long)b * OH + oy) * OW;
                        int iy = oy * s - p + ky;
                        if (iy < 0 || iy >= H) {
                            for (int ox = 0; ox < OW; ox++)
                                dst[ox] = 0;
                            continue;
                        }
                        const float *restrict src = plane + (long)iy * W - p + kx;
                        for (int ox = 0; ox < lo; ox++)
                            dst[ox] = 0;
                        if (s == 1)
                            for (int ox = lo; ox < hi; ox++)
                                dst[ox] = src[ox];
                        else
                            for (int ox = lo; ox < hi; ox++)
                                dst[ox] = src[(long)ox * s];
                        for (int ox = hi; ox < OW; ox++)
                            dst[ox] = 0;
                    }
                }
            }
}

/* samples [b0, b0+nb) of dx (C,B,H,W) += the fold of dcol (C·k·k, nb·OH·OW) */
static void col2im(float *dx, const float *dcol, int C, int B, int b0, int nb, int H, int W, int k,
                   int s, int p)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p);
    long N = (long)nb * OH * OW;
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
                const float *row = dcol + ((long)(c * k + ky) * k + kx) * N;
                int lo, hi;
                valid_range(&lo, &hi, OW, W, kx, s, p);
                for (int b = 0; b < nb; b++) {
                    float *plane = dx + ((long)c * B + b0 + b) * H * W;
                    for (int oy = 0; oy < OH; oy++) {
                        int iy = oy * s - p + ky;
                        if (iy < 0 || iy >= H) continue;
                        const float *restrict src = row + ((long)b * OH + oy) * OW;
                        float *restrict dst = plane + (long)iy * W - p + kx;
                        for (int ox = lo; ox < hi; ox++)
                            dst[(long)ox * s] += src[ox];
                    }
                }
            }
}

/* Samples per im2col chunk: the unfolded chunk (C·k·k × nb·OH·OW floats) is kept near 2 MB so it
 * is still in cache when the GEMM packs it, instead of streaming a whole batch's copy (40 MB for
 * cnn2's second layer at batch 64) through memory three times per step. */
int nn_conv_chunk(int B, int C, int k, int OH, int OW)
{
    long per = (long)C * k * k * OH * OW;
    long nb = (512L * 1024) / (per > 0 ? per : 1);
    return nb < 1 ? 1 : nb > B ? B : (int)nb;
}

void nn_conv_forward(float *y, float *col, int keep, const float *x, const float *w, int ldw,
                     const float *b, int B, int C, int H, int W, int O, int k, int s, int p)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p), K = C * k * k;
    int N = B * OH * OW, P = OH * OW, chunk = keep ? B : nn_conv_chunk(B, C, k, OH, OW);
    for (int b0 = 0; b0 < B; b0 += chunk) {
        int nb = B - b0 < chunk ? B - b0 : chunk;
        im2col(col, x, C, B, b0, nb, H, W, k, s, p);
        gemm(0, 0, O, nb * P, K, w, ldw, col, nb * P, 0.0f, y + (long)b0 * P, N);
    }
    if (b)
        for (int o = 0; o < O; o++) {
            float *row = y + (long)o * N;
            for (int n = 0; n < N; n++)
                row[n] += b[o];
        }
}

void nn_conv_backward(float *dx, float *dw, int lddw, float *db, const float *kept, float *col,
                      const float *dy, const float *x, const float *w, int ldw, int B, int C, int H,
                      int W, int O, int k, int s, int p)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p);
    int N = B * OH * OW, K = C * k * k, P = OH * OW, chunk = nn_conv_chunk(B, C, k, OH, OW);
    if (db)
        for (int o = 0; o < O; o++) {
            const float *row = dy + (long)o * N;
            float acc = 0;
            for (int n = 0; n < N; n++)
                acc += row[n];
            db[o] += acc;
        }
    if (kept) gemm(0, 1, O, K, N, dy, N, kept, N, 1.0f, dw, lddw);
    if (!dx && kept) return;
    if (dx) memset(dx, 0, sizeof(float) * (size_t)C * B * H * W);
    for (int b0 = 0; b0 < B; b0 += chunk) {
        int nb = B - b0 < chunk ? B - b0 : chunk;
        const float *dyc = dy + (long)b0 * P;
        if (!kept) {
            im2col(col, x, C, B, b0, nb, H, W, k, s, p);
            gemm(0, 1, O, K, nb * P, dyc, N, col, nb * P, 1.0f, dw, lddw);
        }
        if (!dx) continue;
        gemm(1, 0, K, nb * P, O, w, ldw, dyc, N, 0.0f, col, nb * P);
        col2im(dx, col, C, B, b0, nb, H, W, k, s, p);
    }
}

/* The references index x (C,B,H,W) directly, with no im2col, and sum in double. */
void nn_conv_forward_ref(float *y, const float *x, const float *w, int ldw, const float *b, int B,
                         int C, int H, int W, int O, int k, int s, int p)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p);
    for (int o = 0; o < O; o++)
        for (int n = 0; n < B; n++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    double acc = b ? (double)b[o] : 0.0;
                    for (int c = 0; c < C; c++)
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++) {
                                int iy = oy * s - p + ky, ix = ox * s - p + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                acc += (double)w[(long)o * ldw + (c * k + ky) * k + kx] *
                                       (double)x[(((long)c * B + n) * H + iy) * W + ix];
                            }
                    y[(((long)o * B + n) * OH + oy) * OW + ox] = (float)acc;
                }
}

void nn_conv_backward_ref(float *dx, float *dw, int lddw, float *db, const float *dy,
                          const float *x, const float *w, int ldw, int B, int C, int H, int W,
                          int O, int k, int s, int p)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p);
    if (dx) memset(dx, 0, sizeof(float) * (size_t)C * B * H * W);
    for (int o = 0; o < O; o++)
        for (int n = 0; n < B; n++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    float g = dy[(((long)o * B + n) * OH + oy) * OW + ox];
                    if (db) db[o] += g;
                    for (int c = 0; c < C; c++)
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++) {
                                int iy = oy * s - p + ky, ix = ox * s - p + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                long xi = (((long)c * B + n) * H + iy) * W + ix;
                                long wi = (long)o * ldw + (c * k + ky) * k + kx;
                                dw[(long)o * lddw + (c * k + ky) * k + kx] += g * x[xi];
                                if (dx) dx[xi] += g * w[wi];
                            }
                }
}

/* ---------------------------------------------------------------------------------------- */
/* pooling, activations, normalization, loss */

/* The forward stores no argmax: it is a plain max (which vectorizes), and backward finds the
 * first window element equal to the output, the same element a strict '>' scan picks. */
void nn_maxpool2_forward(float *y, const float *x, int P, int H, int W)
{
    int OH = H / 2, OW = W / 2;
    for (long q = 0; q < P; q++)
        for (int oy = 0; oy < OH; oy++) {
            const float *restrict r0 = x + (q * H + 2 * oy) * W, *restrict r1 = r0 + W;
            float *restrict yr = y + (q * OH + oy) * OW;
            for (int ox = 0; ox < OW; ox++) {
                float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
                float m1 = b > a ? b : a, m2 = d > c ? d : c;
                yr[ox] = m2 > m1 ? m2 : m1;
            }
        }
}

int nn_maxpool2_argmax(const float *x, float y, int W)
{
    return x[0] == y ? 0 : x[1] == y ? 1 : x[W] == y ? W : W + 1;
}

void nn_maxpool2_backward(float *dx, const float *dy, const float *x, const float *y, int P, int H,
                          int W)
{
    int OH = H / 2, OW = W / 2;
    /* Every window writes all four of its cells (branch-free, so it vectorizes); only the row and
     * column a floor-pool drops on odd sizes need clearing first. */
    if ((H | W) & 1) memset(dx, 0, sizeof(float) * (size_t)P * H * W);
    for (long q = 0; q < P; q++)
        for (int oy = 0; oy < OH; oy++) {
            long r = (q * H + 2 * oy) * W;
            const float *restrict x0 = x + r, *restrict x1 = x0 + W;
            float *restrict d0 = dx + r, *restrict d1 = d0 + W;
            const float *restrict yr = y + (q * OH + oy) * OW, *restrict g =
                                                                       dy + (q * OH + oy) * OW;
            for (int ox = 0; ox < OW; ox++) {
                float m = yr[ox], v = g[ox];
                int a = x0[2 * ox] == m, b = !a && x0[2 * ox + 1] == m;
                int c = !a && !b && x1[2 * ox] == m, d = !a && !b && !c;
                d0[2 * ox] = a ? v : 0.0f;
                d0[2 * ox + 1] = b ? v : 0.0f;
                d1[2 * ox] = c ? v : 0.0f;
                d1[2 * ox + 1] = d ? v : 0.0f;
            }
        }
}

void nn_relu_forward(float *y, const float *x, long n)
{
    for (long i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0.0f;
}

void nn_relu_backward(float *dx, const float *dy, const float *y, long n)
{
    for (long i = 0; i < n; i++)
        dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

void nn_bn_forward(float *y, float *xhat, float *invstd, const float *x, const float *gamma,
                   const float *beta, float *rmean, float *rvar, int B, int C, int train,
                   float momentum, float eps)
{
    for (int c = 0; c < C; c++) {
        float mean, var;
        if (train) {
            double s = 0, s2 = 0;
            for (int n = 0; n < B; n++)
                s += (double)x[(long)n * C + c];
            double m = s / B;
            for (int n = 0; n < B; n++) {
                double d = (double)x[(long)n * C + c] - m;
                s2 += d * d;
            }
            mean = (float)m;
            var = (float)(s2 / B);
            float unbiased = B > 1 ? (float)(s2 / (B - 1)) : var;
            rmean[c] = (1 - momentum) * rmean[c] + momentum * mean;
            rvar[c] = (1 - momentum) * rvar[c] + momentum * unbiased;
        } else {
            mean = rmean[c];
            var = rvar[c];
        }
        float is = 1.0f / sqrtf(var + eps);
        invstd[c] = is;
        for (int n = 0; n < B; n++) {
            float h = (x[(long)n * C + c] - mean) * is;
            xhat[(long)n * C + c] = h;
            y[(long)n * C + c] = gamma[c] * h + beta[c];
        }
    }
}

void nn_bn_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *xhat,
                    const float *invstd, const float *gamma, int B, int C)
{
    for (int c = 0; c < C; c++) {
        double sdy = 0, sdyh = 0;
        for (int n = 0; n < B; n++) {
            sdy += (double)dy[(long)n * C + c];
            sdyh += (double)dy[(long)n * C + c] * (double)xhat[(long)n * C + c];
        }
        dgamma[c] += (float)sdyh;
        dbeta[c] += (float)sdy;
        if (!dx) continue;
        /* dx = γ·invstd/B · (B·dy − Σdy − xhat·Σ(dy·xhat)) */
        float scale = gamma[c] * invstd[c] / (float)B;
        for (int n = 0; n < B; n++) {
            long i = (long)n * C + c;
            dx[i] = scale * ((float)B * dy[i] - (float)sdy - xhat[i] * (float)sdyh);
        }
    }
}

float nn_softmax_xent(float *dlogits, const float *logits, const int32_t *y, int B, int K)
{
    double loss = 0;
    for (int n = 0; n < B; n++) {
        const float *z = logits + (long)n * K;
        float mx = -FLT_MAX;
        for (int j = 0; j < K; j++)
            if (z[j] > mx) mx = z[j];
        double sum = 0;
        for (int j = 0; j < K; j++)
            sum += exp((double)(z[j] - mx));
        double lse = (double)mx + log(sum);
        loss += lse - (double)z[y[n]];
        if (dlogits) {
            float *d = dlogits + (long)n * K;
            for (int j = 0; j < K; j++)
                d[j] = (float)(exp((double)z[j] - lse) / B);
            d[y[n]] -= 1.0f / (float)B;
        }
    }
    return (float)(loss / B);
}

void nn_transpose_bcn(float *b, const float *a, int B, int C, int N)
{
    for (int n = 0; n < B; n++)
        for (int c = 0; c < C; c++)
            memcpy(b + ((long)c * B + n) * N, a + ((long)n * C + c) * N, sizeof(float) * (size_t)N);
}
