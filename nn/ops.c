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

/* Streaming kernels for a small batch against a big weight matrix. OpenBLAS packs both operands
 * of every sgemm; when W (O×I) is megabytes and the batch is about ten rows, copying W into its
 * packed layout costs more than the product itself. These read W once, where it lies, with the
 * batch rows in cache and register tiles of 16-float vectors (GCC's vector extension; loops over
 * a tile's constant sizes unroll once inlined). Measured on the 2-core EPYC dev machine for cnn2's
 * fc1 (512×3136) at B = 10 with W out of cache: forward 1.09 → 0.83 ms, input gradient 1.51 →
 * 0.72 ms; below STREAM_MIN_W weights, or above the batch limits, sgemm is as fast or faster. The
 * weight gradient stays sgemm when it is to be stored; a caller that steps right after backward
 * can have nn_linear_step apply it instead, never storing it (cnn2 at batch 10: +15% samples/s).
 */
typedef float v16 __attribute__((vector_size(64)));
enum { STREAM_MIN_W = 1 << 18, STREAM_FWD_MAX_B = 10, STREAM_DX_MAX_B = 20 };
#define INLINE static inline __attribute__((always_inline))
/* The cases of a switch over a batch count of 1 … 10, each calling a tile with that constant
 * (CASE(n, a) is one `case n:`), so each count gets its own unrolled copy. */
#define CASES_10_TO_1(CASE, a)                                                                     \
    CASE(10, a);                                                                                   \
    CASE(9, a);                                                                                    \
    CASE(8, a);                                                                                    \
    CASE(7, a);                                                                                    \
    CASE(6, a);                                                                                    \
    CASE(5, a);                                                                                    \
    CASE(4, a);                                                                                    \
    CASE(3, a);                                                                                    \
    CASE(2, a);                                                                                    \
    CASE(1, a)

/* y[b][r] = x[b]·w[r] for BB ≤ 5 batch rows and R ≤ 4 weight rows (y row stride O). */
INLINE void fwd_tile(float *restrict y, const float *restrict x, const float *restrict w, int ldw,
                     int I, int O, int BB, int R)
{
    v16 acc[5][4];
    for (int b = 0; b < BB; b++)
        for (int r = 0; r < R; r++)
            acc[b][r] = (v16){0};
    int i = 0;
    for (; i + 16 <= I; i += 16) {
        v16 wv[4];
        for (int r = 0; r < R; r++)
            memcpy(&wv[r], w + (long)r * ldw + i, sizeof wv[r]);
        for (int b = 0; b < BB; b++) {
            v16 xv;
            memcpy(&xv, x + (long)b * I + i, sizeof xv);
            for (int r = 0; r < R; r++)
                acc[b][r] += xv * wv[r];
        }
    }
    for (int b = 0; b < BB; b++)
        for (int r = 0; r < R; r++) {
            float s = 0;
            for (int j = 0; j < 16; j++)
                s += acc[b][r][j];
            for (int k = i; k < I; k++)
                s += x[(long)b * I + k] * w[(long)r * ldw + k];
            y[(long)b * O + r] = s;
        }
}

/* Rows [0, BB) of y for weight rows [0, R): four weight rows at a time. */
static void fwd_rows(float *y, const float *x, const float *w, int ldw, int I, int O, int BB, int R)
{
    int r = 0;
#define FWD_CASE(n)                                                                                \
    case n:                                                                                        \
        fwd_tile(y + r, x, w + (long)r * ldw, ldw, I, O, n, 4);                                    \
        break
    for (; r + 4 <= R; r += 4)
        switch (BB) {
            FWD_CASE(5);
            FWD_CASE(4);
            FWD_CASE(3);
            FWD_CASE(2);
            FWD_CASE(1);
        }
#undef FWD_CASE
    for (; r < R; r++)
        for (int b = 0; b < BB; b++)
            fwd_tile(y + (long)b * O + r, x + (long)b * I, w + (long)r * ldw, ldw, I, O, 1, 1);
}

/* Weight rows in blocks of 16 (they stay in L2 while every batch block passes over them). */
static void linear_forward_stream(float *y, const float *x, const float *w, int ldw, int B, int I,
                                  int O)
{
    for (int o = 0; o < O; o += 16)
        for (int b = 0; b < B; b += 5)
            fwd_rows(y + (long)b * O + o, x + (long)b * I, w + (long)o * ldw, ldw, I, O,
                     B - b < 5 ? B - b : 5, O - o < 16 ? O - o : 16);
}

/* dx[b][0, 16·C) = Σ_o dy[b][o]·w[o][0, 16·C) for BB ≤ 10 batch rows (dx row stride I): up to
 * ten rows per pass, so W streams from memory once for a batch of ten. */
INLINE void dx_tile(float *restrict dx, const float *restrict dy, const float *restrict w, int ldw,
                    int I, int O, int BB, int C)
{
    v16 acc[10][2];
    for (int b = 0; b < BB; b++)
        for (int c = 0; c < C; c++)
            acc[b][c] = (v16){0};
    for (int o = 0; o < O; o++) {
        v16 wv[2];
        for (int c = 0; c < C; c++) {
            memcpy(&wv[c], w + (long)o * ldw + 16 * c, sizeof wv[c]);
            /* the same row's next strip: 512 rows at a stride are more streams than the hardware
             * prefetcher follows */
            __builtin_prefetch(w + (long)o * ldw + 16 * (C + c));
        }
        for (int b = 0; b < BB; b++) {
            float a = dy[(long)b * O + o];
            for (int c = 0; c < C; c++)
                acc[b][c] += a * wv[c];
        }
    }
    for (int b = 0; b < BB; b++)
        for (int c = 0; c < C; c++)
            memcpy(dx + (long)b * I + 16 * c, &acc[b][c], sizeof acc[b][c]);
}

static void linear_dx_stream(float *dx, const float *dy, const float *w, int ldw, int B, int I,
                             int O)
{
    for (int b = 0; b < B; b += 10) {
        int BB = B - b < 10 ? B - b : 10;
        float *d = dx + (long)b * I;
        const float *g = dy + (long)b * O;
        int i = 0;
#define DX_CASE(n, c)                                                                              \
    case n:                                                                                        \
        dx_tile(d + i, g, w + i, ldw, I, O, n, c);                                                 \
        break
        for (; i + 32 <= I; i += 32)
            switch (BB) {
                CASES_10_TO_1(DX_CASE, 2);
            }
        for (; i + 16 <= I; i += 16)
            switch (BB) {
                CASES_10_TO_1(DX_CASE, 1);
            }
#undef DX_CASE
        for (; i < I; i++)
            for (int n = 0; n < BB; n++) {
                float s = 0;
                for (int o = 0; o < O; o++)
                    s += g[(long)n * O + o] * w[(long)o * ldw + i];
                d[(long)n * I + i] = s;
            }
    }
}

void nn_linear_forward(float *y, const float *x, const float *w, int ldw, const float *b, int B,
                       int I, int O)
{
    if (B <= STREAM_FWD_MAX_B && (long)I * O >= STREAM_MIN_W)
        linear_forward_stream(y, x, w, ldw, B, I, O);
    else
        gemm(0, 1, B, O, I, x, I, w, ldw, 0.0f, y, O);
    if (b)
        for (int n = 0; n < B; n++)
            for (int o = 0; o < O; o++)
                y[(long)n * O + o] += b[o];
}

