/*
 * spec.c — speculative decoding's drafts and their verification (cera.h: cera_session_draft,
 * cera_session_verify; cera_generate's loop in generate.c uses the same drafting).
 *
 * Drafts come from the text itself (n-gram lookup) or from a draft model's session. The
 * fixed lookup (llama.cpp's ngram-simple) copies what followed the most recent earlier
 * occurrence of the last n tokens. CERA_SPEC_AUTO drafts only where it pays: it takes the
 * longest earlier occurrence of the text's ending and drafts the k tokens that followed it
 * for the k that maximizes the expected tokens per unit of time,
 *
 *     (1 + p + p^2 + ... + p^k) / (T(B + k) / T(B)),
 *
 * where p is the session's recent rate of drafts kept for matches of that length class (each
 * draft kept with probability p until the first that is not) and T(n) the engine's measured
 * time of a forward batch of n tokens (B: the step's tokens without the drafts). It drafts
 * nothing when no k gains, but for one round in SPEC_PROBE_EVERY declined ones, which drafts
 * the best k anyway so that stale estimates get measured again. Only batches of decode tokens
 * and drafts are timed (a prompt chunk takes other kernels). A class nothing has been drafted
 * for starts at p = 1/2, and a batch size not measured yet costs what the measured sizes
 * around it give by linear interpolation (what the nearest smaller one cost, above the largest
 * measured), so that both get measured. On free text short matches soon stop paying; on text
 * that repeats (code being edited, quoted documents) long matches keep drafting.
 */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"

/* The searched history: the last SPEC_WINDOW tokens; matches are measured up to SPEC_MATCH_MAX. */
#define SPEC_WINDOW    8192
#define SPEC_MATCH_MAX 64
/* The decay of the acceptance counts per round, and of the step times per observation. */
#define SPEC_DECAY 0.9f
#define STEP_DECAY 0.8
/* The least gain (expected tokens per unit of time over plain decoding) worth a draft, and how
 * many declined rounds (with a match) a probe comes after. */
#define SPEC_MIN_GAIN    1.05
#define SPEC_PROBE_EVERY 32

static int match_class(int len) { return len < 4 ? 0 : len < 8 ? 1 : len < 16 ? 2 : 3; }

static int step_class(size_t n) {
    if (n <= 16) return n ? (int)n - 1 : 0;
    int c = 16;
    for (size_t m = 32; m < n && c < CERA_STEP_CLASSES - 1; m *= 2) c++;
    return c;
}

void cera_spec_step_time(cera_engine *e, size_t n_tokens, double ms) {
    double *t = &e->step_ms[step_class(n_tokens)];
    *t = *t > 0 ? STEP_DECAY * *t + (1 - STEP_DECAY) * ms : ms;
}

/* The token count a class stands for (its largest). */
static double class_tokens(int c) { return c < 16 ? c + 1 : (double)(32u << (c - 16)); }

/* T(n): measured, else interpolated between the nearest measured sizes around it, else the
 * nearest smaller one's (0: nothing measured). */
static double step_time(const cera_engine *e, size_t n) {
    const int c = step_class(n);
    if (e->step_ms[c] > 0) return e->step_ms[c];
    int lo = c - 1, hi = c + 1;
    while (lo >= 0 && !(e->step_ms[lo] > 0)) lo--;
    while (hi < CERA_STEP_CLASSES && !(e->step_ms[hi] > 0)) hi++;
    if (lo < 0) return 0;
    if (hi >= CERA_STEP_CLASSES) return e->step_ms[lo];
    const double f = ((double)n - class_tokens(lo)) / (class_tokens(hi) - class_tokens(lo));
    return e->step_ms[lo] + f * (e->step_ms[hi] - e->step_ms[lo]);
}

