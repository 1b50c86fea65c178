"""Grammar bombs (hostile clients, finding 1): an ambiguous 40-byte GBNF, a 2.9 MB one of 100k
alternatives and random grammars from a grammar of grammars are answered (a 400 naming the limit, or
an answer) within a bound, while another client's request to the same model is delayed by at most
one bounded grammar step; a model in a worker process stays up."""

from __future__ import annotations

import random
import threading
import time

import httpx
import pytest
from helpers import N_THREADS
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module", params=["thread", "process"])
def srv(request, tmp_path_factory, tiny_model_path):
    config = {"defaults": {"n_ctx": 256, "n_threads": N_THREADS, "isolation": request.param,
                           **({"step_timeout": 5} if request.param == "process" else {})},
              "models": [{"alias": "m", "model": str(tiny_model_path)}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("bombs")).start()
    yield proc
    proc.stop()


def complete(srv, **kw) -> httpx.Response:
    return httpx.post(srv.base_url + "/v1/completions", timeout=120,
                      json={"model": "m", "prompt": "Once", "max_tokens": 40, **kw})


def victim_beside(srv, grammar: str) -> tuple[httpx.Response, float, float]:
    """The hostile request's response and time, and the slowest of an unrelated client's requests made
    meanwhile (greedy, 8 tokens)."""
    out: dict[str, object] = {}

    def hostile() -> None:
        start = time.monotonic()
        out["resp"] = complete(srv, grammar=grammar, temperature=1.0, seed=1)
        out["took"] = time.monotonic() - start
    thread = threading.Thread(target=hostile)
    thread.start()
    slowest = 0.0
    while thread.is_alive() or slowest == 0.0:
        start = time.monotonic()
        assert complete(srv, max_tokens=8, temperature=0).status_code == 200
        slowest = max(slowest, time.monotonic() - start)
    thread.join()
    return out["resp"], out["took"], slowest       # type: ignore[return-value]


@pytest.mark.parametrize("n", [150, 300])
def test_an_ambiguous_grammar_is_refused_and_delays_nobody(srv, n):
    """`("a"?){0,150} "b"` took 40 s for 40 tokens and `{0,300}` never ended, freezing the model."""
    resp, took, slowest = victim_beside(srv, f'root ::= ("a"?){{0,{n}}} "b"')
    assert resp.status_code == 400, resp.text
    assert "too ambiguous" in resp.json()["error"]["message"] or "work limit" in resp.json()["error"]["message"]
    assert took < 5 and slowest < 3


def test_a_grammar_of_100k_alternatives_is_refused_by_its_size(srv):
    grammar = "root ::= " + " | ".join(f'"w{i:06d}{"x" * 18}"' for i in range(100_000))
    assert len(grammar) > 2_900_000
    resp, took, slowest = victim_beside(srv, grammar)
    assert resp.status_code == 400 and "grammar_max_size" in resp.json()["error"]["message"]
    assert took < 5 and slowest < 3


def random_grammar(rng: random.Random, depth: int = 0) -> str:
    """An expression of GBNF from a small grammar of grammars: literals, classes, groups, alternations,
    optional items and bounded repetitions, nested."""
    kind = rng.choice(["lit", "class", "alt", "seq", "opt", "rep"] if depth < 4 else ["lit", "class"])
    if kind == "lit":
        return '"' + "".join(rng.choice("ab") for _ in range(rng.randint(0, 2))) + '"'
    if kind == "class":
        return rng.choice(["[a-c]", "[^x]", "[ab]"])
    parts = [random_grammar(rng, depth + 1) for _ in range(rng.randint(2, 4))]
    if kind == "alt":
        return "(" + " | ".join(parts) + ")"
    if kind == "seq":
        return "(" + " ".join(parts) + ")"
    if kind == "opt":
        return "(" + parts[0] + ")?"
    lo = rng.randint(0, 3)
    return f"({parts[0]}){{{lo},{lo + rng.choice([1, 5, 40, 200])}}}"


def test_random_grammars_are_answered_within_a_bound(srv):
    rng = random.Random(54)
    for _ in range(25):
        grammar = "root ::= " + random_grammar(rng) + ' "."'
        start = time.monotonic()
        resp = complete(srv, grammar=grammar, max_tokens=24, temperature=1.0, seed=rng.randint(0, 99))
        assert resp.status_code in (200, 400), (grammar, resp.text)
        assert time.monotonic() - start < 5, grammar
    assert complete(srv, max_tokens=4, temperature=0).status_code == 200
