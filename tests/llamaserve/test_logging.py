"""Quiet by default: llama.cpp's log reaches stderr only with verbose=True or when the application
configures logging; llamaserve's log carries llama.cpp's warnings tagged with the model alias.

Each case runs in a child interpreter, so its stderr is exactly what a user would see.
"""

from __future__ import annotations

import re

import httpx
import pytest
from gguf import GGUFValueType as VT
from gguf_files import Layout, encode_kv
from isolation import run_python

# llama.cpp warns about this while loading: "load: bad special token: 'tokenizer.ggml.padding_token_id' ..."
BAD_TOKEN_WARNING = "bad special token"


@pytest.fixture(scope="module")
def warning_model(tiny_model_path, tmp_path_factory):
    """The tiny model with an out-of-range padding token id, so that loading it logs a warning."""
    path = tmp_path_factory.mktemp("logging") / "warns.gguf"
    path.write_bytes(Layout(tiny_model_path).rebuild(
        extra=[encode_kv("tokenizer.ggml.padding_token_id", VT.UINT32, 4294967295)]))
    return path


def _generate(path, verbose: str, setup: str = "") -> str:
    return f"""
        {setup}
        from llamacore import Llama
        llm = Llama({str(path)!r}, n_ctx=128, n_threads=2, verbose={verbose})
        out = llm("Hello", max_tokens=4, temperature=0)
        assert out["usage"]["completion_tokens"] >= 1
        print("ok")
    """


