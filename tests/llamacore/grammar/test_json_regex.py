"""What the grammars accept, asked of llama.cpp's own grammar engine: patterns, formats, number
bounds, object member rules and whitespace. Every text a grammar accepts must also satisfy the
schema (checked with Python's re, jsonschema's format checker and plain comparisons)."""

import json
import re

import jsonschema
import pytest
from grammar_probe import GrammarProbe

from llamacore.grammar.json_schema import schema_to_grammar

FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


@pytest.fixture(scope="module")
def probe(tiny_model):
    return GrammarProbe(tiny_model)


def accepted(probe, schema, texts, whitespace="compact"):
    grammar = schema_to_grammar(schema, whitespace=whitespace)
    return [t for t in texts if probe.accepts(grammar, t)]


PATTERNS = [
    ("^abc?d*efg+(hij)?kl$", ["abefgkl", "abcdddefgggghijkl"], ["abcefkl", "xabefgkl", "abefgklx"]),
    ("^(\\([0-9]{1,3}\\))?[0-9]{3}-[0-9]{4} a{3,5}nd...$", ["(12)345-6789 aaand$%^", "345-6789 aaaaandxyz"],
     ["(1234)345-6789 aaand...", "345-6789 aand..."]),
    ("^A|B|C|D$", ["A", "Axyz", "Bz", "D"], ["", "zA", "zzB", "Dz"]),     # the match is written first
    ("^(?:foo|bar)baz$", ["foobaz", "barbaz"], ["baz", "foobarbaz"]),
    ("[0-9]+", ["7", "12cd"], ["", "abc", "x9"]),
    ("^[0-9]{3}\\w$", ["123a", "123_", "1239"], ["123", "123-", "123ab"]),
    ("^\\d{2}\\D\\s\\S$", ["12a x", "12-\t!"], ["123 x", "12a  "]),
    ("^[^a-c\\d]+$", ["xyz", "!~"], ["a", "x1", "", "é"]),      # a class with \d stays within ASCII
    ("^[^\\d]$", ["x"], ["1"]),
    ("^\"\\\\/\\.\\-$", ['"\\/.-'], ['"\\/x-']),
    ("^.{2}$", ["ab", "\t\"", "é✓"], ["a", "a\n"]),
    ("^\\x41\\u00e9[\\x00-\\x1f]$", ["Aé\x01", "Aé\n"], ["Aé ", "aé\x01"]),
    ("^(?:a|)b$", ["ab", "b"], ["aab"]),
    ("^(a*)*b$", ["b", "aaab"], ["ba"]),
    ("^(?P<year>\\d{4})-x$", ["2024-x"], ["24-x"]),
    ("^a{2,}?b+?c??$", ["aab", "aaabbc"], ["ab"]),
    ("^[a-z]+$", ["abc"], ["abC", ""]),
]


@pytest.mark.parametrize(("pattern", "good", "bad"), PATTERNS)
def test_pattern_language(probe, pattern, good, bad):
    texts = [json.dumps(t, ensure_ascii=False) for t in good + bad]
    got = accepted(probe, {"type": "string", "pattern": pattern}, texts)
    assert got == texts[:len(good)]
    for text in got:              # everything accepted matches the pattern as validators read it
        assert re.search(pattern, json.loads(text))


def test_pattern_with_length_bounds(probe):
    schema = {"type": "string", "pattern": "^[a-z]+-\\d{2}$", "minLength": 6, "maxLength": 7}
    texts = ['"ab-12"', '"abc-12"', '"abcd-12"', '"abcde-12"']
    assert accepted(probe, schema, texts) == ['"abc-12"', '"abcd-12"']


