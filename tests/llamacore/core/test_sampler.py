"""Sampler chains: greedy, seeded dist, top_k, logit bias, GBNF grammars, penalties, validation."""

import numpy as np
import pytest
from helpers import N_THREADS, decode, make_ctx

import llamacore

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def primed(tiny_model):
    """A context holding PROMPT with the logits of its last token available."""
    ctx = make_ctx(tiny_model, n_batch=64)
    decode(ctx, tiny_model.tokenize(PROMPT))
    return ctx


def draws(sampler, ctx, n=20):
    return [sampler.sample(ctx) for _ in range(n)]


def test_greedy_is_argmax(primed):
    s = llamacore.Sampler().greedy()
    assert s.stages == ["greedy"]
    assert s.sample(primed) == int(np.argmax(primed.logits()))


def test_greedy_over_all_outputs(tiny_model):
    ctx = llamacore.Context(tiny_model, n_ctx=128, n_threads=N_THREADS)
    tokens = tiny_model.tokenize("The quick brown fox")
    b = llamacore.Batch(len(tokens))
    b.add_sequence(tokens, 0, 0, logits_all=True)
    ctx.decode(b)
    s = llamacore.Sampler().greedy()
    for i in range(len(tokens)):
        assert s.sample(ctx, i) == int(np.argmax(ctx.logits(i)))


def test_dist_same_seed_reproducible(primed):
    first = draws(llamacore.Sampler().temp(1.5).dist(1234), primed)
    second = draws(llamacore.Sampler().temp(1.5).dist(1234), primed)
    assert first == second
    # at temperature 1.5 the draws are not all the same token
    assert len(set(first)) > 1


def test_dist_different_seeds_differ(primed):
    a = draws(llamacore.Sampler().temp(1.5).dist(1), primed)
    b = draws(llamacore.Sampler().temp(1.5).dist(2), primed)
    assert a != b


def test_dist_seed_property(primed):
    assert llamacore.Sampler().dist(77).seed == 77


def test_dist_samples_likely_tokens(primed):
    # every draw of top_k(5) comes from the 5 largest logits
    top5 = set(np.argsort(primed.logits())[-5:].tolist())
    got = draws(llamacore.Sampler().top_k(5).temp(1.5).dist(3), primed, 30)
    assert set(got) <= top5


def test_top_k_1_equals_greedy(primed):
    greedy = llamacore.Sampler().greedy().sample(primed)
    for seed in (1, 2, 3):
        s = llamacore.Sampler().top_k(1).temp(1.5).dist(seed)
        assert draws(s, primed, 5) == [greedy] * 5


def test_logit_bias_forces_token(primed, tiny_model):
    forced = 15043  # " Hello"
    assert int(np.argmax(primed.logits())) != forced
    s = llamacore.Sampler().logit_bias(tiny_model, {forced: 100.0}).greedy()
    assert s.sample(primed) == forced
    s = llamacore.Sampler().logit_bias(tiny_model, {forced: 100.0}).temp(1.0).dist(5)
    assert draws(s, primed, 10) == [forced] * 10
    # a large negative bias removes the greedy choice
    top = int(np.argmax(primed.logits()))
    s = llamacore.Sampler().logit_bias(tiny_model, {top: -1000.0}).greedy()
    assert s.sample(primed) == int(np.argsort(primed.logits())[-2])


def test_logit_bias_rejects_bad_token(tiny_model):
    with pytest.raises(IndexError):
        llamacore.Sampler().logit_bias(tiny_model, {tiny_model.n_vocab: 1.0})
    with pytest.raises(IndexError):
        llamacore.Sampler().logit_bias(tiny_model, {-1: 1.0})


def generate_with(sampler, model, prompt, max_tokens=8):
    ctx = llamacore.Context(model, n_ctx=128, n_threads=N_THREADS)
    tokens = model.tokenize(prompt)
    b = llamacore.Batch(max(len(tokens), 1))
    b.add_sequence(tokens, 0, 0)
    ctx.decode(b)
    out = []
    for _ in range(max_tokens):
        tok = sampler.sample(ctx)
        out.append(tok)
        if model.is_eog(tok):
            break
        b = llamacore.Batch(1)
        b.add(tok, len(tokens) + len(out) - 1, 0, logits=True)
        ctx.decode(b)
    return out


