"""The store append of one decision, built the same way by every runtime.

A decision's events become the projections (the execution row when it finishes or is
reopened, the step states it touched), its commands the queue changes (distributed mode),
its timers held inbox inputs, and its `task.dead_lettered` events the dead-letter entries
written in the same transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from noetl.core import (
    CancelTasks,
    Command,
    EnqueueTask,
    Event,
    EventType,
    RequeueTask,
    StartTimer,
    Task,
)
from noetl.core.evolve import evolve
from noetl.decision.dlq import dead_letter_of
from noetl.dsl.complexity import estimate
from noetl.dsl.model import Playbook
from noetl.engine import ExecutionState
from noetl.observability.trace_context import TraceSampler
from noetl.store.base import (
    Append,
    DeadLetter,
    DeadLetterStatus,
    Enqueue,
    Requeue,
    Timer,
)

# The task (as dispatched, a dict) of a task id of the execution, or None if unknown.
FindTask = Callable[[str], Mapping[str, Any] | None]


def build_append(
    state: ExecutionState,
    *,
    before: int,
    events: Sequence[Event],
    commands: Sequence[Command],
    now: float,
    find_task: FindTask,
    inputs_done: Sequence[int] = (),
    pool: str | None = None,
    sampler: TraceSampler | None = None,
    playbook: Playbook | None = None,
    complexity_warn: int | None = None,
) -> Append:
    """The append of `events` (and `commands`) on top of stored sequence `before`.

    With a `pool` the queue changes and timers are part of it (distributed mode); without,
    the runtime runs the tasks and timers itself (the embedded runtime). With a `sampler`
    (tracing on), the queued tasks of a traced execution carry their trace context. With
    the `playbook`, a dead-letter entry records the plan's complexity score and whether it
    is at or over `complexity_warn` (`too_complex`; never when that is None)."""
    finished = False
    reopened = False
    touched: set[str] = set()
    dead: list[DeadLetter] = []
    refused: dict[str, DeadLetterStatus] = {}
    for event in events:
        if event.step:
            touched.add(event.step)
        if event.type == EventType.WORKFLOW_FINISHED:
            finished = True
        elif event.type == EventType.WORKFLOW_REOPENED:
            reopened = True
        elif event.type == EventType.TASK_DEAD_LETTERED:
            task = find_task(event.payload["task_id"])
            entry = dead_letter_of(event, task, now, state.workload)
            if playbook is not None:
                score = estimate(playbook, state.workload).score
                entry.payload["complexity"] = score
                warned = complexity_warn is not None and score >= complexity_warn
                entry.payload["too_complex"] = warned
            dead.append(entry)
        elif event.type == EventType.OPERATOR_REFUSED:
            message_id = event.payload.get("message_id")
            if event.payload.get("action") == "replay" and message_id:
                refused[str(message_id)] = DeadLetterStatus.PENDING  # not replayed after all
    if finished or reopened:
        touched = set(state.steps)
    append = Append(
        execution_id=state.execution_id,
        expected_seq=before,
        events=list(events),
        status=state.status if finished or reopened else None,
        steps={name: state.steps[name].summary() for name in touched if name in state.steps},
        # The saved context is written once, at the end: rewriting a growing context on
        # every step would make each commit cost more than the last.
        context=dict(state.context) if finished else None,
        now=now,
        inputs_done=list(inputs_done),
        dead_letters=dead,
        dead_letter_status=refused,
    )
    if pool is None:
        return append
    traced = sampler is not None and sampler.sampled(state.execution_id, state.workload)
    stamp = sampler.stamp if sampler is not None and traced else None
    return evolve(append, **_queue_changes(state, commands, pool, stamp))


def _queue_changes(
    state: ExecutionState,
    commands: Sequence[Command],
    pool: str,
    stamp: Callable[[Task], Task] | None,
) -> dict[str, Any]:
    # A task dispatched as the only one in flight is marked `solo`: its worker may decide
    # what follows it (noetl.worker.runner) instead of reporting to a server. A task with
    # a pool of its own (`Task.pool`: a `sinks` task) is queued there.
    solo = len(state.tasks) == 1 and not state.terminal
    enqueue: list[Enqueue] = []
    requeue: list[Requeue] = []
    cancel: list[str] = []
    timers: list[Timer] = []
    for command in commands:
        if isinstance(command, EnqueueTask):
            task = command.task if stamp is None else stamp(command.task)
            enqueue.append(Enqueue(task, pool=task.pool or pool, solo=solo))
        elif isinstance(command, RequeueTask):
            if command.task is None:
                requeue.append(Requeue(command.task_id, command.attempt, command.delay_s))
            else:  # a replay: its (maybe patched) task replaces the row, or makes one
                task = dataclasses.replace(command.task, attempt=command.attempt)
                task = task if stamp is None else stamp(task)
                enqueue.append(Enqueue(task, pool=task.pool or pool, delay_s=command.delay_s))
        elif isinstance(command, CancelTasks):
            cancel.extend(command.task_ids)
        elif isinstance(command, StartTimer):
            timers.append(Timer(command.delay_s, dict(command.payload)))
    return {"enqueue": enqueue, "requeue": requeue, "cancel_tasks": cancel, "timers": timers}


def plain(append: Append) -> bool:
    """Whether `append` is a decision a chain may run past (`chain_appends`): events,
    step states and the tasks it dispatches, nothing else (no finish, no queue changes
    besides new tasks, no timers, inputs or dead letters)."""
    return (
        append.status is None
        and append.context is None
        and not append.requeue
        and not append.cancel_tasks
        and not append.inputs_done
        and not append.timers
        and not append.dead_letters
        and not append.dead_letter_status
    )


def chain_appends(appends: Sequence[Append]) -> Append:
    """One append for consecutive decisions of one execution, each continuing the one
    before (a worker's chain of steps, `noetl.worker.chain`): their events in order, the
    last state of each step they touched, and the last decision's writes. The tasks the
    earlier decisions dispatched ran in that chain already: they are not queued (their
    dispatch events record them, as in the embedded runtime). Every decision but the last
    must be `plain`."""
    *earlier, last = appends
    seq = appends[0].expected_seq
    for append in appends:
        if append.execution_id != last.execution_id or append.expected_seq != seq:
            raise ValueError("a chain's appends must continue one another")
        seq += len(append.events)
    if not all(plain(append) for append in earlier):
        raise ValueError("only the last append of a chain may do more than dispatch")
    steps: dict[str, dict[str, Any]] = {}
    for append in appends:
        steps.update(append.steps)
    return evolve(
        last,
        expected_seq=appends[0].expected_seq,
        events=[event for append in appends for event in append.events],
        steps=steps,
    )