def test_quiet_by_default_writes_nothing_to_stderr(warning_model):
    proc = run_python(_generate(warning_model, "False"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert proc.stderr == ""


def test_low_level_model_is_quiet_too(warning_model):
    proc = run_python(f"""
        import llamacore
        model = llamacore.Model({str(warning_model)!r})
        ctx = llamacore.Context(model, n_ctx=64)
        print(len(model.tokenize("Hello")) > 0)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_warnings_reach_the_applications_logging(warning_model):
    setup = "import logging; logging.basicConfig(format='%(levelname)s %(name)s: %(message)s')"
    proc = run_python(_generate(warning_model, "False", setup))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if BAD_TOKEN_WARNING in line]
    assert lines and all(line.startswith("WARNING llamacore.llama_cpp: load: ") for line in lines), proc.stderr
    assert "llama_model_loader" not in proc.stderr          # info lines only when verbose


def test_verbose_shows_llama_cpp_log_as_written(warning_model):
    proc = run_python(_generate(warning_model, "True"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    # llama.cpp's own text, not wrapped in logging's "LEVEL:name:" prefix
    assert any(line.startswith("llama_model_loader: loaded meta data with") for line in lines), proc.stderr
    assert any(line.startswith("load: " + BAD_TOKEN_WARNING) for line in lines), proc.stderr
    assert any(line.startswith("llama_context: n_ctx") for line in lines), proc.stderr
    assert not any(line.startswith(("INFO:", "WARNING:")) for line in lines)


def test_verbose_then_quiet_again(warning_model):
    proc = run_python(f"""
        import sys
        from llamacore import Llama
        Llama({str(warning_model)!r}, n_ctx=64, verbose=True)
        sys.stderr.write("--- quiet from here ---\\n")
        Llama({str(warning_model)!r}, n_ctx=64, verbose=False)
    """)
    assert proc.returncode == 0, proc.stderr
    before, after = proc.stderr.split("--- quiet from here ---\n")
    assert BAD_TOKEN_WARNING in before
    assert after == ""


@pytest.mark.server
@pytest.mark.slow
def test_llamaserve_logs_llama_cpp_warnings_with_the_alias(warning_model, tmp_path):
    from server import ServerProcess

    config = {"log_level": "info", "models": [{"alias": "noisy", "model": str(warning_model), "n_ctx": 128}]}
    server = ServerProcess(config, tmp_path).start()
    try:
        reply = httpx.post(server.base_url + "/v1/completions", timeout=60,
                           json={"model": "noisy", "prompt": "Hello", "max_tokens": 2})
        assert reply.status_code == 200, reply.text
    finally:
        server.stop()
    lines = [line for line in server.log_path.read_text().splitlines() if BAD_TOKEN_WARNING in line]
    assert lines, server.log()
    # the load ran for a request: its id comes first
    assert all(re.search(r" WARNING llamacore\.llama_cpp: \[request req_\w+\] \[noisy\] load: ", line)
               for line in lines), lines


@pytest.mark.server
@pytest.mark.slow
def test_context_warnings_are_about_each_sequence(tiny_model_path, tmp_path):
    """No warning for the defaults (llama.cpp's "n_ctx_seq (8192) > n_ctx_train (2048)" took the
    unified KV pool of 4 sequences for one); ours for an n_ctx past training; the default n_ctx at
    most the training context, read from the header."""
    from server import ServerProcess
    from tiny_models import TinyModelSpec, write_model

    short = write_model(tmp_path / "short.gguf", TinyModelSpec(n_ctx_train=256))
    config = {"log_level": "info", "models": [
        {"alias": "chat", "model": str(tiny_model_path)},
        {"alias": "long", "model": str(tiny_model_path), "n_ctx": 4096, "isolation": "process"},
        {"alias": "short", "model": str(short)}]}
    server = ServerProcess(config, tmp_path).start()
    try:
        for alias in ("chat", "long", "short"):
            reply = server.post("/v1/completions", json={"model": alias, "prompt": "Hello", "max_tokens": 2})
            assert reply.status_code == 200, reply.text
        assert server.get("/props", params={"model": "short"}).json()["default_generation_settings"]["n_ctx"] == 256
        assert server.get("/props", params={"model": "chat"}).json()["default_generation_settings"]["n_ctx"] == 2048
    finally:
        server.stop()
    log = server.log_path.read_text()
    assert "n_ctx_seq (" not in log, log
    warned = [line for line in log.splitlines() if "n_ctx_train" in line]
    assert len(warned) == 1, warned
    assert re.search(r" WARNING llamaserve\.models\.factory: .*model long: n_ctx 4096 is beyond "
                     r"the 2048 tokens the model was trained on \(n_ctx_train\)", warned[0]), warned


@pytest.mark.slow
def test_request_ids_are_echoed_or_made_and_tag_the_requests_log_lines(tiny_model_path, tmp_path):
    from server import ServerProcess

    config = {"log_level": "info", "api_key": "k",
              "models": [{"alias": "m", "model": str(tiny_model_path), "n_ctx": 128}]}
    server = ServerProcess(config, tmp_path).start()
    auth = {"Authorization": "Bearer k"}
    try:
        reply = httpx.post(server.base_url + "/v1/completions", timeout=60,
                           headers={**auth, "x-request-id": "client-7"},
                           json={"model": "m", "prompt": "Hello", "max_tokens": 2})
        assert reply.status_code == 200 and reply.headers["x-request-id"] == "client-7"
        made = {httpx.get(server.base_url + "/v1/models", headers=auth).headers["x-request-id"] for _ in range(3)}
        assert len(made) == 3 and all(rid.startswith("req_") for rid in made)
        for bad in ("has spaces", "x" * 200, "new\u00e9line"):
            got = httpx.get(server.base_url + "/v1/models", headers={**auth, "x-request-id": bad.encode()})
            assert got.headers["x-request-id"].startswith("req_")
        refused = httpx.get(server.base_url + "/v1/models", headers={"x-request-id": "no-key"})
        assert refused.status_code == 401 and refused.headers["x-request-id"] == "no-key"
    finally:
        server.stop()
    loaded = [line for line in server.log_path.read_text().splitlines() if "loaded m in" in line]
    assert loaded and all("[request client-7] loaded m in" in line for line in loaded), server.log()
