"""Ask llama.cpp's own grammar engine whether a GBNF grammar accepts a text, and sample from it.

`GrammarProbe.accepts` feeds the text one character at a time (single-character tokens, else the
vocabulary's byte tokens) into a real grammar sampler; `generate` samples complete outputs from a
random-weight model under the grammar, several sequences per decode.
"""

from __future__ import annotations

import llamacore


class GrammarProbe:
    def __init__(self, model: llamacore.Model) -> None:
        self.model = model
        self.char_token: dict[bytes, int] = {}
        for tok in range(model.n_vocab):
            piece = model.token_to_piece(tok, True)
            if piece and (len(piece) == 1 or len(piece.decode("utf-8", "ignore")) == 1):
                self.char_token.setdefault(piece, tok)

    def tokens(self, text: str) -> list[int]:
        out = []
        for ch in text:
            raw = ch.encode()
            if raw in self.char_token:
                out.append(self.char_token[raw])
            else:
                out.extend(self.char_token[bytes([b])] for b in raw)
        return out

    def accepts(self, grammar: str, text: str) -> bool:
        """Whether ``text`` is a complete sentence of ``grammar`` (ValueError if it does not parse)."""
        sampler = llamacore.Sampler().grammar(self.model, grammar)
        try:
            for tok in self.tokens(text):
                sampler.accept(tok)
            sampler.accept(self.model.token_eos)
        except ValueError:
            return False
        return True

    def closing_bias(self, bias: float) -> dict[int, float]:
        """Logit bias toward tokens that end strings, arrays and objects (so random outputs finish),
        and against the vocabulary's lone non-ASCII byte tokens: llama.cpp's grammar engine reads
        the bytes after a lead byte as continuation bytes whatever they are, so a random model could
        emit invalid UTF-8 that the grammar took for an allowed character."""
        out = {tok: -1e9 for piece, tok in self.char_token.items() if len(piece) == 1 and piece[0] >= 0x80}
        out.update({self.char_token[c]: bias for c in (b'"', b"]", b"}") if c in self.char_token})
        return out


def generate(model: llamacore.Model, grammar: str, seeds: list[int], *, max_tokens: int = 160,
             bias: dict[int, float] | None = None, temperature: float = 1.0,
             n_threads: int = 2) -> list[str | None]:
    """One output per seed under ``grammar``: the text, or None where it did not finish in time."""
    n = len(seeds)
    ctx = llamacore.Context(model, n_ctx=(max_tokens + 8) * n, n_batch=max(64, n), n_seq_max=n,
                            n_threads=n_threads, kv_unified=True)
    samplers = []
    for seed in seeds:
        s = llamacore.Sampler()
        if bias:
            s.logit_bias(model, bias)
        samplers.append(s.grammar(model, grammar).temp(temperature).dist(seed))
    prompt = model.tokenize("JSON:")
    batch = llamacore.Batch(max(len(prompt), 1) * n, n_seq_max=n)
    for seq in range(n):
        batch.add_sequence(prompt, 0, seq)
    ctx.decode(batch)
    rows = {seq: r for seq, r in enumerate(batch.output_indices())}
    outputs: list[list[int]] = [[] for _ in seeds]
    done: list[bool] = [False] * n
    for step in range(max_tokens):
        live = [seq for seq in range(n) if not done[seq]]
        if not live:
            break
        batch = llamacore.Batch(len(live), n_seq_max=n)
        for seq in live:
            tok = samplers[seq].sample(ctx, rows[seq])
            if model.is_eog(tok):
                done[seq] = True
                continue
            outputs[seq].append(tok)
            batch.add(tok, len(prompt) + step, seq, True)
        if not len(batch):
            break
        ctx.decode(batch)
        rows = {seq: r for seq, r in zip([s for s in live if not done[s]], batch.output_indices(), strict=True)}
    return [b"".join(model.token_to_piece(t) for t in out).decode("utf-8") if done[i] else None
            for i, out in enumerate(outputs)]
