#!/usr/bin/env python3
"""load.py URL MODEL [--streams 1,8,32] [--requests-per-stream 3] [--max-tokens 64] [--json]

An asyncio load generator over the OpenAI API (the official openai client): at each level,
that many concurrent streams each send their share of streamed chat requests one after the
other (ignore_eos, so every answer is --max-tokens long). Reports per level: output tokens/s
(all streams together, over the wall time), time to first token and inter-token gaps (p50,
p99). Works against any OpenAI-compatible server (cera serve, llama-server)."""
import argparse
import asyncio
import json
import statistics
import time

import openai

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


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


async def one(cl, model, prompt, max_tokens, ttft, gaps):
    t0 = time.perf_counter()
    last = None
    n = 0
    s = await cl.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                         max_tokens=max_tokens, temperature=0, stream=True,
                                         stream_options={"include_usage": True},
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


async def level(url, model, streams, per_stream, max_tokens):
    cl = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    ttft, gaps = [], []

    async def worker(w):
        total = 0
        for r in range(per_stream):
            total += await one(cl, model, PROMPTS[(w + r) % len(PROMPTS)], max_tokens, ttft, gaps)
        return total
    t0 = time.perf_counter()
    tokens = sum(await asyncio.gather(*(worker(w) for w in range(streams))))
    wall = time.perf_counter() - t0
    await cl.close()
    return {"streams": streams, "requests": streams * per_stream, "tokens": tokens, "wall_s": wall,
            "tok_s": tokens / wall, "ttft_p50_ms": 1e3 * pct(ttft, 50), "ttft_p99_ms": 1e3 * pct(ttft, 99),
            "itl_p50_ms": 1e3 * pct(gaps, 50), "itl_p99_ms": 1e3 * pct(gaps, 99)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--streams", default="1,8,32")
    ap.add_argument("--requests-per-stream", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = [asyncio.run(level(a.url, a.model, int(s), a.requests_per_stream, a.max_tokens))
            for s in a.streams.split(",")]
    if a.json:
        print(json.dumps(rows))
        return
    print("| streams | requests | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |")
    print("|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print("| %d | %d | %.1f | %.0f | %.0f | %.1f | %.1f |" % (r["streams"], r["requests"], r["tok_s"],
              r["ttft_p50_ms"], r["ttft_p99_ms"], r["itl_p50_ms"], r["itl_p99_ms"]))


if __name__ == "__main__":
    main()
