"""Per-sequence adapter sets (vendor/patches/0001): sequences on different LoRA adapters in one decode.

The contract is exactness against the same batch decoded with the sequence's adapter set
applied to the whole context (same tokens, positions, sequence ids and batch shapes, so
llama.cpp's kernels sum in the same order; a sequence attends only to its own KV cells):

- a batch whose sequences share one set is bit for bit equal (it takes the context-wide path);
- a batch that mixes sets takes the slot pool (two ggml_mul_mat_id per weight for all adapters):
  equal within 1e-5 (its kernel sums in another order than mul_mat's), and a sequence's logits
  are bit for bit the same whatever adapters the other sequences use;
- with LLAMA_LORA_POOL_DISABLE=1 a mixed batch computes each adapter's products over the rows that
  use it (never fewer than the CPU kernels' threshold, a token's deltas added in adapter order):
  bit for bit equal.
"""

import asyncio
import math

import load_scenario as scenario
import numpy as np
import pytest
from helpers import N_THREADS, make_ctx
from server import ServerProcess

import llamacore

PROMPTS = ("Once upon a time", "The cat sat on", "A dog ran far away", "Hello", "In the morning the sun",
           "Blue sky", "Tom and Ann went", "She said")
STEPS = 8


@pytest.fixture(scope="module")
def adapters(tiny_model, lora_a_path, lora_b_path, tmp_path_factory, tiny_spec):
    """Four adapters: two of rank 4, one of rank 8 and one without alpha (scale independent of rank)."""
    from tiny_models import write_lora

    folder = tmp_path_factory.mktemp("mixed-loras")
    return {
        "a": llamacore.LoraAdapter(tiny_model, lora_a_path),
        "b": llamacore.LoraAdapter(tiny_model, lora_b_path),
        "r8": llamacore.LoraAdapter(tiny_model, write_lora(folder / "r8.gguf", tiny_spec, rank=8, seed=5)),
        "noalpha": llamacore.LoraAdapter(tiny_model, write_lora(folder / "na.gguf", tiny_spec, alpha=0.0, seed=6)),
    }


def sets_of(ad):
    """One adapter set per sequence of PROMPTS: single adapters, a pair, none, other scales."""
    return [{ad["a"]: 1.0}, {ad["b"]: 1.0}, {ad["a"]: 0.5, ad["b"]: 0.7}, {},
            {ad["r8"]: 1.0}, {ad["noalpha"]: 0.3}, {ad["a"]: 0.5}, {ad["b"]: 1.0}]


@pytest.fixture(params=["pool", "per-adapter"])
def mixed_path(request, monkeypatch):
    """How a mixed batch is computed; llama.cpp reads the switch when a context is created."""
    if request.param == "per-adapter":
        monkeypatch.setenv("LLAMA_LORA_POOL_DISABLE", "1")
    else:
        monkeypatch.delenv("LLAMA_LORA_POOL_DISABLE", raising=False)
    return request.param


def assert_same(got, want, path, msg=""):
    """Bitwise for the per-adapter path. The slot pool's mul_mat_id kernel sums in another order than
    mul_mat's sgemm, so its rounding errors scale with the row's largest logits, not with each
    element: every logit within 1e-5 of the row's largest magnitude (measured on logits up to 24:
    7.6e-6 on an Intel Xeon, 1.3e-5 on an AMD EPYC, on a logit of -0.13)."""
    if path == "per-adapter":
        np.testing.assert_array_equal(got, want, err_msg=msg)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()), err_msg=msg)


def new_ctx(model):
    # an F32 KV cache and no flash attention: with F16 K/V (and flash attention's F16 Q), a
    # last-bit difference of the slot pool lands on an F16 rounding boundary now and then and
    # grows to an F16 step (~1e-3 on these logits), which says nothing about the LoRA products
    return make_ctx(model, n_ctx=1024, n_batch=128, n_seq_max=len(PROMPTS), kv_unified=True,
                    type_k="f32", type_v="f32", flash_attn=False)


