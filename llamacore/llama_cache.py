"""llama-cpp-python's prompt caches (`Llama.set_cache`) and `LlamaState`.

A cache maps the tokens a context holds to a saved state of that context. Looking a prompt up
returns the state whose key shares the longest token prefix with it (at least one token), so a
completion whose prompt starts like an earlier one can start from that one's KV entries. Both caches
have a byte capacity; storing past it drops the least recently used states until the rest fit.

`LlamaDiskCache` keeps its states in an SQLite file (stdlib only; llama-cpp-python uses the
`diskcache` package), so states survive the process and are shared by caches opened on the same
directory.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from llamacore.generation.kv_reuse import common_prefix

__all__ = ["BaseLlamaCache", "LlamaCache", "LlamaDiskCache", "LlamaRAMCache", "LlamaState", "longest_token_prefix"]

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 2 << 30                       # 2 GiB, as llama-cpp-python's


def longest_token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share (llama-cpp-python's `Llama.longest_token_prefix`)."""
    return common_prefix(a, b)


class LlamaState:
    """A saved context: llama.cpp's state bytes and the tokens they hold.

    The fields and constructor are llama-cpp-python's: `input_ids` (the tokens, intc), `scores` (one
    row of logits per token kept, float32: every token's with `logits_all`, else the last token's),
    `n_tokens`, `llama_state` (the bytes), `llama_state_size` (their length) and `seed`.
    `adapter_key` says which LoRA adapters (and scales) the KV entries were computed with.
    """

    def __init__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single], n_tokens: int,
                 llama_state: bytes, llama_state_size: int, seed: int | None,
                 adapter_key: tuple = ()) -> None:
        self.input_ids = input_ids
        self.scores = scores
        self.n_tokens = n_tokens
        self.llama_state = llama_state
        self.llama_state_size = llama_state_size
        self.seed = seed
        self.adapter_key = adapter_key

    @property
    def tokens(self) -> list[int]:
        """The tokens the state holds, as a list."""
        return [int(t) for t in self.input_ids[:self.n_tokens]]

    # llamacore's Llama.save_state used to return {"state": bytes, "tokens": [...], "key": adapters};
    # reading a LlamaState under those names keeps code written against that form working.
    _LEGACY = {"state": "llama_state", "tokens": "tokens", "key": "adapter_key"}

    def __getitem__(self, name: str) -> Any:
        try:
            return getattr(self, self._LEGACY[name])
        except KeyError:
            raise KeyError(name) from None

    @classmethod
    def from_dict(cls, state: dict[str, Any], n_vocab: int = 0, seed: int | None = None) -> LlamaState:
        """A LlamaState from the old dict form of `Llama.save_state` (no scores were saved)."""
        data = bytes(state["state"])
        tokens = _token_array([int(t) for t in state["tokens"]])
        return cls(tokens, np.zeros((0, n_vocab), dtype=np.single), len(tokens), data, len(data), seed,
                   tuple(tuple(item) for item in state.get("key", ())))

    def __repr__(self) -> str:
        return f"LlamaState(n_tokens={self.n_tokens}, llama_state_size={self.llama_state_size}, seed={self.seed})"


def capture_state(llm: Any) -> LlamaState:
    """`Llama.save_state`: the context's state, its tokens and the logits of its last token."""
    data = llm.ctx.save_state()
    tokens = _token_array(llm._cached)
    scores = np.zeros((0, llm.model.n_vocab), dtype=np.single)
    kept = getattr(llm, "_scores", None) if getattr(llm, "logits_all", False) else None
    if kept is not None:                # logits_all: a row per token, as llama-cpp-python saves them
        scores = kept[:len(tokens)].copy()
    elif len(tokens):
        try:
            scores = llm.ctx.logits(-1).copy()[None, :]
        except IndexError:              # the last decode produced no logits (e.g. a state just loaded)
            pass
    return LlamaState(tokens, scores, len(tokens), data, len(data), llm.seed, tuple(llm._cache_key))


_INTC = np.iinfo(np.intc)


