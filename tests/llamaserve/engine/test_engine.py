"""The continuous-batching engine directly: mixed adapters, chunked prompts, cancellation, limits."""

import re
import threading
import time

import pytest
from helpers import N_THREADS

from llamacore.generation.events import Failed, Finished, FinishReason, Started, Token
from llamacore.generation.sampling import SamplingParams
from llamaserve.engine.engine import Engine
from llamaserve.engine.request import GenRequest
from llamaserve.errors import QueueFullError

GREEDY = SamplingParams(temperature=0)


class Recorder:
    """Collects engine events of several requests in the order they happen."""

    def __init__(self):
        self.events = []
        self.done = {}
        self.cached = {}        # name -> prompt tokens found in the KV cache when it started
        self.lock = threading.Lock()

    def request(self, name, tokens, max_tokens, adapters=(), **kw):
        def emit(event):
            with self.lock:
                if isinstance(event, Started):
                    assert name not in self.cached and name not in self.done, f"{name} started twice or late"
                    self.cached[name] = event.n_cached
                elif isinstance(event, Token):
                    assert name in self.cached, f"{name} sampled before it started"
                    self.events.append(name)
                elif isinstance(event, Finished):
                    self.done[name] = ("end", event.reason)
                else:
                    assert isinstance(event, Failed)
                    self.done[name] = ("error", event.error)
        return GenRequest(tokens, GREEDY, max_tokens, adapters, emit, **kw)

    def wait(self, names, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(n in self.done for n in names):
                    return
            time.sleep(0.01)
        raise TimeoutError(f"not finished: {set(names) - set(self.done)}")


@pytest.fixture(scope="module")
def engine(tiny_model_path, lora_a_path, lora_b_path):
    e = Engine(str(tiny_model_path), [str(lora_a_path), str(lora_b_path)], parallel=4, max_queue=2, n_ctx=256,
               context_kwargs={"n_threads": N_THREADS, "n_batch": 64, "n_ubatch": 64}).start()
    yield e
    e.close()


def _runs(order: str) -> list[str]:
    """"AABBBA" -> ["AA", "BBB", "A"]."""
    return [m.group(0) for m in re.finditer(r"(.)\1*", order)]


def test_mixed_adapters_decode_together(engine, lora_a_path, lora_b_path):
    rec = Recorder()
    a, b = ((str(lora_a_path), 1.0),), ((str(lora_b_path), 1.0),)
    engine.submit(rec.request("A", [1, 100, 200], 30, a))
    engine.submit(rec.request("B", [1, 300, 400], 30, b))
    engine.submit(rec.request("C", [1, 300, 401], 30))
    rec.wait(["A", "B", "C"])
    order = "".join(name[0] for name in rec.events)
    assert sorted(order) == sorted("A" * 30 + "B" * 30 + "C" * 30)
    # one decode carries all three: no request waits for another adapter set's turn
    assert max(len(r) for r in _runs(order)) <= 2, order


def test_runtime_adapter_add_and_remove(engine, lora_wrong_shape_path, tiny_models_dir, tiny_spec):
    from tiny_models import write_lora

    path = str(write_lora(tiny_models_dir / "lora-runtime.gguf", tiny_spec, seed=9))
    adapter = engine.add_adapter(path)
    assert engine.add_adapter(path) is adapter and engine.adapters[path] is adapter
    rec = Recorder()
    engine.submit(rec.request("R", [1, 100, 200], 40, ((path, 1.0),)))
    while not rec.events:
        time.sleep(0.001)
    engine.remove_adapter(path)           # refused for new requests at once, freed after "R"
    with pytest.raises(ValueError, match="not loaded"):
        engine.submit(rec.request("late", [1, 2], 1, ((path, 1.0),)))
    rec.wait(["R"])
    assert rec.done["R"] == ("end", FinishReason.LENGTH) and rec.events.count("R") == 40
    deadline = time.monotonic() + 10
    while path in engine.adapters and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path not in engine.adapters
    with pytest.raises(ValueError, match="another base model|failed to load"):
        engine.add_adapter(str(lora_wrong_shape_path))


def test_started_reports_the_prompt_tokens_found_in_the_cache(engine):
    rec = Recorder()
    engine.submit(rec.request("first", [77, 500, 501, 502, 503], 2))
    rec.wait(["first"])
    engine.submit(rec.request("again", [77, 500, 501, 502, 503, 504], 2))     # same prefix, one more token
    rec.wait(["again"])
    # a slot keeps its sequence's KV; the next prompt reuses all of the first one's prompt
    assert rec.cached == {"first": 0, "again": 5}


def test_long_prompt_is_chunked_without_stalling_generation(engine):
    rec = Recorder()
    engine.submit(rec.request("short", [1, 5, 6], 60))
    while not rec.events:
        time.sleep(0.001)
    engine.submit(rec.request("long", [1] + list(range(1000, 1200)), 1))   # 201 tokens = 4 chunks of 64
    rec.wait(["short", "long"])
    first_long = rec.events.index("long")
    assert rec.events[:first_long].count("short") >= 4, rec.events


def test_cancel_frees_the_slot_within_a_step(engine):
    rec = Recorder()
    req = rec.request("c", [1, 7, 8], 200)
    engine.submit(req)
    while not rec.events:
        time.sleep(0.001)
    req.cancel()
    rec.wait(["c"], timeout=5)
    assert rec.done["c"] == ("end", FinishReason.CANCELLED)
    assert engine.active == 0 and len(rec.events) < 200


def test_context_overflow_ends_with_length(engine):
    rec = Recorder()
    engine.submit(rec.request("o", [1] + [42] * 240, 1000, ignore_eos=True))
    rec.wait(["o"])
    assert rec.done["o"] == ("end", FinishReason.LENGTH)
    assert 240 + len(rec.events) < engine.n_ctx_seq + 1


def test_queue_bound(engine):
    rec = Recorder()
    reqs = [rec.request(f"q{i}", [1, 9, i + 10], 50, ignore_eos=True) for i in range(7)]
    accepted = []
    with pytest.raises(QueueFullError):
        for r in reqs:
            engine.submit(r)
            accepted.append(r)
    assert len(accepted) == 6                      # 4 free slots + max_queue 2
    for r in accepted:
        r.cancel()
    rec.wait([f"q{i}" for i in range(6)])


def test_prompt_too_long_is_refused(engine):
    with pytest.raises(ValueError, match="context holds"):
        engine.submit(Recorder().request("x", [1] * 300, 1))


def test_unexpected_step_error_ends_running_requests_and_engine_serves_on(engine, monkeypatch):
    """Fault injection in our own scheduler code: the worker thread must survive it."""
    original, calls = engine.scheduler.schedule, []

    def fail_once():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected scheduler fault")
        return original()

    rec = Recorder()
    monkeypatch.setattr(engine.scheduler, "schedule", fail_once)
    engine.submit(rec.request("hit", [1, 5, 6], 8))
    rec.wait(["hit"])
    kind, value = rec.done["hit"]
    assert kind == "error" and "injected scheduler fault" in str(value)
    engine.submit(rec.request("after", [1, 5, 6], 8))
    rec.wait(["after"])
    assert rec.done["after"] == ("end", FinishReason.LENGTH) and rec.events.count("after") == 8
    assert engine.active == 0


def test_shared_prefix_is_computed_once_and_answers_are_unchanged(tiny_model_path):
    """Requests arriving together with one long common prefix: one prefill of it, the same tokens."""
    prefix = [1] + list(range(2000, 2240))
    prompts = [prefix + [3000 + i, 3100 + i] for i in range(4)]

    def serve(share):
        engine = Engine(str(tiny_model_path), [], parallel=4, n_ctx=512, share_prefixes=share,
                        context_kwargs={"n_threads": N_THREADS, "n_batch": 128, "n_ubatch": 128}).start()
        out = {i: [] for i in range(4)}
        done = threading.Event()
        ended = []

        def emit_for(i):
            def emit(event):
                if isinstance(event, Token):
                    out[i].append(event.id)
                elif not isinstance(event, Started):
                    ended.append(i)
                    if len(ended) == 4:
                        done.set()
            return emit
        try:
            engine.ctx.reset_perf()
            for i, p in enumerate(prompts):
                engine.submit(GenRequest(p, GREEDY, 8, (), emit_for(i)))
            assert done.wait(60)
            return out, engine.ctx.perf()["n_p_eval"]
        finally:
            engine.close()

    shared, n_shared = serve(True)
    alone, n_alone = serve(False)
    assert shared == alone and all(len(t) == 8 for t in shared.values())
    # llama.cpp counts every token of a multi-token batch (the 4 x 8 generated ones too): without
    # sharing every prompt is prefilled, with it the prefix once and then 2 tokens each
    assert n_alone >= 4 * len(prompts[0])
    assert n_shared <= len(prompts[0]) + 3 * 2 + 4 * 8, (n_shared, n_alone)
