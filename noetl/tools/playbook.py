"""The `playbook` tool: run another playbook as a child execution and wait for it.

The child's id is derived from the parent task's idempotency key (`task.key`: execution,
step and loop item) and its attempt, so a task run again after its lease expired (its
worker crashed) finds the child it already started and waits for it instead of starting
another. A run finds the newest child of the earlier attempts: one still running or `ok`
is waited for (the earlier run was lost, not failed); one that failed means this run is a
retry (the step's `retry` policy), which starts a child of its own.

The child's text comes from the playbook catalog (`spec.path`, `spec.version`), else,
without a version, from a file under the tool's root (`playbooks.root`; `..`, absolute
paths elsewhere and symlinks leading out are refused, see noetl.paths): `spec.path`
itself, with `.yaml` / `.yml`, the file named after its last part inside it, else the
playbook file whose `metadata.path` it is (noetl.tools.child_steps.find_file); the
task's `args` are merged over the child's workload. A file that
cannot be read or is not a valid playbook fails the step with the diagnostics' codes and
lines only: its contents never reach the step's error (it may be any file, a secret
one too). The tool then polls the store until the child finishes: `ok` gives
`{execution_id, status, context}` (the child's saved context), or with
`spec.return_step` the result of that step of the child (null when it did not finish
`ok`: skipped, not reached); anything else a failure that is not transient: retried only
under the step's own `retry` policy. A `return_step` the child's text has no step of
fails the task before the child starts.

Starting a child is a runtime's business (`ChildLauncher`): a worker creates it in the
shared store as the server does; `noetl run` starts it in its own embedded runtime.
A task of this kind waits (`waits = True`): runtimes run it outside their bounded task
slots, so a parent waiting for its child never holds the slot the child needs.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any, Protocol

from noetl.core import ExecutionStatus, Outcome, Task
from noetl.credentials.scope import current_scope
from noetl.errors import NoetlError, PathRefusedError, PlaybookError
from noetl.store.base import ExecutionRecord, Store
from noetl.tools.child_steps import StepNames, find_file, step_result
from noetl.tools.deadline import Deadline

__all__ = ["ChildLauncher", "PlaybookTool", "child_execution_id"]

log = logging.getLogger("noetl.tools.playbook")


class ChildLauncher(Protocol):
    """How a process starts (and cancels) child executions."""

    @property
    def store(self) -> Store:
        """The store the children are recorded in (and the catalog is read from)."""
        ...

    def launch(
        self,
        text: str,
        *,
        path: str | None,
        workload: dict[str, Any],
        execution_id: str,
        parent_execution_id: str,
    ) -> bool:
        """Start an execution of `text` with this id; False when one with this id exists
        already (started earlier: wait for it). PlaybookError for an invalid playbook."""
        ...

    def cancel(self, execution_id: str) -> None:
        """Ask for an execution to be canceled (nothing waits for it any more)."""
        ...

    def stopping(self) -> bool:
        """True when this process is shutting down: waiting tools give up."""
        ...


def child_execution_id(key: str, attempt: int = 1) -> str:
    """The id of the child started by attempt `attempt` of the task with idempotency key
    `key`: decimal, up to 19 digits (63 bits of sha256), like the ids of other executions."""
    seed = key if attempt <= 1 else f"{key}#{attempt}"
    digest = hashlib.sha256(f"noetl.child:{seed}".encode()).digest()
    return str(int.from_bytes(digest[:8], "big") >> 1)


class PlaybookTool:
    """Starts the child execution of a task (once) and waits for it to finish."""

    kind: str = "playbook"
    waits: bool = True

    def __init__(
        self,
        launcher: ChildLauncher,
        *,
        root: Path | None = None,
        poll_s: float = 0.05,
        max_poll_s: float = 0.2,
        parent_check_s: float = 1.0,
    ) -> None:
        self._launcher = launcher
        # None: the working directory when reading (a tool made without settings).
        self._root = root
        self._poll_s = poll_s
        self._max_poll_s = max_poll_s
        self._parent_check_s = parent_check_s
        self._step_names = StepNames()

    def run(self, task: Task) -> Outcome:
        started = time.perf_counter()
        returned = task.spec.get("return_step")
        if returned is not None and (not isinstance(returned, str) or not returned.strip()):
            return _fatal(task, f"spec.return_step must be a step name; got {returned!r}")
        child_id, found = self._child(task)
        if not found:
            failure = self._launch(task, child_id)
            if failure is not None:
                return failure
        record = self._wait(task, child_id)
        if isinstance(record, Outcome):
            return record
        return self._finished(task, record, started)

    # --- starting ------------------------------------------------------------------------

    def _child(self, task: Task) -> tuple[str, bool]:
        """The child this run waits for, and whether it exists: the newest child of this
        or an earlier attempt unless that one failed (then this run is a retry, and its
        own child is to be started)."""
        own = child_execution_id(task.key, task.attempt)
        for attempt in range(max(task.attempt, 1), 0, -1):
            child_id = child_execution_id(task.key, attempt)
            record = self._launcher.store.get_execution(child_id)
            if record is None:
                continue
            if child_id == own or record.status in (ExecutionStatus.RUNNING, ExecutionStatus.OK):
                return child_id, True
            break
        return own, False

    def _launch(self, task: Task, child_id: str) -> Outcome | None:
        """Start the child; a failed outcome when that cannot be done."""
        path = task.spec.get("path")
        if not isinstance(path, str) or not path:
            return _fatal(task, "playbook tool needs spec.path (a registered path or a file)")
        try:
            version = _version(task.spec.get("version"))
        except ValueError as exc:
            return _fatal(task, str(exc))
        try:
            found = self._source(path, version)
        except PathRefusedError as exc:
            return _fatal(task, str(exc.at(task.step)))
        if isinstance(found, str):
            return _fatal(task, found)
        text, source_path, from_file = found
        missing = self._missing_step(task, text, path)
        if missing is not None:
            return _fatal(task, missing)
        # The args as rendered, secret references still markers: the child's workload is
        # stored, and the child's own tasks resolve the references where they run.
        workload = dict(current_scope().unresolved(task).args)
        try:
            started = self._launcher.launch(
                text,
                path=source_path,
                workload=workload,
                execution_id=child_id,
                parent_execution_id=task.execution_id,
            )
        except PlaybookError as exc:
            if from_file:  # codes and lines only: never the file's contents
                return _fatal(task, _invalid_file(task, path, exc))
            return _fatal(task, f"child playbook {path!r} is invalid:\n{exc}")
        if not started:
            log.info("child execution %s of %s was started before", child_id, task.task_id)
        return None

    def _missing_step(self, task: Task, text: str, path: str) -> str | None:
        """The error when `spec.return_step` names a step the child's text does not have
        (None when it has it, or the text is invalid: starting it says why)."""
        returned = task.spec.get("return_step")
        if not isinstance(returned, str):
            return None
        names = self._step_names(text, path)
        if names is None or returned in names:
            return None
        return (
            f"step '{task.step}': return_step {returned!r} is not a step of child playbook "
            f"{path!r} (its steps: {', '.join(sorted(names))})"
        )

    def _source(self, path: str, version: int | None) -> tuple[str, str, bool] | str:
        """The child's text, its path and whether it came from a file: from the catalog,
        else (without a version) from a file under the root (`find_file`); the
        error message, naming what was tried, when neither has it. PathRefusedError for
        a path outside the root."""
        record = self._launcher.store.get_playbook(path, version)
        if record is not None:
            return record.text, record.path, False
        if version is not None:
            return f"version {version} of playbook {path!r} is not registered"
        root = (self._root or Path.cwd()).resolve()
        file, tried = find_file(path, root)
        if file is None:
            return (
                f"playbook {path!r} is neither registered nor a file (under {root}; "
                f"tried {', '.join(tried)})"
            )
        try:
            return file.read_text(encoding="utf-8"), path, True
        except UnicodeDecodeError:
            return f"playbook file {path!r} (under {root}) is not UTF-8 text"
        except OSError as exc:  # the reason only: the message may not quote the file
            reason = exc.strerror or type(exc).__name__
            return f"playbook file {path!r} (under {root}) cannot be read: {reason}"

    # --- waiting -------------------------------------------------------------------------

    def _wait(self, task: Task, child_id: str) -> ExecutionRecord | Outcome:
        """Poll until the child finishes (its record), or an outcome when the wait ends
        otherwise: timeout, the parent finished, this process stops, the child vanished."""
        store = self._launcher.store
        now = time.monotonic()
        limit = Deadline.of(task)
        deadline = None if limit is None else limit.at
        parent_check = now + self._parent_check_s
        delay = self._poll_s
        while True:
            if self._launcher.stopping():
                return Outcome(
                    task.task_id,
                    ok=False,
                    error=f"stopped waiting for child execution {child_id}: shutting down",
                    error_type="Interrupted",
                    retryable=True,
                )
            try:
                record = store.get_execution(child_id)
                if record is None:
                    return _fatal(task, f"child execution {child_id} no longer exists")
                if record.status.terminal:
                    return record
                now = time.monotonic()
                if now >= parent_check:
                    parent_check = now + self._parent_check_s
                    ended = self._parent_finished(task, child_id)
                    if ended is not None:
                        return ended
            except NoetlError as exc:
                if not exc.retryable:
                    raise
                log.warning("polling child execution %s failed: %s", child_id, exc)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self._launcher.cancel(child_id)
                return Outcome(
                    task.task_id,
                    ok=False,
                    error=f"child execution {child_id} did not finish within "
                    f"{task.timeout_ms} ms (asked to cancel)",
                    error_type="ChildExecutionTimeout",
                )
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - now)))
            delay = min(delay * 1.5, self._max_poll_s)

    def _parent_finished(self, task: Task, child_id: str) -> Outcome | None:
        """When the parent finished meanwhile (canceled, or halted by another failure),
        nothing waits for the child: cancel it and stop waiting."""
        parent = self._launcher.store.get_execution(task.execution_id)
        if parent is not None and not parent.status.terminal:
            return None
        self._launcher.cancel(child_id)
        return Outcome(
            task.task_id,
            ok=False,
            error=f"the parent execution finished; child execution {child_id} asked to cancel",
            error_type="CancelError",
        )

    def _finished(self, task: Task, record: ExecutionRecord, started: float) -> Outcome:
        duration_ms = (time.perf_counter() - started) * 1000
        child_id = record.execution_id
        if record.status is ExecutionStatus.OK:
            returned = task.spec.get("return_step")
            this: Any = {
                "execution_id": child_id,
                "status": record.status.value,
                "context": record.context,
            }
            if isinstance(returned, str):
                try:
                    this = self._returned(child_id, returned)
                except NoetlError as exc:  # a run again finds the child and reads it again
                    return Outcome(
                        task.task_id,
                        ok=False,
                        error=f"reading step {returned!r} of child execution {child_id}: {exc}",
                        error_type=type(exc).__name__,
                        retryable=exc.retryable,
                        duration_ms=duration_ms,
                    )
            return Outcome(task.task_id, ok=True, this=this, duration_ms=duration_ms)
        reason = self._failed_step(child_id)
        return Outcome(
            task.task_id,
            ok=False,
            error=f"child execution {child_id} ({record.playbook_path or record.playbook_name})"
            f" finished {record.status.value}" + (f": {reason}" if reason else ""),
            error_type="ChildExecutionFailed",
            duration_ms=duration_ms,
        )

    def _returned(self, child_id: str, step: str) -> Any:
        """The result of `step` of the finished child; None when it did not finish ok."""
        found, result = step_result(self._launcher.store, child_id, step)
        if not found:
            log.info("return_step %r of child execution %s did not run", step, child_id)
        return result

    def _failed_step(self, child_id: str) -> str | None:
        """The first failed step of the child and its error, for the parent's message."""
        try:
            steps = self._launcher.store.get_steps(child_id)
        except NoetlError:
            return None
        for name, summary in steps.items():
            if summary.get("status") == "failed":
                error = summary.get("error")
                return f"step {name!r} failed" + (f": {error}" if error else "")
        return None


def _version(value: Any) -> int | None:
    """`spec.version` as a catalog version number (a template renders to text)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"spec.version must be a version number; got {value!r}")
    try:
        version = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"spec.version must be a version number; got {value!r}") from None
    if version < 1:
        raise ValueError(f"spec.version must be 1 or more; got {version}")
    return version


def _invalid_file(task: Task, path: str, exc: PlaybookError) -> str:
    """The error of a file that is not a valid playbook: where each problem is and its
    code, never its message (a message may quote the file, and the file may be anything,
    a secret one too)."""
    problems = [
        f"{d.code}" + (f" at line {d.line}" if d.line else "") for d in exc.diagnostics[:10]
    ]
    more = len(exc.diagnostics) - len(problems)
    listed = "; ".join(problems) + (f"; and {more} more" if more > 0 else "")
    return (
        f"step '{task.step}': playbook file {path!r} is not a valid playbook ({listed}); "
        "`noetl validate` on that file explains each code"
    )


def _fatal(task: Task, error: str) -> Outcome:
    return Outcome(task.task_id, ok=False, error=error, error_type="FatalError")