def _token_array(tokens: Sequence[int]) -> npt.NDArray[Any]:
    """The tokens as an intc array; as Python ints (dtype object) when a prompt's image placeholders
    (llamacore.vision.prompt: far below any intc) are among them, so that no id changes."""
    if all(_INTC.min <= t <= _INTC.max for t in tokens):
        return np.asarray(tokens, dtype=np.intc)
    return np.asarray([int(t) for t in tokens], dtype=object)


def _fits_int64(tokens: Iterable[int]) -> bool:
    return all(-(1 << 63) <= int(t) < (1 << 63) for t in tokens)


def restore_state(llm: Any, state: LlamaState | dict[str, Any]) -> None:
    """`Llama.load_state`: a LlamaState, or the dict form older llamacore versions saved."""
    if isinstance(state, dict):
        state = LlamaState.from_dict(state, llm.model.n_vocab, llm.seed)
    llm.ctx.load_state(memoryview(state.llama_state)[:state.llama_state_size])
    llm._cached = state.tokens
    kept = getattr(llm, "_scores", None) if getattr(llm, "logits_all", False) else None
    if kept is not None and state.scores.ndim == 2 and state.scores.shape[0] == state.n_tokens <= len(kept):
        kept[:state.n_tokens] = state.scores
    llm._cache_key = tuple(state.adapter_key)
    llm.seed = state.seed


class BaseLlamaCache(ABC):
    """A map from token sequences to LlamaStates, looked up by longest common prefix."""

    def __init__(self, capacity_bytes: int = DEFAULT_CAPACITY) -> None:
        self.capacity_bytes = capacity_bytes

    @property
    @abstractmethod
    def cache_size(self) -> int:
        """Bytes the stored states take."""

    def _find_longest_prefix_key(self, key: tuple[int, ...]) -> tuple[int, ...] | None:
        """The stored key sharing the most leading tokens with `key` (None when none shares one)."""
        best, best_len = None, 0
        for candidate in self._keys():
            n = longest_token_prefix(candidate, key)
            if n > best_len:
                best, best_len = candidate, n
        return best

    def _keys(self) -> Iterable[tuple[int, ...]]:
        return ()

    @abstractmethod
    def __getitem__(self, key: Sequence[int]) -> LlamaState: ...

    @abstractmethod
    def __contains__(self, key: Sequence[int]) -> bool: ...

    @abstractmethod
    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None: ...


class LlamaRAMCache(BaseLlamaCache):
    """States in memory, least recently used dropped first; the size is the states' byte count."""

    def __init__(self, capacity_bytes: int = DEFAULT_CAPACITY) -> None:
        super().__init__(capacity_bytes)
        self.cache_state: OrderedDict[tuple[int, ...], LlamaState] = OrderedDict()
        self._size = 0

    @property
    def cache_size(self) -> int:
        return self._size

    def _keys(self) -> Iterable[tuple[int, ...]]:
        return self.cache_state.keys()

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        found = self._find_longest_prefix_key(tuple(key))
        if found is None:
            raise KeyError("no cached state shares a prefix with the key")
        self.cache_state.move_to_end(found)
        return self.cache_state[found]

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._find_longest_prefix_key(tuple(key)) is not None

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        key = tuple(key)
        old = self.cache_state.pop(key, None)
        if old is not None:
            self._size -= old.llama_state_size
        self.cache_state[key] = value
        self._size += value.llama_state_size
        while self._size > self.capacity_bytes and self.cache_state:
            _, dropped = self.cache_state.popitem(last=False)
            self._size -= dropped.llama_state_size


LlamaCache = LlamaRAMCache            # llama-cpp-python's older name


def _pack_tokens(tokens: Sequence[int]) -> bytes:
    return np.asarray(tokens, dtype="<i8").tobytes()


def _unpack_tokens(data: bytes) -> tuple[int, ...]:
    return tuple(int(t) for t in np.frombuffer(data, dtype="<i8"))


