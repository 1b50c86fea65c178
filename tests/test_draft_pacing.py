"""Draft pacing (llamacore.draft_pacing): draft lengths that follow what was kept and what pays,
and rests where drafting is slower than plain steps. Fed synthetic step timings: no model."""

from llamacore.draft_pacing import DraftPacing


def test_pacing_follows_what_was_kept_and_rests_after_refused_drafts():
    pacing = DraftPacing(most=8, patience=2, rest_min=3)
    assert not pacing.may_draft()                   # a plain step first: the yardstick
    pacing.record(1, 0, 0, 0.010)
    assert pacing.may_draft()
    pacing.record(3, 2, 2, 0.012)                   # all kept: drafts get longer
    pacing.record(5, 4, 4, 0.013)
    assert pacing.length == 8
    pacing.record(4, 8, 3, 0.015)                   # some kept: as long as what was kept, +1
    assert pacing.length == 4
    for _ in range(2):                              # refused from the first token twice: a rest
        assert pacing.may_draft()
        pacing.record(1, 4, 0, 0.011)
    assert pacing.length == 1                       # after it, one-token drafts first
    assert [pacing.may_draft() for _ in range(4)] == [False, False, False, True]


def test_pacing_rests_where_drafts_cost_more_than_they_keep():
    """A draft that is often right but costs nearly a target step (the target itself, say) is
    slower than plain decoding: the pacing rests, longer each time in a row, and starts short
    again once drafting pays."""
    pacing = DraftPacing(most=4, trial=2, rest_min=4, rest_max=64)
    pacing.record(1, 0, 0, 0.010)                   # plain: 100 tokens/s
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
    assert all(drafted[-20:]) and pacing.next_rest == 4


def test_pacing_keeps_the_draft_length_that_gives_the_most_tokens_per_second():
    """Steps of 1 + n rows need not cost in proportion to n: the length is held where the measured
    tokens/s peak, one longer being tried."""
    pacing = DraftPacing(most=8, trial=100)
    pacing.record(1, 0, 0, 0.010)
    pacing.record(1, 2, 0, 0.030)                   # catching up (nothing kept: length 1)
    cost = {1: 0.012, 2: 0.013, 3: 0.014, 4: 0.030}     # seconds of a step by drafted tokens
    lengths = []
    for _ in range(12):
        n = pacing.limit()
        lengths.append(n)
        pacing.record(n + 1, n, n, cost[min(n, 4)])    # every draft kept
    assert lengths[:4] == [1, 2, 3, 4] and set(lengths[4:]) == {3}
