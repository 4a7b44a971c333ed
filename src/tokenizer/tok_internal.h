/*
 * tok_internal.h — the tokenizer's private data and the helpers its files share.
 *
 * Layout of the folder:
 *   tok_load.c    GGUF metadata -> struct cera_tokenizer (attributes, special ids, EOG set)
 *   tok_util.c    hash tables, llama.cpp-compatible UTF-8 decoding, GPT-2 byte map, Unicode flags
 *   tok_pretok.c  the pre-tokenizer of each `tokenizer.ggml.pre` (PCRE2 patterns) and the splitter
 *   tok_spm.c     SentencePiece merges by score, byte fallback
 *   tok_bpe.c     byte-level BPE merges by rank
 *   tok_wpm.c     WordPiece (bert)
 *   tok_encode.c  special-token partitioning, BOS/EOS, dispatch to the three models
 *   tok_decode.c  token -> piece, sequence -> text, the streaming detokenizer
 *
 * Everything is read-only after load; an encode call keeps its scratch in a tok_scratch.
 */
#ifndef CERA_TOK_INTERNAL_H
#define CERA_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

#define TOK_NULL (-1)

/* ---- Hash tables ------------------------------------------------------------ */

uint64_t tok_hash_bytes(const void *data, size_t len);

/* Token text -> id: open addressing over ids (slot value id + 1, 0 = empty). */
typedef struct tok_vocab_map {
    uint32_t *slots;
    uint64_t mask;
} tok_vocab_map;

/* BPE merge (left, right) -> rank. The pair is keyed by the bytes of left+right and
 * the length of left: merged symbols are adjacent slices of one buffer, so a lookup
 * never builds a string. */
typedef struct tok_merge {
    uint32_t off;      /* into the merges arena */
    uint32_t left_len; /* bytes of the left part */
    uint32_t len;      /* bytes of left + right */
    int32_t rank;
} tok_merge;

typedef struct tok_merge_map {
    tok_merge *entries;
    uint32_t *slots; /* entry index + 1, 0 = empty */
    uint64_t mask;
    char *arena;
    size_t n;
} tok_merge_map;

/* BPE merges by token ids: (left id, right id) -> rank and merged id. Built when every
 * merge joins two tokens into a token (always, in real vocabularies); then words whose
 * characters are all tokens merge without hashing strings. */
typedef struct tok_id_merge {
    uint64_t key; /* left << 32 | right; 0 = empty slot (ids are offset by one) */
    int32_t rank;
    int32_t merged;
} tok_id_merge;

typedef struct tok_id_merge_map {
    tok_id_merge *slots;
    uint64_t mask;
} tok_id_merge_map;

static inline uint64_t tok_id_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

/* ---- Pre-tokenizers ----------------------------------------------------------- */

typedef enum tok_step_kind {
    TOK_STEP_REGEX,   /* PCRE2: matches and the gaps between them become pieces */
    TOK_STEP_DIGITS3, /* llama.cpp's hand-written digit grouping of afmoe / tiny_aya */
} tok_step_kind;

#define TOK_MAX_STEPS 6

typedef struct tok_pretok {
    int n_steps;
    tok_step_kind kind[TOK_MAX_STEPS];
    void *code[TOK_MAX_STEPS];     /* pcre2_code_8 * */
    bool collapsed[TOK_MAX_STEPS]; /* the step matches the category-collapsed subject */
    bool any_collapsed;
} tok_pretok;

/* ---- The tokenizer ------------------------------------------------------------ */

struct cera_tokenizer {
    cera_vocab_type type;
    char model[32];
    char pre[64];
    int32_t n_vocab;

    /* Token texts, NUL-terminated, in one arena. */
    char *text_arena;
    uint32_t *text_off;
    uint32_t *text_len;
    float *score;
    uint32_t *attr;
    int max_token_len;
    tok_vocab_map map;

    /* The piece of every token as llama.cpp's token_to_piece(special = true) renders it. */
    char *piece_arena;
    uint32_t *piece_off;
    uint32_t *piece_len;
    size_t max_piece_len;

    tok_merge_map merges;
    tok_id_merge_map id_merges; /* empty when some merge is not between tokens */
    cera_token byte_id[256];    /* the token of each byte's byte-level character, or TOK_NULL */
    /* SPM: every pair of adjacent characters found inside some token. Where a text's
     * pair is not in it no merge can ever cross, so the text is merged in independent
     * segments (a small heap each, same result). */
    tok_merge_map spm_pairs;

