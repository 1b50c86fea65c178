"""The child-process harness itself: crashes become failures that name the case, never a dead pytest."""

from __future__ import annotations

import pytest
from helpers import describe
from isolation import run_cases, run_python


def test_run_python_reports_abort():
    """A child that aborts shows up as a negative return code."""
    proc = run_python("import os; os.abort()")
    assert proc.returncode < 0
    assert "signal" in describe(proc)


def test_run_cases_restarts_after_the_case_that_killed_the_child():
    run = run_cases("import os\nBASE = 40\n", {
        "value": "return BASE + 2",
        "raises": "raise ValueError('bad\\ninput')",
        "aborts": "os.abort()",
        "after_abort": "return 'still running'",
        "exits": "os._exit(3)",
        "last": "int('x')",
    })
    assert run["value"].value == 42 and run["value"].exc is None
    assert (run["raises"].exc, run["raises"].msg) == ("ValueError", "bad input")
    assert "killed by signal 6" in run["aborts"].crash
    assert run["after_abort"].value == "still running" and run["after_abort"].crash is None
    assert "exit code 3" in run["exits"].crash
    assert run["last"].exc == "ValueError" and "invalid literal" in run["last"].msg
    assert set(run.crashes()) == {"aborts", "exits"} and not run.stray
    assert [p.returncode for p in run.procs] == [-6, 3, 0]
    run.expect("raises", "ValueError", "BAD")
    try:
        run.expect("aborts", "ValueError")
    except AssertionError as e:
        assert "case 'aborts' killed the child" in str(e)
    else:
        raise AssertionError("expect() accepted a crashed case")


def test_run_cases_setup_failure_fails_every_case():
    run = run_cases("import no_such_module_here\n", {"a": "return 1", "b": "return 2"})
    assert set(run.crashes()) == {"a", "b"} and len(run.stray) == 1
    assert "No module named 'no_such_module_here'" in run["a"].crash
    assert run["a"].crash.startswith("child failed outside a case")


@pytest.mark.slow   # waits out its timeout
def test_run_cases_timeout_is_the_running_case_s_failure():
    run = run_cases("import time\n", {"quick": "return 1", "hangs": "time.sleep(60)", "next": "return 3"},
                    timeout=5)
    assert run["quick"].value == 1 and run["next"].value == 3
    assert run["hangs"].crash.startswith("timed out after 5 s")
