"""llamaserve.config.parse validation: unknown keys, types and ranges, model and adapter files, aliases.

The messages are the contract: each problem is one line naming the file, the key and a fix.
"""

from __future__ import annotations

import json

import pytest
from helpers import NO_MODELS, problems, yaml_config


def test_unknown_keys_get_did_you_mean(work):
    path = yaml_config(work, """
prot: 8000
defaults: {n_gpu_layer: 1}
models:
  - {alias: a, model: models/model.gguf}
  - {alias: b, model: models/model.gguf, n_cxt: 512, zzzz: 1}
""")
    assert problems(path) == [
        f"{path}: prot: unknown key (did you mean 'port'?)",
        f"{path}: defaults.n_gpu_layer: unknown key (did you mean 'n_gpu_layers'?)",
        f"{path}: models[1].n_cxt: unknown key (did you mean 'n_ctx'?)",
        f"{path}: models[1].zzzz: unknown key",
    ]


@pytest.mark.parametrize("line, message", [
    ("port: abc", "port: expected an integer, got 'abc'"),
    ("port: 0", "port: must be between 1 and 65535, got 0"),
    ("port: -1", "port: must be between 1 and 65535, got -1"),
    ("port: true", "port: expected an integer, got True"),
    ("max_loaded_models: 0", "max_loaded_models: must be at least 1, got 0"),
    ("memory_budget: 12 gigs", "memory_budget: invalid size '12 gigs'"),
    ("memory_budget: 0", "memory_budget: must be greater than zero, got 0"),
    ("max_body_bytes: lots", "max_body_bytes: invalid size 'lots'"),
    ("idle_unload: soon", "idle_unload: invalid duration 'soon'"),
    ("log_level: verbose", ("log_level: expected one of critical, error, warning, info, debug, trace, "
                           "got 'verbose'")),
    ("cors: 5", "cors: expected a list of strings, got 5"),
    ("responses_store_size: -1", "responses_store_size: must be at least 0, got -1"),
    ("host: ''", "host: expected a non-empty string, got ''"),
    ("defaults: [1]", "defaults: expected a mapping, got [1]"),
    ("defaults: {alias: x}", "defaults.alias: not allowed in defaults"),
    ("defaults: {n_ctx: big}", "defaults.n_ctx: expected an integer, got 'big'"),
    ("defaults: {use_mmap: 'yes'}", "defaults.use_mmap: expected true or false, got 'yes'"),
    ("defaults: {flash_attn: maybe}", "defaults.flash_attn: expected true, false, auto, on, off or prompts"),
    ("defaults: {type_k: q9}", "defaults.type_k: expected one of f32, f16"),
    ("defaults: {split_mode: rows}", ("defaults.split_mode: expected one of none, layer, row, tensor, got 'rows' "
                                     "(did you mean 'row'?)")),
    ("defaults: {pooling_type: meen}", "defaults.pooling_type: expected one of unspecified"),
    ("defaults: {tensor_split: [1, x]}", "defaults.tensor_split: expected a number, got 'x'"),
    ("defaults: {kv_overrides: [1]}", "defaults.kv_overrides: expected a mapping of metadata keys"),
    ("defaults: {parallel: 0}", "defaults.parallel: must be at least 1, got 0"),
])
def test_wrong_types_and_ranges(work, line, message):
    path = yaml_config(work, f"{line}\nmodels: [{{alias: a, model: models/model.gguf}}]\n")
    found = problems(path)
    assert len(found) == 1 and found[0].startswith(f"{path}: {message}"), found


def test_missing_and_non_gguf_files(work):
    path = yaml_config(work, """
models:
  - {alias: a, model: models/missing.gguf}
  - {alias: b, model: models/not-gguf.gguf}
  - {alias: c, model: models/model.gguf, lora_adapters: [models/missing-lora.gguf]}
  - {alias: d, model: models/lora-a.gguf}
  - {alias: e}
""")
    m = work / "models"
    assert problems(path) == [
        f"{path}: models[0].model: file not found: {m / 'missing.gguf'}",
        (f"{path}: models[1].model: {m / 'not-gguf.gguf'} is not a readable GGUF file: "
         "not a GGUF file (bad magic b'PK\\x03\\x04')"),
        f"{path}: models[2].lora_adapters: file not found: {m / 'missing-lora.gguf'}",
        f"{path}: models[3].model: lora-a.gguf is a LoRA adapter, not a model (general.type is 'adapter')",
        f"{path}: models[4].model: required (the path of a GGUF model file)",
    ]


def test_adapter_checks(work):
    path = yaml_config(work, """
models:
  - {alias: a, model: models/model.gguf, lora_adapters: {models/lora-a.gguf: 1.0}}
  - {alias: b, model: models/model.gguf, lora_adapters: {models/lora-gpt2.gguf: 1.0}}
  - {alias: c, model: models/model.gguf, lora_adapters: [models/model.gguf]}
  - {alias: d, model: models/model.gguf, lora_adapters: {models/lora-a.gguf: strong}}
  - {alias: e, model: models/model.gguf, lora_adapters: models/lora-a.gguf}
""")
    assert problems(path) == [
        (f"{path}: models[1].lora_adapters: adapter lora-gpt2.gguf is for architecture 'gpt2', "
         "model is 'llama'"),
        (f"{path}: models[2].lora_adapters: model.gguf is not a LoRA adapter (general.type is not set, "
         f"not 'adapter'): {work / 'models/model.gguf'}"),
        f"{path}: models[3].lora_adapters['models/lora-a.gguf']: expected a number, got 'strong'",
        (f"{path}: models[4].lora_adapters: expected a mapping of adapter paths to scales or a list of "
         "paths, got 'models/lora-a.gguf'"),
    ]


