"""The prompt-prefix reuse rule shared by `Llama` and the server's scheduler.

A new prompt may reuse the KV entries of the longest common token prefix with what a sequence
already holds, except its last token: that one is always decoded again, so there are fresh
logits to sample from. And only when those entries were computed with the same LoRA adapters
at the same scales: the `AdapterKey` of the set is compared.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

AdapterKey = tuple[tuple[str, float], ...]     # ((adapter path, scale), ...) with scale != 0, sorted


def adapter_key(scales: Mapping[str, float] | Iterable[tuple[str | os.PathLike[str], float]]) -> AdapterKey:
    """The canonical key of an adapter set: zero scales dropped, sorted by path."""
    items = scales.items() if isinstance(scales, Mapping) else scales
    return tuple(sorted((os.fspath(p), float(s)) for p, s in items if float(s) != 0.0))


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reusable_prefix(cached: Sequence[int], tokens: Sequence[int]) -> int:
    """How many cached tokens a prompt of `tokens` can keep (never all of a non-empty prompt)."""
    return max(0, min(common_prefix(cached, tokens), len(tokens) - 1))