void nn_linear_backward(float *dx, float *dw, int lddw, float *db, const float *dy, const float *x,
                        const float *w, int ldw, int B, int I, int O)
{
    if (dw) gemm(1, 0, O, I, B, dy, O, x, I, 1.0f, dw, lddw);
    if (db)
        for (int n = 0; n < B; n++)
            for (int o = 0; o < O; o++)
                db[o] += dy[(long)n * O + o];
    if (!dx) return;
    if (B <= STREAM_DX_MAX_B && (long)I * O >= STREAM_MIN_W)
        linear_dx_stream(dx, dy, w, ldw, B, I, O);
    else
        gemm(0, 0, B, I, O, dy, O, w, ldw, 0.0f, dx, I);
}

/* R ≤ 4 rows of w (and of its velocity v, same layout) take their step from the gradient of BB ≤
 * 10 batch rows: per 16-float strip the batch rows are loaded once and serve the R rows. */
INLINE void step_tile(float *restrict w, float *restrict v, int ldw, const float *restrict dy,
                      const float *restrict x, int I, int O, int BB, int R, const float *hp)
{
    float lr = hp[0], mu = hp[1], wd = hp[2], c[4][10];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BB; b++)
            c[r][b] = dy[(long)b * O + r];
    int i = 0;
    for (; i + 16 <= I; i += 16) {
        v16 xv[10];
        for (int b = 0; b < BB; b++)
            memcpy(&xv[b], x + (long)b * I + i, sizeof xv[b]);
        for (int r = 0; r < R; r++) {
            v16 g = {0}, wv, vv;
            for (int b = 0; b < BB; b++)
                g += c[r][b] * xv[b];
            float *wr = w + (long)r * ldw + i, *vr = v + (long)r * ldw + i;
            memcpy(&wv, wr, sizeof wv);
            if (mu == 0) {
                wv -= lr * (g + wd * wv);
            } else {
                memcpy(&vv, vr, sizeof vv);
                vv = mu * vv + (g + wd * wv);
                wv -= lr * vv;
                memcpy(vr, &vv, sizeof vv);
            }
            memcpy(wr, &wv, sizeof wv);
        }
    }
    for (; i < I; i++)
        for (int r = 0; r < R; r++) {
            float g = 0, *wr = w + (long)r * ldw + i, *vr = v + (long)r * ldw + i;
            for (int b = 0; b < BB; b++)
                g += c[r][b] * x[(long)b * I + i];
            if (mu == 0) {
                *wr -= lr * (g + wd * *wr);
            } else {
                *vr = mu * *vr + (g + wd * *wr);
                *wr -= lr * *vr;
            }
        }
}

int nn_linear_step_fuses(int B, int I, int O)
{
    return B >= 1 && B <= STREAM_FWD_MAX_B && (long)I * O >= STREAM_MIN_W;
}

