"""Bad arguments raise (CeraError with cera's status and message), never crash."""
import os

import pytest
from conftest import STORIES, need

from cera import CeraClosedError, CeraError, Engine, Llama, Status


def test_bad_model_files(tmp_path):
    with pytest.raises(ValueError) as e:  # as llama-cpp-python
        Llama(str(tmp_path / "missing.gguf"), verbose=False)
    assert isinstance(e.value, CeraError) and e.value.status == Status.ERR_IO
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(CeraError) as e:
        Llama(str(junk), verbose=False)
    assert e.value.status == Status.ERR_FORMAT and e.value.message
    with pytest.raises(CeraError) as e:
        Engine(str(tmp_path / "missing.gguf"))
    assert e.value.status == Status.ERR_IO and "missing.gguf" in e.value.message


def test_bad_constructor_arguments():
    need(STORIES)
    for kw in ({"n_ctx": -1}, {"n_ctx": "512"}, {"n_batch": 0}, {"chat_format": "llama-2"},
               {"vocab_only": True}, {"pooling_type": 4}, {"type_k": 99},
               {"lora_path": "/nonexistent/adapter.gguf"}, {"n_ctx": 1 << 30}, {"chat_template": "{% if %}"}):
        with pytest.raises((CeraError, ValueError)):
            Llama(STORIES, verbose=False, **kw)
    with pytest.raises(TypeError):
        Llama(STORIES, verbose=False, n_ctxx=5)
    with Llama(STORIES, verbose=False, use_mlock=True, flash_attn=True, n_ubatch=64) as llm:  # hints: ignored
        assert llm.n_ctx() == 512


def test_bad_call_arguments(stories):
    bad = [dict(prompt=12), dict(prompt=[10 ** 9]), dict(prompt=["a"]), dict(prompt="x", suffix="y"),
           dict(prompt="x", mirostat_mode=2), dict(prompt="x", logits_processor=[lambda i, s: s]),
           dict(prompt="x", stop=[3]), dict(prompt="x", logprobs=99), dict(prompt="x", grammar="root ::= ("),
           dict(prompt="x" * 3000), dict(prompt="x", temperature="hot"), dict(prompt="x", seed="s")]
    for kw in bad:
        with pytest.raises((CeraError, ValueError)):
            stories.create_completion(**kw)
    # still fine afterwards
    assert stories("Once", max_tokens=3, temperature=0)["choices"][0]["text"]


def test_closed_objects():
    e = Engine(need(STORIES), n_ctx=128)
    s = e.session()
    e.close()
    with pytest.raises(CeraClosedError):
        s.eval([1, 2])
    with pytest.raises(CeraClosedError):
        e.tokenize("x")
    with pytest.raises(CeraClosedError):
        e.session()
    llm = Llama(STORIES, verbose=False)
    llm.close()
    with pytest.raises(CeraError):
        llm("Once", max_tokens=2)


def test_callback_exceptions_stop_and_propagate(stories):
    e = stories.engine
    seen = []

    def boom(token, text):
        seen.append(token)
        if len(seen) == 3:
            raise KeyError("stop here")

    with e.session(temp=0) as s:
        with pytest.raises(KeyError):
            s.generate(e.tokenize("Once upon a time"), max_tokens=50, on_token=boom)
        assert len(seen) == 3
        s.truncate(0)
        assert len(s.generate(e.tokenize("Once upon a time"), max_tokens=5).tokens) == 5
    # a stream closed early cancels its generation; the Llama goes on working
    it = stories("Once upon a time", max_tokens=100, temperature=0, stream=True)
    next(it)
    it.close()
    assert stories("Once", max_tokens=3, temperature=0)["usage"]["completion_tokens"] == 3


def test_bad_schema_and_state(stories, tmp_path):
    with pytest.raises(CeraError):
        stories.engine.session().set_json_schema('{"type": ')
    with pytest.raises(CeraError) as e:
        stories._session.load(str(tmp_path / "nothing"))
    assert e.value.status == Status.ERR_IO
    p = tmp_path / "bad"
    p.write_bytes(os.urandom(200))
    with pytest.raises(CeraError) as e:
        stories._session.load(str(p))
    assert e.value.status == Status.ERR_FORMAT
