"""cera's own layer: engines, sessions, batches, adapters and chat templates, one Python
object per cera.h object.

An Engine is a loaded model; a Session one timeline (tokens, KV cache, sampler, grammar,
adapters). Sessions of one engine may run in different threads at once: every call into
libcera releases the GIL, and each Session holds a lock so that one session is only ever
used by one thread at a time, as cera.h asks. Closing an engine first frees its sessions and
adapters (cera.h: none may outlive it); using a closed object raises CeraClosedError.
Errors are CeraError with cera's status and message.
"""
from __future__ import annotations

import ctypes
import json
import os
import queue
import threading
import weakref
from ctypes import POINTER, byref, c_char, c_char_p, c_float, c_int, c_size_t, c_void_p
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from . import _lib
from ._lib import ChatFormat, Device, GrammarState, KvType, Pooling, Status, ToolChoice, lib
from .errors import CeraClosedError, bad_arg, check

TokenList = Sequence[int]


def _text(s: Union[str, bytes], what: str) -> bytes:
    if isinstance(s, bytes):
        return s
    if isinstance(s, str):
        return s.encode("utf-8")
    raise bad_arg("%s must be str or bytes, not %s" % (what, type(s).__name__))


def _tokens(tokens: Iterable[int], n_vocab: int, what: str = "tokens") -> "ctypes.Array":
    try:
        t = [int(x) for x in tokens]
    except (TypeError, ValueError):
        raise bad_arg("%s must be a sequence of token ids" % what) from None
    for x in t:
        if not 0 <= x < n_vocab:
            raise bad_arg("%s: token %d is outside the vocabulary (0..%d)" % (what, x, n_vocab - 1))
    return (_lib.c_token * len(t))(*t)


