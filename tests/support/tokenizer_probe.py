"""What a `Llama` class's tokenize/detokenize answer on a set of vocabularies and texts, as JSON.

The same function runs over llama-cpp-python (in a child process) and over llamacore, so both sides
are asked exactly the same questions. An exception is an answer too (its type name).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# leading spaces, runs of spaces and newlines, accents, CJK, emoji (a ZWJ sequence), a lone combining
# mark, control characters, the special-token spellings of several families, and the empty text
TEXTS = [
    "", " ", "  ", "Hello world", " Hello world", "  Hello  world  ", "\n", "\n\nline\n", "\ttab\t",
    "Héllo wörld, ça va? ñ", "日本語のテキスト", "한국어", "🦙 llama 👩‍👩‍👧", "e\u0301", "\u200b zero width",
    "<s>", "</s>", "<s> Hello</s>", "<|endoftext|>", "<|im_start|>user\nhi<|im_end|>", "[CLS] x [SEP]",
    "<bos><start_of_turn>", "a" * 300, "1234567890 3.14159", "def f(x):\n    return x  # ok",
]
PROBE_IDS = 48          # the first ids, and as many from the end: special and byte tokens live there


def _try(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 -- which exception is part of the answer
        return {"error": type(exc).__name__}
    return value.hex() if isinstance(value, bytes) else value


def probe(llama_class: Any, vocabs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in vocabs:
        try:
            llm = llama_class(model_path=path, vocab_only=True, verbose=False)
        except Exception as exc:  # noqa: BLE001
            out[path] = {"load error": type(exc).__name__}
            continue
        answers: dict[str, Any] = {}
        for text in TEXTS:
            raw = text.encode()
            for add_bos in (True, False):
                for special in (True, False):
                    key = f"{text!r} add_bos={add_bos} special={special}"
                    tokens = _try(llm.tokenize, raw, add_bos=add_bos, special=special)
                    answers[key] = tokens
                    if isinstance(tokens, list):
                        answers[key + " detokenize"] = _try(llm.detokenize, tokens)
                        answers[key + " detokenize special"] = _try(llm.detokenize, tokens, special=True)
                        if len(tokens) > 1:
                            answers[key + " detokenize after first"] = _try(
                                llm.detokenize, tokens[1:], prev_tokens=tokens[:1])
        n_vocab = llm.n_vocab()
        ids = sorted(set(range(min(PROBE_IDS, n_vocab))) | set(range(max(0, n_vocab - PROBE_IDS), n_vocab)))
        for special in (True, False):
            answers[f"ids special={special}"] = _try(llm.detokenize, ids, special=special)
            answers[f"each id special={special}"] = [_try(llm.detokenize, [i], special=special)
                                                    for i in ids]
        answers["bos/eos"] = [llm.token_bos(), llm.token_eos()]
        out[path] = answers
        llm.close()
    return out