void nn_linear_step(float *w, float *v, int ldw, const float *dy, const float *x, int B, int I,
                    int O, float lr, float mu, float wd)
{
    const float hp[3] = {lr, mu, wd};
    int o = 0;
#define STEP_CASE(n, r)                                                                            \
    case n:                                                                                        \
        step_tile(w + (long)o * ldw, v + (long)o * ldw, ldw, dy + o, x, I, O, n, r, hp);           \
        break
    for (; o + 4 <= O; o += 4)
        switch (B) {
            CASES_10_TO_1(STEP_CASE, 4);
        }
    for (; o < O; o++)
        switch (B) {
            CASES_10_TO_1(STEP_CASE, 1);
        }
#undef STEP_CASE
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

/* ---------------------------------------------------------------------------------------- */
/* convolution: Winograd F(m×m, k×k) for stride 1, k = 5 and k = 3, both with m = 4
 *
 * k = 3 uses 6×6 tiles (points 0, ±1, ±2, ∞), k = 5 8×8 tiles (0, ±1, ±2, ±1/2, ∞; Lavin & Gray
 * 2016). Per tile and channel pair the 25 (or 9) multiplies per output become n²/m² in the
 * transformed domain, where the channel sums are n² GEMMs (O × C)·(C × tiles): cnn2's second
 * layer (14×14 outputs: 16 tiles of 64 values a channel) does 4.8× fewer multiplies than im2col.
 * F(2×2, 5×5) on 6×6 tiles, which ran here before, did 2.8× fewer (49 tiles of 36 values); at
 * about the same float error against the double-precision reference on that layer (with
 * He-scaled weights, 3.1·10⁻⁶ of the largest output against 2.2·10⁻⁶) pa3dfl-cnn trains 16%
 * more samples a second at batch 50 (README, "Throughput"). Backward is exact under the same
 * algebra: the weight gradient is Gᵀ[Σ_tiles (A·dy·Aᵀ) ⊙ (Bᵀ·x·B)]G, and the input gradient is the
 * forward's adjoint, B·[Σ_o U ⊙ (A·dy·Aᵀ)]·Bᵀ put back on each tile's patch: the transformed dy
 * serves both, and only the C input channels are transformed again, not the O channels of dy as a
 * conv of dy with the rotated filters would. Transforms run over all tiles of a chunk at once (rows
 * of tiles), so they vectorize. Counted FLOPs stay those of the direct convolution: that is what
 * the layer costs a device; the transform is how this host pays less for it. */

#define WT_MAX 8 /* the largest tile side */
/* Transformed values a chunk holds per channel (its tiles × n²): the chunk's transformed input
 * and output stay in cache between the transform and the GEMMs, and the GEMMs stay wide enough
 * to run near peak (256 tiles of 6×6, as tuned for those; 8×8 tiles ran as fast from 64 to 192
 * tiles a chunk, slower at 256 and above) */
#define WINO_VALUES (256 * 36)
/* Input channels below which im2col wins. A first layer of one channel gains nothing: its output
 * and output-gradient transforms (O channels a tile) cost what its one-deep GEMMs save (make
 * bench: pa3dfl-cnn 5-10% slower with it, cnn2 no faster). From two channels Winograd wins, most
 * of all in narrow sub-models, whose im2col GEMMs are thin: cnn2 at width 1/8 (4 input channels
 * in conv2) went from 11,757 to 18,402 samples/s at batch 64 when this moved from 8 to 2. */
#define WINO_MIN_C 2

/* The 6-point matrices (points 0, 1, −1, 2, −2, ∞), applied by the x_* kernels below:
 *   Bᵀ (6×6): rows (4 0 −5 0 1 0) (0 −4 −4 1 1 0) (0 4 −4 −1 1 0) (0 −2 −1 2 1 0) (0 2 −1 −2 1 0)
 *             (0 4 0 −5 0 1);
 *   Aᵀ (4×6): row i is point^i, and 1 at ∞ in the last row;
 *   G (6×3):  row j is c_j·point_j^q with c = 1/4, −1/6, −1/6, 1/24, 1/24, and (0 0 1) at ∞.
 * The 8-point ones are with their kernels. */

typedef void xform1(float *const *o, const float *const *d, long n);

/* A Winograd conv F(m×m, k×k) on n×n tiles (n = m + k − 1), and the 1-D transforms (x_* below)
 * it applies: Bᵀ and B (n → n), Aᵀ (n → m) and A (m → n), G (k → n) and Gᵀ (n → k). */
typedef struct wino {
    int k, m, n; /* kernel side, output tile side, tile side */
    xform1 *bt, *b, *at, *a, *g, *gt;
} wino;

static wino wino_of(int k);

/* Tile grid of a stride-1 conv writing OH×OW from H×W padded by p: tile (b, ty, tx) reads the
 * n×n input patch at (ty·m − p, tx·m − p) and writes the m×m outputs at (ty·m, tx·m). RY: rows
 * of the split planes wino_in builds; tiles [lo[s], hi[s]) have patch column s in the image
 * (0 <= tx·m + s − p < W); a tile row has nx[i] outputs at column offset i < m. Computed once
 * here: the transforms' inner loops are a tile row long, and a division per loop showed. */
typedef struct grid {
    int H, W, OH, OW, p, TH, TW, P, RY;
    int lo[WT_MAX], hi[WT_MAX], nx[WT_MAX];
} grid;

int nn_conv_winograd(int C, int k, int s, int p)
{
    return C >= WINO_MIN_C && s == 1 && (k == 3 || k == 5) && p >= 0 && p <= k - 1;
}

static int cdiv(int a, int b)
{
    return (a + b - 1) / b;
}

static size_t max_sz(size_t a, size_t b)
{
    return a > b ? a : b;
}

static grid grid_of(const wino *t, int H, int W, int p)
{
    int m = t->m;
    grid g = {H, W, H + 2 * p - t->k + 1, W + 2 * p - t->k + 1, p, 0, 0, 0, 0, {0}, {0}, {0}};
    g.TH = cdiv(g.OH, m);
    g.TW = cdiv(g.OW, m);
    g.P = g.TH * g.TW;
    g.RY = g.TH + (t->n - 1) / m;
    for (int s = 0; s < t->n; s++) {
        int lo = p - s <= 0 ? 0 : cdiv(p - s, m),
            hi = W - 1 + p - s < 0 ? 0 : (W - 1 + p - s) / m + 1;
        g.hi[s] = hi > g.TW ? g.TW : hi;
        g.lo[s] = lo > g.hi[s] ? g.hi[s] : lo;
    }
    for (int i = 0; i < m; i++)
        g.nx[i] = i < g.OW ? cdiv(g.OW - i, m) : 0;
    return g;
}

/* The most samples a chunk takes: WINO_VALUES transformed values a channel, at least one. */
static int wino_per(const wino *t, const grid *g)
{
    int per = WINO_VALUES / (t->n * t->n * g->P);
    return per < 1 ? 1 : per;
}

/* Samples per chunk for a batch of B, balanced over the chunks. */
static int wino_chunk(int B, const wino *t, const grid *g)
{
    int chunks = cdiv(B, wino_per(t, g));
    return cdiv(B, chunks);
}

/* Floats of a chunk's buffers for Ci → Co channels: transformed input and output, two n²-row
 * work areas and one sample's split planes. Only grows with B (a chunk never exceeds
 * min(B, per)). */
static size_t wino_chunk_floats(const wino *t, const grid *g, int B, int Ci, int Co)
{
    int per = wino_per(t, g);
    size_t nt = (size_t)(B < per ? B : per) * g->P;
    size_t n2 = (size_t)t->n * t->n;
    return n2 * nt * ((size_t)Ci + Co + 2) + (size_t)t->n * t->m * g->RY * g->TW;
}

size_t nn_conv_scratch(int B, int C, int H, int W, int O, int k, int s, int p)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p);
    if (!nn_conv_winograd(C, k, s, p))
        return (size_t)C * k * k * OH * OW * (size_t)nn_conv_chunk(B, C, k, OH, OW);
    wino t = wino_of(k);
    grid g = grid_of(&t, H, W, p);
    size_t pairs = (size_t)O * C, n2 = (size_t)t.n * t.n, work = (k * k + n2) * pairs;
    work = max_sz(work, wino_chunk_floats(&t, &g, B, C, O));
    return 2 * n2 * pairs + work;
}

/* 1-D transforms of rows of n values, o[a][j] = Σ_q T[a][q]·d[q][j] for the matrices above,
 * written out so the j loops vectorize: the rows are restrict parameters (GCC honours restrict
 * on parameters), and a wrapper of one signature unpacks them for tile_transform. */
#define FO float *restrict
#define FI const float *restrict

/* Bᵀ: 6 → 6 */
static void k_bt(FO o0, FO o1, FO o2, FO o3, FO o4, FO o5, FI d0, FI d1, FI d2, FI d3, FI d4, FI d5,
                 long n)
{
    for (long j = 0; j < n; j++) {
        float a0 = d0[j], a1 = d1[j], a2 = d2[j], a3 = d3[j], a4 = d4[j], a5 = d5[j];
        o0[j] = 4 * a0 - 5 * a2 + a4;
        o1[j] = a3 + a4 - 4 * (a1 + a2);
        o2[j] = 4 * (a1 - a2) + a4 - a3;
        o3[j] = 2 * (a3 - a1) + a4 - a2;
        o4[j] = 2 * (a1 - a3) + a4 - a2;
        o5[j] = 4 * a1 - 5 * a3 + a5;
    }
}

static void x_bt(float *const *o, const float *const *d, long n)
{
    k_bt(o[0], o[1], o[2], o[3], o[4], o[5], d[0], d[1], d[2], d[3], d[4], d[5], n);
}

/* B = (Bᵀ)ᵀ: 6 → 6, for the input gradient */
static void k_b(FO o0, FO o1, FO o2, FO o3, FO o4, FO o5, FI d0, FI d1, FI d2, FI d3, FI d4, FI d5,
                long n)
{
    for (long j = 0; j < n; j++) {
        float a0 = d0[j], a1 = d1[j], a2 = d2[j], a3 = d3[j], a4 = d4[j], a5 = d5[j];
        o0[j] = 4 * a0;
        o1[j] = 4 * (a2 - a1 + a5) + 2 * (a4 - a3);
        o2[j] = -5 * a0 - 4 * (a1 + a2) - (a3 + a4);
        o3[j] = (a1 - a2) + 2 * (a3 - a4) - 5 * a5;
        o4[j] = a0 + (a1 + a2) + (a3 + a4);
        o5[j] = a5;
    }
}

static void x_b(float *const *o, const float *const *d, long n)
{
    k_b(o[0], o[1], o[2], o[3], o[4], o[5], d[0], d[1], d[2], d[3], d[4], d[5], n);
}

/* Aᵀ, m = 4: 6 → 4 */
static void k_at4(FO o0, FO o1, FO o2, FO o3, FI d0, FI d1, FI d2, FI d3, FI d4, FI d5, long n)
{
    for (long j = 0; j < n; j++) {
        float p = d1[j] + d2[j], q = d1[j] - d2[j], r = d3[j] + d4[j], s = d3[j] - d4[j];
        o0[j] = d0[j] + p + r;
        o1[j] = q + 2 * s;
        o2[j] = p + 4 * r;
        o3[j] = q + 8 * s + d5[j];
    }
}

