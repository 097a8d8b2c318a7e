"""Sinks run elsewhere than their tool: the hand-off (`EngineOptions.sinks_pool`).

A deployment whose workers may not reach the systems its sinks write to (a warehouse
behind the server's network, say) sets `sinks.in_worker: false`: a task with sinks is
dispatched with `Task.sinks_pool`, its worker runs the tool only, and when its outcome
is ok the engine queues a `sinks` task in that pool (the server serves it) which writes
the result through the same sinks, with the same `pick`, context and secrets, and
reports the tool's `this` back unchanged. The sinks' secrets are resolved there, not
in the tool's worker. The step, loop item or case branch finishes
with the `sinks` task's outcome, so it routes after its sinks exactly as when they run
in the worker; a failed sink retries the `sinks` task, not the tool.

Pure functions over a `Turn` (no I/O).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from noetl.core import EnqueueTask, EventType, Task
from noetl.core.secrets import referenced
from noetl.core.types import SINKS_KIND

if TYPE_CHECKING:
    from noetl.engine.turn import Turn


def hand_off(turn: Turn, task_id: str, payload: dict[str, Any]) -> bool:
    """When `task_id` ran its tool without its sinks and succeeded, dispatch its `sinks`
    task (`sink.started`) and return True; False for every other outcome."""
    handed = turn.state.deferred.get(task_id)
    if handed is None or not payload.get("ok"):
        return False
    index = handed.get("index")
    sinks = tuple(dict(sink) for sink in handed.get("sinks") or ())
    secrets: set[str] = set()
    for sink in sinks:
        secrets |= referenced(sink.get("spec") or {})
    task = Task(
        task_id=f"{task_id}.sinks",
        execution_id=turn.state.execution_id,
        step=str(handed["step"]),
        kind=SINKS_KIND,
        spec={},
        args={"this": payload.get("this")},
        context=dict(handed.get("context") or {}),
        key=f"{handed['key']}:sinks",
        index=index,
        attempt=1,
        timeout_ms=None,  # each sink has its own timeout
        secrets=tuple(sorted(secrets)),
        sinks=sinks,
        pick=handed.get("pick"),
        pool=str(handed["sinks_pool"]),
    )
    sent: dict[str, Any] = {"from": task_id, "task": task.to_dict()}
    if index is not None:
        sent["index"] = index
    turn.emit(EventType.SINK_STARTED, task.step, sent)
    turn.commands.append(EnqueueTask(task))
    return True