def test_duplicate_aliases(work):
    path = yaml_config(work, """
models:
  - {alias: chat, aliases: [gpt-4], model: models/model.gguf}
  - {alias: other, aliases: [gpt-4, other], model: models/model.gguf}
  - {alias: chat, model: models/model.gguf}
  - {alias: a, model_alias: b, model: models/model.gguf}
""")
    assert problems(path) == [
        f"{path}: models[3].model_alias: give either alias or model_alias, not both",
        f"{path}: models[1].aliases[0]: duplicate alias 'gpt-4' (also models[0])",
        f"{path}: models[2].alias: duplicate alias 'chat' (also models[0])",
    ]


def test_default_model_and_chat_format_must_exist(work):
    path = yaml_config(work, """
default_model: chta
models:
  - {alias: chat, model: models/model.gguf, chat_format: llama3}
  - {alias: ok, model: models/model.gguf, chat_format: llama-2}
""")
    found = problems(path)
    assert found[0] == f"{path}: default_model: no model named 'chta' (did you mean 'chat'?)"
    assert found[1].startswith(f"{path}: models[0].chat_format: unknown chat format 'llama3' "
                               "(did you mean 'llama-3'?); known: chatml, ")
    assert len(found) == 2


def test_no_models_at_all(work):
    for body in ("port: 8000\n", "", "models: []\n"):
        path = yaml_config(work, body)
        assert problems(path) == [f"{path}: models: {NO_MODELS}"]


def test_all_problems_are_reported_at_once(work):
    path = yaml_config(work, "port: x\nmax_loaded_models: 0\n"
                             "models:\n  - {alias: a, model: nope.gguf, n_cxt: 1}\n")
    assert len(problems(path)) == 4


def test_lora_steps_per_turn_is_deprecated_but_accepted(work, caplog):
    """Adapter groups no longer take turns: the key loads with a warning saying so, still type-checked."""
    from llamaserve.config.parse import load_config

    path = yaml_config(work, """
lora_steps_per_turn: 4
models:
  - {alias: a, model: models/model.gguf, lora_steps_per_turn: 2}
""")
    with caplog.at_level("WARNING", logger="llamaserve.config.parse"):
        config = load_config(path)
    assert [e.alias for e in config.models] == ["a"]
    warnings = [r.getMessage() for r in caplog.records if "lora_steps_per_turn" in r.getMessage()]
    assert len(warnings) == 2 and all("deprecated and has no effect" in w and "one batch" in w for w in warnings)
    assert "models[0].lora_steps_per_turn" in warnings[1]
    bad = yaml_config(work, "lora_steps_per_turn: 0\nmodels: [{alias: a, model: models/model.gguf}]\n")
    assert problems(bad) == [f"{bad}: lora_steps_per_turn: must be at least 1, got 0"]


@pytest.mark.parametrize("value, message", [
    ("{draft_model: ngram, n_draft: 0}", "n_draft: must be between 1 and 64, got 0"),
    ("{draft_model: ngram, ngram_size: 1}", "ngram_size: must be between 2 and 8, got 1"),
    ("{draft_model: 7}", "draft_model: expected ngram (drafts by prompt lookup) or the path of a draft GGUF"),
    ("{draft_model: models/model.gguf, ngram_size: 3}", "ngram_size: applies to prompt lookup"),
    ("{draft_model: models/model.gguf, p_min: 1.5}", "p_min: expected a probability in [0, 1)"),
    ("{draft_model: ngram, p_min: 0.5}", "p_min: applies to draft models"),
    ("{draft_model: ngram, n_drafts: 4}", "unknown key 'n_drafts' (did you mean 'n_draft'?)"),
    ("8", "expected a mapping such as"),
])
def test_speculative_settings_are_checked(work, value, message):
    path = yaml_config(work, f"models: [{{alias: a, model: models/model.gguf, speculative: {value}}}]\n")
    found = problems(path)
    assert len(found) == 1 and found[0].startswith(f"{path}: models[0].speculative: {message}"), found


def test_speculative_draft_model_path_is_checked(work):
    path = yaml_config(work, "models: [{alias: a, model: models/model.gguf, "
                             "speculative: {draft_model: models/none.gguf}}]\n")
    assert problems(path) == [f"{path}: models[0].speculative.draft_model: file not found: {work / 'models/none.gguf'}"]


def test_speculative_prompt_lookup_loads(work):
    from llamaserve.config.parse import load_config

    path = yaml_config(work, "defaults: {speculative: {draft_model: ngram, n_draft: 6}}\n"
                             "models: [{alias: a, model: models/model.gguf}]\n")
    assert dict(load_config(path).models[0].speculative) == {"draft_model": "ngram", "n_draft": 6, "ngram_size": 3}


def test_flash_attn_for_prompts_only_is_a_load_option(work):
    """`flash_attn: prompts` reaches the model's context options as llamacore's "prompts"."""
    from llamacore.gguf.load_options import CONTEXT_KEYS
    from llamaserve.config.parse import load_config

    path = yaml_config(work, "defaults: {flash_attn: prompts}\nmodels: [{alias: a, model: models/model.gguf}]\n")
    load = load_config(path).models[0].load
    assert load["flash_attn"] == "prompts" and "flash_attn" in CONTEXT_KEYS


@pytest.mark.parametrize("name", ["a\u2028b", "a\u0085b", "a\u009bb", "a\rb"])
def test_names_may_not_forge_log_lines(work, name):
    """Finding: C1 controls and U+2028 in alias names forged log lines."""
    path = yaml_config(work, "models: [{model: models/model.gguf, alias: " + json.dumps(name) + "}]\n")
    found = problems(path)
    assert any("control character or a line separator" in p for p in found), found
