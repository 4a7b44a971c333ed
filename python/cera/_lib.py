"""The ctypes declarations of include/cera.h and the loading of libcera.

Why ctypes: it is in the standard library, so the binding needs no compile step of its own
and works against any libcera built from the same header (the wheel's, or a build tree's
through CERA_LIBRARY). Foreign calls through a CDLL release the GIL, so evaluations of
different sessions run in parallel from Python threads.

What keeps it honest: the declarations below are a copy of cera.h's structs, enums and
prototypes, so python/tests/test_header.py parses include/cera.h and fails when they drift:
every struct's field names, order and C types (and, compiled with the C compiler, every
offset and size), every enum value, and every CERA_API function's return and argument types.

Params structs are returned by value and start with struct_size. Their *_default_params()
are declared with a return type larger than the struct (``_returned``): a library built from
a newer header with more fields writes them into spare room instead of past the buffer, and
``default_params`` then refuses a struct_size other than the one declared here.
"""
from __future__ import annotations

import ctypes
import enum
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint32, c_uint64, c_void_p)
from typing import Any, Dict, Tuple

# ---- enums ---------------------------------------------------------------------------------


class Status(enum.IntEnum):
    OK = 0
    ERR_INVALID_ARG = 1
    ERR_IO = 2
    ERR_FORMAT = 3
    ERR_UNSUPPORTED = 4
    ERR_NOT_FOUND = 5
    ERR_NO_MEMORY = 6
    ERR_CONTEXT_FULL = 7
    ERR_CANCELLED = 8
    ERR_DEVICE = 9
    ERR_INTERNAL = 10


class KvType(enum.IntEnum):
    AS_K = -1
    F16 = 0
    F32 = 1
    Q8_0 = 2
    BF16 = 3
    Q4_0 = 4


class Device(enum.IntEnum):
    AUTO = 0
    CPU = 1
    CUDA = 2


class GrammarState(enum.IntEnum):
    NONE = 0
    ACTIVE = 1
    COMPLETE = 2
    DEAD_END = 3
    WAITING = 4


class Pooling(enum.IntEnum):
    MODEL = -1
    NONE = 0
    MEAN = 1
    CLS = 2
    LAST = 3


class ChatFormat(enum.IntEnum):
    CONTENT = 0
    HERMES = 1
    LFM2 = 2
    LLAMA3 = 3
    MISTRAL = 4
    GENERIC = 5


class ToolChoice(enum.IntEnum):
    AUTO = 0
    REQUIRED = 1
    NONE = 2


# cera.h's enum type name -> (the Python enum, the prefix of its constants)
ENUMS: Dict[str, Tuple[type, str]] = {
    "cera_status": (Status, "CERA_"),
    "cera_kv_type": (KvType, "CERA_KV_"),
    "cera_device": (Device, "CERA_DEVICE_"),
    "cera_grammar_state": (GrammarState, "CERA_GRAMMAR_"),
    "cera_pooling": (Pooling, "CERA_POOLING_"),
    "cera_chat_format": (ChatFormat, "CERA_CHAT_"),
    "cera_tool_choice": (ToolChoice, "CERA_TOOL_CHOICE_"),
}

c_enum = c_int  # every cera enum is an int-sized C enum
c_token = c_int32

# ---- structs -------------------------------------------------------------------------------

ProgressCallback = CFUNCTYPE(None, c_float, c_void_p)
# (token, piece, len, user) -> go on; piece is not NUL-terminated
TokenCallback = CFUNCTYPE(c_bool, c_token, POINTER(c_char), c_size_t, c_void_p)


class Error(Structure):
    _fields_ = [("status", c_enum), ("message", c_char * 512)]


class EngineParams(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("n_threads", c_int),
        ("n_ctx", c_int),
        ("n_batch", c_int),
        ("kv_type", c_enum),
        ("device", c_enum),
        ("n_seq_max", c_int),
        ("kv_bytes", c_size_t),
        ("progress", ProgressCallback),
        ("progress_user", c_void_p),
        ("kv_type_v", c_enum),
        ("kv_rotation", c_int),
    ]


