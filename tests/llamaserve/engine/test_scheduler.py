"""The scheduling policy without a model: fairness, packing, chunked prefill, prefix reuse, cancellation.

The "executor" here is a loop that samples a fixed token for every row (tests/support/scheduler_steps.py),
so each test runs in milliseconds and checks the plans themselves. Drafts: test_scheduler_drafts.py.
"""

from __future__ import annotations

from isolation import run_python
from scheduler_steps import EOG, Log, run, step

from llamacore.generation.events import Failed, Finished, FinishReason
from llamaserve.engine.plan import SlotState
from llamaserve.engine.request import Sampled
from llamaserve.engine.scheduler import Scheduler

A = (("a.gguf", 1.0),)
B = (("b.gguf", 1.0),)


def test_prompt_is_decoded_then_one_token_per_step():
    sched, log = Scheduler(2, n_batch=64, n_ctx_seq=128), Log()
    sched.add(log.request("r", [1, 2, 3, 4], max_tokens=3))
    assert step(sched, log) == [("r", 4, 0, True)]
    assert sched.slots[0].state is SlotState.GENERATING
    assert step(sched, log) == [("r", 1, 4, True)]
    assert step(sched, log) == [("r", 1, 5, True)]
    assert log.end["r"] == Finished(FinishReason.LENGTH, 3)
    assert log.tokens == ["r"] * 3
    assert sched.slots[0].state is SlotState.FINISHED
    sched.admit()
    assert sched.slots[0].state is SlotState.IDLE


def test_long_prompt_is_chunked_and_generation_goes_first():
    sched, log = Scheduler(2, n_batch=8, n_ctx_seq=128), Log()
    sched.add(log.request("short", [1, 2], max_tokens=10))
    step(sched, log)
    sched.add(log.request("long", list(range(10, 30)), max_tokens=1))      # 20 tokens: chunks of 7, 7, 6
    rows = [step(sched, log) for _ in range(3)]
    assert rows[0] == [("short", 1, 2, True), ("long", 7, 0, False)]
    assert rows[1] == [("short", 1, 3, True), ("long", 7, 7, False)]
    assert rows[2] == [("short", 1, 4, True), ("long", 6, 14, True)]
    assert log.end["long"] == Finished(FinishReason.LENGTH, 1)


def test_budget_is_never_exceeded():
    sched, log = Scheduler(4, n_batch=16, n_ctx_seq=256), Log()
    for i in range(4):
        sched.add(log.request(f"r{i}", list(range(1, 30 + i)), max_tokens=5))
    for _ in range(40):
        rows = step(sched, log)
        assert sum(n for _, n, _, _ in rows) <= 16
    assert set(log.end) == {"r0", "r1", "r2", "r3"}


def test_one_step_carries_every_adapter_set():
    sched, log = Scheduler(4, n_batch=64, n_ctx_seq=256), Log()
    sched.add(log.request("A1", [1, 5], max_tokens=24, adapters=A))
    sched.add(log.request("A2", [1, 6], max_tokens=24, adapters=A))
    sched.add(log.request("B1", [1, 7], max_tokens=24, adapters=B))
    sched.add(log.request("none", [1, 8], max_tokens=24))
    steps = 0
    while sched.running or sched.waiting:
        _, events = sched.admit()
        log.record(events)
        plan = sched.schedule()
        if plan is None:
            break
        # no turns: every running sequence is in every step, whatever its adapters
        assert len(plan.rows) == 4 and {r.slot.adapters for r in plan.rows} == {A, B, ()}
        log.record(sched.on_sampled(plan, [Sampled(7, False) for _ in plan.sample]))
        steps += 1
    assert steps == 24
    assert all(log.tokens.count(n) == 24 for n in ("A1", "A2", "B1", "none"))


def test_rows_on_one_adapter_are_neighbours_in_the_batch():
    """llama.cpp computes an adapter's products from its first row to its last: no strangers between."""
    sched, log = Scheduler(6, n_batch=64, n_ctx_seq=256), Log()
    for name, adapters in (("A1", A), ("B1", B), ("none", ()), ("A2", A), ("B2", B)):
        sched.add(log.request(name, [1, 5], max_tokens=3, adapters=adapters))
    step(sched, log)                                    # prompts
    sched.add(log.request("A3", [1, 5, 6, 7], max_tokens=3, adapters=A))
    rows = step(sched, log)                             # generating rows and A3's prompt
    names = [name for name, *_ in rows]
    groups = [name.rstrip("0123456789") for name in names]
    assert sorted(names) == ["A1", "A2", "A3", "B1", "B2", "none"]
    assert groups == sorted(groups, key=lambda g: {"none": 0, "A": 1, "B": 2}[g])
    assert names.index("A3") == 3                       # after the generating rows of its adapter


