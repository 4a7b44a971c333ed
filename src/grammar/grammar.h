/*
 * grammar.h — structured output: GBNF grammars (llama.cpp's syntax and semantics), a
 * matcher over them, and JSON Schema → GBNF.
 *
 * A grammar text is parsed once into an immutable cera_grammar (rules of elements, as
 * llama.cpp's llama_grammar_parser builds them: repetitions expanded into helper rules,
 * groups into anonymous rules). A cera_grammar_matcher holds the set of parse stacks
 * over one grammar and is advanced code point by code point exactly as llama.cpp's
 * llama_grammar_accept: it is dead once no stack can take a code point, and complete
 * when some stack is empty. cera_grammar_check runs a whole input the way llama.cpp's
 * test-gbnf-validator does (rejection position in code points).
 *
 * Constrained sampling (how src/sample and src/engine plug it in): one cera_grammar_tokens
 * per model, built from its vocabulary (pieces with special tokens rendered, EOG flags);
 * one matcher per sequence that has a grammar (cera_grammar_matcher_clone for a fork).
 * Before sampling, cera_grammar_matcher_mask gives the allowed tokens (the sampler sets
 * the others' logits to -inf, as llama.cpp's grammar sampler does); after it,
 * cera_grammar_matcher_accept_token advances the state. A grammar is immutable and may be
 * shared by matchers on several threads; a matcher belongs to one thread at a time. The
 * grammar folder is on the sampler's layer, so src/sample may include this header.
 *
 * Grammars and inputs are untrusted: parsing is bounded in size and nesting, and every
 * refusal is an error with line, column and what was expected; the matcher bounds the
 * number of stacks and the work per code point (an ambiguous grammar gets CERA_ERR_UNSUPPORTED
 * instead of a hang).
 */
#ifndef CERA_GRAMMAR_H
#define CERA_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct cera_grammar cera_grammar;
typedef struct cera_grammar_matcher cera_grammar_matcher;

/* Resolves `<text>` token elements: the id of the single token text[0..len) is, or -1
 * when the text is not exactly one token. Without a vocabulary such elements are refused
 * (as llama.cpp does); `<[id]>` needs none. */
typedef struct cera_grammar_vocab {
    void *user;
    int32_t (*token_of_text)(void *user, const char *text, size_t len);
} cera_grammar_vocab;

/* Parses a GBNF text (len bytes; it ends at the first NUL, as llama.cpp reads it). The
 * start rule is `root`. vocab may be NULL. Errors: CERA_ERR_FORMAT with "line L, column C:
 * what was expected", or the grammar-level refusals (undefined rule, left recursion, no
 * root); CERA_ERR_UNSUPPORTED for sizes past the limits. */
cera_status cera_grammar_parse(const char *text, size_t len, const cera_grammar_vocab *vocab,
                               cera_grammar **out, cera_error *err);
void cera_grammar_free(cera_grammar *g);
/* Number of rules (named, groups and repetition helpers). */
size_t cera_grammar_n_rules(const cera_grammar *g);

/* Limits of a matcher (zero fields take the defaults). */
typedef struct cera_grammar_limits {
    size_t max_stacks; /* live parse stacks after a code point (default 65536) */
    size_t max_work;   /* stack expansions per code point (default 4 million) */
} cera_grammar_limits;

/* A matcher at the start of the grammar (llama.cpp's initial stacks). limits may be NULL. */
cera_status cera_grammar_matcher_new(const cera_grammar *g, const cera_grammar_limits *limits,
                                     cera_grammar_matcher **out, cera_error *err);
void cera_grammar_matcher_free(cera_grammar_matcher *m);
/* A copy of the matcher's state (for speculation or a sampler trying candidates). */
cera_status cera_grammar_matcher_clone(const cera_grammar_matcher *m, cera_grammar_matcher **out,
                                       cera_error *err);
/* Feeds one code point. CERA_OK whether or not it was taken (see _dead); an error only
 * when a limit was passed (the matcher is then dead). */
