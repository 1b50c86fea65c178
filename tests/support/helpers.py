"""Helpers shared by the test modules (a plain module: import it, not conftest)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_MODELS = REPO_ROOT.parent / "shared/models"

# Small thread count: the test machine is shared and has 2 cores. ggml's worker threads spin
# while they wait for each other, so on a machine that is busy with something else
# LLAMACORE_TEST_THREADS=1 can be much faster.
N_THREADS = int(os.environ.get("LLAMACORE_TEST_THREADS", "2"))


def describe(proc: subprocess.CompletedProcess) -> str:
    """A failure message for a child process: return code (signal) plus its output tails."""
    rc = proc.returncode
    how = f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"
    return f"child {how}\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"


# -- contexts and decoding --------------------------------------------------------------------


def make_ctx(model, **kw):
    """A Context on `model` with the tests' defaults (n_ctx 256, n_batch 128, N_THREADS)."""
    import llamacore

    kw.setdefault("n_ctx", 256)
    kw.setdefault("n_batch", 128)
    kw.setdefault("n_threads", N_THREADS)
    return llamacore.Context(model, **kw)


def decode(ctx, tokens, pos0=0, seq_id=0):
    """Decode `tokens` of one sequence; return a copy of the last token's logits."""
    import llamacore

    b = llamacore.Batch(max(len(tokens), 1))
    b.add_sequence(tokens, pos0, seq_id)
    ctx.decode(b)
    return ctx.logits().copy()


def logits_one_at_a_time(ctx, tokens, pos0, seq_id=0):
    """Each of `tokens` decoded alone, in order from position `pos0`; their logits, one row each."""
    import numpy as np

    import llamacore

    out = []
    for i, token in enumerate(tokens):
        one = llamacore.Batch(1)
        one.add(token, pos0 + i, seq_id, True)
        ctx.decode(one)
        out.append(np.array(ctx.logits(-1)))
    return np.stack(out)


def logits_in_one_batch(ctx, tokens, pos0, seq_id=0):
    """`tokens` decoded as one batch from position `pos0`, every row with logits."""
    import numpy as np

    import llamacore

    batch = llamacore.Batch(len(tokens))
    for i, token in enumerate(tokens):
        batch.add(token, pos0 + i, seq_id, True)
    ctx.decode(batch)
    return np.array(ctx.all_logits())


def assert_batch_rows_equal_one_row_decodes(model, rows, *, threads=2, flash_attn="on", kv_type="f16",
                                            prompt=100):
    """For k in `rows`: k random tokens decoded as one batch after a `prompt`-token context have
    bitwise the logits of the same tokens decoded one at a time."""
    import random

    import numpy as np

    ctx = make_ctx(model, n_ctx=512, n_batch=128, n_threads=threads, n_threads_batch=threads,
                   flash_attn=flash_attn, type_k=kv_type, type_v=kv_type)
    rng = random.Random(threads)
    decode(ctx, [rng.randrange(3, model.n_vocab) for _ in range(prompt)])
    for k in rows:
        tokens = [rng.randrange(3, model.n_vocab) for _ in range(k)]
        one_by_one = logits_one_at_a_time(ctx, tokens, prompt)
        ctx.kv_remove(0, prompt, -1)
        together = logits_in_one_batch(ctx, tokens, prompt)
        ctx.kv_remove(0, prompt, -1)
        differ = [i for i in range(k) if not np.array_equal(one_by_one[i], together[i])]
        assert not differ, (f"{k} rows: rows {differ} differ from one-row decodes by up to "
                            f"{np.abs(one_by_one - together).max():.3g}")


def greedy_generate(ctx, model, prompt, n):
    """`n` argmax tokens after `prompt`, decoded one at a time on sequence 0 of `ctx`."""
    import numpy as np

    tokens = model.tokenize(prompt)
    logits = decode(ctx, tokens)
    out = []
    for _ in range(n):
        tok = int(np.argmax(logits))
        out.append(tok)
        logits = decode(ctx, [tok], pos0=len(tokens) + len(out) - 1)
    return out


# -- OpenAI error bodies ----------------------------------------------------------------------

ERROR_KEYS = frozenset({"message", "type", "param", "code"})


def check_error_body(err, where: str = "") -> None:
    """`err` is an OpenAI error object: exactly its four keys, a message, string-or-null fields."""
    assert isinstance(err, dict) and set(err) == ERROR_KEYS, f"{where}: {err!r}"
    assert isinstance(err["message"], str) and err["message"], f"{where}: {err!r}"
    assert isinstance(err["type"], str), f"{where}: {err!r}"
    assert err["param"] is None or isinstance(err["param"], str), f"{where}: {err!r}"
    assert err["code"] is None or isinstance(err["code"], str), f"{where}: {err!r}"


def assert_openai_error(resp, status: int) -> dict:
    """`resp` (an httpx response) has `status` and an OpenAI error body; returns the error object."""
    assert resp.status_code == status, (status, resp.status_code, resp.text[:1000])
    err = resp.json()["error"]
    check_error_body(err, f"{resp.request.method} {resp.request.url.path} -> {resp.status_code}")
    return err


# -- config files -----------------------------------------------------------------------------

NO_MODELS = "no models configured (add a models list, or a models_dir with GGUF models)"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    """The problem lines of a config file that must not load (one ConfigError listing them all)."""
    from llamaserve.config.parse import ConfigError, load_config

    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def yaml_config(work: Path, body: str) -> Path:
    return write(work, "config.yaml", body)


def vendor_fetch():
    """vendor/fetch.py (a script, not a package module), loaded as a module."""
    spec = importlib.util.spec_from_file_location("llamacore_vendor_fetch", REPO_ROOT / "vendor" / "fetch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
