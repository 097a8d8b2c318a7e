"""What a task prints and logs: streamed line by line as it runs, kept per attempt,
bounded and masked (noetl.worker.output, the python pool's child pipe)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from noetl.core import Outcome, Task
from noetl.credentials.scope import EnvSecrets
from noetl.worker.output import TOOL_LOG_LIMIT, CaptureOutput, TaskOutput, current_output
from noetl.worker.python_pool import PythonPool
from noetl.worker.tools import ToolRegistry


def task(code: str | None = None, *, kind: str = "python", **extra: Any) -> Task:
    return Task(
        task_id="t1",
        execution_id="e1",
        step="load",
        kind=kind,
        spec={"code": code} if code is not None else {},
        context={},
        key="e1:load",
        **{"args": {}, **extra},
    )


class Heard:
    """An output listener that notes each piece with the time it came."""

    def __init__(self) -> None:
        self.pieces: list[tuple[float, str]] = []
        self.lock = threading.Lock()

    def __call__(self, task: Task, text: str) -> None:
        with self.lock:
            self.pieces.append((time.monotonic(), text))

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.pieces)


@pytest.fixture(scope="module")
def pool() -> Iterator[PythonPool]:
    with PythonPool(processes=1) as shared:
        yield shared


def test_lines_reach_the_listener_while_the_call_runs(pool: PythonPool) -> None:
    heard = Heard()
    code = (
        "import time\n"
        "def main(context, args):\n"
        "    print('first', flush=True)\n"
        "    time.sleep(0.6)\n"
        "    print('second')\n"
        "    print('no newline at the end', end='')\n"
        "    return 1\n"
    )
    outcome = CaptureOutput(heard)(task(code), pool.run)
    finished = time.monotonic()
    assert outcome.ok, outcome.error
    assert outcome.stdout == "first\nsecond\nno newline at the end"
    assert heard.text == outcome.stdout
    # The first line came before the call ended, not with its reply.
    assert heard.pieces[0][1] == "first\n"
    assert finished - heard.pieces[0][0] >= 0.4


def test_a_call_that_times_out_keeps_what_it_printed(pool: PythonPool) -> None:
    code = "import time\ndef main(context, args):\n    print('working on it')\n    time.sleep(30)\n"
    outcome = pool.run(task(code, timeout_ms=800))
    assert not outcome.ok and outcome.error_type == "TimeoutError"
    assert outcome.stdout == "working on it\n"


def test_threads_of_user_code_print_whole_lines(pool: PythonPool) -> None:
    heard = Heard()
    code = (
        "import sys, threading\n"
        "def main(context, args):\n"
        "    def say(n):\n"
        "        for i in range(200):\n"
        "            sys.stdout.write(f'thread {n} line {i}\\n')\n"
        "    ts = [threading.Thread(target=say, args=(n,)) for n in range(4)]\n"
        "    [t.start() for t in ts]\n"
        "    [t.join() for t in ts]\n"
        "    return 1\n"
    )
    outcome = CaptureOutput(heard)(task(code), pool.run)
    assert outcome.ok, outcome.error
    lines = heard.text.splitlines()
    assert sorted(lines) == sorted(f"thread {n} line {i}" for n in range(4) for i in range(200))


class LoggingTool:
    """A tool that logs through NoETL's tool loggers, as the built-in tools do."""

    kind = "chatty"
    uses_credentials = True

    def run(self, task: Task) -> Outcome:
        logging.getLogger("noetl.tools.chatty").warning("retrying %s", task.args.get("url"))
        return Outcome(task_id=task.task_id, ok=True, this=1, stdout="own output")


def test_tool_log_lines_are_kept_with_the_attempt_and_masked() -> None:
    heard = Heard()
    registry = ToolRegistry(
        [LoggingTool()],
        secrets=EnvSecrets({"NOETL_SECRET_TOKEN": "s3cr3t-value-123"}),
        on_output=heard,
    )
    work = task(kind="chatty", args={"url": "https://x/?t=<<secret:token>>"}, secrets=("token",))
    outcome = registry.run(work)
    assert outcome.ok
    assert outcome.stdout == "own output\nWARNING noetl.tools.chatty: retrying https://x/?t=***\n"
    assert "s3cr3t" not in heard.text
    assert heard.text == "WARNING noetl.tools.chatty: retrying https://x/?t=***\n"


def test_records_outside_a_task_are_not_kept() -> None:
    CaptureOutput()  # installs the handler
    assert current_output() is None
    logging.getLogger("noetl.tools.chatty").warning("between tasks")  # nowhere to keep it
    output = TaskOutput(task(), None)
    assert output.text() == ""


def test_tool_log_lines_are_bounded() -> None:
    output = TaskOutput(task(), None)
    for i in range(5000):
        output.log(f"line {i} " + "x" * 40)
    text = output.text()
    assert len(text) <= TOOL_LOG_LIMIT + 100
    assert text.endswith("[output truncated]\n")
    assert text.startswith("line 0 ")


def test_a_listener_that_raises_does_not_fail_the_task(pool: PythonPool) -> None:
    def broken(task: Task, text: str) -> None:
        raise RuntimeError("terminal gone")

    code = "def main(context, args):\n    print('a')\n    print('b')\n    return 2\n"
    outcome = CaptureOutput(broken)(task(code), pool.run)
    assert outcome.ok and outcome.this == 2
    assert outcome.stdout == "a\nb\n"
