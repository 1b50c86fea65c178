"""Differential tests against llama.cpp's own JSON-schema converter test-suite (vendored tree).

Every schema that llama.cpp accepts is accepted by us (except where we refuse by name a feature
that llama.cpp silently drops: DIVERGENCES), its grammar parses in llama.cpp, and random-weight
generations under it validate against the schema with jsonschema (formats checked). Schemas that
llama.cpp refuses are refused by us, by the server as a 400. llama.cpp's verdicts are the suite's
own SUCCESS/FAILURE marks; test_llama_server_agrees confirms them against llama-server itself.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time

import httpx
import jsonschema
import pytest
from grammar_probe import GrammarProbe, generate
from helpers import N_THREADS, REPO_ROOT, assert_openai_error
from llamacpp_suite import cases

import llamacore
from llamacore.grammar.json_schema import schema_to_grammar

CASES = cases()
# llama.cpp turns a pattern it cannot convert into "any string" (a warning on stderr); we refuse it
DIVERGENCES = {"unsupported regexp in a property": "lookaround"}
ACCEPTED = [c for c in CASES if c.accepted and c.name not in DIVERGENCES]
REFUSED = [c for c in CASES if not c.accepted]
FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
QUICK = {"min -123 max 42", "regexp", "required + optional + additional props",
         "mix of allOf, anyOf and $ref (similar to https://json.schemastore.org/tsconfig.json)", "non-string enum"}


def _ids(found):
    return [c.name for c in found]


def as_2020_12(schema):
    """The suite's llama.cpp dialect in draft 2020-12 terms, for the validator: ``items`` as a list
    is a tuple (``prefixItems``), ``prefixItems`` as a single schema is ``items``, ``items`` wins."""
    if isinstance(schema, list):
        return [as_2020_12(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: as_2020_12(v) for k, v in schema.items()}
    if isinstance(out.get("items"), list):
        out["prefixItems"], out["items"] = out["items"], False
    elif isinstance(out.get("prefixItems"), dict):
        out["items"] = out.pop("prefixItems") if "items" not in out else out["items"]
        out.pop("prefixItems", None)
    return out


@pytest.fixture(scope="module")
def probe(tiny_model):
    return GrammarProbe(tiny_model)


def test_the_suite_is_read():
    assert len(CASES) >= 80 and len(REFUSED) >= 3
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", ACCEPTED, ids=_ids(ACCEPTED))
def test_accepted_by_llamacpp_accepted_by_us(case, tiny_model):
    grammar = schema_to_grammar(case.schema)
    llamacore.Sampler().grammar(tiny_model, grammar)          # llama.cpp parses it


@pytest.mark.parametrize("case", REFUSED, ids=_ids(REFUSED))
def test_refused_by_llamacpp_refused_by_us(case):
    with pytest.raises(ValueError):
        schema_to_grammar(case.schema)


@pytest.mark.parametrize("name", sorted(DIVERGENCES))
def test_divergences_are_refused_by_name(name):
    case = next(c for c in CASES if c.name == name)
    with pytest.raises(ValueError, match=DIVERGENCES[name]):
        schema_to_grammar(case.schema)


def _check_generations(case, model, probe, n):
    grammar = schema_to_grammar(case.schema)
    outs = generate(model, grammar, list(range(n)), bias=probe.closing_bias(12.0), max_tokens=128,
                    n_threads=N_THREADS)
    finished = [o for o in outs if o is not None]
    assert len(finished) >= n // 2, outs
    schema = copy.deepcopy(as_2020_12(case.schema))
    for text in finished:
        jsonschema.validate(json.loads(text), schema, format_checker=FORMAT_CHECKER)


@pytest.mark.parametrize("case", [c for c in ACCEPTED if c.name in QUICK],
                         ids=_ids(c for c in ACCEPTED if c.name in QUICK))
def test_generations_validate_quick(case, tiny_model, probe):
    _check_generations(case, tiny_model, probe, 4)


@pytest.mark.slow
@pytest.mark.parametrize("case", ACCEPTED, ids=_ids(ACCEPTED))
def test_generations_validate(case, tiny_model, probe):
    _check_generations(case, tiny_model, probe, 8)


@pytest.mark.server
@pytest.mark.parametrize("case", REFUSED + [c for c in CASES if c.name in DIVERGENCES],
                         ids=_ids(REFUSED) + sorted(DIVERGENCES))
def test_server_refuses_with_400(server, case):
    resp = server.post("/v1/chat/completions", json={
        "model": "base", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": case.schema}}})
    assert_openai_error(resp, 400)


LLAMA_SERVER = REPO_ROOT / "build/peer-tools/bin/llama-server"


@pytest.mark.slow
@pytest.mark.skipif(not LLAMA_SERVER.is_file(),
                    reason="llama-server is not built (benchmarks/peer_tools.py builds it)")
def test_llama_server_agrees(tiny_model_path, tmp_path):
    """llama.cpp's server, built from the same tree, gives each case the verdict the suite expects."""
    from server import free_port

    port = free_port()
    log = (tmp_path / "llama-server.log").open("wb")
    proc = subprocess.Popen([str(LLAMA_SERVER), "-m", str(tiny_model_path), "--host", "127.0.0.1", "--port",
                             str(port), "-c", "256", "-np", "1", "-t", str(N_THREADS), "--no-webui"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        verdicts = {c.name: httpx.post(url + "/completion", timeout=60, json={
            "prompt": "x", "n_predict": 1, "json_schema": c.schema}).status_code for c in CASES}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    assert {name: code == 200 for name, code in verdicts.items()} == {c.name: c.accepted for c in CASES}
    assert set(verdicts.values()) == {200, 400}