cera_status cera_grammar_matcher_accept(cera_grammar_matcher *m, uint32_t cp, cera_error *err);
/* True when no parse remains (the last code point was rejected). */
bool cera_grammar_matcher_dead(const cera_grammar_matcher *m);
/* True when some parse is complete (the input so far is a whole match). As in llama.cpp, a
 * token's trailing partial code point does not undo a parse its whole code points finished. */
bool cera_grammar_matcher_complete(const cera_grammar_matcher *m);
/* Number of live parse stacks. */
size_t cera_grammar_matcher_n_stacks(const cera_grammar_matcher *m);

/* Runs a whole UTF-8 input as llama.cpp's validator: *accepted, and when rejected
 * *reject_pos = the 0-based code point where no parse could go on (the input's length in
 * code points when it ended too early). Invalid UTF-8 bytes read as U+FFFD each. */
cera_status cera_grammar_check(const cera_grammar *g, const char *input, size_t len, bool *accepted,
                               size_t *reject_pos, cera_error *err);

/* ---- constrained sampling: tokens ---- */

/* A vocabulary for masks: token i's text is pieces[i] (lens[i] bytes); is_eog (may be
 * NULL) marks end-of-generation tokens. Built once per model (a byte trie). */
typedef struct cera_grammar_tokens cera_grammar_tokens;
cera_status cera_grammar_tokens_new(const char *const *pieces, const size_t *lens, const bool *is_eog,
                                    int32_t n_vocab, cera_grammar_tokens **out, cera_error *err);
void cera_grammar_tokens_free(cera_grammar_tokens *t);
int32_t cera_grammar_tokens_n_vocab(const cera_grammar_tokens *t);
/* Token's text as the trie holds it (*len bytes, NUL-terminated); NULL out of range. */
const char *cera_grammar_tokens_piece(const cera_grammar_tokens *t, int32_t token, size_t *len);

/* Feeds bytes of UTF-8 text; a code point may be split across calls. Invalid UTF-8 kills
 * the matcher (it matches nothing). */
cera_status cera_grammar_matcher_accept_bytes(cera_grammar_matcher *m, const char *bytes, size_t n,
                                              cera_error *err);
/* Accepts a sampled token (as llama.cpp's grammar sampler): its text through the character
 * stacks, or a token element on top taking it by id. An end-of-generation token needs a
 * complete parse (else CERA_ERR_INVALID_ARG) and leaves the state as it is. */
cera_status cera_grammar_matcher_accept_token(cera_grammar_matcher *m, const cera_grammar_tokens *t,
                                              int32_t token, cera_error *err);
/* The tokens allowed next: bit i%32 of mask[i/32] for token i ((n_vocab + 31) / 32 words),
 * as llama.cpp's grammar sampler decides: text tokens some stack takes whole, token
 * elements by id, end-of-generation tokens when a parse is complete, empty pieces never.
 * Masks are cached per state inside the matcher. */
cera_status cera_grammar_matcher_mask(cera_grammar_matcher *m, const cera_grammar_tokens *t, uint32_t *mask,
                                      cera_error *err);

/* Whether the next token may be `token` (1 yes, 0 no, -1 error): the same decision as the
 * mask, made for one token directly (the reference the mask is tested against). */
int cera_grammar_matcher_allows(cera_grammar_matcher *m, const cera_grammar_tokens *t, int32_t token);

/* Converts a JSON Schema (JSON text) into GBNF as llama.cpp's json_schema_to_grammar
 * does: *out is malloc'ed, NUL-terminated, one `name ::= body` line per rule in name
 * order. A schema it refuses (unanchored patterns, external or missing $refs, unknown
 * types, malformed JSON) is CERA_ERR_UNSUPPORTED / CERA_ERR_FORMAT with the reason. The
 * grammar may still fail to load (patterns with escapes GBNF lacks, such as \d), as
 * llama.cpp's does. */
cera_status cera_json_schema_to_gbnf(const char *json, size_t len, char **out, cera_error *err);
/* The same with the schema's rules named after name instead of root (name "" is root):
 * *top (malloc'ed) gets the rule that matches the whole value, which may be a shared
 * primitive such as `string`; for a grammar that embeds the value in other rules. */
cera_status cera_json_schema_to_gbnf_rule(const char *json, size_t len, const char *name, char **out,
                                          char **top, cera_error *err);

#endif
