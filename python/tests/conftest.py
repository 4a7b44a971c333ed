"""Fixtures of the cera Python tests: where libcera, the `cera` CLI and the models are.

CTest (tests/python/CMakeLists.txt) sets CERA_LIBRARY (the build tree's libcera.so), CERA_CLI,
CERA_SHARED_DIR and CERA_MODELS_DIR; run by hand, the defaults are the checkout's build/ and
models/ and ../shared beside it. Tests whose model is missing skip.
"""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("CERA_LIBRARY", os.path.join(ROOT, "build", "src", "libcera.so"))
CLI = os.environ.get("CERA_CLI", os.path.join(ROOT, "build", "tools", "cera", "cera"))
SHARED = os.environ.get("CERA_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))
MODELS = os.environ.get("CERA_MODELS_DIR", os.path.join(ROOT, "models"))
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
SMOL = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
LORA_A = os.path.join(SHARED, "golden", "lora-stories-a.gguf")
LORA_B = os.path.join(SHARED, "golden", "lora-stories-b.gguf")


def need(path):
    if not os.path.exists(path):
        pytest.skip("%s is missing (scripts/setup.sh fetches the models)" % path)
    return path


def cli(*args, stdin=None):
    """The `cera` CLI's stdout (it must exit 0)."""
    if not os.path.exists(CLI):
        pytest.skip("the cera CLI is not built (%s)" % CLI)
    r = subprocess.run([CLI] + list(args), input=stdin, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


@pytest.fixture(scope="session")
def stories():
    from cera import Llama
    llm = Llama(need(STORIES), n_ctx=256, n_threads=2, verbose=False)
    yield llm
    llm.close()


@pytest.fixture(scope="session")
def smol():
    from cera import Llama
    llm = Llama(need(SMOL), n_ctx=1024, n_threads=2, verbose=False)
    yield llm
    llm.close()
