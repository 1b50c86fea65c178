"""`llamacore.Llama` against llama-cpp-python's `Llama`: the same public methods, parameters (names,
order of the positional ones, keyword-only where they are), defaults and member kinds.

llama-cpp-python's side is read from the pinned sdist's source (llama_cpp/llama.py, parsed with `ast`,
and llama_cpp/llama_cpp.py for the `llama_cpp.LLAMA_*` constants its defaults name), without importing
it. Every difference found must be in DIFFERENCES below, with the reason; an entry that no longer
applies fails the test too, so the table stays exact.
"""

from __future__ import annotations

import ast
import inspect
import tarfile
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from helpers import vendor_fetch

NO_DEFAULT = inspect.Parameter.empty
# the dunder methods compared besides the public ones. Not __del__: lcp's calls close(); llamacore's
# Context and Model free llama.cpp's memory when the last reference goes (close() does it earlier).
DUNDERS = ("__init__", "__call__", "__enter__", "__exit__", "__getstate__", "__setstate__")

# (what, member, parameter) -> why. `what`: "missing member" / "extra member" (a method or property
# only one side has), "member kind" (method, property, staticmethod, classmethod differ), "missing" /
# "extra" (a parameter only one side has), "kind" (positional on one side, keyword-only on the
# other), "order" (a positional parameter at another index), "default" (another default value).
DIFFERENCES: dict[tuple[str, str, str], str] = {
    # -- members ------------------------------------------------------------------------------
    # llama-cpp-python returns the raw ctypes pointers (llama_context_p, llama_model_p); llamacore has
    # no ctypes layer, its `ctx`/`model` properties return the llamacore.Context / llamacore.Model.
    # Same names and kinds, other types: not a signature difference, noted here for the record.
    # (no entry needed)
    #
    # llama-cpp-python sets `metadata` as an instance attribute in __init__; llamacore reads it from
    # the model on access (a property): the same dict either way.
    ("extra member", "metadata", ""): "a property instead of an instance attribute: same value",
    # llamacore's multi-LoRA API (several adapters, scales changed in place without reloading).
    ("extra member", "lora_adapters", ""): "llamacore addition: the loaded adapters and their scales",
    ("extra member", "set_lora_adapter_scale", ""): "llamacore addition: change one adapter's scale in place",
    # lcp's Llama has no context-manager methods (only close() and __del__); llamacore adds them.
    ("extra member", "__enter__", ""): "llamacore addition: `with Llama(...) as llm:` closes on exit",
    ("extra member", "__exit__", ""): "llamacore addition: `with Llama(...) as llm:` closes on exit",
    # lcp's n_tokens, input_ids and scores are instance attributes; llamacore computes them from the
    # tokens the context holds (n_tokens is settable as in lcp; input_ids/scores have lcp's shapes).
    ("extra member", "n_tokens", ""): "a property instead of an instance attribute: same value, settable",
    ("extra member", "input_ids", ""): "a property instead of an instance attribute: lcp's (n_ctx,) intc shape",
    ("extra member", "scores", ""): "a property instead of an instance attribute: lcp's (n_ctx|n_batch, n_vocab)",
    # -- __init__ -----------------------------------------------------------------------------
    # None keeps meaning 0 (CPU only, lcp's default), except that with `rpc_servers` it means every
    # layer on the RPC workers; a plain 0 could not tell "unset" from "none on the workers".
    ("default", "__init__", "n_gpu_layers"): "None = 0, or all layers with rpc_servers (a llamacore addition)",
    # lcp's False turns flash attention off everywhere; llamacore leaves the choice to llama.cpp
    # ("auto": on where the backend supports it, as llama-server does). True/False are honoured.
    ("default", "__init__", "flash_attn"): "'auto' (llama.cpp decides per device); True/False honoured as in lcp",
    # lcp's verbose=True prints llama.cpp's log to stderr; llamacore's logging is process-wide (a
    # server's embedder would switch every model's log on) and a library stays quiet unless asked.
    ("default", "__init__", "verbose"): "quiet by default (llama.cpp's warnings still reach the logger)",
    ("extra", "__init__", "lora_adapters"): "llamacore addition: several LoRA adapters with scales",
    ("extra", "__init__", "chat_template"): "llamacore addition: a Jinja chat template overriding the GGUF's",
    ("extra", "__init__", "rpc_servers"): "llamacore addition: offload to ggml RPC workers",
    ("extra", "__init__", "clip_model_path"): "llamacore addition: a vision projector without a chat_handler",
    ("extra", "__init__", "media_policy"): "llamacore addition: where chat images may be read from",
    # -- create_completion / __call__ -----------------------------------------------------------
    # lcp's `stop=[]` and llamacore's `stop=None` both mean "no stop strings" (None avoids a shared
    # mutable default).
    ("default", "create_completion", "stop"): "None, equivalent to lcp's [] (no stop strings)",
    ("default", "__call__", "stop"): "None, equivalent to lcp's [] (no stop strings)",
    ("extra", "create_completion", "response_format"): "llamacore addition (keyword-only): JSON-schema output",
    ("extra", "create_completion", "ignore_eos"): "llamacore addition (keyword-only): generate past EOS",
    ("extra", "__call__", "response_format"): "llamacore addition (keyword-only): JSON-schema output",
    ("extra", "__call__", "ignore_eos"): "llamacore addition (keyword-only): generate past EOS",
    # -- create_chat_completion -----------------------------------------------------------------
    ("default", "create_chat_completion", "stop"): "None, equivalent to lcp's [] (no stop strings)",
    ("extra", "create_chat_completion", "stopping_criteria"):
        "llamacore addition (keyword-only), as in create_completion",
    ("extra", "create_chat_completion", "ignore_eos"): "llamacore addition (keyword-only): generate past EOS",
    ("extra", "create_chat_completion", "reasoning_format"): "llamacore addition (keyword-only): reasoning_content",
    ("extra", "create_chat_completion", "chat_template_kwargs"):
        "llamacore addition (keyword-only): template variables",
    # further SamplingParams fields (penalty_last_n); any other name raises TypeError, as it would
    # without **kwargs.
    ("extra", "create_chat_completion", "kwargs"): "llamacore addition: more sampling fields; unknown names TypeError",
    # -- embeddings ---------------------------------------------------------------------------
    ("extra", "create_embedding", "normalize"): "llamacore addition: unit-length vectors as OpenAI's (default)",
    ("extra", "create_embedding", "truncate"): "llamacore addition: False refuses inputs longer than n_batch",
}


