"""TokenLoop, the generation loop in C: the same tokens as sampling and decoding one at a time from
Python, its stopping rules (end of generation, stop strings across tokens, budget, context end),
chunking, failed decodes, bad input; and Llama's completions through it against the per-token path."""

import numpy as np
import pytest
from helpers import decode, make_ctx

import llamacore
from llamacore import Llama

PROMPT = "Once upon a time"


def python_loop(ctx, model, sampler, pos, n):
    """Sample and decode `n` tokens one at a time from Python (the last one is not decoded)."""
    out = []
    for i in range(n):
        token = sampler.sample(ctx)
        out.append(token)
        if i < n - 1:
            decode(ctx, [token], pos + i)
    return out


@pytest.fixture
def primed(tiny_model):
    """(a context holding PROMPT with its last token's logits, the prompt's length)."""
    ctx = make_ctx(tiny_model)
    tokens = tiny_model.tokenize(PROMPT)
    decode(ctx, tokens)
    return ctx, len(tokens)


@pytest.mark.parametrize("chain", ["greedy", "seeded"])
def test_same_tokens_and_cache_as_the_python_loop(tiny_model, chain):
    def sampler():
        s = llamacore.Sampler()
        return s.greedy() if chain == "greedy" else s.top_k(40).temp(1.5).dist(7)

    ctx = make_ctx(tiny_model)
    prompt = tiny_model.tokenize(PROMPT)
    decode(ctx, prompt)
    expected = python_loop(ctx, tiny_model, sampler(), len(prompt), 24)
    logits_after = decode(ctx, [expected[-1]], len(prompt) + 23)

    ctx.kv_clear()
    decode(ctx, prompt)
    loop = llamacore.TokenLoop(ctx, sampler(), len(prompt), 24, ignore_eos=True)
    tokens, text = loop.run(100)
    assert tokens == expected
    assert text == b"".join(tiny_model.token_to_piece(t) for t in tokens)
    assert loop.finish == "length"
    assert loop.pos == len(prompt) + 23         # the last token is sampled, not decoded
    assert ctx.kv_pos_max(0) == len(prompt) + 22
    # the KV cache holds what the Python loop put there: the next logits are the same
    np.testing.assert_array_equal(decode(ctx, [expected[-1]], loop.pos), logits_after)


def test_chunks_give_the_same_tokens(primed, tiny_model):
    ctx, n_prompt = primed
    whole, _ = llamacore.TokenLoop(ctx, llamacore.Sampler().greedy(), n_prompt, 30, ignore_eos=True).run(30)
    ctx.kv_remove(0, n_prompt - 1, -1)              # back to the prompt's logits
    decode(ctx, tiny_model.tokenize(PROMPT)[-1:], n_prompt - 1)
    loop = llamacore.TokenLoop(ctx, llamacore.Sampler().greedy(), n_prompt, 30, ignore_eos=True)
    pieces = []
    while loop.finish is None:
        tokens, _ = loop.run(7)
        assert 0 < len(tokens) <= 7
        pieces += tokens
    assert pieces == whole
    assert loop.run(5) == ([], b"")               # finished: nothing more
    assert loop.remaining == 0


def test_stop_string_across_tokens_ends_at_its_last_token(primed, tiny_model):
    ctx, n_prompt = primed
    tokens, text = llamacore.TokenLoop(ctx, llamacore.Sampler().greedy(), n_prompt, 40, ignore_eos=True).run(40)
    pieces = [tiny_model.token_to_piece(t) for t in tokens]
    # a stop made of the end of piece 5 and the start of piece 6 (or more, if those are short)
    joined = b"".join(pieces)
    end5 = len(b"".join(pieces[:6]))
    stop = joined[end5 - 2:end5 + 2]
    assert len(stop) == 4
    first_hit = next(i for i in range(len(pieces)) if stop in b"".join(pieces[:i + 1]))

    ctx.kv_remove(0, n_prompt - 1, -1)              # back to the prompt's logits
    decode(ctx, tiny_model.tokenize(PROMPT)[-1:], n_prompt - 1)
    loop = llamacore.TokenLoop(ctx, llamacore.Sampler().greedy(), n_prompt, 40, ignore_eos=True,
                               stops=["never there", stop])
    got = []
    while loop.finish is None:
        out, _ = loop.run(3)                        # the match spans runs too
        got += out
    assert loop.finish == "stop"
    assert got == tokens[:first_hit + 1]
    assert loop.pos == n_prompt + first_hit        # the token that completed the stop is not decoded


def test_end_of_generation_token_is_returned_without_text(primed, tiny_model):
    ctx, n_prompt = primed
    eos = tiny_model.token_eos
    sampler = llamacore.Sampler().logit_bias(tiny_model, {eos: 1e9}).greedy()
    loop = llamacore.TokenLoop(ctx, sampler, n_prompt, 10)
    assert loop.run(10) == ([eos], b"")
    assert loop.finish == "eog"
    assert loop.pos == n_prompt                    # nothing decoded
    # ignore_eos: it is generated as text and decoding goes on
    loop = llamacore.TokenLoop(ctx, llamacore.Sampler().logit_bias(tiny_model, {eos: 1e9}).greedy(),
                               n_prompt, 3, ignore_eos=True)
    tokens, _ = loop.run(10)
    assert tokens == [eos] * 3 and loop.finish == "length" and loop.pos == n_prompt + 2