    /* Special tokens that partition the text before tokenizing (CONTROL, USER_DEFINED,
     * UNKNOWN), longest text first. */
    cera_token *specials;
    int32_t n_specials;
    /* A byte trie of the special texts, to find all their occurrences in one pass.
     * Node 0 is the root; other edges (node << 8 | byte) -> child in an open-addressing
     * table (0: empty); trie_order[node] = the special's index in `specials` + 1 (0: none). */
    uint64_t *trie_keys;
    uint32_t *trie_vals;
    uint64_t trie_mask;
    int32_t *trie_order;
    uint32_t trie_root[256]; /* the root's children (0: none), directly */

    uint8_t *eog; /* per token: 1 when it ends generation */

    cera_token bos, eos, eot, eom, unk, sep, pad, mask, nl;
    cera_token fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;

    bool add_bos, add_eos, add_sep;
    bool add_space_prefix;   /* SPM: a space before the text (and after special tokens) */
    bool ignore_merges;      /* BPE: a pre-token that is a whole token is taken as is */
    bool clean_spaces;       /* detokenize: " ," -> "," etc. */
    bool escape_whitespaces; /* spaces become U+2581 before tokenizing */
    bool byte_encode;        /* BPE: GPT-2 byte-level mapping (false: raw UTF-8, <0xNN> bytes) */
    bool newline_direct;     /* gemma4: a run of newlines that is a token is taken as is */
    bool whitespace_words;   /* model "whitespace": BPE per whitespace-separated (lowercased) word */
    bool collapse_han;       /* kimi-k2: the collapsed subject keeps Han apart (tok_cpt_collapse_han) */
    bool wpm_lowercase, wpm_strip_accents;

    /* GPT-2 byte-level alphabet: byte -> its character's UTF-8, and code point -> byte. */
    char byte_enc[256][2];
    uint8_t byte_enc_len[256];
    int16_t byte_of_cpt[512];

    tok_pretok pretok;
};

/* ---- Shared helpers ------------------------------------------------------------ */

static inline const char *tok_text(const cera_tokenizer *t, cera_token id) {
    return t->text_arena + t->text_off[id];
}

/* The id whose text is exactly these bytes, or TOK_NULL. */
cera_token tok_lookup(const cera_tokenizer *t, const char *s, size_t n);
/* The slot holding the merge (left_len, s[0, n)), or the empty slot where it would go. */
uint64_t tok_merge_slot(const tok_merge_map *m, const char *s, size_t left_len, size_t n);
/* The merge rank of (left | right) where left is s[0, left_len) and right s[left_len, n); -1 if none. */
int32_t tok_merge_rank(const cera_tokenizer *t, const char *s, size_t left_len, size_t n);

/* llama.cpp's unicode_len_utf8: the sequence length announced by a lead byte (1 for
 * continuation bytes). */
static inline size_t tok_utf8_len(uint8_t c) {
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[c >> 4];
}

/* Decodes one code point as llama.cpp's unicode_cpt_from_utf8 does (continuation bits
 * checked, overlong forms and surrogates accepted); returns false for an invalid
 * sequence, which llama.cpp replaces by U+FFFD and skips one byte. */
bool tok_utf8_decode(const uint8_t *s, size_t n, size_t *pos, uint32_t *cpt);
/* Encodes cpt (llama.cpp's unicode_cpt_to_utf8); returns the length (1..4), 0 for cpt > 0x10FFFF. */
int tok_utf8_encode(uint32_t cpt, char *out);

/* The GPT-2 byte-level alphabet: byte -> code point (the way back is the tokenizer's
 * byte_of_cpt table, built at load). */
uint32_t tok_byte_to_cpt(uint8_t b);

/* Unicode classes as llama.cpp's unicode_cpt_flags (categories through utf8proc). */
enum {
    TOK_CPT_NUMBER = 1 << 0,
    TOK_CPT_LETTER = 1 << 1,
    TOK_CPT_SEPARATOR = 1 << 2,
    TOK_CPT_MARK = 1 << 3,
    TOK_CPT_PUNCT = 1 << 4,
    TOK_CPT_SYMBOL = 1 << 5,
    TOK_CPT_CONTROL = 1 << 6,
    TOK_CPT_WHITESPACE = 1 << 7,
};
unsigned tok_cpt_flags(uint32_t cpt);
bool tok_cpt_is_whitespace(uint32_t cpt);
uint32_t tok_cpt_tolower(uint32_t cpt);
/* For the category-collapsed regex subject: a stand-in with cpt's class (letter, number,
 * punctuation, symbol, mark, other) as utf8proc sees it and the same UTF-8 length;
 * ASCII and whitespace stay themselves. */
