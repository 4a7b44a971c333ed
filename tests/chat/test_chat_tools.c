/*
 * test_chat_tools.c — the tool-call grammars of cera_chat_tool_grammar for each format:
 * replies written in the format's syntax with the tools' names and valid arguments are
 * accepted whole (cera_grammar_check) and parse back into the same calls (cera_chat_parse_as);
 * an unknown name, arguments against the schema, a missing required argument, a second call
 * where parallel calls are off, and the other function where one is named are rejected.
 * tool_choice auto gives the format's trigger words (lazy), required none, none no grammar;
 * bad tools and an unknown named function are errors.
 */
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "grammar/grammar.h"
#include "testutil.h"

static const char tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"weather\","
    "\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\","
    "\"enum\":[\"c\",\"f\"]}},\"required\":[\"location\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\","
    "\"properties\":"
    "{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}}}]";

typedef struct fcase {
    const char *tmpl;     /* a template text with the format's markers */
    cera_chat_format f;   /* the grammar's format */
    const char *trigger;  /* the first trigger word for auto */
    const char *good;     /* one call of get_weather(location=Paris) */
    const char *good2;    /* two calls: get_weather then add(1, 2) */
    const char *bad_name; /* an unknown function */
    const char *bad_args; /* arguments against the schema */
} fcase;

static const fcase cases[] = {
    {"{{ '<tool_call>' }} \"name\" arguments", CERA_CHAT_HERMES, "<tool_call>",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>\n"
     "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"x\", \"b\": 2}}\n</tool_call>"},
    {"<|start_header_id|> \"parameters\" <|python_tag|>", CERA_CHAT_LLAMA3, "{\"name\"",
     "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}",
     "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}; {\"name\": \"add\", "
     "\"parameters\": "
     "{\"a\": 1, \"b\": 2}}",
     "{\"name\": \"nope\", \"parameters\": {}}", "{\"name\": \"add\", \"parameters\": {\"a\": 1}}"},
    {"[TOOL_CALLS]", CERA_CHAT_MISTRAL, "[TOOL_CALLS]",
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": "
     "\"abc123XYZ\"}]",
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": "
     "\"abc123XYZ\"}, "
     "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}, \"id\": \"000000000\"}]",
     "[TOOL_CALLS][{\"name\": \"nope\", \"arguments\": {}, \"id\": \"abc123XYZ\"}]",
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": \"abc\"}]"},
    {"<|tool_call_start|>", CERA_CHAT_LFM2, "<|tool_call_start|>",
     "<|tool_call_start|>[get_weather(location=\"Paris\")]<|tool_call_end|>",
     "<|tool_call_start|>[get_weather(location=\"Paris\"), add(a=1, b=2)]<|tool_call_end|>",
     "<|tool_call_start|>[nope()]<|tool_call_end|>",
     "<|tool_call_start|>[get_weather(unit=\"c\")]<|tool_call_end|>"},
    {"{{ messages }}", CERA_CHAT_GENERIC, NULL,
     "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}]}",
     "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}, {\"name\": "
     "\"add\", "
     "\"arguments\": {\"a\": 1, \"b\": 2}}]}",
     "{\"tool_calls\": [{\"name\": \"nope\", \"arguments\": {}}]}",
     "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": "
     "\"k\"}}]}"},
};

/* Whether the grammar accepts text whole. */
static bool accepts(const char *gbnf, const char *text) {
    cera_grammar *g = NULL;
    cera_error err;
    CHECK(cera_grammar_parse(gbnf, strlen(gbnf), NULL, &g, &err) == CERA_OK, "%s\n%s", err.message, gbnf);
    if (!g) return false;
    bool ok = false;
    size_t at = 0;
    CHECK(cera_grammar_check(g, text, strlen(text), &ok, &at, &err) == CERA_OK, "%s", err.message);
    cera_grammar_free(g);
    return ok;
}

static cera_chat_grammar build(const cera_chat_template *t, cera_tool_choice choice, const char *fn,
                               bool parallel) {
    cera_chat_grammar g;
    cera_error err;
    CHECK(cera_chat_tool_grammar(t, tools, choice, fn, parallel, &g, &err) == CERA_OK, "%s", err.message);
    return g;
}

