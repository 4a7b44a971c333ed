"""Completions: greedy equals `cera run --temp 0` token for token, streaming equals the whole
answer, stop strings, logprobs, seeds, echo, tokenize/detokenize, reset, saved states, LoRA."""
import math
import re

import pytest
from conftest import LORA_A, LORA_B, SMOL, STORIES, cli, need

from cera import CeraError, Llama

PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went to the park. They"]


def run_ids(model, prompt, n, *extra):
    out = cli("run", "-m", model, "-p", prompt, "--temp", "0", "-n", str(n), "-c", "256", "-t", "2", "--ids", *extra)
    return [int(x) for x in out.split()]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_equals_cera_run(stories, prompt):
    want = run_ids(STORIES, prompt, 40)
    r = stories.create_completion(prompt, max_tokens=40, temperature=0)
    # token for token: the session's timeline holds the prompt and all but the last generated
    # token (that one stays pending, unevaluated, as cera_generate leaves it), and the logprobs
    # entries name every generated token
    n_prompt = r["usage"]["prompt_tokens"]
    assert stories._session.tokens[n_prompt:] == want[:-1]
    assert r["usage"]["completion_tokens"] == len(want)
    assert r["choices"][0]["text"] == stories.detokenize(want).decode()
    lp = stories.create_completion(prompt, max_tokens=40, temperature=0, logprobs=0)["choices"][0]["logprobs"]
    assert lp["tokens"] == [stories.detokenize([t]).decode() for t in want]
    # and cera's own layer: Session.generate's tokens
    with stories.engine.session(temp=0) as s:
        assert s.generate(stories.tokenize(prompt.encode(), special=True), max_tokens=40).tokens == want


def test_greedy_equals_cera_run_smollm2(smol):
    prompt = "The three primary colors are"
    want = run_ids(SMOL, prompt, 32)
    r = smol(prompt, max_tokens=32, temperature=0)
    assert r["choices"][0]["text"] == smol.detokenize(want).decode()
    assert r["usage"]["completion_tokens"] == len(want)


def test_greedy_with_lora_equals_cera_run():
    need(STORIES)
    need(LORA_A)
    want = run_ids(STORIES, "Once upon a time", 30, "--lora-scaled", LORA_A, "0.7")
    with Llama(STORIES, n_ctx=256, n_threads=2, lora_path=[(LORA_A, 0.7)], verbose=False) as llm:
        r = llm("Once upon a time", max_tokens=30, temperature=0)
        assert r["choices"][0]["text"] == llm.detokenize(want).decode()
    with Llama(STORIES, n_ctx=256, n_threads=2, lora_adapters={LORA_A: 0.7, LORA_B: 0.5}, verbose=False) as llm:
        both = llm("Once upon a time", max_tokens=30, temperature=0)["choices"][0]["text"]
    want2 = run_ids(STORIES, "Once upon a time", 30, "--lora-scaled", LORA_A, "0.7", "--lora-scaled", LORA_B, "0.5")
    with Llama(STORIES, n_ctx=256, n_threads=2, verbose=False) as plain:
        assert both == plain.detokenize(want2).decode()


def test_stream_equals_whole(stories):
    for kw in ({}, {"stop": ["."]}, {"stop": ["Lily", "park"]}):
        whole = stories("Once upon a time", max_tokens=48, temperature=0, **kw)
        chunks = list(stories("Once upon a time", max_tokens=48, temperature=0, stream=True, **kw))
        assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
        assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
        assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)


def test_stop_strings(stories):
    whole = stories("Once upon a time", max_tokens=60, temperature=0)["choices"][0]["text"]
    assert "." in whole
    r = stories("Once upon a time", max_tokens=60, temperature=0, stop=".")
    assert r["choices"][0]["text"] == whole[:whole.index(".")]
    assert r["choices"][0]["finish_reason"] == "stop"
    r = stories("Once upon a time", max_tokens=5, temperature=0)
    assert r["choices"][0]["finish_reason"] == "length"


