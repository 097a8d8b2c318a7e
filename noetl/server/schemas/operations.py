"""Bodies of the operators' endpoints: the workers, the dead-letter queue (list,
replay, discard) and forcing a stuck execution to complete."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, model_validator

from noetl.server.schemas.common import Request, Response

# --- workers ---------------------------------------------------------------------------


class WorkerOut(Response):
    worker_id: str
    pool: str
    hostname: str
    pid: int
    status: str = Field(description="running, draining or stopped, as the worker last said")
    started_at: float
    heartbeat_at: float
    heartbeat_age_s: float = Field(description="Seconds since its last heartbeat")
    alive: bool = Field(
        description="Not stopped, and a heartbeat within `alive_within_s` (default 60 s)"
    )


class WorkerList(Response):
    items: list[WorkerOut]
    alive: int = Field(description="How many of the workers listed are alive")


# --- the dead-letter queue -------------------------------------------------------------


class DeadLetterSummary(Response):
    """A task that failed for good; `message_id` is its ORIGINAL task id."""

    message_id: str
    execution_id: str
    step: str
    loop_index: int | None
    loop_key: Any = None
    tool_kind: str | None
    sink_id: str | None
    attempts: int
    reason: str = Field(description="exhausted, fatal, failed, lease_expired or undecodable")
    error_type: str | None
    last_error: str
    first_seen: float
    last_seen: float
    status: str = Field(description="pending, replayed or discarded")
    replays: int
    discard_reason: str | None


class DeadLetterDetail(DeadLetterSummary):
    last_stack: str | None
    payload: dict[str, Any] = Field(description="The task (kind, spec, args...), redacted")
    context_excerpt: str = Field(description="The end of the task's context, redacted")


class DeadLetterList(Response):
    items: list[DeadLetterSummary]
    limit: int
    offset: int
    counts: dict[str, int] = Field(description="Entries of each status")


class ReplayRequest(Request):
    patch: dict[str, Any] = Field(
        default_factory=dict,
        description="Changes to the task: dotted keys under spec. or args., or timeout_ms "
        '(e.g. {"spec.url": "https://new.example/api", "args.limit": 10})',
    )

    @model_validator(mode="after")
    def _patchable(self) -> Self:
        from noetl.decision.dlq import check_patch_key  # noqa: PLC0415 - keeps import light

        for key in self.patch:
            check_patch_key(key)
        return self


class ReplayResultOut(Response):
    message_id: str
    execution_id: str
    replayed: bool = Field(description="False when it had been replayed already (idempotent)")
    status: str


class BatchReplayRequest(ReplayRequest):
    """Replay every pending entry of an execution, or of one of its steps (a loop's failed
    items), with the same optional patch."""

    execution_id: str = Field(min_length=1, max_length=64)
    step: str | None = Field(
        None, min_length=1, max_length=128, description="Only this step's entries"
    )
    limit: int = Field(1000, ge=1, le=10_000, description="At most this many, oldest first")


class ReplayRefusal(Response):
    message_id: str
    reason: str = Field(description="Why it cannot run again now")


class BatchReplayOut(Response):
    execution_id: str
    step: str | None
    replayed: list[ReplayResultOut] = Field(description="The entries replayed now")
    refused: list[ReplayRefusal] = Field(description="The entries that cannot run again")
    remaining: int = Field(description="Matching entries left pending past `limit`")


class DiscardRequest(Request):
    reason: str = Field(
        min_length=1, max_length=2000, pattern=r"\S", description="Why it is given up"
    )


class ForceCompleteRequest(Request):
    status: str = Field("ok", pattern="^(ok|failed)$", description="ok or failed")
    result: Any = Field(None, description="The step's result (saved by its result.as)")
    reason: str | None = Field(None, max_length=2000)


class ForceCompleteResult(Response):
    execution_id: str
    step: str
    accepted: bool
