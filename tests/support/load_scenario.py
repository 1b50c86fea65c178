"""The load-and-faults scenario against a real llamaserve process, shared by tests/llamaserve/models/test_load.py
(bounded, in CI) and benchmarks/soak.py (longer).

Two generated base models and three LoRA aliases on them (five names in all) behind
`max_loaded_models: 1`, so requests for the other base wait until the loaded one is idle, evict
it and reload. Clients each send one request at a time (completions and chat, streamed or not);
a quarter of the requests open a stream and hang up after the first chunks. Every answer that
completes is compared with the same request's answer computed alone beforehand (greedy).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ALIASES = ("b1", "b1-a", "b1-b", "b2", "b2-c")     # base 1, two LoRA aliases of it, base 2, one LoRA alias of it
ENDPOINTS = ("completions", "chat")
PROMPTS = ("Once upon a time", "The quick brown fox", "Write a haiku about rain.",
           "def fibonacci(n):", "Name three colours:", "Hello! How are you today?")
MAX_TOKENS = 12
DISCONNECT_AFTER = 2                                # data events read before a disconnecting client hangs up


# -- models and config ----------------------------------------------------------------------

def write_models(directory: Path, base1: Path | None = None, lora_a: Path | None = None,
                 lora_b: Path | None = None) -> dict[str, Path]:
    """The scenario's GGUF files (existing ones may be passed in): two different bases, three adapters."""
    from tiny_models import TinyModelSpec, write_lora, write_model

    spec1, spec2 = TinyModelSpec(), TinyModelSpec(seed=7, n_layer=3, name="tiny-llama-b")
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "base1": base1 or write_model(directory / "base1.gguf", spec1),
        "lora_a": lora_a or write_lora(directory / "lora-a.gguf", spec1, seed=1),
        "lora_b": lora_b or write_lora(directory / "lora-b.gguf", spec1, seed=2),
        "base2": write_model(directory / "base2.gguf", spec2),
        "lora_c": write_lora(directory / "lora-c.gguf", spec2, seed=3),
    }


def server_config(models: dict[str, Path], n_threads: int, parallel: int = 4, max_queue: int = 10,
                  isolation: str = "thread") -> dict:
    b1, b2 = str(models["base1"]), str(models["base2"])
    return {
        "max_loaded_models": 1, "idle_unload": 600, "parallel": parallel, "max_queue": max_queue,
        "defaults": {"n_ctx": 256, "n_threads": n_threads, "isolation": isolation},
        "models": [
            {"alias": "b1", "model": b1},
            {"alias": "b1-a", "model": b1, "lora_adapters": {str(models["lora_a"]): 1.0}},
            {"alias": "b1-b", "model": b1, "lora_adapters": {str(models["lora_b"]): 1.0}},
            {"alias": "b2", "model": b2},
            {"alias": "b2-c", "model": b2, "lora_adapters": {str(models["lora_c"]): 1.0}},
        ],
    }


# -- the requests ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    index: int
    alias: str
    endpoint: str
    prompt: str
    stream: bool
    disconnect: bool

    @property
    def key(self) -> tuple[str, str, str]:
        return self.endpoint, self.alias, self.prompt


def plan(n: int, seed: int = 0, start: int = 0, disconnect_share: float = 0.25) -> list[Job]:
    """n jobs over every alias, endpoint and prompt; exactly round(n * share) of them disconnect."""
    rng = random.Random(seed)
    leaving = set(rng.sample(range(n), round(n * disconnect_share)))
    jobs = []
    for i in range(n):
        gone = i in leaving
        jobs.append(Job(start + i, rng.choice(ALIASES), rng.choice(ENDPOINTS), rng.choice(PROMPTS),
                        stream=gone or rng.random() < 0.5, disconnect=gone))
    return jobs


def every_request() -> list[Job]:
    """One non-streamed job per distinct request (endpoint x alias x prompt): what `references` needs."""
    return [Job(0, a, e, p, False, False) for a in ALIASES for e in ENDPOINTS for p in PROMPTS]


def request(job: Job, max_tokens: int = MAX_TOKENS) -> tuple[str, dict]:
    body: dict = {"model": job.alias, "max_tokens": max_tokens, "temperature": 0}
    if job.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": job.prompt}]
    else:
        body["prompt"] = job.prompt
    if job.stream:
        body["stream"] = True
    return ("/v1/chat/completions" if job.endpoint == "chat" else "/v1/completions"), body


def _text(choice: dict, endpoint: str, streamed: bool) -> str:
    if endpoint == "completions":
        return choice.get("text") or ""
    part = choice.get("delta" if streamed else "message") or {}
    return part.get("content") or ""