@dataclass(frozen=True)
class Param:
    name: str
    kind: str                  # "positional", "keyword", "*args", "**kwargs"
    default: Any = NO_DEFAULT
    source: str = ""           # lcp: the default as written


@dataclass(frozen=True)
class Member:
    kind: str                  # "method", "property", "staticmethod", "classmethod"
    params: tuple[Param, ...] = ()


# -- llama-cpp-python's side, from its source --------------------------------------------------


def _sdist() -> Any:
    """Where vendor/fetch.py caches the pinned sdist (LLAMACORE_CACHE or ~/.cache/llamacore)."""
    fetch = vendor_fetch()
    pin = fetch.load_pin()
    return fetch.cache_dir() / f"{pin['package'].replace('-', '_')}-{pin['version']}.tar.gz"


@cache
def _lcp_sources() -> tuple[str, str]:
    archive = _sdist()
    if not archive.exists():
        pytest.skip(f"the pinned llama-cpp-python sdist is not cached at {archive} "
                    "(python vendor/fetch.py downloads it; LLAMACORE_CACHE moves the cache)")
    root = archive.name[:-len(".tar.gz")]
    with tarfile.open(archive) as tar:
        def read(path: str) -> str:
            f = tar.extractfile(f"{root}/{path}")
            assert f is not None, path
            return f.read().decode()

        return read("llama_cpp/llama.py"), read("llama_cpp/llama_cpp.py")


@cache
def lcp_constants() -> dict[str, Any]:
    """llama_cpp.py's module-level integer constants (NAME = 1, NAME = -1, NAME = OTHER)."""
    values: dict[str, Any] = {}
    for node in ast.parse(_lcp_sources()[1]).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    try:
                        values[target.id] = ast.literal_eval(node.value)
                    except ValueError:
                        if isinstance(node.value, ast.Name) and node.value.id in values:
                            values[target.id] = values[node.value.id]
    return values


def _lcp_value(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        text = ast.unparse(node)
        module, _, name = text.partition(".")
        assert module == "llama_cpp", f"cannot evaluate lcp default {text}"
        return lcp_constants()[name]


def _ast_params(args: ast.arguments) -> tuple[Param, ...]:
    params: list[Param] = []
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for arg, default in zip(positional, defaults):
        params.append(Param(arg.arg, "positional", NO_DEFAULT if default is None else _lcp_value(default),
                            "" if default is None else ast.unparse(default)))
    if args.vararg:
        params.append(Param(args.vararg.arg, "*args"))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults):
        params.append(Param(arg.arg, "keyword", NO_DEFAULT if kw_default is None else _lcp_value(kw_default),
                            "" if kw_default is None else ast.unparse(kw_default)))
    if args.kwarg:
        params.append(Param(args.kwarg.arg, "**kwargs"))
    return tuple(params)


def _public(name: str) -> bool:
    return not name.startswith("_") or name in DUNDERS


@cache
def lcp_api() -> dict[str, Member]:
    tree = ast.parse(_lcp_sources()[0])
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Llama")
    api: dict[str, Member] = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and _public(node.name):
            decorators = {ast.unparse(d) for d in node.decorator_list}
            kind = next((k for k in ("property", "staticmethod", "classmethod") if k in decorators), "method")
            api[node.name] = Member(kind, () if kind == "property" else _ast_params(node.args))
    return api


# -- ours, from inspect ------------------------------------------------------------------------

_KINDS = {inspect.Parameter.POSITIONAL_ONLY: "positional", inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
          inspect.Parameter.KEYWORD_ONLY: "keyword", inspect.Parameter.VAR_POSITIONAL: "*args",
          inspect.Parameter.VAR_KEYWORD: "**kwargs"}


