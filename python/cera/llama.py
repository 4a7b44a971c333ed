"""Llama: llama-cpp-python's high-level API over cera, so that code written for
`from llama_cpp import Llama` runs with `from cera import Llama`.

Completions, chat completions (the model's chat template, run by cera's Jinja engine; tools
and tool_choice through cera's tool-call grammars and parser; response_format through JSON
Schema grammars), embeddings, tokenization and saved states, returning the same
OpenAI-shaped dicts and stream chunks as llama-cpp-python. The library calls are the ones
`cera serve` makes for the same requests, so the texts are the server's.

Each call starts from an empty session and evaluates its whole prompt, as `cera run` does,
so a greedy completion is exactly `cera run --temp 0`'s. Parameters llama-cpp-python has
that cera cannot honour raise a CeraValueError when given a value other than the default
(README.md's Python section lists them); performance hints with no meaning in cera are
accepted and ignored.
"""
from __future__ import annotations

import math
import os
import random
import sys
import tempfile
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from ._lib import ChatFormat, Pooling, Status
from .engine import ChatTemplate, Closable, Engine, json_schema_to_grammar
from .errors import CeraError, CeraValueError, bad_arg

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
LLAMA_POOLING_TYPE_UNSPECIFIED = -1
LLAMA_POOLING_TYPE_NONE = 0
LLAMA_POOLING_TYPE_MEAN = 1
LLAMA_POOLING_TYPE_CLS = 2
LLAMA_POOLING_TYPE_LAST = 3
# llama.cpp's ggml_type numbers for type_k / type_v
_GGML_KV = {0: "f32", 1: "f16", 2: "q4_0", 8: "q8_0", 30: "bf16"}

# llama-cpp-python constructor parameters that are hints without a meaning in cera: accepted, ignored
_IGNORED_INIT = ("split_mode", "main_gpu", "use_mmap", "use_mlock", "n_ubatch", "n_threads_batch", "offload_kqv",
                 "flash_attn", "op_offload", "swa_full", "no_perf", "numa", "embedding", "logits_all",
                 "rope_scaling_type", "attention_type", "spm_infill")
# ... and those cera cannot honour: only their default is accepted
_DEFAULT_ONLY_INIT = {"tensor_split": None, "vocab_only": False, "kv_overrides": None, "rope_freq_base": 0.0,
                      "rope_freq_scale": 0.0, "yarn_ext_factor": -1.0, "yarn_attn_factor": 1.0,
                      "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0, "yarn_orig_ctx": 0, "lora_base": None,
                      "chat_handler": None, "draft_model": None, "tokenizer": None}



def _drain(gen: Iterator) -> Tuple[str, List[Tuple[int, Any]], int, str]:
    """A whole answer from a generator of (token, bytes, logprob entry) ending with its result:
    the text, the (token, entry) pairs with entries, the tokens generated, the finish reason."""
    chunks: List[bytes] = []
    entries: List[Tuple[int, Any]] = []
    n_gen = 0
    try:
        while True:
            t, b, e = next(gen)
            chunks.append(b)
            if t >= 0:
                n_gen += 1
                if e is not None:
                    entries.append((t, e))
    except StopIteration as fin:
        finish = fin.value.finish_reason
    return b"".join(chunks).decode("utf-8", "replace"), entries, n_gen, finish

class LlamaGrammar:
    """A GBNF grammar for `grammar=` (llama-cpp-python's LlamaGrammar constructors)."""

    def __init__(self, gbnf: str):
        if not isinstance(gbnf, str) or not gbnf.strip():
            raise bad_arg("a grammar must be a non-empty GBNF text")
        self.gbnf = gbnf

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(grammar)

    @classmethod
    def from_file(cls, file: Union[str, os.PathLike], verbose: bool = True) -> "LlamaGrammar":
        with open(file, encoding="utf-8") as f:
            return cls(f.read())

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(json_schema_to_grammar(json_schema))


class LlamaState:
    """A saved session (llama-cpp-python's save_state/load_state): the bytes of a
    cera_session_save file, tied to the model, KV type and adapters."""

    def __init__(self, data: bytes, n_tokens: int, seed: int):
        self.data = data
        self.n_tokens = n_tokens
        self.seed = seed
        self.llama_state_size = len(data)


