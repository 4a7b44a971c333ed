/*
 * tokenizer.h — text <-> token ids, exactly as llama.cpp does it.
 *
 * A cera_tokenizer is built once from a GGUF file's `tokenizer.ggml.*` metadata and is
 * then read-only: every function here takes it as const and is safe to call from
 * several threads at once. Three models are supported, chosen by
 * `tokenizer.ggml.model`:
 *   - "llama": SentencePiece (score-driven merges, byte fallback <0xNN>, `▁` spaces);
 *   - "gpt2":  byte-level BPE (merge ranks), with the pre-tokenizer regex chosen by
 *              `tokenizer.ggml.pre`, any of the 87 names llama.cpp knows (an unknown
 *              name is an error naming it); "gemma4" (and the gemma4 / sarvam
 *              pre-tokenizers) run BPE on raw UTF-8 with `▁` spaces and <0xNN> bytes;
 *              "whitespace" runs BPE per whitespace-separated word;
 *   - "bert":  WordPiece (lowercasing, accent stripping, punctuation splits).
 *
 * Unsupported (an error naming them): the t5/UGM, rwkv, plamo2 and hybriddna models. Known difference from
 * llama.cpp: code points added in Unicode 15.1 (CJK extension I) are classified by utf8proc, which predates
 * them.
 *
 * The tokenizer copies everything it needs out of the gguf_file at load, so the file
 * may be closed afterwards. Encoding allocates its scratch per call (a call handles
 * a whole prompt, never one generated token); decoding a token and the streaming
 * detokenizer never allocate.
 *
 * The engine implements cera_tokenize / cera_token_to_piece (include/cera.h) on top
 * of cera_tokenizer_encode / cera_tokenizer_piece, which follow the same contracts.
 */
#ifndef CERA_TOKENIZER_H
#define CERA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"
#include "core/error.h"
#include "gguf/gguf.h"

typedef struct cera_tokenizer cera_tokenizer;

typedef enum cera_vocab_type {
    CERA_VOCAB_SPM = 1, /* "llama": SentencePiece */
    CERA_VOCAB_BPE = 2, /* "gpt2": byte-level BPE */
    CERA_VOCAB_WPM = 3, /* "bert": WordPiece */
} cera_vocab_type;

/* Per-token attributes (the same bits as llama.cpp's llama_token_attr). */
enum {
    CERA_TOKEN_ATTR_UNKNOWN = 1 << 0,
    CERA_TOKEN_ATTR_UNUSED = 1 << 1,
    CERA_TOKEN_ATTR_NORMAL = 1 << 2,
    CERA_TOKEN_ATTR_CONTROL = 1 << 3,
    CERA_TOKEN_ATTR_USER_DEFINED = 1 << 4,
    CERA_TOKEN_ATTR_BYTE = 1 << 5,
    CERA_TOKEN_ATTR_NORMALIZED = 1 << 6,
    CERA_TOKEN_ATTR_LSTRIP = 1 << 7,
    CERA_TOKEN_ATTR_RSTRIP = 1 << 8,
    CERA_TOKEN_ATTR_SINGLE_WORD = 1 << 9,
};

/* ---- Load ------------------------------------------------------------------ */

/* Builds the tokenizer from f's `tokenizer.ggml.*` keys. Errors name the key and the
 * problem (missing tokens, unknown model or pre-tokenizer, bad merges, ids out of range). */
cera_status cera_tokenizer_load(const gguf_file *f, cera_tokenizer **out, cera_error *err);
void cera_tokenizer_free(cera_tokenizer *tok);

/* ---- Encode ---------------------------------------------------------------- */

/* Tokenizes len bytes of text (any bytes; invalid UTF-8 is handled, never a crash).
 * add_special: add BOS/EOS (and bert's CLS/SEP) as the metadata asks.
 * parse_special: control and user-defined token strings in the text become their
 * tokens (otherwise they are plain text).
 * Writes at most cap tokens to out (out may be NULL when cap is 0) and stores the
 * full count in *n_tokens; when the count exceeds cap the call returns
 * CERA_ERR_INVALID_ARG and *n_tokens says how many are needed. */
cera_status cera_tokenizer_encode(const cera_tokenizer *tok, const char *text, size_t len, bool add_special,
                                  bool parse_special, cera_token *out, size_t cap, size_t *n_tokens,
                                  cera_error *err);

/* ---- Decode ---------------------------------------------------------------- */

/* Writes the text of one token (no NUL): byte tokens become their byte, SPM's `▁`
 * becomes a space, BPE's byte-level characters become their bytes. Control tokens
 * (and other special tokens) are written only when render_special; otherwise their
 * piece is empty. Returns the piece's length, which may exceed cap (then the buffer
 * holds nothing useful), or -1 for an id out of range. Never allocates. */
