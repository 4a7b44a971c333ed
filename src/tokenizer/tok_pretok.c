/*
 * tok_pretok.c — the BPE pre-tokenizers: which `tokenizer.ggml.pre` names exist, the
 * flags llama.cpp ties to each, and the regex steps that cut text into words.
 *
 * llama.cpp runs each pre-tokenizer as a list of regexes applied in turn (every step
 * cuts the pieces of the previous one; matches and the gaps between them both become
 * pieces). Some regexes it runs through hand-written splitters, the others through
 * std::regex over a "collapsed" text in which every non-ASCII code point is replaced by
 * one byte naming its category. The patterns below are PCRE2 patterns (UTF, Unicode
 * properties, JIT) written to give the same splits as that machinery, including its
 * quirks:
 *   - `\s` is the White_Space property (llama.cpp's whitespace set), never PCRE2's own;
 *     the patterns are written with `\s`/`\S` and rewritten at compile time;
 *   - in the collapsed std::regex path \p{S} does not contain ASCII '~', and
 *     \p{Lu}/\p{Ll}/\p{Lt}/\p{Lm}/\p{Lo} all mean \p{L};
 *   - in the non-collapsed (wide std::regex) path non-ASCII whitespace never matches a
 *     literal character class, hence the (?!\s) guards and U+3000 left out of ranges;
 *   - ECMAScript `$` is `\z`;
 *   - afmoe / tiny_aya digit grouping is a hand-written splitter in llama.cpp that
 *     glues the preceding non-digits to the first digit group; TOK_STEP_DIGITS3 does
 *     the same;
 *   - the \p{..} steps match a category-collapsed copy of the text (every character
 *     replaced by a stand-in of its utf8proc class), as llama.cpp matches its own
 *     collapsed text; kimi-k2's copy also keeps llama.cpp's Han ranges apart.
 */
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tok_internal.h"

/* ---- Patterns --------------------------------------------------------------------- */

#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define WS_TAIL      "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3                                                                                            \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" WS_TAIL
#define RE_QWEN2 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" WS_TAIL
#define RE_QWEN35                                                                                            \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "                                           \
                 "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*" WS_TAIL
#define RE_JAIS2                                                                                             \
    CONTRACTIONS                                                                                             \
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"                \
    "|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)"          \
    "|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"
#define RE_MINICPM5                                                                                          \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" WS_TAIL
#define RE_SEED_CODER                                                                                        \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+" WS_TAIL
#define RE_BAILING                                                                                           \
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"  \
    "[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
#define RE_EXAONE_MOE                                                                                        \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}"                       \
                 "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
/* Upper-then-lower words: llama.cpp's adaptation with lookaheads instead of Lu/Ll. */
#define UPPERS "(?:(?=\\p{L})[^a-z])"
#define LOWERS "(?:(?=\\p{L})[^A-Z])"
#define RE_TEKKEN                                                                                            \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERS "*" LOWERS "+|[^\\r\\n\\p{L}\\p{N}]?" UPPERS "+" LOWERS                  \
    "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*" WS_TAIL
#define RE_GPT4O                                                                                             \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERS "*" LOWERS "+" CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" UPPERS "+" LOWERS \
    "*" CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*" WS_TAIL
#define UPPERS_M "(?:(?=[\\p{L}\\p{M}])[^a-z])"
#define LOWERS_M "(?:(?=[\\p{L}\\p{M}])[^A-Z])"
#define RE_GRANITE_MULTI                                                                                     \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERS_M "*" LOWERS_M "+" CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" UPPERS_M      \
    "+" LOWERS_M "*" CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*" WS_TAIL
/* Cased-letter classes that the collapsed std::regex turns into plain letter classes. */
#define RE_CASED_WORDS(num)                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+" CONTRACTIONS "?|" num "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*" WS_TAIL
/* deepseek-v3 / afmoe: \p{S} without '~' (see the file comment). */
#define RE_DS3_MAIN                                                                                          \
    "[!\"#$%&'()*+,\\-./"                                                                                    \
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|(?:[^\\r\\n\\p{L}\\p{P}\\p{S}]|~)?[\\p{L}\\p{M}]+"                   \
    "| ?(?:(?!~)[\\p{P}\\p{S}])+[\\r\\n]*" WS_TAIL
#define RE_HAN_KANA   "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+"
#define RE_CJK_HANGUL "(?:(?!\\s)[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}])+"
#define RE_DS_LLM_LETTERS                                                                                    \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"     \
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"   \
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"          \
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"        \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"        \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{"     \
    "1F7D}"                                                                                                  \
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{"    \
    "1FD3}"                                                                                                  \
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"         \
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"          \
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"          \
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"         \
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"        \
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"      \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{"    \
    "118DF}"                                                                                                 \
    "\\x{1E900}-\\x{1E943}]+"
