"""llamaserve's Hugging Face Hub models: ``model: hf://owner/repo/file-glob.gguf`` (and the projector
the same way), checked at startup without the network and fetched when the model first loads.

The server tests run real llamaserve processes against the loopback stand-in for the Hub
(hub_standin), then again offline from the cache the first one filled.
"""

from __future__ import annotations

import base64
import os
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
from helpers import N_THREADS, problems, write
from hub_repo import REPO_ID, tiny_repo
from hub_standin import HubStandIn
from tiny_vision import IMAGE_TOKENS, image_bytes, pattern_image

from llamaserve.cli import build_parser, config_from_args
from llamaserve.config.hub import HubFile, quant_glob
from llamaserve.config.parse import load_config

HUB_YAML = f"""
models:
  - model: hf://{REPO_ID}/tiny-F32.gguf
  - model: hf://{REPO_ID}/split/*-00001-of-*.gguf
    mmproj: hf://{REPO_ID}/mmproj-*.gguf
  - alias: local
    model: models/model.gguf
    clip_model_path: hf://{REPO_ID}/sub/dir/mmproj.gguf
"""


def test_hub_references_are_checked_but_not_fetched_at_startup(work):
    first, split, local = load_config(write(work, "hub.yaml", HUB_YAML)).models
    assert (first.alias, first.model) == ("tiny-F32", HubFile(REPO_ID, "tiny-F32.gguf"))
    assert split.alias == f"{REPO_ID}/split/*-00001-of-*.gguf"     # a glob names no file: the reference
    assert split.clip_model_path == HubFile(REPO_ID, "mmproj-*.gguf")
    assert str(split.model) == f"hf://{REPO_ID}/split/*-00001-of-*.gguf"
    assert local.model == work / "models/model.gguf"
    assert local.clip_model_path == HubFile(REPO_ID, "sub/dir/mmproj.gguf")
    assert first.base_key() != split.base_key()


def test_malformed_hub_references_are_config_errors(work):
    path = write(work, "bad-hub.yaml", f"""
models:
  - model: hf://acme
  - model: hf://acme/tiny-GGUF/
  - model: hf://acme/tiny..GGUF/x.gguf
  - model: models/model.gguf
    clip_model_path: hf://{REPO_ID}
""")
    found = problems(path)
    expected = [
        "models[0].model: expected hf://owner/repo/file.gguf (the file a name or glob in the repository) "
        "or hf://owner/repo:QUANT, got 'hf://acme'",
        "models[1].model: expected hf://owner/repo/file.gguf",
        "models[2].model: 'hf://acme/tiny..GGUF/x.gguf' does not name a Hugging Face Hub repository: ",
        f"models[3].clip_model_path: expected hf://owner/repo/file.gguf (the file a name or glob in the "
        f"repository), got 'hf://{REPO_ID}'",
    ]
    for line in expected:
        assert sum(p.startswith(f"{path}: {line}") for p in found) == 1, (line, found)
    assert len(found) == len(expected)


def test_a_quantization_tag_names_the_file_as_llama_server_does(work):
    """hf://owner/repo:QUANT (llama-server's -hf owner/repo:QUANT): the file of that quantization at
    the top of the repository, in any case; Q4_K_M when the tag is left out. Not for projectors."""
    path = write(work, "quant.yaml", f"""
models:
  - model: hf://{REPO_ID}:q8_0
  - model: hf://{REPO_ID}
""")
    tagged, default = load_config(path).models
    assert str(tagged.model) == f"hf://{REPO_ID}:q8_0" and tagged.alias == "tiny-GGUF-q8_0"
    assert str(default.model) == f"hf://{REPO_ID}:Q4_K_M" and default.alias == "tiny-GGUF-Q4_K_M"
    glob = quant_glob("Q4_K_M")
    assert [f for f in ("m-Q4_K_M.gguf", "m-q4_k_m.gguf", "m-Q4_K_S.gguf", "m-Q4_K_M.bin") if fnmatchcase(f, glob)] \
        == ["m-Q4_K_M.gguf", "m-q4_k_m.gguf"]


def test_the_command_line_takes_a_hub_model():
    args = build_parser().parse_args(["--model", f"hf://{REPO_ID}/tiny-*32.gguf", "--alias", "tiny"])
    (entry,) = config_from_args(args).models
    assert (entry.alias, entry.model) == ("tiny", HubFile(REPO_ID, "tiny-*32.gguf"))


# -- a real server: downloads on first load, then offline from the cache ----------------------


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_model_path, projector_path):
    return tiny_repo(tmp_path_factory.mktemp("hub-files"), tiny_model_path, projector_path)


@pytest.fixture
def hub(repo):
    with HubStandIn(repo) as standin:
        yield standin


