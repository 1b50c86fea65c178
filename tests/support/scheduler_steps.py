"""The scheduler tests' stand-in executor: requests with names, and steps that sample a fixed token
for every row (tests/llamaserve/engine/test_scheduler.py, tests/llamaserve/engine/test_scheduler_drafts.py)."""

from __future__ import annotations

from llamacore.generation.events import Token
from llamaserve.engine.request import GenRequest, Sampled
from llamaserve.engine.scheduler import Scheduler

EOG = 2


class Log:
    """Collects the events of every request, by name."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.end: dict[str, object] = {}

    def request(self, name: str, tokens: list[int], max_tokens: int = 4, adapters=(), **kw) -> GenRequest:
        def emit(event) -> None:
            raise AssertionError("the scheduler returns events; it never emits them itself")
        req = GenRequest(list(tokens), None, max_tokens, adapters, emit, **kw)
        req.name = name
        return req

    def record(self, events) -> None:
        for req, event in events:
            if isinstance(event, Token):
                self.tokens.append(req.name)
            else:
                assert req.name not in self.end, f"{req.name} ended twice"
                self.end[req.name] = event


def step(sched: Scheduler, log: Log, token: int = 7) -> list:
    """One executor step; returns the plan's rows as (name, n_tokens, pos, sample)."""
    _, events = sched.admit()
    log.record(events)
    plan = sched.schedule()
    if plan is None:
        return []
    rows = [(r.slot.req.name, len(r.tokens), r.pos, r.sample) for r in plan.rows]
    log.record(sched.on_sampled(plan, [Sampled(token, token == EOG) for _ in plan.sample]))
    return rows


def run(sched: Scheduler, log: Log, steps: int = 1000) -> None:
    for _ in range(steps):
        step(sched, log)
        if not sched.running and not sched.waiting:
            return
    raise AssertionError("requests did not finish")
