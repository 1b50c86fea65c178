"""The server's handle on one model worker process: start, calls, watchdog, memory limit, exit.

`WorkerProcess` starts ``python -m llamaserve.worker.child`` with one end of a socket pair, sends it
what to load and waits for ("ready", info) (blocking: loads run on a thread); then the server's
event loop takes the socket over and handles the worker's frames as they arrive. A monitor
thread reads the worker's RSS (from /proc) and watches its progress: a worker over its
`max_rss` or without a frame for `step_timeout` seconds while it has work is killed with
SIGKILL, so a leak or a hang is stopped with a reason instead of taking the server down with it
(the OOM killer picks the biggest process). Whatever ends the worker, its pending work fails
with WorkerCrashedError and `on_crash(worker)` tells the registry.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from llamacore import Model
from llamaserve.errors import EngineClosedError, WorkerCrashedError
from llamaserve.worker.forks import ForkedWorker, fork_server
from llamaserve.worker.protocol import Call, Close, Load, LoadFailed, Ready, Reply, Step, ToServer, decode_error
from llamaserve.worker.wire import ConnectionClosed, FrameProtocol, Wire

log = logging.getLogger(__name__)

# why a worker ended: killed for max_rss, killed by the watchdog, a signal from elsewhere, an exit
CAUSES = ("max_rss", "hung", "killed", "signal", "exit")
MONITOR_INTERVAL = 0.1     # seconds between RSS and progress checks
_PAGE = os.sysconf("SC_PAGE_SIZE")
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def process_rss(pid: int) -> int | None:
    """Resident memory of `pid` in bytes (None once it has gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


class WorkerProcess:
    """One worker process and the frames it sends; subclasses handle "step" frames and exits.

    Built on a thread other than the event loop's (it blocks while the worker loads); after
    that, frames are read and written on `loop`, and `on_frame`, `on_exit` and `on_crash` run there.
    """

    def __init__(self, spec: dict[str, Any], *, label: str, loop: asyncio.AbstractEventLoop,
                 step_timeout: float | None = None, max_rss: int | None = None,
                 on_crash: Callable[[WorkerProcess], None] | None = None) -> None:
        self.label = label
        self.loop = loop
        self.step_timeout = step_timeout
        self.max_rss = max_rss
        self.on_crash = on_crash     # called on the event loop when a loaded worker dies
        self.crash_reason: str | None = None
        self.rss: int | None = None
        self.crash_cause: str | None = None     # one of CAUSES (a bounded metric label)
        self._kill_reason: str | None = None
        self._kill_cause = "killed"
        self._closing = False
        self._exited = threading.Event()        # the socket closed (the worker is gone or going)
        self._finished = threading.Event()      # ...and its pending work has been failed
        self._calls: dict[int, Future] = {}
        self._call_ids = itertools.count(1)
        self._last_frame = time.monotonic()
        self._transport: asyncio.Transport | None = None
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
        # llama.cpp's abort handler attaches gdb for a backtrace: seconds during which the dead
        # worker's requests wait; the abort message itself still reaches the log
        if os.environ.get("LLAMASERVE_WORKER_BACKTRACE") != "1":
            env.setdefault("GGML_NO_BACKTRACE", "1")
        self.proc: subprocess.Popen | ForkedWorker
        try:
            self.proc = fork_server().spawn(theirs.fileno())
        except (OSError, RuntimeError) as exc:          # no fork server: a fresh interpreter (slower start)
            log.warning("starting a worker without the fork server: %s", exc)
            self.proc = subprocess.Popen([sys.executable, "-m", "llamaserve.worker.child", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.pid = self.proc.pid
        self.wire = Wire(ours, receives=ToServer)
        self._monitor = threading.Thread(target=self._watch, name=f"monitor:{label}", daemon=True)
        self._monitor.start()
        try:
            self.wire.send(Load(spec))
            self.info = self._await_ready()
            if self._over_memory():       # loaded beyond max_rss: never serves
                self._exited.set()
                self._note_exit(self._wait(5))
                raise WorkerCrashedError(f"the worker process {self.crash_reason} while loading", "max_rss")
            self._transport = asyncio.run_coroutine_threadsafe(self._attach(), loop).result()
        except BaseException:
            self._stop_process()
            raise

    def _await_ready(self) -> dict[str, Any]:
        try:
            message = self.wire.recv()
        except ConnectionClosed:
            self._exited.set()
            self._note_exit(self._wait(5))
            raise WorkerCrashedError(f"the worker process {self.crash_reason} while loading",
                                     self.crash_cause or "exit") from None
        if isinstance(message, LoadFailed):
            raise decode_error(message.error)
        if not isinstance(message, Ready):
            raise RuntimeError(f"the worker process answered its load with {type(message).__name__}")
        return message.info

    async def _attach(self) -> asyncio.Transport:
        protocol = FrameProtocol(self._on_message, self._on_lost, self.wire.leftover(), receives=ToServer)
        transport, _ = await self.loop.create_unix_connection(lambda: protocol, sock=self.wire.sock)
        return transport

    def _send(self, frame: bytes) -> None:
        """Write a frame (from any thread; the write happens on the loop and never blocks)."""
        def write() -> None:
            if self._transport is not None and not self._transport.is_closing():
                self._transport.write(frame)
        if _running_loop() is self.loop:
            write()
        else:
            self.loop.call_soon_threadsafe(write)

    def _vocab(self, path: str, load_kwargs: dict[str, Any]) -> Model:
        """The model's tokenizer and metadata without its weights (what the server process needs);
        the worker is closed if it cannot be read."""
        try:
            return Model(path, vocab_only=True, **{k: v for k, v in load_kwargs.items() if k == "kv_overrides"})
        except BaseException:
            self.close()
            raise

    def memory_bytes(self) -> int:
        """What the worker reported its model and context take."""
        return int(self.info["memory_bytes"])

    # -- calls -------------------------------------------------------------------------------

    def call_async(self, name: str, *args: Any) -> Future:
        """Run `name(*args)` in the worker; the future holds its result or its error."""
        done: Future = Future()
        if self._exited.is_set() or self._closing:
            done.set_exception(self._gone_error())
            return done
        cid = next(self._call_ids)
        frame = self.wire.encode(Call(cid, name, list(args)))     # ValueError for what cannot cross
        if not self._calls:
            self._last_frame = time.monotonic()   # the watchdog measures this work from now
        self._calls[cid] = done
        self._send(frame)
        return done

    def call(self, name: str, *args: Any) -> Any:
        """`call_async` and wait: never on the event loop's thread (the reply is read there)."""
        return self.call_async(name, *args).result()

    def has_work(self) -> bool:
        return bool(self._calls)

    def _gone_error(self) -> Exception:
        if self.crash_reason is not None:
            return WorkerCrashedError(f"model '{self.label}' stopped: its worker process {self.crash_reason}",
                                      self.crash_cause or "exit")
        return EngineClosedError("model was unloaded")

    # -- frames (on the event loop) ----------------------------------------------------------

    def _on_message(self, message: ToServer) -> None:
        self._last_frame = time.monotonic()
        if isinstance(message, Step):
            self.on_step(message)
        elif isinstance(message, Reply):
            done = self._calls.pop(message.cid, None)
            if done is not None:
                if message.ok:
                    done.set_result(message.value)
                else:
                    done.set_exception(decode_error(message.value))

    def _on_lost(self) -> None:
        self._exited.set()
        returncode = self.proc.poll()
        if returncode is None:          # the socket closed first; the exit status follows at once
            self.loop.run_in_executor(None, self._wait, 5).add_done_callback(
                lambda f: self._finish(f.result()))
        else:
            self._finish(returncode)

    def _finish(self, returncode: int | None) -> None:
        if not self._closing:
            self._note_exit(returncode)
            log.error("model '%s': its worker process (pid %d) %s", self.label, self.pid, self.crash_reason)
        error = self._gone_error()
        calls, self._calls = self._calls, {}
        for done in calls.values():
            done.set_exception(error)
        self.on_exit(error)
        self._finished.set()
        callback, self.on_crash = self.on_crash, None       # once; and no cycle back to the registry's state
        if self.crash_reason is not None and callback is not None:
            callback(self)

    def _note_exit(self, returncode: int | None) -> None:
        self.crash_reason = self._kill_reason or describe_exit(returncode)
        self.crash_cause = self._kill_cause if self._kill_reason else (
            "signal" if returncode is not None and returncode < 0 else "exit")

    def on_step(self, step: Step) -> None:
        """A step's frame from the worker: its events and counters."""

    def on_exit(self, error: Exception) -> None:
        """The worker is gone: fail whatever still waits on it with `error`."""

    # -- watchdog ----------------------------------------------------------------------------

    def _over_memory(self) -> bool:
        """Read the worker's RSS; past max_rss, kill it (True)."""
        self.rss = process_rss(self.pid)
        if self.max_rss is not None and self.rss is not None and self.rss > self.max_rss:
            self.kill(f"used {self.rss / 2**20:.0f} MiB of memory, over its max_rss of "
                      f"{self.max_rss / 2**20:.0f} MiB, and was stopped", "max_rss")
            return True
        return False

    def _watch(self) -> None:
        while not self._exited.wait(MONITOR_INTERVAL):
            if self._over_memory():
                continue
            if self.step_timeout is not None and self.has_work() and not self._closing \
                    and time.monotonic() - self._last_frame > self.step_timeout:
                self.kill(f"made no progress for {self.step_timeout:g} s (step_timeout) and was killed", "hung")

    def kill(self, reason: str, cause: str = "killed") -> None:
        """Stop the worker at once (SIGKILL); its pending work fails with `reason`."""
        if self._kill_reason is None and not self._exited.is_set():
            self._kill_reason, self._kill_cause = reason, cause
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    # -- end ---------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return not self._exited.is_set()

    def close(self, timeout: float = 10.0) -> None:
        """Ask the worker to finish and exit (it fails what it still runs); kill it after `timeout`.
        Blocks: call it off the event loop."""
        self._closing = True
        if self.alive:
            self._send(self.wire.encode(Close()))
        self._wait(timeout)
        self._finished.wait(timeout)

    def _stop_process(self, timeout: float = 5.0) -> None:
        """A worker that never came up: end it and close the socket."""
        self._closing = True
        self._wait(timeout)
        self._exited.set()
        self.wire.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


__all__ = ["CAUSES", "WorkerProcess", "describe_exit", "process_rss"]
