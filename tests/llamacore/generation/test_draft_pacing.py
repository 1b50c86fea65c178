"""Draft pacing (llamacore.generation.draft_pacing): draft lengths that follow what was kept and what pays,
rests where drafting is slower than plain steps, and a per-model yardstick that outlives requests.
Fed synthetic step timings: no model."""

from llamacore.generation.draft_pacing import DraftPacing, DraftYardstick


def plain_steps(pacing: DraftPacing, n: int, seconds: float = 0.010) -> None:
    for _ in range(n):
        pacing.record(1, 0, 0, seconds)


def test_drafts_lengthen_while_kept_and_rest_after_refused_drafts():
    pacing = DraftPacing(most=8, patience=2, yardstick=DraftYardstick(rest_min=3, warmup=2))
    assert not pacing.may_draft()                   # plain steps first: the yardstick
    plain_steps(pacing, 2)                          # the first follows the prompt: not timed
    assert pacing.yardstick.plain_steps == 1 and not pacing.may_draft()
    plain_steps(pacing, 1)
    assert pacing.may_draft() and pacing.limit() == 2
    pacing.record(3, 2, 2, 0.050)                   # all kept (the drafter caught up: not timed)
    assert pacing.limit() == 2 and pacing.yardstick.step_seconds == {}
    pacing.record(3, 2, 2, 0.012)                   # timed: one token longer is tried at that cost
    assert pacing.limit() == 3
    pacing.record(4, 3, 3, 0.013)
    assert pacing.limit() == 4
    for _ in range(2):                              # refused from the first token twice: a rest
        assert pacing.may_draft()
        pacing.record(1, 4, 0, 0.013)
    assert [pacing.may_draft() for _ in range(4)] == [False, False, False, True]


def test_pacing_rests_where_drafts_cost_more_than_they_keep():
    """A draft that is often right but costs nearly a target step (the target itself, say) is
    slower than plain decoding: the pacing rests, longer each time in a row, and starts short
    again once drafting pays."""
    pacing = DraftPacing(most=4, trial=2, yardstick=DraftYardstick(rest_min=4, rest_max=64, warmup=1))
    plain_steps(pacing, 2)                          # plain: 100 tokens/s
    rests = []
    for _ in range(3):
        assert pacing.may_draft()
        pacing.record(3, 4, 2, 0.500)               # the drafter catches up first: not judged
        for _ in range(2):
            assert pacing.may_draft()
            pacing.record(3, 4, 2, 0.050)           # 2 of 4 kept, 60 tokens/s
        rests.append(sum(not pacing.may_draft() for _ in range(100)))
    assert rests == [4, 16, 64]
    drafted = []
    for _ in range(100):                            # a cheap draft now (250 tokens/s): once its steps
        if pacing.may_draft():                      # outweigh the old ones, drafting pays again
            pacing.record(5, 4, 4, 0.020)
            drafted.append(True)
        else:
            pacing.record(1, 0, 0, 0.010)
            drafted.append(False)
    assert all(drafted[-20:]) and pacing.yardstick.next_rest == 4


def test_pacing_keeps_the_draft_length_that_gives_the_most_tokens_per_second():
    """Steps of 1 + n rows need not cost in proportion to n: the length is held where the expected
    tokens/s peak, one longer being tried once."""
    pacing = DraftPacing(most=8, trial=100, yardstick=DraftYardstick(warmup=1))
    plain_steps(pacing, 2)
    pacing.record(3, 2, 2, 0.030)                   # catching up
    cost = {1: 0.012, 2: 0.013, 3: 0.014, 4: 0.030}     # seconds of a step by drafted tokens
    lengths = []
    for _ in range(12):
        n = pacing.limit()
        lengths.append(n)
        pacing.record(n + 1, n, n, cost[min(n, 4)])    # every draft kept
    assert lengths[:3] == [2, 3, 4] and set(lengths[3:]) == {3}
    assert {n: round(t, 6) for n, t in pacing.yardstick.step_seconds.items()} == {2: 0.013, 3: 0.014, 4: 0.030}


def test_a_new_request_draws_on_what_the_models_earlier_requests_learnt():
    """The yardstick outlives a request: the next one's pacing drafts at once, without plain steps
    of its own, and where drafting did not pay it goes on resting where the last request stopped,
    instead of paying for another trial."""
    yardstick = DraftYardstick(rest_min=8, warmup=3)
    first = DraftPacing(most=4, trial=2, yardstick=yardstick)
    plain_steps(first, 4)
    assert yardstick.ready and first.may_draft()
    second = DraftPacing(most=4, yardstick=yardstick)
    assert second.may_draft()                       # no plain steps of its own needed
    for _ in range(3):                              # the first request's drafts lose: a rest of 8
        first.record(2, 2, 1, 0.030)
    assert first.resting == 8
    plain_steps(first, 3)                           # 3 of them pass, then the request ends
    third = DraftPacing(most=4, trial=2, yardstick=yardstick)
    assert [third.may_draft() for _ in range(6)] == [False] * 5 + [True]
    for _ in range(3):                              # its own trial loses too: the next rest is longer
        third.record(2, 2, 1, 0.030)
    assert third.resting == 32 and DraftPacing(yardstick=yardstick).resting == 32


def test_a_plain_step_after_a_prompt_does_not_time_the_yardstick():
    """The first step after a prompt plans the compute graph anew: slow, and not what plain steps cost."""
    pacing = DraftPacing(yardstick=DraftYardstick(warmup=1))
    pacing.record(1, 0, 0, 0.100)
    plain_steps(pacing, 3)
    pacing.begin()                                  # a new prompt (Llama: the next call)
    pacing.record(1, 0, 0, 0.100)
    assert pacing.yardstick.plain_steps == 3 and round(pacing.plain_rate) == 100


def test_a_miss_does_not_cut_drafts_short_where_most_are_kept():
    """A rewrite's drafts fail at its changed words and are right again after them: the counts of
    kept positions, not the last draft, set the length. Where drafts are mostly refused, they shrink."""
    def paced(kept: list[int]) -> DraftPacing:
        yardstick = DraftYardstick(warmup=1)
        for n, seconds in {1: 0.012, 2: 0.013, 3: 0.014, 4: 0.015}.items():
            yardstick.add_drafted(n, seconds)       # as other requests timed them
        pacing = DraftPacing(most=4, trial=100, yardstick=yardstick)
        plain_steps(pacing, 2)                      # 100 tokens/s
        for k in kept:
            pacing.record(1 + k, 4, k, 0.015)
        return pacing

    assert paced([4, 4, 4, 4, 0]).limit() == 4      # one changed word
    assert paced([4, 0, 1, 0, 1, 0]).limit() < 4
