"""The ``llamaserve`` command: serve, ``check`` a config, ``init-config`` a starter one, or ``demo``.

Flags build the same raw settings a config file holds and go through ``parse_config``, so a
flag gets exactly the validation and messages that the equivalent config key gets.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from llamaserve import __version__
from llamaserve.config.discovery import ModelsDirScan, scan_models_dir
from llamaserve.config.hub import is_hub_ref
from llamaserve.config.keys import ISOLATION_MODES, LOG_LEVELS
from llamaserve.config.parse import ConfigError, ServerConfig, load_config, parse_config, read_config_data
from llamaserve.config.values import suggest

__all__ = ["build_parser", "config_from_args", "describe", "main", "starter_config", "write_starter_config"]

EXAMPLES = """\
examples:
  llamaserve --config llamaserve.yaml
  llamaserve --model mistral-7b.Q4_K_M.gguf --alias chat --n-ctx 4096 --n-gpu-layers -1
  llamaserve --model base.gguf --lora-scaled coder-lora.gguf 0.8 --port 8080
  llamaserve --model hf://Qwen/Qwen2-0.5B-Instruct-GGUF:q8_0
  llamaserve --models-dir ~/models --max-loaded-models 2
  llamaserve init-config ~/models && llamaserve check ~/models/llamaserve.yaml
  llamaserve demo              # a tiny TinyStories model shipped with llamaserve, offline
"""


# llama-server's flags that mean something else here, or are config keys: what to use instead (its flags
# that mean the same are aliases of ours: -m, -a, -ngl/--gpu-layers, -t, -np, --embeddings)
LLAMA_SERVER_FLAGS = {
    **dict.fromkeys(("-c", "--ctx-size"), "llama-server's context that its --parallel slots share; here --n-ctx N "
                                          "is each request's context (-c 8192 -np 4 is --n-ctx 2048 --parallel 4)"),
    **dict.fromkeys(("-fa", "--flash-attn"), "no such flag here: set flash_attn (on, off, auto or prompts) under "
                                             "defaults: or a model in a --config file"),
    **dict.fromkeys(("-b", "--batch-size", "-ub", "--ubatch-size"), "set n_batch or n_ubatch in a --config file"),
    **dict.fromkeys(("-ctk", "--cache-type-k", "-ctv", "--cache-type-v"), "set type_k or type_v in a --config file"),
    **dict.fromkeys(("-hf", "--hf-repo", "-hff", "--hf-file"),
                    "use --model hf://OWNER/REPO:QUANT or --model hf://OWNER/REPO/FILE.gguf"),
    "--mmproj": "set mmproj (the projector file) on the model in a --config file",
    "--chat-template": "use --chat-format NAME, or chat_template in a --config file",
    "--rpc": "set rpc_servers in a --config file",
}


_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")   # a negative value, such as --n-gpu-layers -1


def unknown_flag(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The first flag in ``argv`` that no command knows, named with what to use instead. argparse
    itself sets an unknown flag aside and reads its value as the COMMAND ("invalid choice: '2048'")."""
    parsers = [parser, *(p for a in parser._actions if isinstance(a.choices, dict) for p in a.choices.values())]
    known = {flag for p in parsers for a in p._actions for flag in a.option_strings}
    for word in argv:
        if word == "--":
            return None
        flag = word.split("=", 1)[0]
        if not flag.startswith("-") or flag in known or _NUMBER.fullmatch(flag):
            continue
        hint = LLAMA_SERVER_FLAGS.get(flag)
        if hint is None and flag.startswith("--"):
            return f"unknown flag {flag}{suggest(flag, sorted(f for f in known if f.startswith('--')))}"
        return f"unknown flag {flag}" + (f": {hint}" if hint else "")
    return None


