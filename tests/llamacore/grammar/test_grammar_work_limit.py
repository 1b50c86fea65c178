"""llama.cpp's grammar engine under a work limit (vendor patch 0017): an ambiguous grammar is refused at
creation or ends its generation with GrammarBudgetError in bounded time, where it used to run for
minutes; ordinary grammars never reach the limit; a grammar too large to hold is refused by its size."""

from __future__ import annotations

import time

import pytest

from llamacore import Llama
from llamacore._core import DEFAULT_GRAMMAR_WORK_LIMIT, Sampler, grammar_work_limit, set_grammar_work_limit
from llamacore.errors import GrammarBudgetError
from llamacore.grammar.limits import GrammarLimitError
from llamacore.llama_grammar import LlamaGrammar

BOMB = 'root ::= ("a"?){0,%d} "b"'


@pytest.fixture(scope="module")
def llm(tiny_model_path):
    return Llama(str(tiny_model_path), n_ctx=256, verbose=False)


def test_the_default_limit_is_set_at_import():
    assert grammar_work_limit() == DEFAULT_GRAMMAR_WORK_LIMIT > 0


@pytest.mark.parametrize("n", [150, 300])
def test_an_ambiguous_grammar_ends_in_bounded_time(llm, n):
    start = time.monotonic()
    with pytest.raises((GrammarBudgetError, ValueError), match="too ambiguous|grammar"):
        llm.create_completion("x", max_tokens=40, temperature=1.0, seed=1,
                              grammar=LlamaGrammar.from_string(BOMB % n, verbose=False))
    assert time.monotonic() - start < 3


def test_the_sampler_refuses_a_grammar_whose_first_stacks_are_too_costly(tiny_model):
    set_grammar_work_limit(1000)
    try:
        with pytest.raises(ValueError, match="grammar"):
            Sampler().grammar(tiny_model, BOMB % 60)
    finally:
        set_grammar_work_limit(DEFAULT_GRAMMAR_WORK_LIMIT)


def test_ordinary_grammars_are_untouched(llm):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "tags": {"type": "array", "items": {"type": "string"}}},
              "required": ["name", "tags"]}
    out = llm.create_completion("x", max_tokens=60, temperature=0.8, seed=3,
                                grammar=LlamaGrammar.from_json_schema(__import__("json").dumps(schema)))
    assert out["choices"][0]["finish_reason"] in ("stop", "length")


def test_without_a_limit_the_bomb_runs_as_llama_cpp_runs_it(llm):
    """0 restores llama.cpp's unbounded behaviour: a small bomb then just takes its time."""
    set_grammar_work_limit(0)
    try:
        out = llm.create_completion("x", max_tokens=3, temperature=0,
                                    grammar=LlamaGrammar.from_string(BOMB % 20, verbose=False))
        assert set(out["choices"][0]["text"]) <= {"a", "b"}
    finally:
        set_grammar_work_limit(DEFAULT_GRAMMAR_WORK_LIMIT)


def test_a_grammar_too_large_to_hold_is_refused_by_its_size():
    with pytest.raises(GrammarLimitError, match="over the limit of 2097152"):
        LlamaGrammar.from_string("root ::= " + " | ".join(f'"{i:07d}xxxxxxxxxxxxxxxxxx"' for i in range(100_000)))
    with pytest.raises(GrammarLimitError, match="repetitions expanded"):
        LlamaGrammar.from_string('root ::= [a-z]{0,3000000}')
