"""The ``llamaserve`` command line's flags and commands (argparse), and the unknown-flag check that names
what to use instead (llama-server's flags included)."""

from __future__ import annotations

import argparse
import os
import re

from llamaserve import __version__
from llamaserve.cli.commands import DEPLOY_FILES
from llamaserve.config.keys import ISOLATION_MODES, LOG_LEVELS
from llamaserve.config.values import suggest

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


__all__ = ["UsageError", "build_parser", "unknown_flag"]
