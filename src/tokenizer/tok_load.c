/*
 * tok_load.c — builds a cera_tokenizer from a GGUF file's `tokenizer.ggml.*` metadata,
 * with the defaults and the auto-detections of llama.cpp's llama_vocab::load:
 *   - per-model default special ids and flags, then the pre-tokenizer's flags, then the
 *     file's keys (ids out of range are ignored, as llama.cpp does);
 *   - token types -> attributes; empty texts become "[EMPTY_<i>]";
 *   - EOT/EOM/FIM tokens found by their text when the keys are absent (the lowest id
 *     wins where several texts match), CONTROL forced on them;
 *   - the end-of-generation set (EOS, EOT, EOM, FIM pad/repo/sep and the well-known
 *     end-of-turn texts, with llama.cpp's gpt-oss / solar-open / gemma4 exceptions);
 *   - the special tokens that partition text, longest first; the per-model LSTRIP /
 *     RSTRIP attributes (phi-3, jina-v2, modern-bert);
 *   - every token's piece, precomputed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* llama.cpp's token types (tokenizer.ggml.token_type) */
enum {
    TT_UNDEFINED = 0,
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER_DEFINED = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6
};

static uint32_t attr_of_type(int64_t tt) {
    switch (tt) {
    case TT_NORMAL: return CERA_TOKEN_ATTR_NORMAL;
    case TT_UNKNOWN: return CERA_TOKEN_ATTR_UNKNOWN;
    case TT_CONTROL: return CERA_TOKEN_ATTR_CONTROL;
    case TT_USER_DEFINED: return CERA_TOKEN_ATTR_USER_DEFINED;
    case TT_UNUSED: return CERA_TOKEN_ATTR_UNUSED;
    case TT_BYTE: return CERA_TOKEN_ATTR_BYTE;
    default: return 0;
    }
}

static bool text_is(const cera_tokenizer *t, cera_token id, const char *s) {
    size_t n = strlen(s);
    return t->text_len[id] == n && memcmp(tok_text(t, id), s, n) == 0;
}

static bool text_in(const cera_tokenizer *t, cera_token id, const char *const *list) {
    for (; *list; list++)
        if (text_is(t, id, *list)) return true;
    return false;
}

static cera_token find_cstr(const cera_tokenizer *t, const char *s) { return tok_lookup(t, s, strlen(s)); }

/* ---- Hash tables -------------------------------------------------------------------- */

static uint64_t table_size(uint64_t n) {
    uint64_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

static bool build_vocab_map(cera_tokenizer *t) {
    uint64_t size = table_size((uint64_t)t->n_vocab);
    t->map.slots = calloc(size, sizeof(uint32_t));
    if (!t->map.slots) return false;
    t->map.mask = size - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = tok_text(t, id);
        uint64_t i = tok_hash_bytes(s, t->text_len[id]) & t->map.mask;
        for (;;) {
            uint32_t v = t->map.slots[i];
            if (!v) {
                t->map.slots[i] = (uint32_t)id + 1;
                break;
            }
            cera_token o = (cera_token)(v - 1);
            if (t->text_len[o] == t->text_len[id] && memcmp(tok_text(t, o), s, t->text_len[id]) == 0) {
                t->map.slots[i] = (uint32_t)id + 1; /* a duplicate text: the last id wins, as llama.cpp */
                break;
            }
            i = (i + 1) & t->map.mask;
        }
    }
    return true;
}

