#!/usr/bin/env python3
"""disk_ttft.py CERA MODEL [--tokens 500,1500] [--repeat 3] [--threads 2] [--text FILE] [--extra=FLAGS]
                 [--uncached]

Time to first token of `cera serve --cache-dir`: a prompt computed cold against the same system
prompt loaded from the disk tier by a new process. For each system prompt length (tokens of the
text of --text, counted with the server's /tokenize), each repeat:

  cold  a server on an empty folder answers the system prompt with a first question (max_tokens 1,
        temperature 0): the whole prompt is computed; the server is stopped, which leaves the
        timeline's file in the folder (written after the answer, off the request's time);
  disk  a new server on that folder answers the same system prompt with a second question: the
        shared beginning is loaded from the file, the rest computed.

Printed per run: the server's own time from admission to the first token (its --verbose line), the
client's (from sending to the answer: HTTP and queueing included), the prompt and reused tokens,
and for the disk run the load alone (its --verbose line). The best of the repeats is the figure
(the machine may be shared); every run is printed. --extra passes more flags to both servers
(--cache-any: the whole shared beginning reused, whatever its rounding). --uncached drops the
folder's files from the page cache before the disk run (fsync, then posix_fadvise DONTNEED on
each: those files only), so that the load reads the device rather than memory.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import http.client


def start(cera, args):
    p = subprocess.Popen([cera, "serve", "--port", "0"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    if "listening on http://" not in line:
        sys.exit("cera serve did not start: " + line + p.stderr.read())
    host, port = line.split("listening on http://")[1].split()[0].rsplit(":", 1)
    return p, host, int(port)


def stop(p):
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    return err


def post(host, port, path, body):
    c = http.client.HTTPConnection(host, port, timeout=600)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    c.close()
    return data


def system_prompt(cera, model, text, n_tokens):
    """The first words of text that make about n_tokens tokens of the chat's system message."""
    p, host, port = start(cera, ["-m", model, "-c", "8192", "--cache-slots", "0"])
    try:
        words = text.split()
        lo, hi = 1, len(words)
        while lo < hi:  # the most words within n_tokens
            mid = (lo + hi + 1) // 2
            n = len(post(host, port, "/tokenize", {"content": " ".join(words[:mid])})["tokens"])
            lo, hi = (mid, hi) if n <= n_tokens else (lo, mid - 1)
        return " ".join(words[:lo])
    finally:
        stop(p)


def ask(host, port, system, question):
    t0 = time.perf_counter()
    r = post(host, port, "/v1/chat/completions", {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 1, "temperature": 0})
    ms = (time.perf_counter() - t0) * 1e3
    u = r["usage"]
    return ms, u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"]


def server_ms(err, what):
    m = re.findall(what, err)
    return float(m[-1]) if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cera")
    ap.add_argument("model")
    ap.add_argument("--tokens", default="500,1500")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--extra", default="")
    ap.add_argument("--uncached", action="store_true")
    a = ap.parse_args()
    text = open(a.text).read()
    args = ["-m", a.model, "-c", "4096", "-t", a.threads, "--verbose"] + a.extra.split()
    first = r"first token ([0-9.]+) ms after admission"
    loaded = r"loaded from the disk cache in ([0-9.]+) ms"
    for n in [int(x) for x in a.tokens.split(",")]:
        system = system_prompt(a.cera, a.model, text, n)
        best = {}
        for rep in range(a.repeat):
            with tempfile.TemporaryDirectory() as d:
                p, host, port = start(a.cera, args + ["--cache-dir", d])
                cold = ask(host, port, system, "What is this text about?")
                err = stop(p)
                cold_srv = server_ms(err, first)
                for f in os.listdir(d) if a.uncached else []:
                    fd = os.open(os.path.join(d, f), os.O_RDONLY)
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
                p, host, port = start(a.cera, args + ["--cache-dir", d])
                disk = ask(host, port, system, "Who may copy it?")
                err = stop(p)
                disk_srv, load = server_ms(err, first), server_ms(err, loaded)
                files = [f for f in os.listdir(d) if f.endswith(".session")]
                size = sum(os.path.getsize(os.path.join(d, f)) for f in files)
            print("%d-token system prompt, run %d: cold %d tokens: first token %.1f ms (client %.1f); disk %d tokens, "
                  "%d reused: first token %.1f ms (client %.1f), of it the load %.1f ms; folder %.1f MiB" %
                  (n, rep + 1, cold[1], cold_srv, cold[0], disk[1], disk[2], disk_srv, disk[0], load, size / 2**20))
            for k, v in (("cold", cold_srv), ("disk", disk_srv), ("load", load), ("cold_client", cold[0]),
                         ("disk_client", disk[0])):
                best[k] = min(best.get(k, v), v)
            best["prompt"], best["reused"] = cold[1], disk[2]
        print("best of %d: %d-token prompt cold %.1f ms, disk hit %.1f ms (%d reused; load %.1f ms): %.1fx; "
              "client %.1f vs %.1f ms" % (a.repeat, best["prompt"], best["cold"], best["disk"], best["reused"],
                                           best["load"], best["cold"] / best["disk"], best["cold_client"],
                                           best["disk_client"]))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
