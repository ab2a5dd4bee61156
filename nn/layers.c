/* nn/layers.c -- the double-precision layers of nn/layers.h. Their loops fix the order of every
 * sum (the results are part of the goldens): keep it. */
#include "nn/layers.h"

#include <string.h>

void nn_linear64_forward(double *y, const double *x, const float *w, const float *b, int B, int I,
                         int O)
{
    for (int n = 0; n < B; n++) {
        const double *xn = x + (long)n * I;
        for (int o = 0; o < O; o++) {
            const float *wo = w + (long)o * I;
            double acc = b ? (double)b[o] : 0.0;
            for (int i = 0; i < I; i++)
                acc += (double)wo[i] * xn[i];
            y[(long)n * O + o] = acc;
        }
    }
}

void nn_linear64_backward(double *dx, double *dw, double *db, const double *dy, const double *x,
                          const float *w, int B, int I, int O)
{
    for (int n = 0; n < B; n++) {
        const double *xn = x + (long)n * I, *dyn = dy + (long)n * O;
        double *dxn = dx ? dx + (long)n * I : NULL;
        if (dxn) memset(dxn, 0, sizeof(double) * (size_t)I);
        for (int o = 0; o < O; o++) {
            double d = dyn[o];
            if (db) db[o] += d;
            if (dw) {
                double *dwo = dw + (long)o * I;
                for (int i = 0; i < I; i++)
                    dwo[i] += d * xn[i];
            }
            if (dxn) {
                const float *wo = w + (long)o * I;
                for (int i = 0; i < I; i++)
                    dxn[i] += d * (double)wo[i];
            }
        }
    }
}

void nn_relu64_forward(double *y, const double *x, long n)
{
    for (long i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0.0;
}

void nn_relu64_backward(double *dx, const double *dy, const double *y, long n)
{
    for (long i = 0; i < n; i++)
        dx[i] = y[i] > 0 ? dy[i] : 0.0;
}