static void one_format(const fcase *c) {
    cera_chat_template *t = NULL;
    cera_error err;
    CHECK(cera_chat_template_open(NULL, NULL, c->tmpl, strlen(c->tmpl), &t, &err) == CERA_OK, "%s",
          err.message);
    if (!t) return;
    const char *fname = cera_chat_format_name(c->f);
    cera_chat_grammar g = build(t, CERA_TOOL_CHOICE_REQUIRED, NULL, false);
    CHECK(g.gbnf && g.format == c->f && g.n_triggers == 0, "%s: required: format %d, %zu triggers", fname,
          (int)g.format, g.n_triggers);
    if (g.gbnf) {
        CHECK(accepts(g.gbnf, c->good), "%s: rejects %s\n%s", fname, c->good, g.gbnf);
        CHECK(!accepts(g.gbnf, c->good2), "%s: two calls without parallel", fname);
        CHECK(!accepts(g.gbnf, c->bad_name), "%s: accepts %s", fname, c->bad_name);
        CHECK(!accepts(g.gbnf, c->bad_args), "%s: accepts %s", fname, c->bad_args);
        cera_chat_reply r;
        CHECK(cera_chat_parse_as(g.format, c->good, strlen(c->good), &r, &err) == CERA_OK, "%s", err.message);
        CHECK(r.n_tool_calls == 1 && !strcmp(r.tool_calls[0].name, "get_weather") &&
                  !strcmp(r.tool_calls[0].arguments, "{\"location\":\"Paris\"}"),
              "%s: parsed %d calls", fname, r.n_tool_calls);
        cera_chat_reply_free(&r);
    }
    cera_chat_grammar_free(&g);

    g = build(t, CERA_TOOL_CHOICE_REQUIRED, NULL, true);
    if (g.gbnf) {
        CHECK(accepts(g.gbnf, c->good2), "%s: parallel rejects %s\n%s", fname, c->good2, g.gbnf);
        cera_chat_reply r;
        CHECK(cera_chat_parse_as(g.format, c->good2, strlen(c->good2), &r, &err) == CERA_OK, "%s",
              err.message);
        CHECK(r.n_tool_calls == 2 && !strcmp(r.tool_calls[1].name, "add") &&
                  !strcmp(r.tool_calls[1].arguments, "{\"a\":1,\"b\":2}"),
              "%s: parallel parsed %d calls", fname, r.n_tool_calls);
        cera_chat_reply_free(&r);
    }
    cera_chat_grammar_free(&g);

    /* named: only that function */
    g = build(t, CERA_TOOL_CHOICE_REQUIRED, "add", false);
    CHECK(g.gbnf && !accepts(g.gbnf, c->good), "%s: a named function lets another through", fname);
    cera_chat_grammar_free(&g);
    CHECK(cera_chat_tool_grammar(t, tools, CERA_TOOL_CHOICE_REQUIRED, "nope", false, &g, &err) ==
                  CERA_ERR_INVALID_ARG &&
              !g.gbnf,
          "%s: an unknown named function", fname);

    /* auto: lazy on the format's start marker; the generic format has none */
    g = build(t, CERA_TOOL_CHOICE_AUTO, NULL, false);
    if (c->trigger) {
        CHECK(g.gbnf && g.n_triggers >= 1 && !strcmp(g.triggers[0].word, c->trigger),
              "%s: auto: %zu triggers", fname, g.n_triggers);
        /* the grammar starts with the trigger word */
        if (g.gbnf) CHECK(accepts(g.gbnf, c->good), "%s: auto rejects %s", fname, c->good);
    } else {
        CHECK(!g.gbnf && g.format == CERA_CHAT_CONTENT, "%s: a grammar for auto", fname);
    }
    cera_chat_grammar_free(&g);
    g = build(t, CERA_TOOL_CHOICE_NONE, NULL, false);
    CHECK(!g.gbnf && !g.n_triggers, "%s: none gave a grammar", fname);
    cera_chat_grammar_free(&g);
    cera_chat_template_free(t);
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) one_format(&cases[i]);
    cera_chat_template *t = NULL;
    cera_error err;
    const char *h = cases[0].tmpl;
    CHECK(cera_chat_template_open(NULL, NULL, h, strlen(h), &t, &err) == CERA_OK, "%s", err.message);
    cera_chat_grammar g;
    CHECK(cera_chat_tool_grammar(t, "{\"a\":1}", CERA_TOOL_CHOICE_REQUIRED, NULL, false, &g, &err) ==
              CERA_ERR_INVALID_ARG,
          "tools not an array");
    CHECK(cera_chat_tool_grammar(t, "[{\"function\":{}}]", CERA_TOOL_CHOICE_REQUIRED, NULL, false, &g,
                                 &err) == CERA_ERR_INVALID_ARG,
          "a tool without a name");
    const char *bad_schema = "[{\"function\":{\"name\":\"f\",\"parameters\":{\"$ref\":\"http://x/y\"}}}]";
    CHECK(cera_chat_tool_grammar(t, bad_schema, CERA_TOOL_CHOICE_REQUIRED, NULL, false, &g, &err) !=
                  CERA_OK &&
              !g.gbnf,
          "an external $ref");
    cera_chat_template_free(t);
    return test_finish();
}
