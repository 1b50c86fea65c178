"""Turn generated tokens into text safely for streaming.

Tokens can end in the middle of a UTF-8 character, and a stop string can span several tokens.
`TextStream` only releases text that is complete and cannot be the start of a stop string, so
a client never sees broken characters or any part of a stop string.
"""

from __future__ import annotations

import codecs


class TextStream:
    """Accumulates token bytes; `push` returns text safe to emit, `stopped` tells if a stop hit."""

    def __init__(self, stop: list[str] | None = None) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = [s for s in (stop or []) if s]
        self._longest_stop = max((len(s) for s in self._stops), default=0)
        self._pending = ""          # decoded text not yet released
        self.text = ""              # everything released so far
        self.stopped = False
        self.matched: str | None = None     # the stop string that was hit

    def push(self, data: bytes) -> str:
        """Feed one token's bytes; return the newly releasable text ('' if held back)."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(data)
        return self._release(final=False)

    def finish(self) -> str:
        """Flush at the end of generation (incomplete bytes become U+FFFD)."""
        if not self.stopped:
            self._pending += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        # Held-back text guarantees that a stop string can only start inside `_pending`.
        hits = [(i, s) for i, s in ((self._pending.find(s), s) for s in self._stops) if i >= 0]
        if hits:
            first, self.matched = min(hits, key=lambda hit: hit[0])
            out = self._pending[:first]
            self.stopped = True
            self._pending = ""
            self.text += out
            return out
        keep = 0 if final else self._held_back()
        out = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep:]
        self.text += out
        return out

    def _held_back(self) -> int:
        """Length of the longest tail of pending text that could begin a stop string."""
        tail = self._pending
        for n in range(min(len(tail), self._longest_stop - 1), 0, -1):
            piece = tail[-n:]
            if any(s.startswith(piece) for s in self._stops):
                return n
        return 0