void cera_spec_observe(cera_session *s, int drafted, int kept) {
    const int c = s->spec_class;
    if (c < 0 || drafted <= 0) return;
    s->spec_kept[c] = SPEC_DECAY * s->spec_kept[c] + (float)kept;
    s->spec_missed[c] = SPEC_DECAY * s->spec_missed[c] + (kept < drafted ? 1.0f : 0.0f);
}

/* Up to cap drafts after the history h[0..n): what followed the most recent earlier
 * occurrence of its last k tokens. */
static int draft_ngram(const cera_token *h, int n, int k, cera_token *out, int cap) {
    if (k <= 0 || n <= k) return 0;
    for (int j = n - k - 1; j >= 0; j--) {
        if (memcmp(h + j, h + n - k, (size_t)k * sizeof *h)) continue;
        int m = 0;
        while (m < cap && j + k + m < n) out[m] = h[j + k + m], m++;
        return m;
    }
    return 0;
}

/* CERA_SPEC_AUTO (see the top of the file), n_step tokens in the batch besides the item's
 * one token before the drafts. */
static int draft_auto(cera_session *s, const cera_token *h, int n, int n_step, cera_token *out, int cap) {
    /* the longest earlier occurrence of the ending (the most recent of equal ones) */
    int best = 0, at = -1;
    const int lo = n - 1 - SPEC_WINDOW > 0 ? n - 1 - SPEC_WINDOW : 0;
    for (int j = n - 2; j >= lo && best < SPEC_MATCH_MAX; j--) {
        if (h[j] != h[n - 1]) continue;
        int len = 1;
        while (len < SPEC_MATCH_MAX && j - len >= 0 && h[j - len] == h[n - 1 - len]) len++;
        if (len > best) best = len, at = j + 1;
    }
    if (best < 2) return 0;
    const int avail = n - at < cap ? n - at : cap;
    const int c = match_class(best);
    const double p = (s->spec_kept[c] + 1.0) / (s->spec_kept[c] + s->spec_missed[c] + 2.0);
    const cera_engine *e = s->engine;
    const size_t b = (size_t)n_step + 1;
    const double t0 = step_time(e, b);
    int k_best = 0, k_probe = 1;
    double gain_best = SPEC_MIN_GAIN, gain_probe = 0, expect = 1, pk = 1;
    for (int k = 1; k <= avail; k++) {
        pk *= p;
        expect += pk;
        const double t = step_time(e, b + (size_t)k);
        const double cost = t0 > 0 && t > t0 ? t / t0 : 1.0;
        if (expect / cost > gain_best) gain_best = expect / cost, k_best = k;
        if (expect / cost > gain_probe) gain_probe = expect / cost, k_probe = k;
        if (pk < 1e-3) break;
    }
    /* now and then a round that does not pay by the estimates, to measure them again (a batch
     * time taken in a slow moment, an acceptance rate from another kind of text) */
    if (k_best == 0 && ++s->spec_idle >= SPEC_PROBE_EVERY) k_best = k_probe;
    if (k_best == 0) return 0;
    s->spec_idle = 0;
    memcpy(out, h + at, (size_t)k_best * sizeof *out);
    s->spec_class = c;
    return k_best;
}

/* Up to cap greedy drafts of the draft session d after the history h[0..n): d is first cut
 * back to what it shares with h (to nothing when its sliding window has moved past that) and
 * given the rest. 0 when it cannot follow. */
static int draft_model(cera_session *d, const cera_token *h, int n, cera_token *out, int cap) {
    const cera_token *dt = cera_session_tokens(d);
    int c = 0;
    const int dn = d->seq.n_pos;
    while (c < dn && c < n && dt[c] == h[c]) c++;
    if (c == n) c = n - 1;                             /* the last token again: its logits */
    if (c < dn && cera_session_truncate(d, c, NULL)) { /* a window already past c: from the start */
        if (cera_session_truncate(d, 0, NULL)) return 0;
        c = 0;
    }
    if (cera_session_eval(d, h + c, (size_t)(n - c), false, NULL)) return 0;
    const int nv = cera_engine_n_vocab(d->engine);
    int m = 0;
    for (; m < cap && d->seq.n_pos < d->engine->params.n_ctx; m++) {
        const float *l = cera_session_logits(d, -1);
        if (!l) break;
        int best = 0;
        for (int i = 1; i < nv; i++) best = l[i] > l[best] ? i : best;
        out[m] = best;
        if (m + 1 < cap && cera_session_eval(d, &out[m], 1, false, NULL)) {
            m++;
            break;
        }
    }
    return m;
}