static cera_status build_merges(cera_tokenizer *t, const gguf_array *arr, cera_error *err) {
    if (arr->type != GGUF_TYPE_STRING)
        return cera_fail(err, CERA_ERR_FORMAT, "tokenizer.ggml.merges: expected an array of strings, got %s",
                         gguf_vtype_name(arr->type));
    tok_merge_map *m = &t->merges;
    size_t total = 0;
    for (uint64_t i = 0; i < arr->n; i++) total += arr->u.strs[i].len;
    if (arr->n > INT32_MAX || total > UINT32_MAX)
        return cera_fail(err, CERA_ERR_FORMAT, "tokenizer.ggml.merges: too large (%llu entries)",
                         (unsigned long long)arr->n);
    uint64_t size = table_size(arr->n);
    m->arena = malloc(total + 1);
    m->entries = malloc((arr->n + 1) * sizeof(tok_merge));
    m->slots = calloc(size, sizeof(uint32_t));
    if (!m->arena || !m->entries || !m->slots)
        return cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer.ggml.merges: out of memory");
    m->mask = size - 1;
    size_t off = 0;
    for (uint64_t r = 0; r < arr->n; r++) {
        gguf_str w = arr->u.strs[r];
        /* "left right", split at the first space after the first byte */
        const char *sp = w.len > 1 ? memchr(w.data + 1, ' ', w.len - 1) : NULL;
        if (!sp) continue; /* llama.cpp files it as ("", ""), which never matches */
        size_t ll = (size_t)(sp - w.data), rl = w.len - ll - 1;
        if (ll == 0 || rl == 0) continue;
        char *dst = m->arena + off;
        memcpy(dst, w.data, ll);
        memcpy(dst + ll, sp + 1, rl);
        size_t n = ll + rl;
        uint64_t slot = tok_merge_slot(m, dst, ll, n);
        if (m->slots[slot]) continue; /* a repeated pair keeps its first rank */
        m->entries[m->n] = (tok_merge){(uint32_t)off, (uint32_t)ll, (uint32_t)n, (int32_t)r};
        m->slots[slot] = (uint32_t)(m->n + 1);
        m->n++;
        off += n;
    }
    return CERA_OK;
}

static inline uint64_t id_key(cera_token l, cera_token r) {
    return ((uint64_t)(uint32_t)(l + 1) << 32) | (uint32_t)(r + 1);
}

/* The id-pair form of the merges (see tok_internal.h); left empty when some merge is
 * not between two tokens giving a token. */
static bool build_id_merges(cera_tokenizer *t) {
    const tok_merge_map *m = &t->merges;
    for (int b = 0; b < 256; b++) t->byte_id[b] = tok_lookup(t, t->byte_enc[b], t->byte_enc_len[b]);
    for (size_t i = 0; i < m->n; i++) {
        const tok_merge *e = &m->entries[i];
        const char *s = m->arena + e->off;
        if (tok_lookup(t, s, e->left_len) == TOK_NULL ||
            tok_lookup(t, s + e->left_len, e->len - e->left_len) == TOK_NULL ||
            tok_lookup(t, s, e->len) == TOK_NULL)
            return true; /* irregular: the string path does everything */
    }
    uint64_t size = table_size(m->n);
    tok_id_merge_map *im = &t->id_merges;
    im->slots = calloc(size, sizeof(tok_id_merge));
    if (!im->slots) return false;
    im->mask = size - 1;
    for (size_t i = 0; i < m->n; i++) {
        const tok_merge *e = &m->entries[i];
        const char *s = m->arena + e->off;
        uint64_t key =
            id_key(tok_lookup(t, s, e->left_len), tok_lookup(t, s + e->left_len, e->len - e->left_len));
        uint64_t j = tok_id_hash(key) & im->mask;
        while (im->slots[j].key && im->slots[j].key != key) j = (j + 1) & im->mask;
        if (im->slots[j].key) continue; /* the first rank stays */
        im->slots[j] = (tok_id_merge){key, e->rank, tok_lookup(t, s, e->len)};
    }
    return true;
}

/* SPM: the set of adjacent character pairs inside tokens (see tok_internal.h). */
static bool build_spm_pairs(cera_tokenizer *t) {
    tok_merge_map *m = &t->spm_pairs;
    size_t n_pairs = 0, bytes = 0;
    for (cera_token id = 0; id < t->n_vocab; id++) {
        size_t len = t->text_len[id];
        if (len) bytes += 2 * len, n_pairs += len;
    }
    uint64_t size = table_size(n_pairs);
    m->arena = malloc(bytes + 1);
    m->entries = malloc((n_pairs + 1) * sizeof(tok_merge));
    m->slots = calloc(size, sizeof(uint32_t));
    if (!m->arena || !m->entries || !m->slots) return false;
    m->mask = size - 1;
    size_t off = 0;
    for (cera_token id = 0; id < t->n_vocab; id++) {
        const char *s = tok_text(t, id);
        size_t len = t->text_len[id], a = 0;
        size_t la = tok_utf8_len((uint8_t)s[0]);
        if (la > len) la = len;
        while (a + la < len) {
            size_t b = a + la, lb = tok_utf8_len((uint8_t)s[b]);
            if (lb > len - b) lb = len - b;
            uint64_t slot = tok_merge_slot(m, s + a, la, la + lb);
            if (!m->slots[slot]) {
                memcpy(m->arena + off, s + a, la + lb);
                m->entries[m->n] = (tok_merge){(uint32_t)off, (uint32_t)la, (uint32_t)(la + lb), 0};
                m->slots[slot] = (uint32_t)(m->n + 1);
                m->n++;
                off += la + lb;
            }
            a = b, la = lb;
        }
    }
    return true;
}

