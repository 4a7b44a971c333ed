/*
 * test_template_engine.c — the template engine's pieces, each against what Jinja2 (as
 * transformers configures it) gives: whitespace control (trim_blocks, lstrip_blocks, `-`
 * and `+`), expressions with Python's semantics and printing, loops and their `loop`
 * variables, scoping, set / macro / call / filter blocks, filters, tests, str/list/dict
 * methods, undefined values, the sandbox's refusals, raise_exception, strftime_now, and
 * the limits that stop hostile templates.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "template/template.h"
#include "testutil.h"

typedef struct tcase {
    const char *tmpl;
    const char *vars;     /* JSON object of top-level variables, or NULL */
    const char *expected; /* NULL: must fail */
    const char *error;    /* a substring of the error (when expected is NULL), or NULL */
} tcase;

static void run_case(const tcase *c, const cera_template_limits *lim) {
    cera_error err = {0};
    cera_template *t = NULL;
    cJSON *vars = c->vars ? cJSON_Parse(c->vars) : NULL;
    char *out = NULL;
    size_t n = 0;
    cera_status st = cera_template_compile(c->tmpl, strlen(c->tmpl), &t, &err);
    if (st == CERA_OK) {
        cera_template_inputs in = {
            .extra = vars, .bos_token = "<s>", .eos_token = "</s>", .now = CERA_TEMPLATE_GOLDEN_NOW};
        if (lim) in.limits = *lim;
        st = cera_template_render(t, &in, &out, &n, &err);
    }
    if (c->expected) {
        CHECK(st == CERA_OK && n == strlen(c->expected) && !memcmp(out, c->expected, n),
              "template %.200s\n  expected [%s]\n  got      [%s] %s", c->tmpl, c->expected,
              out ? out : "(error)", st == CERA_OK ? "" : err.message);
    } else {
        CHECK(st != CERA_OK && out == NULL, "template %.200s should fail, gave [%s]", c->tmpl,
              out ? out : "");
        if (st != CERA_OK && c->error)
            CHECK(strstr(err.message, c->error) != NULL, "template %.200s: error [%s] lacks [%s]", c->tmpl,
                  err.message, c->error);
    }
    free(out);
    cera_template_free(t);
    cJSON_Delete(vars);
}

static const tcase whitespace[] = {
    {"{% if true %}\nA\n{% endif %}\n", NULL, "A\n", NULL},
    {"  {% if true %}x{% endif %}", NULL, "x", NULL},
    {"a  {% if true %}x{% endif %}", NULL, "a  x", NULL},
    {"  {%+ if true %}x{% endif %}", NULL, "  x", NULL},
    {"a {{- ' b' -}} c", NULL, "a bc", NULL},
    {"{{ 'x' }}\n", NULL, "x", NULL},
    {"{{ 'x' }}\n\n", NULL, "x\n", NULL},
    {"{# a comment #}\nA", NULL, "A", NULL},
    {"  {# c #}\nA", NULL, "A", NULL},
    {"x {%- if true %} y{% endif %}", NULL, "x y", NULL},
    {"{% raw %}{{ x }}{% if %}{% endraw %}", NULL, "{{ x }}{% if %}", NULL},
    {"{% if true -%}\n\n  A{% endif %}", NULL, "A", NULL},
    {"a\n  {{ 'b' }}", NULL, "a\n  b", NULL},
    {"{% if true %}\n    {% if true %}X{% endif %}\n{% endif %}", NULL, "X", NULL},
    {"{% if true +%}\nA{% endif %}", NULL, "\nA", NULL},
    {"a\r\nb{% if true %}\r\nc{% endif %}", NULL, "a\nbc", NULL},
    {"{{ 'a' }}\n{{ 'b' }}", NULL, "a\nb", NULL},
    {"<{%- for x in [1, 2] -%}\n  {{ x }}\n{%- endfor -%}\n>", NULL, "<12>", NULL},
    {"{% for x in [1, 2] %}\n  {{ x }}\n{% endfor %}", NULL, "  1\n  2\n", NULL},
    {"{{ {'a': {'b': 1}} }}", NULL, "{'a': {'b': 1}}", NULL},
};

