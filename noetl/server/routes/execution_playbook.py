"""`GET /api/executions/{id}/playbook`: the playbook text an execution runs.

An execution keeps the text it was started with, registered or not (`noetl run` runs a
file it never registers), so its playbook can always be shown; the catalog version with
the same text is named when there is one.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from noetl.auth import Role
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps
from noetl.server.routes.executions import ExecutionId
from noetl.server.schemas.common import ErrorBody
from noetl.server.schemas.executions import ExecutionPlaybook
from noetl.store.base import HistoryPrunedError, NotFoundError, Store

router = APIRouter(
    prefix="/api/executions", tags=["executions"], dependencies=[Depends(authenticate)]
)

# How many catalog versions are compared with the execution's text, newest first.
VERSIONS_COMPARED = 100


def catalog_match(store: Store, path: str | None, text: str) -> tuple[int | None, int | None]:
    """(the catalog version of `path` whose text is `text`, the latest version of `path`);
    None for what the catalog does not have."""
    if path is None:
        return None, None
    latest = store.get_playbook(path)
    if latest is None:
        return None, None
    for version in range(latest.version, max(0, latest.version - VERSIONS_COMPARED), -1):
        record = latest if version == latest.version else store.get_playbook(path, version)
        if record is not None and record.text == text:
            return version, latest.version
    return None, latest.version


@router.get(
    "/{execution_id}/playbook",
    summary="The playbook text the execution runs, and its catalog version if any",
    dependencies=[requires(Role.VIEWER)],
    response_model=ExecutionPlaybook,
    responses={404: {"model": ErrorBody, "description": "No such execution"}},
)
def get_execution_playbook(execution_id: ExecutionId, deps: Deps) -> ExecutionPlaybook:
    """The text the execution was started with, whether or not its path is registered
    (`noetl run` never registers the file it runs; an inline playbook has no path)."""
    record = deps.store.get_execution(execution_id)
    if record is None:
        raise NotFoundError(f"execution {execution_id} not found")
    if record.pruned_at is not None:  # its text went with its history
        raise HistoryPrunedError(execution_id, record.pruned_at)
    version, latest = catalog_match(deps.store, record.playbook_path, record.playbook_text)
    return ExecutionPlaybook(
        execution_id=execution_id,
        playbook_name=record.playbook_name,
        playbook_path=record.playbook_path,
        content=record.playbook_text,
        catalog_version=version,
        catalog_latest=latest,
    )
