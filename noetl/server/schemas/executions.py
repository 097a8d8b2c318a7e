"""Bodies about executions: start, list, detail, cancel, the step graph, events and
the attempts of a step."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, model_validator

from noetl.core import ExecutionStatus
from noetl.server.schemas.common import Request, Response


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
    # When retention deleted its history (the row is a tombstone); null: it is whole.
    pruned_at: float | None = None


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
    complexity: dict[str, int] | None = Field(
        default=None,
        description="The plan's complexity when it started: score, steps, edges, loops, "
        "loop_items, unknown_loops, max_fanout, sub_playbooks (null: its playbook no longer "
        "loads)",
    )
    too_complex: bool = Field(
        default=False, description="Whether the score is at or over complexity.warn"
    )
    workers_alive: int = Field(
        0, description="Workers alive (any pool): heard from within the last 60 s, not stopped"
    )
    queued_tasks: int = Field(
        0, description="The execution's tasks waiting in the queue (no worker claimed them)"
    )
    queued_steps: dict[str, int] = Field(
        default_factory=dict, description="Step name -> its tasks waiting in the queue"
    )
    waiting_without_workers: bool = Field(
        False,
        description="Tasks wait in the queue and no live worker of their pool takes new "
        "tasks: they wait until one starts (`noetl worker start`)",
    )
    waiting_steps: list[str] = Field(
        default_factory=list, description="The steps whose queued tasks no live worker takes"
    )
    dead_letters: dict[str, int] = Field(
        default_factory=dict, description="Step name -> its PENDING dead-letter entries"
    )


class ExecutionPlaybook(Response):
    """The playbook text an execution was started with (it keeps it, registered or not)."""

    execution_id: str
    playbook_name: str
    playbook_path: str | None = Field(description="Its path; null for an inline playbook")
    content: str = Field(description="The YAML text the execution runs")
    catalog_version: int | None = Field(
        description="The catalog version of playbook_path with this very text; null when "
        "none has it (`noetl run` never registers the file it runs)"
    )
    catalog_latest: int | None = Field(
        description="The latest catalog version of playbook_path; null when not registered"
    )


class CancelResult(Response):
    execution_id: str
    canceled: bool = Field(description="False when the execution had already finished")
    status: ExecutionStatus


class GraphNode(Response):
    id: str
    status: str
    run: int = Field(1, description="The number of the step's latest run")
    runs: int = Field(
        0, description="How many runs the step had: 0 before its first call, 1 for most steps"
    )
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
    stdout: str | None = Field(
        default=None,
        description="What it printed and logged (stdout, stderr, log records; bounded, masked)",
    )
    delay_ms: int | None = Field(description="A retry: its delay")
    worker_id: str | None = Field(description="A lost lease: the worker that held it")
    dead_lettered: bool = Field(description="It failed for good: the DLQ holds the task")
    replay: bool = Field(description="An operator replayed the task from the DLQ")
    run: int = Field(description="The run of the step the attempt belongs to")


class StepRunEntry(Response):
    """One run of a step (a step on a cycle of the graph runs more than once)."""

    run: int
    status: str = Field(description="pending, parked, running, ok, failed, skipped or canceled")
    by: str | None = Field(description="The step whose call started it")
    called_at: float
    started_at: float | None
    finished_at: float | None
    error: str | None
    attempts: int = Field(description="Attempts of its tasks")


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
    run: int = Field(description="The number of the latest run; the fields above are its")
    runs: int = Field(description="How many runs the step had (0 before its first call)")
    run_history: list[StepRunEntry] = Field(description="The latest `run_limit` runs, oldest first")
    started_at: float | None
    finished_at: float | None
    result: str | None = Field(
        description="The step's result as indented JSON, masked; cut at `result_limit`"
    )
    result_truncated: bool
    attempts: list[StepAttempt]
    attempts_total: int = Field(description="Attempts matching the filter, on every page")
    queued: int = Field(0, description="The step's tasks waiting in the queue")
    waiting_without_workers: bool = Field(
        False, description="Its queued tasks have no live worker of their pool to take them"
    )
    dead_letters: int = Field(0, description="The step's PENDING dead-letter entries")
    limit: int
    offset: int


class LogLine(Response):
    """The output of one attempt of one task."""

    seq: int = Field(description="The sequence number of the event that recorded it")
    ts: float
    step: str
    task_id: str
    index: int | None = Field(description="Loop item index; null for a step without a loop")
    attempt: int
    run: int = Field(description="The run of the step the attempt belongs to")
    ok: bool = Field(description="Whether the attempt succeeded")
    text: str = Field(description="What it printed and logged (bounded, masked)")


class LogList(Response):
    execution_id: str
    status: str = Field(description="The execution's status when the log was read")
    last_seq: int = Field(description="The last event read: pass it as after_seq to follow")
    items: list[LogLine]


class Span(Response):
    """One attempt of one task on the timeline."""

    task_id: str
    index: int | None = Field(description="Loop item index; null for a step without a loop")
    attempt: int
    run: int = Field(description="The run of the step the attempt belongs to")
    status: str = Field(description="running, ok, failed, lease_expired or canceled")
    started_at: float = Field(description="When it was dispatched (a retry: scheduled)")
    finished_at: float | None = Field(description="Null while it runs")
    delay_ms: int | None = Field(description="A retry: how long it waited before running")
    error: str | None = Field(description="The beginning of its error")


class HiddenSpans(Response):
    """The tasks of a step beyond `limit`, in aggregate."""

    tasks: int
    attempts: int
    statuses: dict[str, int] = Field(description="Attempt status -> how many")
    started_at: float | None
    finished_at: float | None


class StepSpans(Response):
    """One step's row: from its first start to its last end, and its tasks' attempts."""

    step: str
    status: str
    runs: int = Field(description="How many runs the step had (0 before its first call)")
    started_at: float | None = Field(description="Null when the step never started")
    finished_at: float | None = Field(description="Null while the step is not done")
    tasks: int = Field(description="Tasks of the step (a loop: one per item and run)")
    attempts: int = Field(description="Attempts of all its tasks")
    spans: list[Span] = Field(
        description="The attempts of the listed tasks (at most `limit` tasks: failed, "
        "retried and running ones first), in the order they began"
    )
    hidden: HiddenSpans | None = Field(description="The tasks not listed; null when none")


class ExecutionTimeline(Response):
    """The execution's timeline, folded from its event log."""

    execution_id: str
    status: ExecutionStatus
    started_at: float
    finished_at: float | None
    now: float = Field(description="The server's clock: where running bars end")
    limit: int
    steps: list[StepSpans] = Field(description="Every step, in workflow order")