static const tcase expressions[] = {
    {"{{ 1/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 10/5 }}", NULL, "0.5 3 -4 2 1024 2.0",
     NULL},
    {"{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 3 * 1.5 }} {{ 1e-5 }} {{ 123456789.0 }}", NULL,
     "1.0 0.30000000000000004 1e+20 4.5 1e-05 123456789.0", NULL},
    {"{{ [1, 'a', none, true, 2.5] }}", NULL, "[1, 'a', None, True, 2.5]", NULL},
    {"{{ {'a': 1, 'b': [False]} }} {{ ('a',) }} {{ () }}", NULL, "{'a': 1, 'b': [False]} ('a',) ()", NULL},
    {"{{ [\"it's\", 'q\"'] }}", NULL, "[\"it's\", 'q\"']", NULL},
    {"{{ ['\\xa0\\u200b\xc3\xa9\\x01'] }}", NULL, "['\\xa0\\u200b\xc3\xa9\\x01']", NULL},
    {"{{ 'abc'[::-1] }} {{ [1,2,3][-1] }} {{ [1,2,3,4][1:3] }} {{ 'h\xc3\xa9llo'[1] }} {{ [1,2,3,4,5][::2] "
     "}}",
     NULL, "cba 3 [2, 3] \xc3\xa9 [1, 3, 5]", NULL},
    {"{{ [1,2,3][5:] }}{{ 'abc'[-2:] }}{{ [1,2,3][::-2] }}", NULL, "[]bc[3, 1]", NULL},
    {"{{ 'a' ~ 1 ~ none ~ true }}", NULL, "a1NoneTrue", NULL},
    {"[{{ 'x' if false }}]{{ 'y' if true else 'n' }}", NULL, "[]y", NULL},
    {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ 'b' in 'abc' }} {{ 3 not in [1,2] }} {{ 'k' in {'k': 1} }}", NULL,
     "True False True True True", NULL},
    {"{{ none or 'd' }} {{ 0 and 1 }} {{ not 0 }} {{ 1 == 1.0 }} {{ 'a' != 'a' }}", NULL,
     "d 0 True True False", NULL},
    {"{{ 'a\\nb\\t\\u00e9\\x41\\\\' }}", NULL,
     "a\nb\t\xc3\xa9"
     "A\\",
     NULL},
    {"{{ \"x\" 'y' }}", NULL, "xy", NULL},
    {"{{ -x|abs }} {{ - 2 ** 2 }}", "{\"x\": 3}", "3 4", NULL},
    {"{{ 'ab' * 3 }} {{ [0] * 2 }} {{ [1] + [2] }} {{ 'a' + 'b' }}", NULL, "ababab [0, 0] [1, 2] ab", NULL},
    {"{{ true }} {{ True }} {{ none }} {{ None }} {{ false }}", NULL, "True True None None False", NULL},
    {"{{ m.content }} {{ m['role'] }} {{ m.get('x', 'dflt') }} {{ xs.0 }}",
     "{\"m\": {\"role\": \"u\", \"content\": \"c\"}, \"xs\": [7]}", "c u dflt 7", NULL},
    {"{{ 1 + 'a' }}", NULL, NULL, "TypeError"},
    {"{% if true %}\n\n{{ 1 + 'a' }}{% endif %}", NULL, NULL, "line 3: TypeError"},
    {"{{ 1 // 0 }}", NULL, NULL, "ZeroDivisionError"},
    {"{{ [1] in {'a': 1} }}", NULL, NULL, "unhashable type: 'list'"},
    {"{{ {[1]: 2} }}", NULL, NULL, "unhashable"},
    {"{{ [{'a': 1}]|unique|list }}", NULL, NULL, "unhashable type: 'dict'"},
    {"{{ (1, 'a') in {(1, 'a'): 1} }}", NULL, "True", NULL},
    {"{{ 9223372036854775807 + 1 }}", NULL, NULL, "OverflowError"},
    {"{{ 1 < 'a' }}", NULL, NULL, "not supported"},
};