#define RE_DS_LLM_PUNCT                                                                                      \
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}]+"
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"
#define RE_YOUTU_CJK                                                                                         \
    "[\\x{AC00}-\\x{D7A3}\\x{3131}-\\x{318E}]+|[\\x{FF01}\\x{2026}\\x{201C}\\x{201D}\\x{2018}\\x{2019}"      \
    "\\x{2014}\\x{FF1A}\\x{FF1B}\\x{FF0C}\\x{3001}-\\x{303F}\\x{FE30}-\\x{FE4F}]+|[\\x{3105}-\\x{312F}]+"    \
    "|" RE_HAN_KANA
#define RE_AFMOE_CJK                                                                                         \
    "[\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{8C48}-\\x{FAFF}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}"       \
    "\\x{FF65}-\\x{FF9F}\\x{2F00}-\\x{2FDF}\\x{E40}-\\x{E7F}\\x{E80}-\\x{EFF}\\x{1780}-\\x{17FF}"            \
    "\\x{1000}-\\x{109F}\\x{AA60}-\\x{AA7F}\\x{A9E0}-\\x{A9FF}\\x{AC00}-\\x{D7AF}\\x{1100}-\\x{11FF}]+"
#define RE_NEWLINES "[^\\n]+|\\n+"
/* kimi-k2: llama.cpp's hand-written splitter keeps Han characters (its CJK ranges) apart
 * from other letters; its subject is collapsed with Han kept distinct (tok_cpt_collapse_han),
 * so its four Han stand-ins are all this class has to match. */
#define HAN "[\\x{4E00}\\x{20000}\\x{E001}\\x{F0001}]"
#define RE_KIMI                                                                                              \
    HAN "+|[^\\r\\n\\p{L}\\p{N}]?(?:(?!" HAN ")\\p{L})+(?:'[sStTmMdD]|'[rR][eE]|'[vV][eE]|'[lL][lL])?"       \
        "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" WS_TAIL
#define DIGITS3 NULL /* TOK_STEP_DIGITS3 */

typedef enum pretok_id {
    P_DEFAULT,
    P_LLAMA3,
    P_JAIS2,
    P_DEEPSEEK_LLM,
    P_DEEPSEEK3,
    P_YOUTU,
    P_DEEPSEEK_CODER,
    P_FALCON,
    P_STARCODER,
    P_GPT2,
    P_QWEN2,
    P_QWEN35,
    P_BLOOM,
    P_VIKING,
    P_TEKKEN,
    P_CHAMELEON,
    P_GPT4O,
    P_GRANITE_MULTI,
    P_TINY_AYA,
    P_SUPERBPE,
    P_BAILING,
    P_SEED_CODER,
    P_AFMOE,
    P_LAGUNA,
    P_EXAONE_MOE,
    P_NEWLINES, /* gemma4, sarvam-moe: SPM-style BPE */
    P_MINICPM5,
    P_WHITESPACE,
    P_KIMI,
    P_COUNT
} pretok_id;

/* Steps per pre-tokenizer; a NULL entry in a non-empty list is a DIGITS3 step. */
typedef struct pretok_steps {
    int n;
    const char *re[TOK_MAX_STEPS];
} pretok_steps;

