"""Speculative decoding by prompt lookup in the server: same answers as plain decoding, drafts counted."""

import shutil

import httpx
import openai
import pytest
from helpers import N_THREADS
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]

PROMPT = ("Copy the list exactly. List: red apple, green pear, blue plum, red apple, green pear, blue plum, "
          "red apple, green pear, blue plum. Copy: red apple, green pear,")


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_path):
    folder = tmp_path_factory.mktemp("speculative")
    copy = shutil.copy(tiny_model_path, folder / "model-copy.gguf")     # a second base, drafting
    config = {"parallel": 2, "defaults": {"n_ctx": 256, "n_threads": N_THREADS},
              "models": [{"alias": "plain", "model": str(tiny_model_path)},
                         {"alias": "spec", "model": str(copy),
                          "speculative": {"draft_model": "ngram", "n_draft": 6, "ngram_size": 2}},
                         {"alias": "drafted", "model": str(copy), "n_ctx": 255,    # (another base)
                          "speculative": {"draft_model": str(tiny_model_path), "n_draft": 4}}]}
    proc = ServerProcess(config, folder).start()
    yield proc
    proc.stop()


def test_speculative_answers_equal_plain_decoding(server):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    for prompt in (PROMPT, "Once upon a time"):
        plain = client.completions.create(model="plain", prompt=prompt, max_tokens=48, temperature=0)
        for alias in ("spec", "drafted"):
            spec = client.completions.create(model=alias, prompt=prompt, max_tokens=48, temperature=0)
            assert spec.choices[0].text == plain.choices[0].text
            assert spec.usage.completion_tokens == plain.usage.completion_tokens
    metrics = httpx.get(server.base_url + "/metrics").text
    drafted = [line for line in metrics.splitlines()
               if line.startswith('llamaserve_speculative_draft_tokens{model="spec"}')]
    assert drafted and float(drafted[0].split()[-1]) > 0, metrics[-2000:]
    by_model = [line for line in metrics.splitlines()
                if line.startswith('llamaserve_speculative_accepted_tokens{model="drafted"}')]
    assert by_model and float(by_model[0].split()[-1]) > 0, metrics[-2000:]   # the model itself drafts right
    assert 'llamaserve_speculative_draft_tokens{model="plain"}' not in metrics