def run(ctx, model, forced=None, between=None):
    """Every prompt in one batch, then STEPS one-token steps for all sequences.

    Returns the logits of each step as an array [sequence, vocab]. `forced` (tokens per step)
    teacher-forces the steps; `between(step)` runs before each step.
    """
    prompts = [model.tokenize(p) for p in PROMPTS]
    batch = llamacore.Batch(128)
    for seq, tokens in enumerate(prompts):
        batch.add_sequence(tokens, 0, seq)
    ctx.decode(batch)
    last = np.cumsum([len(t) for t in prompts]) - 1
    out = [np.stack([ctx.logits(int(i)).copy() for i in last])]
    pos = [len(t) for t in prompts]
    for step in range(STEPS):
        if between:
            between(step)
        tokens = forced[step] if forced is not None else out[-1].argmax(axis=1)
        batch.clear()
        for seq in range(len(prompts)):
            batch.add(int(tokens[seq]), pos[seq], seq, logits=True)
            pos[seq] += 1
        ctx.decode(batch)
        out.append(np.stack([ctx.logits(i).copy() for i in range(len(prompts))]))
    return out




def reference(model, adapter_set, forced, between=None):
    """The same batches with `adapter_set` applied to the whole context."""
    ctx = new_ctx(model)
    ctx.set_adapters(adapter_set)
    return run(ctx, model, forced, between)


def pool_lines(capsys) -> list[str]:
    """llama.cpp's info lines since the last call that announce a slot pool allocation."""
    return [line for line in capsys.readouterr().err.splitlines() if "LoRA slot pool" in line]


def test_mixed_batch_matches_each_set_applied_globally(tiny_model, adapters, mixed_path, capsys):
    sets = sets_of(adapters)
    ctx = new_ctx(tiny_model)
    for seq, s in enumerate(sets):
        ctx.set_sequence_adapters(seq, s)
        assert ctx.sequence_adapters(seq) == s
    ctx.reset_perf()
    llamacore.set_verbose(True)                 # llama.cpp's info lines (on stderr) name the slot pool
    try:
        mixed = run(ctx, tiny_model)
    finally:
        llamacore.set_verbose(False)
    # the pool has a slot for each of the four adapters and room for as many more, of rank 8
    pooled = pool_lines(capsys)
    assert (pooled and "(8 slots, rank 8)" in pooled[0]) if mixed_path == "pool" else not pooled, pooled
    forced = [m.argmax(axis=1) for m in mixed]
    # steady state reuses the graph: the per-token scales are inputs, not part of its shape
    assert ctx.perf()["n_reused"] >= STEPS - 1
    base = reference(tiny_model, {}, forced)
    checked = 0
    for s in {tuple(sorted((a.path, v) for a, v in s.items())) for s in map(dict, sets)}:
        adapter_set = next(x for x in sets if tuple(sorted((a.path, v) for a, v in x.items())) == s)
        ref = reference(tiny_model, adapter_set, forced)
        for seq in (i for i, x in enumerate(sets) if x == adapter_set):
            for step in range(STEPS + 1):
                assert_same(mixed[step][seq], ref[step][seq], mixed_path, f"sequence {seq} step {step}")
            if adapter_set:                 # and the adapter really applied
                assert not np.array_equal(mixed[0][seq], base[0][seq])
            checked += 1
    assert checked == len(sets)


def test_one_adapter_mixed_with_none(tiny_model, adapters, mixed_path):
    """Sequences on adapter a (at two scales) and on none."""
    a = adapters["a"]
    ctx = new_ctx(tiny_model)
    sets = [{a: 1.0} if seq % 3 == 0 else {a: 0.5} if seq % 3 == 1 else {} for seq in range(len(PROMPTS))]
    for seq, s in enumerate(sets):
        ctx.set_sequence_adapters(seq, s)
    mixed = run(ctx, tiny_model)
    forced = [m.argmax(axis=1) for m in mixed]
    for adapter_set in ({a: 1.0}, {a: 0.5}, {}):
        ref = reference(tiny_model, adapter_set, forced)
        for seq in (i for i, x in enumerate(sets) if x == adapter_set):
            for step in range(STEPS + 1):
                assert_same(mixed[step][seq], ref[step][seq], mixed_path, f"sequence {seq} step {step}")


