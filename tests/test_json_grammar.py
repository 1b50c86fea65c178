"""Structural tests for llamacore.json_grammar: output is well-formed GBNF; unsupported schemas fail loudly.

Sampling under these grammars (and validating with jsonschema) needs llama.cpp and lives elsewhere.
"""

import json
import re

import pytest

from llamacore.json_grammar import JSON_GRAMMAR, schema_to_grammar

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<literal>"(?:[^"\\]|\\.)*")
    | (?P<charclass>\[(?:[^\]\\]|\\.)*\])
    | (?P<repeat>\{\d+(?:,\d*)?\})
    | (?P<op>[|()?*+])
    | (?P<name>[a-zA-Z0-9-]+)
    )""",
    re.VERBOSE,
)
_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|[nrt\\\"\[\]-])")


def parse_gbnf(text: str) -> dict[str, list[str]]:
    """Check the grammar's syntax (one rule per line) and return each rule's referenced rule names."""
    assert text.endswith("\n"), "grammar must end with a newline"
    rules: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, sep, body = line.partition(" ::= ")
        assert sep, f"not a rule: {line!r}"
        assert re.fullmatch(r"[a-zA-Z0-9-]+", name), f"bad rule name {name!r}"
        assert name not in rules, f"rule {name!r} defined twice"
        refs, depth, pos = [], 0, 0
        while pos < len(body):
            match = _TOKEN.match(body, pos)
            assert match and match.end() > pos, f"cannot parse {body[pos:]!r} in rule {name!r}"
            pos = match.end()
            if match["literal"]:
                leftover = _ESCAPE.sub("", match["literal"][1:-1])
                assert "\\" not in leftover, f"bad escape in {match['literal']}"
            elif match["op"] in ("(", ")"):
                depth += 1 if match["op"] == "(" else -1
                assert depth >= 0, f"unbalanced ')' in rule {name!r}"
            elif match["name"]:
                refs.append(match["name"])
        assert depth == 0, f"unbalanced '(' in rule {name!r}"
        rules[name] = refs
    return rules


def check_grammar(text: str) -> dict[str, list[str]]:
    """Well-formed, root first, every reference defined, every rule reachable, whitespace bounded."""
    rules = parse_gbnf(text)
    assert next(iter(rules)) == "root", "the root rule must come first"
    for name, refs in rules.items():
        for ref in refs:
            assert ref in rules, f"rule {name!r} references undefined rule {ref!r}"
    seen, todo = set(), ["root"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(rules[name])
    assert seen == set(rules), f"unreachable rules: {set(rules) - seen}"
    ws = re.search(r"^ws ::= (.*)$", text, re.MULTILINE)
    if ws:
        assert not re.search(r"[*+]|\{\d+,\}", ws.group(1)), "whitespace must be bounded"
    return rules


def literals(text: str) -> list[str]:
    """Decoded string literals of a grammar, in order."""
    decode = {"n": "\n", "r": "\r", "t": "\t"}

    def unescape(m: re.Match) -> str:
        esc = m.group(1)
        return chr(int(esc[1:], 16)) if esc[0] in "xu" else decode.get(esc, esc)

    found = re.findall(r'"((?:[^"\\]|\\.)*)"', text)
    return [_ESCAPE.sub(unescape, lit) for lit in found]


SCHEMAS = {
    "any": {},
    "string": {"type": "string"},
    "bounded_string": {"type": "string", "minLength": 2, "maxLength": 5},
    "number": {"type": "number"},
    "integer_range": {"type": "integer", "minimum": -40, "exclusiveMaximum": 1000},
    "boolean": {"type": "boolean"},
    "null": {"type": "null"},
    "nullable": {"type": ["string", "null"]},
    "enum_mixed": {"enum": ["a", 1, None, True, [1, "x"], {"k": "v"}]},
    "const": {"const": "fixed"},
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "ignored annotation"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "email": {"type": "string", "format": "email"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        },
        "required": ["name", "age"],
    },
    "all_optional": {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "number"}}},
    "additional": {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    },
    "free_object": {"type": "object"},
    "array_any": {"type": "array"},
    "tuple": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    "any_of": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]},
    "one_of_with_siblings": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
    },
    "all_of": {
        "allOf": [
            {"$ref": "#/definitions/base"},
            {"properties": {"b": {"type": "string"}}, "required": ["b"]},
        ],
        "definitions": {
            "base": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        },
    },
    "recursive_defs": {
        "$ref": "#/$defs/node",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["value"],
            }
        },
    },
    "recursive_root": {
        "type": "object",
        "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
    },
    "odd_names": {
        "type": "object",
        "properties": {
            "my key/é": {"type": "string"},
            "ws": {"type": "integer"},
            "root": {"type": "boolean"},
        },
        "required": ["my key/é", "ws", "root"],
    },
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_grammar_well_formed(name):
    check_grammar(schema_to_grammar(SCHEMAS[name]))


def test_json_grammar_is_any_object():
    rules = check_grammar(JSON_GRAMMAR)
    assert JSON_GRAMMAR.startswith("root ::= object\n")
    assert {"object", "array", "string", "number", "boolean", "null", "value", "ws"} <= set(rules)


def test_whitespace_rule():
    assert re.search(r'^ws ::= \| " " \| "\\n" \[ \\t\]\{0,16\}$', JSON_GRAMMAR, re.MULTILINE)


def test_exact_object_grammar():
    grammar = schema_to_grammar(
        {
            "type": "object",
            "properties": {"a": {"type": "boolean"}, "b": {"type": "string"}, "c": {"type": "null"}},
            "required": ["b"],
        }
    )
    assert grammar.splitlines()[:4] == [
        'root ::= "{" ws (a-kv "," ws b-kv ("," ws c-kv)? | b-kv ("," ws c-kv)?) "}" ws',
        'a-kv ::= "\\"a\\"" ws ":" ws boolean',
        'b-kv ::= "\\"b\\"" ws ":" ws string',
        'c-kv ::= "\\"c\\"" ws ":" ws null',
    ]


def test_exact_integer_range_and_enum():
    assert schema_to_grammar({"type": "integer", "minimum": -5, "maximum": 12}).splitlines()[0] == (
        'root ::= ("-" [1-5] | [0-9] | "1" [0-2]) ws'
    )
    assert schema_to_grammar({"enum": ["x", None]}).splitlines()[0] == 'root ::= "\\"x\\"" ws | "null" ws'


def test_array_bounds():
    grammar = schema_to_grammar({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4})
    assert grammar.splitlines()[0] == 'root ::= "[" ws integer ("," ws integer){1,3} "]" ws'
    grammar = schema_to_grammar({"type": "array", "items": {"type": "integer"}, "maxItems": 1})
    assert grammar.splitlines()[0] == 'root ::= "[" ws (integer)? "]" ws'


def test_string_length_bounds():
    assert schema_to_grammar({"type": "string", "minLength": 1, "maxLength": 8}).splitlines()[0] == (
        'root ::= "\\"" char{1,8} "\\"" ws'
    )


def test_property_order_kept_and_optional_marked():
    grammar = schema_to_grammar(SCHEMAS["person"])
    root = grammar.splitlines()[0]
    assert root == 'root ::= "{" ws name-kv "," ws age-kv ("," ws email-kv)? ("," ws tags-kv)? "}" ws'


def test_additional_properties_default():
    declared = schema_to_grammar({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert "string" not in parse_gbnf(declared)  # no free-form keys when properties are declared
    assert schema_to_grammar({"type": "object"}).startswith("root ::= object\n")
    assert "additional-kv" in schema_to_grammar(SCHEMAS["additional"])


def test_recursive_ref_reuses_rule():
    rules = check_grammar(schema_to_grammar(SCHEMAS["recursive_defs"]))
    assert rules["root"] == ["node"]
    assert "node" in rules["node-children"]
    rules = check_grammar(schema_to_grammar(SCHEMAS["recursive_root"]))
    assert "root" in rules["next"]


def test_identical_subschemas_share_a_rule():
    item = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    props = {"p": {"type": "array", "items": item}, "q": item}
    grammar = schema_to_grammar({"type": "object", "properties": props, "required": ["p", "q"]})
    rules = check_grammar(grammar)
    assert rules["q-kv"][-1] in rules["p"]


@pytest.mark.parametrize(
    "value",
    ['say "hi"', "back\\slash", "new\nline\ttab", "ctrl\x01", "unicode é ✓", "[brackets] {braces}"],
)
def test_literal_escaping_round_trips(value):
    grammar = schema_to_grammar({"const": value})
    check_grammar(grammar)
    assert json.dumps(value, ensure_ascii=False) in literals(grammar)


def test_property_names_are_escaped():
    grammar = schema_to_grammar(SCHEMAS["odd_names"])
    check_grammar(grammar)
    assert json.dumps("my key/é", ensure_ascii=False) in literals(grammar)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "string", "pattern": "^a$"}, "'pattern'"),
        ({"type": "array", "uniqueItems": True}, "'uniqueItems'"),
        ({"type": "object", "patternProperties": {"a": {}}}, "'patternProperties'"),
        ({"not": {"type": "string"}}, "'not'"),
        ({"if": {}, "then": {}, "else": {}}, "'else', 'if', 'then'"),
        ({"type": "number", "minimum": 0}, "'minimum'"),
        ({"type": "integer", "multipleOf": 2}, "'multipleOf'"),
        ({"type": "integer", "minimum": 0, "exclusiveMinimum": True}, "'exclusiveMinimum'"),
        ({"properties": {"a": {"type": "string", "contains": {}}}}, "#/properties/a: .*'contains'"),
        ({"$ref": "https://example.com/schema.json"}, "only local '\\$ref'"),
        ({"$ref": "#/$defs/missing"}, "does not resolve"),
        ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a", "title": "t"}, "circular"),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "conflicting 'type'"),
        ({"type": "widget"}, "unknown type 'widget'"),
        ({"enum": []}, "'enum'"),
        ({"anyOf": []}, "'anyOf'"),
        ({"type": "array", "items": False, "minItems": 1}, "'minItems'"),
        ({"type": "string", "minLength": 3, "maxLength": 2}, "'minLength'"),
        ({"type": "integer", "minimum": 3, "maximum": 2}, "no valid value"),
        ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "matches nothing"),
    ],
)
def test_unsupported_or_invalid_schema_raises(schema, message):
    with pytest.raises(ValueError, match=message):
        schema_to_grammar(schema)