def _stop_list(stop: Any) -> List[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
        raise bad_arg("stop must be a string or a list of strings")
    return [s for s in stop if s]


def _log_softmax(logits: Sequence[float]) -> List[float]:
    m = max(logits)
    lse = m + math.log(math.fsum(math.exp(x - m) for x in logits))
    return [x - lse for x in logits]


class Llama(Closable):
    """A model ready to complete, chat and embed, as llama-cpp-python's Llama.

    Args (llama-cpp-python's names):
        model_path: the GGUF file.
        n_ctx: context size (0: the model's, capped at 4096 by cera).
        n_batch: most tokens per forward call.
        n_threads: CPU threads (None: one per core).
        n_gpu_layers: 0 runs on the CPU; any other value on the GPU when cera was built with
            CUDA and one is present (the whole model: cera does not split layers), else the CPU.
        seed: the sampling seed's start (LLAMA_DEFAULT_SEED or -1: one drawn at random); each
            call without a seed derives the next one from it.
        chat_format: None (the model's template; ChatML when it has none), "chatml",
            "chat_template.default", or a name of the model's tokenizer.chat_template.<name>.
        chat_template: a Jinja chat template text, instead of the model's.
        lora_path, lora_scale: one adapter (a llama.cpp GGUF adapter or a PEFT folder) and its
            scale; lora_path may also be a list of paths or (path, scale) pairs, and
            lora_adapters a {path: scale} dict.
        pooling_type: embeddings' pooling (LLAMA_POOLING_TYPE_*; unspecified: the model's).
        type_k, type_v: KV cache types (llama.cpp's ggml_type numbers, or cera's names).
        last_n_tokens_size: the repetition penalties' window.
        verbose: print what was loaded to stderr.
    """

    def __init__(self, model_path: str, *, n_gpu_layers: int = 0, seed: int = LLAMA_DEFAULT_SEED,
                 n_ctx: int = 512, n_batch: int = 512, n_threads: Optional[int] = None,
                 chat_format: Optional[str] = None, chat_template: Optional[str] = None,
                 lora_path: Optional[Union[str, Sequence[Any]]] = None, lora_scale: float = 1.0,
                 lora_adapters: Optional[Dict[str, float]] = None,
                 pooling_type: int = LLAMA_POOLING_TYPE_UNSPECIFIED, type_k: Optional[Union[int, str]] = None,
                 type_v: Optional[Union[int, str]] = None, last_n_tokens_size: int = 64, verbose: bool = True,
                 **kwargs: Any):
        self._engine: Optional[Engine] = None
        for k, v in kwargs.items():
            if k in _IGNORED_INIT:
                continue
            if k in _DEFAULT_ONLY_INIT:
                if v != _DEFAULT_ONLY_INIT[k]:
                    raise bad_arg("Llama(%s=...) is not supported by cera" % k)
                continue
            raise TypeError("Llama() got an unexpected keyword argument %r" % k)
        if not isinstance(model_path, (str, os.PathLike)):
            raise bad_arg("model_path must be a path")
        model_path = os.fspath(model_path)
        if not os.path.exists(model_path):
            raise CeraValueError(Status.ERR_IO, "Model path does not exist: %s" % model_path)
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 0:
            raise bad_arg("n_ctx must be an int >= 0, not %r" % (n_ctx,))
        if isinstance(n_batch, bool) or not isinstance(n_batch, int) or n_batch < 1:
            raise bad_arg("n_batch must be an int >= 1, not %r" % (n_batch,))
        if pooling_type not in (-1, 0, 1, 2, 3):
            raise bad_arg("pooling_type %r is not supported (none, mean, cls, last)" % (pooling_type,))
        if isinstance(last_n_tokens_size, bool) or not isinstance(last_n_tokens_size, int) or last_n_tokens_size < -1:
            raise bad_arg("last_n_tokens_size must be an int >= -1")
        self.model_path = model_path
        self.verbose = bool(verbose)
        self.n_batch = min(n_ctx, n_batch) if n_ctx else n_batch
        self.last_n_tokens_size = last_n_tokens_size
        self.pooling_type_ = pooling_type
        kv_k = self._kv_name(type_k, "type_k")
        kv_v = self._kv_name(type_v, "type_v") if type_v is not None else None
        self._engine = Engine(model_path, n_ctx=n_ctx, n_batch=self.n_batch,
                              n_threads=0 if n_threads is None else n_threads,
                              n_seq_max=4, device="cpu" if not n_gpu_layers else "auto",
                              kv_type=kv_k or "f16", kv_type_v=kv_v)
        self._seed = seed
        self._session = self._engine.session()
        self._adapters: List[Tuple[Any, float]] = []
        for path, scale in self._lora_list(lora_path, lora_scale, lora_adapters):
            a = self._engine.load_adapter(path)
            self._adapters.append((a, scale))
            self._session.set_adapter(a, scale)
        self.chat_format = chat_format
        self._template = self._open_template(chat_format, chat_template)
        self.lora_path = lora_path
        self.lora_scale = lora_scale
        if self.verbose:
            e = self._engine
            print("cera: %s: %s, n_ctx %d, %s, %d adapter(s), chat format %s" % (
                model_path, e.arch, e.n_ctx, e.device.name.lower(), len(self._adapters),
                self._template.format.name.lower()), file=sys.stderr)

    # ---- set-up helpers
    @staticmethod
    def _kv_name(t: Any, what: str) -> Optional[str]:
        if t is None:
            return None
        if isinstance(t, str):
            return t
        if isinstance(t, int) and t in _GGML_KV:
            return _GGML_KV[t]
        raise bad_arg("%s %r: cera's KV cache types are f16, f32, bf16, q8_0, q4_0" % (what, t))

    @staticmethod
    def _lora_list(lora_path: Any, lora_scale: float, lora_adapters: Any) -> List[Tuple[str, float]]:
        out: List[Tuple[str, float]] = []
        if lora_path is not None:
            items = [lora_path] if isinstance(lora_path, (str, os.PathLike)) else list(lora_path)
            for it in items:
                if isinstance(it, (str, os.PathLike)):
                    out.append((os.fspath(it), float(lora_scale)))
                elif isinstance(it, (tuple, list)) and len(it) == 2:
                    out.append((os.fspath(it[0]), float(it[1])))
                else:
                    raise bad_arg("lora_path entries are paths or (path, scale) pairs")
        if lora_adapters is not None:
            if not isinstance(lora_adapters, dict):
                raise bad_arg("lora_adapters must be a {path: scale} dict")
            out.extend((os.fspath(p), float(s)) for p, s in lora_adapters.items())
        return out

    def _open_template(self, chat_format: Optional[str], chat_template: Optional[str]) -> ChatTemplate:
        e = self._engine
        if chat_template is not None:
            if chat_format is not None:
                raise bad_arg("give chat_format or chat_template, not both")
            return ChatTemplate(e, text=chat_template)
        if chat_format is not None and not isinstance(chat_format, str):
            raise bad_arg("chat_format must be a string")
        name = chat_format
        if name in (None, "chat_template.default"):
            try:
                return ChatTemplate(e)
            except CeraError as x:
                if x.status != Status.ERR_NOT_FOUND or name is not None:
                    raise CeraValueError(x.status, x.message) from None
                return ChatTemplate(e, name="chatml")
        if name.startswith("chat_template."):
            name = name[len("chat_template."):]
        try:
            return ChatTemplate(e, name=name)
        except CeraError as x:
            if x.status == Status.ERR_NOT_FOUND:
                raise CeraValueError(x.status, "unknown chat_format %r: the model has no template of that name "
                                     "(cera runs the model's Jinja templates, tokenizer.chat_template.<name>, and "
                                     "'chatml')" % chat_format) from None
            raise

    def _next_seed(self, seed: Optional[int]) -> int:
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise bad_arg("seed must be an int")
            self._seed = seed
            return seed & 0xFFFFFFFFFFFFFFFF
        if self._seed in (LLAMA_DEFAULT_SEED, -1):
            self._seed = random.SystemRandom().randint(0, 2 ** 32 - 1)
        self._seed = random.Random(self._seed).randint(0, 2 ** 32)
        return self._seed

    # ---- lifetime
    def close(self) -> None:
        """Frees the model (its sessions and adapters first)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    @property
    def engine(self) -> Engine:
        """The cera Engine underneath (cera's own layer)."""
        if self._engine is None:
            raise CeraValueError(Status.ERR_INVALID_ARG, "the Llama is closed")
        return self._engine

    # ---- facts, llama-cpp-python's names
    def n_ctx(self) -> int:
        return self.engine.n_ctx

    def n_embd(self) -> int:
        return self.engine.n_embd

    def n_vocab(self) -> int:
        return self.engine.n_vocab

    def token_bos(self) -> int:
        return self.engine.bos

    def token_eos(self) -> int:
        return self.engine.eos

    def pooling_type(self) -> int:
        return int(self.engine.pooling) if self.pooling_type_ == -1 else self.pooling_type_

    @property
    def n_tokens(self) -> int:
        return self._session.n_past

    # ---- tokens
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        """Tokens of UTF-8 text (add_bos: the model's BOS/EOS as its metadata asks; special:
        special-token strings become their tokens)."""
        return self.engine.tokenize(text, add_special=add_bos, parse_special=special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None, special: bool = False) -> bytes:
        """The bytes of tokens (prev_tokens is accepted and not needed: pieces are exact)."""
        return self.engine.detokenize(tokens, special=special)

    def reset(self) -> None:
        """Clears the timeline."""
        self._session.truncate(0)

    def set_seed(self, seed: int) -> None:
        self._seed = seed

    # ---- states
    def save_state(self) -> LlamaState:
        """The session's state (tokens, KV cache, last logits, RNG) as a LlamaState."""
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "state")
            self._session.save(p)
            with open(p, "rb") as f:
                return LlamaState(f.read(), self._session.n_past, self._seed)

    def load_state(self, state: LlamaState) -> None:
        """Restores a save_state() of this model (refused, with a CeraError, for another one)."""
        if not isinstance(state, LlamaState):
            raise bad_arg("load_state needs a LlamaState")
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "state")
            with open(p, "wb") as f:
                f.write(state.data)
            self._session.load(p)
        self._seed = state.seed

    # ---- generation core
    def _prepare(self, prompt_tokens: List[int], temperature: float, top_p: float, top_k: int, min_p: float,
                 typical_p: float, repeat_penalty: float, frequency_penalty: float, presence_penalty: float,
                 seed: Optional[int], logit_bias: Optional[Dict[Any, float]], grammar: Any,
                 mirostat_mode: int, extra: Dict[str, Any]) -> None:
        for k, v in extra.items():
            if k in ("stopping_criteria", "logits_processor") and v is not None:
                raise bad_arg("%s is not supported by cera (its sampler chain runs in C)" % k)
        if mirostat_mode not in (0, None):
            raise bad_arg("mirostat is not supported by cera")
        n_ctx = self.engine.n_ctx
        if not prompt_tokens:
            raise bad_arg("the prompt has no tokens")
        if len(prompt_tokens) >= n_ctx:
            raise bad_arg("Requested tokens (%d) exceed context window of %d" % (len(prompt_tokens), n_ctx))
        s = self._session
        s.truncate(0)
        s.set_sampler(temp=temperature, top_p=top_p, top_k=top_k, min_p=min_p, typical_p=typical_p,
                      repeat_penalty=repeat_penalty, freq_penalty=frequency_penalty,
                      presence_penalty=presence_penalty, penalty_last_n=self.last_n_tokens_size,
                      seed=self._next_seed(seed), logit_bias=logit_bias)
        if isinstance(grammar, LlamaGrammar):
            s.set_grammar(grammar.gbnf)
        elif isinstance(grammar, str):
            s.set_grammar(grammar)
        elif grammar is None:
            s.set_grammar(None)
        elif isinstance(grammar, tuple):  # (gbnf, triggers): a chat tool grammar
            s.set_grammar(grammar[0], grammar[1])
        else:
            raise bad_arg("grammar must be a LlamaGrammar or a GBNF string")
        for i in range(0, len(prompt_tokens), self.n_batch):
            s.eval(prompt_tokens[i:i + self.n_batch])

    def _max_tokens(self, max_tokens: Optional[int], n_prompt: int) -> int:
        room = self.engine.n_ctx - n_prompt
        if max_tokens is None or max_tokens <= 0:
            return room
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise bad_arg("max_tokens must be an int")
        return min(max_tokens, room)

    def _logprob_entry(self, token: int, top: int) -> Tuple[float, List[Tuple[int, float]]]:
        row = self._session.logits(-1)
        if row is None:
            return float("nan"), []
        lp = _log_softmax(row)
        best = sorted(range(len(lp)), key=lambda i: -lp[i])[:top] if top > 0 else []
        return lp[token], [(i, lp[i]) for i in best]

    def _run(self, max_tokens: int, stop: List[str], top_logprobs: Optional[int]) -> Iterator[Tuple[int, bytes, Any]]:
        """The prepared session's generation as (token, text, logprob entry or None); returns
        the GenerateResult."""
        annotate = None
        if top_logprobs is not None:
            k = int(top_logprobs)
            annotate = lambda t: self._logprob_entry(t, k)  # noqa: E731
        return (yield from self._session._stream(None, annotate, max_tokens=max_tokens, stop=stop))

    def _piece(self, t: int) -> str:
        return self.engine.token_to_piece(t).decode("utf-8", "replace")

    def _completion_logprobs(self, entries: List[Tuple[int, Any]], offset: int) -> Dict[str, Any]:
        tokens, offs, lps, tops = [], [], [], []
        for t, (lp, top) in entries:
            s = self._piece(t)
            tokens.append(s)
            offs.append(offset)
            offset += len(s)
            lps.append(lp)
            d = {self._piece(i): v for i, v in top}
            d[s] = lp
            tops.append(d)
        return {"tokens": tokens, "text_offset": offs, "token_logprobs": lps, "top_logprobs": tops}

    def _chat_logprobs(self, entries: List[Tuple[int, Any]]) -> Dict[str, Any]:
        def entry(t: int, lp: float) -> Dict[str, Any]:
            b = self.engine.token_to_piece(t)
            return {"token": b.decode("utf-8", "replace"), "logprob": lp, "bytes": list(b)}

        content = []
        for t, (lp, top) in entries:
            e = entry(t, lp)
            e["top_logprobs"] = [entry(i, v) for i, v in top]
            content.append(e)
        return {"content": content, "refusal": None}

    # ---- completions
    def create_completion(self, prompt: Union[str, List[int]], suffix: Optional[str] = None,
                          max_tokens: Optional[int] = 16, temperature: float = 0.8, top_p: float = 0.95,
                          min_p: float = 0.05, typical_p: float = 1.0, logprobs: Optional[int] = None,
                          echo: bool = False, stop: Optional[Union[str, List[str]]] = None,
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                          repeat_penalty: float = 1.0, top_k: int = 40, stream: bool = False,
                          seed: Optional[int] = None, tfs_z: float = 1.0, mirostat_mode: int = 0,
                          mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, model: Optional[str] = None,
                          stopping_criteria: Any = None, logits_processor: Any = None,
                          grammar: Optional[Union[LlamaGrammar, str]] = None,
                          logit_bias: Optional[Dict[int, float]] = None
                          ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """Continues a prompt (a text, or token ids): an OpenAI text_completion dict, or with
        stream=True an iterator of its chunks. temperature 0 is greedy."""
        if suffix is not None:
            raise bad_arg("suffix (infill) is not supported by cera")
        if isinstance(prompt, str):
            ptoks = self.engine.tokenize(prompt, add_special=True, parse_special=True)
            prompt_text = prompt
        elif isinstance(prompt, (list, tuple)):
            ptoks = list(prompt)
            prompt_text = self.engine.detokenize(ptoks).decode("utf-8", "replace") if echo else ""
        else:
            raise bad_arg("prompt must be a string or a list of token ids")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or
                                     not 0 <= logprobs <= 20):
            raise bad_arg("logprobs must be an int from 0 to 20")
        stops = _stop_list(stop)
        self._prepare(ptoks, temperature, top_p, top_k, min_p, typical_p, repeat_penalty, frequency_penalty,
                      presence_penalty, seed, logit_bias, grammar, mirostat_mode,
                      {"stopping_criteria": stopping_criteria, "logits_processor": logits_processor})
        n_max = self._max_tokens(max_tokens, len(ptoks))
        head = {"id": "cmpl-" + str(uuid.uuid4()), "object": "text_completion", "created": int(time.time()),
                "model": model if model is not None else self.model_path}
        gen = self._run(n_max, stops, logprobs)
        if stream:
            return self._completion_stream(gen, head, prompt_text if echo else None, logprobs is not None)
        text, entries, n_gen, finish = _drain(gen)
        lp = None
        if logprobs is not None:
            lp = self._completion_logprobs(entries, len(prompt_text) if echo else 0)
        return dict(head, choices=[{"text": (prompt_text if echo else "") + text, "index": 0, "logprobs": lp,
                                    "finish_reason": finish}],
                    usage={"prompt_tokens": len(ptoks), "completion_tokens": n_gen,
                           "total_tokens": len(ptoks) + n_gen})

    def _completion_stream(self, gen: Iterator[Any], head: Dict[str, Any], echo: Optional[str],
                           want_lp: bool) -> Iterator[Dict[str, Any]]:
        def chunk(text: str, lp: Any, finish: Optional[str]) -> Dict[str, Any]:
            return dict(head, choices=[{"text": text, "index": 0, "logprobs": lp, "finish_reason": finish}])

        offset = 0
        try:
            if echo:
                yield chunk(echo, None, None)
                offset = len(echo)
            while True:
                t, text, e = next(gen)
                s = text.decode("utf-8", "replace")
                lp = None
                if want_lp and t >= 0:
                    lp = self._completion_logprobs([(t, e)], offset)
                offset += len(s)
                if s or lp is not None:
                    yield chunk(s, lp, None)
        except StopIteration as fin:
            yield chunk("", None, fin.value.finish_reason)
        finally:
            gen.close()

    def __call__(self, prompt: Union[str, List[int]], **kwargs: Any) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """create_completion(prompt, ...)."""
        return self.create_completion(prompt, **kwargs)

    # ---- chat
    def _chat_grammar(self, tools: Optional[List[Dict[str, Any]]], tool_choice: Any, response_format: Any,
                      grammar: Any) -> Tuple[Any, Optional[ChatFormat], bool]:
        """(grammar for _prepare, the format to parse tool calls with or None, whether tools
        are offered to the template) as `cera serve` decides them."""
        if tools is not None and not isinstance(tools, list):
            raise bad_arg("tools must be a list")
        for t in tools or []:
            if not (isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)
                    and isinstance(t["function"].get("name"), str)):
                raise bad_arg("each tool must be {'type': 'function', 'function': {'name': ...}}")
        required, name = False, None
        if tool_choice is None or tool_choice == "auto":
            pass
        elif tool_choice == "none":
            pass
        elif tool_choice == "required":
            required = True
        elif (isinstance(tool_choice, dict) and tool_choice.get("type") == "function"
              and isinstance(tool_choice.get("function"), dict)
              and isinstance(tool_choice["function"].get("name"), str)):
            required, name = True, tool_choice["function"]["name"]
        else:
            raise bad_arg("tool_choice must be 'auto', 'none', 'required' or "
                          "{'type': 'function', 'function': {'name': ...}}")
        if required and not tools:
            raise bad_arg("tool_choice 'required' or a function needs tools")
        gbnf = None
        if response_format is not None:
            if not isinstance(response_format, dict) or not isinstance(response_format.get("type"), str):
                raise bad_arg("response_format needs a type")
            kind = response_format["type"]
            schema: Any = None
            if kind == "text":
                pass
            elif kind == "json_object":
                schema = response_format.get("schema") or {"type": "object"}
            elif kind == "json_schema":
                js = response_format.get("json_schema")
                if not isinstance(js, dict) or "schema" not in js:
                    raise bad_arg("response_format json_schema needs json_schema.schema")
                schema = js["schema"]
            else:
                raise bad_arg("response_format %r is not supported" % kind)
            if schema is not None:
                if not isinstance(schema, (dict, bool)) or schema is False:
                    raise bad_arg("response_format: the schema must be an object")
                try:
                    gbnf = json_schema_to_grammar(schema)
                except CeraError as x:
                    raise CeraValueError(x.status, "response_format: the schema cannot be used: %s"
                                         % x.message) from None
        use_tools = bool(tools) and tool_choice != "none"
        if (gbnf is not None or grammar is not None) and use_tools:
            raise bad_arg("response_format (or grammar) together with tools is not supported yet")
        if grammar is not None:
            return grammar, None, bool(tools)
        if gbnf is not None:
            return gbnf, None, bool(tools)
        if not use_tools:
            return None, None, bool(tools)
        try:
            g, triggers, fmt = self._template.tool_grammar(tools, "required" if required else "auto", name, False)
        except CeraError as x:
            raise CeraValueError(x.status, "tools: %s" % x.message) from None
        grammar_arg = (g, triggers) if g is not None else None
        return grammar_arg, (fmt if fmt != ChatFormat.CONTENT else None), True

    def _chat_message(self, text: str, fmt: Optional[ChatFormat], id_base: str) -> Tuple[Dict[str, Any], int]:
        msg: Dict[str, Any] = {"role": "assistant", "content": text}
        if fmt is None:
            return msg, 0
        try:
            rep = self._template.parse(text, fmt)
        except CeraError:
            return msg, 0
        calls = rep["tool_calls"]
        msg["content"] = None if calls and not rep["content"] else rep["content"]
        if rep["reasoning"] is not None:
            msg["reasoning_content"] = rep["reasoning"]
        if calls:
            msg["tool_calls"] = [{"id": c["id"] or "call_%s_%d" % (id_base, i), "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                                 for i, c in enumerate(calls)]
        return msg, len(calls)

    def create_chat_completion(self, messages: List[Dict[str, Any]], functions: Optional[List[Dict[str, Any]]] = None,
                               function_call: Any = None, tools: Optional[List[Dict[str, Any]]] = None,
                               tool_choice: Any = None, temperature: float = 0.2, top_p: float = 0.95,
                               top_k: int = 40, min_p: float = 0.05, typical_p: float = 1.0, stream: bool = False,
                               stop: Optional[Union[str, List[str]]] = None, seed: Optional[int] = None,
                               response_format: Optional[Dict[str, Any]] = None, max_tokens: Optional[int] = None,
                               presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                               repeat_penalty: float = 1.0, tfs_z: float = 1.0, mirostat_mode: int = 0,
                               mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, model: Optional[str] = None,
                               logits_processor: Any = None, grammar: Optional[Union[LlamaGrammar, str]] = None,
                               logit_bias: Optional[Dict[int, float]] = None, logprobs: Optional[bool] = None,
                               top_logprobs: Optional[int] = None
                               ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """Answers a conversation (OpenAI messages) through the model's chat template: an OpenAI
        chat.completion dict, or with stream=True an iterator of chat.completion.chunk dicts.
        tools/tool_choice constrain and parse tool calls (message.tool_calls, finish_reason
        "tool_calls"); response_format json_object/json_schema constrains the reply to JSON."""
        if functions is not None:  # OpenAI's legacy function calling, as tools
            if tools is not None:
                raise bad_arg("give functions or tools, not both")
            tools = [{"type": "function", "function": f} for f in functions]
            if isinstance(function_call, dict) and "name" in function_call:
                tool_choice = {"type": "function", "function": {"name": function_call["name"]}}
            elif function_call is not None:
                tool_choice = function_call
        if top_logprobs is not None and (isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int)
                                         or not 0 <= top_logprobs <= 20):
            raise bad_arg("top_logprobs must be an int from 0 to 20")
        g, fmt, offer_tools = self._chat_grammar(tools, tool_choice, response_format, grammar)
        try:
            text = self._template.render(messages, tools=tools if offer_tools else None)
        except CeraError as x:
            raise CeraValueError(x.status, "the chat template failed: %s" % x.message) from None
        ptoks = self.engine.chat_tokenize(text)
        stops = _stop_list(stop)
        self._prepare(ptoks, temperature, top_p, top_k, min_p, typical_p, repeat_penalty, frequency_penalty,
                      presence_penalty, seed, logit_bias, g, mirostat_mode, {"logits_processor": logits_processor})
        n_max = self._max_tokens(max_tokens, len(ptoks))
        cid = "chatcmpl-" + str(uuid.uuid4())
        head = {"id": cid, "object": "chat.completion", "created": int(time.time()),
                "model": model if model is not None else self.model_path}
        top = (top_logprobs or 0) if logprobs else None
        gen = self._run(n_max, stops, top)
        if stream:
            return self._chat_stream(gen, dict(head, object="chat.completion.chunk"), fmt, cid[9:])
        reply, entries, n_gen, finish = _drain(gen)
        msg, n_calls = self._chat_message(reply, fmt, cid[9:])
        return dict(head, choices=[{"index": 0, "message": msg,
                                    "logprobs": self._chat_logprobs(entries) if logprobs else None,
                                    "finish_reason": "tool_calls" if n_calls else finish}],
                    usage={"prompt_tokens": len(ptoks), "completion_tokens": n_gen,
                           "total_tokens": len(ptoks) + n_gen})

    def _chat_stream(self, gen: Iterator[Any], head: Dict[str, Any], fmt: Optional[ChatFormat],
                     id_base: str) -> Iterator[Dict[str, Any]]:
        def chunk(delta: Dict[str, Any], lp: Any, finish: Optional[str]) -> Dict[str, Any]:
            return dict(head, choices=[{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}])

        parts: List[str] = []
        held: List[Tuple[int, Any]] = []
        try:
            yield chunk({"role": "assistant"}, None, None)
            while True:
                t, b, e = next(gen)
                s = b.decode("utf-8", "replace")
                if fmt is not None:  # the reply is split into content and tool calls once whole
                    parts.append(s)
                    if e is not None:
                        held.append((t, e))
                    continue
                lp = self._chat_logprobs([(t, e)]) if e is not None else None
                if s or lp is not None:
                    yield chunk({"content": s}, lp, None)
        except StopIteration as fin:
            finish = fin.value.finish_reason
            if fmt is not None:
                msg, n_calls = self._chat_message("".join(parts), fmt, id_base)
                delta: Dict[str, Any] = {}
                if msg.get("content"):
                    delta["content"] = msg["content"]
                if "reasoning_content" in msg:
                    delta["reasoning_content"] = msg["reasoning_content"]
                if n_calls:
                    delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(msg["tool_calls"])]
                    finish = "tool_calls"
                if delta or held:
                    yield chunk(delta, self._chat_logprobs(held) if held else None, None)
            yield chunk({}, None, finish)
        finally:
            gen.close()

    # ---- embeddings
    def embed(self, input: Union[str, List[str]], normalize: bool = False, truncate: bool = True,
              return_count: bool = False) -> Any:
        """Embeddings of a text or of texts: one vector each (the pooling_type's, by default
        the model's own), or for pooling none one vector per token; normalize: euclidean."""
        texts = [input] if isinstance(input, str) else input
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise bad_arg("input must be a string or a list of strings")
        pooling = self.pooling_type()
        norm = 2 if normalize else -1
        out: List[Any] = []
        total = 0
        with self.engine.session() as s:
            for text in texts:
                toks = self.engine.tokenize(text, add_special=True, parse_special=False)
                if truncate:
                    toks = toks[:self.n_batch]
                elif len(toks) > self.n_batch:
                    raise bad_arg("Requested tokens (%d) exceed batch size of %d" % (len(toks), self.n_batch))
                if not toks:
                    raise bad_arg("an input has no tokens")
                total += len(toks)
                s.truncate(0)
                for a, scale in self._adapters:
                    s.set_adapter(a, scale)
                vecs = s.embed(toks, pooling=pooling, normalize=norm)
                out.append(vecs if pooling == Pooling.NONE else vecs[0])
        result = out[0] if isinstance(input, str) else out
        return (result, total) if return_count else result

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> Dict[str, Any]:
        """OpenAI's embeddings list for a text or texts (embed() unnormalized, as llama-cpp-python)."""
        texts = input if isinstance(input, list) else [input]
        embeds, total = self.embed(texts, return_count=True)
        return {"object": "list",
                "data": [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(embeds)],
                "model": model if model is not None else self.model_path,
                "usage": {"prompt_tokens": total, "total_tokens": total}}
