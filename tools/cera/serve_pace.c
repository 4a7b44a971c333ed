/*
 * serve_pace.c — the step-time model of `cera serve --itl-target` (serve_pace.h).
 */
#include <stdlib.h>

#include "serve_pace.h"

/* how fast a step size's average follows new steps */
#define PACE_ALPHA 0.2
/* the sizes below the largest seen one that give the slope past it */
#define PACE_SLOPE_SPAN 16

bool serve_pace_init(serve_pace *p, int cap) {
    p->cap = cap > 0 ? cap : 1;
    p->seen = 0;
    p->ms = calloc((size_t)p->cap + 1, sizeof *p->ms);
    p->count = calloc((size_t)p->cap + 1, sizeof *p->count);
    if (p->ms && p->count) return true;
    serve_pace_free(p);
    return false;
}

void serve_pace_free(serve_pace *p) {
    free(p->ms);
    free(p->count);
    p->ms = NULL;
    p->count = NULL;
    p->seen = 0;
}

void serve_pace_observe(serve_pace *p, int n, double ms) {
    if (n < 1 || n > p->cap || !(ms >= 0)) return;
    p->seen += !p->count[n];
    p->ms[n] = p->count[n] ? p->ms[n] + PACE_ALPHA * (ms - p->ms[n]) : ms;
    if (p->count[n] < 1 << 30) p->count[n]++;
}

bool serve_pace_empty(const serve_pace *p) { return p->seen == 0; }

double serve_pace_predict(const serve_pace *p, int n) {
    if (n <= 0 || !p->ms) return 0;
    int lo = n < p->cap ? n : p->cap, hi = n;
    while (lo > 0 && !p->count[lo]) lo--;
    while (hi <= p->cap && !p->count[hi]) hi++;
    if (lo == n) return p->ms[n];
    if (lo > 0 && hi <= p->cap) return p->ms[lo] + (p->ms[hi] - p->ms[lo]) * (n - lo) / (hi - lo);
    if (hi <= p->cap) return p->ms[hi]; /* smaller than any seen: no cheaper than the smallest */
    if (lo == 0) return 0;
    /* past the largest size seen: the least-squares slope of the sizes seen just under it */
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int k = 0;
    for (int m = lo > PACE_SLOPE_SPAN ? lo - PACE_SLOPE_SPAN : 1; m <= lo; m++)
        if (p->count[m]) {
            sx += m;
            sy += p->ms[m];
            sxx += (double)m * m;
            sxy += m * p->ms[m];
            k++;
        }
    const double den = k * sxx - sx * sx;
    double slope = k >= 2 && den > 0 ? (k * sxy - sx * sy) / den : 0;
    const double least = p->ms[lo] / lo / 4;
    if (slope < least) slope = least;
    return p->ms[lo] + slope * (n - lo);
}

int serve_pace_room(const serve_pace *p, int base, int max_more, double target_ms) {
    if (max_more <= 0 || serve_pace_predict(p, base + 1) > target_ms) return 0;
    int lo = 1, hi = max_more; /* predict(base + lo) fits; find the largest that does */
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (serve_pace_predict(p, base + mid) <= target_ms)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}
