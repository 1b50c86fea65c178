"""A pytest plugin that runs llama.cpp's own server tests (vendor/llama.cpp/tools/server/tests, unchanged)
against llamaserve, or against llama-server itself for the baseline.

The suite starts its server through `utils.ServerProcess.start()`, configured by attributes that mirror
llama-server's flags. This plugin replaces `start()`:

- target `llamaserve` (the default): the attributes become a llamaserve config file and
  `python -m llamaserve --config` runs on the suite's port; a setting with no llamaserve equivalent
  skips the test, naming the setting.
- target `llama-server`: the original `start()` runs the peer binary, with the Hugging Face model
  names mapped to the same local files llamaserve gets (the suite is run offline).

Models: the suite downloads its presets from Hugging Face. Offline, `stories260K` is the same file
(../shared/models); the BERT embedder `bert-bge-small` is replaced by MiniLM-L6 (also BERT, 384
dimensions, both targets get it); tests needing any other model skip.

Use: run pytest in the suite's folder with this folder on PYTHONPATH and `-p llama_server_suite`;
LLAMA_SUITE_TARGET picks the target, LLAMA_SERVER_BIN_PATH the peer binary.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_MODELS = REPO_ROOT.parent / "shared/models"
STORIES = SHARED_MODELS / "stories260K.gguf"
MINILM = SHARED_MODELS / "all-MiniLM-L6-v2-f16.gguf"
TARGET = os.environ.get("LLAMA_SUITE_TARGET", "llamaserve")

# (hf repo, hf file) -> the local file standing in for it
MODELS: dict[tuple[str | None, str | None], Path] = {
    ("ggml-org/test-model-stories260K", None): STORIES,
    ("ggml-org/models", "tinyllamas/stories260K.gguf"): STORIES,
    ("ggml-org/models", "bert-bge-small/ggml-model-f16.gguf"): MINILM,
}

# ServerProcess attributes with nothing to say when they have these values (their defaults, or
# settings that only concern llama-server's own machinery)
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "debug": (True, False),     # llama-server --verbose: also maps to verbose_responses below
"offline": (True, False), "server_continuous_batching": (True, False, None),
    "server_slots": (False, None), "no_ui": (True, False, None), "jinja": (True, False, None),
    "kv_unified": (True, False, None), "swa_full": (False, None), "n_prompts": (0, None),
    "no_cache_idle_slots": (False,), "backend_sampling": (False,), "gcp_compat": (False,),
    "ui_mcp_proxy": (False,), "log_path": (None,), "server_path": (None,), "model_tags": (None,),
    "model_url": (None,), "model_draft": (None,), "models_dir": (None,), "models_max": (None,),
    "models_preset": (None,), "no_models_autoload": (None,), "slot_save_path": (None,),
    "id_slot": (None,), "cache_prompt": (None,), "n_ga": (None,), "n_ga_w": (None,),
    "enable_ctx_shift": (False, 0, None), "spec_type": (None,), "spec_draft_n_min": (None,),
    "spec_draft_n_max": (None,), "spec_synth_len": (None,), "spec_synth_rates": (None,),
    "mmproj_url": (None,), "no_mmproj": (None, True, False), "media_path": (None,),
    "sleep_idle_seconds": (None,), "cache_ram": (None,), "server_tools": (None,),
    "server_tools_runtime": (None,), "mcp_servers_config": (None,), "mcp_servers_json": (None,),
    "server_reranking": (False, None), "n_gpu_layer": (None, 0),
}


def _model(server: Any) -> Path:
    if server.model_file:
        return Path(server.model_file)
    key = (server.model_hf_repo, server.model_hf_file)
    if key not in MODELS:
        pytest.skip(f"model {key[0]}/{key[1] or ''} is not available offline")
    return MODELS[key]


def llamaserve_config(server: Any) -> dict[str, Any]:
    """A llamaserve config equivalent to `server`'s llama-server flags (pytest.skip when there is none)."""
    for name, neutral in _NEUTRAL.items():
        if getattr(server, name, None) not in neutral:
            pytest.skip(f"llama-server setting {name}={getattr(server, name)!r} has no llamaserve equivalent")
    model = _model(server)
    entry: dict[str, Any] = {"model": str(model), "alias": server.model_alias or str(model)}
    # llama-server's sampling defaults (common_params_sampling), then the suite's --temp and --seed
    sampling: dict[str, Any] = {"top_k": 40, "top_p": 0.95, "min_p": 0.05,
                                "temperature": server.temperature, "seed": server.seed}
    if server.n_predict and server.n_predict > 0:
        sampling["max_tokens"] = server.n_predict
    entry["sampling"] = sampling
    load = {"n_ctx": _slot_ctx(server), "n_batch": server.n_batch, "n_ubatch": server.n_ubatch,
            "n_threads": server.n_threads or int(os.environ.get("LLAMACORE_TEST_THREADS", "2")),
            "parallel": server.n_slots, "type_k": server.ctk, "type_v": server.ctv,
            "chat_template": server.chat_template or _template_file(server.chat_template_file),
            "reasoning_format": server.reasoning_format, "reasoning": server.reasoning}
    if server.fa is not None:
        load["flash_attn"] = {"on": True, "off": False}.get(server.fa, server.fa)
    if server.server_embeddings:
        load["embedding"] = True
    if server.pooling:
        load["pooling_type"] = server.pooling
    if server.lora_files:
        load["adapters"] = [str(p) for p in server.lora_files]
    entry.update({k: v for k, v in load.items() if v is not None})
    config: dict[str, Any] = {"host": server.server_host, "port": server.server_port, "models": [entry],
                              "unknown_model": "default", "metrics": bool(server.server_metrics),
                              "log_level": "info"}
    if server.debug:
        config["verbose_responses"] = True      # the `__verbose` object --verbose adds to answers
    if server.api_key:
        config["api_key"] = server.api_key
    # llama-server's CORS default is every origin, with credentials; llamaserve's is none
    config["cors"] = server.cors_origins.split(",") if server.cors_origins else ["*"]
    config["cors_credentials"] = True
    if server.no_ui:
        config["web_ui"] = False
    return config