static void x_at4(float *const *o, const float *const *d, long n)
{
    k_at4(o[0], o[1], o[2], o[3], d[0], d[1], d[2], d[3], d[4], d[5], n);
}

/* A, m = 4: 4 → 6 */
static void k_a4(FO o0, FO o1, FO o2, FO o3, FO o4, FO o5, FI d0, FI d1, FI d2, FI d3, long n)
{
    for (long j = 0; j < n; j++) {
        float a0 = d0[j], a1 = d1[j], a2 = d2[j], a3 = d3[j];
        o0[j] = a0;
        o1[j] = (a0 + a2) + (a1 + a3);
        o2[j] = (a0 + a2) - (a1 + a3);
        o3[j] = (a0 + 4 * a2) + (2 * a1 + 8 * a3);
        o4[j] = (a0 + 4 * a2) - (2 * a1 + 8 * a3);
        o5[j] = a3;
    }
}

static void x_a4(float *const *o, const float *const *d, long n)
{
    k_a4(o[0], o[1], o[2], o[3], o[4], o[5], d[0], d[1], d[2], d[3], n);
}

/* G, k = 3: 3 → 6 */
static void k_g3(FO o0, FO o1, FO o2, FO o3, FO o4, FO o5, FI d0, FI d1, FI d2, long n)
{
    for (long j = 0; j < n; j++) {
        float g0 = d0[j], g1 = d1[j], g2 = d2[j], e = g0 + g2, e2 = g0 + 4 * g2;
        o0[j] = g0 * (1.f / 4);
        o1[j] = -(e + g1) * (1.f / 6);
        o2[j] = -(e - g1) * (1.f / 6);
        o3[j] = (e2 + 2 * g1) * (1.f / 24);
        o4[j] = (e2 - 2 * g1) * (1.f / 24);
        o5[j] = g2;
    }
}

static void x_g3(float *const *o, const float *const *d, long n)
{
    k_g3(o[0], o[1], o[2], o[3], o[4], o[5], d[0], d[1], d[2], n);
}

/* Gᵀ, k = 3: 6 → 3 */
static void k_g3t(FO o0, FO o1, FO o2, FI d0, FI d1, FI d2, FI d3, FI d4, FI d5, long n)
{
    for (long j = 0; j < n; j++) {
        float p = -(d1[j] + d2[j]) * (1.f / 6), q = -(d1[j] - d2[j]) * (1.f / 6);
        float r = (d3[j] + d4[j]) * (1.f / 24), s = (d3[j] - d4[j]) * (1.f / 24);
        o0[j] = d0[j] * (1.f / 4) + p + r;
        o1[j] = q + 2 * s;
        o2[j] = p + 4 * r + d5[j];
    }
}

static void x_g3t(float *const *o, const float *const *d, long n)
{
    k_g3t(o[0], o[1], o[2], d[0], d[1], d[2], d[3], d[4], d[5], n);
}

/* The 8-point transforms, for F(4×4, 5×5) (points 0, 1, −1, 2, −2, 1/2, −1/2, ∞; the matrices
 * are the standard ones of that point set, Bᵀ as in F(6×6, 3×3), G's rows scaled to match):
 *   Bᵀ (8×8): rows (1 0 −21/4 0 21/4 0 −1 0) (0 1 1 −17/4 −17/4 1 1 0) (0 −1 1 17/4 −17/4 −1 1 0)
 *             (0 1/2 1/4 −5/2 −5/4 2 1 0) (0 −1/2 1/4 5/2 −5/4 −2 1 0) (0 2 4 −5/2 −5 1/2 1 0)
 *             (0 −2 4 5/2 −5 −1/2 1 0) (0 −1 0 21/4 0 −21/4 0 1);
 *   Aᵀ (4×8): row i is point^i, and 1 at ∞ in the last row;
 *   G (8×5):  rows (1 0 0 0 0), −2/9·(1 ±1 1 ±1 1), 1/90·(1 ±2 4 ±8 16), 1/90·(64 ±32 16 ±8 4),
 *             (0 0 0 0 1).
 * Derived and checked exactly (rational arithmetic) against the direct correlation; the
 * unit tests compare the convolutions against the double-precision reference. */

/* Bᵀ: 8 → 8 */
static void k_bt8(FO o0, FO o1, FO o2, FO o3, FO o4, FO o5, FO o6, FO o7, FI d0, FI d1, FI d2,
                  FI d3, FI d4, FI d5, FI d6, FI d7, long n)
{
    for (long j = 0; j < n; j++) {
        float a1 = d1[j], a2 = d2[j], a3 = d3[j], a4 = d4[j], a5 = d5[j], a6 = d6[j];
        float p = a2 + a6 - 4.25f * a4, q = a1 + a5 - 4.25f * a3;
        float r = 0.25f * a2 - 1.25f * a4 + a6, s = 0.5f * a1 - 2.5f * a3 + 2 * a5;
        float u = 4 * a2 - 5 * a4 + a6, v = 2 * a1 - 2.5f * a3 + 0.5f * a5;
        o0[j] = (d0[j] - a6) + 5.25f * (a4 - a2);
        o1[j] = p + q;
        o2[j] = p - q;
        o3[j] = r + s;
        o4[j] = r - s;
        o5[j] = u + v;
        o6[j] = u - v;
        o7[j] = (d7[j] - a1) + 5.25f * (a3 - a5);
    }
}

static void x_bt8(float *const *o, const float *const *d, long n)
{
    k_bt8(o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
          d[7], n);
}

/* B = (Bᵀ)ᵀ: 8 → 8 */
static void k_b8(FO o0, FO o1, FO o2, FO o3, FO o4, FO o5, FO o6, FO o7, FI d0, FI d1, FI d2, FI d3,
                 FI d4, FI d5, FI d6, FI d7, long n)
{
    for (long j = 0; j < n; j++) {
        float a0 = d0[j], a7 = d7[j];
        float s1 = d1[j] + d2[j], t1 = d1[j] - d2[j], s3 = d3[j] + d4[j], t3 = d3[j] - d4[j];
        float s5 = d5[j] + d6[j], t5 = d5[j] - d6[j];
        o0[j] = a0;
        o1[j] = t1 + 0.5f * t3 + 2 * t5 - a7;
        o2[j] = s1 + 0.25f * s3 + 4 * s5 - 5.25f * a0;
        o3[j] = 5.25f * a7 - 4.25f * t1 - 2.5f * (t3 + t5);
        o4[j] = 5.25f * a0 - 4.25f * s1 - 1.25f * s3 - 5 * s5;
        o5[j] = t1 + 2 * t3 + 0.5f * t5 - 5.25f * a7;
        o6[j] = s1 + s3 + s5 - a0;
        o7[j] = a7;
    }
}

static void x_b8(float *const *o, const float *const *d, long n)
{
    k_b8(o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
         d[7], n);
}

