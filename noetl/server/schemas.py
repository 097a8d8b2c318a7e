"""Request and response bodies of the HTTP API (pydantic: the edge of the system).

Times are epoch seconds (floats), as in the store and the event log. Requests reject
unknown fields, so a misspelt option is a 422 instead of being silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from noetl.core import ExecutionStatus
from noetl.dsl.limits import check_data


class Request(BaseModel):
    """A request body. Every field is checked for what the store cannot hold or later
    steps cannot walk: a NUL character in any string (PostgreSQL refuses it) and data
    nested deeper than playbooks may be (`noetl.dsl.limits`), each a 422 naming where."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str | dict | list):
            name = info.field_name or "value"
            problem = check_data(value, root=name)
            if problem is not None:
                where = "" if problem.path == name else f" (at {problem.path})"
                raise ValueError(f"{problem.message}{where}")
        return value


class Response(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


# --- errors ----------------------------------------------------------------------------


class DiagnosticOut(Response):
    """One problem found in a playbook (see docs/dsl.md for the codes)."""

    severity: str
    code: str
    message: str
    file: str
    line: int | None = None
    step: str | None = None
    key: str | None = Field(None, description="Document path of the key, e.g. workflow[1].next")


class FieldError(Response):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(Response):
    """Every error response: a stable `error` code and a message for people."""

    error: str = Field(
        description="not_found, invalid_request, invalid_playbook, bad_config, conflict, "
        "too_large, unavailable or internal"
    )
    message: str
    diagnostics: list[DiagnosticOut] | None = None
    errors: list[FieldError] | None = None


# --- health ----------------------------------------------------------------------------


class Health(Response):
    status: str = Field(description="ok, or degraded when the database is unavailable")
    version: str
    database: str = Field(description="ok or unavailable")


# --- playbooks -------------------------------------------------------------------------


class PlaybookRegister(Request):
    content: str = Field(min_length=1, description="The playbook's YAML text")
    path: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        description="Catalog path; defaults to the playbook's metadata.path",
    )


class PlaybookSummary(Response):
    path: str
    version: int
    name: str
    created_at: float


class PlaybookRegistered(PlaybookSummary):
    warnings: list[DiagnosticOut] = Field(default_factory=list)


class PlaybookDetail(PlaybookSummary):
    content: str


class PlaybookList(Response):
    items: list[PlaybookSummary]


class PlaybookValidate(Request):
    content: str = Field(min_length=1, description="The playbook's YAML text")
    path: str | None = Field(
        None, min_length=1, max_length=512, description="Name shown in diagnostics"
    )


class PlaybookValidation(Response):
    """Every problem found, errors and warnings, in line order; nothing is stored."""

    valid: bool = Field(description="True when there is no error (warnings allowed)")
    name: str | None = Field(None, description="metadata.name, when the playbook is valid")
    path: str | None = Field(None, description="metadata.path, when the playbook is valid")
    workload: dict[str, Any] | None = Field(
        None, description="The workload defaults (sensitive values masked), when valid"
    )
    steps: list[str] = Field(default_factory=list, description="Step names, when valid")
    diagnostics: list[DiagnosticOut]


# --- executions ------------------------------------------------------------------------


class ExecutionOptions(Request):
    parent_execution_id: str | None = Field(
        None, max_length=64, description="The execution this one runs on behalf of"
    )


class ExecutionStart(Request):
    """Start a registered playbook (`path`, optionally `version`) or inline YAML
    (`playbook`): exactly one of the two."""

    path: str | None = Field(None, min_length=1, max_length=512)
    version: int | None = Field(None, ge=1, description="Only with path; default the latest")
    playbook: str | None = Field(None, min_length=1, description="Inline playbook YAML")
    workload: dict[str, Any] = Field(
        default_factory=dict,
        description="Merged over the playbook's workload. `trace: true` traces this "
        "execution whatever `tracing.sample_rate` says (when the server has tracing on; "
        "`noetl exec start --trace`)",
    )
    options: ExecutionOptions = Field(default_factory=ExecutionOptions)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.path is None) == (self.playbook is None):
            raise ValueError('give exactly one of "path" (a registered playbook) or "playbook"')
        if self.version is not None and self.path is None:
            raise ValueError('"version" goes with "path", not with an inline "playbook"')
        return self


class ExecutionCreated(Response):
    execution_id: str


class ExecutionSummary(Response):
    execution_id: str
    status: ExecutionStatus
    playbook_name: str
    playbook_path: str | None
    created_at: float
    updated_at: float
    finished_at: float | None
    parent_execution_id: str | None


class ExecutionList(Response):
    items: list[ExecutionSummary]
    limit: int
    offset: int
    next_offset: int | None = Field(
        None, description="Offset of the next page; null when this page is the last"
    )


