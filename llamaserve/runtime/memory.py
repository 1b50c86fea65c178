"""The server process's memory: glibc's heap (arenas, trimming after an unload) and the pages of
llama.cpp's code, handed back to the system once no model is loaded."""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys

from llamacore import Model

M_ARENA_MAX = -8     # glibc's mallopt parameter


def limit_heap_arenas(n: int = 2) -> None:
    """Keep glibc to `n` heap arenas (it makes up to 8 per core, one per thread that allocates).

    Models load, reload and unload on varying threads; with many arenas the memory they free sits
    in whichever arena allocated it, and the server's RSS wanders by megabytes with that history.
    Called once, before the server starts threads.
    """
    if (libc := _glibc()) is not None:
        libc.mallopt(M_ARENA_MAX, n)


def collect_and_trim() -> None:
    """Free unreachable objects now (a crashed base's failed requests leave reference cycles
    through their tracebacks) and hand freed heap pages back to the OS."""
    gc.collect()
    _trim_heap()


def _trim_heap() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them in its arenas after a model unloads)."""
    if (libc := _glibc()) is not None:
        libc.malloc_trim(0)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """glibc, for this module's memory calls; None on another C library (nothing to tune then)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if all(hasattr(libc, f) for f in ("malloc_trim", "mallopt", "madvise")) else None


MADV_PAGEOUT = 21    # Linux 5.4+: reclaim these pages now


def release_code_pages() -> None:
    """Hand back the resident pages of llama.cpp's code (the llamacore extension, read-only
    mappings only) once no model is loaded in this process: loading and decoding page in about
    2.5 MiB of it that nothing runs until the next load, when the kernel reads them in again.
    (An older kernel refuses the advice; nothing changes then.)"""
    path = os.path.realpath(sys.modules[Model.__module__].__file__ or "")
    if (libc := _glibc()) is None:
        return
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.readlines()
    except OSError:                          # not Linux
        return
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[5] == path and "w" not in fields[1]:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_PAGEOUT)


__all__ = ["collect_and_trim", "limit_heap_arenas", "release_code_pages"]
