"""The checkpoint store (`store.checkpoints`): progress of tasks that run in parts.

A task that runs in parts (a pipeline's tasks, run by one worker) keeps how far it got
here, one row per task id, so its next attempt (after a retry, or after its worker
crashed and the lease was recovered) resumes there. A save never replaces a checkpoint
written by a later attempt: a stale worker that still runs cannot undo a newer attempt's
progress. The check and the write are one statement, so two workers saving at once
cannot both pass it.
"""

from __future__ import annotations

from typing import Any

from noetl.store._json import dumps, loads
from noetl.store.connector import Connector
from noetl.store.records import Checkpoint

# The largest checkpoint kept: the size of its JSON text, in bytes.
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024


def encode_checkpoint(task_id: str, value: Any) -> str:
    """`value` as the JSON text a checkpoint keeps (ASCII: a NUL is written as the escape
    `\\u0000`, so any `text` column holds it); ValueError when it is over
    `MAX_CHECKPOINT_BYTES`."""
    body = dumps(value)
    size = len(body.encode("utf-8"))
    if size > MAX_CHECKPOINT_BYTES:
        raise ValueError(
            f"the checkpoint of task {task_id!r} is {size} bytes of JSON, over the limit of "
            f"{MAX_CHECKPOINT_BYTES} bytes (MAX_CHECKPOINT_BYTES): keep less progress in it"
        )
    return body


class Checkpoints:
    """`CheckpointStore` over a connector."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def save(self, task_id: str, execution_id: str, attempt: int, value: Any) -> bool:
        """Keep `value` as the checkpoint of `task_id` unless a later attempt wrote the one
        kept; whether it was kept."""
        body = encode_checkpoint(task_id, value)
        params = {"task_id": task_id, "execution_id": execution_id, "attempt": attempt}
        return self._db.execute("save_checkpoint", {**params, "body": body}) > 0

    def load(self, task_id: str) -> Checkpoint | None:
        """The checkpoint of `task_id`, or None."""
        row = self._db.fetch_one("load_checkpoint", {"task_id": task_id})
        if row is None:
            return None
        task, execution_id, attempt, body, updated_at = row
        return Checkpoint(task, execution_id, int(attempt), loads(body), self._db.epoch(updated_at))

    def drop(self, task_id: str) -> None:
        """Forget the checkpoint of `task_id`, if there is one."""
        self._db.execute("drop_checkpoint", {"task_id": task_id})