def _slot_ctx(server: Any) -> int | None:
    """llamaserve's n_ctx is each sequence's; llama-server's --ctx-size is split over its --parallel
    slots (unless the KV cache is unified, where one sequence may fill all of it)."""
    if server.n_ctx and server.n_slots and not server.kv_unified:
        return server.n_ctx // server.n_slots
    return server.n_ctx


def _template_file(path: str | None) -> str | None:
    return Path(path).read_text() if path else None


def _start_llamaserve(self: Any, timeout_seconds: int = 60) -> None:
    from utils import server_instances

    config = llamaserve_config(self)
    folder = Path(tempfile.mkdtemp(prefix="llama-suite-"))
    path = folder / "llamaserve.yaml"
    path.write_text(yaml.safe_dump(config))
    self._log = open(folder / "server.log", "w")
    self.process = subprocess.Popen([sys.executable, "-m", "llamaserve", "--config", str(path)],
                                    stdout=self._log, stderr=subprocess.STDOUT, env=_child_env())
    server_instances.add(self)
    deadline = time.monotonic() + max(timeout_seconds, 60)
    headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
    while time.monotonic() < deadline:
        if self.process.poll() is not None:
            raise RuntimeError(f"llamaserve exited with {self.process.returncode}:\n"
                               + (folder / "server.log").read_text()[-3000:])
        try:
            if self.make_request("GET", "/health", headers=headers).status_code == 200:
                self.ready = True
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"llamaserve did not start within {timeout_seconds} s")


def _child_env() -> dict[str, str]:
    """The suite runs in its own folder: the child imports this checkout's packages wherever they are installed."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _offline_download(url: str, *args: Any, **kwargs: Any) -> str:
    pytest.skip(f"downloads {url} (the suite runs offline)", allow_module_level=True)


def pytest_configure(config: pytest.Config) -> None:
    import utils

    utils.ServerPreset.load_all = staticmethod(lambda: None)     # presets are local files, nothing to fetch
    utils.download_file = _offline_download
    if TARGET == "llamaserve":
        utils.ServerProcess.start = _start_llamaserve
        return
    original = utils.ServerProcess.start

    def start_peer(self: Any, timeout_seconds: int = 60) -> None:
        self.model_file = str(_model(self))
        self.model_hf_repo = self.model_hf_file = None
        original(self, timeout_seconds)

    utils.ServerProcess.start = start_peer