/* Aᵀ, m = 4: 8 → 4 */
static void k_at4_8(FO o0, FO o1, FO o2, FO o3, FI d0, FI d1, FI d2, FI d3, FI d4, FI d5, FI d6,
                    FI d7, long n)
{
    for (long j = 0; j < n; j++) {
        float s1 = d1[j] + d2[j], t1 = d1[j] - d2[j], s3 = d3[j] + d4[j], t3 = d3[j] - d4[j];
        float s5 = d5[j] + d6[j], t5 = d5[j] - d6[j];
        o0[j] = d0[j] + s1 + s3 + s5;
        o1[j] = t1 + 2 * t3 + 0.5f * t5;
        o2[j] = s1 + 4 * s3 + 0.25f * s5;
        o3[j] = t1 + 8 * t3 + 0.125f * t5 + d7[j];
    }
}

static void x_at4_8(float *const *o, const float *const *d, long n)
{
    k_at4_8(o[0], o[1], o[2], o[3], d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], n);
}

/* A, m = 4: 4 → 8 */
static void k_a4_8(FO o0, FO o1, FO o2, FO o3, FO o4, FO o5, FO o6, FO o7, FI d0, FI d1, FI d2,
                   FI d3, long n)
{
    for (long j = 0; j < n; j++) {
        float a0 = d0[j], a1 = d1[j], a2 = d2[j], a3 = d3[j]; /* even and odd powers of ±x */
        float ev1 = a0 + a2, od1 = a1 + a3, ev2 = a0 + 4 * a2, od2 = 2 * a1 + 8 * a3;
        float ev3 = a0 + 0.25f * a2, od3 = 0.5f * a1 + 0.125f * a3;
        o0[j] = a0;
        o1[j] = ev1 + od1;
        o2[j] = ev1 - od1;
        o3[j] = ev2 + od2;
        o4[j] = ev2 - od2;
        o5[j] = ev3 + od3;
        o6[j] = ev3 - od3;
        o7[j] = a3;
    }
}

static void x_a4_8(float *const *o, const float *const *d, long n)
{
    k_a4_8(o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], d[0], d[1], d[2], d[3], n);
}

/* G, k = 5: 5 → 8 */
static void k_g5_8(FO o0, FO o1, FO o2, FO o3, FO o4, FO o5, FO o6, FO o7, FI d0, FI d1, FI d2,
                   FI d3, FI d4, long n)
{
    for (long j = 0; j < n; j++) {
        float g0 = d0[j], g1 = d1[j], g2 = d2[j], g3 = d3[j], g4 = d4[j];
        float e = g0 + g2 + g4, f = g1 + g3, e2 = g0 + 4 * g2 + 16 * g4, f2 = 2 * g1 + 8 * g3;
        float e3 = 64 * g0 + 16 * g2 + 4 * g4, f3 = 32 * g1 + 8 * g3;
        o0[j] = g0;
        o1[j] = (e + f) * (-2.f / 9);
        o2[j] = (e - f) * (-2.f / 9);
        o3[j] = (e2 + f2) * (1.f / 90);
        o4[j] = (e2 - f2) * (1.f / 90);
        o5[j] = (e3 + f3) * (1.f / 90);
        o6[j] = (e3 - f3) * (1.f / 90);
        o7[j] = g4;
    }
}

static void x_g5_8(float *const *o, const float *const *d, long n)
{
    k_g5_8(o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], d[0], d[1], d[2], d[3], d[4], n);
}

/* Gᵀ, k = 5: 8 → 5 */
static void k_g5t_8(FO o0, FO o1, FO o2, FO o3, FO o4, FI d0, FI d1, FI d2, FI d3, FI d4, FI d5,
                    FI d6, FI d7, long n)
{
    for (long j = 0; j < n; j++) {
        float p = (d1[j] + d2[j]) * (-2.f / 9), q = (d1[j] - d2[j]) * (-2.f / 9);
        float r = (d3[j] + d4[j]) * (1.f / 90), s = (d3[j] - d4[j]) * (1.f / 90);
        float u = (d5[j] + d6[j]) * (1.f / 90), v = (d5[j] - d6[j]) * (1.f / 90);
        o0[j] = d0[j] + p + r + 64 * u;
        o1[j] = q + 2 * s + 32 * v;
        o2[j] = p + 4 * r + 16 * u;
        o3[j] = q + 8 * s + 8 * v;
        o4[j] = p + 16 * r + 4 * u + d7[j];
    }
}

static void x_g5t_8(float *const *o, const float *const *d, long n)
{
    k_g5t_8(o[0], o[1], o[2], o[3], o[4], d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], n);
}

#undef FO
#undef FI

/* 5×5 kernels on 8×8 tiles, F(4×4, 5×5); 3×3 kernels on 6×6 tiles, F(4×4, 3×3). */
static wino wino_of(int k)
{
    if (k == 5) return (wino){5, 4, 8, x_bt8, x_b8, x_at4_8, x_a4_8, x_g5_8, x_g5t_8};
    return (wino){3, 4, 6, x_bt, x_b, x_at4, x_a4, x_g3, x_g3t};
}

/* Along the rows of tiles whose columns are already transformed: out[a][b] = Σ_s T[b][s]·in[a][s]
 * for a < no, in's row a·ni + s at in + (a·ni + s)·istride and out's row a·no + b at
 * out + (a·no + b)·ostride, rows of n. */
static void along_rows_of(xform1 *f, int no, int ni, float *out, long ostride, const float *in,
                          long istride, long n)
{
    const float *src[WT_MAX];
    float *dst[WT_MAX];
    for (int a = 0; a < no; a++) {
        for (int s = 0; s < ni; s++)
            src[s] = in + (a * ni + s) * istride;
        for (int b = 0; b < no; b++)
            dst[b] = out + (a * no + b) * ostride;
        f(dst, src, n);
    }
}

/* The 2-D transform T·X·Tᵀ of every tile at once with T (no × ni) applied by f: X is ni×ni rows
 * of n (row r·ni + s at in + (r·ni + s)·istride), the result no×no rows (row a·no + b at
 * out + (a·no + b)·ostride); tmp holds no·ni rows of n. */
static void tile_transform(xform1 *f, int no, int ni, float *out, long ostride, const float *in,
                           long istride, long n, float *tmp)
{
    const float *src[WT_MAX];
    float *dst[WT_MAX];
    for (int s = 0; s < ni; s++) { /* down the columns: tmp[a][s] = Σ_r T[a][r]·X[r][s] */
        for (int r = 0; r < ni; r++)
            src[r] = in + (r * ni + s) * istride;
        for (int a = 0; a < no; a++)
            dst[a] = tmp + (a * ni + s) * n;
        f(dst, src, n);
    }
    along_rows_of(f, no, ni, out, ostride, tmp, n, n);
}

/* The second pass of an n×n → n×n tile transform on its own. */
static void along_rows(xform1 *f, int tn, float *out, long ostride, const float *in, long istride,
                       long n)
{
    along_rows_of(f, tn, tn, out, ostride, in, istride, n);
}

/* Bᵀ·d·B of the chunk's tiles (samples [b0, b0+nb)) of one input channel, xc its B planes of
 * H×W: row ξ of the result at out + ξ·ostride. Each sample's padded input is first split into
 * n·m planes of RY × TW, Q[s][f][ry][tx] = x(ry·m + f − p, tx·m + s − p): row r of the patches of
 * all tiles is then the contiguous block of Q[s][r mod m] from row r / m, so the first pass runs
 * over a whole sample and the second over the chunk. work: n² rows of nt and the planes. */
