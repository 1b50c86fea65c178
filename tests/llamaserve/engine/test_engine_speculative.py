"""Speculative decoding in the engine, by prompt lookup or a draft model: the plain answers, drafts
really decoded."""

import threading

import pytest
from helpers import N_THREADS

from llamacore.generation.events import Started, Token
from llamacore.generation.sampling import SamplingParams
from llamaserve.engine.draft_model import DraftModelSpec
from llamaserve.engine.engine import Engine
from llamaserve.engine.request import GenRequest

GREEDY = SamplingParams(temperature=0)
PROMPTS = [[1] + [100 + (i % 17) for i in range(60)], [1, 900, 901, 902], [1, 5, 6, 7, 8, 9, 10]]


def serve(model_path, spec, prompts=PROMPTS, n=40, n_ctx=256):
    """Greedy answers to `prompts`, submitted together, and the engine's (drafted, accepted) counts."""
    engine = Engine(str(model_path), [], parallel=3, n_ctx=n_ctx, speculative=spec,
                    context_kwargs={"n_threads": N_THREADS, "n_batch": 64, "n_ubatch": 64}).start()
    out = {i: [] for i in range(len(prompts))}
    ended = threading.Semaphore(0)

    def emit_for(i):
        def emit(event):
            if isinstance(event, Token):
                out[i].append(event.id)
            elif not isinstance(event, Started):
                ended.release()
        return emit
    try:
        for i, p in enumerate(prompts):
            engine.submit(GenRequest(p, GREEDY, n, (), emit_for(i)))
        for _ in prompts:
            assert ended.acquire(timeout=60)
        return out, engine.scheduler.drafted, engine.scheduler.accepted
    finally:
        engine.close()


@pytest.fixture(scope="module")
def plain(tiny_model_path):
    return serve(tiny_model_path, None)[0]


def test_prompt_lookup_gives_the_plain_answers(tiny_model_path):
    """Drafts verified in the batch change nothing in the output; they are really decoded."""
    from llamaserve.engine.speculative import PromptLookup

    text = [1] + [100 + (i % 17) for i in range(120)]            # a repetitive prompt
    prompts = [text, text[:60] + [5, 6, 7], [1, 900, 901, 902]]
    plain, _, _ = serve(tiny_model_path, None, prompts, n_ctx=512)
    spec, drafted, accepted = serve(tiny_model_path, PromptLookup(n_draft=6, ngram=2), prompts, n_ctx=512)
    assert spec == plain and all(len(t) == 40 for t in spec.values())
    assert drafted > 0 and 0 <= accepted <= drafted


def test_the_model_itself_as_draft_is_always_right(tiny_model_path, plain):
    out, drafted, accepted = serve(tiny_model_path, DraftModelSpec(str(tiny_model_path), n_draft=4))
    assert out == plain
    assert drafted > 0 and accepted == drafted        # greedy drafts of the same model all pass


def test_another_model_as_draft_changes_nothing(tiny_model_path, tiny_models_dir, plain):
    from tiny_models import TinyModelSpec, write_model

    other = write_model(tiny_models_dir / "draft-other.gguf", TinyModelSpec(seed=11, n_layer=1, name="draft"))
    out, drafted, accepted = serve(tiny_model_path, DraftModelSpec(str(other), n_draft=4))
    assert out == plain and drafted > 0 and accepted < drafted


def test_p_min_stops_unsure_drafts(tiny_model_path, plain):
    from llamacore import Model
    from llamaserve.engine.draft_model import DraftModel

    out, _, _ = serve(tiny_model_path, DraftModelSpec(str(tiny_model_path), n_draft=4, p_min=0.9))
    assert out == plain
    target = Model(str(tiny_model_path))

    def proposals(p_min):
        draft = DraftModel(DraftModelSpec(str(tiny_model_path), n_draft=4, p_min=p_min), target,
                           n_seq=1, n_ctx_seq=256, n_threads=N_THREADS)
        return [draft.index(0).propose(prompt, 4) for prompt in PROMPTS]

    sure, every = proposals(0.9), proposals(0.0)
    assert all(len(d) == 4 for d in every)
    assert all(s == d[:len(s)] for s, d in zip(sure, every)) and sum(map(len, sure)) < sum(map(len, every))


def test_a_draft_after_a_rest_reads_every_token_it_missed(tiny_model_path):
    """A sequence that drafted nothing for many steps (a rest) catches up on the whole context, not
    on its last few tokens: drafts from a partial context agree with the target far less often."""
    from llamacore import Model
    from llamaserve.engine.draft_model import DraftModel

    target = Model(str(tiny_model_path))
    draft = DraftModel(DraftModelSpec(str(tiny_model_path), n_draft=4), target, n_seq=2, n_ctx_seq=256,
                       n_threads=N_THREADS)
    context = PROMPTS[0]
    resting, fresh = draft.index(0), draft.index(1)
    resting.propose(context[:10], 4)
    decodes = draft.decodes
    resumed = resting.propose(context, 4)           # 51 tokens later
    assert resting.known[:len(context)] == context
    assert draft.decodes - decodes == 1 + (len(resumed) - 1)    # the missed tokens in one batch, then the drafts
    assert resumed == fresh.propose(context, 4)
    assert draft.read_seconds is not None and draft.read_seconds > 0      # timed on the 51 tokens


def test_a_draft_that_reads_slowly_reads_only_the_last_tokens_after_a_rest(tiny_model_path):
    """When reading a missed token costs more than the scheduler allows (`read_budget`), the draft
    starts over from the last READ_WINDOW tokens: a slow reader must not pay for a whole rest."""
    from llamacore import Model
    from llamaserve.engine.draft_model import READ_WINDOW, DraftModel

    target = Model(str(tiny_model_path))
    draft = DraftModel(DraftModelSpec(str(tiny_model_path), n_draft=4), target, n_seq=1, n_ctx_seq=256,
                       n_threads=N_THREADS)
    context, seq = PROMPTS[0], draft.index(0)
    seq.propose(context[:10], 4)
    draft.read_seconds = 1.0                       # as measured on a draft as slow as the model
    decodes = draft.decodes
    drafts = seq.propose(context, 4, read_budget=0.01)
    assert seq.offset == len(context) - READ_WINDOW and seq.known[:len(context)] == context
    assert draft.decodes - decodes == 1 + (len(drafts) - 1)    # the last READ_WINDOW tokens in one batch
    assert len(drafts) == 4


def test_a_draft_with_another_vocabulary_is_refused(tiny_model_path, tmp_path):
    from tiny_models import DEFAULT_VOCAB_PATH, TinyModelSpec, write_model

    gpt2 = write_model(tmp_path / "gpt2-vocab.gguf", TinyModelSpec(name="x"),
                       vocab_path=DEFAULT_VOCAB_PATH.parent / "ggml-vocab-gpt-2.gguf")
    with pytest.raises(ValueError, match="its vocabulary size is 50257, the model's is 32000"):
        Engine(str(tiny_model_path), [], parallel=1, n_ctx=128, speculative=DraftModelSpec(str(gpt2)))
