"""``llamaserve init-config``: a commented starter config for the GGUF models found in a folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

from llamaserve.cli.flags import UsageError
from llamaserve.config.discovery import ModelsDirScan, scan_models_dir

STARTER = """\
# llamaserve configuration written by `llamaserve init-config`.
#   serve it:  llamaserve --config {output}
#   check it:  llamaserve check {output}
# Strings may read environment variables with ${{VAR}} or ${{VAR:-default}}; relative paths
# are resolved against the folder of this file.

host: 127.0.0.1
port: 8000
# api_key: ${{LLAMASERVE_API_KEY}}   # require "Authorization: Bearer <key>" (all routes but /health)
# default_model: {first}   # used when a request names no model; else the first generation model below
max_loaded_models: 2       # models resident at once; the least recently used is unloaded first
# memory_budget: 12GiB     # and/or a cap on the memory of resident models
idle_unload: 300           # seconds without requests before a model is unloaded (or 5m, never)

defaults:                  # merged into every model below; a model's own keys win
  n_ctx: 4096              # context size in tokens (0 = the model's training context)
  n_gpu_layers: -1         # layers offloaded to the GPU, -1 = all (no effect without a GPU)
  # n_threads: 8           # CPU threads for decoding
  # flash_attn: auto       # on, off, or prompts: flash attention for prompts only (faster generation on CPUs)
  # isolation: process     # each model in a worker process (a crash ends only its requests); or thread
  # max_rss: 16GiB         # stop a model's worker whose memory passes this (isolation: process)

models:
"""


def starter_config(scan: ModelsDirScan, folder: Path, output: Path) -> str:
    """The starter YAML for a scanned folder, with paths relative to the output's folder."""
    def rel(path: Path) -> str:
        return json.dumps(Path(os.path.relpath(path, folder)).as_posix())   # JSON strings are YAML

    first = next((alias for alias, path, _ in scan.models if path not in scan.embedders), scan.models[0][0])
    text = STARTER.format(output=output, first=first)
    used: set[str] = set()
    for alias, path, arch in scan.models:
        name, n = alias, 1
        while name in used:   # x.gguf next to x-00001-of-00002.gguf
            n += 1
            name = f"{alias}-{n}"
        used.add(name)
        text += f"  - alias: {json.dumps(name)}\n    model: {rel(path)}\n"
        if path in scan.embedders:
            text += f"    embedding: true   # {arch} embedding model: serves /v1/embeddings\n"
        projector = dict(scan.projectors).get(path)
        if projector is not None:
            text += f"    clip_model_path: {rel(projector)}   # vision projector: image_url parts in chat\n"
        if len(used) == 1:
            text += '    # aliases: ["gpt-4o-mini"]   # more names clients may send\n'
    if scan.adapters:
        text += ("\n# LoRA adapters found next to the models. To serve one, add an entry that reuses a\n"
                 "# base model above: entries with the same model file and options share one loaded\n"
                 "# copy of it and switch adapters per request, without reloading.\n")
    for path, arch in scan.adapters:
        base_alias, base_path, _ = ([m for m in scan.models if m[2] == arch] or list(scan.models))[0]
        text += (f"#  - alias: {json.dumps(f'{base_alias}-{path.stem}')}\n#    model: {rel(base_path)}\n"
                 f"#    lora_adapters:\n#      {rel(path)}: 1.0   # architecture: {arch}\n")
    return text


def write_starter_config(directory: str | Path, output: str | Path | None = None,
                         force: bool = False) -> Path:
    """Write the starter config for ``directory``; refuses to overwrite unless ``force``."""
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise UsageError(f"{directory}: not a directory")
    output = Path(output).expanduser() if output else directory / "llamaserve.yaml"
    if output.exists() and not force:
        raise UsageError(f"{output} exists; pass --force to overwrite it")
    scan = scan_models_dir(directory.absolute())
    if not scan.models:
        raise UsageError(f"no GGUF models found in {directory} (LoRA adapters, mmproj files and split parts "
                         "after the first do not count)")
    output.write_text(starter_config(scan, output.absolute().parent, output), encoding="utf-8")
    return output


__all__ = ["starter_config", "write_starter_config"]