def test_pool_rows_do_not_depend_on_the_other_sequences(tiny_model, adapters, mixed_path):
    """The slot pool computes each token's delta from its own slots and scales only: the same batch
    with the other sequences' sets shuffled gives every sequence bit for bit the same logits."""
    sets = sets_of(adapters)
    shuffled = [sets[0], sets[3], sets[2], sets[1], sets[4], sets[6], sets[5], sets[7]]
    runs = []
    forced = None
    for assignment in (sets, shuffled):
        ctx = new_ctx(tiny_model)
        for seq, s in enumerate(assignment):
            ctx.set_sequence_adapters(seq, s)
        runs.append(run(ctx, tiny_model, forced))
        forced = forced or [m.argmax(axis=1) for m in runs[0]]
    for seq in range(len(PROMPTS)):
        same = sets[seq] == shuffled[seq]
        for step in range(STEPS + 1):
            if same:
                np.testing.assert_array_equal(runs[0][step][seq], runs[1][step][seq], err_msg=f"{seq} {step}")
    assert any(sets[seq] != shuffled[seq] for seq in range(len(PROMPTS)))
    assert sum(sets[seq] == shuffled[seq] for seq in range(len(PROMPTS))) >= 2


def test_uniform_sets_take_the_context_wide_path(tiny_model, adapters):
    """All sequences on one set through the per-sequence API: the same as set_adapters, bitwise."""
    a = adapters["a"]
    ctx = new_ctx(tiny_model)
    for seq in range(len(PROMPTS)):
        ctx.set_sequence_adapters(seq, {a: 0.8})
    ctx.reset_perf()
    per_seq = run(ctx, tiny_model)
    assert ctx.perf()["n_reused"] >= STEPS - 1
    glob = reference(tiny_model, {a: 0.8}, [m.argmax(axis=1) for m in per_seq])
    for step in range(STEPS + 1):
        np.testing.assert_array_equal(per_seq[step], glob[step])


def test_scale_change_mid_stream_takes_effect_without_rebuild(tiny_model, adapters, mixed_path):
    a, b = adapters["a"], adapters["b"]
    ctx = new_ctx(tiny_model)
    for seq in range(len(PROMPTS)):
        ctx.set_sequence_adapters(seq, {b: 1.0} if seq % 2 else {a: 1.0})

    def change(step):
        if step == STEPS // 2:
            ctx.reset_perf()
            ctx.set_sequence_adapters(0, {a: 0.25})

    mixed = run(ctx, tiny_model, between=change)
    # every step after the change reused the graph: no rebuild, no re-reserve
    assert ctx.perf()["n_reused"] == STEPS - STEPS // 2
    forced = [m.argmax(axis=1) for m in mixed]
    ref_ctx = new_ctx(tiny_model)
    ref_ctx.set_adapters({a: 1.0})

    def change_ref(step):
        if step == STEPS // 2:
            ref_ctx.set_adapters({a: 0.25})

    ref = run(ref_ctx, tiny_model, forced, change_ref)
    for step in range(STEPS + 1):
        assert_same(mixed[step][0], ref[step][0], mixed_path, f"step {step}")
    unchanged = reference(tiny_model, {a: 1.0}, forced)
    assert not np.array_equal(mixed[-1][0], unchanged[-1][0])    # the new scale really applied


