"""Objects for the schema converter: declared properties in order, extra keys, and the keywords
that count or relate members (minProperties, maxProperties, dependentRequired, propertyNames).

Members follow the declared order, optional ones may be left out, extra keys come last and never
repeat a declared name. The member list is a small automaton: a state is (next property, members
so far, properties now required, properties now forbidden), one rule per reachable state, so the
counting and dependency keywords cost rules in proportion to the properties, not to their subsets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from llamacore.grammar.formats import FORMATS
from llamacore.grammar.gbnf import group, quote, repeat
from llamacore.grammar.regex_gbnf import json_text
from llamacore.grammar.visitor import SchemaVisitor

_INLINE = 120       # a state whose only expansion is shorter than this is written in place
_NESTING = 24       # parenthesis depth of a key-exclusion trie before it continues in a named rule
_NAME_KEYWORDS = frozenset({"type", "enum", "const", "pattern", "minLength", "maxLength", "format"})


def _count(schema: Mapping[str, Any], key: str, path: str) -> int | None:
    value = schema.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{path}: {key!r} must be a non-negative integer")
    return value


def _name_allowed(name: str, schema: Any, path: str) -> bool:
    """Whether a declared property name satisfies ``propertyNames`` (the keywords a name can meet)."""
    if schema is True or schema == {}:
        return True
    if schema is False:
        return False
    unknown = set(schema) - _NAME_KEYWORDS - {"title", "description", "$comment"}
    if unknown:
        raise ValueError(f"{path}/propertyNames: keyword(s) {', '.join(map(repr, sorted(unknown)))} "
                         "are not supported next to declared properties")
    if schema.get("type", "string") != "string":
        return False
    if "const" in schema and name != schema["const"]:
        return False
    if "enum" in schema and name not in schema["enum"]:
        return False
    if "pattern" in schema:
        try:
            if not re.search(schema["pattern"], name):
                return False
        except (re.error, TypeError) as exc:
            raise ValueError(f"{path}/propertyNames: 'pattern' cannot be checked: {exc}") from None
    if "format" in schema and not re.fullmatch(FORMATS.get(schema["format"], "(?!)"), name):
        return False
    return schema.get("minLength", 0) <= len(name) <= schema.get("maxLength", len(name))


def not_names(names: list[str], conv: SchemaVisitor, hint: str) -> str:
    """A JSON string that is none of ``names``: at each branching point the key either follows a
    name, takes another plain character (then anything), or ends where no name ends."""
    pending: list[tuple[str, list[str]]] = []

    def node(suffixes: list[str], depth: int) -> str:
        if suffixes == [""]:
            return "char+"
        firsts = list(dict.fromkeys(s[0] for s in suffixes if s))
        excluded = "".join(c for c in firsts if c not in '"\\' and ord(c) >= 0x20)
        other = "[^" + "".join(f"\\x{ord(c):02X}" if ord(c) < 0x80 else c for c in excluded + '"\\')
        alts = [other + '\\x7F\\x00-\\x1F] char*']
        for c in firsts:
            rest = [s[1:] for s in suffixes if s and s[0] == c]
            if depth >= _NESTING:
                name = conv.reserve(hint)
                pending.append((name, rest))
                alts.append(f"{quote(json_text(ord(c)))} {name}")
            else:
                alts.append(f"{quote(json_text(ord(c)))} {node(rest, depth + 1)}")
        conv.check()
        body = "(" + " | ".join(alts) + ")"
        return body if "" in suffixes else body + "?"

    top = node(list(dict.fromkeys(names)), 0)
    while pending:
        name, rest = pending.pop()
        conv.define(name, node(rest, 0))
    return f'"\\"" {top} "\\""'


class _Members:
    """The member automaton of one object (see the module docstring)."""

    def __init__(self, conv: SchemaVisitor, hint: str, members: list[tuple[str, str, bool]], extra: str | None,
                 lo: int, hi: int | None, deps: dict[str, set[str]]) -> None:
        self.conv, self.hint, self.members, self.extra = conv, hint, members, extra
        self.lo, self.hi = lo, hi
        self.cap = hi if hi is not None else max(lo, 1)
        self.index = {name: i for i, (name, _, _) in enumerate(members)}
        self.deps = deps
        self.triggers: dict[str, set[str]] = {}
        for trigger, needed in deps.items():
            for name in needed:
                self.triggers.setdefault(name, set()).add(trigger)
        self.memo: dict[tuple, str | None] = {}
        self.sep = f'","{conv.w}'
        self.extra_sep = conv.named(f"{hint}additional-sep", f"{self.sep} {extra}") if extra else ""

    def end(self, c: int) -> str | None:
        w = self.conv.w.strip()
        need = max(self.lo - c, 0)
        most = None if self.hi is None else self.hi - c
        if not self.extra:
            return None if need else (w if c else "")
        if need > 1:     # two or more free keys could repeat one another and count once
            return None
        if c:
            return f"{repeat(self.extra_sep, need, most, self.conv)} {w}".strip()
        if most == 0:
            return ""
        rest = repeat(self.extra_sep, 0, None if most is None else most - 1, self.conv)
        first = " ".join(p for p in (self.extra, rest, w) if p)
        return first if need else f"({first})?"

    def state(self, i: int, c: int, musts: frozenset[str], bans: frozenset[str]) -> str | None:
        key = (i, c, musts, bans)
        if key not in self.memo:
            self.memo[key] = self._build(i, c, musts, bans)
        return self.memo[key]

    def _build(self, i: int, c: int, musts: frozenset[str], bans: frozenset[str]) -> str | None:
        self.conv.check()
        if i == len(self.members):
            return self.end(c)
        name, kv, required = self.members[i]
        later = {n for n in self.deps.get(name, ()) if self.index.get(n, -1) > i}
        options = []
        possible = all(n in self.index for n in self.deps.get(name, ()))
        if possible and name not in bans and (self.hi is None or c < self.hi):
            rest = self.state(i + 1, min(c + 1, self.cap), (musts - {name}) | later, bans)
            if rest is not None:
                options.append(f"{self.sep + ' ' if c else ''}{kv} {rest}".strip())
        if not required and name not in musts:
            banned = {t for t in self.triggers.get(name, ()) if self.index.get(t, -1) > i}
            rest = self.state(i + 1, c, musts, (bans - {name}) | banned)
            if rest is not None:
                options.append(rest)
        if not options:
            return None
        body = group(options) if len(options) > 1 else options[0]
        if len(options) == 1 and len(body) < _INLINE:
            return body
        return self.conv.named(f"{self.hint}rest", body)


def object_body(conv: SchemaVisitor, schema: Mapping[str, Any], hint: str, path: str, depth: int) -> str:
    """GBNF expression for an object schema."""
    props = dict(schema.get("properties", {}))
    if not all(isinstance(k, str) for k in props):
        raise ValueError(f"{path}: 'properties' keys must be strings")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ValueError(f"{path}: 'required' must be a list of strings")
    # Extra keys are allowed only for a bare object (or when asked): a declared shape is usually
    # meant to be exact, as in OpenAI strict structured outputs.
    additional = schema.get("additionalProperties", "properties" not in schema)
    for name in required:
        if name not in props:
            if additional is False:
                raise ValueError(f"{path}: required property {name!r} is not declared and "
                                 "additionalProperties is false")
            props[name] = {} if additional is True else additional
    deps = _dependencies(schema, path)
    for trigger, needed in deps.items():
        for name in needed - props.keys():
            if additional is not False:
                props[name] = {} if additional is True else additional
            elif trigger in required:
                raise ValueError(f"{path}: required property {trigger!r} needs {name!r}, which "
                                 "additionalProperties false forbids")
            else:
                props.pop(trigger, None)     # the trigger can never appear
    names_schema = schema.get("propertyNames", True)
    if additional is not False and isinstance(names_schema, Mapping) and ("enum" in names_schema
                                                                         or "const" in names_schema):
        # a finite set of names: each one an optional declared property, so no key repeats
        allowed = names_schema["enum"] if "enum" in names_schema else [names_schema["const"]]
        for name in allowed:
            if isinstance(name, str) and name not in props:
                props[name] = {} if additional is True else additional
        additional = False
    for name in list(props):
        if props[name] is False or not _name_allowed(name, names_schema, path):
            if name in required:
                raise ValueError(f"{path}: required property {name!r} is not allowed by the schema")
            del props[name]
    lo, hi = _count(schema, "minProperties", path) or 0, _count(schema, "maxProperties", path)
    if hi is not None and lo > hi:
        raise ValueError(f"{path}: 'minProperties' is greater than 'maxProperties'")
    if not props and additional in (True, {}) and names_schema in (True, {}) and (lo, hi) == (0, None):
        return "object"
    prefix = "" if hint == "root" else f"{hint}-"
    members = []
    for name, sub in props.items():
        value = conv.visit(sub, f"{prefix}{name}", f"{path}/properties/{name}", depth + 1)
        members.append((name, conv.named(f"{prefix}{name}-kv", f'{conv.key(name)} ":"{conv.w} {value}'),
                        name in required))
    extra = None
    if additional is not False:
        value = conv.visit(additional, f"{prefix}additional", f"{path}/additionalProperties", depth + 1)
        extra = conv.named(f"{prefix}additional-kv",
                           f'{_extra_key(conv, list(props) + list(deps), names_schema, prefix, path, depth)} '
                           f'":"{conv.w} {value}')
    automaton = _Members(conv, prefix, members, extra, lo, hi, deps)
    inner = automaton.state(0, 0, frozenset(), frozenset())
    if inner is None:
        raise ValueError(f"{path}: no object satisfies the properties together with "
                         "minProperties/maxProperties/dependentRequired (two or more extra keys could "
                         "repeat one another, so minProperties counts declared properties and one extra key)")
    return " ".join(p for p in (f'"{{"{conv.w}', inner, '"}"') if p)


def _dependencies(schema: Mapping[str, Any], path: str) -> dict[str, set[str]]:
    deps: dict[str, set[str]] = {}
    for key in ("dependentRequired", "dependencies"):
        value = schema.get(key, {})
        if not isinstance(value, Mapping):
            raise ValueError(f"{path}: {key!r} must be an object")
        for trigger, needed in value.items():
            if not isinstance(needed, list) or not all(isinstance(n, str) for n in needed):
                raise ValueError(f"{path}: {key!r} values must be lists of property names "
                                 "(the schema form of 'dependencies' is not supported)")
            deps.setdefault(trigger, set()).update(n for n in needed if n != trigger)
    return deps


def _extra_key(conv: SchemaVisitor, declared: list[str], names_schema: Any, prefix: str, path: str, depth: int) -> str:
    """Rule for the key of an extra member: any string the schema allows that is not declared."""
    declared = list(dict.fromkeys(declared))
    if names_schema in (True, {}):
        return conv.named(f"{prefix}additional-k", not_names(declared, conv, f"{prefix}additional-k")) \
            if declared else "string"
    if names_schema is False:
        raise ValueError(f"{path}: 'propertyNames' false allows no extra key; set additionalProperties false")
    if not isinstance(names_schema, Mapping):
        raise ValueError(f"{path}: 'propertyNames' must be a schema")
    names = {**names_schema, "type": "string"}
    if declared and ("enum" in names or "const" in names):
        allowed = names["enum"] if "enum" in names else [names["const"]]
        names = {"enum": [n for n in allowed if n not in declared]}
    elif declared:
        raise ValueError(f"{path}: 'propertyNames' other than an enum or const cannot exclude the declared "
                         "properties from the extra keys; list the names in an enum")
    return conv.visit(names, f"{prefix}additional-k", f"{path}/propertyNames", depth + 1)
