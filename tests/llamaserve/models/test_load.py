"""Load and faults, bounded: 300 requests from 16 concurrent clients over two base models and three
LoRA aliases with max_loaded_models: 1, a quarter of them hanging up mid-stream (tests/support/load_scenario.py)."""

import asyncio
import json

import load_scenario as scenario
import pytest
from helpers import N_THREADS
from server import ServerProcess

# each test here talks to a real llamaserve process
pytestmark = [pytest.mark.server, pytest.mark.slow]

CLIENTS = 16
HUNDREDS = 3


VARIANTS = {                       # isolation, SIGKILL a worker every N finished requests
    "thread": ("thread", None),
    "process": ("process", None),
    "process-killed": ("process", 50),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def load_server(request, tmp_path_factory, tiny_model_path, lora_a_path, lora_b_path):
    isolation, kill_every = VARIANTS[request.param]
    folder = tmp_path_factory.mktemp("load")
    models = scenario.write_models(folder / "models", tiny_model_path, lora_a_path, lora_b_path)
    proc = ServerProcess(scenario.server_config(models, N_THREADS, isolation=isolation), folder).start()
    proc.kill_every, proc.isolation = kill_every, isolation
    yield proc
    proc.stop()


def test_load_with_evictions_and_disconnects(load_server, record_property):
    url = load_server.base_url
    kill_every = load_server.kill_every
    jobs = scenario.plan(100 * HUNDREDS, seed=1)
    assert sum(j.disconnect for j in jobs) == 75
    assert {j.alias for j in jobs} == set(scenario.ALIASES)
    refs = scenario.references(url, jobs)
    assert len({r.text for r in refs.values()}) > len(refs) // 2     # the aliases and prompts really differ
    assert sum(r.tie_at is None for r in refs.values()) > len(refs) // 2   # most answers have no near-tie
    before = scenario.metrics(url)

    killer = scenario.WorkerKiller(url, kill_every)    # no-op without kill_every
    outcomes, rss = [], []
    for h in range(HUNDREDS):                             # in order of submission, RSS after each hundred
        outcomes += asyncio.run(scenario.run_jobs(url, jobs[100 * h:100 * (h + 1)], clients=CLIENTS,
                                                  on_done=killer))
        rss.append(scenario.steady_rss_kib(url, load_server.proc.pid))
    after = scenario.wait_idle(url)
    summary = scenario.judge(outcomes, refs, crashes_allowed=bool(kill_every))
    growth = (rss[2] - rss[1]) / rss[1]
    evictions = (scenario.metric_sum(after, "llamaserve_model_unloads_total", reason="evicted")
                 - scenario.metric_sum(before, "llamaserve_model_unloads_total", reason="evicted"))
    figures = {**summary.as_dict(), "refs_with_near_tie": sum(r.tie_at is not None for r in refs.values()),
               "rss_kib": rss, "rss_growth_200_300": round(growth, 4), "kills": len(killer.kills),
               "evictions": evictions, "cancelled": scenario.metric_sum(after, "llamaserve_cancelled_requests_total")}
    record_property("load_figures", json.dumps(figures))
    print("load figures:", json.dumps(figures))

    assert len(outcomes) == 300
    assert not summary.problems, "\n".join(summary.problems[:10])          # no 5xx but documented 503s
    assert not summary.mismatches, "\n".join(summary.mismatches[:10])      # greedy answers as if alone
    assert summary.near_ties <= summary.kinds["completed"] // 10, figures  # ...but for rare near-ties
    assert summary.kinds["completed"] >= (50 if kill_every else 150), figures    # 503s (documented) are allowed
    assert summary.kinds["disconnected"] >= (20 if kill_every else 40), figures
    assert evictions >= 2, figures                                         # bases really swapped
    assert after["llamaserve_active_sequences"] == 0 and after["llamaserve_queue_depth"] == 0, figures
    assert all(m.get("in_use", 0) == 0 for m in load_server.get("/admin/models").json()["data"])
    if kill_every:
        assert len(killer.kills) >= 2, figures           # one per 50 requests a model ran
        # every kill is a crash, but for one that lands on a worker the server is already stopping
        # for an eviction (WorkerProcess counts no crash while closing; seen once: 4 kills, 3 crashes)
        assert scenario.metric_sum(after, "llamaserve_worker_crashes_total") >= len(killer.kills) - 1, figures
    # with process isolation the server process holds no model: its memory must stay flat, a worker
    # SIGKILLed every 50 requests included (its sampled RSS wanders by a MiB or two between hundreds,
    # with no trend: four runs here gave -2.6% to 0.0%). In thread mode the models live in the server.
    assert growth < (0.05 if load_server.isolation == "process" else 0.10), figures
    assert "Traceback" not in load_server.log(), load_server.log()
