"""Structural tests for llamacore.grammar.json_schema: output is well-formed GBNF; unsupported schemas fail loudly.

What the grammars accept is checked by llama.cpp itself in test_json_regex.py and
test_structured_output.py.
"""

import json
import re

import pytest

from llamacore.grammar.json_schema import JSON_GRAMMAR, WHITESPACE, schema_to_grammar
from llamacore.grammar.limits import GrammarLimitError, GrammarLimits

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
    "long_string": {"type": "string", "maxLength": 5000},
    "number": {"type": "number"},
    "bounded_number": {"type": "number", "minimum": -2.5, "exclusiveMaximum": 1e3},
    "integer_range": {"type": "integer", "minimum": -40, "exclusiveMaximum": 1000},
    "boolean": {"type": "boolean"},
    "null": {"type": "null"},
    "nullable": {"type": ["string", "null"]},
    "enum_mixed": {"enum": ["a", 1, None, True, [1, "x"], {"k": "v"}]},
    "const": {"const": "fixed"},
    "pattern": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,}(?:x|y)?$"},
    "formats": {"type": "array", "prefixItems": [{"type": "string", "format": f} for f in (
        "date", "time", "date-time", "duration", "uuid", "email", "hostname", "ipv4", "ipv6", "uri")]},
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
    "counted": {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 1, "maxProperties": 2},
    "dependent": {"type": "object", "properties": {"card": {}, "billing": {}, "x": {}},
                  "dependentRequired": {"card": ["billing"]}},
    "additional": {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    },
    "property_names": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}, "maxProperties": 3},
    "free_object": {"type": "object"},
    "array_any": {"type": "array"},
    "tuple": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    "unique": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True},
    "any_of": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]},
    "one_of_discriminated": {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]},
    ]},
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


@pytest.mark.parametrize("whitespace", sorted(WHITESPACE))
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_grammar_well_formed(name, whitespace):
    check_grammar(schema_to_grammar(SCHEMAS[name], whitespace=whitespace))


def test_json_grammar_is_any_object():
    rules = check_grammar(JSON_GRAMMAR)
    assert JSON_GRAMMAR.startswith("root ::= object\n")
    assert {"object", "array", "string", "number", "boolean", "null", "value", "ws"} <= set(rules)


def test_whitespace_modes():
    assert re.search(r'^ws ::= \| " "$', JSON_GRAMMAR, re.MULTILINE)      # compact: at most one space
    pretty = schema_to_grammar({"type": "object"}, whitespace="pretty")
    assert re.search(r'^ws ::= \| " " \| "\\n" \[ \\t\]\{0,20\}$', pretty, re.MULTILINE)
    none = schema_to_grammar({"type": "object"}, whitespace="none")
    assert "ws" not in parse_gbnf(none)
    with pytest.raises(ValueError, match="whitespace mode 'loose'"):
        schema_to_grammar({}, whitespace="loose")


def test_values_carry_no_trailing_whitespace():
    # whitespace sits inside objects and arrays only, so the output ends with its last token
    for schema in ({"type": "string"}, {"type": "integer"}, {"enum": ["a"]}):
        assert "ws" not in parse_gbnf(schema_to_grammar(schema))
    assert schema_to_grammar({"type": "object"}).splitlines()[2].endswith('ws)? "}"')


def test_exact_object_grammar():
    grammar = schema_to_grammar(
        {
            "type": "object",
            "properties": {"a": {"type": "boolean"}, "b": {"type": "string"}, "c": {"type": "null"}},
            "required": ["b"],
        }
    )
    assert grammar.splitlines()[:6] == [
        'root ::= "{" ws rest-1 "}"',
        'a-kv ::= "\\"a\\"" ":" ws boolean',
        'b-kv ::= "\\"b\\"" ":" ws string',
        'c-kv ::= "\\"c\\"" ":" ws null',
        'rest ::= ("," ws c-kv ws | ws)',
        'rest-1 ::= (a-kv "," ws b-kv rest | b-kv rest)',
    ]


def test_exact_integer_range_and_enum():
    assert schema_to_grammar({"type": "integer", "minimum": -5, "maximum": 12}).splitlines()[0] == (
        'root ::= ("-" [1-5] | [0-9] | "1" [0-2])'
    )
    assert schema_to_grammar({"enum": ["x", None]}).splitlines()[0] == 'root ::= ("\\"x\\"" | "null")'