static const tcase loops[] = {
    {"{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
     "{{ loop.revindex }}{{ loop.revindex0 }},{% endfor %}",
     NULL, "10TrueFalse332,21FalseFalse321,32FalseTrue310,", NULL},
    {"{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}|{{ loop.cycle('a', 'b') }};{% endfor %}",
     NULL, "-2|a;1-3|b;2-|a;", NULL},
    {"{% for x in [] %}a{% else %}empty{% endfor %}", NULL, "empty", NULL},
    {"{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.index }}{{ loop.length }}{% endfor %}", NULL,
     "212422", NULL},
    {"{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif "
     "%}{{ x }}"
     "{% endfor %}",
     NULL, "13", NULL},
    {"{% for x in [[1,[2]],3] recursive %}{% if x is iterable %}({{ loop(x) }}){% else %}{{ x }}{{ "
     "loop.depth }}"
     "{% endif %}{% endfor %}",
     NULL, "(12(23))31", NULL},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     "{\"d\": {\"a\": 1, \"b\": 2}}", "a=1;b=2;ab", NULL},
    {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", NULL, "21", NULL},
    {"{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}", NULL,
     "12121", NULL},
    {"{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, k=2) }}", NULL, "(1,){'k': 2}", NULL},
    {"{% set ns = namespace(c=0, s='') %}{% for i in [1,2] %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}",
     NULL, "3", NULL},
    {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", NULL, "37", NULL},
    {"{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(5, 1, -2) %}{{ i }}{% endfor %}", NULL,
     "01253", NULL},
    {"{% for x in nothing %}a{% endfor %}", NULL, "", NULL},
    {"{% for x in none %}a{% endfor %}", NULL, NULL, "not iterable"},
    {"{% break %}", NULL, NULL, "outside of a for loop"},
};

static const tcase statements[] = {
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, d) = [3, 4] %}{{ c }}{{ d }}", NULL, "1234", NULL},
    {"{% set x %}hi {{ 1 }}{% endset %}[{{ x }}]", NULL, "[hi 1]", NULL},
    {"{% set x | upper %}hi{% endset %}{{ x }}", NULL, "HI", NULL},
    {"{% macro m(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, b=2) }} {{ m(b=3, a=4) }}", NULL,
     "1-d 1-2 4-3", NULL},
    {"{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}", NULL, "[]", NULL},
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", NULL, NULL, "takes not more than 1"},
    {"{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}", NULL, NULL, "no keyword argument 'b'"},
    {"{% macro m() %}{{ varargs|length }}{% endmacro %}{{ m(1, 2) }}", NULL, "2", NULL},
    {"{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}", NULL, "<in>", NULL},
    {"{% macro w() %}{{ caller(5) }}{% endmacro %}{% call(x) w() %}[{{ x }}]{% endcall %}", NULL, "[5]",
     NULL},
    {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", NULL, "321",
     NULL},
    {"{% filter upper %}ab{{ 'c' }}{% endfilter %}", NULL, "ABC", NULL},
    {"{%- filter trim -%}\n  x  \n{%- endfilter %}", NULL, "x", NULL},
    {"{% generation %}x{% endgeneration %}", NULL, "x", NULL},
    {"{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% set c = 3 %}{% endwith %}{{ a }}[{{ c }}]", NULL,
     "211[]", NULL},
    {"{% if a %}1{% elif b %}2{% else %}3{% endif %}", "{\"a\": false, \"b\": true}", "2", NULL},
    {"{{ raise_exception('boom: ' ~ 1) }}", NULL, NULL, "boom: 1"},
    {"{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M') }}", NULL,
     "15 Jan 2026 2026-01-15 00:00", NULL},
    {"{{ bos_token }}{{ eos_token }}", NULL, "<s></s>", NULL},
    {"{% if x %}", NULL, NULL, "line 1"},
    {"a\n{{ 1 + }}", NULL, NULL, "line 2, column"},
    {"{{ x", NULL, NULL, "missing end"},
    {"{% include 'x' %}", NULL, NULL, "unsupported tag"},
    {"{% endif %}", NULL, NULL, "unexpected"},
};

