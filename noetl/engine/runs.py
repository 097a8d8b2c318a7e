"""A step's run and its `case`, as the fold of the event log (`noetl.engine.state`) keeps
them: plain data, changed only by `apply`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from noetl.core import StepStatus

__all__ = ["CaseRun", "StepRun"]


@dataclass(slots=True)
class CaseRun:
    """What a step's `case` has done in this run (folded from the `case.*` events).

    `round` counts evaluations (a `retry` branch makes another, on the outcome of the
    attempt it asked for); `outcome` is what an `on_event` round evaluated (the step's
    tool output, kept until the step finishes); `fired`, `suppressed` and `routes` are
    branch indexes over every round, in order; `verdict` is the latest round's `fail`,
    `skip`, `retry` or action error; `tasks` maps each branch task to its branch, and
    `failed` holds the error of every branch whose task failed for good."""

    round: int = 0
    outcome: dict[str, Any] | None = None
    fired: list[int] = field(default_factory=list)
    suppressed: list[int] = field(default_factory=list)
    routes: list[int] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    tasks: dict[str, int] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)


_OK, _FAILED = 1, 2


class ItemResults:
    """The finished items of a loop: whether each succeeded (a byte per item) and the
    outputs of those that did (a list by index), with their `collect.key` when given.
    Dictionaries by index cost about ten times as much per item."""

    __slots__ = ("_collect_keys", "_outs", "_status")

    def __init__(self) -> None:
        self._status = bytearray()
        self._outs: list[Any] = []
        self._collect_keys: dict[int, str] = {}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ItemResults):
            return NotImplemented
        return (self._status, self._outs, self._collect_keys) == (
            other._status,
            other._outs,
            other._collect_keys,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dicts it replaces

    def __repr__(self) -> str:
        done = sum(1 for status in self._status if status)
        return f"ItemResults(finished={done}, outputs={len(self._outs)})"

    def ok(self, index: int) -> bool | None:
        """True or False once item `index` finished, None before."""
        status = self._status[index] if index < len(self._status) else 0
        return None if status == 0 else status == _OK

    def record(
        self, index: int, *, ok: bool, out: Any = None, collect_key: str | None = None
    ) -> None:
        _grow(self._status, index, 0)
        self._status[index] = _OK if ok else _FAILED
        if ok:
            _grow(self._outs, index, None)
            self._outs[index] = out
            if collect_key is not None:
                self._collect_keys[index] = collect_key

    def forget(self, index: int) -> bool | None:
        """Item `index` unfinished again (a replay); what it was (see `ok`)."""
        was = self.ok(index)
        if was is not None:
            self._status[index] = 0
            if index < len(self._outs):
                self._outs[index] = None
            self._collect_keys.pop(index, None)
        return was

    def outputs(self, count: int) -> list[Any]:
        """The outputs of items 0 to count - 1 (None for an item without one)."""
        outs = self._outs[:count]
        return outs + [None] * (count - len(outs))

    def collected(self, count: int) -> list[tuple[str | None, Any]]:
        """The outputs of the successful items among the first `count`, in order, with
        their `collect.key`."""
        status, outs, keys = self._status, self._outs, self._collect_keys
        return [(keys.get(i), outs[i]) for i in range(min(count, len(status))) if status[i] == _OK]


def _grow(values: bytearray | list[Any], index: int, blank: Any) -> None:
    missing = index + 1 - len(values)
    if missing > 0:
        values.extend(bytes(missing) if isinstance(values, bytearray) else [blank] * missing)


@dataclass(slots=True)
class StepRun:
    """The latest run of one step. A step runs at most once per execution, except that a
    call along a cycle of the graph starts a new run of a step that finished (`run`
    counts them; see noetl.engine.flow)."""

    status: StepStatus = StepStatus.PENDING
    calls: int = 0
    run: int = 1
    # A step on a cycle called while it was running: the caller, whose call starts the
    # next run once this one has finished.
    recall: str | None = None
    error: str | None = None
    result: Any = None
    bind: dict[str, Any] = field(default_factory=dict)
    is_loop: bool = False
    items: list[Any] = field(default_factory=list)
    total: int | None = None
    next_index: int = 0
    completed: int = 0
    succeeded: int = 0
    failed: int = 0
    in_flight: int = 0
    stopped: bool = False
    # Each finished item's outcome and output (a loop of a million items keeps them all).
    results: ItemResults = field(default_factory=ItemResults)
    keys: dict[int, Any] = field(default_factory=dict)  # rendered `loop.key` per item
    started_at: float | None = None
    finished_at: float | None = None
    taken: list[str] = field(default_factory=list)
    # What the step was (pending or parked) before the end of its execution marked it
    # skipped: a replay that reopens the execution gives it back (`workflow.reopened`).
    before_finish: StepStatus | None = None
    # The seq of its `loop.started`: a loop's total-budget timer names the run it is for.
    loop_seq: int = 0
    # A loop's mode and window as rendered when it started (templates in upstream
    # NoETL's dialect); None: the playbook's own values.
    loop_mode: str | None = None
    loop_limit: int | None = None
    # Its `case`, once evaluated in this run (None for every step without one).
    case: CaseRun | None = None

    def status_view(self) -> dict[str, Any]:
        """`step.<id>.status`: running, done, ok, error and loop counters."""
        done = self.status.done
        return {
            "running": self.status is StepStatus.RUNNING,
            "done": done,
            "ok": (self.status is StepStatus.OK) if done else None,
            "error": self.error,
            "total": self.total,
            "completed": self.completed,
            "succeeded": self.succeeded,
            "failed": self.failed,
        }

    def summary(self) -> dict[str, Any]:
        """What `noetl run --json` and the step_state projection show for the step."""
        out: dict[str, Any] = {"status": self.status.value}
        if self.run > 1:
            out["run"] = self.run
        if self.is_loop:
            out.update(
                total=self.total,
                completed=self.completed,
                succeeded=self.succeeded,
                failed=self.failed,
            )
        if self.error is not None:
            out["error"] = self.error
        return out