class LlamaDiskCache(BaseLlamaCache):
    """States in an SQLite database under `cache_dir`; the size is the bytes stored for them.

    Each state is stored field by field (no pickling), so only LlamaStates can be stored and a
    cache file cannot run code when read. Several caches (and processes) may use one directory.
    """

    FILE_NAME = "llamacore-states.sqlite3"

    def __init__(self, cache_dir: str | os.PathLike[str] = ".cache/llama_cache",
                 capacity_bytes: int = DEFAULT_CAPACITY) -> None:
        super().__init__(capacity_bytes)
        self.cache_dir = os.fspath(cache_dir)
        os.makedirs(self.cache_dir, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(os.path.join(self.cache_dir, self.FILE_NAME), timeout=30,
                                   check_same_thread=False, isolation_level=None)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS states (key BLOB PRIMARY KEY, input_ids BLOB NOT NULL, "
            "scores BLOB NOT NULL, n_vocab INTEGER NOT NULL, n_tokens INTEGER NOT NULL, "
            "llama_state BLOB NOT NULL, seed INTEGER, adapter_key TEXT NOT NULL, "
            "size INTEGER NOT NULL, used INTEGER NOT NULL)")

    def close(self) -> None:
        self._db.close()

    @property
    def cache_size(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COALESCE(SUM(size), 0) FROM states").fetchone()[0])

    def _keys(self) -> Iterable[tuple[int, ...]]:
        with self._lock:
            rows = self._db.execute("SELECT key FROM states").fetchall()
        return [_unpack_tokens(row[0]) for row in rows]

    def _touch(self, packed: bytes) -> None:
        self._db.execute("UPDATE states SET used = (SELECT COALESCE(MAX(used), 0) + 1 FROM states) WHERE key = ?",
                         (packed,))

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        found = self._find_longest_prefix_key(tuple(key))
        if found is None:
            raise KeyError("no cached state shares a prefix with the key")
        packed = _pack_tokens(found)
        with self._lock:
            row = self._db.execute("SELECT input_ids, scores, n_vocab, n_tokens, llama_state, seed, adapter_key "
                                   "FROM states WHERE key = ?", (packed,)).fetchone()
            if row is None:                     # dropped by another cache on this directory meanwhile
                raise KeyError("no cached state shares a prefix with the key")
            self._touch(packed)
        input_ids, scores, n_vocab, n_tokens, data, seed, adapters = row
        rows = np.frombuffer(scores, dtype="<f4").astype(np.single).reshape(-1, n_vocab) if n_vocab else \
            np.zeros((0, 0), dtype=np.single)
        return LlamaState(_token_array(np.frombuffer(input_ids, dtype="<i8").tolist()), rows, n_tokens, bytes(data),
                          len(data), seed, _adapter_key_from_text(adapters))

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._find_longest_prefix_key(tuple(key)) is not None

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        if not (_fits_int64(key) and _fits_int64(value.input_ids)):
            log.debug("LlamaDiskCache: a state of a prompt with images is not stored")
            return
        packed = _pack_tokens(tuple(key))
        scores = np.asarray(value.scores, dtype="<f4")
        n_vocab = scores.shape[-1] if scores.ndim == 2 else scores.size
        data = bytes(value.llama_state[:value.llama_state_size])
        input_ids = np.asarray(value.input_ids, dtype="<i8").tobytes()
        score_bytes = scores.tobytes()
        size = len(data) + len(input_ids) + len(score_bytes) + len(packed)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO states VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
                    "(SELECT COALESCE(MAX(used), 0) + 1 FROM states))",
                    (packed, input_ids, score_bytes, n_vocab, int(value.n_tokens), data,
                     None if value.seed is None else int(value.seed),
                     json.dumps([list(item) for item in value.adapter_key]), size))
                total = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM states").fetchone()[0]
                while total > self.capacity_bytes:
                    oldest = self._db.execute("SELECT key, size FROM states ORDER BY used LIMIT 1").fetchone()
                    if oldest is None:
                        break
                    self._db.execute("DELETE FROM states WHERE key = ?", (oldest[0],))
                    total -= oldest[1]
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise


def _adapter_key_from_text(text: str) -> tuple:
    """The adapter key, stored as JSON [[path, scale], ...]."""
    return tuple((str(path), float(scale)) for path, scale in json.loads(text))