class LogitBias(Structure):
    _fields_ = [("token", c_token), ("bias", c_float)]


class SamplerParams(Structure):
    _fields_ = [
        ("temp", c_float),
        ("top_k", c_int),
        ("top_p", c_float),
        ("min_p", c_float),
        ("typical_p", c_float),
        ("repeat_penalty", c_float),
        ("freq_penalty", c_float),
        ("presence_penalty", c_float),
        ("penalty_last_n", c_int),
        ("seed", c_uint64),
        ("logit_bias", POINTER(LogitBias)),
        ("n_logit_bias", c_int),
    ]


class SessionParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("sampler", SamplerParams)]


class GenerateParams(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("n_predict", c_int),
        ("stop", POINTER(c_char_p)),
        ("n_stop", c_int),
        ("ignore_eog", c_bool),
        ("cancel", POINTER(c_int)),
        ("context_shift", c_bool),
        ("n_keep", c_int),
        ("spec_ngram", c_int),
        ("draft", c_void_p),
        ("draft_max", c_int),
        ("draft_min", c_int),
        ("n_drafted", POINTER(c_int)),
        ("n_accepted", POINTER(c_int)),
    ]


class GrammarTrigger(Structure):
    _fields_ = [("word", c_char_p), ("token", c_token)]


class BatchItem(Structure):
    _fields_ = [
        ("session", c_void_p),
        ("tokens", POINTER(c_token)),
        ("n_tokens", c_size_t),
        ("all_logits", c_bool),
        ("n_draft", c_int),
    ]


class ChatMessage(Structure):
    _fields_ = [
        ("role", c_char_p),
        ("content", c_char_p),
        ("content_parts", c_char_p),
        ("tool_calls", c_char_p),
        ("tool_call_id", c_char_p),
        ("name", c_char_p),
        ("reasoning_content", c_char_p),
    ]


class ChatParams(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("tools", c_char_p),
        ("extra", c_char_p),
        ("add_generation_prompt", c_bool),
        ("now", c_int64),
    ]


class ToolCall(Structure):
    _fields_ = [("id", c_char_p), ("name", c_char_p), ("arguments", c_char_p)]


class ChatReply(Structure):
    _fields_ = [
        ("content", c_char_p),
        ("reasoning", c_char_p),
        ("tool_calls", POINTER(ToolCall)),
        ("n_tool_calls", c_int),
    ]


class ChatGrammar(Structure):
    _fields_ = [
        ("gbnf", c_char_p),
        ("triggers", POINTER(GrammarTrigger)),
        ("n_triggers", c_size_t),
        ("format", c_enum),
    ]


# cera.h's struct name -> its ctypes Structure
STRUCTS: Dict[str, type] = {
    "cera_error": Error,
    "cera_engine_params": EngineParams,
    "cera_logit_bias": LogitBias,
    "cera_sampler_params": SamplerParams,
    "cera_session_params": SessionParams,
    "cera_generate_params": GenerateParams,
    "cera_grammar_trigger": GrammarTrigger,
    "cera_batch_item": BatchItem,
    "cera_chat_message": ChatMessage,
    "cera_chat_params": ChatParams,
    "cera_tool_call": ToolCall,
    "cera_chat_reply": ChatReply,
    "cera_chat_grammar": ChatGrammar,
}
# cera.h's opaque types: handled as void pointers
OPAQUE = ("cera_engine", "cera_session", "cera_adapter", "cera_chat_template")
# cera.h's function-pointer typedefs
CALLBACKS: Dict[str, Any] = {"cera_token_callback": TokenCallback}


def _returned(struct: type) -> type:
    """A return type with room to spare for a params struct returned by value."""
    return type("Returned_" + struct.__name__, (Structure,), {
        "_fields_": [("value", struct), ("_room", c_char * 1024)],
        "_cera_struct_": struct,
    })


_err = POINTER(Error)
_ptr = c_void_p
_pptr = POINTER(c_void_p)
_toks = POINTER(c_token)

