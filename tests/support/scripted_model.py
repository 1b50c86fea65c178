"""A generated GGUF model whose answers are scripted: at given positions it writes given texts.

Tool-call tests need a model that writes a tool call in a template's own format, and random weights
almost never do (llama.cpp's tool-call grammars allow free text before a call, even for tool_choice
required). This model is GPT-2 shaped with every attention and feed-forward weight zero, so the
hidden state at position p is its position embedding alone and the next token depends on the
position only: position embeddings are one-hot on one slot per scripted position, and the output
matrix maps that slot to the token scripted there. Everywhere else the embedding is zero and the
logits are flat (greedy takes token 0).

The vocabulary is byte-level (GPT-2's byte-to-unicode alphabet, no merges that text can use), so a
text's tokens are its UTF-8 bytes, and `<|endoftext|>` ends an answer as a real model's end-of-turn
token does. A test renders each prompt the server will see (llamacore.chat.prompt.chat_prompt with
this model), and scripts each answer at the position after it: `Script.answer(prompt_tokens, text)`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

N_EMBD = 512            # scripted positions one model can hold
N_CTX_TRAIN = 4096
EOS = "<|endoftext|>"


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


TOKENS = [*byte_alphabet(), "ĀĀ", EOS]     # "ĀĀ" (two NUL bytes) only exists to make the merge list non-empty
EOS_ID = len(TOKENS) - 1


@dataclass
class Script:
    """Token ids by the position whose logits choose them."""

    at: dict[int, int] = field(default_factory=dict)

    def answer(self, prompt_tokens: int, text: str) -> None:
        """After a prompt of `prompt_tokens` tokens the model writes `text`, then its end-of-turn token."""
        for i, token in enumerate([*text.encode(), EOS_ID]):
            position = prompt_tokens - 1 + i
            if self.at.get(position, token) != token:
                raise ValueError(f"position {position} is scripted twice: answers overlap")
            self.at[position] = token


def write_scripted_model(path: str | os.PathLike[str], script: Script | None = None) -> Path:
    """Write the model for `script` (no script: a model that only tokenizes meaningfully)."""
    path = Path(path)
    at = (script or Script()).at
    if len(at) > N_EMBD or any(p >= N_CTX_TRAIN for p in at):
        raise ValueError(f"a script holds at most {N_EMBD} positions below {N_CTX_TRAIN}")
    n_vocab, n_ff = len(TOKENS), 16
    w = gguf.GGUFWriter(path, "gpt2")
    w.add_name("scripted")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(1)
    w.add_head_count(4)
    w.add_layer_norm_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(TOKENS)
    w.add_token_types([gguf.TokenType.NORMAL] * (n_vocab - 1) + [gguf.TokenType.CONTROL])
    w.add_token_merges(["Ā Ā"])
    w.add_bos_token_id(EOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(False)

    position = np.zeros((N_CTX_TRAIN, N_EMBD), dtype=np.float32)
    output = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    for slot, (p, token) in enumerate(sorted(at.items())):
        position[p, slot] = 1.0
        output[token, slot] = 1.0

    def zeros(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=np.float32)

    w.add_tensor("token_embd.weight", zeros(n_vocab, N_EMBD))
    w.add_tensor("position_embd.weight", position)
    for name, n in (("attn_norm", N_EMBD), ("ffn_norm", N_EMBD)):
        w.add_tensor(f"blk.0.{name}.weight", np.ones(n, dtype=np.float32))
        w.add_tensor(f"blk.0.{name}.bias", zeros(n))
    for name, (n_out, n_in) in {"attn_qkv": (3 * N_EMBD, N_EMBD), "attn_output": (N_EMBD, N_EMBD),
                                "ffn_up": (n_ff, N_EMBD), "ffn_down": (N_EMBD, n_ff)}.items():
        w.add_tensor(f"blk.0.{name}.weight", zeros(n_out, n_in))
        w.add_tensor(f"blk.0.{name}.bias", zeros(n_out))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output_norm.bias", zeros(N_EMBD))
    w.add_tensor("output.weight", output)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


__all__ = ["EOS", "EOS_ID", "N_EMBD", "Script", "write_scripted_model"]
