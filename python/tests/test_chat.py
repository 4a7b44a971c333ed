"""Chat completions through the model's template (SmolLM2): the prompt is the template's,
greedy answers equal `cera run --temp 0` on the rendered prompt, streaming equals the whole
answer, tools (required, a named function, auto, none) and response_format JSON schemas."""
import json

import pytest
from conftest import SMOL, cli

from cera import CeraValueError, LlamaGrammar

MSGS = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def test_chat_goes_through_the_template(smol):
    text = smol._template.render(MSGS)
    assert "<|im_start|>user\nWhat is the capital of France?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    r = smol.create_chat_completion(MSGS, temperature=0, max_tokens=24)
    assert r["usage"]["prompt_tokens"] == len(smol.engine.chat_tokenize(text))
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    msg = r["choices"][0]["message"]
    assert msg["role"] == "assistant" and msg["content"]
    # the same tokens as the CLI on the rendered prompt
    assert smol.engine.tokenize(text, True, True) == smol.engine.chat_tokenize(text)
    want = [int(x) for x in cli("run", "-m", SMOL, "-p", text, "--no-escape", "--temp", "0", "-n", "24", "-c", "1024",
                                "-t", "2", "--ids").split()]
    assert msg["content"] == smol.detokenize(want).decode()


def test_chat_stream_equals_whole(smol):
    whole = smol.create_chat_completion(MSGS, temperature=0, max_tokens=40)
    chunks = list(smol.create_chat_completion(MSGS, temperature=0, max_tokens=40, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]


def test_chat_logprobs(smol):
    r = smol.create_chat_completion(MSGS, temperature=0, max_tokens=6, logprobs=True, top_logprobs=2)
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == r["usage"]["completion_tokens"]
    assert "".join(e["token"] for e in content) == r["choices"][0]["message"]["content"]
    assert all(len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["logprob"] == pytest.approx(e["logprob"])
               for e in content)


def test_tools_required(smol):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        r = smol.create_chat_completion(msgs, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=80)
        ch = r["choices"][0]
        assert ch["finish_reason"] == "tool_calls"
        call = ch["message"]["tool_calls"][0]
        assert call["type"] == "function" and call["function"]["name"] == "get_weather"
        assert isinstance(json.loads(call["function"]["arguments"])["city"], str)
        # streamed: the same calls, once the reply is whole
        s = list(smol.create_chat_completion(msgs, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=80,
                                             stream=True))
        calls = [c for x in s for c in x["choices"][0]["delta"].get("tool_calls", [])]
        assert [c["function"] for c in calls] == [c["function"] for c in ch["message"]["tool_calls"]]
        assert s[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_tools_auto_and_none(smol):
    msgs = [{"role": "user", "content": "Say hello."}]
    r = smol.create_chat_completion(msgs, tools=TOOLS, temperature=0, max_tokens=30)
    m = r["choices"][0]["message"]
    assert m["content"] or m.get("tool_calls")
    r = smol.create_chat_completion(msgs, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=30)
    assert "tool_calls" not in r["choices"][0]["message"]
    # legacy functions / function_call map onto tools / tool_choice
    r = smol.create_chat_completion([{"role": "user", "content": "Weather in Rome?"}],
                                    functions=[TOOLS[0]["function"]], function_call={"name": "get_weather"},
                                    temperature=0, max_tokens=80)
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_json_schema(smol):
    msgs = [{"role": "user", "content": "Invent a person."}]
    for rf in ({"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
               {"type": "json_object", "schema": PERSON}):
        for seed in (1, 2):
            r = smol.create_chat_completion(msgs, response_format=rf, temperature=0.8, seed=seed, max_tokens=120)
            v = json.loads(r["choices"][0]["message"]["content"])
            assert isinstance(v["name"], str) and isinstance(v["age"], int)
    r = smol.create_chat_completion([{"role": "user", "content": 'Reply with the JSON object {"ok": true} and nothing '
                                      'else.'}], response_format={"type": "json_object"}, temperature=0, max_tokens=120)
    assert r["choices"][0]["finish_reason"] == "stop"
    assert isinstance(json.loads(r["choices"][0]["message"]["content"]), dict)
    g = LlamaGrammar.from_json_schema(json.dumps({"type": "array", "items": {"type": "integer"}, "minItems": 1}))
    r = smol("A list of numbers: ", grammar=g, max_tokens=40, temperature=0)
    assert all(isinstance(x, int) for x in json.loads(r["choices"][0]["text"]))


def test_bad_chat_arguments(smol):
    with pytest.raises(CeraValueError):
        smol.create_chat_completion(MSGS, response_format={"type": "json_schema", "json_schema": {
            "schema": {"type": "string", "pattern": "abc"}}})  # an unanchored pattern is refused
    with pytest.raises(CeraValueError):
        smol.create_chat_completion([{"role": "wizard", "content": "x"}])
    with pytest.raises(CeraValueError):
        smol.create_chat_completion([])
    with pytest.raises(CeraValueError):
        smol.create_chat_completion(MSGS, tool_choice="required")
    with pytest.raises(CeraValueError):
        smol.create_chat_completion(MSGS, tools=[{"type": "function"}])
    with pytest.raises(CeraValueError):
        smol.create_chat_completion(MSGS, tools=TOOLS, response_format={"type": "json_object"})
    with pytest.raises(CeraValueError):
        smol.create_chat_completion([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}])
