"""Idle sequences' KV in host memory: moved out of the unified cache when a request starts, back for
a prompt that starts the same way, with the same answers; the cache's own budget and keys."""

import threading
import time

import pytest
from helpers import N_THREADS

from llamacore.generation.events import Finished, Started, Token
from llamacore.generation.sampling import SamplingParams
from llamaserve.engine.engine import Engine
from llamaserve.engine.prompt_cache import KEY_LENGTHS, SCAN_LIMIT, PromptCache
from llamaserve.engine.request import GenRequest

GREEDY = SamplingParams(temperature=0)
STORY = [1] + list(range(1200, 1300))            # a 101-token prompt
OTHER = [7] + list(range(2200, 2240))            # shares nothing with it: takes the empty slot
THIRD = [1] + list(range(3200, 3240))            # shares the first token: takes STORY's slot


def generate(engine, tokens, max_tokens=6):
    """(tokens generated, prompt tokens the cache held when it started)."""
    out, cached, done = [], [], threading.Event()

    def emit(event):
        if isinstance(event, Started):
            cached.append(event.n_cached)
        elif isinstance(event, Token):
            out.append(event.id)
        elif isinstance(event, Finished):
            done.set()
    engine.submit(GenRequest(tokens, GREEDY, max_tokens, (), emit))
    assert done.wait(60)
    return out, cached[0]


def engine_with(model, cache_ram, parallel=2):
    return Engine(str(model), [], parallel=parallel, n_ctx=256, cache_ram=cache_ram,
                  context_kwargs={"n_threads": N_THREADS, "n_batch": 128, "n_ubatch": 128}).start()


def idle_moved(engine, n_entries):
    """Wait until the idle engine has moved every sequence's cells to host memory."""
    deadline = time.monotonic() + 10
    while any(engine.ctx.kv_pos_max(s) >= 0 for s in range(engine.ctx.n_seq_max)):
        assert time.monotonic() < deadline, "an idle engine kept its sequences' cells"
        time.sleep(0.01)
    assert len(engine._prompt_cache) == n_entries


def test_idle_sequence_moves_to_host_memory_and_comes_back(tiny_model_path):
    engine = engine_with(tiny_model_path, 64 << 20)
    try:
        first, _ = generate(engine, STORY)
        idle_moved(engine, 1)                   # with nothing else to run, its cells leave the KV cache
        assert engine.memory_bytes() >= engine._prompt_cache.size > 0
        generate(engine, OTHER)
        idle_moved(engine, 2)

        engine.ctx.reset_perf()
        again, cached = generate(engine, STORY + [1400, 1401])
        assert cached == len(STORY)                            # its prompt came back, not computed again
        assert engine.ctx.perf()["n_p_eval"] <= 2 + len(again)

        assert generate(engine, STORY + [1400, 1401, 1402])[1] == len(STORY) + 2
    finally:
        engine.close()

    plain = engine_with(tiny_model_path, 0)                     # cache_ram 0: cells stay in the KV cache
    try:
        assert generate(plain, STORY)[0] == first
        generate(plain, OTHER)
        assert plain.ctx.kv_pos_max(0) >= len(STORY) - 1
        assert plain._prompt_cache is None
        assert generate(plain, STORY + [1400, 1401])[0] == again
    finally:
        plain.close()


def test_a_request_starting_while_others_run_moves_the_idle_slots_out(tiny_model_path):
    """LONG and SHORT start together; when SHORT ends, LONG still runs (the engine is not idle), and
    a request submitted then moves SHORT's idle cells to host memory as it starts."""
    engine = engine_with(tiny_model_path, 64 << 20, parallel=3)
    long_prompt, short_prompt, late_prompt = [5] + list(range(500, 520)), OTHER, [9] + list(range(900, 920))
    seen, done = [], threading.Event()
    long_done = threading.Event()

    def on_late(event):
        if isinstance(event, Token) and not seen:     # on the engine thread, after the step that admitted it
            seen.append(([engine.ctx.kv_pos_max(s) >= 0 for s in range(3)], len(engine._prompt_cache),
                         long_done.is_set()))
        elif isinstance(event, Finished):
            done.set()

    def on_short(event):
        if isinstance(event, Finished):
            engine.submit(GenRequest(late_prompt, GREEDY, 4, (), on_late))

    def on_long(event):
        if isinstance(event, Finished):
            long_done.set()
    try:
        engine.submit_all([GenRequest(long_prompt, GREEDY, 60, (), on_long, ignore_eos=True),
                           GenRequest(short_prompt, GREEDY, 4, (), on_short, ignore_eos=True)])
        assert done.wait(60) and long_done.wait(60)
        occupied, cached, long_had_ended = seen[0]
        assert not long_had_ended
        assert occupied.count(True) == 2 and cached == 1        # LONG's and the late one's cells; SHORT's moved
        idle_moved(engine, 3)
    finally:
        engine.close()


