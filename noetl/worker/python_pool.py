"""A pool of child Python processes that run the `python` tool's user code.

User code runs outside the worker so that whatever it does (raise, loop forever, call
`sys.exit`, crash the interpreter, leak memory) costs one task, never the worker. Each
child comes from the "forkserver" start method (the worker has threads, so forking it is
unsafe) and serves calls over a pair of `multiprocessing.Pipe`s, one at a time, for its
whole life; a child that crashes, runs past its timeout or runs a task that is canceled
(`PythonPool.cancel`) is killed and replaced. POSIX
only (forkserver, `select.poll`).

How user code is called (the `spec` of a python task, see `noetl.dsl.kinds.PythonSpec`):

- `code`: Python source defining the callable (default `main`). It is compiled and its
  top level executed once per child, then cached by source, so module-level setup is
  shared by the calls that child serves.
- `module` + `callable`: `importlib.import_module(module)`, then `getattr(callable)`.

The callable is called as `main(context, args)`; if it takes one positional parameter as
`main(args)`, if it takes none as `main()`. With `style: toplevel` (upstream NoETL's
convention) the code runs top to bottom instead, its inputs bound as plain names, and its
outcome is a top-level `return` or its `result` variable (`noetl.worker._pychild`). An
`async def` is run with `asyncio.run`. Its return value must be JSON-serializable
(strict JSON: no NaN or Infinity); it crosses the pipe as JSON text. What it prints to
stdout or stderr (and what it logs) comes back in `Outcome.stdout` (the first 64 KiB), and
each line is passed on as it is printed to the task's output (`noetl.worker.output`), so
a long call is seen while it runs and a call that times out or crashes keeps what it
printed.
"""

from __future__ import annotations

import atexit
import json
import threading
import time
from types import TracebackType
from typing import Any

from noetl.core import Outcome, Task
from noetl.tools.deadline import Deadline
from noetl.worker._pychild import Reply
from noetl.worker.output import current_output
from noetl.worker.python_child import (
    CallFailure,
    ChildProcess,
    Printed,
    exit_message,
    fork_context,
)

__all__ = ["DEFAULT_TIMEOUT_MS", "PythonPool"]

DEFAULT_TIMEOUT_MS = 30_000
CLOSE_GRACE_S = 10.0