uint32_t tok_cpt_collapse(uint32_t cpt);
/* The same, but code points of llama.cpp's Han ranges become U+4E00 / U+20000 (letters)
 * or U+E001 / U+F0001 (unassigned ones), and other letters stand-ins outside those
 * ranges (for kimi-k2). */
uint32_t tok_cpt_collapse_han(uint32_t cpt);
/* The first code point of cpt's canonical decomposition (llama.cpp's "NFD" table). */
uint32_t tok_cpt_nfd_first(uint32_t cpt);

/* ---- Encode scratch and output ------------------------------------------------- */

typedef struct tok_out {
    cera_token *ids;
    size_t cap;
    size_t n; /* counts past cap */
} tok_out;

static inline void tok_out_push(tok_out *o, cera_token id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* Growable buffers reused across the fragments and words of one encode call. */
typedef struct tok_scratch {
    char *buf; /* text being tokenized (escaped, prefixed, re-encoded) */
    size_t buf_cap;
    char *buf2; /* re-encoded text (the words' bytes) */
    size_t buf2_cap;
    char *buf3; /* regex subject / byte-encoded word */
    size_t buf3_cap;
    char *buf4; /* category-collapsed regex subject */
    size_t buf4_cap;
    size_t *pieces; /* piece boundaries (byte offsets, pairs) */
    size_t pieces_cap;
    size_t *pieces2;
    size_t pieces2_cap;
    void *syms; /* tok_symbol[] */
    size_t syms_cap;
    void *heap; /* bigram heap */
    size_t heap_cap;
    void *match_data; /* pcre2_match_data_8 * */
    void *match_ctx;  /* pcre2_match_context_8 * carrying jit_stack */
    void *jit_stack;  /* pcre2_jit_stack_8 * */
} tok_scratch;

/* A symbol of the merge loops (SPM and BPE): a slice of the word, chained to its
 * neighbours; n == 0 once merged into its left neighbour. */
typedef struct tok_symbol {
    int32_t prev, next;
    uint32_t start, n;
    int32_t id; /* BPE id path: the symbol's token */
} tok_symbol;

/* A candidate merge of two adjacent symbols. Lower key first (BPE: the rank; SPM: minus
 * the score), then the leftmost; size detects candidates made stale by other merges. */
typedef struct tok_bigram {
    double key;
    int32_t left, right;
    uint32_t size;
} tok_bigram;

bool tok_heap_push(tok_scratch *s, size_t *n, tok_bigram b);
tok_bigram tok_heap_pop(tok_scratch *s, size_t *n);

/* Grows *p to hold at least n elements of size elem; false when out of memory. */
bool tok_reserve(void **p, size_t *cap, size_t n, size_t elem);
void tok_scratch_free(tok_scratch *s);
void tok_scratch_free_regex(tok_scratch *s); /* the PCRE2 objects (tok_pretok.c) */

/* The three models: tokenize one raw-text fragment and append its ids. */
bool tok_spm_encode(const cera_tokenizer *t, tok_scratch *s, const char *text, size_t len, tok_out *out);
bool tok_bpe_encode(const cera_tokenizer *t, tok_scratch *s, const char *text, size_t len, tok_out *out);
bool tok_wpm_encode(const cera_tokenizer *t, tok_scratch *s, const char *text, size_t len, tok_out *out);

/* Pre-tokenizer: looks up `tokenizer.ggml.pre`, sets the flags llama.cpp ties to it and
 * compiles its patterns. */
cera_status tok_pretok_init(cera_tokenizer *t, const char *pre, cera_error *err);
void tok_pretok_free(tok_pretok *p);
/* Splits a text into pieces: s[0, n) is the text as valid UTF-8, coll[0, n) the same
 * with every character replaced by tok_cpt_collapse (NULL when no step needs it). Fills
 * *pieces with (start, end) byte pairs and *n_pieces with their count. False when out of
 * memory. */
bool tok_pretok_split(const cera_tokenizer *t, tok_scratch *sc, const char *s, const char *coll, size_t n,
                      size_t **pieces, size_t *n_pieces);

/* The raw-text part of encode (no special-token partitioning) — used at load for the
 * newline token. */
bool tok_encode_fragment(const cera_tokenizer *t, tok_scratch *s, const char *text, size_t len,
                         bool prefix_space, tok_out *out);

/* Builds t->piece_* (needs attributes and type set). */
cera_status tok_build_pieces(cera_tokenizer *t, cera_error *err);

#endif
