"""Speculative decoding in Llama (draft_model=...): the answers of plain decoding, drafts counted."""

import numpy as np
import pytest
from helpers import N_THREADS

from llamacore import Llama
from llamacore.generation.draft_pacing import DraftYardstick
from llamacore.llama_speculative import LlamaPromptLookupDecoding

REPEAT = "red apple, green pear, blue plum, " * 6
PROMPTS = ["Copy the list: " + REPEAT + "Copy: red apple,", "Once upon a time", "A B C D E F G"]


@pytest.fixture(scope="module")
def plain(tiny_model_path):
    return Llama(tiny_model_path, n_ctx=512, n_threads=N_THREADS)


def complete(llm, prompt, **kw):
    out = llm.create_completion(prompt, max_tokens=40, temperature=0, **kw)
    return out["choices"][0]["text"], out["usage"]["completion_tokens"], out["choices"][0]["finish_reason"]


def test_prompt_lookup_answers_as_plain_decoding(tiny_model_path, plain):
    spec = Llama(tiny_model_path, n_ctx=512, n_threads=N_THREADS,
                 draft_model=LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=6))
    for prompt in PROMPTS:
        assert complete(spec, prompt) == complete(plain, prompt)
        assert complete(spec, prompt, stop=["pear"]) == complete(plain, prompt, stop=["pear"])


def test_prompt_lookup_drafts_text_that_repeats(memoryless):
    """A model whose next token depends on the last one only repeats a cycle: the drafts are right."""
    path, plain, prompt = memoryless                              # the answer is the orbit after 3000 again
    spec = Llama(path, n_ctx=512, n_threads=N_THREADS, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=8))
    spec._pacing.yardstick = DraftYardstick(rest_min=0)    # whether drafts pay (timing) is not tested here
    out = spec.create_completion(prompt, max_tokens=50, temperature=0)["choices"][0]["text"]
    assert out == plain.create_completion(prompt, max_tokens=50, temperature=0)["choices"][0]["text"]
    assert spec.n_drafted >= 30 and spec.n_accepted >= 30        # most of the 50 tokens came from drafts


@pytest.fixture(scope="module")
def memoryless(tiny_models_dir):
    """A model whose next token depends on the last one only, and a prompt whose answer repeats it."""
    from tiny_models import TinyModelSpec, write_model

    path = write_model(tiny_models_dir / "memoryless.gguf", TinyModelSpec(seed=3), memoryless=True)
    plain = Llama(path, n_ctx=512, n_threads=N_THREADS)
    plain.create_completion([1, 3000], max_tokens=60, temperature=0)
    orbit = plain.input_ids[2:plain.n_tokens].tolist()
    return path, plain, [1, 3000, *orbit, 3000]


def test_logprobs_and_stopping_criteria_see_each_tokens_own_logits(memoryless):
    """They read the logits after each token, which a draft's batch holds in other rows: no drafts
    then, and the logprobs are plain decoding's."""
    path, plain, prompt = memoryless
    spec = Llama(path, n_ctx=512, n_threads=N_THREADS, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=8))
    spec.create_completion(prompt, max_tokens=50, temperature=0)
    assert spec.n_drafted > 0
    drafted = spec.n_drafted

    def logprobs(llm):
        return llm.create_completion(prompt, max_tokens=50, temperature=0, logprobs=2)["choices"][0]["logprobs"]

    assert logprobs(spec) == logprobs(plain) and spec.n_drafted == drafted
    seen = []
    spec.create_completion(prompt, max_tokens=20, temperature=0,
                           stopping_criteria=lambda ids, logits: seen.append(int(np.argmax(logits))) or False)
    assert seen[:-1] == spec.input_ids[len(prompt):spec.n_tokens].tolist() and spec.n_drafted == drafted


def answer(out: dict) -> tuple[str, str]:
    return out["choices"][0]["text"], out["choices"][0]["finish_reason"]


def test_a_rest_from_drafting_runs_in_the_c_loop(memoryless):
    """While drafting rests, plain steps go through the C token loop: the same answers (stop strings,
    max_tokens), and the rest and the model's plain steps are counted."""
    path, plain, prompt = memoryless
    spec = Llama(path, n_ctx=512, n_threads=N_THREADS, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=8))
    rests, rest_in_c = [], spec._rest_in_c
    spec._rest_in_c = lambda *args: (rests.append(args), rest_in_c(*args))[1]      # counts the C-loop rests
    for max_tokens, stop in ((40, []), (7, []), (40, [plain.detokenize(prompt[20:22]).decode(errors="ignore")])):
        spec._pacing.resting = 100
        timed = spec._pacing.yardstick.plain_steps
        want = plain.create_completion(prompt, max_tokens=max_tokens, temperature=0, stop=stop)
        got = spec.create_completion(prompt, max_tokens=max_tokens, temperature=0, stop=stop)
        assert answer(got) == answer(want)
        # every token but the first step's and the last chunk's (the caller stopped in it) rested
        n = got["usage"]["completion_tokens"]
        assert spec.n_drafted == 0 and 100 - spec._pacing.resting >= n - 5
        assert spec._pacing.yardstick.plain_steps >= timed + n - 5
    assert len(rests) == 3


def test_the_model_itself_as_draft_is_always_right(tiny_model_path, plain):
    draft = Llama(tiny_model_path, n_ctx=512, n_threads=N_THREADS)
    spec = Llama(tiny_model_path, n_ctx=512, n_threads=N_THREADS, draft_model=draft)
    for prompt in PROMPTS:
        assert complete(spec, prompt) == complete(plain, prompt)
        assert spec.n_tokens == plain.n_tokens              # the same tokens end up in the context
    assert spec.n_drafted > 0 and spec.n_accepted == spec.n_drafted


def test_streaming_and_chat_with_a_draft(tiny_model_path, plain):
    spec = Llama(tiny_model_path, n_ctx=512, n_threads=N_THREADS, draft_model=LlamaPromptLookupDecoding())
    streamed = "".join(c["choices"][0]["text"] for c in spec.create_completion(
        PROMPTS[0], max_tokens=40, temperature=0, stream=True))
    assert streamed == complete(plain, PROMPTS[0])[0]
    messages = [{"role": "user", "content": REPEAT}]
    assert (spec.create_chat_completion(messages, temperature=0, max_tokens=24)["choices"]
            == plain.create_chat_completion(messages, temperature=0, max_tokens=24)["choices"])


def test_prompt_lookup_proposes_what_followed_the_last_ngram():
    look = LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=3)
    np.testing.assert_array_equal(look(np.array([1, 2, 3, 4, 5, 9, 2, 3], dtype=np.intc)), [4, 5, 9])
    np.testing.assert_array_equal(look(np.array([7, 8, 9], dtype=np.intc)), [])


def test_a_draft_of_another_vocabulary_is_refused(tiny_model_path, tmp_path):
    from tiny_models import DEFAULT_VOCAB_PATH, TinyModelSpec, write_model

    gpt2 = write_model(tmp_path / "gpt2-vocab.gguf", TinyModelSpec(name="x"),
                       vocab_path=DEFAULT_VOCAB_PATH.parent / "ggml-vocab-gpt-2.gguf")
    with pytest.raises(ValueError, match="draft_model does not match this model: its vocabulary size"):
        Llama(tiny_model_path, n_ctx=64, draft_model=Llama(gpt2, n_ctx=64))