int cera_tokenizer_piece(const cera_tokenizer *tok, cera_token id, char *buf, size_t cap,
                         bool render_special);

/* The longest piece any token can produce, in bytes (for sizing buffers). */
size_t cera_tokenizer_max_piece_len(const cera_tokenizer *tok);

/* Detokenizes a sequence as llama.cpp's llama_detokenize: remove_special drops a
 * leading BOS / trailing EOS the tokenizer would have added; with add_space_prefix (SPM)
 * the first piece loses one leading space — unless a BOS was dropped (llama.cpp's rule);
 * render_special writes control tokens' text; vocabularies with clean_spaces (most
 * byte-level BPE ones) get llama.cpp's " ," -> "," style clean-up. Returns the length,
 * or -1 when a token is out of range. When the text does not fit in cap, returns a
 * length > cap (before clean-up, so an upper bound): call again with that much room.
 * No NUL is written. */
int64_t cera_tokenizer_decode(const cera_tokenizer *tok, const cera_token *tokens, size_t n, char *buf,
                              size_t cap, bool remove_special, bool render_special);

/* ---- Streaming detokenizer ------------------------------------------------- */

/* Turns generated tokens into text piece by piece, holding back the bytes of a UTF-8
 * character split across tokens (e.g. byte tokens <0xE2><0x96><0x81>) until it is
 * complete. Bytes that can never start or continue a valid character are passed on as
 * they are. A plain struct so it lives on the stack or inside a session: no allocation. */
typedef struct cera_detok {
    const cera_tokenizer *tok;
    bool render_special;
    uint8_t pending[4]; /* the start of an incomplete UTF-8 character */
    int n_pending;
} cera_detok;

void cera_detok_init(cera_detok *d, const cera_tokenizer *tok, bool render_special);
/* Appends token's piece and writes the complete characters now available to out.
 * Returns the bytes written, or -1 for an invalid token, or -2 when cap is too
 * small (nothing consumed; cap >= cera_tokenizer_max_piece_len(tok) + 4 always suffices). */
int cera_detok_push(cera_detok *d, cera_token token, char *out, size_t cap);
/* Writes the held-back bytes of an unfinished character (as they are) and resets;
 * returns the count (at most 3; cap must be >= 3). */
int cera_detok_flush(cera_detok *d, char *out, size_t cap);

/* ---- Queries --------------------------------------------------------------- */

cera_vocab_type cera_tokenizer_type(const cera_tokenizer *tok);
const char *cera_tokenizer_model_name(const cera_tokenizer *tok); /* "llama", "gpt2", "bert" */
const char *cera_tokenizer_pre_name(const cera_tokenizer *tok);   /* `tokenizer.ggml.pre` or "default" */
int cera_tokenizer_n_vocab(const cera_tokenizer *tok);

/* Special ids; -1 when the vocabulary has none. */
cera_token cera_tokenizer_bos(const cera_tokenizer *tok);
cera_token cera_tokenizer_eos(const cera_tokenizer *tok);
cera_token cera_tokenizer_eot(const cera_tokenizer *tok);
cera_token cera_tokenizer_eom(const cera_tokenizer *tok);
cera_token cera_tokenizer_unk(const cera_tokenizer *tok);
cera_token cera_tokenizer_pad(const cera_tokenizer *tok);
cera_token cera_tokenizer_sep(const cera_tokenizer *tok);
cera_token cera_tokenizer_nl(const cera_tokenizer *tok); /* the newline token */

/* Whether encode with add_special adds BOS / EOS (bert: CLS, and SEP at the end). */
bool cera_tokenizer_add_bos(const cera_tokenizer *tok);
bool cera_tokenizer_add_eos(const cera_tokenizer *tok);

/* End of generation: EOS, EOT, EOM and the tokens llama.cpp also treats as such
 * (<|im_end|>, <|endoftext|>, <|eot_id|>, <end_of_turn>, ...). False out of range. */
bool cera_tokenizer_is_eog(const cera_tokenizer *tok, cera_token id);
/* Control tokens (CONTROL attribute); false out of range. */
bool cera_tokenizer_is_control(const cera_tokenizer *tok, cera_token id);

/* The token's raw vocabulary text (as stored in the GGUF, e.g. "▁the", "Ġthe",
 * "<0x0A>"), NUL-terminated, with its length in *len when len is non-NULL; NULL when
 * out of range. */
const char *cera_tokenizer_text(const cera_tokenizer *tok, cera_token id, size_t *len);
float cera_tokenizer_score(const cera_tokenizer *tok, cera_token id);
uint32_t cera_tokenizer_attr(const cera_tokenizer *tok, cera_token id); /* CERA_TOKEN_ATTR_* bits */
/* The id whose raw text is exactly these bytes, or -1. */
cera_token cera_tokenizer_find(const cera_tokenizer *tok, const char *text, size_t len);

#endif
