"""JSON Schema -> GBNF (llama.cpp grammar syntax) for constrained JSON generation.

The grammar only ever produces valid JSON, and whitespace between tokens is
bounded (at most a newline plus 16 blanks) so a sampler cannot wander in
whitespace forever. Supported keywords are listed in ``schema_to_grammar``;
anything else raises ValueError naming the keyword, because silently ignoring
a constraint would let the model produce output the caller's validator rejects.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from llamacore.gbnf import int_range as _int_range
from llamacore.gbnf import quote as _quote
from llamacore.gbnf import repeat as _repeat

__all__ = ["JSON_GRAMMAR", "schema_to_grammar"]

# Shared rules, emitted only when referenced. ``ws`` is the bounded whitespace that
# follows every token (at most a newline plus 16 blanks).
_PRIMITIVES = {
    "value": "object | array | string | number | boolean | null",
    "object": r'"{" ws (string ":" ws value ("," ws string ":" ws value)*)? "}" ws',
    "array": r'"[" ws (value ("," ws value)*)? "]" ws',
    "string": r'"\"" char* "\"" ws',
    "char": r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "number": r'"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,20})? ([eE] [-+]? [0-9]{1,3})? ws',
    "integer": r'"-"? ("0" | [1-9] [0-9]{0,15}) ws',
    "boolean": '("true" | "false") ws',
    "null": '"null" ws',
    "ws": r'| " " | "\n" [ \t]{0,16}',
}

# Keywords that never constrain output and are skipped (``format`` is an annotation
# by default in JSON Schema, so plain strings still validate).
_ANNOTATIONS = frozenset({
    "$schema", "$id", "$comment", "$defs", "definitions", "title", "description", "default", "examples",
    "deprecated", "readOnly", "writeOnly", "format", "contentEncoding", "contentMediaType",
})
_INT_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_SUPPORTED = frozenset({
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required",
    "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
    *_INT_BOUNDS,
})
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
# Type assumed when 'type' is absent but a type-specific keyword is present (else: any value).
_IMPLIED_TYPE = {
    **dict.fromkeys(("properties", "required", "additionalProperties"), "object"),
    **dict.fromkeys(("items", "prefixItems", "minItems", "maxItems"), "array"),
    **dict.fromkeys(("minLength", "maxLength"), "string"),
    **dict.fromkeys(_INT_BOUNDS, "integer"),
}
_NAME = re.compile(r"[a-zA-Z0-9-]+")
_TERMINALS = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')


def _key(name: str) -> str:
    """Sequence for an object key and its colon."""
    return f'{_quote(json.dumps(name, ensure_ascii=False))} ws ":" ws'


def _literal(value: Any, path: str) -> str:
    """Sequence matching the JSON ``value`` with optional whitespace between its tokens (ending in ``ws``)."""
    if isinstance(value, list):
        items = ' "," ws '.join(_literal(v, path) for v in value)
        return f'"[" ws {items} "]" ws' if items else '"[" ws "]" ws'
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError(f"{path}: enum/const object keys must be strings")
        members = ' "," ws '.join(f"{_key(k)} {_literal(v, path)}" for k, v in value.items())
        return f'"{{" ws {members} "}}" ws' if members else '"{" ws "}" ws'
    try:
        return f"{_quote(json.dumps(value, ensure_ascii=False, allow_nan=False))} ws"
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: enum/const value {value!r} is not JSON-serializable: {exc}") from None



class _Converter:
    """Walks one schema document, emitting a rule per object/array/alternation and per $ref target."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self.rules: dict[str, str] = {"root": ""}
        self.by_body: dict[str, str] = {}
        self.refs: dict[str, str] = {"#": "root"}

    # --- rule bookkeeping ---
    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^a-zA-Z0-9]+", "-", hint).strip("-") or "r"
        name, n = base, 0
        while name in self.rules or name in _PRIMITIVES:
            n += 1
            name = f"{base}-{n}"
        return name

    def rule(self, hint: str, body: str) -> str:
        """Name for ``body``, reusing an identical rule so repeated sub-schemas stay compact."""
        if _NAME.fullmatch(body):
            return body
        if body not in self.by_body:
            name = self.fresh(hint)
            self.rules[name] = body
            self.by_body[body] = name
        return self.by_body[body]

    def visit(self, schema: Any, hint: str, path: str) -> str:
        """Rule name matching ``schema`` (with trailing whitespace)."""
        return self.rule(hint, self.body(schema, hint, path))

    # --- $ref / allOf ---
    def resolve(self, ref: str, path: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise ValueError(f"{path}: only local '$ref' values ('#/...') are supported, got {ref!r}")
        node: Any = self.document
        for part in filter(None, unquote(ref[1:]).split("/")):
            key = part.replace("~1", "/").replace("~0", "~")
            try:
                node = node[int(key)] if isinstance(node, list) else node[key]
            except (KeyError, IndexError, ValueError, TypeError):
                raise ValueError(f"{path}: '$ref' {ref!r} does not resolve") from None
        return node

    def expand(self, schema: Any, path: str, seen: frozenset[str] = frozenset()) -> dict:
        """``schema`` with its $ref and allOf inlined into one dict (for merging)."""
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
            parts.append(self.expand(self.resolve(ref, path), ref, seen | {ref}))
        all_of = schema.get("allOf", [])
        if "allOf" in schema and (not isinstance(all_of, list) or not all_of):
            raise ValueError(f"{path}: 'allOf' must be a non-empty list")
        parts += [self.expand(sub, f"{path}/allOf/{i}", seen) for i, sub in enumerate(all_of)]
        parts.append({k: v for k, v in schema.items() if k not in ("$ref", "allOf")})
        merged: dict[str, Any] = {}
        for part in parts:
            for key, value in part.items():
                if key in _ANNOTATIONS:
                    continue
                if key == "properties":
                    props = merged.setdefault("properties", {})
                    for name, sub in value.items():
                        props[name] = {"allOf": [props[name], sub]} if props.get(name, sub) != sub else sub
                elif key == "required":
                    merged["required"] = list(dict.fromkeys([*merged.get("required", []), *value]))
                elif key in merged and merged[key] != value:
                    raise ValueError(f"{path}: 'allOf' parts have conflicting {key!r} values")
                else:
                    merged[key] = value
        return merged

    # --- schema bodies ---
    def body(self, schema: Any, hint: str, path: str) -> str:
        """GBNF expression (possibly an alternation) matching ``schema``."""
        if schema is True or schema == {}:
            return "value"
        if schema is False:
            raise ValueError(f"{path}: schema 'false' matches nothing")
        if not isinstance(schema, Mapping):
            raise ValueError(f"{path}: expected a schema object, got {schema!r}")
        unknown = sorted(set(schema) - _SUPPORTED - _ANNOTATIONS)
        if unknown:
            raise ValueError(f"{path}: unsupported JSON Schema keyword(s): {', '.join(map(repr, unknown))}")
        constraints = {k: v for k, v in schema.items() if k not in _ANNOTATIONS}
        if "allOf" in constraints or ("$ref" in constraints and len(constraints) > 1):
            return self.body(self.expand(constraints, path), hint, path)
        if "$ref" in constraints:
            return self.ref(constraints["$ref"], path)
        if "anyOf" in constraints or "oneOf" in constraints:
            return self.alternatives(constraints, hint, path)
        if "const" in constraints:
            return _literal(constraints["const"], path)
        if "enum" in constraints:
            values = constraints["enum"]
            if not isinstance(values, list) or not values:
                raise ValueError(f"{path}: 'enum' must be a non-empty list")
            return " | ".join(dict.fromkeys(_literal(v, path) for v in values))
        implied = (t for k, t in _IMPLIED_TYPE.items() if k in constraints)
        kind = constraints.get("type", next(implied, None))
        if isinstance(kind, list):
            if not kind:
                raise ValueError(f"{path}: 'type' list is empty")
            return " | ".join(self.visit({**constraints, "type": t}, f"{hint}-{t}", path) for t in kind)
        if kind is None:
            return "value"
        if kind not in _TYPES:
            raise ValueError(f"{path}: unknown type {kind!r}")
        if kind != "integer":
            bad = [k for k in _INT_BOUNDS if k in constraints]
            if bad:
                raise ValueError(f"{path}: keyword {bad[0]!r} is only supported with type 'integer'")
        if kind in ("object", "array"):
            return getattr(self, kind)(constraints, hint, path)
        if kind in ("string", "integer"):
            return getattr(self, kind)(constraints, path)
        return kind

    def ref(self, ref: str, path: str) -> str:
        if ref not in self.refs:
            target = self.resolve(ref, path)
            name = self.fresh(ref.rsplit("/", 1)[-1])
            self.refs[ref] = name
            self.rules[name] = ""  # reserve the name so recursive references resolve to it
            self.rules[name] = self.body(target, name, ref)
        return self.refs[ref]

    def alternatives(self, schema: Mapping[str, Any], hint: str, path: str) -> str:
        if "anyOf" in schema and "oneOf" in schema:
            raise ValueError(f"{path}: 'anyOf' and 'oneOf' together are not supported")
        key = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            raise ValueError(f"{path}: {key!r} must be a non-empty list")
        siblings = {k: v for k, v in schema.items() if k != key}
        alts = []
        for i, branch in enumerate(branches):
            if siblings:  # keywords next to anyOf apply to every branch
                branch = {**siblings, **({} if branch is True else branch)}
            alts.append(self.visit(branch, f"{hint}-{i}", f"{path}/{key}/{i}"))
        return " | ".join(dict.fromkeys(alts))

    def object(self, schema: Mapping[str, Any], hint: str, path: str) -> str:
        props = dict(schema.get("properties", {}))
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValueError(f"{path}: 'required' must be a list of strings")
        for name in required:
            props.setdefault(name, {})
        # Extra keys are allowed only for a bare object (or when asked): a declared
        # shape is usually meant to be exact, as in OpenAI strict structured outputs.
        additional = schema.get("additionalProperties", "properties" not in schema)
        if not props and additional in (True, {}):
            return "object"
        prefix = "" if hint == "root" else f"{hint}-"
        members = []  # (kv rule, required)
        for name, sub in props.items():
            value = self.visit(sub, f"{prefix}{name}", f"{path}/properties/{name}")
            kv = self.rule(f"{prefix}{name}-kv", f"{_key(name)} {value}")
            members.append((kv, name in required))
        extra = None
        if additional is not False:
            value = self.visit(additional, f"{prefix}additional", f"{path}/additionalProperties")
            extra = self.rule(f"{prefix}additional-kv", f'string ":" ws {value}')

        def after(start: int) -> str:
            parts = [f'"," ws {kv}' if req else f'("," ws {kv})?' for kv, req in members[start:]]
            if extra:
                parts.append(f'("," ws {extra})*')
            return " ".join(parts)

        # A member opens the object when every earlier member is optional and absent.
        alts, nullable = [], True
        for i, (kv, req) in enumerate(members):
            alts.append(f"{kv} {after(i + 1)}".strip())
            if req:
                nullable = False
                break
        if nullable and extra:
            alts.append(f"{extra} {after(len(members))}")
        if not alts:
            return '"{" ws "}" ws'
        if len(alts) == 1 and not nullable:
            inner = alts[0]
        else:
            inner = "(" + " | ".join(alts) + ")" + ("?" if nullable else "")
        return f'"{{" ws {inner} "}}" ws'

    def array(self, schema: Mapping[str, Any], hint: str, path: str) -> str:
        lo, hi = self.bounds(schema, "minItems", "maxItems", path)
        items = schema.get("items", {})
        tuple_items = schema.get("prefixItems", items if isinstance(items, list) else None)
        if tuple_items is not None:
            if "prefixItems" in schema and items not in ({}, False):
                raise ValueError(f"{path}: 'items' next to 'prefixItems' must be false (fixed-length tuples)")
            if lo > len(tuple_items) or (hi is not None and hi < len(tuple_items)):
                raise ValueError(f"{path}: minItems/maxItems contradict the tuple length {len(tuple_items)}")
            atoms = [
                self.visit(s, f"{hint}-{i}", f"{path}/prefixItems/{i}") for i, s in enumerate(tuple_items)
            ]
            inner = ' "," ws '.join(atoms)
        elif items is False or hi == 0:
            if lo > 0:
                raise ValueError(f"{path}: 'minItems' contradicts an array that must be empty")
            inner = ""
        else:
            item = self.visit(items, f"{hint}-item", f"{path}/items")
            rest = _repeat(f'"," ws {item}', max(lo - 1, 0), None if hi is None else hi - 1)
            inner = f"{item} {rest}".strip()
            if lo == 0:
                inner = f"({inner})?"
        return f'"[" ws {inner} "]" ws' if inner else '"[" ws "]" ws'

    def string(self, schema: Mapping[str, Any], path: str) -> str:
        lo, hi = self.bounds(schema, "minLength", "maxLength", path)
        if lo == 0 and hi is None:
            return "string"
        chars = _repeat("char", lo, hi)
        return f'"\\"" {chars} "\\"" ws' if chars else '"\\"\\"" ws'

    def integer(self, schema: Mapping[str, Any], path: str) -> str:
        for key in _INT_BOUNDS:
            value = schema.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"{path}: {key!r} must be a number (draft-4 boolean form is not supported)")
        # Tightest integer bounds implied by the inclusive and exclusive limits.
        lows = [math.ceil(schema["minimum"])] if "minimum" in schema else []
        lows += [math.floor(schema["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in schema else []
        highs = [math.floor(schema["maximum"])] if "maximum" in schema else []
        highs += [math.ceil(schema["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in schema else []
        lo, hi = max(lows, default=None), min(highs, default=None)
        if lo is None and hi is None:
            return "integer"
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"{path}: integer bounds leave no valid value")
        return f"{_int_range(lo, hi)} ws"

    @staticmethod
    def bounds(schema: Mapping[str, Any], lo_key: str, hi_key: str, path: str) -> tuple[int, int | None]:
        lo, hi = schema.get(lo_key, 0), schema.get(hi_key)
        for key, value in ((lo_key, lo), (hi_key, hi)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{path}: {key!r} must be a non-negative integer")
        if hi is not None and lo > hi:
            raise ValueError(f"{path}: {lo_key!r} is greater than {hi_key!r}")
        return lo, hi

    def grammar(self) -> str:
        self.rules["root"] = self.body(self.document, "root", "#")
        lines = [f"{name} ::= {body}" for name, body in self.rules.items()]
        used: set[str] = set()
        todo = list(self.rules.values())
        while todo:  # shared rules reachable from the schema's rules
            for name in set(_NAME.findall(_TERMINALS.sub(" ", todo.pop()))) & _PRIMITIVES.keys() - used:
                used.add(name)
                todo.append(_PRIMITIVES[name])
        lines += [f"{name} ::= {body}" for name, body in _PRIMITIVES.items() if name in used]
        return "\n".join(lines) + "\n"


def schema_to_grammar(schema: Mapping[str, Any]) -> str:
    """Convert a JSON Schema to a GBNF grammar whose ``root`` rule matches conforming JSON.

    Supported: type (including lists), enum, const, anyOf/oneOf (oneOf's exclusivity
    is not enforced), allOf (merged; conflicting keywords raise), local $ref
    (``#/$defs/...``, ``#/definitions/...``, any ``#/`` pointer, recursion allowed),
    object properties/required/additionalProperties, array items/prefixItems/minItems/
    maxItems, string minLength/maxLength, integer minimum/maximum/exclusive bounds,
    and {} / true for any JSON value.

    Objects keep properties in declared order; optional ones may be omitted. When
    ``properties`` is given, additionalProperties defaults to false (unlike JSON
    Schema) so the model sticks to the declared shape; a bare ``{"type": "object"}``
    accepts any object. Annotations (title, description, default, format, ...) are
    ignored; any other keyword raises ValueError naming it, and so does a keyword whose
    value has the wrong type (``"properties": 5``) or a schema nested too deeply to walk.
    """
    try:
        return _Converter(schema).grammar()
    except RecursionError:
        raise ValueError("JSON schema is nested too deeply") from None
    except (TypeError, AttributeError, KeyError, IndexError) as exc:   # a keyword with a value of the wrong type
        raise ValueError(f"malformed JSON schema ({type(exc).__name__}: {exc})") from None


JSON_GRAMMAR: str = schema_to_grammar({"type": "object"})
"""Grammar for ``response_format={"type": "json_object"}``: any JSON object."""