class ExecutionDetail(Response):
    """The object `noetl run --json` prints, plus where the execution came from and when.

    `error` appears only when the execution failed with one, `ctx` only when an upstream
    NoETL playbook set execution variables; values under sensitive keys of `context`,
    `ctx` and `workload` are masked as "***"."""

    execution_id: str
    status: ExecutionStatus
    steps: dict[str, dict[str, Any]] = Field(
        description="Step name -> {status, error?, and total/completed/succeeded/failed for loops}"
    )
    context: dict[str, Any]
    ctx: dict[str, Any] | None = Field(
        default=None, description="Execution variables (`ctx`) of an upstream NoETL playbook"
    )
    duration_s: float
    error: str | None = None
    playbook_name: str
    playbook_path: str | None
    workload: dict[str, Any]
    created_at: float
    updated_at: float
    finished_at: float | None
    parent_execution_id: str | None
    last_seq: int = Field(description="Sequence number of the last event folded")


class CancelResult(Response):
    execution_id: str
    canceled: bool = Field(description="False when the execution had already finished")
    status: ExecutionStatus


class GraphNode(Response):
    id: str
    status: str
    error: str | None = None
    total: int | None = None
    completed: int | None = None
    succeeded: int | None = None
    failed: int | None = None


class GraphEdge(Response):
    from_: str = Field(alias="from")
    to: str
    when: str | bool | None
    mode: str
    origin: str = Field(description="next, case or compensate")
    taken: bool


class ExecutionGraph(Response):
    execution_id: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]


class EventOut(Response):
    seq: int
    type: str
    ts: float
    step: str | None
    payload: dict[str, Any]


class EventList(Response):
    execution_id: str
    items: list[EventOut]


class StepAttempt(Response):
    """One attempt of one task of a step (the step's call, or one loop item)."""

    task_id: str
    index: int | None = Field(description="Loop item index; null for a step without a loop")
    attempt: int
    status: str = Field(description="running, ok, failed, lease_expired or canceled")
    started_at: float = Field(description="When it was dispatched (a retry: scheduled)")
    finished_at: float | None
    error: str | None
    error_type: str | None
    duration_ms: float | None
    output: str | None = Field(
        description="The tool's output as JSON, masked and cut to a few hundred characters"
    )
    delay_ms: int | None = Field(description="A retry: its delay")
    worker_id: str | None = Field(description="A lost lease: the worker that held it")
    dead_lettered: bool = Field(description="It failed for good: the DLQ holds the task")
    replay: bool = Field(description="An operator replayed the task from the DLQ")


class StepDetail(Response):
    """A step's state, result preview and attempts (paged), folded from the event log."""

    execution_id: str
    step: str
    status: str
    error: str | None = None
    total: int | None = None
    completed: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    started_at: float | None
    finished_at: float | None
    result: str | None = Field(
        description="The step's result as indented JSON, masked; cut at `result_limit`"
    )
    result_truncated: bool
    attempts: list[StepAttempt]
    attempts_total: int = Field(description="Attempts matching the filter, on every page")
    limit: int
    offset: int


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


# --- sessions and tokens -----------------------------------------------------------------


class SessionOut(Response):
    """A session (never its token): `session_id` is a public prefix of its key."""

    session_id: str
    revision: int
    token_id: str
    role: str
    created_at: float
    expires_at: float
    last_activity_at: float
    client: str | None = None


class SessionCreated(SessionOut):
    session_token: str = Field(
        description="Send as `Authorization: Bearer <session_token>`; shown this once"
    )


class SessionEnded(Response):
    session_id: str
    deleted: bool


class SessionRevisionOut(Response):
    revision: int
    operation: str = Field(description="put (a write) or delete (a logout)")
    at: float
    session: SessionOut | None = None


class SessionHistory(Response):
    session_id: str
    items: list[SessionRevisionOut]


class TokenCreate(Request):
    role: Literal["viewer", "operator", "admin"]
    name: str = Field(min_length=1, max_length=200)
    expires_in_days: float | None = Field(None, gt=0, le=3650)


class TokenOut(Response):
    """An API token (never the token itself, nor its digest)."""

    id: str
    name: str
    role: str
    created_at: float
    last_used_at: float | None = None
    expires_at: float | None = None
    revoked: bool
    revoked_at: float | None = None
    state: str = Field(description="active, expired or revoked")


class TokenCreated(TokenOut):
    token: str = Field(description="Send as `Authorization: Bearer <token>`; shown this once")


class TokenList(Response):
    items: list[TokenOut]


class CredentialIn(Request):
    """A credential record in upstream NoETL's format; `description` and `tags` are
    accepted and not kept."""

    name: str = Field(min_length=1, max_length=128)
    type: str = Field(min_length=1, max_length=64, description="postgres, bearer, basic, ...")
    data: dict[str, Any] = Field(description="The fields; never shown again")
    description: str | None = None
    tags: list[str] | None = None


class CredentialOut(Response):
    """A stored credential: never its values."""

    name: str
    type: str
    key_id: str = Field(description="The id of the key that encrypted it")
    created_at: float
    updated_at: float
    created: bool | None = Field(None, description="On a write: whether the name was new")
    warning: str | None = None


class CredentialList(Response):
    items: list[CredentialOut]


class CredentialDeleted(Response):
    name: str
    deleted: bool
