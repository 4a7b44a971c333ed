/*
 * stages.c — the sampler chain's stages over a candidate array (see stages.h).
 *
 * Each stage follows the semantics of the llama.cpp sampler of the same name
 * (src/llama-sampler.cpp at the reference commit): the same float/double arithmetic
 * in the same order, the same points where the array gets sorted, the same order
 * left behind. Sorting is the only costly part: top-k selects with a bounded heap
 * (one comparison per candidate in the common case) instead of sorting the
 * vocabulary, top-p first sorts only the 256 most likely tokens, and whole-vocabulary
 * sorts are radix sorts on (logit, id) keys.
 */
#include "sample/stages.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The total order of candidates: higher logit first, NaN last, then lower id. */
static inline bool cand_before(const cera_candidate *a, const cera_candidate *b) {
    const bool na = isnan(a->logit), nb = isnan(b->logit);
    if (na != nb) return nb;
    if (!na && a->logit != b->logit) return a->logit > b->logit;
    return a->id < b->id;
}

static int cand_cmp(const void *pa, const void *pb) {
    const cera_candidate *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

void cera_cands_from_logits(cera_candidates *c, const float *logits, size_t n) {
    for (size_t i = 0; i < n; i++) c->data[i] = (cera_candidate){(cera_token)i, logits[i], 0.0f};
    c->size = n;
    c->sorted = false;
}

/* The candidate order as an unsigned key: ascending key = descending logit (NaN
 * last, -0 as +0), then ascending id. */
static inline uint64_t cand_key(const cera_candidate *c) {
    uint32_t u;
    float l = c->logit == 0.0f ? 0.0f : c->logit;
    memcpy(&u, &l, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with the float */
    u = isnan(l) ? 0xffffffffu : ~u;                /* descending, NaN last */
    return (uint64_t)u << 32 | (uint32_t)c->id;
}

#define RADIX_MIN 256 /* below this, qsort is as fast */

void cera_cands_sort(cera_candidate *data, size_t n, cera_sample_scratch *ws) {
    if (n < RADIX_MIN) {
        qsort(data, n, sizeof(cera_candidate), cand_cmp);
        return;
    }
    /* LSD radix sort, 8 bits per pass, skipping digits equal in every key (e.g. the
     * high bytes of the ids); stable, so earlier passes order the ties. */
    uint32_t count[8][256] = {{0}};
    for (size_t i = 0; i < n; i++) {
        const uint64_t k = cand_key(&data[i]);
        for (int d = 0; d < 8; d++) count[d][(k >> (8 * d)) & 0xff]++;
    }
    cera_candidate *src = data, *dst = ws->cand2;
    for (int d = 0; d < 8; d++) {
        uint32_t *cnt = count[d];
        bool uniform = false;
        for (int b = 0; b < 256; b++)
            if (cnt[b]) {
                uniform = cnt[b] == n;
                break;
            }
        if (uniform) continue;
        uint32_t sum = 0;
        for (int b = 0; b < 256; b++) {
            const uint32_t c = cnt[b];
            cnt[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) dst[cnt[(cand_key(&src[i]) >> (8 * d)) & 0xff]++] = src[i];
        cera_candidate *t = src;
        src = dst;
        dst = t;
    }
    if (src != data) memcpy(data, src, n * sizeof(cera_candidate));
}

/* Restores the heap property below node i of a heap whose root is the candidate
 * that comes last in the order (the weakest of those kept). */
static void heap_sift_down(cera_candidate *h, size_t n, size_t i) {
    for (;;) {
        size_t worst = i;
        const size_t l = 2 * i + 1, r = l + 1;
        if (l < n && cand_before(&h[worst], &h[l])) worst = l;
        if (r < n && cand_before(&h[worst], &h[r])) worst = r;
        if (worst == i) return;
        const cera_candidate t = h[i];
        h[i] = h[worst];
        h[worst] = t;
        i = worst;
    }
}

/* Whether x is kept against the current k-th best: most candidates fail the first,
 * cheap comparison. */
static inline bool beats(const cera_candidate *x, const cera_candidate *kth) {
    if (x->logit < kth->logit) return false;
    return cand_before(x, kth);
}

void cera_cands_partial_sort(cera_candidates *c, size_t k, cera_sample_scratch *ws) {
    if (k > c->size) k = c->size;
    if (c->sorted || k == 0) return;
    /* A selection pays off while k is small next to the array; past that a full sort
     * is about as fast and simpler. */
    if (k == c->size || k > 4096 || k * 8 > c->size) {
        cera_cands_sort(c->data, c->size, ws);
        c->sorted = true;
        return;
    }
    /* Bounded heap of the k best seen so far, rooted at the weakest of them. */
    cera_candidate *h = ws->cand;
    for (size_t i = 0; i < k; i++) h[i] = c->data[i];
    for (size_t i = k / 2; i-- > 0;) heap_sift_down(h, k, i);
    for (size_t i = k; i < c->size; i++) {
        if (beats(&c->data[i], &h[0])) {
            h[0] = c->data[i];
            heap_sift_down(h, k, 0);
        }
    }
    /* Move the kept ones to the front (they are exactly those not after the k-th
     * best, the heap's root), the others behind them, then sort the front. */
    const cera_candidate kth = h[0];
    size_t front = 0;
    for (size_t i = 0; i < c->size; i++) {
        if (c->data[i].id == kth.id || beats(&c->data[i], &kth)) {
            const cera_candidate t = c->data[front];
            c->data[front++] = c->data[i];
            c->data[i] = t;
        }
    }
    cera_cands_sort(c->data, k, ws);
}

void cera_cands_softmax(cera_candidates *c, bool do_sort, cera_sample_scratch *ws) {
    if (c->size == 0) return;
    if (do_sort && !c->sorted) cera_cands_partial_sort(c, c->size, ws);
    float max_l = c->data[0].logit;
    if (!c->sorted)
        for (size_t i = 1; i < c->size; i++) max_l = fmaxf(max_l, c->data[i].logit);
    float sum = 0.0f;
    for (size_t i = 0; i < c->size; i++) {
        const float p = expf(c->data[i].logit - max_l);
        c->data[i].p = p;
        sum += p;
    }
    for (size_t i = 0; i < c->size; i++) c->data[i].p /= sum;
}

void cera_stage_logit_bias(cera_candidates *c, const cera_logit_bias *bias, int n_bias) {
    for (int b = 0; b < n_bias; b++) {
        const cera_token t = bias[b].token;
        if (t >= 0 && (size_t)t < c->size && c->data[t].id == t) {
            c->data[t].logit += bias[b].bias;
            continue;
        }
        for (size_t i = 0; i < c->size; i++) /* not in id order: look it up */
            if (c->data[i].id == t) {
                c->data[i].logit += bias[b].bias;
                break;
            }
    }
}

void cera_stage_penalties(cera_candidates *c, const int32_t *toks, const int32_t *counts, size_t n,
                          float repeat, float freq, float present) {
    for (size_t j = 0; j < n; j++) {
        const cera_token t = toks[j];
        const int count = counts[j];
        if (t < 0 || (size_t)t >= c->size || c->data[t].id != t || count <= 0) continue;
        float *l = &c->data[t].logit;
        /* Dividing a negative logit would raise it: multiply instead, as llama.cpp. */
        if (*l <= 0)
            *l *= repeat;
        else
            *l /= repeat;
        *l -= (float)count * freq + (float)(count > 0) * present;
    }
    c->sorted = false;
}

void cera_stage_top_k(cera_candidates *c, int k, cera_sample_scratch *ws) {
    if (k <= 0) return;
    const size_t kk = (size_t)k < c->size ? (size_t)k : c->size;
    if (!c->sorted) cera_cands_partial_sort(c, kk, ws);
    c->size = kk;
    c->sorted = true;
}

void cera_stage_typical(cera_candidates *c, float p, size_t min_keep, cera_sample_scratch *ws) {
    if (p >= 1.0f || c->size == 0) return;
    cera_cands_softmax(c, true, ws);
    float entropy = 0.0f;
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].p > 0.0f) entropy += -c->data[i].p * logf(c->data[i].p);
    /* Order by closeness |surprisal - entropy|: reuse the scratch candidates as
     * (index, -closeness) pairs so the candidate order (higher "logit" first, then
     * lower id) is closeness ascending, ties by position. */
    cera_candidate *pairs = ws->cand;
    for (size_t i = 0; i < c->size; i++) {
        const float shifted = fabsf(-logf(c->data[i].p) - entropy);
        pairs[i] = (cera_candidate){(cera_token)i, -shifted, 0.0f};
    }
    cera_cands_sort(pairs, c->size, ws);
    float cum = 0.0f;
    size_t last = c->size;
    for (size_t i = 0; i < c->size; i++) {
        cum += c->data[pairs[i].id].p;
        if (cum > p && (min_keep == 0 || i + 1 >= min_keep)) {
            last = i + 1;
            break;
        }
    }
    /* Gather in closeness order; pairs[i] is read before it is overwritten. */
    for (size_t i = 0; i < last; i++) pairs[i] = c->data[pairs[i].id];
    memcpy(c->data, pairs, last * sizeof(cera_candidate));
    c->size = last;
    c->sorted = false;
}

void cera_stage_top_p(cera_candidates *c, float p, size_t min_keep, cera_sample_scratch *ws) {
    if (p >= 1.0f || c->size == 0) return;
    cera_cands_softmax(c, false, ws);
    /* Most of the mass usually sits in a few tokens: sort the 256 most likely first
     * and the rest only when they do not reach p. */
    size_t k = c->size;
    if (!c->sorted) {
        if (c->size > 1024) k = 256;
        cera_cands_partial_sort(c, k, ws);
    }
    float cum = 0.0f;
    size_t last = c->size;
    for (size_t i = 0; i < c->size; i++) {
        cum += c->data[i].p;
        if (cum >= p && i + 1 >= min_keep) {
            last = i + 1;
            break;
        }
        if (!c->sorted && i + 1 == k) {
            /* Every later candidate comes after the first k: sorting the tail sorts all. */
            cera_cands_sort(c->data + k, c->size - k, ws);
            c->sorted = true;
        }
    }
    c->size = last;
    c->sorted = true;
}

void cera_stage_min_p(cera_candidates *c, float p, size_t min_keep, cera_sample_scratch *ws) {
    if (p <= 0.0f || c->size == 0) return;
    if (!c->sorted) {
        /* p_i >= p * p_max  <=>  logit_i >= max_logit + log(p): no softmax needed. */
        float max_l = -INFINITY;
        for (size_t i = 0; i < c->size; i++) max_l = fmaxf(max_l, c->data[i].logit);
        const float min_logit = max_l + logf(p);
        size_t n = 0;
        for (size_t i = 0; i < c->size; i++)
            if (c->data[i].logit >= min_logit) n++;
        if (n > 0 && n >= min_keep) {
            size_t w = 0; /* compact in place, keeping the order */
            for (size_t i = 0; i < c->size; i++)
                if (c->data[i].logit >= min_logit) c->data[w++] = c->data[i];
            c->size = w;
            return;
        }
        cera_cands_partial_sort(c, c->size, ws);
    }
    const float min_logit = c->data[0].logit + logf(p);
    size_t i = 1; /* the first always stays */
    for (; i < c->size; i++)
        if (c->data[i].logit < min_logit && i >= min_keep) break;
    c->size = i;
}

void cera_stage_temp(cera_candidates *c, float temp) {
    if (c->size == 0) return;
    bool overflows = false; /* a temperature so small that a logit / temp is infinite */
    if (temp > 0.0f && temp < 1.0f) {
        float amax = 0.0f;
        for (size_t i = 0; i < c->size; i++)
            if (isfinite(c->data[i].logit)) amax = fmaxf(amax, fabsf(c->data[i].logit));
        overflows = isinf(amax / temp);
    }
    if (temp <= 0.0f || overflows) { /* greedy: the limit of a vanishing temperature */
        size_t max_i = 0;
        float max_l = c->data[0].logit;
        for (size_t i = 1; i < c->size; i++) {
            if (c->data[i].logit > max_l) {
                c->data[max_i].logit = -INFINITY;
                max_i = i;
                max_l = c->data[i].logit;
            } else {
                c->data[i].logit = -INFINITY;
            }
        }
        return;
    }
    for (size_t i = 0; i < c->size; i++) c->data[i].logit /= temp;
}

double cera_cands_exp(cera_candidates *c) {
    if (c->size == 0) return 0.0;
    float max_l = c->data[0].logit;
    if (!c->sorted)
        for (size_t i = 1; i < c->size; i++) max_l = fmaxf(max_l, c->data[i].logit);
    double sum = 0.0;
    for (size_t i = 0; i < c->size; i++) {
        const float p = expf(c->data[i].logit - max_l);
        c->data[i].p = p;
        sum += p;
    }
    return sum;
}

int cera_stage_dist(cera_candidates *c, double u) {
    if (c->size == 0) return -1;
    if (c->size == 1) {
        c->data[0].p = 1.0f;
        return 0;
    }
    const double sum = cera_cands_exp(c);
    const double target = sum * u;
    double run = 0.0;
    int chosen = -1;
    for (size_t i = 0; i < c->size; i++) {
        if (chosen < 0) {
            run += c->data[i].p;
            if (run >= target) chosen = (int)i;
        }
        c->data[i].p = (float)(c->data[i].p / sum);
    }
    /* Only reachable with NaN logits or rounding at u close to 1. */
    if (chosen < 0) chosen = (int)c->size - 1;
    return chosen;
}