static const tcase filters[] = {
    {"{{ {'a': [1, 2.5, '\xc3\xa9', none, true], 'b': {}}|tojson }}", NULL,
     "{\"a\": [1, 2.5, \"\xc3\xa9\", null, true], \"b\": {}}", NULL},
    {"{{ {'a': [1]}|tojson(indent=2) }}", NULL, "{\n  \"a\": [\n    1\n  ]\n}", NULL},
    {"{{ '\"q\"\\n<>&'|tojson }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}", NULL,
     "\"\\\"q\\\"\\n<>&\" {\"a\": 2, \"b\": 1}", NULL},
    {"[{{ '  x \\n'|trim }}] {{ 'aB'|upper }}{{ 'aB'|lower }} {{ 'hello world'|title }} {{ "
     "'hELLO'|capitalize }}",
     NULL, "[x] ABab Hello World Hello", NULL},
    {"{{ [1,2]|length }}{{ 'h\xc3\xa9'|length }}{{ {'a': 1}|count }}{{ nope|length }}", NULL, "2210", NULL},
    {"{{ [1,2,3]|first }}{{ [1,2,3]|last }}{{ []|first }}", NULL, "13", NULL},
    {"{{ [1,'a',none]|join(',') }} {{ ms|join('/', attribute='n') }}",
     "{\"ms\": [{\"n\": \"x\"}, {\"n\": \"y\"}]}", "1,a,None x/y", NULL},
    {"{{ nope|default('d') }} {{ ''|default('e') }} {{ ''|default('e', true) }} {{ 0|d(5, boolean=true) }}",
     NULL, "d  e 5", NULL},
    {"{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}", NULL, "bbb bba", NULL},
    {"{{ {'a': 1}|items|list }} {{ 'ab'|list }} {{ 12|string ~ 'x' }}", NULL, "[('a', 1)] ['a', 'b'] 12x",
     NULL},
    {"{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 3|float }}", NULL,
     "42 4 7 3 2.5 3.0", NULL},
    {"{{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 2.1|round(0, 'ceil') }}", NULL, "3 2.57 2.0 3.0",
     NULL},
    {"{{ ms|selectattr('r', 'equalto', 'u')|map(attribute='c')|list }} {{ ms|rejectattr('r', 'eq', "
     "'u')|list|length }}",
     "{\"ms\": [{\"r\": \"u\", \"c\": 1}, {\"r\": \"a\", \"c\": 2}, {\"r\": \"u\", \"c\": 3}]}", "[1, 3] 1",
     NULL},
    {"{{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3,4]|reject('odd')|list }} {{ [0,1,'']|select|list }}", NULL,
     "[1, 3] [2, 4] [1]", NULL},
    {"{{ ['a','b']|map('upper')|join }} {{ ms|map(attribute='x', default='-')|list }}", "{\"ms\": [{}]}",
     "AB ['-']", NULL},
    {"{{ ['a','A','b','a']|unique|list }} {{ [3,1,2]|sort }} {{ ['b','A','c']|sort(reverse=true) }}", NULL,
     "['a', 'b'] [1, 2, 3] ['c', 'b', 'A']", NULL},
    {"{{ {'b': 1, 'A': 2}|dictsort }} {{ {'a': 2, 'b': 1}|dictsort(by='value') }}", NULL,
     "[('A', 2), ('b', 1)] [('b', 1), ('a', 2)]", NULL},
    {"{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, first=true) }}|{{ 'x\\n'|indent }}", NULL,
     "a\n  b\n\n  c|  a\n  b|x\n", NULL},
    {"{{ '<a href=\"x\">'|escape }} {{ '<b>'|safe }} {{ 'x'|e }}", NULL, "&lt;a href=&#34;x&#34;&gt; <b> x",
     NULL},
    {"{{ [1,2,3]|batch(2)|list }} {{ [1,2,3]|batch(2, 0)|list }}", NULL, "[[1, 2], [3]] [[1, 2], [3, 0]]",
     NULL},
    {"{{ [1,2,3]|sum }} {{ ms|sum(attribute='c') }} {{ [3,1,2]|min }} {{ [3,1,2]|max }} {{ ['b','A']|max }}",
     "{\"ms\": [{\"c\": 1.5}, {\"c\": 2}]}", "6 3.5 1 3 b", NULL},
    {"{{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }} {{ 'a b  c'|wordcount }} [{{ 'ab'|center(6) }}]", NULL,
     "[3, 2, 1] cba 3 [  ab  ]", NULL},
    {"{{ 'hello world foo bar'|truncate(9, leeway=0) }} {{ 'abcdefghij'|truncate(5, true, '', 0) }}", NULL,
     "hello... abcde", NULL},
    {"{{ [1]|map('tojson')|tojson }}", NULL, NULL, "not JSON serializable"},
    {"{% for g in ms|groupby('r') %}{{ g.grouper }}{{ g.list|length }}{% endfor %}"
     "{% for k, v in ms|groupby('r') %}{{ k }}{% endfor %}",
     "{\"ms\": [{\"r\": \"u\"}, {\"r\": \"a\"}, {\"r\": \"U\"}]}", "a1u2au", NULL},
    {"{{ [[1], [2, 3]]|sum(start=[]) }} {{ 12345|round(-2) }} {{ 250|round(-2) }} {{ ['a']|sum(start='') }}",
     NULL, NULL, "can't sum strings"},
    {"{{ [[1], [2, 3]]|sum(start=[]) }} {{ 12345|round(-2) }} {{ 250|round(-2) }}", NULL,
     "[1, 2, 3] 12300 200", NULL},
    {"{{ '%s=%d, %.2f %5s|%-3s|%03d %x %r %%'|format('a', 3.9, 2.345, 'r', 'l', 7, 255, 'q') }}", NULL,
     "a=3, 2.35     r|l  |007 ff 'q' %", NULL},
    {"{{ '%s and %s' % ('x', 1) }} {{ '%d%%' % 50 }} {{ '%(a)s-%(b)s' % {'a': 1, 'b': 2} }}", NULL,
     "x and 1 50% 1-2", NULL},
    {"{{ '%d' % 'x' }}", NULL, NULL, "TypeError"},
    {"{{ '%s %s' % ('x',) }}", NULL, NULL, "not enough arguments"},
    {"{{ \"they're here-now (ok)\"|title }} {{ \"they're\".title() }}", NULL, "They're Here-Now (Ok) They'Re",
     NULL},
    {"{{ 'a-b c_d, e'|wordcount }}", NULL, "4", NULL},
    {"{{ [1, 2]|reverse|tojson }}", NULL, NULL, "not JSON serializable"},
    {"{{ {'a': 1}|items|length }}", NULL, NULL, "no len"},
    {"{{ {'k': '\xc3\xa9\xf0\x9f\x98\x80'}|tojson(ensure_ascii=true) }}", NULL,
     "{\"k\": \"\\u00e9\\ud83d\\ude00\"}", NULL},
    {"{{ d|attr('k') }}|{{ d|attr('items') is callable }}", "{\"d\": {\"k\": 1}}", "|True", NULL},
    {"{{ x|nosuchfilter }}", NULL, NULL, "no filter named"},
    {"{% if false %}{{ x|nosuchfilter }}{% endif %}ok", NULL, "ok", NULL},
};

