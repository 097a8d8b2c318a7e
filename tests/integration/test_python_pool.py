"""The python tool's process pool, with real child processes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Outcome, Task
from noetl.worker._pychild import STDOUT_LIMIT, TRUNCATED_MARKER
from noetl.worker.output import CaptureOutput
from noetl.worker.python_pool import PythonPool

ROOT = Path(__file__).resolve().parents[2]


def make_task(
    spec: dict[str, Any],
    args: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    timeout_ms: int | None = None,
) -> Task:
    return Task(
        task_id="t1",
        execution_id="e1",
        step="step",
        kind="python",
        spec=spec,
        args=args or {},
        context=context or {},
        key="e1:step",
        timeout_ms=timeout_ms,
    )


def code(source: str, **kwargs: Any) -> Task:
    return make_task({"code": source}, **kwargs)


PLUS_ONE = 'def main(context, args):\n    return args["x"] + 1\n'


@pytest.fixture(scope="module")
def module_path() -> Iterator[None]:
    """Children copy the parent's sys.path: make `tests.helpers` importable there."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT))
        yield


@pytest.fixture(scope="module")
def pool(module_path: None) -> Iterator[PythonPool]:
    with PythonPool(processes=2) as shared:
        yield shared


@pytest.fixture
def solo(module_path: None) -> Iterator[PythonPool]:
    """One child only, so the call after a crash must be served by its replacement."""
    with PythonPool(processes=1) as single:
        yield single


def assert_ok(outcome: Outcome) -> Any:
    assert outcome.ok, outcome.error
    return outcome.this


# --- calling user code --------------------------------------------------------------------


def test_inline_code_result(pool: PythonPool) -> None:
    outcome = pool.run(code(PLUS_ONE, args={"x": 41}))
    assert outcome == Outcome(task_id="t1", ok=True, this=42, duration_ms=outcome.duration_ms)
    assert outcome.duration_ms > 0


def test_args_and_context_are_passed(pool: PythonPool) -> None:
    source = "def main(context, args):\n    return {'ctx': context, 'args': args}\n"
    context = {"workload": {"n": 3}, "nested": [1, "two", None]}
    outcome = pool.run(code(source, args={"a": [1, 2]}, context=context))
    assert assert_ok(outcome) == {"ctx": context, "args": {"a": [1, 2]}}


def test_arity_decides_what_is_passed(pool: PythonPool) -> None:
    assert assert_ok(pool.run(code("def main(args):\n    return args", args={"a": 1}))) == {"a": 1}
    assert assert_ok(pool.run(code("def main():\n    return 'none'"))) == "none"
    variadic = "def main(*params):\n    return len(params)"
    assert assert_ok(pool.run(code(variadic))) == 2


def test_custom_callable_name_and_top_level_runs_once_per_child(pool: PythonPool) -> None:
    source = "import itertools\n_calls = itertools.count(1)\ndef go():\n    return next(_calls)\n"
    spec = {"code": source, "callable": "go"}
    results = [assert_ok(pool.run(make_task(spec))) for _ in range(6)]
    # The cached namespace survives between calls: some child counts past 1.
    assert max(results) > 1


def test_async_main_is_awaited(pool: PythonPool) -> None:
    source = "async def main(context, args):\n    return args['x'] * 3\n"
    assert assert_ok(pool.run(code(source, args={"x": 2}))) == 6


def test_module_and_callable(pool: PythonPool) -> None:
    spec = {"module": "tests.helpers.pymod", "callable": "double"}
    outcome = pool.run(make_task(spec, args={"x": 21}, context={"who": "me"}))
    assert assert_ok(outcome) == {"doubled": 42, "who": "me"}
    spec = {"module": "tests.helpers.pymod", "callable": "args_only"}
    assert assert_ok(pool.run(make_task(spec, args={"b": 1, "a": 2}))) == ["a", "b"]


def test_module_errors(pool: PythonPool) -> None:
    missing = pool.run(make_task({"module": "tests.helpers.no_such_module"}))
    assert not missing.ok
    assert missing.error_type == "ModuleNotFoundError"
    assert missing.error is not None and "no_such_module" in missing.error
    not_callable = pool.run(
        make_task({"module": "tests.helpers.pymod", "callable": "NOT_CALLABLE"})
    )
    assert not not_callable.ok
    assert (
        not_callable.error
        == "module 'tests.helpers.pymod' does not define a callable 'NOT_CALLABLE'"
    )
    assert not_callable.error_type == "FatalError"