@dataclass
class Outcome:
    job: Job
    status: int | None = None          # HTTP status; None when the connection failed
    text: str = ""
    finish: str | None = None
    error: str | None = None           # error body, stream error event or exception
    retry_after: str | None = None
    disconnected: bool = False         # the client hung up mid-stream, as planned
    seconds: float = 0.0

    @property
    def kind(self) -> str:
        if self.disconnected:
            return "disconnected"
        if self.status == 200 and self.error is None and self.finish is not None:
            return "completed"
        if self.status == 200 and self.error is not None and '"code":"model_crashed"' in self.error:
            return "crashed"             # the documented stream ending when a model's worker dies
        if self.status == 503:
            return "503"
        if self.status is not None and self.status >= 500:
            return "5xx"
        return "failed"


async def run_job(client: httpx.AsyncClient, job: Job, max_tokens: int = MAX_TOKENS) -> Outcome:
    path, body = request(job, max_tokens)
    out = Outcome(job)
    started = time.monotonic()
    try:
        if not job.stream:
            r = await client.post(path, json=body)
            out.status, out.retry_after = r.status_code, r.headers.get("retry-after")
            if r.status_code == 200:
                choice = r.json()["choices"][0]
                out.text, out.finish = _text(choice, job.endpoint, False), choice["finish_reason"]
            else:
                out.error = r.text
        else:
            async with client.stream("POST", path, json=body) as r:
                out.status, out.retry_after = r.status_code, r.headers.get("retry-after")
                if r.status_code != 200:
                    out.error = (await r.aread()).decode(errors="replace")
                else:
                    await _read_stream(r, job, out)
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    out.seconds = time.monotonic() - started
    return out


async def _read_stream(r: httpx.Response, job: Job, out: Outcome) -> None:
    events = 0
    async for line in r.aiter_lines():
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            return
        chunk = json.loads(data)
        if "error" in chunk:
            out.error = data
            return
        for choice in chunk.get("choices", []):
            out.text += _text(choice, job.endpoint, True)
            out.finish = choice.get("finish_reason") or out.finish
        events += 1
        if job.disconnect and events >= DISCONNECT_AFTER and out.finish is None:
            out.disconnected = True        # leaving the `stream` block closes the connection
            return
    if out.finish is None:
        out.error = "stream ended without [DONE]"


async def run_jobs(base_url: str, jobs: list[Job], clients: int = 16, max_tokens: int = MAX_TOKENS,
                   timeout: float = 300, on_done=None) -> list[Outcome]:
    """Run `jobs` in order of submission from `clients` concurrent clients, one request at a time each."""
    queue: asyncio.Queue[Job] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    outcomes: list[Outcome] = []

    async def client_loop() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=timeout) as client:
            while not queue.empty():
                out = await run_job(client, queue.get_nowait(), max_tokens)
                outcomes.append(out)
                if on_done is not None:
                    on_done(out)
    await asyncio.gather(*(client_loop() for _ in range(clients)))
    return sorted(outcomes, key=lambda o: o.job.index)


@dataclass(frozen=True)
class Reference:
    """A request's answer alone, and the first step where greedy choice was a near-tie (or None).

    The KV cache is f16, so the few-ulp float differences between decoding a sequence alone and in a
    batch with others (or on a reused prefix) can move a logit by ~1e-2. Where the top two tokens
    are closer than TIE, either may win; the answer must equal the reference up to that step.
    """

    text: str
    finish: str
    tie_at: int | None = None
    prefix: str = ""                   # the text before the near-tie step

    def matches(self, text: str, finish: str | None) -> str:
        """'equal', 'near_tie' (diverged only after a near-tie step) or 'mismatch'."""
        if (text, finish) == (self.text, self.finish):
            return "equal"
        if self.tie_at is not None and text.startswith(self.prefix):
            return "near_tie"
        return "mismatch"


TIE = 0.03                             # log-probability margin under which greedy's pick is a near-tie


def _margins(choice: dict, endpoint: str) -> tuple[list[str], list[float]]:
    lp = choice.get("logprobs") or {}
    if endpoint == "completions":
        tops = [sorted(d.values(), reverse=True) for d in lp.get("top_logprobs") or []]
        pieces = list(lp.get("tokens") or [])
    else:
        content = lp.get("content") or []
        tops = [sorted((t["logprob"] for t in c["top_logprobs"]), reverse=True) for c in content]
        pieces = [c["token"] for c in content]
    return pieces, [t[0] - t[1] if len(t) > 1 else float("inf") for t in tops]


