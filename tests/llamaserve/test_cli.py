"""The llamaserve command line: check, init-config, flag-built configs (real files, real processes)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from gguf_files import fake_gguf, place
from isolation import child_env, run_child

from llamaserve.cli import build_parser, config_from_args, main
from llamaserve.config.parse import load_config


def run_cli(*args: str | Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """``python -m llamaserve ARGS`` in a fresh interpreter, without the user's LLAMASERVE_* settings."""
    return run_child(["-m", "llamaserve", *map(str, args)], cwd=cwd,
                     env=child_env(drop_prefix="LLAMASERVE_", **env))


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_model_path, lora_a_path, lora_b_path) -> Path:
    """A folder with a tiny model, two adapters for it, an mmproj and a split model."""
    d = tmp_path_factory.mktemp("cli_models")
    place(tiny_model_path, d / "tiny.gguf")
    place(lora_a_path, d / "lora-a.gguf")
    place(lora_b_path, d / "lora-b.gguf")
    fake_gguf(d / "mmproj-tiny-f16.gguf", arch="clip")
    fake_gguf(d / "split-00001-of-00002.gguf")
    fake_gguf(d / "split-00002-of-00002.gguf")
    return d


@pytest.fixture(autouse=True)
def no_user_env(monkeypatch):
    """build_parser reads LLAMASERVE_CONFIG / LLAMASERVE_API_KEY; keep the caller's out of tests."""
    monkeypatch.delenv("LLAMASERVE_CONFIG", raising=False)
    monkeypatch.delenv("LLAMASERVE_API_KEY", raising=False)


def from_flags(*argv: str | Path):
    return config_from_args(build_parser().parse_args([str(a) for a in argv]))


# -- help ------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, expected", [
    ((), ["--config FILE", "--model FILE", "--models-dir DIR", "--lora-scaled FILE SCALE", "--n-ctx",
          "--n-gpu-layers", "--threads", "--chat-format", "--embedding", "--host", "--port", "--api-key",
          "--parallel", "--max-loaded-models", "--idle-unload", "--log-level", "LLAMASERVE_CONFIG",
          "LLAMASERVE_API_KEY", "init-config", "check"]),
    (("check",), ["FILE", "Exit status 0"]),
    (("init-config",), ["DIR", "--output", "--force"]),
])
def test_help(args, expected):
    proc = run_cli(*args, "--help")
    assert proc.returncode == 0, proc.stderr
    for text in expected:
        assert text in proc.stdout


# -- check -----------------------------------------------------------------------------------