def test_bad_spec_is_fatal(pool: PythonPool) -> None:
    for spec in ({}, {"code": "x = 1", "module": "os"}):
        outcome = pool.run(make_task(spec))
        assert not outcome.ok
        assert outcome.error == "python tool needs exactly one of spec.code or spec.module"
        assert outcome.error_type == "FatalError"
    missing = pool.run(code("def other():\n    pass\n"))
    assert missing.error == "inline code does not define a callable 'main'"
    assert missing.error_type == "FatalError"


# --- failures of user code ----------------------------------------------------------------


def test_exception_reports_type_message_and_inline_line(pool: PythonPool) -> None:
    source = (
        "def check(value):\n"
        "    if value < 0:\n"
        "        raise ValueError('bad input')\n"
        "\n"
        "def main(context, args):\n"
        "    return check(args['x'])\n"
    )
    outcome = pool.run(code(source, args={"x": -1}))
    assert not outcome.ok
    assert outcome.error_type == "ValueError"
    assert outcome.retryable is False
    assert outcome.error is not None
    lines = outcome.error.splitlines()
    assert lines[0] == "ValueError: bad input"
    assert "  inline code, line 6, in main" in lines
    assert "  inline code, line 3, in check" in lines
    assert "        raise ValueError('bad input')" not in lines  # source lines are stripped
    assert "    raise ValueError('bad input')" in lines
    assert "_pychild" not in outcome.error  # the runner's own frames are left out


def test_error_at_top_level_and_syntax_error(pool: PythonPool) -> None:
    top = pool.run(code("x = 1\nraise KeyError('boom')\n"))
    assert top.error_type == "KeyError"
    assert top.error is not None and "inline code, line 2, in <module>" in top.error
    syntax = pool.run(code("def main(:\n    pass\n"))
    assert syntax.error_type == "SyntaxError"
    assert syntax.error is not None and "line 1" in syntax.error


@pytest.mark.parametrize(
    ("raise_stmt", "error_type", "retryable"),
    [
        ("raise ConnectionError('refused')", "ConnectionError", True),
        ("raise TimeoutError('slow')", "TimeoutError", True),
        ("raise OSError('network is unreachable')", "OSError", True),
        (
            "class RetryableError(Exception): pass\nraise RetryableError('again')",
            "RetryableError",
            True,
        ),
        (
            "from noetl.errors import TaskTimeoutError\nraise TaskTimeoutError('x')",
            "TaskTimeoutError",
            True,
        ),
        ("raise FileNotFoundError('gone')", "FileNotFoundError", False),
        ("raise PermissionError('no')", "PermissionError", False),
        ("raise RuntimeError('bug')", "RuntimeError", False),
    ],
)
def test_retryable_classification(
    pool: PythonPool, raise_stmt: str, error_type: str, retryable: bool
) -> None:
    body = "\n".join(f"    {line}" for line in raise_stmt.splitlines())
    outcome = pool.run(code(f"def main(context, args):\n{body}\n"))
    assert (outcome.ok, outcome.error_type, outcome.retryable) == (False, error_type, retryable)


def test_module_exception_frames_name_the_file(pool: PythonPool) -> None:
    outcome = pool.run(make_task({"module": "tests.helpers.pymod", "callable": "unreachable"}))
    assert outcome.error_type == "ConnectionError"
    assert outcome.retryable is True
    assert outcome.error is not None
    assert outcome.error.startswith("ConnectionError: database unreachable\n")
    assert "pymod.py, line" in outcome.error


def test_non_json_result_fails_naming_the_type(pool: PythonPool) -> None:
    outcome = pool.run(code("def main(context, args):\n    return {'s': {1, 2}}\n"))
    assert not outcome.ok
    assert outcome.error == (
        "result of main() is not JSON-serializable: Object of type set is not JSON serializable"
    )
    assert outcome.retryable is False
    nan = pool.run(code("def main():\n    return float('nan')\n"))
    assert not nan.ok
    assert nan.error is not None and "not JSON-serializable" in nan.error


