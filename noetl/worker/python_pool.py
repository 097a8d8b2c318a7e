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
printed (a task run ahead in a batch, `run_ahead`, passes its lines on with its reply).
"""

from __future__ import annotations

import atexit
import threading
import time
from types import TracebackType

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
from noetl.worker.python_reply import Ahead, Early, failed, outcome_of, ran_ms, request_of

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
        # Replies of tasks run ahead of their chains (`run_ahead`), by (task id, attempt),
        # and the ids canceled while their batch ran.
        self._ahead: dict[tuple[str, int], Ahead] = {}
        self._canceled_ahead: set[str] = set()
        # Tasks sent to a child early (`start_early`), their replies still in its pipe.
        self._early: dict[tuple[str, int], Early] = {}
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
        """Run a python task in a child process; never raises for anything user code does.
        A task `run_ahead` ran takes its reply from there."""
        started = time.perf_counter()
        ahead = self._ahead.pop((task.task_id, task.attempt), None) if self._ahead else None
        if ahead is not None:
            return ahead.outcome(task, Printed(current_output()))
        early = self._early.pop((task.task_id, task.attempt), None) if self._early else None
        if early is not None:
            return self._take_early(task, early)
        request = request_of(task)
        if isinstance(request, str):
            return failed(task, started, request, "FatalError")
        deadline = Deadline.of(task)
        if deadline is not None:
            timeout_ms = deadline.timeout_ms
        else:
            timeout_ms = self._default_timeout_ms if task.timeout_ms is None else task.timeout_ms
        printed = Printed(current_output())
        try:
            reply = self._run_leased(task.task_id, request, max(timeout_ms, 0), deadline, printed)
        except CallFailure as failure:
            return failed(
                task,
                started,
                failure.message,
                failure.error_type,
                retryable=failure.retryable,
                stdout=printed.text(),
            )
        return outcome_of(task, reply, ran_ms(reply))  # its time in the child

    def cancel(self, task_id: str) -> bool:
        """Stop the call running `task_id`: kill its child (it is replaced); that call
        returns a failed outcome with error type "CancelError". False when no call of
        this pool is running that task (not started yet, or already finished)."""
        with self._cond:
            child = self._running.get(task_id)
            if child is None:
                return False
            child.canceled = True
            self._canceled_ahead.add(task_id)
            child.kill()
        return True

    def run_ahead(self, tasks: list[Task]) -> int:
        """Run several python tasks in one child, in order, with one request for them all
        and a reply for each as it finishes; their `run` calls (in their own middleware
        chains, right after) take the replies. Each task keeps its own timeout, counted
        from its own start. A task that times out, or whose child dies or is killed for a
        cancel, ends there: it fails (timed out, crashed, canceled), or, when another task
        of the batch was canceled, runs again by its own `run`, as do the tasks after it.
        Returns how many tasks have their reply. Tasks that cannot go in a batch (an
        invalid spec, a timeout of 0 or less) are left to their own `run`."""
        batch: list[Task] = []
        requests: list[Reply] = []
        for task in tasks:
            request = request_of(task)
            if isinstance(request, str) or (task.timeout_ms is not None and task.timeout_ms <= 0):
                continue
            batch.append(task)
            requests.append(request)
        tasks = batch
        if len(tasks) < 2:
            return 0
        try:
            child = self._acquire()
        except CallFailure:
            return 0
        healthy = False
        try:
            child = self._running_child(child, [task.task_id for task in tasks])
            healthy = self._batch(child, tasks, requests)
            return sum(1 for task in tasks if (task.task_id, task.attempt) in self._ahead)
        except CallFailure:
            return 0
        finally:
            with self._cond:
                for task in tasks:
                    if child is not None and self._running.get(task.task_id) is child:
                        del self._running[task.task_id]
                    self._canceled_ahead.discard(task.task_id)
            self._release(child, healthy and not (child is not None and child.canceled))

    def forget_ahead(self, tasks: list[Task]) -> None:
        """Drop the replies of these tasks that their `run` did not take (a task that
        ended another way, such as canceled before its chain ran)."""
        if self._ahead:
            for task in tasks:
                self._ahead.pop((task.task_id, task.attempt), None)

    def start_early(self, task: Task) -> bool:
        """Send a python task to a free child now and return without waiting for its
        reply: the task's `run` (in its own chain, later) takes it, and its time counts
        from now. For a thread with something else to do meanwhile (a worker commits the
        continuation that leases it the task). False, with nothing sent, when no started
        child is free at once, the spec cannot run, or the task has no time to run."""
        key = (task.task_id, task.attempt)
        request = request_of(task)
        timeout_ms = self._default_timeout_ms if task.timeout_ms is None else task.timeout_ms
        if isinstance(request, str) or timeout_ms <= 0 or key in self._early:
            return False
        with self._cond:
            if self._closed or not self._free or self._free[-1] is None:
                return False
            child = self._free.pop()
            assert child is not None
            if not child.ready or child.died_while_idle():
                self._free.append(child)  # its next `run` waits for it or replaces it
                return False
            self._leased += 1
            self._busy.add(child)
            self._running[task.task_id] = child
        began = time.perf_counter()
        try:
            child.writer.send(request)
        except (EOFError, OSError):
            self._end_early(task, child, healthy=False)
            return False
        self._early[key] = Early(child, began, time.monotonic() + timeout_ms / 1000, timeout_ms)
        return True

    def early_ready(self, task: Task, within_s: float) -> bool:
        """Whether the reply of a task `start_early` sent came within `within_s` (its
        `run` takes it then at once); True when none was sent (see `Early.wait`)."""
        early = self._early.get((task.task_id, task.attempt)) if self._early else None
        return early is None or early.wait(within_s)

    def forget_early(self, task: Task) -> None:
        """Give up a task `start_early` sent whose `run` will not come (the commit that
        was to lease it failed, a middleware ended it first): its child is killed and
        replaced, unless its reply is in already (`early_ready`): it is idle then."""
        early = self._early.pop((task.task_id, task.attempt), None) if self._early else None
        if early is not None:
            idle = early.reply is not None and not early.child.canceled
            if not idle:
                early.child.kill()
            self._end_early(task, early.child, healthy=idle)

    def _take_early(self, task: Task, early: Early) -> Outcome:
        """The outcome of a task `start_early` sent: its reply, by its deadline."""
        child, printed, healthy = early.child, Printed(current_output()), False
        for part in early.printed.parts if early.printed is not None else ():
            printed.add(part)  # printed before `early_ready` saw its reply
        try:
            try:
                reply = (
                    early.reply if early.reply is not None else child.reply(early.deadline, printed)
                )
            except (EOFError, OSError):
                failure = self._dead(child)
                return failed(task, early.began, failure.message, failure.error_type,
                              retryable=failure.retryable, stdout=printed.text())  # fmt: skip
            if reply is None:
                message = f"timed out after {early.timeout_ms} ms"
                return failed(task, early.began, message, "TimeoutError", retryable=True,
                              stdout=printed.text())  # fmt: skip
            healthy = not child.canceled
            return outcome_of(task, reply, ran_ms(reply))  # sent early: read late
        finally:
            self._end_early(task, child, healthy=healthy)

    def _end_early(self, task: Task, child: ChildProcess, *, healthy: bool) -> None:
        with self._cond:
            if self._running.get(task.task_id) is child:
                del self._running[task.task_id]
            self._canceled_ahead.discard(task.task_id)
        self._release(child, healthy)

    def _batch(self, child: ChildProcess, tasks: list[Task], requests: list[Reply]) -> bool:
        """Send the batch and take its replies (see `run_ahead`); False when the child
        must be replaced."""
        began = time.monotonic()
        try:
            if not child.ready:
                child.wait_ready()
            child.writer.send(requests)
        except (EOFError, OSError):  # killed already (a cancel): as if the first had died
            self._died(child, tasks[0], Printed(None), 0.0)
            return False
        for task in tasks:
            timeout_ms = task.timeout_ms or self._default_timeout_ms
            printed = Printed(None)
            try:
                reply = child.reply(began + timeout_ms / 1000, printed)
            except (EOFError, OSError):
                self._died(child, task, printed, (time.monotonic() - began) * 1000)
                return False
            now = time.monotonic()
            if reply is None:
                failure = CallFailure(
                    f"timed out after {timeout_ms} ms", "TimeoutError", retryable=True
                )
                self._ahead[(task.task_id, task.attempt)] = Ahead(
                    None, failure, (now - began) * 1000, printed
                )
                child.kill()
                return False
            self._ahead[(task.task_id, task.attempt)] = Ahead(
                reply, None, (now - began) * 1000, printed
            )
            with self._cond:  # done: a cancel of it now must not kill the others
                if self._running.get(task.task_id) is child:
                    del self._running[task.task_id]
            began = now
        return True

    def _died(self, child: ChildProcess, task: Task, printed: Printed, ran_ms: float) -> None:
        """The batch's child died while `task` ran: its failure, unless it runs again."""
        failure = self._ended(child, task, child.stop())
        if failure is not None:
            self._ahead[(task.task_id, task.attempt)] = Ahead(None, failure, ran_ms, printed)

    def _ended(self, child: ChildProcess, task: Task, code: int | None) -> CallFailure | None:
        """Why the task running when its batch's child died failed; None when it must run
        again (the child was killed to cancel another task of the batch)."""
        if child.canceled:
            with self._cond:
                mine = task.task_id in self._canceled_ahead
            return CallFailure("canceled", "CancelError") if mine else None
        if self._closed:
            message = "python pool was closed while the task ran"
            return CallFailure(message, "CancelError", retryable=True)
        return CallFailure(exit_message(code), "ProcessError")

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
        """The reply of the call, on a child that was free for it."""
        child = self._acquire()
        healthy = False
        try:
            child = self._running_child(child, [task_id])
            try:
                reply = self._call(child, request, timeout_ms, deadline, printed)
            finally:
                with self._cond:
                    if self._running.get(task_id) is child:
                        del self._running[task_id]
                    self._canceled_ahead.discard(task_id)
            # canceled just as the reply came: the child is (being) killed, replace it
            healthy = not child.canceled
            return reply
        finally:
            self._release(child, healthy)

    def _running_child(self, leased: ChildProcess | None, task_ids: list[str]) -> ChildProcess:
        """The child to run these tasks on: the leased one, unless it is missing or died
        while idle (killed from outside, say by the OOM killer: not these tasks' fault),
        then a new one; recorded as running them (`cancel`). Raises `CallFailure` when no
        child can be started (the caller still releases its lease)."""
        child = leased
        if child is not None and child.died_while_idle():
            self._forget(child)
            child = None
        if child is None:
            child = self._start()
        with self._cond:
            for task_id in task_ids:
                self._running[task_id] = child
        return child

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
            raise self._dead(child) from None
        if reply is None:
            raise CallFailure(f"timed out after {timeout_ms} ms", "TimeoutError", retryable=True)
        return reply

    def _dead(self, child: ChildProcess) -> CallFailure:
        """Why a call ended when its child's pipe closed (stopping the child)."""
        code = child.stop()
        if child.canceled:
            return CallFailure("canceled", "CancelError")
        if self._closed:
            return CallFailure("python pool was closed while the task ran", "CancelError",
                               retryable=True)  # fmt: skip
        return CallFailure(exit_message(code), "ProcessError")

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