def test_enum_is_factored_by_shared_prefix():
    grammar = schema_to_grammar({"enum": ["apple", "apricot", "banana"]})
    assert grammar.splitlines()[0] == 'root ::= "\\"" ("ap" ("ple\\"" | "ricot\\"") | "banana\\"")'
    many = schema_to_grammar({"enum": [f"item-{i:05d}" for i in range(20000)]})
    check_grammar(many)
    assert len(many) < 20000 * 10         # flat: 20000 * 16 bytes; shared prefixes are written once


def test_deep_enum_nesting_continues_in_named_rules():
    grammar = schema_to_grammar({"enum": ["a" * n for n in range(1, 200)]})
    rules = check_grammar(grammar)
    assert len(rules) > 5
    assert max(line.count("(") for line in grammar.splitlines()) < 40


def test_array_bounds():
    grammar = schema_to_grammar({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4})
    assert grammar.splitlines()[:2] == ['root ::= "[" ws integer root-sep{1,3} ws "]"',
                                        'root-sep ::= "," ws integer']
    grammar = schema_to_grammar({"type": "array", "items": {"type": "integer"}, "maxItems": 1})
    assert grammar.splitlines()[0] == 'root ::= "[" ws (integer ws)? "]"'


def test_string_length_bounds():
    assert schema_to_grammar({"type": "string", "minLength": 1, "maxLength": 8}).splitlines()[0] == (
        'root ::= "\\"" char{1,8} "\\""'
    )


def test_large_repetitions_stay_below_llamacpp_threshold():
    # llama.cpp reads a count above 2000 as unbounded; long bounds become chains of rules
    grammar = schema_to_grammar({"type": "string", "maxLength": 2500})
    counts = [int(n) for n in re.findall(r"\{(?:\d+,)?(\d+)\}", grammar)]
    assert counts and max(counts) <= 1000
    assert "char{0,999}" in grammar


def test_property_order_kept_and_optional_marked():
    grammar = schema_to_grammar(SCHEMAS["person"])
    assert grammar.splitlines()[0] == 'root ::= "{" ws name-kv "," ws age-kv rest-1 "}"'


def test_additional_keys_exclude_declared_names():
    grammar = schema_to_grammar(SCHEMAS["additional"])
    key = next(line for line in grammar.splitlines() if line.startswith("additional-k ::="))
    assert '"a" char+' in key and "[^\\x61" in key
    declared = schema_to_grammar({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert "string" not in parse_gbnf(declared)  # no free-form keys when properties are declared
    assert schema_to_grammar({"type": "object"}).startswith("root ::= object\n")


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
    assert rules["q-kv"][-1] in rules["p-sep"]


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
        ({"type": "string", "pattern": "^(a)\\1$"}, "backreferences"),
        ({"type": "string", "pattern": "^(?=a)a$"}, "lookaround"),
        ({"type": "string", "pattern": "^a\\bb$"}, "word boundaries"),
        ({"type": "string", "pattern": "^a$b"}, "anchor"),
        ({"type": "string", "pattern": "^\\p{L}+$"}, "Unicode property"),
        ({"type": "string", "pattern": "^(a$"}, "unbalanced"),
        ({"type": "string", "pattern": "^a**$"}, "multiple repeat"),
        ({"type": "string", "format": "color"}, "format 'color' is not supported"),
        ({"type": "string", "format": "date", "pattern": "^2"}, "'pattern' together with 'format'"),
        ({"type": "string", "pattern": "^a.*b.*c$", "maxLength": 9}, "minLength/maxLength"),
        ({"type": "array", "uniqueItems": True}, "'uniqueItems'"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "'uniqueItems'"),
        ({"type": "object", "patternProperties": {"a": {}}}, "'patternProperties'"),
        ({"not": {"type": "string"}}, "'not'"),
        ({"if": {}, "then": {}, "else": {}}, "'else', 'if', 'then'"),
        ({"type": "integer", "multipleOf": 2}, "'multipleOf'"),
        ({"type": "integer", "minimum": 0, "exclusiveMinimum": True}, "'exclusiveMinimum'"),
        ({"type": "number", "maximum": 2**60}, "'maximum' is beyond"),
        ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, "'oneOf' branches 0 and 1"),
        ({"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 3}, "no object satisfies"),
        ({"type": "object", "minProperties": 2}, "two or more extra keys"),
        ({"type": "object", "properties": {"a": {}}, "required": ["a"], "propertyNames": {"enum": ["b"]}},
         "required property 'a' is not allowed"),
        ({"type": "object", "properties": {"a": {}}, "propertyNames": {"pattern": "^[a-z]$"},
          "additionalProperties": True}, "propertyNames"),
        ({"type": "object", "dependentRequired": {"a": "b"}}, "'dependentRequired' values"),
        ({"properties": {"a": {"type": "string", "contains": {}}}}, "#/properties/a: .*'contains'"),
        ({"$ref": "https://example.com/schema.json"}, "only local '\\$ref'"),
        ({"$ref": "#/$defs/missing"}, "does not resolve"),
        ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a", "title": "t"}, "circular"),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "conflicting 'type'"),
        ({"allOf": [{"enum": [1, 2]}, {"enum": [3]}]}, "nothing in common"),
        ({"type": "widget"}, "unknown type 'widget'"),
        ({"enum": []}, "'enum'"),
        ({"type": "string", "enum": ["a"], "maxLength": 3}, "together with 'maxLength'"),
        ({"anyOf": []}, "'anyOf'"),
        ({"type": "array", "items": False, "minItems": 1}, "'minItems'"),
        ({"type": "string", "minLength": 3, "maxLength": 2}, "'minLength'"),
        ({"type": "integer", "minimum": 3, "maximum": 2}, "no valid value"),
        ({"type": "number", "minimum": 3, "exclusiveMaximum": 3}, "no valid value"),
        ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "not allowed"),
    ],
)
def test_unsupported_or_invalid_schema_raises(schema, message):
    with pytest.raises(ValueError, match=message):
        schema_to_grammar(schema)


