"""cera: Python bindings of the cera LLM inference engine (include/cera.h, through ctypes).

Two layers:
  - ``Llama``: llama-cpp-python's high-level API (completions, chat with tools and JSON
    schemas, embeddings, tokenize, states), so ``from cera import Llama`` runs code written
    for ``from llama_cpp import Llama``;
  - cera's own: ``Engine`` (a loaded model), ``Session`` (one timeline), ``batch_eval`` /
    ``batch_sample`` / ``batch_embed`` across sessions, ``Adapter`` (LoRA, attached and
    detached per session), ``ChatTemplate``.

Every failure raises ``CeraError`` (``.status``: cera's status, ``.message``: its message);
invalid arguments raise ``CeraValueError``, which is also a ``ValueError``. Calls into the
library release the GIL, so sessions of one engine run in parallel from threads.
"""
from ._lib import ChatFormat, Device, GrammarState, KvType, Pooling, Status, ToolChoice
from .engine import (Adapter, ChatTemplate, Engine, GenerateResult, Session, batch_embed, batch_eval, batch_sample,
                     json_schema_to_grammar, version)
from .errors import CeraClosedError, CeraError, CeraValueError
from .llama import (LLAMA_DEFAULT_SEED, LLAMA_POOLING_TYPE_CLS, LLAMA_POOLING_TYPE_LAST, LLAMA_POOLING_TYPE_MEAN,
                    LLAMA_POOLING_TYPE_NONE, LLAMA_POOLING_TYPE_UNSPECIFIED, Llama, LlamaGrammar, LlamaState)

__version__ = version()
__all__ = ["Llama", "LlamaGrammar", "LlamaState", "Engine", "Session", "Adapter", "ChatTemplate", "GenerateResult",
           "batch_eval", "batch_sample", "batch_embed", "json_schema_to_grammar", "version", "CeraError",
           "CeraValueError", "CeraClosedError", "Status", "KvType", "Device", "GrammarState", "Pooling", "ChatFormat",
           "ToolChoice", "LLAMA_DEFAULT_SEED", "LLAMA_POOLING_TYPE_UNSPECIFIED", "LLAMA_POOLING_TYPE_NONE",
           "LLAMA_POOLING_TYPE_MEAN", "LLAMA_POOLING_TYPE_CLS", "LLAMA_POOLING_TYPE_LAST"]