/* ---- Special tokens ------------------------------------------------------------------- */

static const char *const k_eot_texts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "<|end_of_text|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "<\xef\xbd\x9c"
                                          "end\xe2\x96\x81"
                                          "of\xe2\x96\x81"
                                          "sentence\xef\xbd\x9c>",
                                          "<end_of_utterance>",
                                          NULL};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre_texts[] = {"<|fim_prefix|>",
                                              "<fim-prefix>",
                                              "<fim_prefix>",
                                              "<\xef\xbd\x9c"
                                              "fim\xe2\x96\x81"
                                              "begin\xef\xbd\x9c>",
                                              "<PRE>",
                                              "\xe2\x96\x81<PRE>",
                                              "<|code_prefix|>",
                                              "<|prefix|>",
                                              NULL};
static const char *const k_fim_suf_texts[] = {"<|fim_suffix|>",
                                              "<fim-suffix>",
                                              "<fim_suffix>",
                                              "<\xef\xbd\x9c"
                                              "fim\xe2\x96\x81"
                                              "hole\xef\xbd\x9c>",
                                              "<SUF>",
                                              "\xe2\x96\x81<SUF>",
                                              "<|code_suffix|>",
                                              "<|suffix|>",
                                              NULL};
static const char *const k_fim_mid_texts[] = {"<|fim_middle|>",
                                              "<fim-middle>",
                                              "<fim_middle>",
                                              "<\xef\xbd\x9c"
                                              "fim\xe2\x96\x81"
                                              "end\xef\xbd\x9c>",
                                              "<MID>",
                                              "\xe2\x96\x81<MID>",
                                              "<|code_middle|>",
                                              "<|middle|>",
                                              NULL};
static const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                              "<PAD>",       "[PAD]",     NULL};
static const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                              "<REPO>",       "<reponame>",    NULL};
static const char *const k_fim_sep_texts[] = {"<|file_sep|>", NULL};
static const char *const k_eog_texts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<|flush|>",
                                          "<|calls|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<turn|>",
                                          "<|tool_response>",
                                          "<\xef\xbd\x9c"
                                          "end\xe2\x96\x81"
                                          "of\xe2\x96\x81"
                                          "sentence\xef\xbd\x9c>",
                                          "[e~[",
                                          NULL};

/* Reads `key` into *id when present and in range (llama.cpp keeps the default otherwise). */
static void read_id(const gguf_file *f, const cera_tokenizer *t, const char *key, cera_token *id) {
    if (*id >= t->n_vocab) *id = TOK_NULL; /* a default out of range */
    uint32_t v;
    if (gguf_get_u32(f, key, &v) && v < (uint32_t)t->n_vocab) *id = (cera_token)v;
}

static void find_by_text(cera_tokenizer *t, cera_token *id, const char *const *texts) {
    if (*id != TOK_NULL) return;
    for (cera_token i = 0; i < t->n_vocab; i++) {
        if (text_in(t, i, texts)) {
            *id = i;
            t->attr[i] |= CERA_TOKEN_ATTR_CONTROL;
            return;
        }
    }
}

