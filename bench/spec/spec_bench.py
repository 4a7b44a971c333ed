#!/usr/bin/env python3
"""spec_bench.py — speculative decoding's speed, cera serve next to llama-server.

usage: spec_bench.py [--runs 3] [--tokens 200] [--json OUT] NAME=COMMAND ...

Each NAME=COMMAND is a server command line (cera serve ... or llama-server ...) without its
port; the script adds `--port P`, waits for /health, and sends each prompt (the code-editing
prompt of bench/spec/code.txt, and a free-text one) --runs times, one request at a time, as a
greedy OpenAI completion (/v1/completions) of --tokens tokens with the end-of-generation token
ignored. Both servers answer with llama-server's "timings" object; the script reports, per
prompt, the median of predicted_per_second (the decode rate from the first generated token
on) and the drafts drawn and kept (draft_n, draft_n_accepted) of the runs, and whether the runs
gave one text.
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


def complete(port, prompt, n):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}
    c, r = request(port, "/v1/completions", body)
    d = json.loads(r.read())
    c.close()
    t = d["timings"]
    return t["predicted_per_second"], d["choices"][0]["text"], t.get("draft_n", 0), t.get("draft_n_accepted", 0)


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
        for name, prompt in PROMPTS.items():
            rates, texts, drafts, kept = [], set(), [], []
            for _ in range(runs):
                rate, text, d, k = complete(port, prompt, n)
                rates.append(rate)
                texts.add(text)
                drafts.append(d)
                kept.append(k)
            out[name] = {"tok_s": statistics.median(rates), "runs": rates, "drafted": statistics.median(drafts),
                         "kept": statistics.median(kept), "text": texts.pop() if len(texts) == 1 else None}
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