static const tcase tests_[] = {
    {"{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}{{ x is not none }}",
     "{\"x\": 1, \"n\": null}", "TrueFalseTrueTrueTrue", NULL},
    {"{{ 's' is string }}{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1 is integer }}{{ 1.5 "
     "is float }}",
     NULL, "TrueTrueTrueFalseTrueTrue", NULL},
    {"{{ {} is mapping }}{{ [] is mapping }}{{ 's' is iterable }}{{ 1 is iterable }}{{ [] is sequence }}"
     "{{ namespace() is mapping }}",
     NULL, "TrueFalseTrueFalseTrueFalse", NULL},
    {"{{ true is boolean }}{{ 1 is boolean }}{{ true is true }}{{ false is false }}{{ 1 is true }}", NULL,
     "TrueFalseTrueTrueFalse", NULL},
    {"{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}", NULL,
     "TrueFalseTrueFalse", NULL},
    {"{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is gt 1 }}{{ 2 is le 2 }}{{ 1 is "
     "ge 2 }}",
     NULL, "TrueFalseTrueTrueTrueTrueFalse", NULL},
    {"{{ 1 is in [1] }}{{ 'a' is in 'bc' }}{{ none is sameas none }}{{ x is sameas x }}{{ range is callable "
     "}}",
     "{\"x\": [1]}", "TrueFalseTrueTrueTrue", NULL},
    {"{{ 2.5 is even }}{{ 4.0 is even }}{{ 7.5 is divisibleby 2.5 }}{{ {'k': 1} is lower }}{{ [] is upper }}"
     "{{ ({}|max) is callable }}",
     NULL, "FalseTrueTrueTrueFalseTrue", NULL},
    {"{{ none|safe ~ 1|safe }} {{ false|select|list }} {{ 0|map('string')|list }}", NULL, "None1 [] []",
     NULL},
    {"{{ x is nosuchtest }}", NULL, NULL, "no test named"},
};