static void detect_specials(cera_tokenizer *t) {
    find_by_text(t, &t->eot, k_eot_texts);
    find_by_text(t, &t->eom, k_eom_texts);
    find_by_text(t, &t->fim_pre, k_fim_pre_texts);
    find_by_text(t, &t->fim_suf, k_fim_suf_texts);
    find_by_text(t, &t->fim_mid, k_fim_mid_texts);
    find_by_text(t, &t->fim_pad, k_fim_pad_texts);
    find_by_text(t, &t->fim_rep, k_fim_rep_texts);
    find_by_text(t, &t->fim_sep, k_fim_sep_texts);

    /* control tokens named "...unused..." are unused */
    for (cera_token i = 0; i < t->n_vocab; i++)
        if ((t->attr[i] & CERA_TOKEN_ATTR_CONTROL) && strstr(tok_text(t, i), "unused"))
            t->attr[i] |= CERA_TOKEN_ATTR_UNUSED;

    uint8_t *eog = t->eog;
    if (t->fim_pad != TOK_NULL) eog[t->fim_pad] = 1;
    if (t->fim_rep != TOK_NULL) eog[t->fim_rep] = 1;
    if (t->fim_sep != TOK_NULL) eog[t->fim_sep] = 1;
    for (cera_token i = 0; i < t->n_vocab; i++) {
        if (!text_in(t, i, k_eog_texts)) continue;
        eog[i] = 1;
        t->attr[i] |= CERA_TOKEN_ATTR_CONTROL;
    }
    /* gpt-oss: these are always rendered */
    static const char *const k_user[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (cera_token i = 0; i < t->n_vocab; i++)
        if (text_in(t, i, k_user)) t->attr[i] = CERA_TOKEN_ATTR_USER_DEFINED;
    if (t->eos != TOK_NULL) eog[t->eos] = 1;
    if (t->eot != TOK_NULL) eog[t->eot] = 1;
    if (t->eom != TOK_NULL) eog[t->eom] = 1;

    /* o200k_harmony / solar-open: <|end|> ends a message, not the generation */
    bool has_return = false, has_call = false, has_flush = false, has_tool_response = false;
    cera_token end_id = TOK_NULL, s_id = TOK_NULL;
    for (cera_token i = 0; i < t->n_vocab; i++) {
        if (!eog[i]) continue;
        if (text_is(t, i, "<|return|>"))
            has_return = true;
        else if (text_is(t, i, "<|call|>") || text_is(t, i, "<|calls|>"))
            has_call = true;
        else if (text_is(t, i, "<|flush|>"))
            has_flush = true;
        else if (text_is(t, i, "<|end|>"))
            end_id = i;
        else if (text_is(t, i, "<|tool_response>"))
            has_tool_response = true;
        else if (text_is(t, i, "</s>"))
            s_id = i;
    }
    if (end_id != TOK_NULL && ((has_return && has_call) || (has_call && has_flush))) {
        eog[end_id] = 0;
        t->attr[end_id] = CERA_TOKEN_ATTR_USER_DEFINED;
    }
    /* gemma4 / paddleocr: </s> is not an end of generation */
    if (has_tool_response && s_id != TOK_NULL) {
        eog[s_id] = 0;
        t->attr[s_id] = CERA_TOKEN_ATTR_NORMAL;
    }
}

static int u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool build_specials(cera_tokenizer *t) {
    const uint32_t mask = CERA_TOKEN_ATTR_CONTROL | CERA_TOKEN_ATTR_USER_DEFINED | CERA_TOKEN_ATTR_UNKNOWN;
    int32_t n = 0;
    for (cera_token i = 0; i < t->n_vocab; i++) n += (t->attr[i] & mask) != 0;
    uint64_t *keys = malloc(((size_t)n + 1) * sizeof(uint64_t));
    t->specials = malloc(((size_t)n + 1) * sizeof(cera_token));
    if (!keys || !t->specials) {
        free(keys);
        return false;
    }
    /* longest text first; llama.cpp's std::sort leaves ties unordered, cera takes the lower id */
    n = 0;
    for (cera_token i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & mask) keys[n++] = ((uint64_t)(UINT32_MAX - t->text_len[i]) << 32) | (uint32_t)i;
    qsort(keys, (size_t)n, sizeof(uint64_t), u64_cmp);
    for (int32_t k = 0; k < n; k++) t->specials[k] = (cera_token)(keys[k] & 0xffffffffu);
    t->n_specials = n;
    free(keys);
    return true;
}

/* The trie of special texts (see tok_internal.h). */
static bool build_trie(cera_tokenizer *t) {
    size_t n_nodes = 1;
    for (int32_t k = 0; k < t->n_specials; k++) n_nodes += t->text_len[t->specials[k]];
    uint64_t size = table_size(n_nodes);
    t->trie_keys = calloc(size, sizeof(uint64_t));
    t->trie_vals = calloc(size, sizeof(uint32_t));
    t->trie_order = calloc(n_nodes, sizeof(int32_t));
    if (!t->trie_keys || !t->trie_vals || !t->trie_order) return false;
    t->trie_mask = size - 1;
    uint32_t next = 1; /* node ids: 0 is the root */
    for (int32_t k = 0; k < t->n_specials; k++) {
        const uint8_t *s = (const uint8_t *)tok_text(t, t->specials[k]);
        uint32_t len = t->text_len[t->specials[k]], node = 0;
        for (uint32_t i = 0; i < len; i++) {
            if (node == 0) {
                if (!t->trie_root[s[i]]) t->trie_root[s[i]] = next++;
                node = t->trie_root[s[i]];
                continue;
            }
            uint64_t key = ((uint64_t)node << 8) | s[i], j = tok_id_hash(key) & t->trie_mask;
            while (t->trie_vals[j] && t->trie_keys[j] != key) j = (j + 1) & t->trie_mask;
            if (!t->trie_vals[j]) {
                t->trie_keys[j] = key;
                t->trie_vals[j] = next++;
            }
            node = t->trie_vals[j];
        }
        if (!t->trie_order[node]) t->trie_order[node] = k + 1;
    }
    return true;
}

/* llama.cpp's per-model attributes (by name, tokenizer and architecture). */
static void model_attributes(const gguf_file *f, cera_tokenizer *t) {
    char name[256] = "", pre[64] = "", arch[64] = "";
    gguf_str s;
    if (gguf_get_str(f, "general.name", &s)) gguf_str_copy(s, name, sizeof name);
    if (gguf_get_str(f, "tokenizer.ggml.pre", &s)) gguf_str_copy(s, pre, sizeof pre);
    if (gguf_get_str(f, "general.architecture", &s)) gguf_str_copy(s, arch, sizeof arch);
    for (char *p = name; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');

    if (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") || strstr(pre, "jina-v2-code") ||
        strstr(arch, "nomic-bert-moe") || strstr(arch, "jina-bert-v3")) {
        cera_token id = find_cstr(t, "<mask>");
        if (id != TOK_NULL) t->attr[id] |= CERA_TOKEN_ATTR_LSTRIP;
    } else if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        for (int32_t k = 0; k < t->n_specials; k++) t->attr[t->specials[k]] |= CERA_TOKEN_ATTR_RSTRIP;
        cera_token id = find_cstr(t, "</s>");
        if (id != TOK_NULL) t->attr[id] |= CERA_TOKEN_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (int k = 0; k < 3; k++) {
            id = find_cstr(t, keep[k]);
            if (id != TOK_NULL) t->attr[id] &= ~(uint32_t)CERA_TOKEN_ATTR_RSTRIP;
        }
    } else if (strstr(name, "modern-bert")) {
        cera_token id = find_cstr(t, "[MASK]");
        if (id != TOK_NULL) t->attr[id] |= CERA_TOKEN_ATTR_LSTRIP;
    }
}

/* ---- Load ------------------------------------------------------------------------------ */

static cera_status load_tokens(const gguf_file *f, cera_tokenizer *t, cera_error *err) {
    const gguf_array *toks, *scores = NULL, *types = NULL;
    if (!gguf_get_arr(f, "tokenizer.ggml.tokens", &toks))
        return cera_fail(err, CERA_ERR_NOT_FOUND,
                         "tokenizer.ggml.tokens: missing (no vocabulary in the file)");
    if (toks->type != GGUF_TYPE_STRING)
        return cera_fail(err, CERA_ERR_FORMAT, "tokenizer.ggml.tokens: expected an array of strings, got %s",
                         gguf_vtype_name(toks->type));
    if (toks->n == 0 || toks->n > INT32_MAX)
        return cera_fail(err, CERA_ERR_FORMAT, "tokenizer.ggml.tokens: %llu tokens",
                         (unsigned long long)toks->n);
    uint64_t n = toks->n;
    if (gguf_get_arr(f, "tokenizer.ggml.scores", &scores)) {
        if (scores->type != GGUF_TYPE_FLOAT32 && scores->type != GGUF_TYPE_FLOAT64)
            return cera_fail(err, CERA_ERR_FORMAT, "tokenizer.ggml.scores: expected floats, got %s",
                             gguf_vtype_name(scores->type));
        if (scores->n < n)
            return cera_fail(err, CERA_ERR_FORMAT, "tokenizer.ggml.scores: %llu scores for %llu tokens",
                             (unsigned long long)scores->n, (unsigned long long)n);
    }
    if (gguf_get_arr(f, "tokenizer.ggml.token_type", &types)) {
        if (!gguf_vtype_size(types->type) || types->type == GGUF_TYPE_FLOAT32 ||
            types->type == GGUF_TYPE_FLOAT64)
            return cera_fail(err, CERA_ERR_FORMAT, "tokenizer.ggml.token_type: expected integers, got %s",
                             gguf_vtype_name(types->type));
        if (types->n < n)
            return cera_fail(err, CERA_ERR_FORMAT, "tokenizer.ggml.token_type: %llu types for %llu tokens",
                             (unsigned long long)types->n, (unsigned long long)n);
        /* a type outside llama.cpp's 0..6 has no rendering; a vocabulary without any text
         * token would turn every generated token into empty text */
        bool any_text = false;
        for (uint64_t i = 0; i < n; i++) {
            const int64_t tt = gguf_arr_i64(types, i);
            if (tt < TT_UNDEFINED || tt > TT_BYTE)
                return cera_fail(err, CERA_ERR_FORMAT,
                                 "tokenizer.ggml.token_type: token %llu has type %lld (known types: 0..6)",
                                 (unsigned long long)i, (long long)tt);
            any_text = any_text || tt == TT_NORMAL || tt == TT_USER_DEFINED || tt == TT_BYTE;
        }
        if (!any_text && n)
            return cera_fail(err, CERA_ERR_FORMAT,
                             "tokenizer.ggml.token_type: no token is text (normal, user-defined or byte): "
                             "every piece would be empty");
    }

    t->n_vocab = (int32_t)n;
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += (toks->u.strs[i].len ? toks->u.strs[i].len : 24) + 1;
    if (total > UINT32_MAX) return cera_fail(err, CERA_ERR_FORMAT, "tokenizer.ggml.tokens: texts too large");
    t->text_arena = malloc(total);
    t->text_off = malloc(n * sizeof(uint32_t));
    t->text_len = malloc(n * sizeof(uint32_t));
    t->score = malloc(n * sizeof(float));
    t->attr = malloc(n * sizeof(uint32_t));
    t->eog = calloc(n, 1);
    if (!t->text_arena || !t->text_off || !t->text_len || !t->score || !t->attr || !t->eog)
        return cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer: out of memory for %llu tokens",
                         (unsigned long long)n);
    size_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = toks->u.strs[i];
        char *dst = t->text_arena + off;
        size_t len = s.len;
        if (len)
            memcpy(dst, s.data, len);
        else
            len = (size_t)snprintf(dst, 24, "[EMPTY_%llu]", (unsigned long long)i);
        dst[len] = 0;
        t->text_off[i] = (uint32_t)off;
        t->text_len[i] = (uint32_t)len;
        off += len + 1;
        if ((int)len > t->max_token_len) t->max_token_len = (int)len;
        t->score[i] = scores ? (float)gguf_arr_f64(scores, i) : 0.0f;
        t->attr[i] = types ? attr_of_type(gguf_arr_i64(types, i)) : CERA_TOKEN_ATTR_NORMAL;
    }
    return CERA_OK;
}

