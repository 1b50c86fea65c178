"""`Llama.from_pretrained` and the vision handlers' `from_pretrained`, through the real huggingface_hub.

Nothing is mocked: offline runs read a cache seeded in huggingface_hub's exact layout
(hub_repo.seed_cache), online runs download from a loopback stand-in for the Hub's HTTP API
(hub_standin). Each run is a fresh interpreter, since huggingface_hub reads HF_ENDPOINT,
HF_HUB_OFFLINE and the cache location when it is imported, as it does for users.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from helpers import N_THREADS, REPO_ROOT, describe
from hub_repo import REPO_ID, HubRepo, seed_cache, tiny_repo
from hub_standin import HubStandIn

from llamacore.gguf.hub import split_shards

SHARDS = [f"split/tiny-split-F32-0000{k}-of-00003.gguf" for k in (1, 2, 3)]

# the child's prelude: `generate(llm)` is the greedy text every load of the tiny model must give
PRELUDE = f"""
import json
from llamacore import Llama
from llamacore.llama_chat_format import Llava15ChatHandler
KW = dict(n_ctx=64, n_threads={N_THREADS}, seed=1)
def generate(llm):
    return llm("Once upon a time", max_tokens=8, temperature=0)["choices"][0]["text"]
def error(call):
    try:
        call()
    except Exception as exc:
        return f"{{type(exc).__name__}}: {{exc}}"
    return None
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_model_path, projector_path) -> HubRepo:
    return tiny_repo(tmp_path_factory.mktemp("hub-files"), tiny_model_path, projector_path)


@pytest.fixture
def hub(repo):
    with HubStandIn(repo) as standin:
        yield standin


@pytest.fixture(scope="module")
def expected(tiny_model_path) -> str:
    """The greedy text of the tiny model loaded from its own file."""
    return run(f"result = generate(Llama({str(tiny_model_path)!r}, **KW))", {})