def test_response_shape(stories):
    r = stories("Once upon a time", max_tokens=4, temperature=0)
    assert set(r) == {"id", "object", "created", "model", "choices", "usage"}
    assert r["id"].startswith("cmpl-") and r["object"] == "text_completion" and r["model"] == STORIES
    assert set(r["choices"][0]) == {"text", "index", "logprobs", "finish_reason"}
    assert r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"]
    assert stories("Once upon a time", max_tokens=4, temperature=0, echo=True)["choices"][0]["text"] == \
        "Once upon a time" + r["choices"][0]["text"]


def test_logprobs(stories):
    r = stories("Once upon a time", max_tokens=8, temperature=0, logprobs=3)
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 8 == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert "".join(lp["tokens"]) == r["choices"][0]["text"]
    for tok, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert v <= 0 and max(top.values()) == pytest.approx(v)  # greedy: the sampled token is the best
        assert sum(math.exp(x) for x in top.values()) <= 1 + 1e-6
    s = list(stories("Once upon a time", max_tokens=8, temperature=0, logprobs=3, stream=True))
    got = [x for c in s if c["choices"][0]["logprobs"] for x in c["choices"][0]["logprobs"]["token_logprobs"]]
    assert got == pytest.approx(lp["token_logprobs"])


def test_seeds_and_sampling(stories):
    kw = dict(max_tokens=24, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    a = stories("Once upon a time", seed=7, **kw)["choices"][0]["text"]
    b = stories("Once upon a time", seed=7, **kw)["choices"][0]["text"]
    assert a == b
    others = {stories("Once upon a time", seed=s, **kw)["choices"][0]["text"] for s in range(1, 6)}
    assert len(others) > 1
    # a Llama seed makes the sequence of unseeded calls repeat
    with Llama(STORIES, n_ctx=256, n_threads=2, seed=3, verbose=False) as x, \
            Llama(STORIES, n_ctx=256, n_threads=2, seed=3, verbose=False) as y:
        assert [x("Once", **kw)["choices"][0]["text"] for _ in range(2)] == \
            [y("Once", **kw)["choices"][0]["text"] for _ in range(2)]


def test_token_prompt_and_logit_bias(stories):
    toks = stories.tokenize(b"Once upon a time")
    assert stories(toks, max_tokens=10, temperature=0)["choices"][0]["text"] == \
        stories("Once upon a time", max_tokens=10, temperature=0)["choices"][0]["text"]
    with stories.engine.session(temp=0) as s:
        best = s.generate(toks, max_tokens=1).tokens[0]
    first = stories(toks, max_tokens=1, temperature=0)["choices"][0]["text"]
    assert first == stories.detokenize([best]).decode()
    r = stories(toks, max_tokens=1, temperature=0, logit_bias={best: float("-inf")})
    assert r["choices"][0]["text"] != first


def test_tokenize_detokenize(stories, smol):
    for llm, model in ((stories, STORIES), (smol, SMOL)):
        text = "Hello world, it is a sunny day"
        want = [int(x) for x in re.findall(r"-?\d+", cli("tokenize", "-m", model, "-p", text, "--ids").decode())]
        assert llm.tokenize(text.encode()) == want
        assert llm.detokenize(llm.tokenize(text.encode(), add_bos=False)).decode().strip() == text


def test_reset_and_states(stories):
    stories("Once upon a time", max_tokens=10, temperature=0)
    assert stories.n_tokens > 0
    stories.reset()
    assert stories.n_tokens == 0
    # a saved state continues as the session would have
    s = stories._session
    s.truncate(0)
    s.set_sampler(temp=0)
    s.eval(stories.tokenize(b"Once upon a time"))
    state = stories.save_state()
    assert state.n_tokens == 5 and state.llama_state_size > 0
    first = s.generate(max_tokens=12).tokens
    stories.reset()
    stories.load_state(state)
    assert stories.n_tokens == 5
    assert s.generate(max_tokens=12).tokens == first


def test_state_of_another_model_is_refused(stories, smol):
    smol._session.truncate(0)
    smol._session.eval(smol.tokenize(b"Hello"))
    st = smol.save_state()
    with pytest.raises(CeraError) as e:
        stories.load_state(st)
    assert e.value.status.name == "ERR_INVALID_ARG"
