/*
 * compare.h — how the model tests compare logits rows: the three measures of
 * ../shared/golden/README.md (top token, maximum absolute difference relative to the
 * row's largest |logit|, KL divergence of the softmaxes) and the argmax.
 */
#ifndef CERA_TEST_MODEL_COMPARE_H
#define CERA_TEST_MODEL_COMPARE_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

static inline int argmax_f32(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* True when every value of the row is finite: NaN or infinite logits must fail a
 * comparison (NaN compares false with any bound, so the measures return INFINITY). */
static inline bool all_finite_f32(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* max |a - ref| / max |ref| over a row; INFINITY when a value is not finite */
static inline double rel_max_diff(const float *a, const float *ref, int n) {
    if (!all_finite_f32(a, n) || !all_finite_f32(ref, n)) return INFINITY;
    double md = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)ref[i]);
        if (d > md) md = d;
        if (fabs((double)ref[i]) > mx) mx = fabs((double)ref[i]);
    }
    return mx > 0 ? md / mx : md;
}

/* KL(softmax(ref) || softmax(a)) in nats; INFINITY when a value is not finite */
static inline double kl_div(const float *a, const float *ref, int n) {
    if (!all_finite_f32(a, n) || !all_finite_f32(ref, n)) return INFINITY;
    double ma = a[0], mr = ref[0];
    for (int i = 1; i < n; i++) {
        if (a[i] > ma) ma = a[i];
        if (ref[i] > mr) mr = ref[i];
    }
    double za = 0, zr = 0;
    for (int i = 0; i < n; i++) {
        za += exp((double)a[i] - ma);
        zr += exp((double)ref[i] - mr);
    }
    double kl = 0;
    for (int i = 0; i < n; i++) {
        const double lp = (double)ref[i] - mr - log(zr), lq = (double)a[i] - ma - log(za);
        kl += exp(lp) * (lp - lq);
    }
    return kl > 0 ? kl : 0;
}

#endif
