"""`pip install ./python` for real: the package builds libcera with CMake (scikit-build-core),
installs into a scratch folder, and runs from there without CERA_LIBRARY."""
import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import ROOT, STORIES, need


def test_pip_install(tmp_path):
    need(STORIES)
    if importlib.util.find_spec("scikit_build_core") is None:
        pytest.skip("scikit-build-core is not installed (scripts/setup.sh installs it)")
    target = tmp_path / "site"
    env = dict(os.environ)
    env.pop("CERA_LIBRARY", None)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                        "--no-cache-dir", "--break-system-packages", "--target", str(target), os.path.join(ROOT, "python")],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (target / "cera" / "libcera.so").exists()
    code = ("import cera; from cera import Llama\n"
            "assert cera._lib.library_path().startswith(%r)\n"
            "llm = Llama(%r, n_ctx=128, verbose=False)\n"
            "print(llm('Once upon a time', max_tokens=8, temperature=0)['choices'][0]['text'])\n" % (str(target), STORIES))
    env["PYTHONPATH"] = str(target)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(tmp_path),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(",")  # stories260K's greedy continuation: ", there was ..."