def test_budget_evicts_the_least_recently_saved():
    cache = PromptCache(250)
    cache.put((), [1, 2, 3], b"a" * 100)
    cache.put((), [1, 7, 8], b"b" * 100)
    cache.put((), [1, 9], b"c" * 100)                      # past the budget: [1, 2, 3] goes
    assert cache.best((), [1, 2, 3, 4]) == (None, 0)          # it went
    assert cache.best((), [1, 7, 8, 9])[1] == 3
    assert cache.size == 200 and len(cache) == 2
    cache.put((), [1, 2], b"d" * 300)                      # larger than the whole budget: not kept
    assert len(cache) == 2 and cache.size == 200


def test_entries_are_found_by_their_first_tokens_most_recent_first():
    cache = PromptCache(1 << 30)
    longest = KEY_LENGTHS[-1]
    system = list(range(100, 100 + longest))
    for i in range(SCAN_LIMIT + 10):                    # one conversation per i, all after one system prompt
        cache.put((), system + [1000 + i, 2000 + i], bytes([i % 256]))
    entry, n = cache.best((), system + [1000 + SCAN_LIMIT + 9, 2000 + SCAN_LIMIT + 9, 7])
    assert n == longest + 2 and entry.state == bytes([(SCAN_LIMIT + 9) % 256])
    entry, n = cache.best((), system + [1, 2])            # every entry shares the system prompt
    assert n == longest and entry is not None
    entry, n = cache.best((), system + [1000, 2000, 7])   # i = 0's entry: past the SCAN_LIMIT most recent
    assert n == longest and entry.state != bytes([0])
    assert cache.best((), system[:-1] + [5, 6])[1] == longest - 1    # found through a shorter key
    assert cache.best((), system[:3] + [5, 6]) == (None, 0)            # under the shortest key: not looked for
    cache.put((), [1, 2, 3], b"short")
    assert cache.best((), [1, 2, 3, 4])[1] == 3              # a shorter entry the prompt starts with
    assert cache.best((), [1, 2, 4]) == (None, 0)             # one it only partly shares: not looked at


def test_an_extension_replaces_its_prefix_and_adapters_key_entries():
    lora = (("a.gguf", 1.0),)
    cache = PromptCache(1 << 20)
    cache.put(lora, [1, 5, 6], b"x" * 10)
    cache.put(lora, [1, 5, 6, 7, 8], b"y" * 20)          # the same sequence, further on
    assert len(cache) == 1 and cache.size == 20
    assert cache.best((), [1, 5, 6, 7, 8, 9]) == (None, 0)      # other adapters: KV differs
    entry, n = cache.best(lora, [1, 5, 6, 7, 8, 9])
    assert n == 5 and entry.state == b"y" * 20
    assert cache.best(lora, [1, 5, 6, 7, 8])[1] == 4    # a prompt keeps at least its last token to decode
    cache.take(entry)
    assert len(cache) == 0 and cache.size == 0
    cache.put(lora, [1, 5], b"z")
    cache.forget_adapter("a.gguf")
    assert len(cache) == 0


@pytest.mark.parametrize("value, expected", [("512MiB", 512 << 20), (0, 0)])
def test_cache_ram_config_key(tmp_path, tiny_model_path, value, expected):
    from llamaserve.config.parse import parse_config
    config = parse_config({"cache_ram": value, "models": [{"alias": "m", "model": str(tiny_model_path),
                                                              "cache_ram": "1GiB"}]}, None, tmp_path)
    assert config.cache_ram == expected and config.models[0].cache_ram == 1 << 30


def test_cache_ram_refuses_a_bad_size(tmp_path, tiny_model_path):
    from llamaserve.config.parse import ConfigError, parse_config
    with pytest.raises(ConfigError, match="cache_ram"):
        parse_config({"cache_ram": "lots", "models": [{"alias": "m", "model": str(tiny_model_path)}]}, None, tmp_path)
