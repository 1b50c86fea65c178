"""Bad input to decoding, contexts, vocabularies and samplers raises Python exceptions, never aborts.

Everything that reaches llama.cpp runs in a child interpreter (isolation.run_cases): if a check
is missing and llama.cpp aborts (GGML_ASSERT, uncaught C++ exception), the case that killed the
child fails, named, and a new child runs the cases after it. Each table maps a case name to the
statement, the exception it must raise and a fragment its message must contain.
"""

from __future__ import annotations

import pytest
from helpers import N_THREADS, describe
from isolation import Case, run_python, run_table

import llamacore

# -- decoding, context and vocabulary -------------------------------------------------------

DECODE_SETUP = '''
import numpy as np
import llamacore
m = llamacore.Model({path!r})
ctx = llamacore.Context(m, n_ctx=128, n_batch=32, n_seq_max=2, n_threads={threads})

def one(token=100, pos=0, seq=0, logits=True, capacity=1, n_seq_max=1):
    b = llamacore.Batch(capacity, n_seq_max=n_seq_max)
    b.add(token, pos, seq, logits=logits)
    return b
'''

DECODE_CASES = {
    "token_too_large": Case("ctx.decode(one(token=m.n_vocab))", IndexError, "out of range"),
    "token_negative": Case("ctx.decode(one(token=-1))", IndexError, "out of range"),
    "token_in_sequence": Case("""
        b = llamacore.Batch(4)
        b.add_sequence([1, 100, 10**6, 5], 0, 0)
        ctx.decode(b)
    """, IndexError, "position 2"),
    "batch_over_n_batch": Case("""
        b = llamacore.Batch(40)
        b.add_sequence(list(range(100, 140)), 0, 0)
        ctx.decode(b)
    """, ValueError, "n_batch"),
    "seq_id_too_large": Case("ctx.decode(one(seq=2))", ValueError, "sequence id 2"),
    "seq_id_negative": Case("ctx.decode(one(seq=-1))", ValueError, "sequence id -1"),
    "seq_id_list_too_large": Case("""
        b = llamacore.Batch(1, n_seq_max=2)
        b.add(100, 0, [0, 5], logits=True)
        ctx.decode(b)
    """, ValueError, "sequence id 5"),
    "position_past_context": Case("ctx.decode(one(pos=ctx.n_ctx_seq))", ValueError, "outside the context"),
    "position_far_past_context": Case("ctx.decode(one(pos=10**6))", ValueError, "outside the context"),
    "position_negative": Case("ctx.decode(one(pos=-1))", ValueError, "outside the context"),
    "position_gap": Case("""
        ctx.kv_clear()
        ctx.decode(one(pos=0))
        ctx.decode(one(pos=10))
    """, llamacore.DecodeError, "inconsistent sequence positions"),
    "empty_batch": Case("ctx.decode(llamacore.Batch(4))", ValueError, "empty"),
    "batch_over_capacity": Case("""
        b = llamacore.Batch(2)
        b.add(1, 0, 0); b.add(2, 1, 0); b.add(3, 2, 0)
    """, IndexError, "full"),
    "add_sequence_over_capacity": Case("llamacore.Batch(3).add_sequence([1, 2, 3, 4], 0, 0)",
        IndexError, "do not fit"),
    "batch_too_many_seq_ids": Case("llamacore.Batch(1, n_seq_max=1).add(1, 0, [0, 1])",
        ValueError, "sequence ids"),
    "batch_zero_capacity": Case("llamacore.Batch(0)", ValueError, "capacity"),
    "set_logits_out_of_range": Case("llamacore.Batch(2).set_logits(5)", IndexError),
    "embedding_row_on_token_batch": Case("llamacore.Batch(2).add_embedding([0.0] * m.n_embd, 0)", TypeError),
    "embedding_batch_wrong_width": Case("""
        b = llamacore.Batch(1, embd=m.n_embd + 1)
        b.add_embedding(np.zeros(m.n_embd + 1), 0, 0, logits=True)
        ctx.decode(b)
    """, ValueError, "embeddings batch"),
    "embedding_row_wrong_length": Case("llamacore.Batch(1, embd=m.n_embd).add_embedding(np.zeros(3), 0)",
        ValueError, "expected"),
    "logits_without_outputs": Case("""
        ctx.kv_clear()
        ctx.decode(one(logits=False))
        ctx.logits()
    """, IndexError, "logits"),
    "all_logits_without_outputs": Case("""
        ctx.kv_clear()
        ctx.decode(one(logits=False))
        ctx.all_logits()
    """, IndexError, "no logits"),
    "logits_index_out_of_range": Case("""
        ctx.kv_clear()
        ctx.decode(one())
        ctx.logits(7)
    """, IndexError, "index 7"),
    "embedding_on_logits_context": Case("""
        ctx.kv_clear()
        ctx.decode(one())
        ctx.embedding(0)
    """, IndexError, "embedding"),
    "sequence_embedding_bad_seq": Case("ctx.sequence_embedding(5)", ValueError),
    "detokenize_out_of_range": Case("m.detokenize([1, m.n_vocab])", IndexError, "out of range"),
    "detokenize_negative": Case("m.detokenize([-5])", IndexError, "out of range"),
    "token_to_piece_out_of_range": Case("m.token_to_piece(m.n_vocab)", IndexError, "out of range"),
    "token_text_negative": Case("m.token_text(-1)", IndexError, "out of range"),
    "context_n_seq_max_zero": Case("llamacore.Context(m, n_ctx=128, n_seq_max=0)", ValueError, "n_seq_max"),
    "context_n_seq_max_too_large": Case(
        "llamacore.Context(m, n_ctx=128, n_seq_max=llamacore.max_parallel_sequences() + 1)",
        ValueError, "n_seq_max"),
    "context_unknown_type_k": Case("llamacore.Context(m, n_ctx=128, type_k='q9_9')", ValueError, "type_k"),
    "context_unknown_type_v": Case("llamacore.Context(m, n_ctx=128, type_v='f64')", ValueError, "type_v"),
    "context_n_batch_zero": Case("llamacore.Context(m, n_ctx=128, n_batch=0)", ValueError, "n_batch"),
    "context_n_ctx_negative": Case("llamacore.Context(m, n_ctx=-1)", ValueError, "n_ctx"),
    "context_unknown_pooling": Case("llamacore.Context(m, n_ctx=128, pooling='median')",
        ValueError, "pooling"),
    "context_bad_flash_attn": Case("llamacore.Context(m, n_ctx=128, flash_attn='sometimes')",
        ValueError, "flash_attn"),
    "set_n_threads_zero": Case("ctx.set_n_threads(0)", ValueError, "n_threads"),
    "kv_remove_bad_seq": Case("ctx.kv_remove(5)", ValueError, "sequence id 5"),
    "kv_copy_bad_seq": Case("ctx.kv_copy(0, 9)", ValueError, "sequence id 9"),
    "kv_keep_negative": Case("ctx.kv_keep(-1)", ValueError, "sequence id -1"),
    "kv_pos_max_bad_seq": Case("ctx.kv_pos_max(2)", ValueError, "sequence id 2"),
    "kv_shift_bad_seq": Case("ctx.kv_shift(3, 0, -1, 1)", ValueError, "sequence id 3"),
    "kv_copy_partial_not_unified": Case("""
        ctx.kv_clear()
        b = llamacore.Batch(4)
        b.add_sequence([5, 6, 7, 8], 0, 0)
        ctx.decode(b)
        ctx.kv_copy(0, 1, 0, 2)
    """, ValueError, "kv_unified"),
    "load_state_garbage": Case("ctx.load_state(b'\\x07' * 64)", ValueError, "state"),
    "load_state_empty": Case("ctx.load_state(b'')", ValueError, "empty"),
    "load_sequence_state_garbage": Case("ctx.load_sequence_state(b'\\x01' * 64, 1)", ValueError, "state"),
    "load_sequence_state_truncated": Case("""
        ctx.kv_clear()
        b = llamacore.Batch(4)
        b.add_sequence([5, 6, 7, 8], 0, 0)
        ctx.decode(b)
        st = ctx.save_sequence_state(0)
        ctx.load_sequence_state(st[: len(st) // 2], 1)
    """, ValueError, "state"),
    "load_state_file_missing": Case("ctx.load_state_file('/nonexistent/dir/state.bin')", FileNotFoundError),
    "save_state_file_unwritable": Case("ctx.save_state_file('/nonexistent/dir/state.bin', [1, 2])", OSError),
    "set_adapters_not_adapter": Case("ctx.set_adapters({'x': 1.0})", TypeError, "LoraAdapter"),
    "tokenize_bad_type": Case("m.tokenize(12345)", TypeError, "str or bytes"),
}