static void wino_in(float *out, long ostride, const float *xc, const wino *t, const grid *g, int b0,
                    int nb, float *work)
{
    int m = t->m, n = t->n;
    long nt = (long)nb * g->P, qs = (long)g->RY * g->TW;
    float *t1 = work, *q = work + (long)n * n * nt;
    const float *src[WT_MAX];
    float *dst[WT_MAX];
    for (int bb = 0; bb < nb; bb++) {
        const float *plane = xc + (long)(b0 + bb) * g->H * g->W;
        for (int s = 0; s < n; s++)
            for (int f = 0; f < m; f++)
                for (int ry = 0; ry < g->RY; ry++) {
                    float *restrict d = q + (s * m + f) * qs + (long)ry * g->TW;
                    int iy = ry * m + f - g->p, in = iy >= 0 && iy < g->H;
                    int lo = in ? g->lo[s] : 0, hi = in ? g->hi[s] : 0;
                    for (int tx = 0; tx < lo; tx++)
                        d[tx] = 0;
                    if (lo < hi) {
                        const float *restrict row = plane + (long)iy * g->W;
                        for (int tx = lo; tx < hi; tx++)
                            d[tx] = row[tx * m + s - g->p];
                    }
                    for (int tx = hi; tx < g->TW; tx++)
                        d[tx] = 0;
                }
        for (int s = 0; s < n; s++) { /* down the columns: t1[ξr][s] = Σ_r Bᵀ[ξr][r]·d[r][s] */
            for (int r = 0; r < n; r++)
                src[r] = q + (s * m + r % m) * qs + (long)(r / m) * g->TW;
            for (int a = 0; a < n; a++)
                dst[a] = t1 + (a * n + s) * nt + (long)bb * g->P;
            t->bt(dst, src, g->P);
        }
    }
    along_rows(t->bt, n, out, ostride, t1, nt, nt); /* out[ξr][ξs] = Σ_s Bᵀ[ξs][s]·t1[ξr][s] */
}

/* The adjoint of wino_in: dxc (B planes of H×W) += B·dV·Bᵀ of the chunk's tiles put back where
 * wino_in read their patches, dV's row ξ at in + ξ·istride; padding positions are dropped. Its
 * passes in reverse order: along the rows over the chunk, then per sample down the columns into
 * the split planes, which are added onto the image (a position in several patches gets each
 * one's share, always in the same order). work: as wino_in's, and n rows of P. */
static void wino_in_adjoint(float *dxc, const float *in, long istride, const wino *t, const grid *g,
                            int b0, int nb, float *work)
{
    int m = t->m, n = t->n;
    long nt = (long)nb * g->P, qs = (long)g->RY * g->TW;
    float *t1 = work, *q = work + (long)n * n * nt, *rows = q + n * m * qs;
    const float *src[WT_MAX];
    float *dst[WT_MAX];
    along_rows(t->b, n, t1, nt, in, istride, nt); /* t1[ξr][s] = Σ_ξs B[s][ξs]·dV[ξr][ξs] */
    for (int bb = 0; bb < nb; bb++) {
        memset(q, 0, sizeof(float) * n * m * qs);
        for (int s = 0; s < n; s++) { /* patch row r of column s: Σ_ξr B[r][ξr]·t1[ξr][s] */
            for (int a = 0; a < n; a++)
                src[a] = t1 + (a * n + s) * nt + (long)bb * g->P;
            for (int r = 0; r < n; r++)
                dst[r] = rows + (long)r * g->P;
            t->b(dst, src, g->P);
            for (int r = 0; r < n; r++) {
                float *restrict d = q + (s * m + r % m) * qs + (long)(r / m) * g->TW;
                const float *restrict v = rows + (long)r * g->P;
                for (long j = 0; j < g->P; j++)
                    d[j] += v[j];
            }
        }
        float *plane = dxc + (long)(b0 + bb) * g->H * g->W;
        for (int s = 0; s < n; s++)
            for (int f = 0; f < m; f++)
                for (int ry = 0; ry < g->RY; ry++) {
                    int iy = ry * m + f - g->p;
                    if (iy < 0 || iy >= g->H) continue;
                    const float *restrict d = q + (s * m + f) * qs + (long)ry * g->TW;
                    float *restrict row = plane + (long)iy * g->W + s - g->p;
                    for (int tx = g->lo[s]; tx < g->hi[s]; tx++)
                        row[tx * m] += d[tx];
                }
    }
}

/* U[ξ][pair] = (G·f·Gᵀ)[ξ] for every filter f = w[o][c] (w + o·ldw + c·k²) at pair o·C + c.
 * work: (k² + n²) rows of O·C. */
static void wino_filters(float *U, const wino *t, const float *w, int ldw, int O, int C,
                         float *work)
{
    int kk = t->k * t->k;
    long n = (long)O * C;
    for (int q = 0; q < kk; q++) /* row by row: 25 rows written at once were 25 streams */
        for (int o = 0; o < O; o++) {
            float *restrict d = work + q * n + (long)o * C;
            const float *restrict f = w + (long)o * ldw + q;
            for (int c = 0; c < C; c++)
                d[c] = f[(long)c * kk];
        }
    tile_transform(t->g, t->n, t->k, U, n, work, n, n, work + kk * n);
}

/* y (Co,B,OH,OW) = x (Ci,B,H,W) ⊛ the filters transformed in U (n² × Co × Ci) [+ b]; buf holds
 * wino_chunk_floats. Every output is written. With kept, each chunk's transformed input stays
 * there (n²·Ci·B·P floats in all), chunk by chunk, for the weight gradient. */
static void wino_conv(float *y, float *kept, const float *x, const float *U, const float *b,
                      const wino *t, const grid *g, int B, int Ci, int Co, float *buf)
{
    int m = t->m, n2 = t->n * t->n, nbmax = wino_chunk(B, t, g);
    long ntmax = (long)nbmax * g->P, ny = (long)g->OH * g->OW;
    float *M = buf + n2 * (long)Ci * ntmax, *work = M + n2 * (long)Co * ntmax;
    for (int b0 = 0; b0 < B; b0 += nbmax) {
        int nb = B - b0 < nbmax ? B - b0 : nbmax;
        long nt = (long)nb * g->P;
        float *V = kept ? kept + n2 * (long)Ci * b0 * g->P : buf;
        for (int c = 0; c < Ci; c++)
            wino_in(V + c * nt, (long)Ci * nt, x + (long)c * B * g->H * g->W, t, g, b0, nb, work);
        for (int xi = 0; xi < n2; xi++)
            gemm(0, 0, Co, (int)nt, Ci, U + (long)xi * Co * Ci, Ci, V + (long)xi * Ci * nt, (int)nt,
                 0.0f, M + (long)xi * Co * nt, (int)nt);
        float *yt = work, *tmp = work + n2 * nt;
        for (int o = 0; o < Co; o++) {
            tile_transform(t->at, m, t->n, yt, nt, M + o * nt, (long)Co * nt, nt, tmp);
            float bias = b ? b[o] : 0.0f;
            for (int bb = 0; bb < nb; bb++) {
                float *plane = y + ((long)o * B + b0 + bb) * ny;
                for (int ty = 0; ty < g->TH; ty++)
                    for (int i = 0; i < m && ty * m + i < g->OH; i++) {
                        float *restrict row = plane + (long)(ty * m + i) * g->OW;
                        for (int i2 = 0; i2 < m && i2 < g->OW; i2++) {
                            const float *restrict src =
                                    yt + (i * m + i2) * nt + (long)bb * g->P + ty * g->TW;
                            int n = g->nx[i2];
                            for (int tx = 0; tx < n; tx++)
                                row[tx * m + i2] = src[tx] + bias;
                        }
                    }
            }
        }
    }
}