static void init_byte_tables(cera_tokenizer *t) {
    for (int i = 0; i < 512; i++) t->byte_of_cpt[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t c = tok_byte_to_cpt((uint8_t)b);
        char buf[4];
        int k = tok_utf8_encode(c, buf);
        memcpy(t->byte_enc[b], buf, 2);
        t->byte_enc_len[b] = (uint8_t)k;
        t->byte_of_cpt[c] = (int16_t)b;
    }
}

/* The newline token: SPM's byte token, BERT's padding, otherwise what "\n" encodes to. */
static bool find_newline(cera_tokenizer *t) {
    if (t->type == CERA_VOCAB_SPM) {
        t->nl = find_cstr(t, "<0x0A>");
        if (t->nl == TOK_NULL) t->nl = find_cstr(t, "\n");
        if (t->nl == TOK_NULL) t->nl = t->pad;
        return true;
    }
    if (t->type == CERA_VOCAB_WPM) {
        t->nl = t->pad;
        return true;
    }
    cera_token ids[8];
    tok_out out = {ids, 8, 0};
    tok_scratch sc = {0};
    bool ok = tok_encode_fragment(t, &sc, "\n", 1, false, &out);
    tok_scratch_free(&sc);
    t->nl = out.n ? ids[0] : t->pad;
    return ok;
}

