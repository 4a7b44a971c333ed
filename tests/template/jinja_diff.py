#!/usr/bin/env python3
"""jinja_diff.py CERA_EXE SHARED_DIR — cera's template engine against the real Jinja2.

Where Python's jinja2 is installed, renders (1) every golden chat template on conversations
the goldens do not have (multi-turn, list content, reasoning_content, several tool calls,
two system messages, an empty message, an assistant-first chat; with and without tools and
the generation prompt) and (2) generated snippets of whitespace control (trim_blocks,
lstrip_blocks, `-`/`+` on every tag kind, comments, raw), both with Jinja2 set up as
transformers does and with `cera template`, and fails on any difference: other text, or
one failing where the other does not, or another raise_exception message.
Exits 77 (CTest's skip) when jinja2 is not importable.
"""
import copy
import datetime
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    from jinja2 import nodes
    from jinja2.exceptions import TemplateError
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja_diff: no jinja2; skipped")
    sys.exit(77)


class Generation(Extension):
    """transformers' {% generation %}: renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols, Generation])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(msg):
        raise TemplateError(msg)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2026, 1, 15).strftime(fmt)
    return env


TOOL = {"type": "function", "function": {"name": "search", "description": "Search the web.", "parameters": {
    "type": "object", "properties": {"q": {"type": "string", "description": "query"},
                                     "n": {"type": "integer", "default": 3},
                                     "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["q"]}}}
CONVERSATIONS = [
    [{"role": "user", "content": "A"}, {"role": "assistant", "content": "B"}, {"role": "user", "content": "C"},
     {"role": "assistant", "content": "D"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image"}]}],
    [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>hmm</think>answer"},
     {"role": "user", "content": "again"}],
    [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ans", "reasoning_content": "thinking..."},
     {"role": "user", "content": "more"}],
    [{"role": "user", "content": "weather?"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "c1", "type": "function", "function": {"name": "search", "arguments": {"q": "w"}}},
         {"id": "c2", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"x\"}"}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
     {"role": "tool", "tool_call_id": "c2", "content": "{\"t\": 3}"},
     {"role": "assistant", "content": "It is sunny."}],
    [{"role": "system", "content": "sys"}, {"role": "system", "content": "sys2"}, {"role": "user", "content": "u"}],
    [{"role": "user", "content": ""}],
    [{"role": "assistant", "content": "first"}],
]


def whitespace_snippets(n, seed=7):
    rng = random.Random(seed)
    ws = ["", " ", "  ", "\n", "\n  ", "  \n", "\t", "\n\n", " \n \n "]

    def sign(kind):
        return rng.choice(["", "-"] if kind == "{{" else ["", "-", "+"])

    def piece(d=0):
        r = rng.random()
        out = rng.choice(ws) + rng.choice(["a", "b", ""]) + rng.choice(ws)
        if r < 0.25:
            out += "{{" + sign("{{") + " 'x' " + sign("{{") + "}}"
        elif r < 0.45 and d < 3:
            out += "{%" + sign("{%") + " if true " + sign("{%") + "%}" + piece(d + 1) + "{%" + sign("{%") + " endif " + sign("{%") + "%}"
        elif r < 0.6 and d < 3:
            out += "{%" + sign("{%") + " for i in [1, 2] " + sign("{%") + "%}" + piece(d + 1) + "{%" + sign("{%") + " endfor " + sign("{%") + "%}"
        elif r < 0.75:
            out += "{#" + sign("{#") + " c " + sign("{#") + "#}"
        elif r < 0.85:
            out += "{%" + sign("{%") + " set z = 1 " + sign("{%") + "%}"
        elif r < 0.9:
            out += "{% raw %}" + rng.choice(ws) + "{{r}}" + rng.choice(ws) + "{%" + rng.choice(["", "-"]) + " endraw %}"
        return out + rng.choice(ws)

    return ["".join(piece() for _ in range(rng.randint(1, 4))) for _ in range(n)]


def main():
    cera, shared = sys.argv[1], sys.argv[2]
    env = make_env()
    tmp = tempfile.mkdtemp(prefix="jinja_diff.")
    case_path, tmpl_path = os.path.join(tmp, "case.json"), os.path.join(tmp, "t.jinja")
    jobs = []  # (label, template path, case)
    for d in sorted(glob.glob(os.path.join(shared, "golden/templates/*/"))):
        first = json.load(open(sorted(glob.glob(d + "case*.json"))[0]))
        for ci, msgs in enumerate(CONVERSATIONS):
            for tools in (None, [TOOL]):
                for agp in (True, False):
                    jobs.append((f"{os.path.basename(d.rstrip('/'))} conversation {ci} tools={tools is not None} "
                                 f"generation_prompt={agp}", d + "template.jinja",
                                 {"messages": msgs, "tools": tools, "add_generation_prompt": agp,
                                  "bos_token": first["bos_token"], "eos_token": first["eos_token"],
                                  "extra": first.get("extra", {})}))
    snippets = whitespace_snippets(300)
    plain = {"messages": [], "tools": None, "add_generation_prompt": False, "bos_token": "<s>", "eos_token": "</s>",
             "extra": {}}
    for i, s in enumerate(snippets):
        jobs.append((f"whitespace snippet {i}: {s!r}", s, plain))
    bad = 0
    compiled = {}
    for label, tmpl, case in jobs:
        is_file = tmpl.endswith(".jinja") and os.path.exists(tmpl)
        src = open(tmpl, encoding="utf-8").read() if is_file else tmpl
        if not is_file:
            with open(tmpl_path, "w", encoding="utf-8") as f:
                f.write(src)
        try:
            if src not in compiled:
                compiled[src] = env.from_string(src)
            want = compiled[src].render(
                messages=copy.deepcopy(case["messages"]), tools=copy.deepcopy(case["tools"]), documents=None,
                add_generation_prompt=case["add_generation_prompt"], bos_token=case["bos_token"],
                eos_token=case["eos_token"], **copy.deepcopy(case["extra"]))
            raised = None
        except TemplateError as e:
            want, raised = None, (str(e) if type(e) is TemplateError else None)
        except Exception:
            want, raised = None, None
        with open(case_path, "w", encoding="utf-8") as f:
            json.dump(case, f)
        p = subprocess.run([cera, "template", "--template", tmpl if is_file else tmpl_path, "--case", case_path],
                           capture_output=True)
        got = p.stdout.decode("utf-8", "replace") if p.returncode == 0 else None
        err = p.stderr.decode("utf-8", "replace").rstrip("\n")
        if want is not None:
            ok = got == want
        else:
            ok = got is None and (raised is None or err == raised)
        if not ok:
            bad += 1
            print(f"DIFF {label}\n  jinja2: {want!r} {raised or ''}\n  cera:   {got!r} {err if got is None else ''}")
    print(f"jinja_diff: {len(jobs) - bad} of {len(jobs)} renders agree with Jinja2")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