def test_sys_exit_keeps_the_process(solo: PythonPool) -> None:
    (pid,) = solo.pids
    outcome = solo.run(code("import sys\ndef main(context, args):\n    sys.exit(3)\n"))
    assert not outcome.ok
    assert outcome.error == "user code called sys.exit(3)"
    assert outcome.error_type == "SystemExit"
    assert assert_ok(solo.run(code(PLUS_ONE, args={"x": 1}))) == 2
    assert solo.pids == [pid]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import os\ndef main():\n    os._exit(3)\n", "python process exited with code 3"),
        (
            "import ctypes\ndef main():\n    ctypes.string_at(0)\n",
            "python process exited with code -11 (SIGSEGV)",
        ),
    ],
    ids=["os_exit", "segfault"],
)
def test_crash_replaces_the_process(solo: PythonPool, source: str, message: str) -> None:
    (pid,) = solo.pids
    outcome = solo.run(code(source))
    assert not outcome.ok
    assert outcome.error == message
    assert outcome.error_type == "ProcessError"
    assert outcome.retryable is False
    assert assert_ok(solo.run(code(PLUS_ONE, args={"x": 1}))) == 2
    assert solo.pids != [pid]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped, not a zombie


def test_timeout_kills_and_replaces(solo: PythonPool) -> None:
    (pid,) = solo.pids
    started = time.monotonic()
    outcome = solo.run(code("def main():\n    while True:\n        pass\n", timeout_ms=500))
    elapsed = time.monotonic() - started
    assert not outcome.ok
    assert outcome.error == "timed out after 500 ms"
    assert outcome.error_type == "TimeoutError"
    assert outcome.retryable is True
    assert 0.5 <= elapsed < 3
    assert outcome.duration_ms >= 500
    assert assert_ok(solo.run(code(PLUS_ONE, args={"x": 1}))) == 2
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_cancel_kills_the_running_call_and_replaces_the_child(solo: PythonPool) -> None:
    (pid,) = solo.pids
    assert solo.cancel("t1") is False  # nothing runs yet
    result: list[Outcome] = []
    runner = threading.Thread(
        target=lambda: result.append(
            solo.run(code("import time\n\ndef main():\n    time.sleep(30)\n"))
        )
    )
    runner.start()
    deadline = time.monotonic() + 5
    while not solo.cancel("t1"):  # retried until the call has a child
        assert time.monotonic() < deadline, "the call never started"
        time.sleep(0.01)
    canceled_at = time.monotonic()
    runner.join(timeout=5)
    assert not runner.is_alive()
    assert time.monotonic() - canceled_at < 1
    (outcome,) = result
    assert not outcome.ok
    assert outcome.error_type == "CancelError"
    assert outcome.error == "canceled"
    assert solo.cancel("t1") is False  # finished
    assert assert_ok(solo.run(code(PLUS_ONE, args={"x": 1}))) == 2
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_child_killed_while_idle_does_not_fail_the_next_task(solo: PythonPool) -> None:
    assert assert_ok(solo.run(code(PLUS_ONE, args={"x": 1}))) == 2
    (pid,) = solo.pids
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # reaped by the fork server
    assert assert_ok(solo.run(code(PLUS_ONE, args={"x": 2}))) == 3


def test_a_task_sent_early_is_waited_for_a_while_then_taken_by_its_run(solo: PythonPool) -> None:
    """`early_ready` waits for the reply of a task `start_early` sent at most the time it
    is given; the task's `run` takes the reply then, with what it printed before."""
    assert_ok(solo.run(code(PLUS_ONE, args={"x": 1})))  # its child is up
    slow = code(
        "import time\n"
        "def main(context, args):\n"
        "    print('began', flush=True)\n"
        "    time.sleep(0.4)\n"
        "    return 5\n"
    )
    assert solo.start_early(slow)
    began = time.monotonic()
    assert not solo.early_ready(slow, 0.05)  # still running
    assert 0.04 <= time.monotonic() - began < 0.35
    heard: list[str] = []
    capture = CaptureOutput(lambda task, text: heard.append(text))
    outcome = capture(slow, solo.run)
    assert assert_ok(outcome) == 5
    assert outcome.stdout == "began\n"
    assert heard == ["began\n"]  # printed before `early_ready` gave up, passed on by `run`
    quick = code(PLUS_ONE, args={"x": 2})
    assert solo.start_early(quick)
    assert solo.early_ready(quick, 5.0)
    assert solo.early_ready(quick, 0.0)  # its reply is kept for its run
    assert assert_ok(solo.run(quick)) == 3
    assert solo.early_ready(code(PLUS_ONE, args={"x": 3}), 0.0)  # never sent: its run says


# --- output -------------------------------------------------------------------------------