def our_api() -> dict[str, Member]:
    from llamacore import Llama

    api: dict[str, Member] = {}
    for name in dir(Llama):
        if not _public(name) or name in ("__init_subclass__",):
            continue
        raw = inspect.getattr_static(Llama, name)
        if isinstance(raw, property):
            api[name] = Member("property")
            continue
        kind = "staticmethod" if isinstance(raw, staticmethod) else "classmethod" if isinstance(raw, classmethod) \
            else "method"
        func = raw.__func__ if kind != "method" else raw
        if not inspect.isfunction(func):
            continue
        params = tuple(Param(p.name, _KINDS[p.kind], p.default) for p in inspect.signature(func).parameters.values())
        api[name] = Member(kind, params)
    return api


# -- the comparison ----------------------------------------------------------------------------


def _same_default(a: Any, b: Any) -> bool:
    if a is NO_DEFAULT or b is NO_DEFAULT or a is None or b is None:
        return a is b
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                              and not isinstance(a, bool) and not isinstance(b, bool) and a == b)


def differences() -> dict[tuple[str, str, str], str]:
    """Every difference between the two APIs -> a description of it."""
    ours, theirs = our_api(), lcp_api()
    found: dict[tuple[str, str, str], str] = {}
    for name in sorted(set(ours) - set(theirs)):
        found[("extra member", name, "")] = f"llamacore has {ours[name].kind} {name}"
    for name, lcp in sorted(theirs.items()):
        own = ours.get(name)
        if own is None:
            found[("missing member", name, "")] = f"llama-cpp-python's {lcp.kind} {name} is missing"
            continue
        if own.kind != lcp.kind:
            found[("member kind", name, "")] = f"{name}: {own.kind}, llama-cpp-python's is a {lcp.kind}"
        if lcp.kind == "property":
            continue
        mine = {p.name: p for p in own.params}
        their_positional = [p.name for p in lcp.params if p.kind == "positional"]
        my_positional = [p.name for p in own.params if p.kind == "positional"]
        for _i, p in enumerate(lcp.params):
            q = mine.get(p.name)
            if q is None:
                found[("missing", name, p.name)] = f"{name}({p.name}={p.source}) is missing"
                continue
            if q.kind != p.kind:
                found[("kind", name, p.name)] = f"{name}({p.name}) is {q.kind}, llama-cpp-python's {p.kind}"
            elif p.kind == "positional" and my_positional.index(p.name) != their_positional.index(p.name):
                found[("order", name, p.name)] = (f"{name}({p.name}) is positional argument "
                                                  f"{my_positional.index(p.name)}, llama-cpp-python's "
                                                  f"{their_positional.index(p.name)}")
            if not _same_default(q.default, p.default):
                found[("default", name, p.name)] = (f"{name}({p.name}={q.default!r}), llama-cpp-python's "
                                                    f"{p.source} ({p.default!r})")
        theirs_names = {p.name for p in lcp.params}
        for q in own.params:
            if q.name not in theirs_names:
                found[("extra", name, q.name)] = f"{name}({q.name}) is llamacore's ({q.kind})"
    return found


def test_sdist_source_parses_into_the_api():
    api = lcp_api()
    assert api["__init__"].params[0].name == "self" and api["__init__"].params[1].name == "model_path"
    assert api["logits_to_logprobs"].kind == "staticmethod" and api["from_pretrained"].kind == "classmethod"
    split = next(p for p in api["__init__"].params if p.name == "split_mode")
    assert split.source == "llama_cpp.LLAMA_SPLIT_MODE_LAYER" and split.default == 1
    assert {"generate", "eval", "sample", "set_cache", "tokenizer", "create_chat_completion_openai_v1"} <= set(api)


def test_signatures_match_llama_cpp_python_except_the_listed_differences():
    found = differences()
    unexplained = {k: v for k, v in found.items() if k not in DIFFERENCES}
    stale = sorted(k for k in DIFFERENCES if k not in found)
    assert not unexplained, "differences to fix or to list (with the reason) in DIFFERENCES:\n" + "\n".join(
        f"  {k}: {v}" for k, v in sorted(unexplained.items()))
    assert not stale, f"DIFFERENCES entries that no longer apply: {stale}"


def test_no_listed_difference_removes_or_reorders_lcp_parameters():
    """What llama-cpp-python code relies on is all there: the table holds additions and other
    defaults, never a missing member or parameter, another kind or another position."""
    assert not [k for k in DIFFERENCES if k[0] in ("missing member", "missing", "kind", "order", "member kind")]
    # every addition to a method comes after llama-cpp-python's positional parameters
    ours, theirs = our_api(), lcp_api()
    for what, member, param in DIFFERENCES:
        if what == "extra" and member in theirs:
            lcp_positional = [p.name for p in theirs[member].params if p.kind == "positional"]
            mine = [p.name for p in ours[member].params]
            assert mine.index(param) >= len(lcp_positional), (member, param)