def test_unloaded_adapter_is_not_reused_nor_reported_in_use():
    sched, log = Scheduler(2, n_batch=64, n_ctx_seq=256), Log()
    sched.add(log.request("a", [1, 5, 6], max_tokens=1, adapters=A))
    assert sched.uses_adapter(A[0][0]) and not sched.uses_adapter(B[0][0])
    while step(sched, log):
        pass
    sched.admit()
    assert not sched.uses_adapter(A[0][0])
    slot = next(s for s in sched.slots if s.cached)
    sched.forget_adapter(A[0][0])
    assert slot.cached == [] and slot.adapters == ()


def test_eog_ends_with_stop_and_is_not_output():
    sched, log = Scheduler(1, n_batch=8, n_ctx_seq=64), Log()
    sched.add(log.request("r", [1, 2], max_tokens=10))
    step(sched, log, token=EOG)
    assert log.end["r"] == Finished(FinishReason.STOP, 0) and log.tokens == []


def test_ignore_eos_keeps_generating():
    sched, log = Scheduler(1, n_batch=8, n_ctx_seq=64), Log()
    sched.add(log.request("r", [1, 2], max_tokens=3, ignore_eos=True))
    for _ in range(3):
        step(sched, log, token=EOG)
    assert log.end["r"] == Finished(FinishReason.LENGTH, 3) and log.tokens == ["r"] * 3


def test_full_context_ends_with_length():
    sched, log = Scheduler(1, n_batch=64, n_ctx_seq=10), Log()
    sched.add(log.request("r", list(range(1, 8)), max_tokens=100))
    run(sched, log)
    assert log.end["r"] == Finished(FinishReason.LENGTH, 3)
    assert len(sched.slots[0].cached) + 1 == 10


def test_cancel_while_running_reports_cancelled():
    sched, log = Scheduler(1, n_batch=8, n_ctx_seq=64), Log()
    req = log.request("r", [1, 2], max_tokens=100)
    sched.add(req)
    step(sched, log)
    step(sched, log)
    req.cancel()
    assert step(sched, log) == []
    assert log.end["r"] == Finished(FinishReason.CANCELLED, 2)
    assert sched.slots[0].state is SlotState.IDLE and not sched.running


def test_cancel_while_waiting_never_takes_a_slot():
    sched, log = Scheduler(1, n_batch=8, n_ctx_seq=64), Log()
    sched.add(log.request("first", [1, 2], max_tokens=5))
    second = log.request("second", [1, 3], max_tokens=5)
    sched.add(second)
    step(sched, log)
    second.cancel()
    run(sched, log)
    assert log.end["second"] == Finished(FinishReason.CANCELLED, 0)
    assert "second" not in log.tokens


def test_waiting_requests_are_admitted_in_order_as_slots_free():
    sched, log = Scheduler(2, n_batch=64, n_ctx_seq=64), Log()
    for name in "wxyz":
        sched.add(log.request(name, [1, ord(name)], max_tokens=2))
    run(sched, log)
    assert list(log.end) == ["w", "x", "y", "z"]


def test_new_prompt_takes_the_slot_with_the_longest_reusable_prefix():
    sched, log = Scheduler(3, n_batch=64, n_ctx_seq=128), Log()
    sched.add(log.request("p", [1, 10, 11, 12], max_tokens=1))
    sched.add(log.request("q", [1, 20, 21, 22], max_tokens=1))
    run(sched, log)
    sched.add(log.request("q2", [1, 20, 21, 22, 23], max_tokens=1))
    admitted, _ = sched.admit()
    assert [(a.slot.seq, a.keep) for a in admitted] == [(1, 4)]
    assert sched.slots[1].pending == [23]


def test_whole_cached_prompt_still_decodes_its_last_token():
    sched, log = Scheduler(1, n_batch=64, n_ctx_seq=128), Log()
    sched.add(log.request("p", [1, 10, 11], max_tokens=1))
    run(sched, log)
    sched.add(log.request("again", [1, 10, 11], max_tokens=1))
    admitted, _ = sched.admit()
    assert admitted[0].keep == 2 and sched.slots[0].pending == [11]


def test_prefix_is_not_reused_across_adapter_sets():
    sched, log = Scheduler(1, n_batch=64, n_ctx_seq=128), Log()
    sched.add(log.request("p", [1, 10, 11, 12], max_tokens=1, adapters=A))
    run(sched, log)
    sched.add(log.request("other", [1, 10, 11, 12], max_tokens=1, adapters=B))
    admitted, _ = sched.admit()
    assert admitted[0].keep == 0 and sched.slots[0].pending == [1, 10, 11, 12]


