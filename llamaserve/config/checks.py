"""Helpers that the config checks share (config.py for models, config_adapters.py for adapters).

Problems are collected rather than raised so one pass reports them all; each stays one line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from llamacore.gguf.header import GGUFHeader
from llamaserve.config.discovery import cached_header

# Every character str.splitlines() breaks at, escaped: one problem must stay one line.
LINE_BREAKS = {c: repr(chr(c))[1:-1] for c in (0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)}


# characters a name may not hold: C0 and C1 controls and the Unicode line and paragraph separators
# (a name is logged, and one of these would start a forged log line)
UNSAFE_NAME_CHARS = "\x00-\x1f\x7f-\x9f\u2028\u2029"
UNSAFE_IN_NAME = re.compile(f"[{UNSAFE_NAME_CHARS}]")


class Problems(list):
    """Problem lines, each prefixed with the config's name."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def add(self, key: str, message: str) -> None:
        self.append(f"{self.label}: " + f"{key}: {message}".translate(LINE_BREAKS))


def config_path(text: str, base_dir: Path) -> Path:
    """Absolute and normalised, without resolving symlinks (so names stay the user's)."""
    # os.path.expanduser leaves ~unknown-user as it is; Path.expanduser raises RuntimeError
    return Path(os.path.normpath(base_dir / os.path.expanduser(text)))


def path_is(path: Path, test: Callable[[Path], bool]) -> bool:
    """``path.is_dir()``/``is_file()`` that answers False for names the OS rejects (too long, ...)."""
    try:
        return test(path)
    except OSError:
        return False


def read_gguf(path: Path, key: str, problems: Problems) -> GGUFHeader | None:
    """The GGUF header of a config-named file, or None with the reason added to ``problems``."""
    if not path_is(path, Path.is_file):
        problems.add(key, f"file not found: {path}")
        return None
    try:
        return cached_header(path)
    except (OSError, ValueError) as e:
        problems.add(key, f"{path} is not a readable GGUF file: {e}")
        return None