@pytest.fixture(scope="module")
def decode_group(tiny_model_path):
    return run_table(DECODE_SETUP.format(path=str(tiny_model_path), threads=N_THREADS), DECODE_CASES)


@pytest.mark.parametrize("name", list(DECODE_CASES))
def test_decode_and_context_input(decode_group, name):
    decode_group.expect_case(name, DECODE_CASES[name])


def test_context_survives_bad_input(tiny_model_path):
    """After a series of rejected calls the same context still decodes correctly."""
    proc = run_python(f'''
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
import llamacore
m = llamacore.Model({path!r})
ctx = llamacore.Context(m, n_ctx=128, n_threads={threads})
b = llamacore.Batch(3)
b.add_sequence([1, 15043, 2787], 0, 0)
ctx.decode(b)
G = 'root ::= "yes" | "no"'
'''

SAMPLER_CASES = {
    "no_selecting_stage": Case("llamacore.Sampler().temp(0.8).sample(ctx)", ValueError, "selecting stage"),
    "truncation_after_selection": Case("llamacore.Sampler().dist(1).top_k(1).sample(ctx)",
        ValueError, "selecting stage"),
    "grammar_after_top_k": Case("llamacore.Sampler().top_k(1).grammar(m, G)", ValueError, "before top_k"),
    "grammar_after_greedy": Case("llamacore.Sampler().greedy().grammar(m, G)", ValueError, "before greedy"),
    "grammar_accept_disallowed": Case("llamacore.Sampler().grammar(m, G).greedy().accept(15043)",
        ValueError, "not allowed by the grammar"),
    "grammar_accept_eos_too_early": Case("llamacore.Sampler().grammar(m, G).greedy().accept(m.token_eos)",
        ValueError, "not allowed by the grammar"),
    "grammar_accept_out_of_vocab": Case("llamacore.Sampler().grammar(m, G).greedy().accept(m.n_vocab + 5)",
        IndexError, "out of range"),
    "grammar_accept_negative": Case("llamacore.Sampler().grammar(m, G).greedy().accept(-1)",
        IndexError, "out of range"),
    "invalid_grammar": Case("llamacore.Sampler().grammar(m, 'root ::= [a-')", ValueError, "grammar"),
    "sample_index_out_of_range": Case("llamacore.Sampler().greedy().sample(ctx, 9)", IndexError, "index 9"),
    "penalties_repeat_zero": Case("llamacore.Sampler().penalties(repeat=0.0)", ValueError, "repeat"),
    "logit_bias_out_of_vocab": Case("llamacore.Sampler().logit_bias(m, {m.n_vocab: 5.0})",
        IndexError, "out of range"),
}


@pytest.fixture(scope="module")
def sampler_group(tiny_model_path):
    return run_table(SAMPLER_SETUP.format(path=str(tiny_model_path), threads=N_THREADS), SAMPLER_CASES)


@pytest.mark.parametrize("name", list(SAMPLER_CASES))
def test_sampler_input(sampler_group, name):
    sampler_group.expect_case(name, SAMPLER_CASES[name])


def test_groups_complete(decode_group, sampler_group):
    """No case killed its child, and every child ran to its end and exited cleanly."""
    for run in (decode_group, sampler_group):
        assert not run.crashes(), run.crashes()
        assert not run.stray, run.stray
        assert [p.returncode for p in run.procs] == [0], [describe(p) for p in run.procs]