class UsageError(Exception):
    """A command that cannot run as asked (exit status 2, like a config error)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; defaults come from LLAMASERVE_CONFIG and LLAMASERVE_API_KEY."""
    parser = argparse.ArgumentParser(
        prog="llamaserve", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="OpenAI-compatible server for GGUF models: one config file, many models, lazy\n"
                    "loading, idle unloading and LoRA aliases that share a loaded base model.\n\n"
                    "Without a COMMAND it serves the models given by --config, --model or --models-dir.")
    parser.add_argument("--version", action="version", version=f"llamaserve {__version__}")

    what = parser.add_argument_group("what to serve (flags override the config file's values)")
    what.add_argument("--config", metavar="FILE", default=os.environ.get("LLAMASERVE_CONFIG"),
                      help="YAML, TOML or JSON config file (default: $LLAMASERVE_CONFIG)")
    what.add_argument("-m", "--model", metavar="FILE",
                      help="serve this GGUF model, or hf://owner/repo:QUANT or hf://owner/repo/file-glob.gguf "
                           "from the Hugging Face Hub, fetched on first use (replaces the config file's models list)")
    what.add_argument("--models-dir", metavar="DIR",
                      help="also serve every GGUF model in DIR, named by its file name without .gguf")
    what.add_argument("--adapters-dir", metavar="DIR", action="append", default=[],
                      help="allow POST /admin/adapters to load LoRA adapters found in DIR, symlinks "
                           "resolved; no other path is ever opened (repeatable)")
    what.add_argument("--persist-adapters", action="store_true",
                      help="keep runtime adapters across restarts, in a registry file in each --adapters-dir")

    model = parser.add_argument_group(
        "model options (with --model they apply to it; without, to every configured model)")
    model.add_argument("-a", "--alias", metavar="NAME", help="name clients send as \"model\" (default: file stem)")
    model.add_argument("--lora", metavar="FILE", action="append", default=[],
                       help="apply a LoRA adapter at scale 1.0 (repeatable)")
    model.add_argument("--lora-scaled", metavar=("FILE", "SCALE"), nargs=2, action="append", default=[],
                       help="apply a LoRA adapter at SCALE (repeatable)")
    model.add_argument("--n-ctx", type=int, metavar="N",
                       help="context window of each request in tokens (0 = training context); the KV cache holds "
                            "--parallel of them")
    model.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", type=int, metavar="N",
                       help="layers offloaded to the GPU (-1 = all)")
    model.add_argument("-t", "--threads", type=int, metavar="N", help="CPU threads used for decoding")
    model.add_argument("--chat-format", metavar="NAME",
                       help="built-in chat template (chatml, llama-3, mistral-instruct, ...) to use "
                            "instead of the model's own")
    model.add_argument("--embedding", "--embeddings", action="store_true", help="load for /v1/embeddings")
    model.add_argument("--isolation", choices=ISOLATION_MODES,
                       help="thread: in the server process (default); process: each loaded model in a "
                            "worker process of its own, so its crash ends only its requests")

    server = parser.add_argument_group("server")
    server.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    server.add_argument("--port", type=int, help="port to listen on (default 8000)")
    server.add_argument("--api-key", metavar="KEY", default=os.environ.get("LLAMASERVE_API_KEY"),
                        help="require \"Authorization: Bearer KEY\" on every route but /health "
                             "(default: $LLAMASERVE_API_KEY)")
    server.add_argument("-np", "--parallel", type=int, metavar="N",
                        help="requests decoded together per loaded model (default 4)")
    server.add_argument("--max-loaded-models", type=int, metavar="N",
                        help="models resident at once; the least recently used one is unloaded first")
    server.add_argument("--idle-unload", metavar="SECONDS",
                        help="unload a model after this long without requests: seconds, 90s, 5m, 1h "
                             "or never (default 300)")
    server.add_argument("--log-level", choices=LOG_LEVELS, help="server log level (default info)")
    server.add_argument("--print-config", action="store_true",
                        help="print the resolved configuration and exit instead of serving")

    commands = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    check = commands.add_parser(
        "check", help="validate a config file and print the models it resolves to",
        description="Validate a config file and print the resolved models (aliases, files, adapters "
                    "and load options). Exit status 0 when valid, 2 with one line per problem when not.")
    check.add_argument("file", metavar="FILE", help="YAML, TOML or JSON config file")
    init = commands.add_parser(
        "init-config", help="write a commented starter config for the GGUF models in DIR",
        description="Write a commented starter YAML config that serves every GGUF model in DIR "
                    "(LoRA adapters found there are listed as a commented example).")
    init.add_argument("directory", metavar="DIR", help="folder holding .gguf files")
    init.add_argument("-o", "--output", metavar="FILE", help="where to write (default: DIR/llamaserve.yaml)")
    init.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    rpc = commands.add_parser(
        "rpc-worker", help="serve this machine's GPU (else CPU) to models split across hosts (ggml RPC)",
        description="Run a ggml RPC worker: model entries with rpc_servers: [HOST:PORT] put their offloaded "
                    "layers on it. The protocol has no authentication and no encryption: listen on "
                    "loopback (the default) or a trusted private network only. One worker serves one "
                    "client (one model's worker process) at a time.")
    rpc.add_argument("--host", default="127.0.0.1", help="IPv4 address to listen on (default 127.0.0.1)")
    rpc.add_argument("--port", type=int, default=50052, help="port to listen on (default 50052)")
    rpc.add_argument("--threads", type=int, metavar="N", help="CPU threads for computing (default: all cores)")
    rpc.add_argument("--cache-dir", metavar="DIR",
                     help="keep large tensors here, so a client reloading a model sends only their hashes")
    demo = commands.add_parser(
        "demo", help="serve a tiny story-writing model shipped with llamaserve (offline; proves the install)",
        description="Serve stories260K, a 260K-parameter TinyStories llama shipped inside llamaserve, as the "
                    "model \"demo\": no download, no config. It writes short children's stories.")
    demo.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    demo.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    deploy = commands.add_parser(
        "deploy", help="show the Dockerfile or the Kubernetes example for running replicas",
        description="Print a deployment file shipped with llamaserve, or write it (with its helper scripts) "
                    "into a folder: docker = a multi-stage Dockerfile (CPU, or CUDA with build args), "
                    "kubernetes = a ConfigMap, a Deployment with readiness/liveness probes and a Service.")
    deploy.add_argument("target", choices=sorted(DEPLOY_FILES), help="which files")
    deploy.add_argument("-o", "--output", metavar="DIR", help="write the files into DIR instead of printing")
    return parser


