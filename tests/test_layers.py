"""The import contract: each package imports only the layers below it, and nothing imports in a cycle.

Every import counts, at module level, inside a function or under TYPE_CHECKING: a function-level
import is how a cycle or an upward dependency hides, so it is no excuse here. The layers are
listed once below (lowest first); a module may import its own package and any layer under it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]      # tests/ is at the top of the repository

# llamacore: the native binding and plain types; pure subpackages; the chat pipeline; the modules of
# llama-cpp-python's that `Llama` uses; Llama's private parts; `Llama` and the chat handlers; tools.
# llama_types holds only TypedDicts (lcp's module name), so every layer may use its shapes.
LLAMACORE_LAYERS: list[set[str]] = [
    {"_core", "_version", "errors", "llama_cpp", "llama_types"},
    {"gguf"},
    {"grammar", "generation", "vision"},
    {"chat"},
    {"llama_grammar", "llama_cache", "llama_speculative", "llama_tokenizer"},
    {"_llama"},
    {"llama", "llama_chat_format"},
    {"__init__", "__main__", "rpc", "quantize"},
]
LLAMASERVE_LAYERS: list[set[str]] = [
    {"__init__", "errors", "runtime"},
    {"config"},
    {"engine"},
    {"worker"},
    {"lora"},
    {"models"},
    {"serving"},
    {"api"},
    {"app"},
    {"cli"},
    {"__main__"},
]
# what llamaserve may take from llamacore: its top-level exports and its engine-neutral packages
LLAMACORE_FOR_SERVER = {"errors", "llama_types", "gguf", "grammar", "generation", "vision", "chat",
                        "rpc", "quantize"}
# the HTTP framework lives in the API layer and the app that mounts it
STARLETTE_IN = {"api", "app", "cli"}


def modules(package: str) -> dict[str, Path]:
    found = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = {**modules("llamacore"), **modules("llamaserve"), "llamacore._core": ROOT / "llamacore/_core.pyi"}


def imports(path: Path) -> Iterator[tuple[str, int]]:
    """(imported module or name, line) for every absolute import in the file, at any depth."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            assert node.module is not None
            yield from ((f"{node.module}.{alias.name}", node.lineno) for alias in node.names)


def resolve(name: str) -> str | None:
    """The project module an imported name lives in (None outside the project)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def top(module: str) -> str:
    """A module's first part below its package: llamaserve.engine.scheduler -> engine."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer(module: str) -> int:
    layers = LLAMACORE_LAYERS if module.startswith("llamacore") else LLAMASERVE_LAYERS
    for rank, names in enumerate(layers):
        if top(module) in names:
            return rank
    raise AssertionError(f"{module} is in no layer of tests/test_layers.py")


def violations() -> Iterator[str]:
    for module, path in sorted(MODULES.items()):
        if path.suffix == ".pyi":
            continue
        where = f"{path.relative_to(ROOT)}"
        own_package = module.split(".")[0]
        for name, line in sorted(set(imports(path))):
            if name.split(".")[0] == "starlette" and own_package == "llamaserve" and top(module) not in STARLETTE_IN:
                yield f"{where}:{line}: imports starlette outside the API layer"
            target = resolve(name)
            if target is None or target == module:
                continue
            if target.split(".")[0] != own_package:
                if own_package == "llamacore":
                    yield f"{where}:{line}: llamacore imports {target}"
                elif top(target) not in LLAMACORE_FOR_SERVER and target != "llamacore":
                    yield f"{where}:{line}: imports llamacore's private or facade module {target}"
                continue
            if top(target) == top(module) and top(module) != "__init__":
                continue
            if layer(target) >= layer(module):
                yield f"{where}:{line}: {module} (layer {layer(module)}) imports {target} (layer {layer(target)})"


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), over every import."""
    graph = {m: {t for n, _ in imports(p) if (t := resolve(n)) and t != m} for m, p in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_every_import_goes_down_the_layers():
    assert list(violations()) == []


def test_no_import_cycles():
    assert cycles() == []


if __name__ == "__main__":
    print("\n".join(violations()))
    print("\n".join(map(str, cycles())))