int cera_spec_draft(cera_session *s, const cera_token *h, int n, int n_match, cera_session *draft, int n_step,
                    cera_token *out, int cap) {
    s->spec_class = -1;
    const int run_max = s->engine->backend->exact_run_max;
    if (run_max > 0 && cap > run_max - 1) cap = run_max - 1; /* the run: the token before and the drafts */
    if (cap > s->engine->params.n_batch - 1) cap = s->engine->params.n_batch - 1;
    if (cap < 1) return 0;
    int k = n_match > 0                 ? draft_ngram(h, n, n_match, out, cap)
            : n_match == CERA_SPEC_AUTO ? draft_auto(s, h, n, n_step, out, cap)
                                        : 0;
    if (k == 0 && draft) k = draft_model(draft, h, n, out, cap);
    return k;
}

/* Whether a session (and its draft's) can be cut back after drafts: not with a recurrent
 * state, nor where a sliding window no longer holds the current position's. */
static bool can_speculate(cera_session *s) {
    return !s->engine->kv->state_bytes && cera_kv_seq_can_truncate(&s->seq, s->seq.n_pos);
}

int cera_session_draft(cera_session *s, cera_token next, int n_match, cera_session *draft, int n_step,
                       cera_token *out, int max) {
    if (!s || !out || max <= 0 || n_step < 0 || n_match < CERA_SPEC_AUTO) return 0;
    cera_engine *e = s->engine;
    if (next < 0 || next >= e->model.hp.n_vocab || !can_speculate(s)) return 0;
    if (draft && (draft == s || draft->engine->model.hp.n_vocab != e->model.hp.n_vocab ||
                  draft->engine->kv->state_bytes))
        draft = NULL;
    /* the history in the session's token buffer: the timeline, a pending token, next */
    const int pend = s->pending_eval >= 0;
    const int n = s->seq.n_pos + pend + 1;
    if (n >= e->params.n_ctx) return 0;
    if (pend) s->tokens[s->seq.n_pos] = s->pending_eval;
    s->tokens[n - 1] = next;
    const int room = e->params.n_ctx - n;
    return cera_spec_draft(s, s->tokens, n, n_match, draft, n_step + pend, out, max < room ? max : room);
}

cera_status cera_session_verify(cera_session *s, cera_token *out, int *n_out, cera_error *err) {
    cera_error_clear(err);
    if (n_out) *n_out = 0;
    if (!s || !out || !n_out)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_verify: NULL argument");
    const int k = s->n_draft_eval;
    if (k <= 0 || s->n_logit_rows == 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_verify: the last eval had no drafts");
    const int row0 = s->last_eval_n - k - 1; /* the row of the token before the first draft */
    const int p0 = s->seq.n_pos - k;         /* the first draft's position */
    int m = 0, kept = 0;
    cera_status st = CERA_OK;
    for (int i = 0; i <= k; i++) {
        cera_token x;
        if ((st = cera_session_sample_row(s, row0 + i, &x, err))) break;
        out[m++] = x;
        if (x < 0 || i == k || x != s->tokens[p0 + i]) break;
        kept++;
    }
    cera_spec_observe(s, k, kept);
    /* the drafts not kept go; the rows of the tokens drawn stay readable */
    const int rows = row0 + kept + 1;
    cera_session_cut(s, p0 + kept);
    s->last_eval_n = rows;
    s->n_logit_rows = st ? 0 : rows;
    *n_out = st ? 0 : m;
    return st;
}
