"""llama-cpp-python's per-token hooks on `Llama`: logits processors steer sampling, stopping criteria end
a completion, and keywords nothing honours are refused instead of ignored."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import N_THREADS

from llamacore import Llama, LogitsProcessorList, StoppingCriteriaList

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def llm(tiny_model_path):
    return Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS)


def test_a_logits_processor_steers_sampling_and_sees_the_context(llm):
    n_prompt = len(llm.tokenize(PROMPT.encode()))
    contexts: list[list[int]] = []

    def record(input_ids, scores):
        assert input_ids.dtype == np.intc and scores.dtype == np.float32 and scores.shape == (llm.n_vocab(),)
        contexts.append(list(input_ids))
        return scores

    plain = llm.create_completion(PROMPT, max_tokens=6, temperature=0, logits_processor=record)
    # called before each token, with the prompt and the tokens generated so far
    assert [len(c) for c in contexts] == list(range(n_prompt, n_prompt + 6))
    first = contexts[1][-1]              # what greedy sampled first
    contexts.clear()

    def ban_first(input_ids, scores):
        scores[first] = -np.inf           # in place
        return scores

    banned = llm.create_completion(PROMPT, max_tokens=6, temperature=0,
                                   logits_processor=LogitsProcessorList([ban_first, record]))
    assert first not in contexts[-1][n_prompt:] and banned["choices"][0]["text"] != plain["choices"][0]["text"]
    contexts.clear()

    def only_first(input_ids, scores):   # a processor may also return a new array
        return np.where(np.arange(scores.size) == first, 0.0, -np.inf).astype(np.float32)

    llm.create_completion(PROMPT, max_tokens=3, temperature=0.9, seed=1,
                          logits_processor=LogitsProcessorList([only_first, record]))
    assert contexts[-1][n_prompt:] == [first, first]


def test_a_stopping_criterion_ends_the_completion_with_stop(llm):
    n_prompt = len(llm.tokenize(PROMPT.encode()))
    calls = []

    def after_three(input_ids, logits):
        calls.append(len(input_ids))
        return len(input_ids) >= n_prompt + 2        # the third token's check (its own id not yet in the context)

    out = llm.create_completion(PROMPT, max_tokens=20, temperature=0,
                                stopping_criteria=StoppingCriteriaList([lambda ids, lg: False, after_three]))
    assert out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] == 3
    assert calls == [n_prompt, n_prompt + 1, n_prompt + 2]
    ref = llm.create_completion(PROMPT, max_tokens=3, temperature=0)["choices"][0]["text"]
    assert out["choices"][0]["text"] == ref
    chunks = list(llm.create_completion(PROMPT, max_tokens=20, temperature=0, stream=True,
                                        stopping_criteria=after_three))
    assert "".join(c["choices"][0]["text"] for c in chunks) == ref
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_chat_takes_the_hooks_and_refuses_what_it_cannot_honour(llm):
    messages = [{"role": "user", "content": "Hi"}]
    out = llm.create_chat_completion(messages, max_tokens=10, temperature=0,
                                     stopping_criteria=lambda ids, logits: True)
    assert out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] == 1
    with pytest.raises(TypeError, match="not_a_field"):
        llm.create_chat_completion(messages, max_tokens=2, not_a_field=1)
    with pytest.raises(TypeError):
        llm.create_completion(PROMPT, max_tokens=2, not_a_field=1)
    with pytest.raises(ValueError, match="tfs_z"):
        llm.create_completion(PROMPT, max_tokens=2, tfs_z=0.9)
    assert llm.create_completion(PROMPT, max_tokens=2, tfs_z=1.0)["usage"]["completion_tokens"] == 2


def test_llama_grammar_from_string_file_and_json_schema(llm, tmp_path):
    import json

    from llamacore import LlamaGrammar

    yes_no = 'root ::= ("yes" | "no") "."'
    text = llm(PROMPT, max_tokens=8, temperature=0.9, seed=3, grammar=LlamaGrammar.from_string(yes_no))
    assert text["choices"][0]["text"] in ("yes.", "no.")
    path = tmp_path / "yes_no.gbnf"
    path.write_text(yes_no)
    from_file = llm(PROMPT, max_tokens=8, temperature=0.9, seed=3, grammar=LlamaGrammar.from_file(path))
    assert from_file["choices"][0]["text"] == text["choices"][0]["text"]      # same grammar, same seed
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    out = llm.create_chat_completion([{"role": "user", "content": "Answer"}], max_tokens=40, temperature=0.9,
                                     grammar=LlamaGrammar.from_json_schema(json.dumps(schema)))
    assert isinstance(json.loads(out["choices"][0]["message"]["content"])["ok"], bool)
    with pytest.raises(ValueError):
        LlamaGrammar.from_string("  ")