# name -> (restype, argtypes), in cera.h's order
FUNCTIONS: Dict[str, Tuple[Any, list]] = {
    "cera_status_str": (c_char_p, [c_enum]),
    "cera_version": (c_char_p, []),
    "cera_engine_default_params": (_returned(EngineParams), []),
    "cera_engine_open": (c_enum, [c_char_p, POINTER(EngineParams), _pptr, _err]),
    "cera_engine_open_memory": (c_enum, [c_void_p, c_size_t, POINTER(EngineParams), _pptr, _err]),
    "cera_engine_close": (None, [_ptr]),
    "cera_engine_n_vocab": (c_int, [_ptr]),
    "cera_engine_n_ctx": (c_int, [_ptr]),
    "cera_engine_n_ctx_train": (c_int, [_ptr]),
    "cera_engine_arch": (c_char_p, [_ptr]),
    "cera_engine_device": (c_enum, [_ptr]),
    "cera_engine_bos": (c_token, [_ptr]),
    "cera_engine_eos": (c_token, [_ptr]),
    "cera_engine_kv_blocks": (c_bool, [_ptr, POINTER(c_int), POINTER(c_int)]),
    "cera_engine_is_eog": (c_bool, [_ptr, c_token]),
    "cera_tokenize": (c_enum, [_ptr, c_char_p, c_size_t, c_bool, c_bool, _toks, c_size_t, POINTER(c_size_t),
                               _err]),
    "cera_token_to_piece": (c_int, [_ptr, c_token, POINTER(c_char), c_size_t, c_bool]),
    "cera_sampler_default_params": (_returned(SamplerParams), []),
    "cera_session_default_params": (_returned(SessionParams), []),
    "cera_session_create": (c_enum, [_ptr, POINTER(SessionParams), _pptr, _err]),
    "cera_session_free": (None, [_ptr]),
    "cera_session_fork": (c_enum, [_ptr, _pptr, _err]),
    "cera_session_n_past": (c_int, [_ptr]),
    "cera_session_tokens": (_toks, [_ptr]),
    "cera_session_truncate": (c_enum, [_ptr, c_int, _err]),
    "cera_session_shift": (c_enum, [_ptr, c_int, c_int, _err]),
    "cera_session_save": (c_enum, [_ptr, c_char_p, _err]),
    "cera_session_load": (c_enum, [_ptr, c_char_p, _err]),
    "cera_session_file_tokens": (c_enum, [c_char_p, POINTER(c_token), c_size_t, POINTER(c_int), _err]),
    "cera_engine_fingerprint": (c_uint64, [_ptr]),
    "cera_session_eval": (c_enum, [_ptr, _toks, c_size_t, c_bool, _err]),
    "cera_session_logits": (POINTER(c_float), [_ptr, c_int]),
    "cera_session_sample": (c_token, [_ptr]),
    "cera_session_set_sampler": (c_enum, [_ptr, POINTER(SamplerParams), _err]),
    "cera_session_set_grammar": (c_enum, [_ptr, c_char_p, c_size_t, _err]),
    "cera_session_set_grammar_lazy": (c_enum, [_ptr, c_char_p, c_size_t, POINTER(GrammarTrigger), c_size_t, _err]),
    "cera_json_schema_to_grammar": (c_enum, [c_char_p, c_size_t, _pptr, _err]),
    "cera_session_set_json_schema": (c_enum, [_ptr, c_char_p, c_size_t, _err]),
    "cera_session_grammar_state": (c_enum, [_ptr]),
    "cera_batch_eval": (c_enum, [_ptr, POINTER(BatchItem), c_int, _err]),
    "cera_batch_sample": (c_enum, [_pptr, c_int, _toks, _err]),
    "cera_session_draft": (c_int, [_ptr, c_token, c_int, _ptr, c_int, POINTER(c_token), c_int]),
    "cera_session_verify": (c_enum, [_ptr, POINTER(c_token), POINTER(c_int), _err]),
    "cera_engine_n_embd": (c_int, [_ptr]),
    "cera_engine_pooling": (c_enum, [_ptr]),
    "cera_embd_normalize": (c_bool, [POINTER(c_float), c_int, c_int]),
    "cera_embd_pool": (c_enum, [POINTER(c_float), c_size_t, c_int, c_enum, c_int, POINTER(c_float), _err]),
    "cera_batch_embed": (c_enum, [_ptr, POINTER(BatchItem), c_int, c_enum, c_int, POINTER(POINTER(c_float)), _err]),
    "cera_session_embed": (c_enum, [_ptr, _toks, c_size_t, c_enum, c_int, POINTER(c_float), _err]),
    "cera_generate_default_params": (_returned(GenerateParams), []),
    "cera_generate": (c_enum, [_ptr, _toks, c_size_t, POINTER(GenerateParams), TokenCallback, c_void_p,
                               POINTER(c_int), _err]),
    "cera_adapter_load": (c_enum, [_ptr, c_char_p, _pptr, _err]),
    "cera_adapter_free": (None, [_ptr]),
    "cera_adapter_fingerprint": (c_uint64, [_ptr]),
    "cera_session_set_adapter": (c_enum, [_ptr, _ptr, c_float, _err]),
    "cera_session_remove_adapter": (c_bool, [_ptr, _ptr]),
    "cera_session_n_adapters": (c_int, [_ptr]),
    "cera_chat_template_open": (c_enum, [_ptr, c_char_p, c_char_p, c_size_t, _pptr, _err]),
    "cera_chat_template_free": (None, [_ptr]),
    "cera_chat_template_format": (c_enum, [_ptr]),
    "cera_chat_format_name": (c_char_p, [c_enum]),
    "cera_chat_default_params": (_returned(ChatParams), []),
    "cera_chat_render": (c_enum, [_ptr, POINTER(ChatMessage), c_size_t, POINTER(ChatParams), _pptr,
                                  POINTER(c_size_t), _err]),
    "cera_chat_tokenize": (c_enum, [_ptr, c_char_p, c_size_t, POINTER(_toks), POINTER(c_size_t), _err]),
    "cera_chat_parse": (c_enum, [_ptr, c_char_p, c_size_t, POINTER(ChatReply), _err]),
    "cera_chat_parse_as": (c_enum, [c_enum, c_char_p, c_size_t, POINTER(ChatReply), _err]),
    "cera_chat_tool_grammar": (c_enum, [_ptr, c_char_p, c_enum, c_char_p, c_bool, POINTER(ChatGrammar), _err]),
    "cera_chat_grammar_free": (None, [POINTER(ChatGrammar)]),
    "cera_chat_reply_free": (None, [POINTER(ChatReply)]),
    "cera_free": (None, [c_void_p]),
}