# what `llamaserve deploy TARGET` shows (the first file) or writes (all), from llamaserve/deploy/
DEPLOY_FILES = {"docker": ("Dockerfile", "build-wheel.sh", "install-runtime.sh"), "kubernetes": ("kubernetes.yaml",)}


def deploy_files(args: argparse.Namespace) -> int:
    folder = resources.files("llamaserve") / "deploy"
    names = DEPLOY_FILES[args.target]
    if not args.output:
        print((folder / names[0]).read_text(), end="")
        return 0
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        target = out / name
        target.write_text((folder / name).read_text())
        if name.endswith(".sh"):
            target.chmod(0o755)
        print(f"wrote {target}")
    return 0


def rpc_worker(args: argparse.Namespace) -> int:
    """`llamaserve rpc-worker`: blocks serving until stopped."""
    from llamacore import rpc

    if not rpc.is_loopback(args.host):
        print(f"llamaserve: WARNING: the RPC worker listens on {args.host}, beyond this machine. The ggml RPC "
              "protocol has no authentication and no encryption: anyone who reaches this port can run "
              "computations and read or write memory of this process. Only use it on a trusted network.",
              file=sys.stderr, flush=True)
    if args.cache_dir:
        os.makedirs(args.cache_dir, exist_ok=True)
    try:
        rpc.serve(args.host, args.port, args.threads, args.cache_dir)
    except (OSError, ValueError) as exc:
        print(f"llamaserve: {exc}", file=sys.stderr)
        return 1
    return 0


DEMO_MODEL = "stories260K.gguf"


def demo_config(args: argparse.Namespace) -> ServerConfig:
    """`llamaserve demo`: the model shipped in llamaserve/demo/ as "demo" (a file inside the
    installed package, so no download and no config file)."""
    model = Path(str(resources.files("llamaserve") / "demo" / DEMO_MODEL))
    data = {"host": args.host, "port": args.port, "models": [{"alias": "demo", "model": str(model)}]}
    return parse_config(data, None, Path.cwd())


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """Merge the flags over the config file (if any) and validate the result."""
    if not (args.config or args.model or args.models_dir):
        raise UsageError("nothing to serve: pass --config FILE, --model FILE or --models-dir DIR "
                         "(or set LLAMASERVE_CONFIG)")
    if not args.model and (args.alias or args.lora or args.lora_scaled):
        raise UsageError("--alias, --lora and --lora-scaled need --model")
    source = Path(args.config) if args.config else None
    data = read_config_data(source) if source else {}
    base_dir = source.absolute().parent if source else Path.cwd()
    flags = {"host": args.host, "port": args.port, "api_key": args.api_key, "parallel": args.parallel,
             "max_loaded_models": args.max_loaded_models, "idle_unload": args.idle_unload,
             "log_level": args.log_level, "models_dir": args.models_dir and _absolute(args.models_dir),
             "adapters_dir": [_absolute(d) for d in args.adapters_dir] or None,
             "persist_adapters": args.persist_adapters or None}
    data.update({key: value for key, value in flags.items() if value is not None})
    options = {"n_ctx": args.n_ctx, "n_gpu_layers": args.n_gpu_layers, "n_threads": args.threads,
               "chat_format": args.chat_format, "embedding": args.embedding or None, "isolation": args.isolation}
    options = {key: value for key, value in options.items() if value is not None}
    if args.model:
        entry: dict[str, Any] = {"model": args.model if is_hub_ref(args.model) else _absolute(args.model), **options}
        if args.alias:
            entry["alias"] = args.alias
        adapters = {_absolute(path): 1.0 for path in args.lora}
        adapters.update({_absolute(path): _scale(value) for path, value in args.lora_scaled})
        if adapters:
            entry["lora_adapters"] = adapters
        data["models"] = [entry]
    elif options:
        if isinstance(data.get("defaults", {}), dict):
            data["defaults"] = {**data.get("defaults", {}), **options}
        if isinstance(data.get("models"), list):
            data["models"] = [{**m, **options} if isinstance(m, dict) else m for m in data["models"]]
    return parse_config(data, source, base_dir)


