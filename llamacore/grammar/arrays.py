"""Arrays for the schema converter: prefixItems/items tuples, minItems/maxItems, and uniqueItems.

A grammar cannot compare items with each other, so ``uniqueItems`` is compiled only where the
items have a small finite set of values (enum, const, boolean, null): one rule per subset of
values used so far, which is why that set is capped at MAX_UNIQUE_VALUES.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llamacore.grammar.gbnf import quote, repeat
from llamacore.grammar.limits import UnsupportedSchemaError
from llamacore.grammar.merge import expand, is_type, literals, type_set
from llamacore.grammar.visitor import SchemaVisitor

MAX_UNIQUE_VALUES = 8   # uniqueItems is compiled over item sets of at most this many values


def array_body(conv: SchemaVisitor, schema: Mapping[str, Any], hint: str, path: str, depth: int) -> str:
    """GBNF expression matching the arrays ``schema`` (an array schema) allows."""
    lo, hi = conv.bounds(schema, "minItems", "maxItems", path)
    items = schema.get("items", {})
    prefix = schema.get("prefixItems")
    if isinstance(prefix, Mapping) and "items" not in schema:
        items, prefix = prefix, None      # llama.cpp reads a lone prefixItems schema as items
    elif isinstance(prefix, Mapping):
        prefix = None
    if prefix is None and isinstance(items, list):        # draft-7 tuple form
        prefix, items = items, schema.get("additionalItems", False)
    elif prefix is not None and "items" not in schema:
        items = False                     # a tuple is exact unless items says what may follow
    if prefix is not None and not isinstance(prefix, list):
        raise ValueError(f"{path}: 'prefixItems' must be a list of schemas")
    if schema.get("uniqueItems", False) not in (True, False):
        raise ValueError(f"{path}: 'uniqueItems' must be true or false")
    if schema.get("uniqueItems") and (hi is None or hi > 1):
        if prefix:
            raise UnsupportedSchemaError(f"{path}: 'uniqueItems' with 'prefixItems' is not supported")
        return _unique_array(conv, items, lo, hi, hint, path)
    w = conv.w
    atoms = [conv.visit(s, f"{hint}-{i}", f"{path}/prefixItems/{i}", depth + 1)
             for i, s in enumerate((prefix or [])[:hi])]
    rest_lo, rest_hi = max(lo - len(atoms), 0), None if hi is None else hi - len(atoms)
    if items is False or rest_hi == 0:
        if rest_lo:
            raise ValueError(f"{path}: 'minItems' asks for more items than the array may hold")
        rest = ""
    else:
        item = conv.visit(items, f"{hint}-item", f"{path}/items", depth + 1)
        sep = conv.named(f"{hint}-sep", f'","{w} {item}')
        if atoms:
            rest = repeat(sep, rest_lo, rest_hi, conv)
        else:
            more = repeat(sep, max(rest_lo - 1, 0), None if rest_hi is None else rest_hi - 1, conv)
            if not rest_lo:
                return f'"["{w} ({" ".join(x for x in (item, more, w.strip()) if x)})? "]"'
            rest = f"{item} {more}".strip()
    inner = f' ","{w} '.join(atoms) + (" " + rest if rest else "")
    inner = inner.strip()
    return f'"["{w} {inner}{w} "]"' if inner else f'"["{w} "]"'


def _unique_array(conv: SchemaVisitor, items: Any, lo: int, hi: int | None, hint: str, path: str) -> str:
    """Arrays without repeated items over a small finite set of values: one rule per used subset."""
    values = _finite_values(conv.document, items, path)
    if values is None or len(values) > MAX_UNIQUE_VALUES:
        raise UnsupportedSchemaError(f"{path}: 'uniqueItems' is supported only for items with at most "
                                     f"{MAX_UNIQUE_VALUES} possible values (enum, const, boolean, null)")
    hi = len(values) if hi is None else min(hi, len(values))
    if lo > hi:
        raise ValueError(f"{path}: 'minItems' asks for more distinct items than there are values")
    w, memo = conv.w, {}

    def after(used: int, count: int) -> str:
        if used not in memo:
            alts = [w.strip()] if count >= lo else []
            alts += [f'","{w} {quote(v)} {after(used | 1 << k, count + 1)}'.strip()
                     for k, v in enumerate(values) if not used & 1 << k and count < hi]
            memo[used] = conv.named(f"{hint}-unique", " | ".join(a or '""' for a in alts))
        return memo[used]

    first = " | ".join(f"{quote(v)} {after(1 << k, 1)}" for k, v in enumerate(values))
    return f'"["{w} ({first}){"?" if lo == 0 else ""} "]"'


def _finite_values(document: Any, schema: Any, path: str) -> list[str] | None:
    """Canonical texts of every value ``schema`` allows, if it allows only finitely many."""
    schema = expand(document, schema, path) if isinstance(schema, Mapping) else schema
    if not isinstance(schema, Mapping):
        return None
    found = literals(schema)
    if found is not None:
        if "type" in schema:
            found = {v for v in found if is_type(json.loads(v), type_set(schema["type"]))}
        return sorted(found)
    table = {"boolean": ["true", "false"], "null": ["null"]}
    kinds = sorted(type_set(schema.get("type")))
    if set(schema) <= {"type"} and kinds and all(k in table for k in kinds):
        return [v for k in kinds for v in table[k]]
    return None
