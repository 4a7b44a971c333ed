#!/usr/bin/env python3
"""load.py URL MODEL [--streams 1,8,32,64] [--requests-per-stream 2] [--lengths sharegpt|fixed]
                     [--max-tokens 64] [--shared-prefix 1000] [--seed 1] [--client raw|openai] [--json]

An asyncio load generator over the OpenAI API (streamed chat completions), for any
OpenAI-compatible server (cera serve, llama-server), through a small asyncio HTTP client
(the default: the generator shares the CPU with the server on a small machine) or the
official openai client (--client openai):

- Levels: at each level that many concurrent streams each send their share of streamed chat
  requests one after the other (temperature 0, ignore_eos, so every answer has the length
  asked). Reported per level: output tokens/s (all streams together, over the wall time),
  time to first token (from sending to the first content chunk: queueing and prefill
  included) and inter-token latency (the gaps between a stream's content chunks), p50 and p99.
- Lengths: `fixed` gives every request a short question and --max-tokens output tokens;
  `sharegpt` draws synthetic ShareGPT-like lengths from a seeded RNG: prompt and output
  lengths log-normal (ShareGPT's shape: medians about a third of the means, long tails),
  scaled to --max-tokens (output median max_tokens/2, at most 2 x max_tokens; prompt median
  about 3 x that in words, at most 600 words), so that both servers see the same requests.
- --shared-prefix N: the prefix-reuse test after the levels: a system prompt of about N
  tokens (counted with the server's /tokenize) shared by 1 + 8 requests sent one at a
  time, each with its own question; reports the first request's TTFT and the later ones'
  (median), and their ratio.
"""
import argparse
import asyncio
import http.client
import json
import math
import random
import time
import urllib.parse

PROMPTS = [
    "Write a short story about a robot learning to paint.",
    "Explain how a bicycle stays upright.",
    "List some ideas for a rainy afternoon.",
    "What makes a good cup of tea?",
    "Describe the life cycle of a butterfly.",
    "Give advice to someone starting to learn the piano.",
    "Why is the sky blue? Explain it to a child.",
    "Tell me about the history of the printing press.",
]

WORDS = ("the of and to in is was for on that with as by at from his her they this which have had not "
         "are but be one all were when there can an your will more out would so up what their about "
         "time people year way day man thing woman life child world school state family student group "
         "country problem hand part place case week company system program question work government "
         "number night point home water room mother area money story fact month lot right study book "
         "eye job word business issue side kind head house service friend father power hour game line "
         "end member law car city community name president team minute idea kid body information back "
         "parent face others level office door health person art war history party result change "
         "morning reason research girl guy moment air teacher force education river garden machine").split()


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_requests(kind, n, max_tokens, seed):
    """n (prompt, output tokens) pairs, the same for every server given the seed."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if kind == "fixed":
            out.append((PROMPTS[i % len(PROMPTS)], max_tokens))
            continue
        med_out = max_tokens / 2
        o = int(min(2 * max_tokens, max(4, rng.lognormvariate(math.log(med_out), 0.8))))
        w = int(min(600, max(4, rng.lognormvariate(math.log(3 * med_out), 0.9))))
        out.append(("Read this and answer briefly: " + words(rng, w) + ". " + PROMPTS[i % len(PROMPTS)], o))
    return out


class RawClient:
    """A small asyncio HTTP/1.1 client for the streamed chat endpoint (chunked SSE), lighter
    than the openai client: on a machine of few cores the load generator shares the CPU with
    the server it measures. One connection per request."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port or 80

    async def stream(self, body):
        """Yields each event's JSON object."""
        r, w = await asyncio.open_connection(self.host, self.port)
        data = json.dumps(body).encode()
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (self.host.encode(), len(data)) + data)
        await w.drain()
        status = await r.readline()
        if b" 200 " not in status:
            raise RuntimeError("HTTP %r: %r" % (status, await r.read(2000)))
        chunked = False
        while True:
            h = await r.readline()
            if h in (b"\r\n", b""):
                break
            if h.lower().startswith(b"transfer-encoding:") and b"chunked" in h.lower():
                chunked = True
        buf = b""
        try:
            while True:
                if chunked:
                    size = int((await r.readline()).split(b";")[0], 16)
                    if size == 0:
                        break
                    part = await r.readexactly(size + 2)
                    buf += part[:-2]
                else:
                    part = await r.read(65536)
                    if not part:
                        break
                    buf += part
                while b"\n\n" in buf:
                    ev, buf = buf.split(b"\n\n", 1)
                    for line in ev.split(b"\n"):
                        if line.startswith(b"data: "):
                            if line[6:].strip() == b"[DONE]":
                                return
                            yield json.loads(line[6:])
        finally:
            w.close()


