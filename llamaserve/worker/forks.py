"""Starting model workers in milliseconds: a fork server with llamacore already imported.

A new Python process spends ~0.25 s importing llamacore, NumPy and Jinja2 before a model even
starts loading. The server therefore starts one `ForkServer` process (``python -m
llamaserve.worker.forks FD``) that imports all of it once and then forks a worker
(llamaserve.worker.child.main) for each model load; a forked worker shares the imported pages with
the fork server until it writes them. The fork server has no threads (OpenBLAS is held to one,
llama.cpp starts none before a model loads), so forking it is safe.

Control protocol on its socket pair: the server sends one byte with the worker's socket end
attached (SCM_RIGHTS); the fork server answers ("spawned", pid), and ("exited", pid, code) when
a worker ends (code as subprocess reports it: negative for a signal). `ForkedWorker` is the
server's handle, with the part of subprocess.Popen's interface that WorkerProcess uses.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections import deque
from concurrent.futures import Future
from pathlib import Path

from llamaserve.worker.protocol import Exited, ForkReady, FromForkServer, Spawned
from llamaserve.worker.wire import ConnectionClosed, Wire

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


class ForkedWorker:
    """A worker forked by the fork server: pid, wait, poll and kill, as subprocess.Popen has them."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _set_exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class ForkServer:
    """The server's handle on its fork server process (started once, on first use)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1"),
               "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
        if os.environ.get("LLAMASERVE_WORKER_BACKTRACE") != "1":
            env.setdefault("GGML_NO_BACKTRACE", "1")   # see llamaserve.worker.process
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "llamaserve.worker.forks", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.sock = ours
        self._wire = Wire(ours, receives=FromForkServer)
        self._lock = threading.Lock()
        self._waiting: deque[Future] = deque()
        self._workers: dict[int, ForkedWorker] = {}
        self._early_exits: dict[int, int] = {}
        if not isinstance(self._wire.recv(), ForkReady):
            raise RuntimeError("the worker fork server did not start")
        threading.Thread(target=self._read, name="fork-server", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, worker_fd: int) -> ForkedWorker:
        """Fork a worker that serves the socket `worker_fd` (the caller keeps and closes its copy)."""
        done: Future = Future()
        with self._lock:
            self._waiting.append(done)
            socket.send_fds(self.sock, [b"S"], [worker_fd])
        return done.result(timeout=30)

    def _read(self) -> None:
        while True:
            try:
                message = self._wire.recv()
            except ConnectionClosed:
                break
            if isinstance(message, Spawned):
                worker = ForkedWorker(message.pid)
                with self._lock:
                    code = self._early_exits.pop(worker.pid, None)
                    self._workers[worker.pid] = worker
                    done = self._waiting.popleft()
                if code is not None:
                    worker._set_exit(code)
                done.set_result(worker)
            elif isinstance(message, Exited):
                pid, code = message.pid, message.code
                with self._lock:
                    ended = self._workers.pop(pid, None)
                    if ended is None:
                        self._early_exits[pid] = code      # reaped before its "spawned" was read
                if ended is not None:
                    ended._set_exit(code)
        with self._lock:        # the fork server is gone: its workers' ends are unknown
            for worker in self._workers.values():
                worker._set_exit(-signal.SIGKILL)
            for done in self._waiting:
                done.set_exception(RuntimeError("the worker fork server exited"))

    def close(self) -> None:
        self.sock.close()           # the fork server exits when its socket closes
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_server: ForkServer | None = None
_server_lock = threading.Lock()


def fork_server() -> ForkServer:
    """This process's fork server, started on first use (again if it died)."""
    global _server
    with _server_lock:
        if _server is None or not _server.alive:
            _server = ForkServer()
        return _server


# -- the fork server process ------------------------------------------------------------------


def serve(control: socket.socket) -> None:
    """Fork a worker per request until the server closes the control socket."""
    wire = Wire(control)
    wakeup_r, wakeup_w = os.pipe()
    os.set_blocking(wakeup_w, False)
    signal.set_wakeup_fd(wakeup_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)          # wakes select through the wakeup fd
    wire.send(ForkReady())
    while True:
        readable, _, _ = select.select([control.fileno(), wakeup_r], [], [])
        if wakeup_r in readable:
            os.read(wakeup_r, 512)
            _reap(wire)
        if control.fileno() in readable:
            data, fds, _, _ = socket.recv_fds(control, 16, 1)
            if not data:
                return
            pid = os.fork()
            if pid == 0:                                     # the worker
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                control.close()
                os.close(wakeup_r)
                os.close(wakeup_w)
                from llamaserve.worker import child as worker
                sys.stdout.flush()
                os._exit(worker.main([str(fds[0])]))
            os.close(fds[0])
            wire.send(Spawned(pid))


def _reap(wire: Wire) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        wire.send(Exited(pid, os.waitstatus_to_exitcode(status)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C reaches the server; it closes us
    import llamaserve.worker.child  # noqa: F401 -- imported once here, shared by every fork
    # the imported objects go to a generation the collector skips: a worker's collections stay
    # short and do not write (copy) the pages it shares with this process
    gc.collect()
    gc.freeze()
    serve(socket.socket(fileno=int(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
