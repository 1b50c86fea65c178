"""JSON Schema -> GBNF (llama.cpp grammar syntax) for constrained JSON generation.

The grammar only ever produces JSON that validates against the schema. Whitespace between tokens
is a per-call choice (``WHITESPACE``): none, at most one space (the default), or a newline plus
bounded indentation; values never carry trailing whitespace. Every keyword that constrains values
is either compiled or refused with ValueError naming it, because silently ignoring a constraint
would let the model produce output the caller's validator rejects. Conversion is bounded by
GrammarLimits (size, nesting, time) so a hostile schema is refused quickly.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from llamacore.grammar.arrays import array_body
from llamacore.grammar.formats import format_pattern
from llamacore.grammar.gbnf import int_range, literal_alternation, quote, repeat
from llamacore.grammar.limits import Budget, GrammarLimitError, GrammarLimits, UnsupportedSchemaError
from llamacore.grammar.merge import ANNOTATIONS, canonical, disjoint, expand, is_type, resolve, type_set
from llamacore.grammar.numbers import number_range
from llamacore.grammar.objects import object_body
from llamacore.grammar.regex import parse_anchored
from llamacore.grammar.regex_gbnf import Emitter, fit_length, pattern_content

__all__ = ["JSON_GRAMMAR", "WHITESPACE", "GrammarLimits", "schema_to_grammar"]

# ws rule per whitespace mode (None: no whitespace at all between tokens).
WHITESPACE: dict[str, str | None] = {"none": None, "compact": '| " "', "pretty": '| " " | "\\n" [ \\t]{0,20}'}

# Shared rules, emitted only when referenced; "@" stands for the whitespace between tokens.
_PRIMITIVES = {
    "value": "object | array | string | number | boolean | null",
    "object": '"{" @ (string ":" @ value ("," @ string ":" @ value)* @)? "}"',
    "array": '"[" @ (value ("," @ value)* @)? "]"',
    "string": r'"\"" char* "\""',
    "char": (r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | '
             r'[dD] [0-7] [0-9a-fA-F]{2}))'),
    "number": r'"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?',
    "integer": r'"-"? ("0" | [1-9] [0-9]{0,15})',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "ws": "",
}
_INT_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_SUPPORTED = frozenset({
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required",
    "additionalProperties", "propertyNames", "minProperties", "maxProperties", "dependentRequired",
    "dependencies", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
    "minLength", "maxLength", "pattern", "format", *_INT_BOUNDS,
})
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
# Type assumed when 'type' is absent but a type-specific keyword is present (else: any value).
_IMPLIED_TYPE = {
    **dict.fromkeys(("properties", "required", "additionalProperties", "propertyNames", "minProperties",
                     "maxProperties", "dependentRequired", "dependencies"), "object"),
    **dict.fromkeys(("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"), "array"),
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), "string"),
    **dict.fromkeys(_INT_BOUNDS, "number"),
}
_NAME = re.compile(r"[a-zA-Z0-9-]+")
_TERMINALS = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')


class Converter:
    """Walks one schema document, emitting a rule per object/array/alternation and per $ref target."""

    def __init__(self, document: Any, whitespace: str, limits: GrammarLimits) -> None:
        if whitespace not in WHITESPACE:
            raise ValueError(f"unknown whitespace mode {whitespace!r} (expected one of {', '.join(WHITESPACE)})")
        self.document = document
        self.ws_rule = WHITESPACE[whitespace]
        self.w = " ws" if self.ws_rule else ""
        self.budget = Budget(limits)
        self.rules: dict[str, str] = {"root": ""}
        self.by_body: dict[str, str] = {}
        self.refs: dict[str, str] = {"#": "root"}
        self.journal: list[str] = []     # rule names in the order they were reserved (for rollback)

    # --- rule bookkeeping (gbnf.Rules) ---
    def reserve(self, hint: str) -> str:
        base = re.sub(r"[^a-zA-Z0-9]+", "-", hint).strip("-")[:60].strip("-") or "r"
        name, n = base, 0
        while name in self.rules or name in _PRIMITIVES:
            n += 1
            name = f"{base}-{n}"
        self.rules[name] = ""
        self.journal.append(name)
        return name

    def rollback(self, mark: int) -> None:
        """Forget the rules reserved since ``len(journal)`` was ``mark`` (a branch that was refused)."""
        gone = set(self.journal[mark:])
        del self.journal[mark:]
        for name in gone:
            del self.rules[name]
        self.by_body = {b: n for b, n in self.by_body.items() if n not in gone}
        self.refs = {r: n for r, n in self.refs.items() if n not in gone}

    def define(self, name: str, body: str) -> None:
        self.budget.spend(body)
        self.rules[name] = body

    def named(self, hint: str, body: str) -> str:
        """Name for ``body``, reusing an identical rule so repeated sub-schemas stay compact."""
        if _NAME.fullmatch(body):
            return body
        if body not in self.by_body:
            name = self.reserve(hint)
            self.define(name, body)
            self.by_body[body] = name
        return self.by_body[body]

    def check(self, pending: int = 0) -> None:
        self.budget.check(pending)

    def key(self, name: str) -> str:
        return quote(json.dumps(name, ensure_ascii=False))

    def visit(self, schema: Any, hint: str, path: str, depth: int = 0) -> str:
        """Rule name matching ``schema``."""
        return self.named(hint, self.body(schema, hint, path, depth))

    # --- schema bodies ---
    def body(self, schema: Any, hint: str, path: str, depth: int = 0) -> str:
        """GBNF expression (possibly an alternation) matching ``schema``."""
        self.budget.depth(depth, path)
        if schema is True or schema == {}:
            return "value"
        if schema is False:
            raise ValueError(f"{path}: schema 'false' matches nothing")
        if not isinstance(schema, Mapping):
            raise ValueError(f"{path}: expected a schema object, got {schema!r}")
        unknown = sorted(set(schema) - _SUPPORTED - ANNOTATIONS)
        if unknown:
            raise UnsupportedSchemaError(f"{path}: unsupported JSON Schema keyword(s): {', '.join(map(repr, unknown))}")
        constraints = {k: v for k, v in schema.items() if k not in ANNOTATIONS}
        if not constraints:
            return "value"
        if "allOf" in constraints or ("$ref" in constraints and len(constraints) > 1):
            return self.body(expand(self.document, constraints, path), hint, path, depth + 1)
        if "$ref" in constraints:
            return self.ref(constraints["$ref"], path, depth)
        if "anyOf" in constraints or "oneOf" in constraints:
            return self.alternatives(constraints, hint, path, depth)
        if "const" in constraints or "enum" in constraints:
            return self.enum(constraints, hint, path)
        implied = (t for k, t in _IMPLIED_TYPE.items() if k in constraints)
        kind = constraints.get("type", next(implied, None))
        if isinstance(kind, list):
            if not kind:
                raise ValueError(f"{path}: 'type' list is empty")
            return " | ".join(dict.fromkeys(self.visit({**constraints, "type": t}, f"{hint}-{t}", path, depth + 1)
                                            for t in kind))
        if kind is None:
            return "value"
        if kind not in _TYPES:
            raise ValueError(f"{path}: unknown type {kind!r}")
        if kind == "object":
            return object_body(self, constraints, hint, path, depth)
        if kind == "array":
            return array_body(self, constraints, hint, path, depth)
        if kind == "string":
            return self.string(constraints, hint, path)
        if kind == "number":
            return number_range(constraints, path) or "number"
        if kind == "integer":
            return self.integer(constraints, path)
        return kind

    def ref(self, ref: str, path: str, depth: int) -> str:
        if ref not in self.refs:
            target = resolve(self.document, ref, path)
            name = self.reserve(str(ref).rsplit("/", 1)[-1])
            self.refs[ref] = name            # set first so recursive references resolve to it
            self.define(name, self.body(target, name, str(ref), depth + 1))
        return self.refs[ref]

    def alternatives(self, schema: Mapping[str, Any], hint: str, path: str, depth: int) -> str:
        if "anyOf" in schema and "oneOf" in schema:
            raise ValueError(f"{path}: 'anyOf' and 'oneOf' together are not supported")
        key = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            raise ValueError(f"{path}: {key!r} must be a non-empty list")
        siblings = {k: v for k, v in schema.items() if k != key}
        if siblings:   # keywords next to anyOf apply to every branch
            branches = [siblings if b is True else {"allOf": [siblings, b]} for b in branches]
        if key == "oneOf":
            for i, a in enumerate(branches):
                for j in range(i):
                    if not disjoint(self.document, a, branches[j], path):
                        raise ValueError(f"{path}: 'oneOf' branches {j} and {i} may both match a value, and a "
                                         "grammar cannot exclude that; use 'anyOf', or tell the branches "
                                         "apart by type or by a required property with distinct 'const' values")
        alts, refused = [], []
        for i, branch in enumerate(branches):
            mark = len(self.journal)
            try:
                alts.append(self.visit(branch, f"{hint}-{i}", f"{path}/{key}/{i}", depth + 1))
            except UnsupportedSchemaError as exc:    # the other branches still give valid values
                self.rollback(mark)
                refused.append(exc)
        if not alts:
            raise refused[0]
        return " | ".join(dict.fromkeys(alts))

    def enum(self, schema: Mapping[str, Any], hint: str, path: str) -> str:
        others = sorted(set(schema) - {"const", "enum", "type"})
        if others:
            raise ValueError(f"{path}: 'enum'/'const' together with {', '.join(map(repr, others))} is not supported")
        if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
            raise ValueError(f"{path}: 'enum' must be a non-empty list")
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        if "type" in schema:
            values = [v for v in values if is_type(v, type_set(schema["type"]))]
            if not values:
                raise ValueError(f"{path}: no 'enum'/'const' value has the schema's type")
        try:
            texts = [canonical(v) for v in values]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: enum/const value is not JSON-serializable: {exc}") from None
        return literal_alternation(texts, self, f"{hint}-enum")

    def string(self, schema: Mapping[str, Any], hint: str, path: str) -> str:
        lo, hi = self.bounds(schema, "minLength", "maxLength", path)
        if "pattern" in schema and "format" in schema:
            raise UnsupportedSchemaError(f"{path}: 'pattern' together with 'format' is not supported")
        if "pattern" in schema:
            if not isinstance(schema["pattern"], str):
                raise ValueError(f"{path}: 'pattern' must be a string")
            content = pattern_content(schema["pattern"], self, f"{hint}-pattern", "char", lo, hi)
        elif "format" in schema:
            name = schema["format"]
            node = fit_length(parse_anchored(format_pattern(name, path)), lo, hi, f"format {name!r}")
            content = Emitter(self, f"{hint}-{name}").emit(node)
        elif (lo, hi) == (0, None):
            return "string"
        else:
            content = repeat("char", lo, hi, self)
        return f'"\\"" {content} "\\""' if content else '"\\"\\""'

    def integer(self, schema: Mapping[str, Any], path: str) -> str:
        for key in _INT_BOUNDS:
            value = schema.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise ValueError(f"{path}: {key!r} must be a finite number (draft-4 boolean form is not supported)")
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
        return int_range(lo, hi)

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
        self.define("root", self.body(self.document, "root", "#"))
        primitives = {name: body.replace(" @", self.w) for name, body in _PRIMITIVES.items()}
        primitives["ws"] = self.ws_rule or ""
        defined = {**self.rules, **{k: v for k, v in primitives.items() if k not in self.rules}}
        used, todo = {"root"}, ["root"]
        while todo:   # rules reachable from root, in definition order
            for name in set(_NAME.findall(_TERMINALS.sub(" ", defined[todo.pop()]))) - used:
                if name in defined:
                    used.add(name)
                    todo.append(name)
        for name in used & primitives.keys() - self.rules.keys():
            self.budget.spend(primitives[name])
        return "".join(f"{name} ::= {body}\n" for name, body in defined.items() if name in used)


def schema_to_grammar(schema: Any, *, whitespace: str = "compact", limits: GrammarLimits | None = None) -> str:
    """Convert a JSON Schema to a GBNF grammar whose ``root`` rule matches conforming JSON.

    Supported (the README's table has the details): type (and lists of types), enum, const, anyOf,
    oneOf (when its branches are provably exclusive), allOf (merged), local $ref (recursion
    allowed), properties/required/additionalProperties/propertyNames/minProperties/maxProperties/
    dependentRequired, items/prefixItems/additionalItems/minItems/maxItems/uniqueItems (small finite
    item sets), minLength/maxLength/pattern/format, and minimum/maximum/exclusive bounds on
    integers and numbers. Objects keep properties in declared order; when ``properties`` is given,
    additionalProperties defaults to false. Annotations are ignored; anything else raises
    ValueError naming it (GrammarLimitError, a ValueError, when a limit is exceeded).
    """
    try:
        return Converter(schema, whitespace, limits or GrammarLimits()).grammar()
    except RecursionError:
        raise GrammarLimitError("JSON schema is nested too deeply") from None
    except (TypeError, AttributeError, KeyError, IndexError) as exc:   # a keyword with a value of the wrong type
        raise ValueError(f"malformed JSON schema ({type(exc).__name__}: {exc})") from None


JSON_GRAMMAR: str = schema_to_grammar({"type": "object"})
"""Grammar for ``response_format={"type": "json_object"}``: any JSON object."""
