"""The playbook catalog: register versions, list them, fetch one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, status
from fastapi.exceptions import RequestValidationError

from noetl.auth import Role
from noetl.core import NotFoundError
from noetl.dsl.validate import load_playbook_text
from noetl.runtime.schedule_sync import sync_playbook_schedules
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps
from noetl.server.redact import redact
from noetl.server.schemas.common import DiagnosticOut, ErrorBody
from noetl.server.schemas.playbooks import (
    PlaybookDetail,
    PlaybookList,
    PlaybookRegister,
    PlaybookRegistered,
    PlaybookSummary,
    PlaybookValidate,
    PlaybookValidation,
)
from noetl.store.base import PlaybookRecord
from noetl.tools.child_checks import catalog_lookup, with_child_checks

router = APIRouter(
    prefix="/api/playbooks", tags=["playbooks"], dependencies=[Depends(authenticate)]
)

_UNNAMED = "<request>"


def _summary(record: PlaybookRecord) -> PlaybookSummary:
    return PlaybookSummary(
        path=record.path, version=record.version, name=record.name, created_at=record.created_at
    )


@router.post(
    "",
    summary="Register a playbook version",
    dependencies=[requires(Role.OPERATOR)],
    status_code=status.HTTP_201_CREATED,
    response_model=PlaybookRegistered,
    responses={422: {"model": ErrorBody, "description": "Invalid playbook or request"}},
)
def register_playbook(body: PlaybookRegister, deps: Deps) -> PlaybookRegistered:
    """Validate the playbook, then store it as the next version of its path (`path`, or
    its `metadata.path`). Registering the same text again returns the existing version.
    A `return_step` its registered child has no step of is an error (E333)."""
    loaded = load_playbook_text(body.content, body.path or _UNNAMED, policy=deps.dsl)
    loaded = with_child_checks(loaded, catalog_lookup(deps.store))
    playbook = loaded.require()  # PlaybookError -> 422 with every diagnostic
    path = body.path or playbook.metadata.path
    if not path:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "path"),
                    "msg": "required: the playbook has no metadata.path to register it under",
                    "type": "missing",
                }
            ]
        )
    record = deps.store.register_playbook(path, playbook.metadata.name, body.content, deps.clock())
    deps.catalog.forget(path)  # this server's next start reads the new latest version
    # Its engine is built now, from the model just validated: the first start reads no YAML.
    deps.orchestrator.decider.prepare(body.content, path, playbook)
    # The triggers block of the version registered last is what the schedules follow.
    sync_playbook_schedules(deps.store, path, playbook)
    return PlaybookRegistered(
        **_summary(record).model_dump(),
        warnings=[DiagnosticOut.model_validate(d.to_dict()) for d in loaded.warnings],
    )


@router.post(
    "/validate",
    summary="Validate a playbook without registering it",
    dependencies=[requires(Role.VIEWER)],
    response_model=PlaybookValidation,
    responses={422: {"model": ErrorBody, "description": "Invalid request"}},
)
def validate_playbook(body: PlaybookValidate, deps: Deps) -> PlaybookValidation:
    """Every error and warning with its line, step and key, as `noetl lint` shows them
    (a `return_step` checked against the registered child); an invalid playbook is a
    normal answer here (`valid: false`), not an error."""
    loaded = load_playbook_text(body.content, body.path or _UNNAMED, policy=deps.dsl)
    loaded = with_child_checks(loaded, catalog_lookup(deps.store))
    diagnostics = [DiagnosticOut.model_validate(d.to_dict()) for d in loaded.diagnostics]
    playbook = loaded.playbook if loaded.ok else None
    if playbook is None:
        return PlaybookValidation(valid=False, diagnostics=diagnostics)
    return PlaybookValidation(
        valid=True,
        name=playbook.metadata.name,
        path=playbook.metadata.path,
        workload=redact(playbook.workload),
        steps=[step.step for step in playbook.workflow],
        diagnostics=diagnostics,
    )


@router.get(
    "",
    summary="List registered playbooks (latest versions)",
    dependencies=[requires(Role.VIEWER)],
    response_model=PlaybookList,
)
def list_playbooks(deps: Deps) -> PlaybookList:
    return PlaybookList(items=[_summary(r) for r in deps.store.list_playbooks()])


@router.get(
    "/{path:path}",
    summary="Get a registered playbook, with its text",
    dependencies=[requires(Role.VIEWER)],
    response_model=PlaybookDetail,
    responses={404: {"model": ErrorBody, "description": "No such playbook or version"}},
)
def get_playbook(
    path: str,
    deps: Deps,
    version: Annotated[int | None, Query(ge=1, description="Default: the latest")] = None,
) -> PlaybookDetail:
    """The playbook's text and its workload defaults (what the console's start form
    offers a field for), sensitive values masked."""
    record = deps.store.get_playbook(path, version)
    if record is None:
        which = f"version {version} of " if version is not None else ""
        raise NotFoundError(f"{which}playbook {path!r} is not registered")
    loaded = load_playbook_text(record.text, record.path)
    workload = redact(loaded.playbook.workload) if loaded.ok and loaded.playbook else None
    return PlaybookDetail(**_summary(record).model_dump(), content=record.text, workload=workload)
