"""Embeddings: `cera embed`'s vectors, pooling, create_embedding's shape, batch_embed."""
import json

import pytest
from conftest import SMOL, cli, need

from cera import Llama, batch_embed


@pytest.fixture(scope="module")
def mean():
    with Llama(need(SMOL), n_ctx=512, n_threads=2, pooling_type=1, verbose=False) as llm:
        yield llm


def test_embed_equals_cera_embed(mean):
    want = json.loads(cli("embed", "-m", SMOL, "-p", "hello world\nthe cat sat", "--pooling", "mean",
                          "--embd-output-format", "array", "-t", "2"))
    got = mean.embed(["hello world", "the cat sat"], normalize=True)
    assert len(got) == 2 and len(got[0]) == mean.n_embd()
    for g, w in zip(got, want):
        assert g == pytest.approx(w, abs=2e-6)


def test_pooling_none_and_shape(smol, mean):
    toks = smol.tokenize(b"hello world")
    rows = smol.embed("hello world")  # SmolLM2 has no pooling_type: one vector per token
    assert len(rows) == len(toks) and len(rows[0]) == smol.n_embd()
    r = mean.create_embedding(["hello world", "the cat sat"])
    assert r["object"] == "list" and [d["index"] for d in r["data"]] == [0, 1]
    assert r["data"][0]["object"] == "embedding" and len(r["data"][0]["embedding"]) == mean.n_embd()
    assert r["usage"]["prompt_tokens"] == len(toks) + len(mean.tokenize(b"the cat sat"))
    n2 = sum(x * x for x in mean.embed("hello world", normalize=True))
    assert n2 == pytest.approx(1.0, abs=1e-5)


def test_batch_embed_equals_sessions(mean):
    e = mean.engine
    texts = [e.tokenize("hello world"), e.tokenize("a much longer text about cats and dogs")]
    with e.session() as a, e.session() as b:
        batch = batch_embed(e, [(a, texts[0]), (b, texts[1])], pooling="mean")
    for t, v in zip(texts, batch):
        with e.session() as s:
            assert s.embed(t, pooling="mean") == v