def test_context_end_stops_the_loop(tiny_model):
    ctx = make_ctx(tiny_model, n_ctx=32)
    prompt = tiny_model.tokenize(PROMPT)
    decode(ctx, prompt)
    loop = llamacore.TokenLoop(ctx, llamacore.Sampler().greedy(), len(prompt), 1000, ignore_eos=True)
    tokens, _ = loop.run(1000)
    assert loop.finish == "length"
    assert loop.pos == ctx.n_ctx_seq and len(tokens) == ctx.n_ctx_seq - len(prompt) + 1


def test_zero_budget_is_finished_at_once(primed):
    ctx, n_prompt = primed
    loop = llamacore.TokenLoop(ctx, llamacore.Sampler().greedy(), n_prompt, 0)
    assert loop.finish == "length" and loop.run(5) == ([], b"")


def test_failed_decode_returns_the_tokens_then_raises(primed):
    ctx, n_prompt = primed
    calls = []
    ctx.set_abort_callback(lambda: calls.append(1) or len(calls) > 30)   # the graph of the 2nd decode aborts
    try:
        loop = llamacore.TokenLoop(ctx, llamacore.Sampler().greedy(), n_prompt, 50, ignore_eos=True)
        tokens, _ = loop.run(50)
        assert 1 <= len(tokens) < 50 and loop.finish is None
        assert loop.pos == n_prompt + len(tokens) - 1      # the last token's decode failed
        with pytest.raises(llamacore.DecodeAbortedError):
            loop.run(50)
        assert loop.finish == "error" and loop.run(5) == ([], b"")
    finally:
        ctx.set_abort_callback(None)


def test_bad_input_raises(primed, tiny_model):
    ctx, n_prompt = primed
    greedy = llamacore.Sampler().greedy()
    with pytest.raises(ValueError, match="empty"):
        llamacore.TokenLoop(ctx, llamacore.Sampler(), n_prompt, 5)
    with pytest.raises(ValueError, match="selecting stage"):
        llamacore.TokenLoop(ctx, llamacore.Sampler().top_k(5), n_prompt, 5)
    with pytest.raises(ValueError, match="outside the context"):
        llamacore.TokenLoop(ctx, greedy, ctx.n_ctx_seq + 1, 5)
    with pytest.raises(ValueError, match="outside the context"):
        llamacore.TokenLoop(ctx, greedy, -1, 5)
    with pytest.raises(ValueError, match="max_tokens"):
        llamacore.TokenLoop(ctx, greedy, n_prompt, -1)
    with pytest.raises(ValueError, match="sequence"):
        llamacore.TokenLoop(ctx, greedy, n_prompt, 5, seq_id=ctx.n_seq_max)
    fresh = make_ctx(tiny_model)
    with pytest.raises(IndexError, match="no logits"):
        llamacore.TokenLoop(fresh, greedy, 0, 5).run(5)


# -- Llama's completions: the C loop against the per-token path --------------------------------


def never(_ids, _logits):
    return False            # a stopping criterion forces the per-token path and changes nothing


@pytest.fixture(scope="module")
def llm(tiny_model_path):
    return Llama(tiny_model_path, n_ctx=256, n_threads=2, verbose=False)


@pytest.mark.parametrize("kw", [
    {"max_tokens": 40, "temperature": 0},
    {"max_tokens": 40, "temperature": 0.9, "seed": 3},
    {"max_tokens": 200, "temperature": 0, "stop": "from the text"},
])
def test_completion_matches_the_per_token_path(llm, kw):
    if kw.get("stop"):                  # a stop string the model's own text holds, and one it never writes
        text = llm.create_completion(PROMPT, max_tokens=60, temperature=0)["choices"][0]["text"]
        kw = {**kw, "stop": ["\x00never", text[30:34]]}
    fast = llm.create_completion(PROMPT, **kw)
    slow = llm.create_completion(PROMPT, stopping_criteria=never, **kw)
    streamed = "".join(c["choices"][0]["text"] for c in llm.create_completion(PROMPT, stream=True, **kw))
    assert fast["choices"][0]["text"] == slow["choices"][0]["text"] == streamed
    assert fast["choices"][0]["finish_reason"] == slow["choices"][0]["finish_reason"]
    assert fast["usage"] == slow["usage"]
    if "stop" in kw:
        assert fast["choices"][0]["finish_reason"] == "stop"
        assert fast["choices"][0]["text"] == text[:text.index(kw["stop"][1])]


def test_completion_leaves_the_cache_as_the_per_token_path(llm):
    llm.create_completion(PROMPT, max_tokens=20, temperature=0, stopping_criteria=never)
    slow = (llm.n_tokens, list(llm.input_ids[:llm.n_tokens]))
    llm.reset()
    llm.create_completion(PROMPT, max_tokens=20, temperature=0)
    assert (llm.n_tokens, list(llm.input_ids[:llm.n_tokens])) == slow