def run(code: str, env: dict[str, str]) -> object:
    """Run PRELUDE + `code` (which sets `result`) in a fresh interpreter with `env`; `result` back."""
    script = PRELUDE + code + "\nprint('RESULT ' + json.dumps(result))\n"
    proc = subprocess.run([sys.executable, "-c", script], env=env or None, cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, describe(proc)
    return json.loads(next(line[7:] for line in reversed(proc.stdout.splitlines()) if line.startswith("RESULT ")))


def test_an_unreachable_hub_fails_in_seconds_with_what_to_do(tmp_path):
    """huggingface_hub alone retries a refused connection for some 23 s, then names only the URL."""
    with socket.socket() as probe:          # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))},
           "HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "0"}
    started = time.monotonic()
    message = run(f"result = error(lambda: Llama.from_pretrained({REPO_ID!r}, '*q8_0.gguf', **KW))", env)
    assert time.monotonic() - started < 15       # a generous bound (interpreter start included)
    assert message.startswith(f"ConnectionError: {REPO_ID}/*q8_0.gguf: cannot reach the Hugging Face Hub at "
                              f"{endpoint} (")
    assert message.endswith("download the file and give its local path, or set HF_HUB_OFFLINE=1 to use the copy "
                            "in the Hugging Face cache")


def test_split_shard_names_follow_llama_cpp():
    assert split_shards("a/m-Q4_K_M-00002-of-00003.gguf") == [
        "a/m-Q4_K_M-00001-of-00003.gguf", "a/m-Q4_K_M-00002-of-00003.gguf", "a/m-Q4_K_M-00003-of-00003.gguf"]
    assert split_shards("m-Q4_K_M.gguf") is None and split_shards("m-1-of-2.gguf") is None


# -- offline, from a cache seeded in huggingface_hub's layout --------------------------------


def test_offline_loads_from_the_seeded_cache_without_a_request(hub, repo, tmp_path, expected):
    snapshot = seed_cache(repo, tmp_path / "hub")          # $HF_HOME/hub: huggingface_hub's default cache
    result = run(f"""
llm = Llama.from_pretrained({REPO_ID!r}, "tiny-*32.gguf", **KW)
result = [llm.model_path, generate(llm)]
""", hub.env(tmp_path, offline=True))
    assert result == [str(snapshot / "tiny-F32.gguf"), expected]
    assert hub.requests == []


def test_offline_globs_matching_no_file_or_two_are_clear_errors(hub, repo, tmp_path):
    seed_cache(repo, tmp_path / "hub")
    none, two, other_repo = run(f"""
result = [error(lambda: Llama.from_pretrained({REPO_ID!r}, "*Q4_K_M*.gguf", **KW)),
          error(lambda: Llama.from_pretrained({REPO_ID!r}, "*.gguf", **KW)),
          error(lambda: Llama.from_pretrained("acme/not-cached", "*.gguf", **KW))]
""", hub.env(tmp_path, offline=True))
    assert none.startswith(f"ValueError: No file found in {REPO_ID} matching *Q4_K_M*.gguf\n\n"
                           "Files cached (HF_HUB_OFFLINE is set):\n")
    assert json.loads(none.splitlines()[-1]) == sorted(repo.files)
    assert two.startswith(f"ValueError: Multiple files found in {REPO_ID} matching *.gguf")
    assert other_repo.startswith(f"FileNotFoundError: acme/not-cached: HF_HUB_OFFLINE is set, and {tmp_path / 'hub'} "
                                 "lacks what is asked for")
    assert hub.requests == []


def test_offline_split_model_and_projector(hub, repo, tmp_path, expected):
    """A glob matching the shards of one split model loads it (the first shard loads the rest);
    the projector comes through the vision handler's own from_pretrained."""
    snapshot = seed_cache(repo, tmp_path / "cache")
    result = run(f"""
handler = Llava15ChatHandler.from_pretrained({REPO_ID!r}, "mmproj-*", cache_dir={str(tmp_path / 'cache')!r})
llm = Llama.from_pretrained({REPO_ID!r}, "split/*.gguf", cache_dir={str(tmp_path / 'cache')!r},
                            chat_handler=handler, **KW)
nested = error(lambda: Llava15ChatHandler.from_pretrained({REPO_ID!r}, "*-00001-of-*",
                                                          cache_dir={str(tmp_path / 'cache')!r}))
result = [handler.clip_model_path, llm.model_path, llm.projector is not None, generate(llm), nested]
""", hub.env(tmp_path, offline=True))
    projector, model, has_projector, text, nested = result
    assert (projector, model) == (str(snapshot / "mmproj-tiny-F16.gguf"), str(snapshot / SHARDS[0]))
    assert has_projector and text == expected
    assert nested.startswith("ValueError: No file found")        # handlers look at the top level only
    assert hub.requests == []


def test_offline_split_model_with_a_shard_missing_is_refused(hub, repo, tmp_path):
    seed_cache(repo, tmp_path / "hub", only=SHARDS[:2])
    (message,) = run(f"""result = [error(lambda: Llama.from_pretrained({REPO_ID!r}, "*-00001-of-*.gguf", **KW))]""",
                     hub.env(tmp_path, offline=True))
    assert message == (f"ValueError: {SHARDS[0]} is one shard of a split model, but {REPO_ID} has no cached "
                       f'["{SHARDS[2]}"]')


# -- online, from the loopback stand-in --------------------------------------------------------


@pytest.mark.parametrize("where", ["cache_dir", "local_dir"])
def test_download_then_offline_from_what_it_left(hub, repo, tmp_path, expected, where):
    """Online: the split model's three shards and the additional projector are fetched; then the
    same call offline loads from what the download left, and makes no request."""
    folder = tmp_path / where
    call = f"""Llama.from_pretrained({REPO_ID!r}, "split/*-00001-of-*.gguf", additional_files=["mmproj-*.gguf"],
                                     {where}={str(folder)!r}, **KW)"""
    missing, listed = run(f"""
result = [error(lambda: Llama.from_pretrained({REPO_ID!r}, "*Q4_K_M*.gguf", {where}={str(folder)!r})),
          error(lambda: Llama.from_pretrained("acme/nothing-here", "*.gguf", {where}={str(folder)!r}))]
""", hub.env(tmp_path))
    assert missing.startswith(f"ValueError: No file found in {REPO_ID} matching *Q4_K_M*.gguf\n\nAvailable Files:")
    assert json.loads(missing.splitlines()[-1]) == sorted(repo.files)
    assert listed.startswith("RepositoryNotFoundError")
    assert hub.downloads() == []

    online = run(f"llm = {call}\nresult = [llm.model_path, generate(llm)]", hub.env(tmp_path))
    assert sorted(hub.downloads()) == ["mmproj-tiny-F16.gguf", *SHARDS]
    base = folder / "models--acme--tiny-GGUF" / "snapshots" / repo.commit if where == "cache_dir" else folder
    assert online == [str(base / SHARDS[0]), expected]
    if where == "cache_dir":                       # huggingface_hub's own layout, as seed_cache writes it
        assert (folder / "models--acme--tiny-GGUF/refs/main").read_text() == repo.commit
        for name in ("mmproj-tiny-F16.gguf", *SHARDS):
            assert (base / name).resolve() == folder / "models--acme--tiny-GGUF/blobs" / repo.digests(name)[1]

    before = len(hub.requests)
    offline = run(f"llm = {call}\nresult = [llm.model_path, generate(llm)]", hub.env(tmp_path, offline=True))
    assert offline == online
    assert len(hub.requests) == before
