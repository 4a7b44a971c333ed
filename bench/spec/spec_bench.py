#!/usr/bin/env python3
"""spec_bench.py — speculative decoding's speed, cera serve next to llama-server.

usage: spec_bench.py [--runs 3] [--tokens 200] [--json OUT] -- NAME=COMMAND ...

Each NAME=COMMAND is a server command line (cera serve ... or llama-server ...) without its
port; the script adds `--port P`, waits for /health, and sends each prompt (the code-editing
prompt of bench/spec/code.txt, and a free-text one) --runs times, one request at a time,
greedy, as a streamed OpenAI completion of --tokens tokens with the end-of-generation token
ignored. It reports the decode rate the client sees, (completion tokens - 1) / (time from the
first streamed piece to the last), the median of the runs, and the drafts drawn and kept as
the server's own counters give them: cera's /metrics (cera_draft_tokens_total,
cera_draft_tokens_accepted_total), llama-server's `timings` (draft_n, draft_n_accepted) of a
non-streamed copy of the last run. Both servers get the same text, sampling and tokens.
"""
import argparse
import http.client
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = {
    "code": open(os.path.join(HERE, "code.txt")).read(),
    "free": "The history of the city of Lyon begins",
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def request(port, path, body=None, method="POST", timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return c, r


def stream_rate(port, prompt, n):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    c, r = request(port, "/v1/completions", body)
    t_first = t_last = None
    tokens = None
    text = []
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        d = json.loads(line[6:])
        if d.get("usage"):
            tokens = d["usage"]["completion_tokens"]
        piece = "".join(ch.get("text") or "" for ch in d.get("choices", []))
        if piece:
            now = time.perf_counter()
            t_first = t_first or now
            t_last = now
            text.append(piece)
    c.close()
    if tokens is None or t_first is None or t_last <= t_first:
        raise RuntimeError("no usage or pieces in the stream")
    return (tokens - 1) / (t_last - t_first), "".join(text), tokens


def metric(port, name):
    c, r = request(port, "/metrics", method="GET")
    data = r.read().decode()
    c.close()
    for line in data.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def llama_drafts(port, prompt, n):
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True}
    c, r = request(port, "/completion", body)
    d = json.loads(r.read())
    c.close()
    t = d.get("timings", {})
    return t.get("draft_n", 0), t.get("draft_n_accepted", 0)


def run_server(cmd, runs, n):
    port = free_port()
    p = subprocess.Popen(shlex.split(cmd) + ["--port", str(port)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                c, r = request(port, "/health", method="GET", timeout=2)
                ok = r.status == 200
                c.close()
                if ok:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError("the server did not start: " + cmd)
        out = {}
        is_cera = metric(port, "cera_draft_tokens_total") is not None
        for name, prompt in PROMPTS.items():
            d0 = metric(port, "cera_draft_tokens_total") if is_cera else 0
            k0 = metric(port, "cera_draft_tokens_accepted_total") if is_cera else 0
            rates, texts = [], set()
            for _ in range(runs):
                rate, text, _ = stream_rate(port, prompt, n)
                rates.append(rate)
                texts.add(text)
            if is_cera:
                drafted = (metric(port, "cera_draft_tokens_total") - d0) / runs
                kept = (metric(port, "cera_draft_tokens_accepted_total") - k0) / runs
            else:
                drafted, kept = llama_drafts(port, prompt, n)
            out[name] = {"tok_s": statistics.median(rates), "runs": rates, "drafted": drafted, "kept": kept,
                         "text": texts.pop() if len(texts) == 1 else None}
        return out
    finally:
        p.terminate()
        p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--json")
    ap.add_argument("servers", nargs="+")
    a = ap.parse_args()
    res = {}
    for s in a.servers:
        name, cmd = s.split("=", 1)
        res[name] = run_server(cmd, a.runs, a.tokens)
        for pr, r in res[name].items():
            print("%-28s %-5s %7.1f tok/s  runs %s  drafts %g kept %g" %
                  (name, pr, r["tok_s"], " ".join("%.1f" % x for x in r["runs"]), r["drafted"], r["kept"]),
                  flush=True)
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