def test_clearing_falls_back_to_the_context_wide_set(tiny_model, adapters):
    a, b = adapters["a"], adapters["b"]
    ctx = new_ctx(tiny_model)
    ctx.set_adapters({a: 1.0})
    ctx.set_sequence_adapters(3, {b: 1.0})
    assert ctx.sequence_adapters(3) == {b: 1.0} and ctx.sequence_adapters(2) == {a: 1.0}
    ctx.clear_sequence_adapters(3)
    assert ctx.sequence_adapters(3) == {a: 1.0}
    out = run(ctx, tiny_model)
    ref = reference(tiny_model, {a: 1.0}, [m.argmax(axis=1) for m in out])
    np.testing.assert_array_equal(out[0], ref[0])


def test_reserved_pool_holds_its_adapters_and_mixed_batches_allocate_nothing(tiny_model, adapters, capsys):
    sets = sets_of(adapters)
    fresh = new_ctx(tiny_model)
    for seq, s in enumerate(sets):
        fresh.set_sequence_adapters(seq, s)
    want = run(fresh, tiny_model)                 # the pool allocated and filled by the first mixed batch

    ctx = new_ctx(tiny_model)
    llamacore.set_verbose(True)
    try:
        capsys.readouterr()
        ctx.reserve_adapter_pool(list(adapters.values()) + [adapters["a"]])   # a repeat counts once
        reserved = pool_lines(capsys)
        ctx.reserve_adapter_pool([adapters["b"], adapters["r8"]])            # held already: nothing new
        again = pool_lines(capsys)
        for seq, s in enumerate(sets):
            ctx.set_sequence_adapters(seq, s)
        got = run(ctx, tiny_model)
        during = pool_lines(capsys)
    finally:
        llamacore.set_verbose(False)
    assert len(reserved) == 1 and "(4 slots, rank 8)" in reserved[0], reserved    # exactly the four
    assert again == [] and during == [], (again, during)
    for step, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, w, err_msg=f"step {step}")      # same slots' contents, same sums


def test_reserving_the_pool_checks_its_adapters(tiny_model, adapters, tiny_model_f16_path, lora_a_path,
                                                 monkeypatch, capsys):
    ctx = new_ctx(tiny_model)
    with pytest.raises(TypeError, match="LoraAdapter"):
        ctx.reserve_adapter_pool(["a.gguf"])
    other = llamacore.LoraAdapter(llamacore.Model(tiny_model_f16_path), lora_a_path)
    with pytest.raises(ValueError, match="another model"):
        ctx.reserve_adapter_pool([adapters["a"], other])
    ctx.reserve_adapter_pool([])                   # nothing to hold: no pool
    monkeypatch.setenv("LLAMA_LORA_POOL_DISABLE", "1")
    unpooled = new_ctx(tiny_model)                 # the switch is read when a context is created
    llamacore.set_verbose(True)
    try:
        capsys.readouterr()
        ctx.reserve_adapter_pool([])
        unpooled.reserve_adapter_pool(adapters.values())
        assert pool_lines(capsys) == []
    finally:
        llamacore.set_verbose(False)


def test_engine_reserves_the_pool_for_its_adapters(tiny_model_path, lora_a_path, lora_b_path, capsys):
    from llamaserve.engine.engine import Engine

    llamacore.set_verbose(True)
    try:
        capsys.readouterr()
        engine = Engine(tiny_model_path, [lora_a_path], parallel=2, n_ctx=128,
                        context_kwargs={"n_threads": N_THREADS})
        loaded = pool_lines(capsys)
        engine.add_adapter(lora_b_path)            # worker not started: runs here, as an admin load would
        added = pool_lines(capsys)
        engine.close()
        # no more adapters than sequences: a step mixes no more, and the pool is a copy of each
        Engine(tiny_model_path, [lora_a_path, lora_b_path], parallel=1, n_ctx=128,
               context_kwargs={"n_threads": N_THREADS}).close()
        one_sequence = pool_lines(capsys)
    finally:
        llamacore.set_verbose(False)
    assert len(loaded) == 1 and "(1 slots" in loaded[0], loaded
    assert len(added) == 1 and "(2 slots" in added[0], added
    assert len(one_sequence) == 1 and "(1 slots" in one_sequence[0], one_sequence