@pytest.mark.parametrize("chain", ["greedy", "dist"])
def test_grammar_yes_no(tiny_model, chain):
    texts = set()
    for seed, prompt in enumerate(["Answer:", "Is it raining?", "Hello World"]):
        s = llamacore.Sampler().grammar(tiny_model, 'root ::= "yes" | "no"')
        s = s.greedy() if chain == "greedy" else s.temp(1.5).dist(seed)
        out = generate_with(s, tiny_model, prompt)
        assert out[-1] == tiny_model.token_eos, out  # the grammar is complete: only EOS remains
        text = b"".join(tiny_model.token_to_piece(t) for t in out[:-1]).decode()
        assert text in ("yes", "no"), (out, text)
        texts.add(text)
    assert texts


def test_grammar_without_constraint_differs(tiny_model):
    # sanity: the unconstrained model does not spell yes/no on its own
    out = generate_with(llamacore.Sampler().greedy(), tiny_model, "Answer:", max_tokens=3)
    text = b"".join(tiny_model.token_to_piece(t) for t in out).decode("utf-8", "replace")
    assert text not in ("yes", "no")


def test_grammar_accept_allowed_tokens(tiny_model):
    s = llamacore.Sampler().grammar(tiny_model, 'root ::= "yes" | "no"').greedy()
    yes = next(t for t in range(tiny_model.n_vocab) if tiny_model.token_text(t) == "yes")
    assert tiny_model.token_to_piece(yes) == b"yes"
    s.accept(yes)                     # a whole answer...
    s.accept(tiny_model.token_eos)    # ...after which EOS is allowed


def test_invalid_grammar_raises(tiny_model):
    for bad in ['root ::= "yes', "root ::= [a-", "root ::= undefined_rule", 'root ::= ("a"']:
        with pytest.raises(ValueError, match="grammar"):
            llamacore.Sampler().grammar(tiny_model, bad)
    with pytest.raises(ValueError, match="root"):
        llamacore.Sampler().grammar(tiny_model, 'start ::= "a"')  # no rule named root
    with pytest.raises(ValueError, match="empty"):
        llamacore.Sampler().grammar(tiny_model, "   ")
    # the failed stage was not added to the chain
    s = llamacore.Sampler()
    with pytest.raises(ValueError):
        s.grammar(tiny_model, "root ::= [a-")
    assert s.stages == []


def test_penalties_validation():
    with pytest.raises(ValueError):
        llamacore.Sampler().penalties(repeat=0.0)
    with pytest.raises(ValueError):
        llamacore.Sampler().penalties(repeat=-1.0)
    with pytest.raises(ValueError):
        llamacore.Sampler().penalties(last_n=-2)
    s = llamacore.Sampler().penalties(64, 1.1, 0.1, 0.1).greedy()
    assert s.stages == ["penalties", "greedy"]


def test_repeat_penalty_avoids_repeats(primed):
    top = int(np.argmax(primed.logits()))
    s = llamacore.Sampler().penalties(last_n=64, repeat=1.0, presence=1000.0).greedy()
    s.accept(top)  # as if `top` had just been generated
    assert s.sample(primed) != top
    s.reset()  # forgets the history
    assert s.sample(primed) == top


def test_chain_description():
    s = llamacore.Sampler().top_k(40).top_p(0.9).min_p(0.05).temp(0.8).dist(1)
    assert s.stages == ["top_k", "top_p", "min_p", "temp", "dist"]
    assert repr(s) == "<Sampler top_k -> top_p -> min_p -> temp -> dist>"


def test_empty_chain_and_missing_logits(tiny_model, primed):
    with pytest.raises(ValueError):
        llamacore.Sampler().sample(primed)
    fresh = llamacore.Context(tiny_model, n_ctx=128, n_threads=N_THREADS)
    with pytest.raises(IndexError):
        llamacore.Sampler().greedy().sample(fresh)
    with pytest.raises(IndexError):
        llamacore.Sampler().greedy().sample(primed, 5)  # only the last token has logits


def test_mirostat_v2_samples_plausible_token(primed):
    top10 = set(np.argsort(primed.logits())[-50:].tolist())
    s = llamacore.Sampler().temp(1.0).mirostat_v2(seed=3, tau=3.0, eta=0.1)
    assert set(draws(s, primed, 10)) <= top10
