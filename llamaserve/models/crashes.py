"""Crash history of one base model's worker processes, and the backoff that stops a reload loop.

A model whose worker dies `CRASH_LIMIT` times within `CRASH_WINDOW` seconds is marked failed:
requests get a 503 with Retry-After until its backoff ends, and each further round of crashes
doubles the backoff (up to `MAX_BACKOFF`). A model that has not crashed for `RESET_AFTER`
seconds starts again from `BASE_BACKOFF`.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

CRASH_LIMIT = 3
CRASH_WINDOW = 60.0
BASE_BACKOFF = 10.0
MAX_BACKOFF = 600.0
RESET_AFTER = 600.0


@dataclass
class CrashRecord:
    crashes: int = 0
    restarts: int = 0
    last_reason: str | None = None
    last_cause: str | None = None
    last_at: float | None = None            # wall-clock time of the last crash
    failed_until: float = 0.0               # monotonic time the backoff ends
    backoff: float = BASE_BACKOFF
    pending_restart: bool = False           # the next successful load is a restart
    _recent: deque[float] = field(default_factory=deque)
    _last_mono: float | None = None

    def crashed(self, reason: str, cause: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._last_mono is not None and now - self._last_mono > RESET_AFTER:
            self.backoff = BASE_BACKOFF
        self.crashes += 1
        self.last_reason, self.last_cause, self.last_at, self._last_mono = reason, cause, time.time(), now
        self._recent.append(now)
        while self._recent and now - self._recent[0] > CRASH_WINDOW:
            self._recent.popleft()
        if len(self._recent) >= CRASH_LIMIT:
            self.failed_until = now + self.backoff
            self.backoff = min(self.backoff * 2, MAX_BACKOFF)
            self._recent.clear()

    def retry_after(self, now: float | None = None) -> float | None:
        """Seconds left of the backoff, or None when the model may load."""
        left = self.failed_until - (time.monotonic() if now is None else now)
        return left if left > 0 else None

    def as_dict(self) -> dict:
        return {"crashes": self.crashes, "restarts": self.restarts,
                "last_crash": None if self.last_at is None else {
                    "reason": self.last_reason, "cause": self.last_cause, "at": round(self.last_at, 3)}}


__all__ = ["BASE_BACKOFF", "CRASH_LIMIT", "CRASH_WINDOW", "CrashRecord"]
