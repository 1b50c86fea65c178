"""llamacore's top-level names: one table (`_EXPORTS`) decides them; `__all__` and the names a type
checker sees (the TYPE_CHECKING imports) agree with it, and each resolves to what it names."""

import ast
from pathlib import Path

import llamacore

INIT = Path(llamacore.__file__)


def type_checking_names() -> set[str]:
    tree = ast.parse(INIT.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "_TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                names.update(alias.asname or alias.name for alias in imp.names)
    return names


def test_all_is_the_export_table():
    assert llamacore.__all__ == list(llamacore._EXPORTS)
    assert len(set(llamacore.__all__)) == len(llamacore.__all__)


def test_type_checkers_see_every_class_and_function_export():
    # the lcp TypedDicts and llama.cpp's constants reach type checkers through their own modules
    native = {name for name, module in llamacore._EXPORTS.items() if module not in ("llama_types", "llama_cpp")}
    assert type_checking_names() == native


def test_every_export_resolves():
    for name in llamacore.__all__:
        assert getattr(llamacore, name) is not None, name