class PythonPool:
    """A fixed number of child interpreters; `run` is safe to call from many threads.

    Each child serves one call at a time. Idle children wait in a free list (a slot holds
    None while its child could not be started; the next call that takes it starts one).
    """

    def __init__(self, processes: int = 2, *, default_timeout_ms: int = DEFAULT_TIMEOUT_MS):
        if processes < 1:
            raise ValueError("a python pool needs at least one process")
        self._ctx = fork_context()
        self._default_timeout_ms = default_timeout_ms
        self._cond = threading.Condition()
        self._busy: set[ChildProcess] = set()
        self._running: dict[str, ChildProcess] = {}  # task id -> the child running it
        self._leased = 0
        self._closed = False
        self._free: list[ChildProcess | None] = []
        try:
            for _ in range(processes):
                self._free.append(ChildProcess(self._ctx))
        except BaseException:
            for child in self._free:
                if child is not None:
                    child.stop(kill=True)
            raise
        # Children are not daemonic (user code may start processes of its own), so they
        # must be stopped before multiprocessing's own exit hook waits for them.
        atexit.register(self.close)

    def __enter__(self) -> PythonPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """Process ids of the current children (for diagnostics and tests)."""
        with self._cond:
            children = [c for c in (*self._free, *self._busy) if c is not None]
        return [c.process.pid for c in children if not c.stopped and c.process.pid is not None]

    def run(self, task: Task) -> Outcome:
        """Run a python task in a child process; never raises for anything user code does."""
        started = time.perf_counter()
        request = _request(task)
        if isinstance(request, str):
            return _failed(task, started, request, "FatalError")
        deadline = Deadline.of(task)
        if deadline is not None:
            timeout_ms = deadline.timeout_ms
        else:
            timeout_ms = self._default_timeout_ms if task.timeout_ms is None else task.timeout_ms
        printed = Printed(current_output())
        try:
            reply = self._run_leased(task.task_id, request, max(timeout_ms, 0), deadline, printed)
        except CallFailure as failure:
            return _failed(
                task,
                started,
                failure.message,
                failure.error_type,
                retryable=failure.retryable,
                stdout=printed.text(),
            )
        return _outcome(task, started, reply)

    def cancel(self, task_id: str) -> bool:
        """Stop the call running `task_id`: kill its child (it is replaced); that call
        returns a failed outcome with error type "CancelError". False when no call of
        this pool is running that task (not started yet, or already finished)."""
        with self._cond:
            child = self._running.get(task_id)
            if child is None:
                return False
            child.canceled = True
            child.kill()
        return True

    def close(self) -> None:
        """Stop every child (killing those still running a task) and reap them all."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            idle = [c for c in self._free if c is not None]
            self._free = []
            busy = list(self._busy)
            self._cond.notify_all()
        atexit.unregister(self.close)
        for child in busy:
            child.kill()  # its caller reads EOF, then reaps it in _release
        for child in idle:
            child.stop()
        deadline = time.monotonic() + CLOSE_GRACE_S
        with self._cond:
            while self._leased and (remaining := deadline - time.monotonic()) > 0:
                self._cond.wait(remaining)

    # --- internals ------------------------------------------------------------------

    def _run_leased(
        self,
        task_id: str,
        request: Reply,
        timeout_ms: int,
        deadline: Deadline | None,
        printed: Printed,
    ) -> Reply:
        child = self._acquire()
        healthy = False
        try:
            if child is not None and child.died_while_idle():
                # killed from outside (say, the OOM killer): not this task's fault
                self._forget(child)
                child = None
            if child is None:
                child = self._start()
            with self._cond:
                self._running[task_id] = child
            try:
                reply = self._call(child, request, timeout_ms, deadline, printed)
            finally:
                with self._cond:
                    if self._running.get(task_id) is child:
                        del self._running[task_id]
            # canceled just as the reply came: the child is (being) killed, replace it
            healthy = not child.canceled
            return reply
        finally:
            self._release(child, healthy)

    def _acquire(self) -> ChildProcess | None:
        """Take a free slot (waiting for one); raises `CallFailure` once the pool is closed."""
        with self._cond:
            while not self._free and not self._closed:
                self._cond.wait()
            if self._closed:
                raise CallFailure("python pool is closed", "CancelError", retryable=True)
            child = self._free.pop()  # the most recently used child: its caches are warm
            self._leased += 1
            if child is not None:
                self._busy.add(child)
            return child

    def _forget(self, child: ChildProcess) -> None:
        child.stop(kill=True)
        with self._cond:
            self._busy.discard(child)

    def _start(self) -> ChildProcess:
        try:
            child = ChildProcess(self._ctx)
        except OSError as exc:
            message = f"could not start a python process: {exc}"
            raise CallFailure(message, "ProcessError", retryable=True) from None
        with self._cond:
            if not self._closed:
                self._busy.add(child)
                return child
        child.stop(kill=True)
        raise CallFailure("python pool is closed", "CancelError", retryable=True)

    def _call(
        self,
        child: ChildProcess,
        request: Reply,
        timeout_ms: int,
        deadline: Deadline | None,
        printed: Printed,
    ) -> Reply:
        """One round trip, until the task's deadline (else `timeout_ms`); raises
        `CallFailure` when the child is dead or must be replaced."""
        try:
            if not child.ready:
                child.wait_ready()
            wait_s = timeout_ms / 1000 if deadline is None else deadline.remaining()
            reply = child.call(request, wait_s, printed)
        except (EOFError, OSError):
            code = child.stop()
            if child.canceled:
                raise CallFailure("canceled", "CancelError") from None
            if self._closed:
                message = "python pool was closed while the task ran"
                raise CallFailure(message, "CancelError", retryable=True) from None
            raise CallFailure(exit_message(code), "ProcessError") from None
        if reply is None:
            raise CallFailure(f"timed out after {timeout_ms} ms", "TimeoutError", retryable=True)
        return reply

    def _release(self, used: ChildProcess | None, healthy: bool) -> None:
        """Give the slot back: the same child if healthy, else a fresh one."""
        if used is not None and not healthy:
            used.stop(kill=True)
        slot = used if healthy else None
        if slot is None and not self._closed:
            slot = ChildProcess.try_start(self._ctx)  # in the background; ready by the next call
        with self._cond:
            if not self._closed:
                self._free.append(slot)
                self._finish_lease(used)
                return
        if slot is not None:
            slot.stop()
        with self._cond:
            self._finish_lease(used)

    def _finish_lease(self, used: ChildProcess | None) -> None:
        # called with the lock held
        if used is not None:
            self._busy.discard(used)
        self._leased -= 1
        if self._closed:
            self._cond.notify_all()  # `close` waits for the last lease
        else:
            # One slot came free: one waiter is woken for it. Waking them all (a worker has
            # many more task threads than children) woke every waiting thread per call,
            # only for all but one to wait again.
            self._cond.notify()


def _request(task: Task) -> Reply | str:
    """The message for the child, or why the spec cannot be run."""
    spec = task.spec
    code, module = spec.get("code"), spec.get("module")
    name = spec.get("callable") or "main"
    if (code is None) == (module is None):
        return "python tool needs exactly one of spec.code or spec.module"
    if not isinstance(code or module, str) or not isinstance(name, str):
        return "python tool spec.code, spec.module and spec.callable must be strings"
    style = spec.get("style") or "main"
    libs = spec.get("libs") or {}
    if style not in ("main", "toplevel") or not isinstance(libs, dict):
        return "python tool spec.style must be main or toplevel, and spec.libs a map"
    return (code, module, name, task.args, task.context, style, libs)


def _elapsed_ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _failed(
    task: Task,
    started: float,
    error: str,
    error_type: str,
    *,
    retryable: bool = False,
    stdout: str = "",
) -> Outcome:
    return Outcome(
        task_id=task.task_id,
        ok=False,
        error=error,
        error_type=error_type,
        retryable=retryable,
        stdout=stdout,
        duration_ms=_elapsed_ms(started),
    )


def _outcome(task: Task, started: float, reply: Reply) -> Outcome:
    if reply[0]:
        _, text, stdout = reply
        this: Any = json.loads(text)
        return Outcome(
            task_id=task.task_id,
            ok=True,
            this=this,
            stdout=stdout,
            duration_ms=_elapsed_ms(started),
        )
    _, error, error_type, retryable, stdout = reply
    return Outcome(
        task_id=task.task_id,
        ok=False,
        error=error,
        error_type=error_type,
        retryable=retryable,
        stdout=stdout,
        duration_ms=_elapsed_ms(started),
    )