def _absolute(path: str) -> str:
    """Flag paths are relative to the working directory, not to the config file."""
    return str(Path(path).expanduser().absolute())


def _scale(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--lora-scaled: SCALE must be a number, got {text!r}") from None


# -- check / --print-config ------------------------------------------------------------------


def describe(config: ServerConfig) -> str:
    """A readable summary of a resolved config: what ``check`` and ``--print-config`` print."""
    server = (f"server: http://{config.host}:{config.port}  api key: {'set' if config.api_key else 'none'}  "
              f"log level: {config.log_level}  cors: {', '.join(config.cors_origins) or '-'}")
    default = config.default_entry()
    registry = (f"registry: default model: {default.alias if default else '-'}  "
                f"max loaded models: {config.max_loaded_models or '-'}  "
                f"memory budget: {_bytes(config.memory_budget)}  "
                f"idle unload: {_seconds(config.idle_unload)}  "
                f"parallel: {config.parallel}  max queue: {config.max_queue}  "
                f"kv cache: {'unified' if config.kv_unified else 'per sequence'}  "
                f"shared prefixes: {'on' if config.share_prefixes else 'off'}  "
                f"idle KV in host memory: {_bytes(config.cache_ram) if config.cache_ram else 'off'}")
    runtime = (f"runtime adapters: {', '.join(map(str, config.adapters_dirs))}  "
               f"persisted: {'yes' if config.persist_adapters else 'no'}" if config.adapters_dirs
               else "runtime adapters: off (no adapters_dir)")
    lines = [f"config: {config.source or 'command line'}", server, registry, runtime,
             f"models ({len(config.models)}):"]
    for entry in config.models:
        names = f"{entry.alias} (aliases: {', '.join(entry.aliases)})" if entry.aliases else entry.alias
        lines += [f"  {names}", f"    model: {entry.model}"]
        lines += [f"    lora: {path} (scale {scale:g})" for path, scale in entry.lora_adapters]
        lines += [f"    adapter: {path}" + (f" (name {name})" if name else "") for path, name in entry.adapters]
        if entry.load:
            lines.append("    load: " + ", ".join(f"{k}={v!r}" for k, v in entry.load.items()))
        extras = {"chat_format": entry.chat_format, "chat_template": entry.chat_template and "custom",
                  "idle_unload": entry.idle_unload and _seconds(entry.idle_unload),
                  "parallel": entry.parallel, "max_queue": entry.max_queue,
                  "kv_unified": entry.kv_unified, "share_prefixes": entry.share_prefixes,
                  "cache_ram": entry.cache_ram and _bytes(entry.cache_ram)}
        shown = [f"{key}={value}" for key, value in extras.items() if value is not None]
        if shown:
            lines.append("    " + ", ".join(shown))
        peers = [e.alias for e in config.models if e is not entry and e.base_key() == entry.base_key()]
        if peers:
            lines.append(f"    shares its loaded base model with: {', '.join(peers)}")
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "never" if value is None or value == math.inf else f"{value:g}s"


def _bytes(size: int | None) -> str:
    if size is None:
        return "-"
    unit = max((u for u in range(5) if size >= 1024**u), default=0)
    return f"{size / 1024**unit:.4g} {['B', 'KiB', 'MiB', 'GiB', 'TiB'][unit]}"


# -- init-config -----------------------------------------------------------------------------


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


# -- entry point -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for configuration and usage errors)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    problem = unknown_flag(parser, argv)
    if problem:
        parser.error(problem)
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            print(describe(load_config(args.file)))
            return 0
        if args.command == "rpc-worker":
            return rpc_worker(args)
        if args.command == "deploy":
            return deploy_files(args)
        if args.command == "init-config":
            path = write_starter_config(args.directory, args.output, args.force)
            print(f"wrote {path}; check it with: llamaserve check {path}")
            return 0
        config = demo_config(args) if args.command == "demo" else config_from_args(args)
    except (ConfigError, UsageError) as e:
        print(f"llamaserve: {e}" if isinstance(e, UsageError) else e, file=sys.stderr)
        return 2
    if args.print_config:
        print(describe(config))
        return 0
    from llamaserve.app import serve  # the server stack is only needed to serve

    serve(config)
    return 0
