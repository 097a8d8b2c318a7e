"""The dead-letter queue as operators use it: entries built from the log, replay, discard.

* `dead_letter_of` turns a `task.dead_lettered` event and the task it names into the DLQ
  entry the runtime writes with the decision (payload and context excerpt redacted; the
  task itself kept for the replay: it holds secret references, never their values).
* `DeadLetterQueue` is what the API and `noetl dlq` call. A replay is checked against the
  execution as its log stands (a canceled or rolled-back execution cannot be reopened, a
  task that did not fail cannot run again), patched, and handed to the orchestrator as a
  REPLAY input in the same transaction that marks the entry replayed: replaying twice
  replays once. The engine decides the rest (`noetl.engine.recovery`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl.core import Event, HistoryPrunedError, NotFoundError, Task
from noetl.decision.workloads import context_with_workload
from noetl.dsl.limits import check_data
from noetl.engine import Engine, ExecutionState, fold
from noetl.engine.recovery import replay_refusal
from noetl.errors import ConflictError
from noetl.redaction import redact
from noetl.store.base import DeadLetter, DeadLetterStatus, Store

# How much of a task's context a dead-letter entry keeps (its end; seed 000: "last 2KB").
EXCERPT_CHARS = 2048
# A workload bigger than this is named, not copied, in a context excerpt.
EXCERPT_WORKLOAD_BYTES = 64 * 1024
# What a patch may change: the tool's configuration, its inputs, its time budget.
PATCHABLE = ("spec.", "args.")
PATCHABLE_KEYS = frozenset({"timeout_ms"})


def dead_letter_of(
    event: Event,
    task: Mapping[str, Any] | None,
    now: float,
    workload: Mapping[str, Any] | None = None,
) -> DeadLetter:
    """The DLQ entry of a `task.dead_lettered` event; `task` is the task as dispatched
    (None when it could not be found: the entry still records the failure). Its context
    excerpt shows the context the tool saw: with the execution's `workload`, which tasks
    do not carry (noetl.decision.workloads), unless that is big (then a note says so)."""
    payload = event.payload
    error = str(payload.get("error") or "tool failed")
    first, _, rest = error.partition("\n")
    data = dict(task or {})
    shown: dict[str, Any] = {
        key: data[key]
        for key in ("kind", "spec", "args", "key", "index", "timeout_ms", "sinks")
        if key in data
    }
    shown["attempt"] = payload.get("attempts")
    seen = dict(data.get("context") or {})
    if workload is not None and "workload" not in seen:
        too_big = check_data(workload, max_bytes=EXCERPT_WORKLOAD_BYTES)
        shown_workload: Any = workload
        if too_big is not None and too_big.kind == "size":
            shown_workload = f"<over {EXCERPT_WORKLOAD_BYTES} bytes: see the execution>"
        seen = context_with_workload(seen, shown_workload)
    context = json.dumps(redact(seen), default=str, separators=(",", ":"))
    return DeadLetter(
        message_id=str(payload["task_id"]),
        execution_id=event.execution_id,
        step=event.step or str(data.get("step", "")),
        loop_index=payload.get("index"),
        loop_key=payload.get("key"),
        tool_kind=payload.get("kind"),
        sink_id=payload.get("sink_id"),
        attempts=int(payload.get("attempts", 1)),
        reason=str(payload.get("reason", "failed")),
        error_type=payload.get("error_type"),
        last_error=first,
        last_stack=rest.strip("\n") or None,
        payload=redact(shown, keep=("key",)),
        context_excerpt=context[-EXCERPT_CHARS:],
        task={**data, "attempt": 1} if data else {},
        first_seen=now,
        last_seen=now,
    )


def apply_patch(
    task: Mapping[str, Any], patch: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The task with `patch` applied (dotted keys: `spec.url`, `args.limit`, `timeout_ms`)
    and the keys changed. ValueError names a key that may not be patched."""
    patched = copy.deepcopy(dict(task))
    for dotted, value in patch.items():
        check_patch_key(dotted)
        parts = dotted.split(".")
        target = patched
        for part in parts[:-1]:
            inner = target.get(part)
            if not isinstance(inner, dict):
                inner = {}
                target[part] = inner
            target = inner
        target[parts[-1]] = value
    return patched, sorted(patch)


def check_patch_key(dotted: str) -> None:
    """ValueError unless `dotted` names something a replay may change."""
    if dotted in PATCHABLE_KEYS:
        return
    if not dotted.startswith(PATCHABLE) or "" in dotted.split("."):
        raise ValueError(
            f"cannot patch {dotted!r}: a patch changes spec.<key>, args.<key> or timeout_ms"
        )


@dataclass(frozen=True, slots=True)
class ReplayResult:
    message_id: str
    execution_id: str
    replayed: bool  # False: it had been replayed already (nothing happened now)
    status: DeadLetterStatus


@dataclass(frozen=True, slots=True)
class BatchReplay:
    """What `DeadLetterQueue.replay_all` did: the entries it replayed, those it could not
    (message id, why), and how many matching entries it left pending past its limit."""

    execution_id: str
    step: str | None
    replayed: list[ReplayResult]
    refused: list[tuple[str, str]]
    remaining: int


