"""Property tests: schemas drawn from the supported subset always convert, parse in llama.cpp, and
what a random-weight model generates under them validates (jsonschema, formats checked)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from grammar_probe import GrammarProbe, generate
from helpers import N_THREADS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llamacore
from llamacore.grammar.formats import FORMATS
from llamacore.grammar.json_schema import WHITESPACE, schema_to_grammar

FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
PATTERNS = ["^[a-z]{1,5}$", "^\\d{3}-\\d{2,4}$", "^(?:cat|dog)s?$", "^[A-Z][a-z]*( [A-Z][a-z]*)?$",
            "^[^\\s]{2,6}$", "x+", "^\\w+@\\w+\\.com$", "^(?:[01]\\d|2[0-3]):[0-5]\\d$"]
NAMES = st.sampled_from(["a", "b", "id", "name", "x y", "é", "ab", "a\"b", "kind", ""])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-50, 50), st.text("abc\"\\ é", max_size=4),
                    st.sampled_from([0.5, -2.25]))


@st.composite
def strings(draw):
    choice = draw(st.sampled_from(["plain", "length", "pattern", "format"]))
    if choice == "pattern":
        return {"type": "string", "pattern": draw(st.sampled_from(PATTERNS))}
    if choice == "format":
        return {"type": "string", "format": draw(st.sampled_from(sorted(FORMATS)))}
    if choice == "length":
        lo = draw(st.integers(0, 4))
        return {"type": "string", "minLength": lo, "maxLength": lo + draw(st.integers(0, 6))}
    return {"type": "string"}


@st.composite
def numbers(draw):
    kind = draw(st.sampled_from(["integer", "number"]))
    schema: dict = {"type": kind}
    lo = draw(st.one_of(st.none(), st.integers(-1000, 1000) if kind == "integer" else
                        st.floats(-100, 100, allow_nan=False).map(lambda f: round(f, 3))))
    if lo is not None:
        schema[draw(st.sampled_from(["minimum", "exclusiveMinimum"]))] = lo
    if draw(st.booleans()):
        schema[draw(st.sampled_from(["maximum", "exclusiveMaximum"]))] = (lo if lo is not None else 0) + \
            draw(st.integers(1, 500))
    return schema


LEAVES = st.one_of(
    strings(), numbers(), st.just({"type": "boolean"}), st.just({"type": "null"}), st.just({}),
    st.lists(SCALARS, min_size=1, max_size=5, unique_by=json.dumps).map(lambda v: {"enum": v}),
    SCALARS.map(lambda v: {"const": v}),
)


@st.composite
def objects(draw, children):
    props = draw(st.dictionaries(NAMES, children, min_size=1, max_size=4))
    schema: dict = {"type": "object", "properties": props,
                    "required": draw(st.lists(st.sampled_from(sorted(props)), unique=True))}
    extra = draw(st.sampled_from(["closed", "open", "typed"]))
    if extra != "closed":
        schema["additionalProperties"] = True if extra == "open" else {"type": "integer"}
    if draw(st.booleans()):
        most = len(props) + (extra != "closed")
        schema["maxProperties"] = draw(st.integers(max(len(schema["required"]), 1), most))
    return schema


@st.composite
def arrays(draw, children):
    lo = draw(st.integers(0, 2))
    schema = {"type": "array", "items": draw(children), "minItems": lo}
    if draw(st.booleans()):
        schema["maxItems"] = lo + draw(st.integers(0, 3))
    return schema


def _nullable(schema):
    return {"anyOf": [schema, {"type": "null"}]}


SCHEMAS = st.recursive(
    LEAVES,
    lambda children: st.one_of(objects(children), arrays(children), children.map(_nullable),
                               st.lists(children, min_size=2, max_size=3).map(lambda s: {"anyOf": s})),
    max_leaves=8,
)
SETTINGS = dict(deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def model(tiny_model_path):
    return llamacore.Model(tiny_model_path)


@settings(max_examples=150, **SETTINGS)
@given(schema=SCHEMAS, whitespace=st.sampled_from(sorted(WHITESPACE)))
def test_supported_schemas_convert_and_parse(model, schema, whitespace):
    grammar = schema_to_grammar(schema, whitespace=whitespace)
    llamacore.Sampler().grammar(model, grammar)


@pytest.mark.slow
@settings(max_examples=30, **SETTINGS)
@given(schema=SCHEMAS)
def test_generations_validate(model, schema):
    probe = GrammarProbe(model)
    outs = generate(model, schema_to_grammar(schema), [1, 2, 3], bias=probe.closing_bias(12.0), max_tokens=128,
                    n_threads=N_THREADS)
    for text in outs:
        if text is not None:
            jsonschema.validate(json.loads(text), schema, format_checker=FORMAT_CHECKER)
    assert any(o is not None for o in outs), (schema, outs)