static const tcase methods[] = {
    {"[{{ '  a  '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '  a'.lstrip() }}][{{ 'a\\n'.rstrip() }}][{{ "
     "'ab'.rstrip('b') }}]",
     NULL, "[a][a][a][a][a]", NULL},
    {"{{ 'a,b,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ ' a  b '.split() }} {{ 'a,b,c'.rsplit(',', 1) "
     "}}",
     NULL, "['a', 'b', 'c'] ['a', 'b,c'] ['a', 'b'] ['a,b', 'c']", NULL},
    {"{{ 'abc'.startswith('bc', 1) }}{{ 'abc'.endswith('b', 0, -1) }} {{ ' a b  '.split(None, 1) }}"
     "{{ '  a b '.rsplit(None, 1) }}",
     NULL, "TrueTrue ['a', 'b  ']['  a', 'b']", NULL},
    {"{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abc'.startswith(('x',)) }}", NULL,
     "TrueTrueFalse", NULL},
    {"{{ 'abca'.find('c') }}{{ 'abc'.find('z') }}{{ 'abca'.count('a') }}{{ 'x'.upper() }}{{ "
     "'aXb'.replace('X', '-') }}",
     NULL, "2-12Xa-b", NULL},
    {"{{ '-'.join(['a', 'b']) }} {{ '{} and {}'.format(1, 'x') }} {{ '{0}{0}'.format('z') }} {{ 'a "
     "b'.title() }}",
     NULL, "a-b 1 and x zz A B", NULL},
    {"{{ '{:.2f}|{:>5}|{:<4}|{:^7}|{:*^5}|{:05d}|{:+d}|{:#x}|{:b}|{:.1%}|{!r}|{:.3}'.format(3.14159, 'ab', "
     "3, 'mid', "
     "'x', 42, 5, 255, 5, 0.256, 'q', 2.0) }}",
     NULL, "3.14|   ab|3   |  mid  |**x**|00042|+5|0xff|101|25.6%|'q'|2.0", NULL},
    {"{{ '{:d}'.format(1.5) }}", NULL, NULL, "Unknown format code"},
    {"{{ '%d'|format(1e300) }}|{{ 1e300|int }}", NULL, "9223372036854775807|0", NULL},
    {"{{ '12'.isdigit() }}{{ 'a1'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ 'ab'.islower() }}",
     NULL, "TrueFalseTrueTrueTrue", NULL},
    {"{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('z') }}", "{\"d\": {\"a\": 1}}",
     "['a'] [1] [('a', 1)] None", NULL},
    {"{{ [1, 2, 1].index(2) }}{{ [1, 2, 1].count(1) }}", NULL, "12", NULL},
    {"{{ 'ab'.center(5, '*') }}|{{ 'abc'.ljust(5, '-') }}|{{ 'abc'.rjust(5) }}|{{ '-42'.zfill(5) }}", NULL,
     "**ab*|abc--|  abc|-0042", NULL},
    {"{{ 'stra\xc3\x9f"
     "e'.upper() }} {{ '\xce\xa3\xce\x91\xce\xa3'.lower() }} {{ '\xef\xac\x81'|upper }}",
     NULL, "STRASSE \xcf\x83\xce\xb1\xcf\x82 FI", NULL},
    {"{% set l = [1, 2, 3] %}{{ l.pop() }}", NULL, NULL, "SecurityError"},
    {"{% set a, b = 'xy' %}{{ b }}{{ a }}", NULL, "yx", NULL},
};

