"""llama-cpp-python's tokenizer classes: LlamaTokenizer (GGUF vocabulary) and LlamaHFTokenizer."""

import importlib.util

import pytest
from helpers import N_THREADS, REPO_ROOT

from llamacore import Llama
from llamacore.llama_tokenizer import BaseLlamaTokenizer, LlamaHFTokenizer, LlamaTokenizer

SPM_VOCAB = REPO_ROOT / "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf"
TEXTS = ["Hello world", " Hello world", "héllo wörld 你好", "line one\nline two\ttab", "a"]


@pytest.fixture(scope="module")
def spm():
    if not SPM_VOCAB.exists():
        pytest.skip(f"{SPM_VOCAB} is not in this checkout")
    return LlamaTokenizer.from_ggml_file(str(SPM_VOCAB))


def test_base_tokenizer_is_abstract():
    with pytest.raises(TypeError):
        BaseLlamaTokenizer()  # type: ignore[abstract]
    assert issubclass(LlamaTokenizer, BaseLlamaTokenizer) and issubclass(LlamaHFTokenizer, BaseLlamaTokenizer)


def test_from_ggml_file_tokenizes_like_llama(spm):
    assert spm.encode("Hello world") == [1, 15043, 3186]              # LLaMA's SentencePiece ids
    assert spm.tokenize(b"Hello world", add_bos=False) == [15043, 3186]
    assert spm.decode([1, 15043, 3186]) == "Hello world"             # the BOS takes the leading space
    assert spm.detokenize([15043, 3186]) == b" Hello world"


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(spm, text):
    ids = spm.encode(text)
    assert ids[0] == 1
    assert spm.decode(ids) == text
    assert spm.detokenize(ids) == text.encode()


def test_special_tokens(spm):
    assert spm.encode("<s>x") == [1, 1, 921]                         # special=True parses "<s>"
    assert 1 not in spm.encode("<s>x", special=False)[1:]
    assert spm.detokenize([1, 921], special=True) == b"<s> x"
    assert spm.detokenize([1, 921]) == b"x"


def test_prev_tokens_changes_nothing_for_a_gguf_vocabulary(spm):
    # as llama-cpp-python's LlamaTokenizer: pieces are joined as they are, and only a leading BOS
    # takes the first piece's space (so after [BOS] the tail keeps its space)
    ids = spm.encode("héllo wörld 你好")
    for cut in range(1, len(ids)):
        head, tail = ids[:cut], ids[cut:]
        assert spm.detokenize(tail, prev_tokens=head) == spm.detokenize(tail)
    assert spm.detokenize(ids[1:], prev_tokens=ids[:1]) == b" " + spm.detokenize(ids)


def test_tokenizer_of_a_llama(tiny_model_path):
    llm = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS)
    tok = LlamaTokenizer(llm)
    for text in TEXTS:
        assert tok.tokenize(text.encode(), special=False) == llm.tokenize(text.encode())
        assert tok.decode(tok.encode(text)) == text
    assert LlamaTokenizer(llm.model).encode("Hello") == tok.encode("Hello")


@pytest.mark.skipif(importlib.util.find_spec("transformers") is not None, reason="transformers is installed")
def test_hf_tokenizer_needs_transformers():
    with pytest.raises(ImportError, match="transformers"):
        LlamaHFTokenizer.from_pretrained("gpt2")