async def one_raw(cl, model, messages, max_tokens, ttft, gaps):
    t0 = time.perf_counter()
    last = None
    n = 0
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    async for ch in cl.stream(body):
        if ch.get("usage"):
            n = ch["usage"]["completion_tokens"]
        for c in ch.get("choices") or []:
            if (c.get("delta") or {}).get("content"):
                now = time.perf_counter()
                if last is None:
                    ttft.append(now - t0)
                else:
                    gaps.append(now - last)
                last = now
    return n


async def one(cl, model, messages, max_tokens, ttft, gaps):
    if isinstance(cl, RawClient):
        return await one_raw(cl, model, messages, max_tokens, ttft, gaps)
    t0 = time.perf_counter()
    last = None
    n = 0
    s = await cl.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens, temperature=0,
                                         stream=True, stream_options={"include_usage": True},
                                         extra_body={"ignore_eos": True})
    async for ch in s:
        if ch.usage:
            n = ch.usage.completion_tokens
        if ch.choices and ch.choices[0].delta.content:
            now = time.perf_counter()
            if last is None:
                ttft.append(now - t0)
            else:
                gaps.append(now - last)
            last = now
    return n


def client(url, kind):
    if kind == "raw":
        return RawClient(url)
    import openai
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=1200)


async def close(cl):
    if not isinstance(cl, RawClient):
        await cl.close()


async def level(url, model, streams, per_stream, reqs, kind):
    cl = client(url, kind)
    ttft, gaps = [], []

    async def worker(w):
        total = 0
        for r in range(per_stream):
            prompt, n = reqs[(w * per_stream + r) % len(reqs)]
            total += await one(cl, model, [{"role": "user", "content": prompt}], n, ttft, gaps)
        return total
    t0 = time.perf_counter()
    tokens = sum(await asyncio.gather(*(worker(w) for w in range(streams))))
    wall = time.perf_counter() - t0
    await close(cl)
    return {"streams": streams, "requests": streams * per_stream, "tokens": tokens, "wall_s": wall,
            "tok_s": tokens / wall, "ttft_p50_ms": 1e3 * pct(ttft, 50), "ttft_p99_ms": 1e3 * pct(ttft, 99),
            "itl_p50_ms": 1e3 * pct(gaps, 50), "itl_p99_ms": 1e3 * pct(gaps, 99)}


def n_tokens(url, text):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("POST", "/tokenize", json.dumps({"content": text}), {"Content-Type": "application/json"})
    r = json.loads(c.getresponse().read())
    c.close()
    return len(r["tokens"])


async def shared_prefix(url, model, target, seed, kind):
    rng = random.Random(seed + 1000)
    n = target
    system = words(rng, n)
    for _ in range(4):  # words to tokens: a few corrections
        t = n_tokens(url, system)
        if abs(t - target) <= target // 50:
            break
        n = max(1, int(n * target / t))
        system = words(random.Random(seed + 1000), n)
    t = n_tokens(url, system)
    cl = client(url, kind)
    times = []
    for i in range(9):
        ttft = []
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]
        await one(cl, model, msgs, 8, ttft, [])
        times.append(ttft[0])
    await close(cl)
    later = sorted(times[1:])[len(times[1:]) // 2]
    return {"system_tokens": t, "ttft_first_ms": 1e3 * times[0], "ttft_later_p50_ms": 1e3 * later,
            "ratio": later / times[0], "ttft_all_ms": [round(1e3 * x, 1) for x in times]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--lengths", choices=["sharegpt", "fixed"], default="sharegpt")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--shared-prefix", type=int, default=0, help="tokens of the shared system prompt (0: no test)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--client", choices=["raw", "openai"], default="raw",
                    help="raw: a small asyncio HTTP client (light on the CPU); openai: the official client")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    levels = [int(s) for s in a.streams.split(",") if s]
    reqs = make_requests(a.lengths, max(levels) * a.requests_per_stream, a.max_tokens, a.seed)
    rows = [asyncio.run(level(a.url, a.model, s, a.requests_per_stream, reqs, a.client)) for s in levels]
    pre = asyncio.run(shared_prefix(a.url, a.model, a.shared_prefix, a.seed, a.client)) if a.shared_prefix else None
    if a.json:
        print(json.dumps({"levels": rows, "shared_prefix": pre}))
        return
    print("| streams | requests | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |")
    print("|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print("| %d | %d | %.1f | %.0f | %.0f | %.1f | %.1f |" % (r["streams"], r["requests"], r["tok_s"],
              r["ttft_p50_ms"], r["ttft_p99_ms"], r["itl_p50_ms"], r["itl_p99_ms"]))
    if pre:
        print("\nshared system prompt of %d tokens: TTFT first %.0f ms, later p50 %.0f ms (%.0f %% of the first)"
              % (pre["system_tokens"], pre["ttft_first_ms"], pre["ttft_later_p50_ms"], 100 * pre["ratio"]))
        print("TTFT of the 9 requests (ms):", pre["ttft_all_ms"])


if __name__ == "__main__":
    main()
