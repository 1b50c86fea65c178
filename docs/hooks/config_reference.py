"""mkdocs hook: the configuration reference, generated from llamaserve's config key tables.

docs/server/configuration.md holds the marker ``<!-- config-reference -->``; on_page_markdown
replaces it with one table per section (top-level keys, model entry keys, load keys, and the
fields of ``speculative``, ``media``, ``sampling`` and an ``adapters`` item). Every key, and its
type where the checker tells it, comes from the tables; the defaults from the resolved-config
dataclasses and the compiled core's stub; the description and example of each key from
config_descriptions.yml beside this file. A key in the tables without a description, or a
description of a key the tables no longer have, fails the build.
"""

from __future__ import annotations

import ast
import inspect
import math
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import yaml

from llamaserve.config import keys, settings

MARKER = "<!-- config-reference -->"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


# -- types, read from the checkers (closures of llamaserve's small checker combinators) -----------

def _bounds(lo: Any, hi: Any) -> str:
    if lo is not None and hi is not None:
        return f" ({lo:g} to {hi:g})"
    if lo is not None:
        return f" (≥ {lo:g})"
    return ""


def describe(check: Any) -> str | None:
    """A short type for a checker, or None when it is not one of the generic combinators."""
    name = getattr(check, "__qualname__", "")
    free = inspect.getclosurevars(check).nonlocals if callable(check) and hasattr(check, "__code__") else {}
    if name == "boolean":
        return "boolean"
    if name == "string":
        return "string"
    if name.startswith("integer."):
        return "integer" + _bounds(free.get("lo"), free.get("hi"))
    if name.startswith("number."):
        lo = free.get("lo")
        return "number" + (_bounds(lo, None) if lo not in (None, 0.0, -math.inf) else " (≥ 0)" if lo == 0.0 else "")
    if name.startswith("choice."):
        return "one of " + ", ".join(f"`{o}`" for o in free["options"])
    if name.startswith("optional."):
        inner = describe(free["check"])
        return None if inner is None else f"{inner}, or null"
    if name.startswith("list_of."):
        inner = describe(free["check"])
        return None if inner is None else f"list of {inner}"
    if name.startswith("at_most."):
        inner = describe(free["check"])
        if inner is None:
            return None
        base = inner.split(" (")[0]
        lo = inner[len(base):].strip(" ()≥").split(" to ")[0] or "0"
        return f"{base} ({lo} to {free['hi']:g})"
    if name.startswith("via."):
        parse = getattr(free.get("parse"), "__name__", "")
        what = {"parse_size": "size (bytes, or `500MB`, `12GiB`, `2G`)",
                "parse_duration": "duration (seconds, or `90s`, `5m`, `1h`, `never`)"}.get(parse)
        if what is None:
            return None
        return what + (", > 0" if free.get("positive") else "")
    return None


# -- defaults ---------------------------------------------------------------------------------------