static void wino_forward(float *y, float *kept, float *buf, const float *x, const float *w, int ldw,
                         const float *b, int B, int C, int H, int W, int O, int k, int p)
{
    wino t = wino_of(k);
    grid g = grid_of(&t, H, W, p);
    long pairs = (long)O * C;
    float *U = buf, *work = buf + 2L * t.n * t.n * pairs;
    wino_filters(U, &t, w, ldw, O, C, work);
    wino_conv(y, kept, x, U, b, &t, &g, B, C, O, work);
}

/* dw += Gᵀ·[Σ_tiles (A·dy·Aᵀ) ⊙ (Bᵀ·x·B)]·G and dx = the adjoint of the forward: per tile,
 * B·[Σ_o U ⊙ (A·dy·Aᵀ)]·Bᵀ added back onto its input patch, so the transformed dy serves both.
 * kept: the transformed input the forward left, or NULL to transform x again. */
static void wino_backward(float *dx, float *dw, int lddw, const float *kept, const float *dy,
                          const float *x, const float *w, int ldw, int B, int C, int H, int W,
                          int O, int k, int p, float *buf)
{
    wino t = wino_of(k);
    grid g = grid_of(&t, H, W, p);
    int m = t.m, n2 = t.n * t.n, kk = k * k, nbmax = wino_chunk(B, &t, &g);
    long ntmax = (long)nbmax * g.P, pairs = (long)O * C;
    float *dU = buf, *U = buf + n2 * pairs, *work = buf + 2 * n2 * pairs;
    float *D = work + n2 * (long)C * ntmax, *cw = D + n2 * (long)O * ntmax;
    if (dx) {
        wino_filters(U, &t, w, ldw, O, C, work);
        memset(dx, 0, sizeof(float) * (size_t)C * B * H * W);
    }
    for (int b0 = 0; b0 < B; b0 += nbmax) {
        int nb = B - b0 < nbmax ? B - b0 : nbmax;
        long nt = (long)nb * g.P;
        const float *V = kept ? kept + n2 * (long)C * b0 * g.P : work;
        for (int c = 0; c < C && !kept; c++)
            wino_in(work + c * nt, (long)C * nt, x + (long)c * B * H * W, &t, &g, b0, nb, cw);
        float *pt = cw, *tmp = cw + n2 * nt;
        for (int o = 0; o < O; o++) {
            for (int bb = 0; bb < nb; bb++) /* pt[i][i2] = dy at tile offset (i, i2), 0 beyond */
                for (int ty = 0; ty < g.TH; ty++)
                    for (int i = 0; i < m; i++) {
                        int oy = ty * m + i;
                        for (int i2 = 0; i2 < m; i2++) {
                            float *restrict dst =
                                    pt + (i * m + i2) * nt + (long)bb * g.P + ty * g.TW;
                            int n = oy >= g.OH ? 0 : g.nx[i2];
                            if (n) {
                                const float *restrict row =
                                        dy + (((long)o * B + b0 + bb) * g.OH + oy) * g.OW + i2;
                                for (int tx = 0; tx < n; tx++)
                                    dst[tx] = row[tx * m];
                            }
                            for (int tx = n; tx < g.TW; tx++)
                                dst[tx] = 0;
                        }
                    }
            tile_transform(t.a, t.n, m, D + o * nt, (long)O * nt, pt, nt, nt, tmp);
        }
        for (int xi = 0; xi < n2; xi++)
            gemm(0, 1, O, C, (int)nt, D + (long)xi * O * nt, (int)nt, V + (long)xi * C * nt,
                 (int)nt, b0 ? 1.0f : 0.0f, dU + xi * pairs, C);
        if (!dx) continue;
        /* the transformed input is spent (or kept elsewhere): its room takes Σ_o U ⊙ D */
        for (int xi = 0; xi < n2; xi++)
            gemm(1, 0, C, (int)nt, O, U + xi * pairs, C, D + (long)xi * O * nt, (int)nt, 0.0f,
                 work + (long)xi * C * nt, (int)nt);
        for (int c = 0; c < C; c++)
            wino_in_adjoint(dx + (long)c * B * H * W, work + c * nt, (long)C * nt, &t, &g, b0, nb,
                            cw);
    }
    tile_transform(t.gt, k, t.n, work, pairs, dU, pairs, pairs, work + kk * pairs);
    for (int q = 0; q < kk; q++) /* row by row, as wino_filters */
        for (int o = 0; o < O; o++) {
            float *restrict d = dw + (long)o * lddw + q;
            const float *restrict v = work + q * pairs + (long)o * C;
            for (int c = 0; c < C; c++)
                d[(long)c * kk] += v[c];
        }
}

size_t nn_conv_kept(int B, int C, int H, int W, int k, int s, int p)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p);
    if (!nn_conv_winograd(C, k, s, p)) return (size_t)C * k * k * OH * OW * B;
    wino t = wino_of(k);
    grid g = grid_of(&t, H, W, p);
    return (size_t)t.n * t.n * C * B * g.P;
}

void nn_conv_forward(float *y, float *kept, float *col, const float *x, const float *w, int ldw,
                     const float *b, int B, int C, int H, int W, int O, int k, int s, int p)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p), K = C * k * k;
    int N = B * OH * OW, P = OH * OW, chunk = kept ? B : nn_conv_chunk(B, C, k, OH, OW);
    if (nn_conv_winograd(C, k, s, p)) {
        wino_forward(y, kept, col, x, w, ldw, b, B, C, H, W, O, k, p);
        return;
    }
    if (kept) col = kept;
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

/* Σ x[0..n) in 64 lanes: one running float sum is a chain of dependent adds (a bias gradient
 * over B·H·W positions cost a millisecond per conv1 step at batch 32). */
static float sum_f32(const float *x, long n)
{
    v16 acc[4] = {{0}};
    long i = 0;
    for (; i + 64 <= n; i += 64)
        for (int r = 0; r < 4; r++) {
            v16 v;
            memcpy(&v, x + i + 16 * r, sizeof v);
            acc[r] += v;
        }
    v16 t = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    float s = 0;
    for (int j = 0; j < 16; j++)
        s += t[j];
    for (; i < n; i++)
        s += x[i];
    return s;
}

