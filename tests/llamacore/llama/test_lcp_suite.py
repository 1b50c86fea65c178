"""The drop-in check: llama-cpp-python's own high-level tests, unchanged, run against llamacore.

The four high-level test files of the pinned llama-cpp-python sdist (the one the build downloads and
caches to take llama.cpp from: vendor/fetch.py) are extracted to a temporary folder and run in a child
pytest with the `lcp_suite` plugin (tests/support/lcp_suite.py), which makes `import llama_cpp` resolve to
llamacore. Skipped there, each with its reason: tests calling llama-cpp-python's low-level ctypes API,
and tests needing a Hugging Face model with no local stand-in. Everything else must pass.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from lcp_real import extract, sdist_path

pytestmark = pytest.mark.slow

FILES = ("test_llama.py", "test_llama_chat_format.py", "test_llama_grammar.py", "test_llama_speculative.py")
# test_llama.py opens this vocabulary by a path relative to the sdist's root
VOCAB = "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf"
# what the test files import besides llama_cpp
TEST_DEPS = ("numpy", "scipy", "huggingface_hub", "jinja2")
# the passes with ../shared/models present: 26 tests, 14 skipped (2 low-level API, 12 hub models
# without a stand-in); raise it when more pass
MIN_PASSED = 12


def outcomes(junit: Path) -> dict[str, str]:
    """test id (tests/test_x.py::name[params]) -> passed / failed: message / skipped: reason."""
    out = {}
    for case in ET.parse(junit).iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        # a file that failed to import is reported with no classname and the module as its name
        test_id = classname.replace(".", "/") + ".py::" + name if classname else name.replace(".", "/") + ".py"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        if bad is not None:
            message = bad.get("message") or ""
            if message == "collection failure":        # the import error is the last line of the text
                lines = [line.strip() for line in (bad.text or "").splitlines() if line.strip()]
                message = lines[-1] if lines else message
            out[test_id] = "failed: " + message[:300].replace("\n", " ")
        elif skipped is not None:
            out[test_id] = "skipped: " + (skipped.get("message") or "")[:300]
        else:
            out[test_id] = "passed"
    return out


def run_suite(root: Path, junit: Path) -> tuple[dict[str, str], subprocess.CompletedProcess]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / 'tests' / 'support'), str(REPO_ROOT),
                                          os.environ.get("PYTHONPATH", "")])}
    # --continue-on-collection-errors: a file that fails to import is an error, the others still run
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "lcp_suite", "-p", "no:cacheprovider",
                           "--continue-on-collection-errors", f"--rootdir={root}", f"--junitxml={junit}",
                           *[f"tests/{name}" for name in FILES]],
                          check=False, cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    assert junit.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return outcomes(junit), proc


def test_lcp_suite(tmp_path, stories_path, minilm_path):
    # (the two fixtures skip this where ../shared/models is absent: they stand in for the hub models)
    archive = sdist_path()
    if not archive.exists():
        pytest.skip(f"the llama-cpp-python sdist is not cached at {archive} (the package build downloads it)")
    absent = [name for name in TEST_DEPS if importlib.util.find_spec(name) is None]
    assert not absent, f"llama-cpp-python's test files import {absent}: install them"
    root = extract(tmp_path, [f"tests/{name}" for name in FILES] + [VOCAB])
    results, proc = run_suite(root, tmp_path / "lcp.xml")

    counts = Counter(outcome.split(":")[0] for outcome in results.values())
    reasons = Counter(outcome.split(": ", 1)[1] for outcome in results.values() if outcome.startswith("skipped"))
    bad = {t: o for t, o in results.items() if o.startswith("failed")}
    report = (f"llama-cpp-python {archive.name}: {counts['passed']} passed, {counts['skipped']} skipped, "
              f"{counts['failed']} failed/errors\nskip reasons:\n"
              + "\n".join(f"  {n} x {reason}" for reason, n in reasons.most_common())
              + ("\nnot passed:\n" + "\n".join(f"  {t}: {o}" for t, o in bad.items()) if bad else ""))
    print(report)
    assert not bad, report + "\n--- child output ---\n" + proc.stdout[-4000:]
    assert counts["passed"] >= MIN_PASSED, report