def _dataclass_defaults(cls: type) -> dict[str, Any]:
    out = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def _stub_defaults() -> dict[str, Any]:
    """The keyword defaults of Model.__init__ and Context.__init__ in the compiled core's stub."""
    tree = ast.parse((ROOT / "llamacore" / "_core.pyi").read_text())
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in ("Model", "Context"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                        if default is not None:
                            out.setdefault(arg.arg, ast.literal_eval(default))
    # the load keys as Llama(...) and a model entry spell them; Context calls them otherwise
    out["embedding"] = out.get("embeddings")
    out["pooling_type"] = out.get("pooling")
    return out


def _show(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and math.isinf(value):
        return "`never`"
    if isinstance(value, int) and value >= 1024 and value % 1024 == 0:
        for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
            if value % size == 0:
                return f"`{value // size}{unit}`"
    if isinstance(value, str) and " " in value:
        return value            # prose, not a value
    if isinstance(value, (tuple, list)) and not value:
        return "`[]`"
    if isinstance(value, float) and value.is_integer():
        return f"`{value:g}`"
    return f"`{value}`"


# -- rendering --------------------------------------------------------------------------------------

def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(section: str, names: list[str], checks: dict[str, Any], defaults: dict[str, Any],
           docs: dict[str, dict[str, Any]], problems: list[str], per_model: bool = False) -> str:
    rows = ["| Key | Type | Default | Description | Example |", "|---|---|---|---|---|"]
    for name in names:
        doc = docs.get(name)
        if doc is None:
            problems.append(f"{section}: key {name!r} has no description in config_descriptions.yml")
            continue
        kind = doc.get("type") or describe(checks.get(name))
        if kind is None:
            problems.append(f"{section}: key {name!r}: the checker does not tell its type; give one")
            continue
        default = doc["default"] if "default" in doc else _show(defaults.get(name))
        text = doc["doc"]
        if name in keys.DEPRECATED_KEYS:
            text = f"**Deprecated**, no effect: {keys.DEPRECATED_KEYS[name]}."
        elif per_model and name in keys.ENTRY_KEYS:
            text += " Also per model (or in `defaults`)."
        example = doc.get("example")
        if isinstance(example, bool):
            example = str(example).lower()
        example = f"`{name}: {example}`" if example is not None else ""
        rows.append(f"| `{name}` | {_cell(kind)} | {_cell(default)} | {_cell(text)} | {_cell(example)} |")
    for name in docs:
        if name not in names:
            problems.append(f"{section}: config_descriptions.yml describes {name!r}, which the tables lack")
    return "\n".join(rows)


def reference() -> str:
    docs = yaml.safe_load((HERE / "config_descriptions.yml").read_text())
    server = _dataclass_defaults(settings.ServerConfig)
    server["cors"] = server["cors_origins"]
    server["adapters_dir"] = server["adapters_dirs"]
    entry = {k: v for k, v in _dataclass_defaults(settings.ModelEntry).items() if v not in (None, {}, ())}
    stub = _stub_defaults()
    media = _dataclass_defaults(type(settings.ServerConfig().media))
    media["max_images_per_request"] = media.get("max_images")
    load = sorted(keys.LOAD_KEYS)
    entry_only = [k for k in keys.ENTRY_KEYS if k not in keys.LOAD_KEYS]
    inherited = {k: "the top-level value" for k in entry_only if k in keys.ROOT_KEYS}
    problems: list[str] = []
    parts = [
        "### Top-level keys\n\nBesides these, `defaults` (a mapping merged into every model entry) and "
        "`models` (the list of model entries). A key also allowed per model is overridden by an entry "
        "or by `defaults`.\n\n",
        _table("top level", list(keys.ROOT_KEYS), keys.ROOT_KEYS, server, docs["root"], problems, per_model=True),
        "\n\n### Model entry keys\n\nThe keys of one item of `models`; `defaults` takes the same keys and "
        "merges them into every entry. The load keys below are model entry keys too.\n\n",
        _table("model entry", entry_only, keys.ENTRY_KEYS, {**entry, **inherited}, docs["entry"], problems),
        "\n\n### Load keys\n\nHow llama.cpp loads the model and sizes its context: the keyword arguments "
        "`llamacore.Llama(...)` takes under the same names (per model, or in `defaults`).\n\n",
        _table("load", load, keys.LOAD_KEYS, stub, docs["load"], problems),
        "\n\n### `speculative`\n\n",
        _table("speculative", list(keys.SPECULATIVE_KEYS), {}, {}, docs["speculative"], problems),
        "\n\n### `media`\n\nTop level only: where images in requests may come from.\n\n",
        _table("media", list(keys.MEDIA_KEYS), {}, media, docs["media"], problems),
        "\n\n### `sampling`\n\nPer model (or in `defaults`): the values a request gets for the fields it "
        "leaves out.\n\n",
        _table("sampling", list(keys.SAMPLING_DEFAULTS), keys.SAMPLING_DEFAULTS, {}, docs["sampling"], problems),
        "\n\n### An item of `adapters`\n\nA path, or a mapping with these keys.\n\n",
        _table("adapters item", list(keys.ADAPTER_ITEM_KEYS), {}, {}, docs["adapters_item"], problems),
    ]
    if problems:
        raise RuntimeError("configuration reference:\n  " + "\n  ".join(problems))
    return "".join(parts) + "\n"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference())