def references(base_url: str, jobs: list[Job], max_tokens: int = MAX_TOKENS) -> dict[tuple, Reference]:
    """The answer of each distinct request, sent alone, non-streamed, one after another."""
    refs: dict[tuple, Reference] = {}
    keys = sorted({j.key for j in jobs}, key=lambda k: (k[1], k[0], k[2]))     # grouped by model: few reloads
    with httpx.Client(base_url=base_url, timeout=120) as client:
        for endpoint, alias, prompt in keys:
            path, body = request(Job(0, alias, endpoint, prompt, False, False), max_tokens)
            body.update({"logprobs": 2} if endpoint == "completions" else {"logprobs": True, "top_logprobs": 2})
            r = client.post(path, json=body)
            r.raise_for_status()
            choice = r.json()["choices"][0]
            text = _text(choice, endpoint, False)
            pieces, margins = _margins(choice, endpoint)
            tie = next((i for i, m in enumerate(margins) if m < TIE), None)
            prefix = ""
            if tie is not None:     # a piece may be half a UTF-8 character: keep what agrees with the text
                prefix = os.path.commonprefix([text, "".join(pieces[:tie])])
            refs[endpoint, alias, prompt] = Reference(text, choice["finish_reason"], tie, prefix)
    return refs


# -- measuring the server -------------------------------------------------------------------

class WorkerKiller:
    """SIGKILLs a model worker of the server (its pid from /admin/models) after every `every`
    requests a model ran (503s do not count), half-way between hundreds (the RSS samples are taken at hundreds, not
    while a model reloads). A request finishing is often what lets the other base swap in, so the kill
    waits, on a thread of its own, for a worker to be up."""

    def __init__(self, base_url: str, every: int | None) -> None:
        self.base_url, self.every = base_url, every
        self.finished = 0
        self.kills: list[int] = []

    def __call__(self, outcome: Outcome) -> None:
        if outcome.kind == "503":       # refused at once (a failed model's backoff): no model ran it
            return
        self.finished += 1
        if self.every and self.finished % self.every == self.every // 2:
            threading.Thread(target=self._kill_a_worker, daemon=True).start()

    def _kill_a_worker(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            models = httpx.get(self.base_url + "/admin/models", timeout=10).json()["data"]
            pids = {m["worker"]["pid"] for m in models if m.get("worker")}
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.kills.append(pid)
                    return
                except ProcessLookupError:       # it ended meanwhile
                    pass
            time.sleep(0.02)


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc/<pid>/status (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def metrics(base_url: str) -> dict[str, float]:
    """The server's Prometheus samples, keyed by name and labels as written, e.g. 'x_total{model="a"}'."""
    out: dict[str, float] = {}
    for line in httpx.get(base_url + "/metrics", timeout=30).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def metric_sum(samples: dict[str, float], name: str, **labels: str) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in samples.items()
               if k.partition("{")[0] == name and all(w in k for w in want))


def steady_rss_kib(base_url: str, pid: int, alias: str = "b1") -> int:
    """The server's RSS in the same state each time: idle, with `alias`'s base loaded (a sample taken
    while a base swaps or reloads after a crash would count or miss its vocabulary, a few MiB)."""
    wait_idle(base_url)
    for _ in range(20):       # a base may be failed for a while (its backoff) or just crashed
        if httpx.post(f"{base_url}/admin/models/{alias}/load", timeout=60).status_code == 200:
            break
        time.sleep(0.5)
    time.sleep(0.2)
    return rss_kib(pid)


def wait_idle(base_url: str, timeout: float = 15) -> dict[str, float]:
    """Metrics once no sequence is active or queued (or the last reading at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = metrics(base_url)
        idle = samples.get("llamaserve_active_sequences", 0) == 0 and samples.get("llamaserve_queue_depth", 0) == 0
        if idle or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


# -- judging --------------------------------------------------------------------------------

@dataclass
class Summary:
    kinds: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)
    near_ties: int = 0                                     # completed answers that diverged at a near-tie
    mismatches: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)      # failures, 5xx, 503 without Retry-After

    @property
    def served(self) -> int:
        return self.kinds["completed"] + self.kinds["disconnected"]

    def as_dict(self) -> dict:
        return {"kinds": dict(self.kinds), "statuses": {str(k): v for k, v in self.statuses.items()},
                "near_tie_divergences": self.near_ties, "mismatches": len(self.mismatches),
                "problems": len(self.problems)}


def judge(outcomes: list[Outcome], refs: dict[tuple, Reference], crashes_allowed: bool = False) -> Summary:
    """`crashes_allowed`: streams that end with a model_crashed error event are documented outcomes
    (when the scenario kills workers); otherwise they are problems."""
    s = Summary()
    for o in outcomes:
        s.kinds[o.kind] += 1
        s.statuses[o.status] += 1
        if o.kind == "completed":
            ref = refs[o.job.key]
            verdict = ref.matches(o.text, o.finish)
            if verdict == "near_tie":
                s.near_ties += 1
            elif verdict == "mismatch":
                s.mismatches.append(f"{o.job}: got {(o.text, o.finish)!r}, alone {(ref.text, ref.finish)!r}")
        elif o.kind == "503":
            if not o.retry_after:
                s.problems.append(f"{o.job}: 503 without Retry-After: {o.error}")
        elif o.kind not in ("disconnected", "crashed") or (o.kind == "crashed" and not crashes_allowed):
            s.problems.append(f"{o.job}: {o.kind} status={o.status} {o.error}")
    return s