def serve(hub: HubStandIn, hf_home: Path, folder: Path, models: list[dict], offline: bool = False):
    """A llamaserve process serving `models`, its huggingface_hub pointed at `hub`, with
    huggingface_hub's progress bars on though its output is a file (TQDM_POSITION=-1)."""
    from server import ServerProcess

    folder.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith(("HF_", "HUGGINGFACE_"))]:
            mp.delenv(key)
        for key, value in {**hub.variables(hf_home, offline), "TQDM_POSITION": "-1"}.items():
            mp.setenv(key, value)
        return ServerProcess({"defaults": {"n_ctx": 256, "n_threads": N_THREADS}, "models": models}, folder).start()


def complete(server, model: str) -> str:
    r = server.post("/v1/completions", json={"model": model, "prompt": "Once upon a time", "max_tokens": 8,
                                             "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def image_prompt_tokens(server, model: str) -> int:
    uri = "data:image/png;base64," + base64.b64encode(image_bytes(pattern_image(0))).decode()
    r = server.post("/v1/chat/completions", json={"model": model, "max_tokens": 4, "temperature": 0, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": uri}}]}]})
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens"]


@pytest.mark.server
@pytest.mark.slow
def test_hub_models_download_on_first_load_then_serve_offline(hub, tmp_path, tiny_model_path):
    models = [
        {"alias": "local", "model": str(tiny_model_path), "isolation": "thread"},
        {"alias": "hub", "model": f"hf://{REPO_ID}/tiny-*32.gguf", "isolation": "thread",
         "clip_model_path": f"hf://{REPO_ID}/mmproj-*.gguf"},
        {"alias": "hub-split", "model": f"hf://{REPO_ID}/split/*.gguf", "isolation": "process"},
        {"alias": "hub-quant", "model": f"hf://{REPO_ID}:f32", "isolation": "thread"},   # tiny-F32.gguf
    ]
    online = serve(hub, tmp_path, tmp_path / "online", models)
    try:
        assert hub.requests == []                       # nothing fetched at startup
        expected = complete(online, "local")
        assert complete(online, "hub-split") == expected    # the three shards, in a worker process
        assert sorted(hub.downloads()) == [f"split/tiny-split-F32-0000{k}-of-00003.gguf" for k in (1, 2, 3)]
        assert complete(online, "hub") == expected
        assert image_prompt_tokens(online, "hub") > IMAGE_TOKENS      # its projector came from the hub too
        assert len(hub.downloads()) == 5
        assert complete(online, "hub-quant") == expected    # the same file, from the cache
        assert len(hub.downloads()) == 5
        fetched = len(hub.requests)
        assert online.post("/admin/models/hub-split/unload").status_code == 200
        assert complete(online, "hub-split") == expected    # reloaded from the file fetched before
        assert len(hub.requests) == fetched
    finally:
        online.stop()
    log = online.log_path.read_text(errors="replace")
    for ref in (f"hf://{REPO_ID}/split/*.gguf", f"hf://{REPO_ID}/tiny-*32.gguf", f"hf://{REPO_ID}/mmproj-*.gguf"):
        assert f"{ref}: fetching from the Hugging Face Hub at {hub.endpoint}" in log and f"{ref}: ready in " in log
    assert "tiny-split-F32-00003-of-00003.gguf: 100%" in log         # huggingface_hub's own progress bars

    before = len(hub.requests)
    offline = serve(hub, tmp_path, tmp_path / "offline", models, offline=True)
    try:
        assert complete(offline, "hub-split") == complete(offline, "hub") == expected
        assert image_prompt_tokens(offline, "hub") > IMAGE_TOKENS
    finally:
        offline.stop()
    assert len(hub.requests) == before
    assert f"hf://{REPO_ID}/split/*.gguf: fetching from the Hugging Face cache (HF_HUB_OFFLINE is set)" in \
        offline.log_path.read_text(errors="replace")


@pytest.mark.server
@pytest.mark.slow
def test_a_hub_model_that_cannot_be_fetched_fails_its_load_only(hub, tmp_path, tiny_model_path):
    """A glob the repository does not match: that model's requests get the reason, others are served."""
    server = serve(hub, tmp_path, tmp_path / "server", [
        {"alias": "local", "model": str(tiny_model_path), "isolation": "thread"},
        {"alias": "nope", "model": f"hf://{REPO_ID}/*Q4_K_M*.gguf", "isolation": "thread"}])
    try:
        r = server.post("/v1/completions", json={"model": "nope", "prompt": "Hi", "max_tokens": 2})
        assert r.status_code >= 500 and f"No file found in {REPO_ID} matching *Q4_K_M*.gguf" in r.text
        assert complete(server, "local")
    finally:
        server.stop()
