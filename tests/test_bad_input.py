"""Bad input raises Python exceptions instead of crashing the process.

Everything that reaches llama.cpp runs in a child interpreter (run_isolated): if a check is
missing and llama.cpp aborts (GGML_ASSERT, uncaught C++ exception), the child dies with a
signal and the test fails instead of pytest being killed. Each group of cases runs in one child
that reports, per case, the exception it caught; a case whose line is missing is where the child
died.
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import N_THREADS, describe, run_isolated

import llamacore

CASE_RUNNER = '''
import llamacore

def case(name, fn):
    try:
        fn()
    except BaseException as e:
        msg = str(e).replace("\\n", " ")[:300]
        print(f"CASE {name} -> {type(e).__name__}: {msg}", flush=True)
    else:
        print(f"CASE {name} -> no exception", flush=True)
'''


def run_group(setup: str, cases: dict[str, str]) -> tuple[object, dict[str, str]]:
    """Run every case (an expression or statement) in one child; map case name -> exception."""
    body = [CASE_RUNNER, textwrap.dedent(setup)]
    for i, (name, stmt) in enumerate(cases.items()):
        body.append(f"def _case_{i}():\n" + textwrap.indent(textwrap.dedent(stmt).strip(), "    "))
        body.append(f"case({name!r}, _case_{i})")
    body.append('print("ALL CASES DONE", flush=True)')
    proc = run_isolated("\n".join(body))
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CASE ") and " -> " in line:
            name, outcome = line[5:].split(" -> ", 1)
            results[name] = outcome
    return proc, results


def check(group, name, expected, match=None):
    proc, results = group
    assert name in results, f"case {name!r} did not report: the child died before it\n{describe(proc)}"
    outcome = results[name]
    assert outcome.startswith(expected + ":"), f"case {name!r}: expected {expected}, got {outcome}"
    if match:
        assert match.lower() in outcome.lower(), f"case {name!r}: {outcome!r} lacks {match!r}"
    assert proc.returncode == 0, describe(proc)


# -- files ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, tiny_model_path, lora_a_path):
    d = tmp_path_factory.mktemp("bad_files")
    data = tiny_model_path.read_bytes()
    files = {"missing": d / "missing.gguf", "dir": d}
    (d / "text.gguf").write_text("this is a text file, not a model\n" * 10)
    files["text"] = d / "text.gguf"
    (d / "empty.gguf").write_bytes(b"")
    files["empty"] = d / "empty.gguf"
    (d / "magic-only.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 4)
    files["magic_garbage"] = d / "magic-only.gguf"
    for label, off in [("10", 10), ("100", 100), ("1000", 1000), ("half", len(data) // 2),
                       ("minus1", len(data) - 1)]:
        p = d / f"trunc-{label}.gguf"
        p.write_bytes(data[:off])
        files[f"trunc_{label}"] = p
    lora = lora_a_path.read_bytes()
    (d / "lora-trunc.gguf").write_bytes(lora[: len(lora) // 2])
    files["lora_trunc"] = d / "lora-trunc.gguf"
    return files


@pytest.fixture(scope="module")
def file_group(bad_files, tiny_model_path):
    paths = {k: str(v) for k, v in bad_files.items()}
    setup = f"files = {paths!r}\n"
    setup += f"good = {str(tiny_model_path)!r}\n"
    cases = {name: f"llamacore.Model(files[{name!r}])" for name in bad_files}
    cases["lora_trunc"] = "llamacore.LoraAdapter(llamacore.Model(good), files['lora_trunc'])"
    cases["lora_text"] = "llamacore.LoraAdapter(llamacore.Model(good), files['text'])"
    cases["lora_missing"] = "llamacore.LoraAdapter(llamacore.Model(good), files['missing'])"
    return run_group(setup, cases)


def test_missing_file(file_group, tmp_path):
    check(file_group, "missing", "FileNotFoundError")
    with pytest.raises(FileNotFoundError):  # in-process too: checked before llama.cpp
        llamacore.Model(tmp_path / "nope.gguf")


def test_directory(file_group):
    check(file_group, "dir", "IsADirectoryError")


def test_text_file_named_gguf(file_group):
    check(file_group, "text", "ValueError", "not a GGUF")


def test_empty_file(file_group):
    check(file_group, "empty", "ValueError", "not a GGUF")


def test_gguf_magic_then_garbage(file_group):
    check(file_group, "magic_garbage", "ValueError", "failed to load model")


@pytest.mark.parametrize("where", ["10", "100", "1000", "half", "minus1"])
def test_truncated_gguf(file_group, where):
    check(file_group, f"trunc_{where}", "ValueError", "failed to load model")


def test_bad_lora_files(file_group):
    check(file_group, "lora_trunc", "ValueError", "failed to load LoRA adapter")
    check(file_group, "lora_text", "ValueError", "not a GGUF")
    check(file_group, "lora_missing", "FileNotFoundError")


# -- decoding, context and vocabulary -------------------------------------------------------

DECODE_SETUP = '''
import numpy as np
m = llamacore.Model({path!r})
ctx = llamacore.Context(m, n_ctx=128, n_batch=32, n_seq_max=2, n_threads={threads})

def one(token=100, pos=0, seq=0, logits=True, capacity=1, n_seq_max=1):
    b = llamacore.Batch(capacity, n_seq_max=n_seq_max)
    b.add(token, pos, seq, logits=logits)
    return b
'''

DECODE_CASES = {
    "token_too_large": "ctx.decode(one(token=m.n_vocab))",
    "token_negative": "ctx.decode(one(token=-1))",
    "token_in_sequence": """
        b = llamacore.Batch(4)
        b.add_sequence([1, 100, 10**6, 5], 0, 0)
        ctx.decode(b)
    """,
    "batch_over_n_batch": """
        b = llamacore.Batch(40)
        b.add_sequence(list(range(100, 140)), 0, 0)
        ctx.decode(b)
    """,
    "seq_id_too_large": "ctx.decode(one(seq=2))",
    "seq_id_negative": "ctx.decode(one(seq=-1))",
    "seq_id_list_too_large": """
        b = llamacore.Batch(1, n_seq_max=2)
        b.add(100, 0, [0, 5], logits=True)
        ctx.decode(b)
    """,
    "position_past_context": "ctx.decode(one(pos=ctx.n_ctx_seq))",
    "position_far_past_context": "ctx.decode(one(pos=10**6))",
    "position_negative": "ctx.decode(one(pos=-1))",
    "position_gap": """
        ctx.kv_clear()
        ctx.decode(one(pos=0))
        ctx.decode(one(pos=10))
    """,
    "empty_batch": "ctx.decode(llamacore.Batch(4))",
    "batch_over_capacity": """
        b = llamacore.Batch(2)
        b.add(1, 0, 0); b.add(2, 1, 0); b.add(3, 2, 0)
    """,
    "add_sequence_over_capacity": "llamacore.Batch(3).add_sequence([1, 2, 3, 4], 0, 0)",
    "batch_too_many_seq_ids": "llamacore.Batch(1, n_seq_max=1).add(1, 0, [0, 1])",
    "batch_zero_capacity": "llamacore.Batch(0)",
    "set_logits_out_of_range": "llamacore.Batch(2).set_logits(5)",
    "embedding_row_on_token_batch": "llamacore.Batch(2).add_embedding([0.0] * m.n_embd, 0)",
    "embedding_batch_wrong_width": """
        b = llamacore.Batch(1, embd=m.n_embd + 1)
        b.add_embedding(np.zeros(m.n_embd + 1), 0, 0, logits=True)
        ctx.decode(b)
    """,
    "embedding_row_wrong_length": "llamacore.Batch(1, embd=m.n_embd).add_embedding(np.zeros(3), 0)",
    "logits_without_outputs": """
        ctx.kv_clear()
        ctx.decode(one(logits=False))
        ctx.logits()
    """,
    "all_logits_without_outputs": """
        ctx.kv_clear()
        ctx.decode(one(logits=False))
        ctx.all_logits()
    """,
    "logits_index_out_of_range": """
        ctx.kv_clear()
        ctx.decode(one())
        ctx.logits(7)
    """,
    "embedding_on_logits_context": """
        ctx.kv_clear()
        ctx.decode(one())
        ctx.embedding(0)
    """,
    "sequence_embedding_bad_seq": "ctx.sequence_embedding(5)",
    "detokenize_out_of_range": "m.detokenize([1, m.n_vocab])",
    "detokenize_negative": "m.detokenize([-5])",
    "token_to_piece_out_of_range": "m.token_to_piece(m.n_vocab)",
    "token_text_negative": "m.token_text(-1)",
    "context_n_seq_max_zero": "llamacore.Context(m, n_ctx=128, n_seq_max=0)",
    "context_n_seq_max_too_large": "llamacore.Context(m, n_ctx=128, n_seq_max=llamacore.max_parallel_sequences() + 1)",
    "context_unknown_type_k": "llamacore.Context(m, n_ctx=128, type_k='q9_9')",
    "context_unknown_type_v": "llamacore.Context(m, n_ctx=128, type_v='f64')",
    "context_n_batch_zero": "llamacore.Context(m, n_ctx=128, n_batch=0)",
    "context_n_ctx_negative": "llamacore.Context(m, n_ctx=-1)",
    "context_unknown_pooling": "llamacore.Context(m, n_ctx=128, pooling='median')",
    "context_bad_flash_attn": "llamacore.Context(m, n_ctx=128, flash_attn='sometimes')",
    "set_n_threads_zero": "ctx.set_n_threads(0)",
    "kv_remove_bad_seq": "ctx.kv_remove(5)",
    "kv_copy_bad_seq": "ctx.kv_copy(0, 9)",
    "kv_keep_negative": "ctx.kv_keep(-1)",
    "kv_pos_max_bad_seq": "ctx.kv_pos_max(2)",
    "kv_shift_bad_seq": "ctx.kv_shift(3, 0, -1, 1)",
    "kv_copy_partial_not_unified": """
        ctx.kv_clear()
        b = llamacore.Batch(4)
        b.add_sequence([5, 6, 7, 8], 0, 0)
        ctx.decode(b)
        ctx.kv_copy(0, 1, 0, 2)
    """,
    "load_state_garbage": "ctx.load_state(b'\\x07' * 64)",
    "load_state_empty": "ctx.load_state(b'')",
    "load_sequence_state_garbage": "ctx.load_sequence_state(b'\\x01' * 64, 1)",
    "load_sequence_state_truncated": """
        ctx.kv_clear()
        b = llamacore.Batch(4)
        b.add_sequence([5, 6, 7, 8], 0, 0)
        ctx.decode(b)
        st = ctx.save_sequence_state(0)
        ctx.load_sequence_state(st[: len(st) // 2], 1)
    """,
    "load_state_file_missing": "ctx.load_state_file('/nonexistent/dir/state.bin')",
    "save_state_file_unwritable": "ctx.save_state_file('/nonexistent/dir/state.bin', [1, 2])",
    "set_adapters_not_adapter": "ctx.set_adapters({'x': 1.0})",
    "tokenize_bad_type": "m.tokenize(12345)",
}

EXPECTED = {
    "token_too_large": ("IndexError", "out of range"),
    "token_negative": ("IndexError", "out of range"),
    "token_in_sequence": ("IndexError", "position 2"),
    "batch_over_n_batch": ("ValueError", "n_batch"),
    "seq_id_too_large": ("ValueError", "sequence id 2"),
    "seq_id_negative": ("ValueError", "sequence id -1"),
    "seq_id_list_too_large": ("ValueError", "sequence id 5"),
    "position_past_context": ("ValueError", "outside the context"),
    "position_far_past_context": ("ValueError", "outside the context"),
    "position_negative": ("ValueError", "outside the context"),
    "position_gap": ("DecodeError", "inconsistent sequence positions"),
    "empty_batch": ("ValueError", "empty"),
    "batch_over_capacity": ("IndexError", "full"),
    "add_sequence_over_capacity": ("IndexError", "do not fit"),
    "batch_too_many_seq_ids": ("ValueError", "sequence ids"),
    "batch_zero_capacity": ("ValueError", "capacity"),
    "set_logits_out_of_range": ("IndexError", None),
    "embedding_row_on_token_batch": ("TypeError", None),
    "embedding_batch_wrong_width": ("ValueError", "embeddings batch"),
    "embedding_row_wrong_length": ("ValueError", "expected"),
    "logits_without_outputs": ("IndexError", "logits"),
    "all_logits_without_outputs": ("IndexError", "no logits"),
    "logits_index_out_of_range": ("IndexError", "index 7"),
    "embedding_on_logits_context": ("IndexError", "embedding"),
    "sequence_embedding_bad_seq": ("ValueError", None),
    "detokenize_out_of_range": ("IndexError", "out of range"),
    "detokenize_negative": ("IndexError", "out of range"),
    "token_to_piece_out_of_range": ("IndexError", "out of range"),
    "token_text_negative": ("IndexError", "out of range"),
    "context_n_seq_max_zero": ("ValueError", "n_seq_max"),
    "context_n_seq_max_too_large": ("ValueError", "n_seq_max"),
    "context_unknown_type_k": ("ValueError", "type_k"),
    "context_unknown_type_v": ("ValueError", "type_v"),
    "context_n_batch_zero": ("ValueError", "n_batch"),
    "context_n_ctx_negative": ("ValueError", "n_ctx"),
    "context_unknown_pooling": ("ValueError", "pooling"),
    "context_bad_flash_attn": ("ValueError", "flash_attn"),
    "set_n_threads_zero": ("ValueError", "n_threads"),
    "kv_remove_bad_seq": ("ValueError", "sequence id 5"),
    "kv_copy_bad_seq": ("ValueError", "sequence id 9"),
    "kv_keep_negative": ("ValueError", "sequence id -1"),
    "kv_pos_max_bad_seq": ("ValueError", "sequence id 2"),
    "kv_shift_bad_seq": ("ValueError", "sequence id 3"),
    "kv_copy_partial_not_unified": ("ValueError", "kv_unified"),
    "load_state_garbage": ("ValueError", "state"),
    "load_state_empty": ("ValueError", "empty"),
    "load_sequence_state_garbage": ("ValueError", "state"),
    "load_sequence_state_truncated": ("ValueError", "state"),
    "load_state_file_missing": ("FileNotFoundError", None),
    "save_state_file_unwritable": ("OSError", None),
    "set_adapters_not_adapter": ("TypeError", "LoraAdapter"),
    "tokenize_bad_type": ("TypeError", "str or bytes"),
}


@pytest.fixture(scope="module")
def decode_group(tiny_model_path):
    return run_group(DECODE_SETUP.format(path=str(tiny_model_path), threads=N_THREADS), DECODE_CASES)


@pytest.mark.parametrize("name", list(DECODE_CASES))
def test_decode_and_context_input(decode_group, name):
    expected, match = EXPECTED[name]
    check(decode_group, name, expected, match)


def test_context_survives_bad_input(tiny_model_path):
    """After a series of rejected calls the same context still decodes correctly."""
    proc = run_isolated(f'''
        import numpy as np, llamacore
        m = llamacore.Model({str(tiny_model_path)!r})
        ctx = llamacore.Context(m, n_ctx=128, n_batch=32, n_seq_max=2, n_threads={N_THREADS})
        fresh = llamacore.Context(m, n_ctx=128, n_batch=32, n_seq_max=2, n_threads={N_THREADS})
        def dec(c, toks):
            b = llamacore.Batch(len(toks)); b.add_sequence(toks, 0, 0); c.decode(b)
            return c.logits().copy()
        caught = 0
        for bad in ([m.n_vocab], [-3], list(range(100, 140))):
            try:
                dec(ctx, bad)
            except (IndexError, ValueError):
                caught += 1
        assert caught == 3, caught
        assert ctx.kv_pos_max(0) == -1
        assert np.array_equal(dec(ctx, [1, 15043, 2787]), dec(fresh, [1, 15043, 2787]))
        print("SURVIVED")
    ''')
    assert proc.returncode == 0, describe(proc)
    assert "SURVIVED" in proc.stdout


# -- sampler ----------------------------------------------------------------------------------

SAMPLER_SETUP = '''
m = llamacore.Model({path!r})
ctx = llamacore.Context(m, n_ctx=128, n_threads={threads})
b = llamacore.Batch(3)
b.add_sequence([1, 15043, 2787], 0, 0)
ctx.decode(b)
G = 'root ::= "yes" | "no"'
'''

SAMPLER_CASES = {
    "no_selecting_stage": "llamacore.Sampler().temp(0.8).sample(ctx)",
    "truncation_after_selection": "llamacore.Sampler().dist(1).top_k(1).sample(ctx)",
    "grammar_after_top_k": "llamacore.Sampler().top_k(1).grammar(m, G)",
    "grammar_after_greedy": "llamacore.Sampler().greedy().grammar(m, G)",
    "grammar_accept_disallowed": "llamacore.Sampler().grammar(m, G).greedy().accept(15043)",
    "grammar_accept_eos_too_early": "llamacore.Sampler().grammar(m, G).greedy().accept(m.token_eos)",
    "grammar_accept_out_of_vocab": "llamacore.Sampler().grammar(m, G).greedy().accept(m.n_vocab + 5)",
    "grammar_accept_negative": "llamacore.Sampler().grammar(m, G).greedy().accept(-1)",
    "invalid_grammar": "llamacore.Sampler().grammar(m, 'root ::= [a-')",
    "sample_index_out_of_range": "llamacore.Sampler().greedy().sample(ctx, 9)",
    "penalties_repeat_zero": "llamacore.Sampler().penalties(repeat=0.0)",
    "logit_bias_out_of_vocab": "llamacore.Sampler().logit_bias(m, {m.n_vocab: 5.0})",
}

SAMPLER_EXPECTED = {
    "no_selecting_stage": ("ValueError", "selecting stage"),
    "truncation_after_selection": ("ValueError", "selecting stage"),
    "grammar_after_top_k": ("ValueError", "before top_k"),
    "grammar_after_greedy": ("ValueError", "before greedy"),
    "grammar_accept_disallowed": ("ValueError", "not allowed by the grammar"),
    "grammar_accept_eos_too_early": ("ValueError", "not allowed by the grammar"),
    "grammar_accept_out_of_vocab": ("IndexError", "out of range"),
    "grammar_accept_negative": ("IndexError", "out of range"),
    "invalid_grammar": ("ValueError", "grammar"),
    "sample_index_out_of_range": ("IndexError", "index 9"),
    "penalties_repeat_zero": ("ValueError", "repeat"),
    "logit_bias_out_of_vocab": ("IndexError", "out of range"),
}


@pytest.fixture(scope="module")
def sampler_group(tiny_model_path):
    return run_group(SAMPLER_SETUP.format(path=str(tiny_model_path), threads=N_THREADS), SAMPLER_CASES)


@pytest.mark.parametrize("name", list(SAMPLER_CASES))
def test_sampler_input(sampler_group, name):
    expected, match = SAMPLER_EXPECTED[name]
    check(sampler_group, name, expected, match)


def test_groups_complete(file_group, decode_group, sampler_group):
    """Each child ran to its end (no case killed it) and exited cleanly."""
    for proc, _ in (file_group, decode_group, sampler_group):
        assert "ALL CASES DONE" in proc.stdout, describe(proc)
        assert proc.returncode == 0, describe(proc)


def test_run_isolated_reports_abort():
    """The harness itself: a child that aborts shows up as a negative return code."""
    proc = run_isolated("import os; os.abort()")
    assert proc.returncode < 0
    assert "signal" in describe(proc)