def test_forget_cache_decodes_the_whole_prompt():
    sched, log = Scheduler(1, n_batch=64, n_ctx_seq=128), Log()
    sched.add(log.request("p", [1, 10, 11, 12], max_tokens=1))
    run(sched, log)
    sched.add(log.request("q", [1, 10, 11, 99], max_tokens=1))
    (admission,), _ = sched.admit()
    assert admission.keep == 3
    sched.forget_cache(admission.slot)           # the executor could not trim the KV
    assert step(sched, log) == [("q", 4, 0, True)]


def test_sampling_error_fails_that_request_only():
    sched, log = Scheduler(2, n_batch=64, n_ctx_seq=128), Log()
    sched.add(log.request("ok", [1, 2], max_tokens=2))
    sched.add(log.request("bad", [1, 3], max_tokens=2))
    sched.admit()
    plan = sched.schedule()
    boom = RuntimeError("sampler failed")
    log.record(sched.on_sampled(plan, [Sampled(7, False), boom]))
    assert log.end["bad"] == Failed(boom) and "ok" not in log.end
    run(sched, log)
    assert log.end["ok"] == Finished(FinishReason.LENGTH, 2)


def test_fail_and_close_end_everything_once():
    sched, log = Scheduler(1, n_batch=64, n_ctx_seq=128), Log()
    sched.add(log.request("running", [1, 2], max_tokens=50))
    sched.add(log.request("waiting", [1, 3], max_tokens=50))
    step(sched, log)
    err = RuntimeError("decode failed")
    log.record(sched.fail(sched.slots, err))
    assert log.end["running"] == Failed(err) and sched.slots[0].cached == []
    closed = RuntimeError("unloaded")
    log.record(sched.close(closed))
    assert log.end["waiting"] == Failed(closed) and not sched.waiting and not sched.running


def test_scheduler_does_not_load_llama_cpp():
    out = run_python("import sys, llamaserve.engine.scheduler; print('llamacore._core' in sys.modules)")
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


SYSTEM = list(range(100, 400))           # a 300-token shared system prompt


def test_requests_arriving_together_share_one_prefill_of_their_common_prefix():
    sched, log = Scheduler(4, n_batch=128, n_ctx_seq=1024, share_prefixes=True), Log()
    for i in range(4):
        sched.add(log.request(f"q{i}", SYSTEM + [500 + i, 600 + i], max_tokens=2))
    admitted, _ = sched.admit()
    assert [a.req.name for a in admitted] == ["q0"] and len(sched.waiting) == 3   # the others wait for q0
    prefilled = 0
    while sched.waiting:
        plan = sched.schedule()
        prefilled += sum(len(r.tokens) for r in plan.rows if r.slot.req.name == "q0")
        log.record(sched.on_sampled(plan, [Sampled(7, False) for _ in plan.sample]))
        admitted, events = sched.admit()
        log.record(events)
    # once q0 is past the prefix, the others take its cells and decode only their own two tokens
    assert prefilled >= len(SYSTEM)
    assert [(a.req.name, a.source.req.name, a.shared, a.keep) for a in admitted] == \
        [("q1", "q0", 300, 0), ("q2", "q0", 300, 0), ("q3", "q0", 300, 0)]
    assert all(a.slot.cached == SYSTEM and a.slot.pending == a.req.tokens[300:] for a in admitted)
    run(sched, log)
    assert all(log.end[f"q{i}"] == Finished(FinishReason.LENGTH, 2) for i in range(4))


def test_sharing_respects_adapters_and_the_minimum():
    sched, log = Scheduler(4, n_batch=512, n_ctx_seq=1024, share_prefixes=True, share_min=64), Log()
    sched.add(log.request("a", SYSTEM + [1], max_tokens=1, adapters=A))
    sched.add(log.request("b", SYSTEM + [2], max_tokens=1, adapters=B))      # other adapters: no sharing
    sched.add(log.request("short", SYSTEM[:10] + [3], max_tokens=1, adapters=A))   # under share_min: no wait
    admitted, _ = sched.admit()
    assert [(a.req.name, a.source) for a in admitted] == [("a", None), ("b", None), ("short", None)]
    run(sched, log)
    # a running sequence's cells are shared too, with a later request on the same adapters
    sched.add(log.request("long", SYSTEM + [6], max_tokens=50, adapters=A))
    step(sched, log)
    step(sched, log)
    sched.add(log.request("later", SYSTEM + [4, 5], max_tokens=1, adapters=A))
    admitted, _ = sched.admit()
    (a,) = admitted
    assert a.source is not None and a.source.req.name == "long" and a.shared == 300 and a.keep == 0


def test_no_sharing_without_the_option():
    sched, log = Scheduler(4, n_batch=128, n_ctx_seq=1024), Log()
    for i in range(3):
        sched.add(log.request(f"q{i}", SYSTEM + [i], max_tokens=1))
    admitted, _ = sched.admit()
    assert len(admitted) == 3 and all(a.source is None for a in admitted)