def test_check_prints_the_resolved_models(models, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"""
port: 8123
memory_budget: 2GiB
defaults: {{n_ctx: 512, n_threads: 2}}
models:
  - {{alias: chat, aliases: [gpt-4], model: {models}/tiny.gguf}}
  - alias: chat-a
    model: {models}/tiny.gguf
    lora_adapters: {{{models}/lora-a.gguf: 1.0, {models}/lora-b.gguf: 0.5}}
    chat_format: chatml
""")
    proc = run_cli("check", path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"config: {path}" in out and "http://127.0.0.1:8123" in out and "memory budget: 2 GiB" in out
    assert "chat (aliases: gpt-4)" in out and f"model: {models / 'tiny.gguf'}" in out
    assert f"lora: {models / 'lora-a.gguf'} (scale 1)" in out
    assert f"lora: {models / 'lora-b.gguf'} (scale 0.5)" in out
    assert "load: n_ctx=512, n_threads=2" in out and "chat_format=chatml" in out
    assert "shares its loaded base model with: chat-a" in out


def test_check_reports_every_problem_and_exits_2(models, tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text(f'port = "x"\n[[models]]\nalias = "a"\nmodel = "{models}/tiny.gguf"\nn_cxt = 5\n'
                    f'[[models]]\nalias = "a"\nmodel = "missing.gguf"\n')
    proc = run_cli("check", path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"{path}: port: expected an integer, got 'x'",
        f"{path}: models[0].n_cxt: unknown key (did you mean 'n_ctx'?)",
        f"{path}: models[1].model: file not found: {tmp_path / 'missing.gguf'}",
        f"{path}: models[1].alias: duplicate alias 'a' (also models[0])",
    ]


def test_check_missing_file(tmp_path):
    proc = run_cli("check", tmp_path / "none.yaml")
    assert proc.returncode == 2 and "file not found" in proc.stderr


# -- init-config -----------------------------------------------------------------------------


def test_init_config_round_trip(models, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    for f in models.iterdir():
        place(f, folder / f.name)
    proc = run_cli("init-config", folder)
    assert proc.returncode == 0, proc.stderr
    path = folder / "llamaserve.yaml"
    text = path.read_text()
    config = load_config(path)
    assert [(m.alias, m.model.name) for m in config.models] == [("split", "split-00001-of-00002.gguf"),
                                                                 ("tiny", "tiny.gguf")]
    assert config.max_loaded_models == 2 and config.idle_unload == 300
    assert dict(config.models[0].load) == {"n_ctx": 4096, "n_gpu_layers": -1}
    assert '"lora-a.gguf": 1.0' in text and "00002-of" not in text
    assert 'clip_model_path: "mmproj-tiny-f16.gguf"' in text         # paired by name, not an entry
    assert config.models[1].clip_model_path == folder / "mmproj-tiny-f16.gguf"
    assert run_cli("check", path).returncode == 0

    # the commented adapter examples become valid entries once uncommented
    start = text.index("# LoRA adapters")
    uncommented = text[:start] + re.sub(r"(?m)^#(  .*)$", r"\1", text[start:])
    (folder / "uncommented.yaml").write_text(uncommented)
    entries = load_config(folder / "uncommented.yaml").models
    adapters = {m.alias: [p.name for p, _ in m.lora_adapters] for m in entries if m.lora_adapters}
    assert sorted(adapters.values()) == [["lora-a.gguf"], ["lora-b.gguf"]]

    again = run_cli("init-config", folder)
    assert again.returncode == 2 and "--force" in again.stderr and path.read_text() == text
    path.write_text("edited")
    assert run_cli("init-config", folder, "--force").returncode == 0 and path.read_text() == text


def test_init_config_output_elsewhere_uses_relative_paths(models, tmp_path):
    out = tmp_path / "conf" / "serve.yaml"
    out.parent.mkdir()
    proc = run_cli("init-config", models, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert f'model: "{os.path.relpath(models / "tiny.gguf", out.parent)}"' in out.read_text()
    assert [m.model for m in load_config(out).models] == [models / "split-00001-of-00002.gguf",
                                                          models / "tiny.gguf"]


def test_init_config_pairs_a_projector_with_its_model(tiny_model_path, projector_path, tmp_path):
    place(tiny_model_path, tmp_path / "tiny-vlm-Q8_0.gguf")
    place(tiny_model_path, tmp_path / "other-model.gguf")
    place(projector_path, tmp_path / "mmproj-tiny-vlm-f16.gguf")
    proc = run_cli("init-config", tmp_path)
    assert proc.returncode == 0, proc.stderr
    entries = {m.alias: m for m in load_config(tmp_path / "llamaserve.yaml").models}
    assert entries["tiny-vlm-Q8_0"].clip_model_path == tmp_path / "mmproj-tiny-vlm-f16.gguf"
    assert entries["other-model"].clip_model_path is None and "mmproj-tiny-vlm-f16" not in entries


def test_init_config_refuses_a_folder_without_models(tmp_path):
    fake_gguf(tmp_path / "adapter.gguf", kind="adapter")
    proc = run_cli("init-config", tmp_path)
    assert proc.returncode == 2 and "no GGUF models found" in proc.stderr
    assert not (tmp_path / "llamaserve.yaml").exists()
    assert main(["init-config", str(tmp_path / "nope")]) == 2


# -- flags -----------------------------------------------------------------------------------


def test_single_model_from_flags(models, monkeypatch):
    monkeypatch.chdir(models)   # flag paths are relative to the working directory
    config = from_flags("--model", "tiny.gguf", "--alias", "tiny-chat", "--lora", "lora-a.gguf",
                        "--lora-scaled", "lora-b.gguf", "-0.5", "--n-ctx", "256", "--n-gpu-layers", "0",
                        "--threads", "2", "--chat-format", "chatml", "--embedding", "--host", "0.0.0.0",
                        "--port", "9001", "--api-key", "k", "--parallel", "8", "--max-loaded-models", "1",
                        "--idle-unload", "5m", "--log-level", "debug")
    assert config.source is None
    assert (config.host, config.port, config.api_key, config.parallel) == ("0.0.0.0", 9001, "k", 8)
    assert (config.max_loaded_models, config.idle_unload, config.log_level) == (1, 300.0, "debug")
    (entry,) = config.models
    assert (entry.alias, entry.model, entry.chat_format) == ("tiny-chat", models / "tiny.gguf", "chatml")
    assert entry.lora_adapters == ((models / "lora-a.gguf", 1.0), (models / "lora-b.gguf", -0.5))
    assert dict(entry.load) == {"n_ctx": 256, "n_gpu_layers": 0, "n_threads": 2, "embedding": True}


def test_flags_override_the_config_file(models, tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text(f"port: 8000\napi_key: from-file\ndefaults: {{n_ctx: 1024}}\n"
                    f"models:\n  - {{alias: a, model: {models}/tiny.gguf, n_ctx: 2048}}\n")
    config = from_flags("--config", path, "--port", "9000", "--n-ctx", "128", "--models-dir", models)
    assert config.port == 9000 and config.api_key == "from-file" and config.source == path
    assert [m.alias for m in config.models] == ["a", "split", "tiny"]
    assert all(m.load["n_ctx"] == 128 for m in config.models)

    monkeypatch.setenv("LLAMASERVE_CONFIG", str(path))
    monkeypatch.setenv("LLAMASERVE_API_KEY", "from-env")
    config = from_flags()
    assert config.source == path and config.api_key == "from-env"
    assert from_flags("--model", models / "tiny.gguf").models[0].alias == "tiny"   # --model replaces models


def test_print_config_via_subprocess(models):
    proc = run_cli("--model", "tiny.gguf", "--lora-scaled", "lora-a.gguf", "0.5", "--print-config",
                   cwd=models)
    assert proc.returncode == 0, proc.stderr
    assert "config: command line" in proc.stdout
    assert f"lora: {models / 'lora-a.gguf'} (scale 0.5)" in proc.stdout


@pytest.mark.parametrize("argv, message", [
    ([], "nothing to serve"),
    (["--lora", "x.gguf", "--models-dir", "."], "--alias, --lora and --lora-scaled need --model"),
    (["--model", "missing.gguf"], "<command line>: models[0].model: file not found"),
    (["--model", "tiny.gguf", "--port", "0"], "<command line>: port: must be between 1 and 65535, got 0"),
    (["--model", "tiny.gguf", "--lora-scaled", "lora-a.gguf", "big"], "SCALE must be a number, got 'big'"),
    (["--model", "tiny.gguf", "--idle-unload", "soon"], "<command line>: idle_unload: invalid duration"),
    (["--model", "tiny.gguf", "--chat-format", "chatmll"], "(did you mean 'chatml'?)"),
    (["--model", "tiny.gguf", "--lora", "tiny.gguf"], "is not a LoRA adapter"),
])
def test_flag_errors_exit_2(models, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(models)
    assert main([*argv, "--print-config"]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_llama_server_spellings_are_aliases(models, monkeypatch):
    monkeypatch.chdir(models)
    config = from_flags("-m", "tiny.gguf", "-a", "chat", "-ngl", "0", "-t", "2", "-np", "3", "--embeddings")
    (entry,) = config.models
    assert entry.alias == "chat" and config.parallel == 3
    assert dict(entry.load) == {"n_gpu_layers": 0, "n_threads": 2, "embedding": True}
    assert from_flags("-m", "tiny.gguf", "--gpu-layers", "-1").models[0].load["n_gpu_layers"] == -1


@pytest.mark.parametrize("argv, message", [
    (["-c", "2048"], "unknown flag -c: llama-server's context that its --parallel slots share; here --n-ctx N"),
    (["--ctx-size=2048"], "unknown flag --ctx-size: llama-server's context"),
    (["--n-ctxx", "2048"], "unknown flag --n-ctxx (did you mean '--n-ctx'?)"),
    (["-fa", "on"], "unknown flag -fa: no such flag here: set flash_attn"),
    (["--model", "tiny.gguf", "--flash-attn"], "unknown flag --flash-attn: no such flag here: set flash_attn"),
    (["check", "--bogus", "x.yaml"], "unknown flag --bogus"),
])
def test_unknown_flags_are_named(argv, message):
    """argparse alone answers "argument COMMAND: invalid choice: '2048'", naming no flag."""
    proc = run_cli(*argv)
    assert proc.returncode == 2 and f"llamaserve: error: {message}" in proc.stderr, proc.stderr
    assert "invalid choice" not in proc.stderr


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--port", "abc"])
    assert info.value.code == 2 and "invalid int value" in capsys.readouterr().err


def test_init_config_and_models_dir_mark_embedding_models(tiny_model_path, minilm_path, tmp_path):
    """A BERT-family encoder, or a model whose metadata sets a pooling type, is `embedding: true`."""
    from gguf import GGUFValueType as VT
    from gguf_files import Layout, encode_kv

    folder = tmp_path / "m"
    folder.mkdir()
    place(tiny_model_path, folder / "chat.gguf")
    place(minilm_path, folder / "minilm.gguf")
    (folder / "pooled.gguf").write_bytes(Layout(tiny_model_path).rebuild(
        extra=[encode_kv("llama.pooling_type", VT.UINT32, 1)]))
    proc = run_cli("init-config", folder)
    assert proc.returncode == 0, proc.stderr
    text = (folder / "llamaserve.yaml").read_text()
    assert "bert embedding model" in text and "llama embedding model" in text
    flags = {m.alias: bool(m.load.get("embedding")) for m in load_config(folder / "llamaserve.yaml").models}
    assert flags == {"chat": False, "minilm": True, "pooled": True}
    (tmp_path / "dir.yaml").write_text(f"models_dir: {folder}\n")
    assert {m.alias: bool(m.load.get("embedding")) for m in load_config(tmp_path / "dir.yaml").models} == flags


def test_the_default_model_is_a_generation_model(tiny_model_path, tmp_path):
    """An embedder that sorts first (a-embed) is not the default: a chat request naming no model must
    reach the chat model, in init-config's file and with models_dir alike."""
    from gguf import GGUFValueType as VT
    from gguf_files import Layout, encode_kv

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "a-embed.gguf").write_bytes(Layout(tiny_model_path).rebuild(
        extra=[encode_kv("llama.pooling_type", VT.UINT32, 1)]))
    place(tiny_model_path, folder / "chat.gguf")
    proc = run_cli("init-config", folder)
    assert proc.returncode == 0, proc.stderr
    assert "# default_model: chat " in (folder / "llamaserve.yaml").read_text()
    proc = run_cli("check", folder / "llamaserve.yaml")
    assert proc.returncode == 0 and "default model: chat " in proc.stdout, proc.stderr
    (tmp_path / "dir.yaml").write_text(f"models_dir: {folder}\n")
    config = load_config(tmp_path / "dir.yaml")
    assert [m.alias for m in config.models] == ["a-embed", "chat"] and config.default_entry().alias == "chat"
    (tmp_path / "only.yaml").write_text(f"models: [{{model: {folder / 'a-embed.gguf'}, embedding: true}}]\n")
    assert load_config(tmp_path / "only.yaml").default_entry().alias == "a-embed"   # else the first


def test_check_refuses_an_adapter_or_draft_made_for_another_model(tiny_model_path, lora_a_path,
                                                                  lora_wrong_shape_path, tmp_path):
    """From the headers, before any load: a LoRA of another width and a draft of another vocabulary
    would fail the model's first request."""
    from tiny_models import DEFAULT_VOCAB_PATH, TinyModelSpec, write_model

    gpt2 = write_model(tmp_path / "gpt2-vocab.gguf", TinyModelSpec(name="x"),
                       vocab_path=DEFAULT_VOCAB_PATH.parent / "ggml-vocab-gpt-2.gguf")
    same = write_model(tmp_path / "draft.gguf", TinyModelSpec(n_embd=32, n_ff=64, seed=5))
    (tmp_path / "bad.yaml").write_text(f"""models:
  - {{alias: wide, model: {tiny_model_path}, lora_adapters: {{{lora_wrong_shape_path}: 1.0}}}}
  - {{alias: drafted, model: {tiny_model_path}, speculative: {{draft_model: {gpt2}}}}}
""")
    proc = run_cli("check", tmp_path / "bad.yaml")
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.splitlines() == [
        f"{tmp_path / 'bad.yaml'}: models[0].lora_adapters: adapter lora-wrong-shape.gguf does not fit "
        f"{tiny_model_path.name}: its blk.0.attn_q.weight is 128x128, the model's is 64x64 (n_embd 64): it was "
        "made for another base model",
        f"{tmp_path / 'bad.yaml'}: models[1].speculative.draft_model: draft model gpt2-vocab.gguf cannot draft for "
        f"{tiny_model_path.name}: its vocabulary size is 50257, the model's is 32000"]
    (tmp_path / "good.yaml").write_text(f"""models:
  - {{alias: a, model: {tiny_model_path}, lora_adapters: {{{lora_a_path}: 1.0}}, speculative: {{draft_model: {same}}}}}
""")
    proc = run_cli("check", tmp_path / "good.yaml")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
@pytest.mark.server
def test_demo_serves_the_shipped_model_offline(tmp_path):
    """`llamaserve demo` (the README's first command) answers with the TinyStories model it ships,
    from no config file."""
    import openai
    from server import ServerProcess

    server = ServerProcess({}, tmp_path)
    server.command = ["demo", "--port", str(server.port)]
    server.start()
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="none")
        assert [m.id for m in client.models.list().data] == ["demo"]
        answer = client.completions.create(model="demo", prompt="Once upon a time", max_tokens=24, temperature=0)
        words = answer.choices[0].text.split()
        assert len(words) >= 5 and all(w.isascii() for w in words)
    finally:
        server.stop()


def test_demo_model_ships_in_the_package():
    from importlib import resources

    from llamaserve.cli import DEMO_MODEL, build_parser, demo_config
    config = demo_config(build_parser().parse_args(["demo", "--port", "8123"]))
    assert [e.alias for e in config.models] == ["demo"] and config.port == 8123
    assert config.models[0].model == Path(str(resources.files("llamaserve") / "demo" / DEMO_MODEL))
    assert config.models[0].model.stat().st_size > 1_000_000