class DeadLetterQueue:
    """Reads and acts on the DLQ of a store; `engine_of` builds the engine of an
    execution (the orchestrator's decider) to check a replay against its log."""

    def __init__(self, store: Store, engine_of: Any) -> None:
        self.store = store
        self._engine_of = engine_of

    def get(self, message_id: str) -> DeadLetter:
        entry = self.store.get_dead_letter(message_id)
        if entry is None:
            raise NotFoundError(f"no dead-letter entry {message_id}")
        return entry

    def replay(
        self, message_id: str, *, patch: Mapping[str, Any] | None = None, by: str = "operator"
    ) -> ReplayResult:
        """Move an entry back to the queue with its ORIGINAL message id (see the module
        docstring). ConflictError when it cannot run again, ValueError for a bad patch."""
        entry = self.get(message_id)
        if entry.status is DeadLetterStatus.DISCARDED:
            reason = f": {entry.discard_reason}" if entry.discard_reason else ""
            raise ConflictError(f"dead-letter entry {message_id} was discarded{reason}")
        if entry.status is DeadLetterStatus.REPLAYED:
            return ReplayResult(message_id, entry.execution_id, False, entry.status)
        if not entry.task:
            raise ConflictError(f"dead-letter entry {message_id} keeps no task to replay")
        task, patched = apply_patch(entry.task, patch or {})
        self._check(entry, Task.from_dict(task))
        payload: dict[str, Any] = {"message_id": message_id, "task": task, "by": by}
        if patched:
            payload["patched"] = patched
        posted = self.store.post_replay(message_id, payload)
        status = DeadLetterStatus.REPLAYED
        return ReplayResult(message_id, entry.execution_id, posted, status)

    def replay_all(
        self,
        execution_id: str,
        *,
        step: str | None = None,
        patch: Mapping[str, Any] | None = None,
        by: str = "operator",
        limit: int = 1000,
    ) -> BatchReplay:
        """Replay every PENDING entry of `execution_id` (of `step` when given), oldest
        failure first, at most `limit`: each as `replay` does, with the same `patch`.
        The log is read once: the replays posted here are decided after, in order. An
        entry that cannot run again is refused on its own; the others still replay.
        NotFoundError when there is no such execution."""
        engine, state = self.state(execution_id)
        entries = self._pending(execution_id, step)
        replayed: list[ReplayResult] = []
        refused: list[tuple[str, str]] = []
        for entry in entries[:limit]:
            try:
                if not entry.task:
                    raise ConflictError("it keeps no task to replay")
                task, patched = apply_patch(entry.task, patch or {})
                parsed = Task.from_dict(task)
                refusal = replay_refusal(engine, state, parsed.step, parsed.task_id, parsed.index)
                if refusal is not None:
                    raise ConflictError(refusal)
            except (ConflictError, ValueError) as exc:
                refused.append((entry.message_id, str(exc)))
                continue
            payload: dict[str, Any] = {"message_id": entry.message_id, "task": task, "by": by}
            if patched:
                payload["patched"] = patched
            posted = self.store.post_replay(entry.message_id, payload)
            replayed.append(
                ReplayResult(entry.message_id, execution_id, posted, DeadLetterStatus.REPLAYED)
            )
        remaining = max(0, len(entries) - limit)
        return BatchReplay(execution_id, step, replayed, refused, remaining)

    def _pending(self, execution_id: str, step: str | None) -> list[DeadLetter]:
        """The execution's pending entries (of `step`), oldest failure first."""
        found: list[DeadLetter] = []
        page = 1000
        while True:
            batch = self.store.list_dead_letters(
                status=DeadLetterStatus.PENDING,
                execution_id=execution_id,
                limit=page,
                offset=len(found),
            )
            found.extend(batch)
            if len(batch) < page:
                break
        chosen = [entry for entry in found if step is None or entry.step == step]
        chosen.sort(key=lambda entry: (entry.last_seen, entry.message_id))
        return chosen

    def discard(self, message_id: str, reason: str) -> DeadLetter:
        """Give an entry up, with a reason. ConflictError when it is not pending."""
        if not reason.strip():
            raise ValueError("a discard needs a reason")
        entry = self.get(message_id)
        if not self.store.discard_dead_letter(message_id, reason):
            raise ConflictError(
                f"dead-letter entry {message_id} is {entry.status.value}; only a pending "
                "entry can be discarded"
            )
        return self.get(message_id)

    def _check(self, entry: DeadLetter, task: Task) -> None:
        """The engine's own check, on the execution as its log stands now."""
        engine, state = self.state(entry.execution_id)
        refusal = replay_refusal(engine, state, task.step, task.task_id, task.index)
        if refusal is not None:
            raise ConflictError(f"cannot replay {entry.message_id}: {refusal}")

    def state(self, execution_id: str) -> tuple[Engine, ExecutionState]:
        """The execution's engine and state, folded from its log; NotFoundError when there
        is no such execution, HistoryPrunedError when retention deleted its history."""
        record = self.store.get_execution(execution_id)
        if record is None:
            raise NotFoundError(f"execution {execution_id} not found")
        if record.pruned_at is not None:
            raise HistoryPrunedError(execution_id, record.pruned_at)
        engine: Engine = self._engine_of(record)
        state = fold(engine.new_state(execution_id), self.store.load_events(execution_id))
        return engine, state