static const tcase undefined_and_sandbox[] = {
    {"[{{ nope }}]", NULL, "[]", NULL},
    {"{{ nope.attr }}", NULL, NULL, "'nope' is undefined"},
    {"{{ nope + 1 }}", NULL, NULL, "UndefinedError"},
    {"{{ nope() }}", NULL, NULL, "undefined"},
    {"[{{ d.missing }}]", "{\"d\": {}}", "[]", NULL},
    {"{{ d.missing.x }}", "{\"d\": {}}", NULL, "has no attribute 'missing'"},
    {"{{ nope == nope }} {{ nope is none }} {{ 'x' in nope }}", NULL, "True False False", NULL},
    {"{{ [].append(1) }}", NULL, NULL, "SecurityError"},
    {"{% set l = [] %}{% set _ = l.append(1) %}", NULL, NULL, "unsafe"},
    {"{{ {}.update({'a': 1}) }}", NULL, NULL, "SecurityError"},
    {"{{ {'a': 1}.pop('a') }}", NULL, NULL, "SecurityError"},
    {"{{ [1].sort() }}", NULL, NULL, "SecurityError"},
    {"{{ ''.__class__ }}", NULL, "", NULL},
    {"{{ ''.__class__() }}", NULL, NULL, "SecurityError"},
    {"{% set d = {} %}{% set d.x = 1 %}", NULL, NULL, "non-namespace"},
    {"{{ range(1000000)|length }}", NULL, NULL, "MAX_RANGE"},
};

static void test_limits(void) {
    cera_template_limits small = {
        .max_steps = 10000, .max_depth = 20, .max_output = 1000, .max_memory = 1 << 20};
    static const tcase hostile[] = {
        {"{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", NULL, NULL, "steps"},
        {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, NULL, "recursion limit"},
        {"{% set s = 'x' * 100000 %}{% for i in range(1000) %}{% if 'y' in s or s.count('y') %}{% endif %}{% "
         "endfor %}",
         NULL, NULL, "steps"},
        {"{% set l = range(10000)|list %}{% for i in range(1000) %}{% if l.index(9999) %}{% endif %}{% "
         "endfor %}",
         NULL, NULL, "steps"},
        {"{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", NULL, NULL, "output"},
        {"{{ 'a' * 100000000 }}", NULL, NULL, "memory"},
        {"{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}", NULL, NULL, "recursion limit"},
        {"{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
         NULL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) run_case(&hostile[i], &small);

    /* deep nesting fails to compile with an error, not a stack overflow */
    size_t n = 100000;
    char *deep = malloc(2 * n + 32);
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < n; i++) deep[3 + i] = '(';
    deep[3 + n] = '1';
    for (size_t i = 0; i < n; i++) deep[4 + n + i] = ')';
    strcpy(deep + 4 + 2 * n, " }}");
    tcase c = {deep, NULL, NULL, "nested too deeply"};
    run_case(&c, NULL);
    /* long left-deep chains (filters, operators) are bounded at render time */
    strcpy(deep, "{{ 'x'");
    for (size_t i = 0; i < 5000; i++) strcat(deep + 6 + 5 * i, "|trim");
    strcat(deep, " }}");
    tcase c3 = {deep, NULL, NULL, "nested too deeply"};
    run_case(&c3, NULL);
    strcpy(deep, "{{ 1");
    for (size_t i = 0; i < 5000; i++) strcat(deep + 4 + 2 * i, "+1");
    strcat(deep, " }}");
    tcase c4 = {deep, NULL, NULL, "nested too deeply"};
    run_case(&c4, NULL);
    /* a recursive macro inside nested blocks: the depth limits stop it */
    strcpy(deep, "{% macro f() %}");
    for (size_t i = 0; i < 90; i++) strcat(deep, "{% if 1 %}");
    strcat(deep, "{{ f() }}");
    for (size_t i = 0; i < 90; i++) strcat(deep, "{% endif %}");
    strcat(deep, "{% endmacro %}{{ f() }}");
    tcase c5 = {deep, NULL, NULL, "too deeply"};
    run_case(&c5, NULL);
    strcpy(deep, "");
    for (size_t i = 0; i < 2000; i++) strcat(deep, "{% if 1 %}");
    tcase c2 = {deep, NULL, NULL, "nested too deeply"};
    run_case(&c2, NULL);
    free(deep);
}

#define RUN(table)                                                                                           \
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) run_case(&table[i], NULL)

int main(void) {
    RUN(whitespace);
    RUN(expressions);
    RUN(loops);
    RUN(statements);
    RUN(filters);
    RUN(tests_);
    RUN(methods);
    RUN(undefined_and_sandbox);
    test_limits();
    return test_finish();
}