cera_status cera_tokenizer_load(const gguf_file *f, cera_tokenizer **out, cera_error *err) {
    *out = NULL;
    cera_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer: out of memory");
    cera_status st = CERA_OK;

    gguf_str s;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &s)) {
        st = cera_fail(err, CERA_ERR_NOT_FOUND, "tokenizer.ggml.model: missing");
        goto fail;
    }
    gguf_str_copy(s, t->model, sizeof t->model);
    if (gguf_get_str(f, "tokenizer.ggml.pre", &s)) gguf_str_copy(s, t->pre, sizeof t->pre);

    t->eot = t->eom = t->sep = t->pad = t->mask = TOK_NULL;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = TOK_NULL;
    t->wpm_lowercase = true;
    if (!strcmp(t->model, "llama")) {
        t->type = CERA_VOCAB_SPM;
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_space_prefix = true, t->add_bos = true, t->escape_whitespaces = true;
    } else if (!strcmp(t->model, "bert")) {
        t->type = CERA_VOCAB_WPM;
        t->bos = 101, t->eos = TOK_NULL, t->unk = 100, t->sep = 102, t->pad = 0, t->mask = 103;
        t->add_sep = true, t->add_bos = true, t->clean_spaces = true;
    } else if (!strcmp(t->model, "gpt2") || !strcmp(t->model, "gemma4") || !strcmp(t->model, "whitespace")) {
        t->type = CERA_VOCAB_BPE;
        if (!strcmp(t->model, "gemma4")) {
            t->bos = t->eos = t->unk = TOK_NULL;
            strcpy(t->pre, "gemma4");
        } else {
            t->bos = 11, t->eos = 11, t->unk = TOK_NULL;
        }
        t->clean_spaces = true, t->byte_encode = true;
        t->whitespace_words = !strcmp(t->model, "whitespace");
    } else if (!strcmp(t->model, "no_vocab") || !strcmp(t->model, "none")) {
        st = cera_fail(err, CERA_ERR_UNSUPPORTED, "tokenizer.ggml.model: '%s': the model has no vocabulary",
                       t->model);
        goto fail;
    } else if (!strcmp(t->model, "t5") || !strcmp(t->model, "rwkv") || !strcmp(t->model, "plamo2") ||
               !strcmp(t->model, "hybriddna")) {
        st = cera_fail(err, CERA_ERR_UNSUPPORTED, "tokenizer.ggml.model: tokenizer '%s' is not supported",
                       t->model);
        goto fail;
    } else {
        st = cera_fail(err, CERA_ERR_UNSUPPORTED, "tokenizer.ggml.model: unknown tokenizer '%s'", t->model);
        goto fail;
    }

    if ((st = load_tokens(f, t, err)) != CERA_OK) goto fail;
    init_byte_tables(t);
    if (!build_vocab_map(t)) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer: out of memory");
        goto fail;
    }
    if (t->type == CERA_VOCAB_SPM && !build_spm_pairs(t)) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer: out of memory");
        goto fail;
    }
    if (t->type == CERA_VOCAB_BPE && t->byte_encode && !t->whitespace_words && strcmp(t->model, "gemma4")) {
        /* byte-level BPE spells every byte with a token of its own: without one, text
         * holding that byte cannot be encoded and would be dropped. Real vocabularies leave
         * out control bytes, 0xc0/0xc1 and some lead bytes of rare planes (falcon,
         * starcoder), so the bytes of text are required: printable ASCII, tab, newline,
         * carriage return, and UTF-8 up to U+3FFFF (0x80..0xbf, 0xc2..0xf0). */
        for (int b = 0; b < 256; b++) {
            const bool needed = b == '\t' || b == '\n' || b == '\r' || (b >= 0x20 && b < 0x7f) ||
                                (b >= 0x80 && b <= 0xbf) || (b >= 0xc2 && b <= 0xf0);
            if (needed && tok_lookup(t, t->byte_enc[b], t->byte_enc_len[b]) == TOK_NULL) {
                st = cera_fail(err, CERA_ERR_FORMAT,
                               "tokenizer.ggml.tokens: this byte-level BPE vocabulary has no token for byte "
                               "0x%02x: text holding it could not be encoded",
                               b);
                goto fail;
            }
        }
    }
    if (t->type == CERA_VOCAB_BPE) {
        const gguf_array *merges;
        if (gguf_get_arr(f, "tokenizer.ggml.merges", &merges)) {
            if ((st = build_merges(t, merges, err)) != CERA_OK) goto fail;
        } else if (strcmp(t->pre, "kimi-k2")) { /* llama.cpp lets kimi-k2 go without merges */
            st = cera_fail(err, CERA_ERR_NOT_FOUND,
                           "tokenizer.ggml.merges: missing (needed by a '%s' tokenizer)", t->model);
            goto fail;
        }
        if (!build_id_merges(t)) {
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer: out of memory");
            goto fail;
        }
        if (!t->pre[0]) strcpy(t->pre, "default");
        if ((st = tok_pretok_init(t, t->pre, err)) != CERA_OK) goto fail;
    } else if (!t->pre[0]) {
        strcpy(t->pre, "default");
    }
    bool b;
    if (gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &b)) t->add_space_prefix = b;

    if (!find_newline(t)) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer: out of memory");
        goto fail;
    }

    read_id(f, t, "tokenizer.ggml.bos_token_id", &t->bos);
    read_id(f, t, "tokenizer.ggml.eos_token_id", &t->eos);
    read_id(f, t, "tokenizer.ggml.eot_token_id", &t->eot);
    read_id(f, t, "tokenizer.ggml.eom_token_id", &t->eom);
    read_id(f, t, "tokenizer.ggml.unknown_token_id", &t->unk);
    read_id(f, t, "tokenizer.ggml.seperator_token_id", &t->sep);
    read_id(f, t, "tokenizer.ggml.padding_token_id", &t->pad);
    read_id(f, t, "tokenizer.ggml.mask_token_id", &t->mask);
    read_id(f, t, "tokenizer.ggml.fim_pre_token_id", &t->fim_pre);
    read_id(f, t, "tokenizer.ggml.fim_suf_token_id", &t->fim_suf);
    read_id(f, t, "tokenizer.ggml.fim_mid_token_id", &t->fim_mid);
    read_id(f, t, "tokenizer.ggml.fim_pad_token_id", &t->fim_pad);
    read_id(f, t, "tokenizer.ggml.fim_rep_token_id", &t->fim_rep);
    read_id(f, t, "tokenizer.ggml.fim_sep_token_id", &t->fim_sep);
    read_id(f, t, "tokenizer.ggml.prefix_token_id", &t->fim_pre);
    read_id(f, t, "tokenizer.ggml.suffix_token_id", &t->fim_suf);
    read_id(f, t, "tokenizer.ggml.middle_token_id", &t->fim_mid);

    if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b)) t->add_bos = b;
    if (gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b)) t->add_eos = b;
    if (gguf_get_bool(f, "tokenizer.ggml.add_sep_token", &b)) t->add_sep = b;
    if (!strcmp(t->pre, "gemma4") || !strcmp(t->pre, "granite-embed-multi-311m")) t->add_bos = true;

    if (gguf_get_bool(f, "tokenizer.ggml.normalizer.lowercase", &b)) t->wpm_lowercase = b;
    t->wpm_strip_accents = t->wpm_lowercase;
    if (gguf_get_bool(f, "tokenizer.ggml.normalizer.strip_accents", &b)) t->wpm_strip_accents = b;

    detect_specials(t);
    if (!build_specials(t) || !build_trie(t)) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer: out of memory");
        goto fail;
    }
    if ((st = tok_build_pieces(t, err)) != CERA_OK) goto fail;
    model_attributes(f, t);

    *out = t;
    return CERA_OK;
fail:
    cera_tokenizer_free(t);
    return st;
}

void cera_tokenizer_free(cera_tokenizer *t) {
    if (!t) return;
    free(t->text_arena);
    free(t->text_off);
    free(t->text_len);
    free(t->score);
    free(t->attr);
    free(t->eog);
    free(t->map.slots);
    free(t->piece_arena);
    free(t->piece_off);
    free(t->piece_len);
    free(t->merges.entries);
    free(t->merges.slots);
    free(t->merges.arena);
    free(t->id_merges.slots);
    free(t->spm_pairs.entries);
    free(t->spm_pairs.slots);
    free(t->spm_pairs.arena);
    free(t->specials);
    free(t->trie_keys);
    free(t->trie_vals);
    free(t->trie_order);
    tok_pretok_free(&t->pretok);
    free(t);
}