def test_allof_merges_enums_types_and_bounds():
    merged = schema_to_grammar({"allOf": [{"enum": ["a", "b", "c"]}, {"enum": ["b", "c", "d"]}]})
    assert merged.splitlines()[0] == 'root ::= "\\"" ("b\\"" | "c\\"")'
    bounds = schema_to_grammar({"allOf": [{"type": "number", "minimum": 1}, {"type": "integer", "maximum": 3}]})
    assert bounds.splitlines()[0] == "root ::= [1-3]"


@pytest.mark.parametrize(("limits", "schema", "message"), [
    (GrammarLimits(max_size=10_000), {"enum": [f"v{i}" for i in range(5000)]}, "larger than 10000 bytes"),
    (GrammarLimits(max_size=10_000), {"type": "string", "maxLength": 20_000}, "larger than"),
    (GrammarLimits(max_depth=5), {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {
        "type": "array", "items": {"type": "array", "items": {"type": "array"}}}}}}, "deeper than 5"),
    (GrammarLimits(timeout=0.0), {"type": "object", "properties": {f"p{i}": {} for i in range(50)}}, "longer than"),
])
def test_limits_refuse_quickly(limits, schema, message):
    with pytest.raises(GrammarLimitError, match=message):
        schema_to_grammar(schema, limits=limits)


def test_anyof_leaves_out_branches_a_grammar_cannot_express():
    # pydantic's Decimal: a number, or a string whose pattern starts with a lookahead
    decimal = {"anyOf": [{"type": "number"}, {"type": "string", "pattern": "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$"}]}
    assert check_grammar(schema_to_grammar(decimal))["root"] == ["number"]
    with pytest.raises(ValueError, match="lookaround"):
        schema_to_grammar({"anyOf": [{"type": "string", "pattern": "^(?=a)"}, {"format": "color"}]})
    with pytest.raises(ValueError, match="unbalanced"):    # an invalid branch is an error, not left out
        schema_to_grammar({"anyOf": [{"type": "number"}, {"type": "string", "pattern": "^(a$"}]})


def test_a_left_out_branch_leaves_no_rules_behind():
    node = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=a)"}}, "required": ["a"]}
    schema = {"$defs": {"x": node}, "type": "object",
              "properties": {"p": {"anyOf": [{"$ref": "#/$defs/x"}, {"type": "null"}]}, "q": {"$ref": "#/$defs/x"}}}
    with pytest.raises(ValueError, match="lookaround"):   # q needs the refused definition itself
        schema_to_grammar(schema)
    del schema["properties"]["q"]
    assert set(check_grammar(schema_to_grammar(schema))) == {"root", "p-kv", "rest", "null", "ws"}