static const pretok_steps k_steps[P_COUNT] = {
    [P_DEFAULT] = {4, {"[\\p{P}$+<=>^~|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    [P_LLAMA3] = {1, {RE_LLAMA3}},
    [P_JAIS2] = {1, {RE_JAIS2}},
    [P_DEEPSEEK_LLM] = {6,
                        {"[\\r\\n]", RE_DS_LLM_LETTERS, RE_DS_LLM_PUNCT, "\\s+\\z", RE_CJK_HANGUL,
                         "\\p{N}+"}},
    [P_DEEPSEEK3] = {3, {"\\p{N}{1,3}", RE_HAN_KANA, RE_DS3_MAIN}},
    [P_YOUTU] = {2, {RE_YOUTU_CJK, RE_CASED_WORDS("\\p{N}")}},
    [P_DEEPSEEK_CODER] = {5, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK_HANGUL, "\\p{N}"}},
    [P_FALCON] = {3, {"[\\p{P}$+<=>^~|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    [P_STARCODER] = {2, {"\\p{N}", RE_GPT2}},
    [P_GPT2] = {1, {RE_GPT2}},
    [P_QWEN2] = {1, {RE_QWEN2}},
    [P_QWEN35] = {1, {RE_QWEN35}},
    [P_BLOOM] = {1, {RE_BLOOM}},
    [P_VIKING] = {2, {RE_BLOOM, "\\p{N}"}},
    [P_TEKKEN] = {1, {RE_TEKKEN}},
    [P_CHAMELEON] = {6,
                     {"<sentinel:[0-9]+>", "(?:IMGIMG)(?:(?:A|B|C|D|E|F|G|H|I){1,4})Z",
                      "(?:[\\t\\n]|    |  )", "\\p{N}", "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2}},
    [P_GPT4O] = {1, {RE_GPT4O}},
    [P_GRANITE_MULTI] = {1, {RE_GRANITE_MULTI}},
    [P_TINY_AYA] = {2, {DIGITS3, RE_CASED_WORDS("\\p{N}{1,3}")}},
    [P_SUPERBPE] = {2, {"\\p{N}+", "(?=(?:[0-9]{3})+(?![0-9]))"}},
    [P_BAILING] = {1, {RE_BAILING}},
    [P_SEED_CODER] = {1, {RE_SEED_CODER}},
    [P_AFMOE] = {3, {DIGITS3, RE_AFMOE_CJK, RE_DS3_MAIN}},
    [P_LAGUNA] = {2, {RE_NEWLINES, RE_QWEN2}},
    [P_EXAONE_MOE] = {1, {RE_EXAONE_MOE}},
    [P_NEWLINES] = {1, {RE_NEWLINES}},
    [P_MINICPM5] = {2, {"\\p{N}{1,3}", RE_MINICPM5}},
    [P_WHITESPACE] = {1, {"\\S+"}},
    [P_KIMI] = {1, {RE_KIMI}},
};

/* Flags llama.cpp sets together with the pre-tokenizer type. */
enum {
    F_IGNORE_MERGES = 1 << 0,
    F_ADD_BOS = 1 << 1,
    F_KEEP_SPACES = 1 << 2, /* clean_spaces = false */
    F_ESCAPE_WS = 1 << 3,   /* escape_whitespaces, raw UTF-8 (no byte-level mapping) */
    F_ADD_SEP = 1 << 4,
    F_NO_BOS = 1 << 5,
    F_RAW = 1 << 6,      /* raw UTF-8, no byte-level mapping, spaces not escaped */
    F_NO_LOWER = 1 << 7, /* the normalizer does not lowercase */
};

typedef struct pretok_name {
    const char *name;
    pretok_id id;
    unsigned flags;
} pretok_name;

static const pretok_name k_names[] = {
    {"default", P_DEFAULT, 0},
    {"minicpm5", P_MINICPM5, F_IGNORE_MERGES},
    {"llama3", P_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"llama-v3", P_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"llama-bpe", P_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"falcon3", P_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"falcon-h1", P_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"pixtral", P_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"midm-2.0", P_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"lfm2", P_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"jina-v5-nano", P_LLAMA3, F_IGNORE_MERGES | F_ADD_BOS},
    {"deepseek-llm", P_DEEPSEEK_LLM, F_KEEP_SPACES},
    {"deepseek-coder", P_DEEPSEEK_CODER, F_KEEP_SPACES},
    {"deepseek-v3", P_DEEPSEEK3, F_KEEP_SPACES},
    {"youtu", P_YOUTU, F_KEEP_SPACES | F_IGNORE_MERGES},
    {"falcon", P_FALCON, 0},
    {"mpt", P_GPT2, 0},
    {"starcoder", P_STARCODER, 0},
    {"gpt-2", P_GPT2, 0},
    {"phi-2", P_GPT2, 0},
    {"jina-es", P_GPT2, 0},
    {"jina-de", P_GPT2, 0},
    {"gigachat", P_GPT2, 0},
    {"jina-v2-es", P_GPT2, 0},
    {"jina-v2-de", P_GPT2, 0},
    {"a.x-4.0", P_GPT2, 0},
    {"mellum", P_GPT2, 0},
    {"modern-bert", P_GPT2, 0},
    {"jais-2", P_JAIS2, 0},
    {"gemma4", P_NEWLINES, F_ESCAPE_WS},
    {"granite-embed-multi-311m", P_NEWLINES, F_ESCAPE_WS},
    {"sarvam-moe", P_NEWLINES, F_ESCAPE_WS | F_KEEP_SPACES},
    {"jina-v1-en", P_GPT2, F_ADD_SEP},
    {"jina-v2-code", P_GPT2, F_ADD_SEP},
    {"roberta-bpe", P_GPT2, F_ADD_SEP},
    {"refact", P_STARCODER, 0},
    {"command-r", P_STARCODER, F_KEEP_SPACES},
    {"qwen2", P_QWEN2, F_KEEP_SPACES},
    {"deepseek-r1-qwen", P_QWEN2, F_KEEP_SPACES},
    {"kormo", P_QWEN2, F_KEEP_SPACES},
    {"f2llmv2", P_QWEN2, F_KEEP_SPACES},
    {"qwen35", P_QWEN35, F_KEEP_SPACES},
    {"stablelm2", P_QWEN2, 0},
    {"olmo", P_GPT2, 0},
    {"dbrx", P_LLAMA3, 0},
    {"smaug-bpe", P_LLAMA3, 0},
    {"poro-chat", P_BLOOM, F_KEEP_SPACES},
    {"glm4", P_LLAMA3, F_NO_BOS},
    {"chatglm-bpe", P_LLAMA3, F_NO_BOS},
    {"viking", P_VIKING, F_KEEP_SPACES},
    {"jais", P_GPT2, 0},
    {"tekken", P_TEKKEN, F_KEEP_SPACES | F_IGNORE_MERGES | F_ADD_BOS},
    {"smollm", P_STARCODER, F_KEEP_SPACES},
    {"codeshell", P_STARCODER, 0},
    {"bloom", P_BLOOM, 0},
    {"gpt3-finnish", P_BLOOM, 0},
    {"exaone", P_STARCODER, 0},
    {"exaone4", P_GPT2, 0},
    {"exaone-moe", P_EXAONE_MOE, 0},
    {"chameleon", P_CHAMELEON, F_ADD_BOS | F_KEEP_SPACES},
    {"minerva-7b", P_STARCODER, 0},
    {"megrez", P_QWEN2, 0},
    {"gpt-4o", P_GPT4O, F_KEEP_SPACES},
    {"llama4", P_GPT4O, F_KEEP_SPACES},
    {"kanana2", P_GPT4O, F_KEEP_SPACES},
    {"talkie", P_GPT4O, F_KEEP_SPACES},
    {"granite-embed-multi-97m", P_GRANITE_MULTI, F_KEEP_SPACES | F_IGNORE_MERGES},
    {"tiny_aya", P_TINY_AYA, F_KEEP_SPACES},
    {"cohere2moe", P_TINY_AYA, F_KEEP_SPACES},
    {"superbpe", P_SUPERBPE, F_KEEP_SPACES},
    {"trillion", P_GPT2, F_KEEP_SPACES},
    {"granite-docling", P_GPT2, F_KEEP_SPACES},
    {"bailingmoe", P_BAILING, F_KEEP_SPACES},
    {"bailingmoe2", P_BAILING, F_KEEP_SPACES},
    {"llada-moe", P_BAILING, F_KEEP_SPACES},
    {"seed-coder", P_SEED_CODER, F_KEEP_SPACES},
    {"hunyuan", P_QWEN2, F_KEEP_SPACES},
    {"hunyuan-dense", P_DEEPSEEK3, F_KEEP_SPACES},
    {"joyai-llm", P_DEEPSEEK3, F_KEEP_SPACES},
    {"grok-2", P_QWEN2, F_KEEP_SPACES},
    {"afmoe", P_AFMOE, F_KEEP_SPACES},
    {"laguna", P_LAGUNA, F_KEEP_SPACES},
    {"minimax-m2", P_GPT4O, F_KEEP_SPACES},
    {"solar-open", P_QWEN2, F_KEEP_SPACES},
    {"mellum2", P_STARCODER, 0},
    {"whitespace", P_WHITESPACE, F_RAW | F_NO_LOWER},
    {"kimi-k2", P_KIMI, F_KEEP_SPACES},
};

/* ---- Compiling ---------------------------------------------------------------------- */

/* White_Space as class content (see tok_cpt_is_whitespace). */
#define WS_CLASS                                                                                             \
    "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Rewrites \s and \S into explicit White_Space classes. Returns a malloc'ed pattern. */
static char *expand_ws(const char *re) {
    size_t n = strlen(re), cap = n * 48 + 16; /* "\\s" (2 bytes) grows to under 96 */
    char *out = malloc(cap);
    if (!out) return NULL;
    size_t o = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = re[i];
        if (c == '\\' && i + 1 < n) {
            char d = re[i + 1];
            const char *rep = NULL;
            if (d == 's')
                rep = in_class ? WS_CLASS : "[" WS_CLASS "]";
            else if (d == 'S')
                rep = "[^" WS_CLASS "]"; /* never used inside a class */
            if (rep) {
                size_t k = strlen(rep);
                memcpy(out + o, rep, k);
                o += k;
            } else {
                out[o++] = c;
                out[o++] = d;
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out[o++] = c;
            if (re[i + 1] == '^') out[o++] = re[++i];
            if (re[i + 1] == ']') out[o++] = re[++i]; /* a literal ']' first in a class */
            continue;
        }
        if (in_class && c == ']') in_class = false;
        out[o++] = c;
    }
    out[o] = 0;
    return out;
}

cera_status tok_pretok_init(cera_tokenizer *t, const char *pre, cera_error *err) {
    const pretok_name *nm = NULL;
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++)
        if (!strcmp(pre, k_names[i].name)) nm = &k_names[i];
    if (!nm)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "tokenizer.ggml.pre: unknown pre-tokenizer type '%s'",
                         pre);

    if (nm->flags & F_IGNORE_MERGES) t->ignore_merges = true;
    if (nm->flags & F_ADD_BOS) t->add_bos = true;
    if (nm->flags & F_KEEP_SPACES) t->clean_spaces = false;
    if (nm->flags & F_ESCAPE_WS) {
        t->escape_whitespaces = true;
        t->byte_encode = false;
    }
    if (nm->flags & F_ADD_SEP) t->add_sep = true;
    if (nm->flags & F_RAW) t->byte_encode = false;
    if (nm->flags & F_NO_LOWER) t->wpm_lowercase = false;
    if (nm->flags & F_NO_BOS) t->bos = TOK_NULL;
    if (nm->id == P_NEWLINES && !strcmp(pre, "gemma4")) t->newline_direct = true;
    if (!strcmp(pre, "granite-embed-multi-311m")) t->newline_direct = true;
    if (nm->id == P_KIMI) t->collapse_han = true;

    const pretok_steps *st = &k_steps[nm->id];
    tok_pretok *p = &t->pretok;
    p->n_steps = st->n;
    for (int i = 0; i < st->n; i++) {
        if (!st->re[i]) {
            p->kind[i] = TOK_STEP_DIGITS3;
            p->code[i] = NULL;
            continue;
        }
        p->kind[i] = TOK_STEP_REGEX;
        /* llama.cpp matches the patterns with Unicode categories on a category-collapsed
         * text (its own tables); the others see the characters themselves */
        p->collapsed[i] = strstr(st->re[i], "\\p{") != NULL;
        p->any_collapsed |= p->collapsed[i];
        char *re = expand_ws(st->re[i]);
        if (!re) return cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer: out of memory compiling '%s'", pre);
        int ec = 0;
        PCRE2_SIZE eo = 0;
        pcre2_code *code =
            pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        free(re);
        if (!code) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            return cera_fail(err, CERA_ERR_INTERNAL, "tokenizer: pre-tokenizer '%s' step %d: %s at %zu", pre,
                             i, (const char *)msg, (size_t)eo);
        }
        pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
        p->code[i] = code;
    }
    return CERA_OK;
}

void tok_pretok_free(tok_pretok *p) {
    for (int i = 0; i < p->n_steps; i++)
        if (p->code[i]) pcre2_code_free((pcre2_code *)p->code[i]);
    memset(p, 0, sizeof *p);
}

/* ---- Splitting ---------------------------------------------------------------------- */

static bool push_piece(size_t **v, size_t *cap, size_t *n, size_t a, size_t b) {
    if (a >= b) return true; /* empty pieces hold no tokens */
    if (!tok_reserve((void **)v, cap, 2 * (*n + 1), sizeof(size_t))) return false;
    (*v)[2 * *n] = a;
    (*v)[2 * *n + 1] = b;
    (*n)++;
    return true;
}

static size_t utf8_next(const char *s, size_t n, size_t i) {
    size_t k = tok_utf8_len((uint8_t)s[i]);
    return i + k <= n ? i + k : n;
}

/* One regex match at or after `from` in s[0, n); returns 1 with [*ms, *me), 0 for none,
 * -1 when both engines gave up (resource limits). */
static int find(const pcre2_code *code, tok_scratch *sc, const char *s, size_t n, size_t from, uint32_t opts,
                size_t *ms, size_t *me) {
    pcre2_match_data *md = sc->match_data;
    int rc = pcre2_match(code, (PCRE2_SPTR)s, n, from, opts | PCRE2_NO_UTF_CHECK, md, sc->match_ctx);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        rc = pcre2_match(code, (PCRE2_SPTR)s, n, from, opts | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return -1;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* Cuts s[a, b) by one regex the way std::regex_iterator walks a range: each match
 * and each gap before it is a piece, the rest after the last match too. */
static bool split_regex(const pcre2_code *code, tok_scratch *sc, const char *s, size_t a, size_t b,
                        size_t **v, size_t *cap, size_t *n) {
    const char *sub = s + a;
    size_t len = b - a, done = 0, ms, me;
    int rc = find(code, sc, sub, len, 0, 0, &ms, &me);
    while (rc == 1) {
        if (!push_piece(v, cap, n, a + done, a + ms)) return false;
        if (!push_piece(v, cap, n, a + ms, a + me)) return false;
        done = me;
        if (ms == me) {
            if (me >= len) break;
            rc = find(code, sc, sub, len, me, PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED, &ms, &me);
            if (rc == 1) continue;
            rc = find(code, sc, sub, len, utf8_next(sub, len, done), 0, &ms, &me);
        } else {
            rc = find(code, sc, sub, len, me, 0, &ms, &me);
        }
    }
    return push_piece(v, cap, n, a + done, b);
}

/* llama.cpp's afmoe digit splitter: runs of \p{N} are cut into a 1-2 digit head (length
 * mod 3) and groups of 3; whatever precedes a run (since the last cut) is glued to its
 * first group, and the tail after the last run is one piece. */
static bool split_digits3(const char *s, size_t a, size_t b, size_t **v, size_t *cap, size_t *n) {
    size_t prev = a, pos = a;
    while (pos < b) {
        uint32_t c;
        size_t q = pos;
        if (!tok_utf8_decode((const uint8_t *)s, b, &q, &c)) c = 0xfffd, q = pos + 1;
        if (!(tok_cpt_flags(c) & TOK_CPT_NUMBER)) {
            pos = q;
            continue;
        }
        size_t count = 0, run = pos;
        while (run < b) {
            size_t r = run;
            uint32_t d;
            if (!tok_utf8_decode((const uint8_t *)s, b, &r, &d)) d = 0xfffd, r = run + 1;
            if (!(tok_cpt_flags(d) & TOK_CPT_NUMBER)) break;
            count++;
            run = r;
        }
        size_t cut = count % 3 ? count % 3 : 3;
        for (size_t k = 0; k < count;) {
            size_t r = pos;
            uint32_t d;
            if (!tok_utf8_decode((const uint8_t *)s, b, &r, &d)) r = pos + 1;
            pos = r;
            if (++k == cut) {
                if (!push_piece(v, cap, n, prev, pos)) return false;
                prev = pos;
                cut += 3;
            }
        }
    }
    return push_piece(v, cap, n, prev, b);
}

bool tok_pretok_split(const cera_tokenizer *t, tok_scratch *sc, const char *s, const char *coll, size_t n,
                      size_t **pieces, size_t *n_pieces) {
    const tok_pretok *p = &t->pretok;
    if (!sc->match_data) {
        sc->match_data = pcre2_match_data_create(16, NULL);
        if (!sc->match_data) return false;
    }
    if (!sc->jit_stack) {
        pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        pcre2_match_context *mc = js ? pcre2_match_context_create(NULL) : NULL;
        if (mc) pcre2_jit_stack_assign(mc, NULL, js);
        sc->jit_stack = js;
        sc->match_ctx = mc; /* carries the JIT stack; NULL: PCRE2's default stack */
    }

    /* cur: the pieces so far; start with the whole text. */
    size_t *cur = sc->pieces, cur_cap = sc->pieces_cap, ncur = 0;
    size_t *nxt = sc->pieces2, nxt_cap = sc->pieces2_cap, nnxt = 0;
    bool ok = push_piece(&cur, &cur_cap, &ncur, 0, n);
    for (int st = 0; ok && st < p->n_steps; st++) {
        nnxt = 0;
        for (size_t i = 0; ok && i < ncur; i++) {
            size_t a = cur[2 * i], b = cur[2 * i + 1];
            if (p->kind[st] == TOK_STEP_DIGITS3)
                ok = split_digits3(s, a, b, &nxt, &nxt_cap, &nnxt);
            else
                ok = split_regex(p->code[st], sc, p->collapsed[st] ? coll : s, a, b, &nxt, &nxt_cap, &nnxt);
        }
        size_t *tmp = cur, tcap = cur_cap;
        cur = nxt, cur_cap = nxt_cap, ncur = nnxt;
        nxt = tmp, nxt_cap = tcap;
    }
    sc->pieces = cur, sc->pieces_cap = cur_cap;
    sc->pieces2 = nxt, sc->pieces2_cap = nxt_cap;
    *pieces = cur;
    *n_pieces = ncur;
    return ok;
}

void tok_scratch_free_regex(tok_scratch *s) {
    if (s->match_data) pcre2_match_data_free((pcre2_match_data *)s->match_data);
    if (s->match_ctx) pcre2_match_context_free((pcre2_match_context *)s->match_ctx);
    if (s->jit_stack) pcre2_jit_stack_free((pcre2_jit_stack *)s->jit_stack);
    s->match_data = s->match_ctx = s->jit_stack = NULL;
}
