"""The scheduler's speculative decoding without a model: drafts in the batch, what stays of them, and
the draft pacing's per-model yardstick (llamacore.generation.draft_pacing)."""

from __future__ import annotations

from scheduler_steps import Log, run, step

from llamaserve.engine.request import Sampled
from llamaserve.engine.scheduler import Scheduler


def time_plain_steps(sched: Scheduler) -> None:
    """As after the model's first plain steps: drafting starts once they are timed."""
    while not sched.yardstick.ready:
        sched.yardstick.add_plain(1, 0.010)


def test_drafts_ride_with_the_next_token_and_only_accepted_ones_stay():
    from llamaserve.engine.speculative import PromptLookup

    sched, log = Scheduler(1, n_batch=64, n_ctx_seq=256, drafter=PromptLookup(n_draft=4, ngram=2)), Log()
    sched.add(log.request("r", [1, 5, 6, 7, 8, 9, 10, 11, 5, 6], max_tokens=20))
    sched.admit()
    sched.slots[0].pacing.first = 4                 # a first draft of 4 tokens
    time_plain_steps(sched)
    # the prompt ends with "5 6", which occurred before followed by 7 8 9 10
    step(sched, log, token=7)                       # prefill, samples 7; context ... 5 6 | 7
    plan = sched.schedule()
    (row,) = plan.rows
    # next token 7 and the draft that followed "6 7" before: 8 9 10 11
    assert row.tokens == [7, 8, 9, 10, 11] and row.n_draft == 4 and row.pos == 10
    # the executor's sampler agrees with 8 and 9, then picks 3 instead of 10
    events = sched.on_sampled(plan, [[Sampled(8, False), Sampled(9, False), Sampled(3, False)]])
    log.record(events)
    slot = sched.slots[0]
    assert [e.id for _, e in events] == [8, 9, 3]
    # KV keeps 7 8 9 (positions 10-12); 10 and 11 are removed by the executor; 3 is fed next
    assert slot.cached == [1, 5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9] and slot.pending == [3]
    assert (sched.drafted, sched.accepted) == (4, 2)


def test_drafts_never_pass_max_tokens_nor_take_budget_from_prompts():
    from llamaserve.engine.speculative import PromptLookup

    sched, log = Scheduler(2, n_batch=8, n_ctx_seq=256, drafter=PromptLookup(n_draft=8, ngram=2)), Log()
    sched.add(log.request("g", [1, 2, 3, 1, 2], max_tokens=3))
    step(sched, log, token=3)                       # generated 1; 2 more allowed
    time_plain_steps(sched)
    sched.add(log.request("p", list(range(40, 46)), max_tokens=1))
    sched.admit()
    plan = sched.schedule()
    g, p = plan.rows
    assert g.n_draft <= 1                           # max_tokens 3: the next token plus one draft at most
    assert len(p.tokens) == 6                       # the prompt chunk is not squeezed by drafts
    assert sum(len(r.tokens) for r in plan.rows) <= 8


def test_prompt_lookup_prefers_the_longest_latest_match():
    from llamaserve.engine.speculative import PromptLookup

    look = PromptLookup(n_draft=3, ngram=3)
    assert look.propose([1, 2, 3, 9, 9, 2, 3, 8, 1, 2, 3], 10) == [9, 9, 2]     # "1 2 3" beats "2 3"
    assert look.propose([5, 6, 7, 8], 10) == []                                 # nothing repeats
    assert look.propose([4, 5, 1, 4, 5], 1) == [1]                               # limited by room


def test_a_failing_drafter_costs_the_request_nothing_but_its_drafts(caplog):
    class Broken:
        n_draft = 4

        def index(self, seq=0):
            return self

        def follow(self, context):
            return True

        def propose(self, context, limit, read_budget=None):
            raise RuntimeError("draft context full")

    sched, log = Scheduler(1, n_batch=64, n_ctx_seq=256, drafter=Broken()), Log()
    sched.add(log.request("r", [1, 2, 3], max_tokens=6))
    step(sched, log)
    time_plain_steps(sched)                         # the next step drafts
    run(sched, log)
    assert log.tokens.count("r") == 6 and sched.drafted == 0
    assert "drafting failed" in caplog.text and sched.slots[0].ngrams is None


def test_plain_steps_time_one_yardstick_per_model_that_later_requests_share():
    """Plain steps are timed once per step (not once per sequence), never the step after a prompt,
    and a later request's pacing shares what earlier ones timed and the rest they started."""
    from llamaserve.engine.speculative import PromptLookup

    sched, log = Scheduler(2, n_batch=64, n_ctx_seq=256, drafter=PromptLookup(n_draft=4, ngram=3)), Log()
    sched.add(log.request("a", [1, 2, 3], max_tokens=6))
    sched.add(log.request("b", [4, 5, 6], max_tokens=6))
    step(sched, log, token=9)                       # both prompts
    step(sched, log, token=9)                       # the step after them: not timed
    assert sched.yardstick.plain_steps == 0
    for i in range(3):
        for slot in sched.slots:                    # resting: these steps are plain
            slot.pacing.resting = 10
        step(sched, log, token=10 + i)
    assert sched.yardstick.plain_steps == 3         # three steps of two sequences each
    sched.yardstick.start_rest()                    # as after a judgement that drafting lost
    run(sched, log)
    sched.add(log.request("c", [7, 8], max_tokens=2))
    sched.admit()
    (slot,) = [s for s in sched.slots if s.req is not None]
    assert slot.pacing.yardstick is sched.yardstick and slot.pacing.resting == sched.yardstick.rest_left() > 0