FORMATS = {
    "date": (["2024-02-29", "2000-02-29", "1999-12-31", "2023-04-30"],
             ["2023-02-29", "1900-02-29", "2023-04-31", "2023-13-01", "2023-1-01", "0999-01-01"]),
    "time": (["23:59:59Z", "00:00:00.123+05:30", "12:30:00-08:00"], ["24:00:00Z", "12:30:00", "12:60:00Z"]),
    "date-time": (["2024-02-29T23:59:59Z", "1999-01-01T00:00:00.5+01:00"],
                  ["2023-02-29T00:00:00Z", "2024-01-01 00:00:00Z"]),
    "duration": (["P1Y2M3DT4H5M6S", "PT5M", "P3W", "P1D", "PT1H30M"], ["P", "PT", "P1H", "1D", "P1W2D"]),
    "uuid": (["123e4567-e89b-12d3-a456-426614174000", "ABCDEF01-2345-6789-abcd-ef0123456789"],
             ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"]),
    "email": (["a.b+c@example.com", "x@y"], ["@example.com", "a@", "a b@c.d", "a..b@c"]),
    "hostname": (["example.com", "a-b.c1", "localhost"], ["-a.com", "a-.com", "a..b", "a_b.com"]),
    "ipv4": (["192.168.0.1", "0.0.0.0", "255.255.255.255"], ["256.1.1.1", "01.2.3.4", "1.2.3"]),
    "ipv6": (["::", "::1", "fe80::1", "2001:db8::8a2e:370:7334", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::"],
             ["1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "1:2:3:4:5:6:7"]),
    "uri": (["https://example.com/a/b?x=1#top", "ftp://h:21/", "urn-x://a.b"],
            ["example.com", "https//x", "https://exa mple.com", "http://x/%zz"]),
}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_format_language(probe, name):
    good, bad = FORMATS[name]
    texts = [json.dumps(t) for t in good + bad]
    got = accepted(probe, {"type": "string", "format": name}, texts)
    assert got == texts[:len(good)]
    for text in got:
        assert FORMAT_CHECKER.conforms(json.loads(text), name), text


def test_format_fits_length_bounds(probe):
    # pydantic's HttpUrl: format uri with maxLength 2083 (implied by the grammar's own bound)
    schema = {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083}
    assert accepted(probe, schema, ['"https://a.b/c"']) == ['"https://a.b/c"']


NUMBER_TEXTS = ["-3", "-2.5", "-2.50", "-2.4999", "-0", "0", "0.0", "1e3", "2.5", "9.99", "10", "10.0", "10.0001",
                "-2.5001", "3.14159265358979", "1000", "999.9999999999999", "0.1"]


@pytest.mark.parametrize("bounds", [
    {"minimum": -2.5, "maximum": 10},
    {"exclusiveMinimum": -2.5, "exclusiveMaximum": 10},
    {"minimum": 0.1, "exclusiveMaximum": 1000},
    {"maximum": -2.5},
    {"exclusiveMinimum": 0},
    {"minimum": 3.14159265358979, "maximum": 3.14159265358979},
])
def test_number_bounds(probe, bounds):
    schema = {"type": "number", **bounds}
    got = accepted(probe, schema, NUMBER_TEXTS)
    expected = [t for t in NUMBER_TEXTS if "e" not in t and jsonschema.Draft202012Validator(schema).is_valid(
        json.loads(t))]
    assert got == expected


OBJECTS = ['{}', '{"a":1}', '{"b":1}', '{"a":1,"b":2}', '{"b":1,"a":2}', '{"a":1,"b":2,"c":3}', '{"c":3}',
           '{"a":1,"c":3}', '{"z":0}', '{"a":1,"z":0}', '{"a":1,"a":2}']


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 1, "maxProperties": 2},
    {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "dependentRequired": {"a": ["b"], "c": ["a"]}},
    {"type": "object", "properties": {"a": {}, "c": {}}, "dependentRequired": {"c": ["a"]},
     "additionalProperties": True, "maxProperties": 2},
    {"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": {"type": "integer"}},
    {"type": "object", "propertyNames": {"enum": ["a", "z"]}, "minProperties": 1},
    {"type": "object", "minProperties": 1, "maxProperties": 1},
])
def test_object_members(probe, schema):
    got = accepted(probe, schema, OBJECTS)
    assert got, "the grammar accepts none of the probes"
    for text in got:
        assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)), text
        assert len(re.findall(r'"(\w)"', text)) == len(json.loads(text)), f"{text}: a key repeats"


def test_unique_items(probe):
    schema = {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True, "minItems": 2}
    texts = ['["a"]', '["a","b"]', '["c","a","b"]', '["a","a"]', '["b","c","b"]']
    assert accepted(probe, schema, texts) == ['["a","b"]', '["c","a","b"]']


@pytest.mark.parametrize(("whitespace", "good", "bad"), [
    ("compact", ['{"a":[1,2]}', '{ "a": [ 1, 2 ] }'], ['{"a":  [1]}', '{"a":\n[1]}', ' {"a":[1]}', '{"a":[1]} ']),
    ("none", ['{"a":[1,2]}'], ['{ "a":[1]}', '{"a": [1]}']),
    ("pretty", ['{\n  "a": [\n    1,\n    2\n  ]\n}', '{"a": [1]}'], ['{\n\n"a":[1]}', '{"a":[1]}\n']),
])
def test_whitespace(probe, whitespace, good, bad):
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
              "required": ["a"]}
    assert accepted(probe, schema, good + bad, whitespace) == good
