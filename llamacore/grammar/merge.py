"""Local ``$ref`` resolution and ``allOf`` merging for the schema converter.

``allOf`` parts are merged into one schema: properties merge recursively, ``required`` unions,
``enum`` values intersect, ``type`` sets intersect, numeric lower bounds take the largest and upper
bounds the smallest; any other keyword must agree across parts, else the schema is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

ANNOTATIONS = frozenset({
    "$schema", "$id", "$comment", "$defs", "definitions", "$anchor", "title", "description", "default",
    "examples", "deprecated", "readOnly", "writeOnly", "contentEncoding", "contentMediaType",
    "discriminator",
})
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


def canonical(value: Any) -> str:
    """The compact JSON text of a value (how enum and const values are written in grammars)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def resolve(document: Any, ref: Any, path: str) -> Any:
    """The subschema that the local JSON pointer ``ref`` names."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise ValueError(f"{path}: only local '$ref' values ('#/...') are supported, got {ref!r}")
    node: Any = document
    for part in filter(None, unquote(ref[1:]).split("/")):
        key = part.replace("~1", "/").replace("~0", "~")
        try:
            node = node[int(key)] if isinstance(node, list) else node[key]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ValueError(f"{path}: '$ref' {ref!r} does not resolve") from None
    return node


def _meet(a: Any, b: Any) -> Any:
    """The type both type names allow (integers are numbers), or None."""
    if a == b:
        return a
    return "integer" if {a, b} == {"integer", "number"} else None


def _merge_into(merged: dict[str, Any], part: Mapping[str, Any], path: str) -> None:
    for key, value in part.items():
        if key in ANNOTATIONS:
            continue
        if key not in merged:
            merged[key] = value
        elif key == "properties":
            props = dict(merged[key])
            for name, sub in value.items():
                props[name] = {"allOf": [props[name], sub]} if name in props and props[name] != sub else sub
            merged[key] = props
        elif key == "required":
            merged[key] = list(dict.fromkeys([*merged[key], *value]))
        elif key == "enum":
            theirs = {canonical(v) for v in value}
            merged[key] = [v for v in merged[key] if canonical(v) in theirs]
        elif key == "type":
            kinds = list(dict.fromkeys(k for a in _plain(merged[key]) for b in _plain(value)
                                       if (k := _meet(a, b)) is not None))
            if not kinds:
                raise ValueError(f"{path}: 'allOf' parts have conflicting 'type' values")
            merged[key] = kinds[0] if len(kinds) == 1 else kinds
        elif key in _LOWER:
            merged[key] = max(merged[key], value)
        elif key in _UPPER:
            merged[key] = min(merged[key], value)
        elif merged[key] != value:
            raise ValueError(f"{path}: 'allOf' parts have conflicting {key!r} values")


def _plain(value: Any) -> list[str]:
    return list(value) if isinstance(value, list) else [value]


def expand(document: Any, schema: Any, path: str, seen: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``schema`` with its ``$ref`` and ``allOf`` inlined into one mapping."""
    if schema is True:
        return {}
    if not isinstance(schema, Mapping):
        raise ValueError(f"{path}: expected a schema object, got {schema!r}")
    if "$ref" not in schema and "allOf" not in schema:
        return dict(schema)
    parts = []
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref in seen:
            raise ValueError(f"{path}: circular '$ref' {ref!r} inside 'allOf'")
        parts.append(expand(document, resolve(document, ref, path), str(ref), seen | {ref}))
    all_of = schema.get("allOf", [])
    if "allOf" in schema and (not isinstance(all_of, list) or not all_of):
        raise ValueError(f"{path}: 'allOf' must be a non-empty list")
    parts += [expand(document, sub, f"{path}/allOf/{i}", seen) for i, sub in enumerate(all_of)]
    parts.append({k: v for k, v in schema.items() if k not in ("$ref", "allOf")})
    merged: dict[str, Any] = {}
    for part in parts:
        _merge_into(merged, part, path)
    if "const" in merged and "enum" in merged:
        if canonical(merged["const"]) not in {canonical(v) for v in merged["enum"]}:
            raise ValueError(f"{path}: 'allOf' parts have a 'const' outside their 'enum'")
        del merged["enum"]
    if "enum" in merged and not merged["enum"]:
        raise ValueError(f"{path}: the 'enum' values of the 'allOf' parts have nothing in common")
    return merged


_ALL_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


def _value_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or isinstance(value, float) and value.is_integer():
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "object")


def type_set(kind: Any) -> set[str]:
    """The type names a ``type`` keyword value lists (empty when it names none)."""
    return set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()


def is_type(value: Any, kinds: set[str]) -> bool:
    """Whether a JSON value has one of the type names ``kinds`` (integral numbers are integers)."""
    if isinstance(value, bool):
        return "boolean" in kinds
    if isinstance(value, int) or isinstance(value, float) and value.is_integer():
        return bool(kinds & {"integer", "number"})
    table = {float: "number", str: "string", list: "array", dict: "object", type(None): "null"}
    return table.get(type(value)) in kinds


def literals(schema: Mapping[str, Any]) -> set[str] | None:
    """The canonical texts of the values a const/enum schema allows (None: not a finite set)."""
    if "const" in schema:
        return {canonical(schema["const"])}
    if isinstance(schema.get("enum"), list):
        return {canonical(v) for v in schema["enum"]}
    return None


def kinds(document: Any, schema: Any, path: str, depth: int = 0) -> frozenset[str]:
    """The JSON types a schema's values can have (integer values count as numbers too)."""
    if schema is True or not isinstance(schema, Mapping) or depth > 8:
        return _ALL_TYPES
    schema = expand(document, schema, path)
    found: set[str]
    if "const" in schema or isinstance(schema.get("enum"), list):
        values = [schema["const"]] if "const" in schema else schema["enum"]
        found = {_value_type(v) for v in values}
    elif "type" in schema:
        found = set(_plain(schema["type"]))
    elif isinstance(schema.get("anyOf", schema.get("oneOf")), list):
        found = set().union(*(kinds(document, s, path, depth + 1) for s in schema.get("anyOf", schema.get("oneOf"))))
    else:
        return _ALL_TYPES
    if "number" in found or "integer" in found:
        found |= {"number", "integer"}
    return frozenset(found)


def disjoint(document: Any, a: Any, b: Any, path: str) -> bool:
    """Whether no value can match both schemas, as far as types, const/enum values and a required
    property with const/enum values (a discriminator) show; ``oneOf`` needs that to be exact."""
    if not kinds(document, a, path) & kinds(document, b, path):
        return True
    a, b = expand(document, a, path), expand(document, b, path)
    la, lb = literals(a), literals(b)
    if la is not None and lb is not None:
        return not la & lb
    props_a, props_b = a.get("properties", {}), b.get("properties", {})
    for name in set(a.get("required", [])) & set(b.get("required", [])):
        sa, sb = props_a.get(name), props_b.get(name)
        if isinstance(sa, Mapping) and isinstance(sb, Mapping):
            la, lb = literals(expand(document, sa, path)), literals(expand(document, sb, path))
            if la is not None and lb is not None and not la & lb:
                return True
    return False
