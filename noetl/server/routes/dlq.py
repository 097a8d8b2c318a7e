"""The dead-letter queue: list, show, replay (with an optional patch) and discard."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from noetl.auth import Role
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps
from noetl.server.schemas.common import ErrorBody
from noetl.server.schemas.operations import (
    BatchReplayOut,
    BatchReplayRequest,
    DeadLetterDetail,
    DeadLetterList,
    DeadLetterSummary,
    DiscardRequest,
    ReplayRefusal,
    ReplayRequest,
    ReplayResultOut,
)
from noetl.store.base import DeadLetterStatus

router = APIRouter(prefix="/api/dlq", tags=["dlq"], dependencies=[Depends(authenticate)])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such entry"}
}
_CONFLICT: dict[int | str, dict[str, Any]] = {
    **_NOT_FOUND,
    409: {"model": ErrorBody, "description": "The entry or its execution does not allow it"},
}
MessageId = Annotated[str, Path(min_length=1, max_length=512, description="The task's id")]


@router.get(
    "",
    summary="List dead-letter entries, most recent first",
    dependencies=[requires(Role.VIEWER)],
    response_model=DeadLetterList,
)
def list_dead_letters(
    deps: Deps,
    status: Annotated[DeadLetterStatus | None, Query(description="Only this status")] = None,
    execution_id: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> DeadLetterList:
    entries = deps.store.list_dead_letters(
        status=status, execution_id=execution_id, limit=limit, offset=offset
    )
    return DeadLetterList(
        items=[DeadLetterSummary(**entry.summary()) for entry in entries],
        limit=limit,
        offset=offset,
        counts=deps.store.dead_letter_counts(),
    )


@router.post(
    "/replay",
    summary="Replay every pending entry of an execution, or of one of its steps",
    dependencies=[requires(Role.OPERATOR)],
    response_model=BatchReplayOut,
    responses={404: {"model": ErrorBody, "description": "No such execution"}},
)
def replay_dead_letters(body: BatchReplayRequest, deps: Deps) -> BatchReplayOut:
    """Each pending entry of `execution_id` (of `step`: a loop's failed items) is replayed
    as `POST /api/dlq/{message_id}/replay` does, with the same `patch`, oldest failure
    first and at most `limit`; a failed execution is reopened once and continues. An entry
    that cannot run again is listed in `refused`, and the others still replay. Entries
    replayed already are not pending: asking again replays nothing new."""
    done = deps.orchestrator.dlq.replay_all(
        body.execution_id, step=body.step, patch=body.patch, by="api", limit=body.limit
    )
    return BatchReplayOut(
        execution_id=done.execution_id,
        step=done.step,
        replayed=[
            ReplayResultOut(
                message_id=r.message_id,
                execution_id=r.execution_id,
                replayed=r.replayed,
                status=r.status.value,
            )
            for r in done.replayed
        ],
        refused=[ReplayRefusal(message_id=m, reason=why) for m, why in done.refused],
        remaining=done.remaining,
    )


@router.get(
    "/{message_id}",
    summary="One entry: error, stack, redacted payload and context excerpt",
    dependencies=[requires(Role.VIEWER)],
    response_model=DeadLetterDetail,
    responses=_NOT_FOUND,
)
def get_dead_letter(message_id: MessageId, deps: Deps) -> DeadLetterDetail:
    return DeadLetterDetail(**deps.orchestrator.dlq.get(message_id).to_dict())


@router.post(
    "/{message_id}/replay",
    summary="Replay an entry with its original message id",
    dependencies=[requires(Role.OPERATOR)],
    response_model=ReplayResultOut,
    responses=_CONFLICT,
)
def replay_dead_letter(
    message_id: MessageId, deps: Deps, body: ReplayRequest | None = None
) -> ReplayResultOut:
    """Move the task back to the queue with the SAME message id, attempts reset and the
    patch applied; a failed execution is reopened and continues from that step. Replaying
    an entry twice replays it once (`replayed` is false the second time)."""
    patch = body.patch if body is not None else {}
    result = deps.orchestrator.dlq.replay(message_id, patch=patch, by="api")
    return ReplayResultOut(
        message_id=result.message_id,
        execution_id=result.execution_id,
        replayed=result.replayed,
        status=result.status.value,
    )


@router.post(
    "/{message_id}/discard",
    summary="Give an entry up, with a reason",
    dependencies=[requires(Role.OPERATOR)],
    response_model=DeadLetterDetail,
    responses=_CONFLICT,
)
def discard_dead_letter(
    message_id: MessageId, body: DiscardRequest, deps: Deps
) -> DeadLetterDetail:
    return DeadLetterDetail(**deps.orchestrator.dlq.discard(message_id, body.reason).to_dict())