# ---- loading -------------------------------------------------------------------------------


def library_path() -> str:
    """Where libcera is taken from: $CERA_LIBRARY (a build tree's, for the tests), else the
    copy installed inside this package."""
    env = os.environ.get("CERA_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libcera.so", "libcera.dylib", "cera.dll"):
        p = os.path.join(here, name)
        if os.path.exists(p):
            return p
    raise ImportError("cera: libcera was not found next to the module (%s) and CERA_LIBRARY is not set; "
                      "install the package with `pip install ./python` from the cera checkout" % here)


def _load() -> ctypes.CDLL:
    path = library_path()
    lib = ctypes.CDLL(path)  # CDLL, not PyDLL: calls release the GIL
    for name, (restype, argtypes) in FUNCTIONS.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            raise ImportError("cera: %s does not export %s (built from another cera.h?)" % (path, name))
        f.restype = restype
        f.argtypes = argtypes
    return lib


lib = _load()


def default_params(name: str) -> Any:
    """The C default of a params struct (cera_<name>_default_params()), checked to be the
    struct this module declares."""
    value = getattr(lib, "cera_%s_default_params" % name)().value
    size = getattr(value, "struct_size", None)
    if size is not None and size != ctypes.sizeof(type(value)):
        raise ImportError("cera: libcera's cera_%s_params has %d bytes, this module's %d: the library and "
                          "the Python package come from different versions of cera.h"
                          % (name, size, ctypes.sizeof(type(value))))
    return value