def _int(v: Any, what: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad_arg("%s must be an int, not %r" % (what, v))
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise bad_arg("%s is %d; it must be in %s..%s" % (what, v, lo, hi))
    return v


def _num(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad_arg("%s must be a number, not %r" % (what, v))
    return float(v)


_KV_NAMES = {"f16": KvType.F16, "f32": KvType.F32, "q8_0": KvType.Q8_0, "bf16": KvType.BF16, "q4_0": KvType.Q4_0}
_DEVICE_NAMES = {"auto": Device.AUTO, "cpu": Device.CPU, "cuda": Device.CUDA}
_POOLING_NAMES = {"model": Pooling.MODEL, "none": Pooling.NONE, "mean": Pooling.MEAN, "cls": Pooling.CLS,
                  "last": Pooling.LAST}


def _choice(v: Any, names: Dict[str, int], what: str) -> int:
    if isinstance(v, str):
        if v.lower() not in names:
            raise bad_arg("%s %r: one of %s" % (what, v, ", ".join(names)))
        return int(names[v.lower()])
    if isinstance(v, int) and not isinstance(v, bool) and v in set(int(x) for x in names.values()):
        return int(v)
    raise bad_arg("%s %r: one of %s" % (what, v, ", ".join(names)))


def version() -> str:
    """libcera's version, "MAJOR.MINOR.PATCH"."""
    return lib.cera_version().decode()


# ---- sampling ------------------------------------------------------------------------------

_SAMPLER_KEYS = ("temp", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "freq_penalty",
                 "presence_penalty", "penalty_last_n", "seed")


def sampler_params(logit_bias: Optional[Dict[int, float]] = None, **kw: Any) -> Tuple[Any, Any]:
    """cera_sampler_params from cera's defaults with the given fields changed (temp, top_k,
    top_p, min_p, typical_p, repeat_penalty, freq_penalty, presence_penalty, penalty_last_n,
    seed) and logit biases {token: bias}. Returns (params, the bias array it points to)."""
    sp = _lib.default_params("sampler")
    for k, v in kw.items():
        if k not in _SAMPLER_KEYS:
            raise bad_arg("unknown sampler parameter %r" % k)
        if v is None:
            continue
        if k in ("top_k", "penalty_last_n"):
            v = _int(v, k)
        elif k == "seed":
            v = _int(v, k) & 0xFFFFFFFFFFFFFFFF
        else:
            v = _num(v, k)
        setattr(sp, k, v)
    keep = None
    if logit_bias:
        items = list(logit_bias.items())
        keep = (_lib.LogitBias * len(items))()
        for i, (t, b) in enumerate(items):
            keep[i].token = _int(int(t) if isinstance(t, str) and t.lstrip("-").isdigit() else t, "logit_bias token")
            keep[i].bias = _num(b, "logit_bias value")
        sp.logit_bias = keep
        sp.n_logit_bias = len(items)
    return sp, keep


# ---- engine --------------------------------------------------------------------------------


class Closable:
    """What every object owning a cera handle shares: ``with`` closes it, and so does the garbage
    collector (errors then swallowed, as at interpreter exit). Subclasses define ``close``."""

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Engine(Closable):
    """A loaded GGUF model (cera_engine). Sessions, adapters and chat templates come from it.

    Args:
        model_path: the GGUF file (a split model: its first shard).
        n_ctx: context size per session; 0 = the model's, capped at 4096.
        n_threads: CPU threads; 0 = one per core.
        n_batch: most tokens per forward call; 0 = 512.
        n_seq_max: sessions open at once; 0 = 8.
        kv_bytes: the KV pool's size in bytes; 0 = room for n_seq_max full contexts.
        kv_type, kv_type_v: the KV cache's element types ("f16", "f32", "bf16", "q8_0", "q4_0").
        device: "auto", "cpu" or "cuda".
        kv_rotation: False never rotates block-type caches (cera's default rotates them).
    """

    def __init__(self, model_path: Union[str, os.PathLike], *, n_ctx: int = 0, n_threads: int = 0,
                 n_batch: int = 0, n_seq_max: int = 0, kv_bytes: int = 0, kv_type: Union[str, int] = "f16",
                 kv_type_v: Optional[Union[str, int]] = None, device: Union[str, int] = "cpu",
                 kv_rotation: bool = True):
        self._e = None
        self._lock = threading.Lock()
        self._children: "weakref.WeakSet[Any]" = weakref.WeakSet()
        path = os.fspath(model_path)
        if not isinstance(path, str):
            raise bad_arg("model_path must be a path")
        p = _lib.default_params("engine")
        p.n_ctx = _int(n_ctx, "n_ctx", 0)
        p.n_threads = _int(n_threads, "n_threads", 0)
        p.n_batch = _int(n_batch, "n_batch", 0)
        p.n_seq_max = _int(n_seq_max, "n_seq_max", 0)
        p.kv_bytes = _int(kv_bytes, "kv_bytes", 0)
        p.kv_type = _choice(kv_type, _KV_NAMES, "kv_type")
        p.kv_type_v = KvType.AS_K if kv_type_v is None else _choice(kv_type_v, _KV_NAMES, "kv_type_v")
        p.device = _choice(device, _DEVICE_NAMES, "device")
        p.kv_rotation = 0 if kv_rotation else -1
        err = _lib.Error()
        out = c_void_p()
        check(lib.cera_engine_open(path.encode(), byref(p), byref(out), byref(err)), err)
        self._e = out.value
        self.model_path = path
        self._n_vocab = lib.cera_engine_n_vocab(self._e)

    # -- lifetime
    def close(self) -> None:
        """Frees the engine, after its sessions, adapters and templates (which become closed)."""
        with self._lock:
            if self._e is None:
                return
            for c in list(self._children):
                c.close()
            lib.cera_engine_close(self._e)
            self._e = None

    @property
    def closed(self) -> bool:
        return self._e is None

    def _handle(self) -> int:
        e = self._e
        if e is None:
            raise CeraClosedError("engine")
        return e

    def _adopt(self, child: Any) -> None:
        with self._lock:
            self._handle()
            self._children.add(child)

    # -- facts
    @property
    def n_vocab(self) -> int:
        return lib.cera_engine_n_vocab(self._handle())

    @property
    def n_ctx(self) -> int:
        return lib.cera_engine_n_ctx(self._handle())

    @property
    def n_ctx_train(self) -> int:
        return lib.cera_engine_n_ctx_train(self._handle())

    @property
    def n_embd(self) -> int:
        return lib.cera_engine_n_embd(self._handle())

    @property
    def arch(self) -> str:
        return lib.cera_engine_arch(self._handle()).decode()

    @property
    def device(self) -> Device:
        return Device(lib.cera_engine_device(self._handle()))

    @property
    def bos(self) -> int:
        return lib.cera_engine_bos(self._handle())

    @property
    def eos(self) -> int:
        return lib.cera_engine_eos(self._handle())

    @property
    def pooling(self) -> Pooling:
        return Pooling(lib.cera_engine_pooling(self._handle()))

    def is_eog(self, token: int) -> bool:
        return bool(lib.cera_engine_is_eog(self._handle(), _int(token, "token")))

    def kv_blocks(self) -> Tuple[int, int]:
        """(blocks in use, blocks in all) of the KV pool."""
        used, total = c_int(), c_int()
        lib.cera_engine_kv_blocks(self._handle(), byref(used), byref(total))
        return used.value, total.value

    # -- tokenizer
    def tokenize(self, text: Union[str, bytes], add_special: bool = True, parse_special: bool = False) -> List[int]:
        """The tokens of a text (cera_tokenize)."""
        b = _text(text, "text")
        e = self._handle()
        err = _lib.Error()
        n = c_size_t()
        cap = len(b) + 8
        while True:
            buf = (_lib.c_token * cap)()
            st = lib.cera_tokenize(e, b, len(b), bool(add_special), bool(parse_special), buf, cap, byref(n),
                                   byref(err))
            if st == Status.ERR_INVALID_ARG and n.value > cap:
                cap = n.value
                continue
            check(st, err)
            return list(buf[:n.value])

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        """One token's text (bytes: a piece may be part of a UTF-8 character)."""
        e = self._handle()
        t = _int(token, "token")
        buf = (c_char * 64)()
        n = lib.cera_token_to_piece(e, t, buf, len(buf), bool(special))
        if n > len(buf):
            buf = (c_char * n)()
            n = lib.cera_token_to_piece(e, t, buf, len(buf), bool(special))
        if n < 0:
            raise bad_arg("token %d is not in the vocabulary" % t)
        return buf.raw[:n]

    def detokenize(self, tokens: TokenList, special: bool = False) -> bytes:
        """The tokens' pieces, concatenated."""
        return b"".join(self.token_to_piece(t, special) for t in tokens)

    # -- children
    def session(self, **sampler: Any) -> "Session":
        """A new session; keyword arguments set its sampler (see sampler_params)."""
        return Session(self, **sampler)

    def load_adapter(self, path: Union[str, os.PathLike]) -> "Adapter":
        """Loads a LoRA adapter (a llama.cpp GGUF adapter or a PEFT folder) for this model."""
        return Adapter(self, path)

    def chat_template(self, name: Optional[str] = None, text: Optional[str] = None) -> "ChatTemplate":
        """The model's chat template (name: tokenizer.chat_template.<name>), or a Jinja text."""
        return ChatTemplate(self, name=name, text=text)

    def chat_tokenize(self, text: Union[str, bytes]) -> List[int]:
        """Tokenizes a rendered conversation as llama.cpp's server does (cera_chat_tokenize)."""
        b = _text(text, "text")
        out = POINTER(_lib.c_token)()
        n = c_size_t()
        err = _lib.Error()
        check(lib.cera_chat_tokenize(self._handle(), b, len(b), byref(out), byref(n), byref(err)), err)
        try:
            return list(out[:n.value])
        finally:
            lib.cera_free(ctypes.cast(out, c_void_p))


# ---- adapters ------------------------------------------------------------------------------


class Adapter(Closable):
    """A LoRA adapter loaded for an engine's model (cera_adapter); attach it to sessions with
    Session.set_adapter. Closing it drops this reference: sessions keep theirs."""

    def __init__(self, engine: Engine, path: Union[str, os.PathLike]):
        self._a = None
        self.engine = engine
        self.path = os.fspath(path)
        out = c_void_p()
        err = _lib.Error()
        check(lib.cera_adapter_load(engine._handle(), self.path.encode(), byref(out), byref(err)), err)
        self._a = out.value
        engine._adopt(self)

    def close(self) -> None:
        a, self._a = self._a, None
        if a is not None:
            lib.cera_adapter_free(a)

    def _handle(self) -> int:
        if self._a is None:
            raise CeraClosedError("adapter")
        return self._a


# ---- sessions ------------------------------------------------------------------------------


class GenerateResult:
    """What Session.generate did: the generated tokens, their text (bytes, as cera streamed it:
    a stop string and what follows it left out), and why it ended ("stop", "length")."""

    def __init__(self, tokens: List[int], text: bytes, finish_reason: str):
        self.tokens = tokens
        self.text = text
        self.finish_reason = finish_reason

    def __repr__(self) -> str:
        return "GenerateResult(%d tokens, %r, %s)" % (len(self.tokens), self.text[:40], self.finish_reason)


class Session(Closable):
    """One timeline of an engine (cera_session): evaluate tokens, sample, generate.

    Keyword arguments set the sampler (cera_sampler_params' fields: temp, top_k, top_p, min_p,
    typical_p, repeat_penalty, freq_penalty, presence_penalty, penalty_last_n, seed, and
    logit_bias {token: bias}); cera's defaults are llama.cpp's (temp 0.8, top_k 40, ...).
    """

    def __init__(self, engine: Engine, _handle: Optional[int] = None, **sampler: Any):
        self._s = None
        self.engine = engine
        self._lock = threading.RLock()
        self._adapters: Dict[int, Adapter] = {}
        if _handle is None:
            sp = _lib.default_params("session")
            sp.sampler, self._bias = sampler_params(**sampler)
            out = c_void_p()
            err = _lib.Error()
            check(lib.cera_session_create(engine._handle(), byref(sp), byref(out), byref(err)), err)
            self._s = out.value
        else:
            self._s = _handle
        engine._adopt(self)

    # -- lifetime
    def close(self) -> None:
        """Frees the session (its KV blocks go back to the engine's pool)."""
        with self._lock:
            s, self._s = self._s, None
            if s is not None:
                lib.cera_session_free(s)
            self._adapters.clear()

    @property
    def closed(self) -> bool:
        return self._s is None

    def _handle(self) -> int:
        s = self._s
        if s is None:
            raise CeraClosedError("session")
        return s

    # -- timeline
    @property
    def n_past(self) -> int:
        """Evaluated tokens (a token generate streamed last is not evaluated yet)."""
        with self._lock:
            return lib.cera_session_n_past(self._handle())

    @property
    def tokens(self) -> List[int]:
        """The evaluated tokens of the timeline."""
        with self._lock:
            s = self._handle()
            n = lib.cera_session_n_past(s)
            p = lib.cera_session_tokens(s)
            return list(p[:n]) if n else []

    def eval(self, tokens: TokenList, all_logits: bool = False) -> None:
        """Appends tokens and evaluates them (one cera_session_eval)."""
        with self._lock:
            s = self._handle()
            buf = _tokens(tokens, self.engine._n_vocab)
            err = _lib.Error()
            check(lib.cera_session_eval(s, buf, len(buf), bool(all_logits), byref(err)), err)

    def logits(self, i: int = -1) -> Optional[List[float]]:
        """The logits of position i of the last eval (-1: the last), or None when not kept."""
        with self._lock:
            p = lib.cera_session_logits(self._handle(), _int(i, "i"))
            if not p:
                return None
            return p[:self.engine._n_vocab]

    def sample(self) -> int:
        """Samples the next token (not appended); -1 when there is nothing to sample from."""
        with self._lock:
            return lib.cera_session_sample(self._handle())

    def set_sampler(self, logit_bias: Optional[Dict[int, float]] = None, **kw: Any) -> None:
        """Replaces the sampler chain (fields as in the constructor; the rest cera's defaults)."""
        sp, bias = sampler_params(logit_bias=logit_bias, **kw)
        with self._lock:
            err = _lib.Error()
            check(lib.cera_session_set_sampler(self._handle(), byref(sp), byref(err)), err)
            self._bias = bias

    def truncate(self, n_keep: int = 0) -> None:
        """Drops every token at positions >= n_keep (0 clears the session)."""
        with self._lock:
            err = _lib.Error()
            check(lib.cera_session_truncate(self._handle(), _int(n_keep, "n_keep"), byref(err)), err)

    def shift(self, n_keep: int, n_discard: int) -> None:
        """Context shift: drops n_discard positions after the first n_keep."""
        with self._lock:
            err = _lib.Error()
            check(lib.cera_session_shift(self._handle(), _int(n_keep, "n_keep"), _int(n_discard, "n_discard"),
                                         byref(err)), err)

    def fork(self) -> "Session":
        """A new session continuing this one's timeline (KV blocks shared until written)."""
        with self._lock:
            out = c_void_p()
            err = _lib.Error()
            check(lib.cera_session_fork(self._handle(), byref(out), byref(err)), err)
            s = Session(self.engine, _handle=out.value)
            s._adapters = dict(self._adapters)
            return s

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the timeline to a file (cera_session_save)."""
        with self._lock:
            err = _lib.Error()
            check(lib.cera_session_save(self._handle(), os.fsencode(path), byref(err)), err)

    def load(self, path: Union[str, os.PathLike]) -> None:
        """Replaces the timeline with a saved one (cera_session_load)."""
        with self._lock:
            err = _lib.Error()
            check(lib.cera_session_load(self._handle(), os.fsencode(path), byref(err)), err)

    # -- grammars
    def set_grammar(self, gbnf: Optional[str], triggers: Sequence[Union[str, int]] = ()) -> None:
        """Constrains sampling by a GBNF grammar (None clears it); with triggers (words or token
        ids) the grammar is lazy: free until one of them is sampled."""
        with self._lock:
            s = self._handle()
            err = _lib.Error()
            g = _text(gbnf, "gbnf") if gbnf is not None else None
            if not triggers:
                check(lib.cera_session_set_grammar(s, g, len(g) if g else 0, byref(err)), err)
                return
            arr = (_lib.GrammarTrigger * len(triggers))()
            for i, t in enumerate(triggers):
                if isinstance(t, (str, bytes)):
                    arr[i].word = _text(t, "trigger")
                    arr[i].token = -1
                else:
                    arr[i].word = None
                    arr[i].token = _int(t, "trigger token")
            check(lib.cera_session_set_grammar_lazy(s, g, len(g) if g else 0, arr, len(triggers), byref(err)), err)

    def set_json_schema(self, schema: Optional[Union[str, Dict[str, Any], bool]]) -> None:
        """Constrains sampling to JSON matching a JSON Schema (a dict or its text); None: any
        JSON object."""
        with self._lock:
            s = self._handle()
            err = _lib.Error()
            text = None if schema is None else _schema_text(schema)
            check(lib.cera_session_set_json_schema(s, text, len(text) if text else 0, byref(err)), err)

    @property
    def grammar_state(self) -> GrammarState:
        with self._lock:
            return GrammarState(lib.cera_session_grammar_state(self._handle()))

    # -- adapters
    def set_adapter(self, adapter: Adapter, scale: float = 1.0) -> None:
        """Attaches an adapter at a scale (or changes its scale)."""
        if not isinstance(adapter, Adapter):
            raise bad_arg("adapter must be a cera.Adapter")
        with self._lock:
            err = _lib.Error()
            check(lib.cera_session_set_adapter(self._handle(), adapter._handle(), _num(scale, "scale"), byref(err)),
                  err)
            self._adapters[id(adapter)] = adapter

    def remove_adapter(self, adapter: Optional[Adapter] = None) -> bool:
        """Detaches one adapter, or all of them (None); False when it was not attached."""
        with self._lock:
            s = self._handle()
            if adapter is None:
                self._adapters.clear()
                return bool(lib.cera_session_remove_adapter(s, None))
            if not isinstance(adapter, Adapter):
                raise bad_arg("adapter must be a cera.Adapter")
            self._adapters.pop(id(adapter), None)
            return bool(lib.cera_session_remove_adapter(s, adapter._handle()))

    @property
    def n_adapters(self) -> int:
        with self._lock:
            return lib.cera_session_n_adapters(self._handle())

    # -- embeddings
    def embed(self, tokens: TokenList, pooling: Union[str, int] = "model", normalize: int = 2) -> List[List[float]]:
        """Evaluates tokens for embeddings (appended to the timeline): one vector per token
        (pooling "none") or one pooled vector, in a list; normalize as cera_embd_normalize."""
        with self._lock:
            s = self._handle()
            pool = _choice(pooling, _POOLING_NAMES, "pooling")
            if pool == Pooling.MODEL:
                pool = int(self.engine.pooling)
            buf = _tokens(tokens, self.engine._n_vocab)
            if not len(buf):
                raise bad_arg("embed: no tokens")
            d = self.engine.n_embd
            rows = len(buf) if pool == Pooling.NONE else 1
            out = (c_float * (rows * d))()
            err = _lib.Error()
            check(lib.cera_session_embed(s, buf, len(buf), pool, _int(normalize, "normalize", -1), out, byref(err)),
                  err)
            return [out[r * d:(r + 1) * d] for r in range(rows)]

    # -- generation
    def generate(self, prompt: Optional[TokenList] = None, *, max_tokens: int = -1, stop: Sequence[str] = (),
                 ignore_eog: bool = False, on_token: Optional[Callable[[int, bytes], Optional[bool]]] = None,
                 context_shift: bool = False, n_keep: int = 0,
                 cancel: Optional[threading.Event] = None) -> GenerateResult:
        """Evaluates the prompt (if any) and generates (cera_generate) until max_tokens (-1: no
        limit), an end-of-generation token, a stop string, on_token returning False, or the
        grammar's end. on_token(token, text) is called for each token with the text that is
        ready (bytes; token -1 for held-back text at the end). An exception raised by on_token
        stops generation and is raised here. Returns a GenerateResult."""
        with self._lock:
            return self._generate(prompt, max_tokens, stop, ignore_eog, on_token, context_shift, n_keep, cancel)

    def _generate(self, prompt, max_tokens, stop, ignore_eog, on_token, context_shift, n_keep, cancel):
        s = self._handle()
        max_tokens = _int(max_tokens, "max_tokens", -1)
        if isinstance(stop, (str, bytes)):
            stop = [stop]
        stops = [_text(x, "stop") for x in stop]
        for x in stops:
            if not x or b"\0" in x:
                raise bad_arg("stop strings must be non-empty and hold no NUL")
        ptoks = _tokens(prompt, self.engine._n_vocab, "prompt") if prompt is not None else None
        gp = _lib.default_params("generate")
        gp.n_predict = max_tokens
        stop_arr = (c_char_p * max(1, len(stops)))(*stops)
        gp.stop = stop_arr
        gp.n_stop = len(stops)
        gp.ignore_eog = bool(ignore_eog)
        gp.context_shift = bool(context_shift)
        gp.n_keep = _int(n_keep, "n_keep")
        flag = c_int(0)
        gp.cancel = ctypes.pointer(flag)
        toks: List[int] = []
        chunks: List[bytes] = []
        failure: List[BaseException] = []

        def cb(token, piece, n, user):
            try:
                text = ctypes.string_at(piece, n) if n else b""
                if token >= 0:
                    toks.append(token)
                chunks.append(text)
                if cancel is not None and cancel.is_set():
                    return False
                if on_token is not None:
                    go = on_token(token, text)
                    if go is False:
                        return False
                return True
            except BaseException as e:  # stop cleanly, raise after cera returns
                failure.append(e)
                flag.value = 1
                return False

        ccb = _lib.TokenCallback(cb)
        n_gen = c_int()
        err = _lib.Error()
        st = lib.cera_generate(s, ptoks, len(ptoks) if ptoks is not None else 0, byref(gp), ccb, None,
                               byref(n_gen), byref(err))
        if failure:
            raise failure[0]
        check(st, err)
        text = b"".join(chunks)
        finish = "stop"
        if max_tokens >= 0 and n_gen.value >= max_tokens:
            finish = "length"
        elif lib.cera_session_n_past(s) + 1 >= self.engine.n_ctx and n_gen.value and not context_shift:
            finish = "length"
        if stops and finish == "length":
            full = b"".join(self.engine.token_to_piece(t) for t in toks)
            if any(x in full for x in stops):
                finish = "stop"
        return GenerateResult(toks, text, finish)

    def stream(self, prompt: Optional[TokenList] = None, **kw: Any) -> Iterator[Tuple[int, bytes]]:
        """generate() as an iterator of (token, text) pairs (token -1: held-back text at the
        end); the generation runs in a worker thread and is cancelled when the iterator is
        closed early. The iterator's return value (StopIteration.value) is the GenerateResult."""
        gen = self._stream(prompt, None, **kw)
        try:
            while True:
                token, text, _ = next(gen)
                yield token, text
        except StopIteration as fin:
            return fin.value
        finally:
            gen.close()

    def _stream(self, prompt: Optional[TokenList], annotate: Optional[Callable[[int], Any]],
                **kw: Any) -> Iterator[Tuple[int, bytes, Any]]:
        """stream() yielding (token, text, annotate(token)): annotate runs in the callback,
        while the logits the token was sampled from are the session's last."""
        if "on_token" in kw or "cancel" in kw:
            raise bad_arg("stream() yields the tokens: no on_token or cancel")
        q: "queue.Queue[Any]" = queue.Queue()
        stop_evt = threading.Event()
        done = object()

        def put(token: int, text: bytes) -> bool:
            q.put((token, text, annotate(token) if annotate is not None and token >= 0 else None))
            return not stop_evt.is_set()

        def run() -> None:
            try:
                q.put((done, self.generate(prompt, on_token=put, cancel=stop_evt, **kw), None))
            except BaseException as e:
                q.put((done, e, None))

        self._handle()
        th = threading.Thread(target=run, daemon=True)
        th.start()
        try:
            while True:
                item = q.get()
                if item[0] is done:
                    if isinstance(item[1], BaseException):
                        raise item[1]
                    return item[1]
                yield item
        finally:
            stop_evt.set()
            th.join()


def _schema_text(schema: Union[str, bytes, Dict[str, Any], bool]) -> bytes:
    if isinstance(schema, (dict, bool)):
        return json.dumps(schema).encode()
    return _text(schema, "schema")


def json_schema_to_grammar(schema: Union[str, Dict[str, Any]]) -> str:
    """The GBNF of a JSON Schema, as llama.cpp's json_schema_to_grammar."""
    text = _schema_text(schema)
    out = c_void_p()
    err = _lib.Error()
    check(lib.cera_json_schema_to_grammar(text, len(text), byref(out), byref(err)), err)
    try:
        return ctypes.string_at(out.value).decode()
    finally:
        lib.cera_free(out)


# ---- batches -------------------------------------------------------------------------------


def _locked(sessions: Sequence[Session]) -> List[Any]:
    uniq = sorted({id(s): s for s in sessions}.values(), key=id)
    if len(uniq) != len(sessions):
        raise bad_arg("a session appears twice in the batch")
    return [s._lock for s in uniq]


class _Locks:
    def __init__(self, locks: List[Any]):
        self.locks = locks

    def __enter__(self) -> None:
        for lk in self.locks:
            lk.acquire()

    def __exit__(self, *exc: Any) -> None:
        for lk in reversed(self.locks):
            lk.release()


def _batch_items(engine: Engine, items: Sequence[Any]) -> Tuple[Any, List[Session], List[Any]]:
    sessions: List[Session] = []
    keep: List[Any] = []
    arr = (_lib.BatchItem * max(1, len(items)))()
    for i, it in enumerate(items):
        if isinstance(it, Session):
            it = (it, [])
        if not isinstance(it, (tuple, list)) or not 2 <= len(it) <= 3 or not isinstance(it[0], Session):
            raise bad_arg("batch items are (session, tokens) or (session, tokens, all_logits)")
        s, toks = it[0], it[1]
        if s.engine is not engine:
            raise bad_arg("batch: a session of another engine")
        buf = _tokens(toks, engine._n_vocab)
        keep.append(buf)
        sessions.append(s)
        arr[i].tokens = buf
        arr[i].n_tokens = len(buf)
        arr[i].all_logits = bool(it[2]) if len(it) == 3 else False
    return arr, sessions, keep


def batch_eval(engine: Engine, items: Sequence[Any]) -> None:
    """Evaluates several sessions' tokens together (cera_batch_eval): items are (session,
    tokens) or (session, tokens, all_logits); each session ends as if it had evaluated alone."""
    arr, sessions, keep = _batch_items(engine, items)
    with _Locks(_locked(sessions)):
        for i, s in enumerate(sessions):
            arr[i].session = s._handle()
        err = _lib.Error()
        check(lib.cera_batch_eval(engine._handle(), arr, len(sessions), byref(err)), err)


def batch_sample(sessions: Sequence[Session]) -> List[int]:
    """Samples the next token of each session (cera_batch_sample)."""
    with _Locks(_locked(sessions)):
        arr = (c_void_p * max(1, len(sessions)))(*[s._handle() for s in sessions])
        out = (_lib.c_token * max(1, len(sessions)))()
        err = _lib.Error()
        check(lib.cera_batch_sample(arr, len(sessions), out, byref(err)), err)
        return list(out[:len(sessions)])


def batch_embed(engine: Engine, items: Sequence[Any], pooling: Union[str, int] = "model",
                normalize: int = 2) -> List[List[List[float]]]:
    """Embeddings of several sessions' tokens in shared forward calls (cera_batch_embed): for
    each item, its vectors (one per token with pooling "none", else one)."""
    pool = _choice(pooling, _POOLING_NAMES, "pooling")
    if pool == Pooling.MODEL:
        pool = int(engine.pooling)
    arr, sessions, keep = _batch_items(engine, items)
    d = engine.n_embd
    outs = []
    for i in range(len(sessions)):
        if arr[i].n_tokens == 0:
            raise bad_arg("batch_embed: an item without tokens")
        rows = arr[i].n_tokens if pool == Pooling.NONE else 1
        outs.append((c_float * (rows * d))())
    ptrs = (POINTER(c_float) * max(1, len(outs)))(*[ctypes.cast(o, POINTER(c_float)) for o in outs])
    with _Locks(_locked(sessions)):
        for i, s in enumerate(sessions):
            arr[i].session = s._handle()
        err = _lib.Error()
        check(lib.cera_batch_embed(engine._handle(), arr, len(sessions), pool, _int(normalize, "normalize", -1),
                                   ptrs, byref(err)), err)
    return [[o[r * d:(r + 1) * d] for r in range(len(o) // d)] for o in outs]


# ---- chat ----------------------------------------------------------------------------------

_ROLES = ("system", "developer", "user", "assistant", "tool")
_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", "refusal",
                 "function_call")


def _messages(messages: Sequence[Dict[str, Any]]) -> Tuple[Any, List[Any]]:
    """cera_chat_message[] from OpenAI messages, as `cera serve` reads them: text parts joined
    by newlines, "developer" as "system"."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise bad_arg("messages must be a non-empty list of dicts")
    arr = (_lib.ChatMessage * len(messages))()
    keep: List[Any] = []

    def s(v: Any, what: str) -> Optional[bytes]:
        if v is None:
            return None
        if not isinstance(v, str):
            raise bad_arg("a message's %s must be a string" % what)
        b = v.encode()
        keep.append(b)
        return b

    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_arg("each message must be a dict")
        for k in m:
            if k not in _MESSAGE_KEYS:
                raise bad_arg("unknown message field %r" % k)
        role = m.get("role")
        if role not in _ROLES:
            raise bad_arg("unknown message role %r" % (role,))
        arr[i].role = s("system" if role == "developer" else role, "role")
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for p in content:
                if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                    raise bad_arg("content parts other than {'type': 'text', 'text': ...} are not supported")
                parts.append(p["text"])
            content = "\n".join(parts)
        arr[i].content = s(content, "content")
        arr[i].name = s(m.get("name"), "name")
        arr[i].tool_call_id = s(m.get("tool_call_id"), "tool_call_id")
        arr[i].reasoning_content = s(m.get("reasoning_content"), "reasoning_content")
        calls = m.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise bad_arg("a message's tool_calls must be a list")
            arr[i].tool_calls = s(json.dumps(calls), "tool_calls")
    return arr, keep


class ChatTemplate(Closable):
    """A chat template (cera_chat_template): renders conversations with tools as the model was
    trained, and splits replies into reasoning, content and tool calls."""

    def __init__(self, engine: Optional[Engine], name: Optional[str] = None, text: Optional[str] = None):
        self._t = None
        self.engine = engine
        out = c_void_p()
        err = _lib.Error()
        tb = _text(text, "template text") if text is not None else None
        nb = _text(name, "template name") if name is not None else None
        e = engine._handle() if engine is not None else None
        if e is None and tb is None:
            raise bad_arg("a chat template needs an engine or a text")
        check(lib.cera_chat_template_open(e, nb, tb, len(tb) if tb else 0, byref(out), byref(err)), err)
        self._t = out.value
        if engine is not None:
            engine._adopt(self)

    def close(self) -> None:
        t, self._t = self._t, None
        if t is not None:
            lib.cera_chat_template_free(t)

    def _handle(self) -> int:
        if self._t is None:
            raise CeraClosedError("chat template")
        return self._t

    @property
    def format(self) -> ChatFormat:
        """How the template's replies carry tool calls."""
        return ChatFormat(lib.cera_chat_template_format(self._handle()))

    def render(self, messages: Sequence[Dict[str, Any]], tools: Optional[Sequence[Dict[str, Any]]] = None,
               extra: Optional[Dict[str, Any]] = None, add_generation_prompt: bool = True, now: int = 0) -> str:
        """The prompt text of a conversation (OpenAI messages and tools)."""
        arr, keep = _messages(messages)
        p = _lib.default_params("chat")
        tj = json.dumps(list(tools)).encode() if tools else None
        ej = json.dumps(extra).encode() if extra else None
        if extra is not None and not isinstance(extra, dict):
            raise bad_arg("extra must be a dict")
        p.tools = tj
        p.extra = ej
        p.add_generation_prompt = bool(add_generation_prompt)
        p.now = _int(now, "now")
        out = c_void_p()
        n = c_size_t()
        err = _lib.Error()
        check(lib.cera_chat_render(self._handle(), arr, len(messages), byref(p), byref(out), byref(n), byref(err)),
              err)
        try:
            return ctypes.string_at(out.value, n.value).decode("utf-8", "replace")
        finally:
            lib.cera_free(out)

    def parse(self, text: Union[str, bytes], format: Optional[int] = None) -> Dict[str, Any]:
        """A reply split into {"content", "reasoning", "tool_calls": [{"id", "name",
        "arguments"}]} by the template's format (or the given one)."""
        b = _text(text, "text")
        rep = _lib.ChatReply()
        err = _lib.Error()
        if format is None:
            st = lib.cera_chat_parse(self._handle(), b, len(b), byref(rep), byref(err))
        else:
            st = lib.cera_chat_parse_as(int(ChatFormat(format)), b, len(b), byref(rep), byref(err))
        check(st, err)
        try:
            calls = [{"id": rep.tool_calls[i].id.decode() if rep.tool_calls[i].id else None,
                      "name": rep.tool_calls[i].name.decode("utf-8", "replace"),
                      "arguments": rep.tool_calls[i].arguments.decode("utf-8", "replace")}
                     for i in range(rep.n_tool_calls)]
            return {"content": (rep.content or b"").decode("utf-8", "replace"),
                    "reasoning": rep.reasoning.decode("utf-8", "replace") if rep.reasoning else None,
                    "tool_calls": calls}
        finally:
            lib.cera_chat_reply_free(byref(rep))

    def tool_grammar(self, tools: Sequence[Dict[str, Any]], choice: Union[str, int] = "auto",
                     function: Optional[str] = None, parallel: bool = False
                     ) -> Tuple[Optional[str], List[Union[str, int]], ChatFormat]:
        """The grammar of the template's tool calls for the tools: (gbnf or None, lazy
        triggers, the format to parse the reply with)."""
        c = _choice(choice, {"auto": ToolChoice.AUTO, "required": ToolChoice.REQUIRED, "none": ToolChoice.NONE},
                    "tool_choice")
        tj = json.dumps(list(tools)).encode()
        g = _lib.ChatGrammar()
        err = _lib.Error()
        fn = _text(function, "function") if function is not None else None
        check(lib.cera_chat_tool_grammar(self._handle(), tj, c, fn, bool(parallel), byref(g), byref(err)), err)
        try:
            triggers: List[Union[str, int]] = []
            for i in range(g.n_triggers):
                t = g.triggers[i]
                triggers.append(t.word.decode() if t.word is not None else int(t.token))
            return (g.gbnf.decode() if g.gbnf else None), triggers, ChatFormat(g.format)
        finally:
            lib.cera_chat_grammar_free(byref(g))