def test_bad_inputs_raise_before_llama_cpp(tiny_model, adapters, tiny_model_f16_path, lora_a_path):
    a, b = adapters["a"], adapters["b"]
    ctx = new_ctx(tiny_model)
    for seq in (-1, len(PROMPTS), 256):
        with pytest.raises(ValueError, match="outside"):
            ctx.set_sequence_adapters(seq, {a: 1.0})
        with pytest.raises(ValueError, match="outside"):
            ctx.clear_sequence_adapters(seq)
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="finite"):
            ctx.set_sequence_adapters(0, {a: bad})
    with pytest.raises(TypeError, match="LoraAdapter"):
        ctx.set_sequence_adapters(0, {"a.gguf": 1.0})
    other = llamacore.LoraAdapter(llamacore.Model(tiny_model_f16_path), lora_a_path)
    with pytest.raises(ValueError, match="another model"):
        ctx.set_sequence_adapters(0, {other: 1.0})
    assert ctx.sequence_adapters(0) == {}             # nothing was applied by a refused call

    # KV computed under one set must not be shared with a sequence on another
    ctx.set_sequence_adapters(0, {a: 1.0})
    ctx.set_sequence_adapters(1, {b: 1.0})
    batch = llamacore.Batch(8)
    batch.add_sequence(tiny_model.tokenize("Hello"), 0, 0)
    ctx.decode(batch)
    with pytest.raises(ValueError, match="different adapter sets"):
        ctx.kv_copy(0, 1)
    # and one token cannot belong to two sequences with different sets
    shared = llamacore.Batch(4, n_seq_max=2)
    shared.add(1, 0, [2, 1], logits=True)
    ctx.set_sequence_adapters(2, {a: 1.0})
    with pytest.raises(llamacore.DecodeError):
        ctx.decode(shared)
    ctx.set_sequence_adapters(1, {a: 1.0})           # the same set: allowed
    ctx.kv_remove(1)
    ctx.kv_remove(2)
    ctx.decode(shared)


@pytest.mark.server
def test_server_mixed_aliases_answer_as_if_alone(tmp_path_factory, tiny_model_path, lora_a_path, lora_b_path):
    """Concurrent requests on four aliases of one base (decoded together) answer as each does alone."""
    folder = tmp_path_factory.mktemp("mixed-server")
    base, la, lb = str(tiny_model_path), str(lora_a_path), str(lora_b_path)
    config = {
        "parallel": 4, "max_queue": 32, "defaults": {"n_ctx": 256, "n_threads": N_THREADS},
        "models": [{"alias": "base", "model": base},
                   {"alias": "a", "model": base, "lora_adapters": {la: 1.0}},
                   {"alias": "b", "model": base, "lora_adapters": {lb: 1.0}},
                   {"alias": "ab", "model": base, "lora_adapters": {la: 0.5, lb: 0.7}}],
    }
    proc = ServerProcess(config, folder).start()
    try:
        jobs = [scenario.Job(i, alias, "completions", prompt, stream=i % 2 == 0, disconnect=False)
                for i, (alias, prompt) in enumerate((al, p) for p in scenario.PROMPTS[:4]
                                                    for al in ("base", "a", "b", "ab"))]
        refs = scenario.references(proc.base_url, jobs)
        assert len({r.text for r in refs.values()}) > len(refs) // 2       # the aliases really differ
        outcomes = asyncio.run(scenario.run_jobs(proc.base_url, jobs, clients=8))
        summary = scenario.judge(outcomes, refs)
        assert not summary.problems, summary.problems
        assert not summary.mismatches, summary.mismatches
        assert summary.kinds["completed"] == len(jobs)
    finally:
        proc.stop()
