/*
 * test_lora_batch.c — one forward batch holding several sequences with different
 * adapter sets (the per-sequence adapters of DESIGN.md point 4): rows are grouped by
 * adapter (cera_lora_batch_build) and every sequence's logits must equal, bit for bit,
 * those of the same sequence evaluated alone through the public API.
 *
 * Uses the engine's internals (engine_impl.h) to hand the backend a batch whose rows are
 * interleaved round robin (cera_batch_eval keeps each session's rows together), the hardest
 * case for the grouping. The batch stays under the attention's F32 threshold
 * (CERA_ATTN_F32_MIN_TOKENS rows), as a solo prompt of these lengths does.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_util.h"
#include "engine/engine_impl.h"
#include "testutil.h"

#define N_SEQ 4

int main(void) {
    cera_engine *e = test_open_engine("models/stories260K.gguf", CERA_DEVICE_CPU);
    cera_error err = {0};
    if (!e) return test_finish();
    cera_adapter *a = NULL, *b = NULL;
    CHECK(!cera_adapter_load(e, shared_path("golden/lora-stories-a.gguf"), &a, &err), "a: %s", err.message);
    CHECK(!cera_adapter_load(e, shared_path("golden/lora-stories-b.peft"), &b, &err), "b: %s", err.message);
    size_t n1, n2, n3;
    int32_t *t1 = read_ints(shared_path("golden/stories260K.p1.tokens"), &n1);
    int32_t *t2 = read_ints(shared_path("golden/stories260K.p2.tokens"), &n2);
    int32_t *t3 = read_ints(shared_path("golden/stories260K.p3.tokens"), &n3);
    if (!a || !b || !t1 || !t2 || !t3) {
        CHECK(0, "inputs missing");
        return test_finish();
    }
    /* sequence i: its tokens and its adapters */
    const int32_t *tok[N_SEQ] = {t1, t2, t3, t2};
    const int len[N_SEQ] = {(int)n1, 16, 20, 12};
    cera_session *s[N_SEQ] = {0};
    for (int i = 0; i < N_SEQ; i++)
        CHECK(!cera_session_create(e, NULL, &s[i], &err), "session: %s", err.message);
    CHECK(!cera_session_set_adapter(s[0], a, 1.0f, &err), "set");
    CHECK(!cera_session_set_adapter(s[1], b, 0.7f, &err) && !cera_session_set_adapter(s[1], a, 0.3f, &err),
          "set");
    /* s[2]: no adapter */
    CHECK(!cera_session_set_adapter(s[3], a, -0.5f, &err), "set");
    const int nv = cera_engine_n_vocab(e);

    /* Solo: each sequence's prompt through the public API. */
    float *solo[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        solo[i] = malloc((size_t)len[i] * nv * sizeof(float));
        CHECK(!cera_session_eval(s[i], tok[i], (size_t)len[i], true, &err), "solo eval: %s", err.message);
        for (int p = 0; p < len[i]; p++)
            memcpy(solo[i] + (size_t)p * nv, cera_session_logits(s[i], p), nv * 4);
        cera_session_truncate(s[i], 0, &err);
    }

    /* Mixed: the rows of all sequences interleaved in one batch. */
    test_mixed mx;
    if (!test_mixed_make(N_SEQ, tok, len, &mx)) return test_finish();
    const int n = mx.n;
    const int32_t *pos = mx.pos, *seq = mx.seq;
    CHECK(n < 64, "the batch (%d rows) must stay under the attention's F32 threshold", n);
    cera_kv_seq *seqs[N_SEQ];
    const cera_lora_set *sets[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        cera_kv_copy copy[CERA_KV_GROUPS];
        int n_copy = 0;
        CHECK(!cera_kv_seq_reserve(&s[i]->seq, len[i], copy, &n_copy, &err), "reserve: %s", err.message);
        seqs[i] = &s[i]->seq;
        sets[i] = &s[i]->lora;
    }
    cera_lora_batch plan;
    CHECK(!cera_lora_batch_init(&plan, n, &err), "plan");
    cera_lora_batch_build(&plan, seq, sets, n);
    CHECK(plan.n_groups == 2, "%d adapter groups (a and b)", plan.n_groups);
    const cera_batch batch = {.n_tokens = n,
                              .token = mx.tok,
                              .pos = pos,
                              .seq = seq,
                              .want_logits = mx.want,
                              .seqs = seqs,
                              .n_seqs = N_SEQ,
                              .lora = &plan};
    float *out = malloc((size_t)n * nv * sizeof(float));
    CHECK(!e->backend->forward(e->backend, &batch, out, &err), "mixed forward: %s", err.message);
    int same = 0;
    for (int r = 0; r < n; r++) {
        const bool eq = !memcmp(out + (size_t)r * nv, solo[seq[r]] + (size_t)pos[r] * nv, nv * 4);
        CHECK(eq, "row %d (sequence %d, position %d) differs from the sequence run alone", r, seq[r], pos[r]);
        same += eq;
    }
    printf("mixed batch of %d rows, %d sequences, %d adapter groups: %d rows equal their solo runs bit for "
           "bit\n",
           n, N_SEQ, plan.n_groups, same);
    /* And the adapters did something: sequence 3 (a at -0.5) differs from sequence 1's
     * rows at the same positions of the same tokens (b 0.7 + a 0.3). */
    CHECK(memcmp(solo[1], solo[3], (size_t)len[3] * nv * 4) != 0,
          "different adapter sets gave the same logits");

    cera_lora_batch_free(&plan);
    free(out);
    test_mixed_free(&mx);
    for (int i = 0; i < N_SEQ; i++) {
        free(solo[i]);
        cera_session_free(s[i]);
    }
    cera_adapter_free(a);
    cera_adapter_free(b);
    free(t1);
    free(t2);
    free(t3);
    cera_engine_close(e);
    return test_finish();
}