void nn_conv_backward(float *dx, float *dw, int lddw, float *db, const float *kept, float *col,
                      const float *dy, const float *x, const float *w, int ldw, int B, int C, int H,
                      int W, int O, int k, int s, int p)
{
    int OH = nn_conv_out(H, k, s, p), OW = nn_conv_out(W, k, s, p);
    int N = B * OH * OW, K = C * k * k, P = OH * OW, chunk = nn_conv_chunk(B, C, k, OH, OW);
    if (db)
        for (int o = 0; o < O; o++)
            db[o] += sum_f32(dy + (long)o * N, N);
    if (nn_conv_winograd(C, k, s, p)) {
        wino_backward(dx, dw, lddw, kept, dy, x, w, ldw, B, C, H, W, O, k, p, col);
        return;
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

/* One row pair of windows. Eight windows at a time in 8-float vectors: the two cells of each
 * row are split out of 16 contiguous floats by shuffles, the first cell equal to the window's
 * max takes the gradient (the order nn_maxpool2_argmax uses), and the four results are
 * interleaved back. A row of OW >= 8 windows ends with one more vector over its last eight (the
 * overlap recomputes what it rewrites); shorter rows go one window at a time. GCC does not
 * vectorize the stride-2 loop itself below 16 windows a row, and cnn2's pools have 14 and 7. */
typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
/* __builtin_shufflevector (constant lanes of the pair a:b) is spelled the same in clang and in
 * GCC >= 12; GCC's own __builtin_shuffle does not exist in clang, which the fuzz build uses. */
#define EVEN(a, b) __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14)
#define ODD(a, b)  __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15)
#define LO(a, b)   __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11)
#define HI(a, b)   __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15)

INLINE void maxpool2_backward8(float *d0, float *d1, const float *x0, const float *x1,
                               const float *yr, const float *g)
{
    v8 a0, a1, b0, b1, m;
    v8i v;
    memcpy(&a0, x0, sizeof a0);
    memcpy(&a1, x0 + 8, sizeof a1);
    memcpy(&b0, x1, sizeof b0);
    memcpy(&b1, x1 + 8, sizeof b1);
    memcpy(&m, yr, sizeof m);
    memcpy(&v, g, sizeof v);
    v8i a = EVEN(a0, a1) == m;
    v8i b = ~a & (ODD(a0, a1) == m);
    v8i c = ~a & ~b & (EVEN(b0, b1) == m);
    v8i d = ~a & ~b & ~c;
    v8i ra = v & a, rb = v & b, rc = v & c, rd = v & d;
    v8i out[4] = {LO(ra, rb), HI(ra, rb), LO(rc, rd), HI(rc, rd)};
    memcpy(d0, &out[0], 2 * sizeof out[0]); /* the bits of floats: v is g's bits, masked */
    memcpy(d1, &out[2], 2 * sizeof out[2]);
}

static void maxpool2_backward_row(float *d0, float *d1, const float *x0, const float *x1,
                                  const float *yr, const float *g, int OW)
{
    if (OW >= 8) {
        for (int ox = 0;; ox += 8) {
            if (ox > OW - 8) ox = OW - 8;
            maxpool2_backward8(d0 + 2 * ox, d1 + 2 * ox, x0 + 2 * ox, x1 + 2 * ox, yr + ox, g + ox);
            if (ox == OW - 8) return;
        }
    }
    for (int ox = 0; ox < OW; ox++) {
        float m = yr[ox], v = g[ox];
        int a = x0[2 * ox] == m, b = !a & (x0[2 * ox + 1] == m);
        int c = !a & !b & (x1[2 * ox] == m), d = !a & !b & !c;
        d0[2 * ox] = a ? v : 0.0f;
        d0[2 * ox + 1] = b ? v : 0.0f;
        d1[2 * ox] = c ? v : 0.0f;
        d1[2 * ox + 1] = d ? v : 0.0f;
    }
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
            long r = (q * H + 2 * oy) * W, o = (q * OH + oy) * OW;
            maxpool2_backward_row(dx + r, dx + r + W, x + r, x + r + W, y + o, dy + o, OW);
        }
}

double nn_dot(const float *a, const float *b, size_t n)
{
    double acc[8] = {0}, s = 0;
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += (double)a[j + k] * (double)b[j + k];
    for (; j < n; j++)
        s += (double)a[j] * (double)b[j];
    for (int k = 0; k < 8; k++)
        s += acc[k];
    return s;
}

double nn_sumsq(const float *x, size_t n)
{
    return nn_dot(x, x, n);
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

void nn_sigmoid_forward(float *y, const float *x, long n)
{
    for (long i = 0; i < n; i++)
        y[i] = 1 / (1 + expf(-x[i]));
}

void nn_sigmoid_backward(float *dx, const float *dy, const float *y, long n)
{
    for (long i = 0; i < n; i++)
        dx[i] = dy[i] * y[i] * (1 - y[i]);
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

/* log Σ_j exp(z_j), shifted by the maximum so nothing overflows. */
static double log_sum_exp(const float *z, int K)
{
    float mx = -FLT_MAX;
    for (int j = 0; j < K; j++)
        if (z[j] > mx) mx = z[j];
    double sum = 0;
    for (int j = 0; j < K; j++)
        sum += exp((double)(z[j] - mx));
    return (double)mx + log(sum);
}

float nn_softmax_xent(float *dlogits, const float *logits, const int32_t *y, int B, int K)
{
    double sq;
    return nn_softmax_xent_sq(dlogits, logits, y, B, K, &sq);
}

float nn_softmax_xent_sq(float *dlogits, const float *logits, const int32_t *y, int B, int K,
                         double *sq)
{
    double loss = 0;
    *sq = 0;
    for (int n = 0; n < B; n++) {
        const float *z = logits + (long)n * K;
        double lse = log_sum_exp(z, K), l = lse - (double)z[y[n]];
        loss += l;
        *sq += l * l;
        if (dlogits) {
            float *d = dlogits + (long)n * K;
            for (int j = 0; j < K; j++)
                d[j] = (float)(exp((double)z[j] - lse) / B);
            d[y[n]] -= 1.0f / (float)B;
        }
    }
    return (float)(loss / B);
}

float nn_softmax_xent_soft(float *dlogits, const float *logits, const float *q, int B, int K)
{
    double loss = 0;
    for (int n = 0; n < B; n++) {
        const float *z = logits + (long)n * K, *t = q + (long)n * K;
        double lse = log_sum_exp(z, K);
        for (int j = 0; j < K; j++)
            loss += (double)t[j] * (lse - (double)z[j]);
        if (dlogits)
            for (int j = 0; j < K; j++)
                dlogits[(long)n * K + j] = (float)((exp((double)z[j] - lse) - (double)t[j]) / B);
    }
    return (float)(loss / B);
}

void nn_softmax(float *p, const float *logits, int B, int K)
{
    for (int n = 0; n < B; n++) {
        const float *z = logits + (long)n * K;
        double lse = log_sum_exp(z, K);
        for (int j = 0; j < K; j++)
            p[(long)n * K + j] = (float)exp((double)z[j] - lse);
    }
}

void nn_transpose_bcn(float *b, const float *a, int B, int C, int N)
{
    for (int n = 0; n < B; n++)
        for (int c = 0; c < C; c++)
            memcpy(b + ((long)c * B + n) * N, a + ((long)n * C + c) * N, sizeof(float) * (size_t)N);
}
