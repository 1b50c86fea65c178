"""Child interpreters for calls that could abort the process (GGML_ASSERT, SIGABRT, segfaults).

A crash in a child is a negative return code in the test, never a dead pytest.

- `run_cases(setup, cases)` runs many named cases in one child and reports, per case, the
  exception it raised or the value it returned. A child that dies is restarted after the case
  that killed it, so that case alone fails (named, with the signal and the output tail) and
  the cases after it still run.
- `run_python(code)` runs one snippet; `run_child(argv)` runs ``python ARGV`` (a module, a CLI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from helpers import N_THREADS, REPO_ROOT, describe


def child_env(drop_prefix: str | None = None, **overrides: str) -> dict[str, str]:
    """The environment of a child: the checkout on PYTHONPATH, few OpenMP threads, no backtraces."""
    env = {k: v for k, v in os.environ.items() if not (drop_prefix and k.startswith(drop_prefix))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", str(N_THREADS))
    env.setdefault("GGML_NO_BACKTRACE", "1")  # an abort should not spend seconds attaching gdb
    env.update(overrides)
    return env


def run_child(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess:
    """``python ARGV`` in a fresh interpreter (cwd = repo root); returns the CompletedProcess."""
    return subprocess.run([sys.executable, *argv], check=False, cwd=cwd or REPO_ROOT,
                          env=env if env is not None else child_env(), capture_output=True, text=True,
                          timeout=timeout)


def run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run Python `code` (dedented) in a fresh interpreter and return the CompletedProcess."""
    return run_child(["-c", textwrap.dedent(code)], timeout=timeout)


# -- many cases in one child, restarted after a crash -----------------------------------------

MARK = "@@case "

_RUNNER = f'''
import json as _json, sys as _sys

def _emit(obj):
    print({MARK!r} + _json.dumps(obj, default=repr), flush=True)

def _run(names):
    for name in names:
        _emit({{"begin": name}})
        try:
            value = _CASES[name]()
        except BaseException as e:
            _emit({{"name": name, "exc": type(e).__name__, "msg": str(e).replace("\\n", " ")[:500]}})
        else:
            _emit({{"name": name, "value": value}})
'''


@dataclass
class Outcome:
    """What one case did: raised `exc` (type name) with `msg`, returned `value`, or killed the child."""

    name: str
    exc: str | None = None
    msg: str = ""
    value: Any = None
    crash: str | None = None

    def __str__(self) -> str:
        if self.crash:
            return f"killed the child: {self.crash}"
        return f"{self.exc}: {self.msg}" if self.exc else f"no exception (returned {self.value!r})"


@dataclass
class CaseRun:
    """The outcome of every case, and each child process that ran some of them."""

    outcomes: dict[str, Outcome]
    procs: list[subprocess.CompletedProcess] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)   # children that failed outside any case

    def __getitem__(self, name: str) -> Outcome:
        return self.outcomes[name]

    def crashes(self) -> dict[str, str]:
        return {n: o.crash for n, o in self.outcomes.items() if o.crash}

    def expect(self, name: str, exc: type[BaseException] | str, match: str | None = None) -> None:
        """Case `name` raised exactly `exc` (a type or its name) with `match` in its message (any case)."""
        exc = exc if isinstance(exc, str) else exc.__name__
        o = self.outcomes[name]
        assert o.crash is None, f"case {name!r} {o}"
        assert o.exc == exc, f"case {name!r}: expected {exc}, got {o}"
        if match:
            assert match.lower() in o.msg.lower(), f"case {name!r}: {o.msg!r} lacks {match!r}"

    def expect_case(self, name: str, case: Case) -> None:
        self.expect(name, case.raises, case.match)


class Case(NamedTuple):
    """One row of a table of cases: what to run, the exception it must raise, part of its message."""

    stmt: str                       # a function body run in the child after the table's setup
    raises: type[BaseException]     # the exact exception type (compared by name)
    match: str | None = None        # a fragment of its message (case-insensitive)


def run_table(setup: str, table: Mapping[str, Case], timeout: float = 300) -> CaseRun:
    """run_cases over the statements of a table; check each row with `run.expect_case(name, case)`."""
    return run_cases(setup, {name: case.stmt for name, case in table.items()}, timeout)


def _script(setup: str, cases: Mapping[str, str]) -> str:
    body = [_RUNNER, textwrap.dedent(setup), "_CASES = {}"]
    for i, (name, stmt) in enumerate(cases.items()):
        body.append(f"def _case_{i}():\n" + textwrap.indent(textwrap.dedent(stmt).strip(), "    "))
        body.append(f"_CASES[{name!r}] = _case_{i}")
    body.append("_run(_json.loads(_sys.argv[1]))")
    return "\n".join(body)


def run_cases(setup: str, cases: Mapping[str, str], timeout: float = 300) -> CaseRun:
    """Run each case (the body of a function: statements, `return` for a value) after `setup`.

    All cases share one child while it lives; a child that dies (or runs past `timeout`) in a
    case marks that case as the crash and a new child carries on with the ones after it.
    """
    script = _script(setup, cases)
    run = CaseRun({})
    todo = list(cases)
    while todo:
        proc = subprocess.Popen([sys.executable, "-c", script, json.dumps(todo)], cwd=REPO_ROOT,
                                env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            timed_out = True
        done = subprocess.CompletedProcess(proc.args[:2], proc.returncode, out, err)
        run.procs.append(done)
        current = None
        for line in out.splitlines():
            if not line.startswith(MARK):
                continue
            msg = json.loads(line[len(MARK):])
            if "begin" in msg:
                current = msg["begin"]
            else:
                run.outcomes[msg["name"]] = Outcome(msg["name"], msg.get("exc"), msg.get("msg", ""),
                                                    msg.get("value"))
                current = None
        why = f"timed out after {timeout:g} s; " if timed_out else ""
        if current is not None:
            run.outcomes[current] = Outcome(current, crash=why + describe(done))
        elif timed_out or proc.returncode != 0 or any(n not in run.outcomes for n in todo):
            # died in the setup, between cases or at exit: the cases not run yet fail with the reason
            run.stray.append(why + describe(done))
            for name in todo:
                run.outcomes.setdefault(name, Outcome(name, crash="child failed outside a case; " + run.stray[-1]))
        todo = [n for n in todo if n not in run.outcomes]
    return run