def test_stdout_and_stderr_are_captured(pool: PythonPool) -> None:
    source = (
        "import sys\n"
        "def main(context, args):\n"
        "    print('hello', args['x'])\n"
        "    sys.stderr.write('warn\\n')\n"
        "    return 1\n"
    )
    outcome = pool.run(code(source, args={"x": 7}))
    assert outcome.ok
    assert outcome.stdout == "hello 7\nwarn\n"
    failed = pool.run(code("def main():\n    print('before')\n    raise ValueError('x')\n"))
    assert failed.stdout == "before\n"


def test_logs_of_the_call_are_captured_from_info_up(pool: PythonPool) -> None:
    source = (
        "import logging\n"
        "log = logging.getLogger('etl.orders')\n"
        "def main():\n"
        "    log.debug('not kept')\n"
        "    log.info('loaded %d rows', 3)\n"
        "    logging.warning('careful')\n"
        "    return 1\n"
    )
    first = pool.run(code(source))
    second = pool.run(code(source))  # the handler of one call is gone by the next

    assert first.stdout == "INFO etl.orders: loaded 3 rows\nWARNING root: careful\n"
    assert second.stdout == first.stdout


def test_stdout_is_truncated_to_64_kib(pool: PythonPool) -> None:
    source = "def main():\n    for _ in range(100):\n        print('é' * 1000)\n"
    outcome = pool.run(code(source))
    assert outcome.ok
    assert len(outcome.stdout.encode("utf-8")) <= STDOUT_LIMIT
    assert len(outcome.stdout.encode("utf-8")) > STDOUT_LIMIT - 100
    assert outcome.stdout.endswith(TRUNCATED_MARKER)
    assert outcome.stdout.startswith("éé")


# --- concurrency and life cycle -----------------------------------------------------------


@pytest.mark.parametrize("threads", [2, 4])
def test_concurrent_calls_from_threads(pool: PythonPool, threads: int) -> None:
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(50):
                x = offset * 1000 + i
                outcome = pool.run(code(PLUS_ONE, args={"x": x}))
                results[x] = outcome.this if outcome.ok else outcome.error
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors
    assert len(results) == threads * 50
    assert all(value == x + 1 for x, value in results.items())


def test_close_reaps_every_child(module_path: None) -> None:
    pool = PythonPool(processes=3)
    assert assert_ok(pool.run(code(PLUS_ONE, args={"x": 1}))) == 2
    pids = pool.pids
    assert len(pids) == 3
    pool.close()
    pool.close()  # idempotent
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not [p for p in multiprocessing.active_children() if p.pid in pids]
    assert pool.pids == []
    after = pool.run(code(PLUS_ONE, args={"x": 1}))
    assert (after.ok, after.error, after.error_type) == (
        False,
        "python pool is closed",
        "CancelError",
    )


def test_close_while_a_task_runs(module_path: None) -> None:
    pool = PythonPool(processes=1)
    outcomes: list[Outcome] = []
    runner = threading.Thread(
        target=lambda: outcomes.append(
            pool.run(code("import time\ndef main():\n    time.sleep(60)\n"))
        )
    )
    runner.start()
    deadline = time.monotonic() + 5
    while not pool._busy and time.monotonic() < deadline:
        time.sleep(0.01)
    (pid,) = pool.pids
    started = time.monotonic()
    pool.close()
    runner.join(5)
    assert time.monotonic() - started < 5
    assert [(o.ok, o.error_type, o.retryable) for o in outcomes] == [(False, "CancelError", True)]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


class SlowToRead(PythonPool):
    """A pool whose thread reads each reply 0.3 s late (as a busy machine wakes it)."""

    def _run_leased(self, *args: Any, **kwargs: Any) -> Any:
        answer = super()._run_leased(*args, **kwargs)
        time.sleep(0.3)
        return answer


def test_a_tasks_duration_is_its_time_in_the_child_not_its_round_trip() -> None:
    """`duration_ms` is what the child counted: the parent's wake-ups and the pipe are
    not the task's time (the worker's pace, and a chain's choice of steps, read it)."""
    with SlowToRead(processes=1) as pool:
        pool.run(make_task({"code": "def main(context, args):\n    return 1\n"}))  # started
        outcome = pool.run(make_task({"code": "def main(context, args):\n    return 2\n"}))
    assert outcome.ok and outcome.this == 2
    assert outcome.duration_ms is not None and outcome.duration_ms < 250
