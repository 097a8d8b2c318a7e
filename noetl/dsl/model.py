"""The DSL v2 playbook model (canonical form).

Shorthand forms are accepted through before-validators (see `noetl.dsl.desugar`), and the
JSON Schema (`noetl schema`) describes what an author may write. Models are frozen: a
validated playbook never changes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PositiveInt,
    StringConstraints,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from noetl.dsl.desugar import (
    desugar_loop,
    desugar_next,
    desugar_retry,
    desugar_sinks,
    desugar_step,
    desugar_tool,
)
from noetl.dsl.rewrite import ShapeError
from noetl.dsl.triggers import Trigger, unique_triggers
from noetl.dsl.variables import parse_key

Dialect = Literal["native", "upstream"]
NATIVE: Dialect = "native"
UPSTREAM: Dialect = "upstream"  # upstream NoETL's current playbook dialect (noetl.dsl.upstream)

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
StepName = Annotated[str, StringConstraints(pattern=NAME_PATTERN, max_length=128)]
Identifier = Annotated[str, StringConstraints(pattern=NAME_PATTERN, max_length=128)]
# A condition: a template such as "{{ ok('a') }}", or a literal boolean.
Condition = str | bool


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


RetryTrigger = Literal["error", "status_code", "exception"]
HttpStatus = Annotated[int, Field(ge=100, le=599)]


class RetryPolicy(Model):
    """Seed 001's retry block (delays in seconds), with seed 004's `scope` and `on`.

    `on` lists which failures retry (None: written without `on`, any retryable failure):
    `error` (a failure that is not fatal), `status_code` (an HTTP status in
    `status_codes`, by default 408, 429, 500, 502, 503, 504), `exception` (a python
    step's exception named in `exceptions`). `scope: chain` runs the step's whole chain
    of tasks again from its first one (a pipeline's tasks), `tool` only the failed tool.
    """

    max_attempts: PositiveInt = 3
    initial_delay: Annotated[float, Field(ge=0)] = 1.0
    backoff_multiplier: Annotated[float, Field(ge=1)] = 2.0
    max_delay: Annotated[float, Field(ge=0)] = 60.0
    jitter: bool = True
    backoff: Literal["exponential", "linear", "fixed"] = "exponential"
    retry_when: Condition | None = None
    stop_when: Condition | None = None
    scope: Literal["tool", "chain"] = "tool"
    on: list[RetryTrigger] | None = None
    status_codes: list[HttpStatus] | None = None
    exceptions: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = None

    @field_validator("on", "status_codes", "exceptions", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        """`on: status_code` is `on: [status_code]` (and so for the other lists)."""
        return [value] if isinstance(value, str | int) and not isinstance(value, bool) else value


Retry = Annotated[
    RetryPolicy,
    BeforeValidator(desugar_retry, json_schema_input_type=bool | PositiveInt | RetryPolicy),
]


class Tool(Model):
    """What a step runs: `kind` names the tool, `spec` configures it, `args` are its inputs."""

    kind: str
    spec: dict[str, Any] = Field(default_factory=dict)
    args: dict[str, Any] = Field(default_factory=dict)
    timeout_ms: PositiveInt | None = None
    retry: Retry | None = None


ToolField = Annotated[Tool, BeforeValidator(desugar_tool, json_schema_input_type=str | Tool)]


def pipeline_task_tool(raw: Any) -> Tool:
    """The tool of one task of a `pipeline` tool (its spec holds tool blocks as written):
    shorthand desugared, validated. ShapeError or ValidationError when it is not one."""
    tool = desugar_tool(raw)
    if isinstance(tool, dict) and tool.get("kind") == "pipeline":
        raise ShapeError("a pipeline task cannot itself be a pipeline", ("kind",))
    return Tool.model_validate(tool)


def _template_in_upstream(value: Any, handler: ValidatorFunctionWrapHandler, info: Any) -> Any:
    """A template where a loop takes a fixed value: allowed in upstream NoETL's dialect
    (rendered when the loop starts), and when a validated model is read back (no
    context); otherwise validated as the value itself, with its usual error."""
    context = info.context
    allowed = context is None or context.get("dialect") == UPSTREAM
    if allowed and isinstance(value, str) and "{{" in value:
        return value
    return handler(value)


def _as_is(value: Any) -> Any:
    return value


LoopValue = WrapValidator(_template_in_upstream)
AsIs = PlainSerializer(_as_is, return_type=Any)  # a template stays the text it is


# In upstream's dialect a loop's `mode` and `max_concurrency` may be templates, rendered
# when the loop starts (noetl.engine.loops).
class Loop(Model):
    collection: str | list[Any]
    element: Identifier = "item"
    mode: Annotated[Literal["sequential", "parallel"], LoopValue, AsIs] = "sequential"
    max_concurrency: Annotated[PositiveInt, LoopValue, AsIs] | None = None
    key: str | None = None
    until: Condition | None = None
    item_timeout_ms: PositiveInt | None = None
    total_timeout_ms: PositiveInt | None = None
    min_success_ratio: Annotated[float, Field(ge=0, le=1)] | None = None


LoopField = Annotated[Loop, BeforeValidator(desugar_loop, json_schema_input_type=Loop)]


class Collect(Model):
    into: Identifier
    mode: Literal["list", "map"] = "list"
    key: str | None = None

    @model_validator(mode="after")
    def _map_needs_key(self) -> Collect:
        if self.mode == "map" and not self.key:
            raise ValueError("collect with mode: map needs a key template")
        return self


class Sink(Model):
    """One sink write. Authored as a one-key map: `{postgres: {table: t, mode: upsert}}`."""

    kind: str
    spec: dict[str, Any] = Field(default_factory=dict)
    id: Identifier | None = None
    async_: bool = Field(default=False, alias="async")
    timeout_ms: PositiveInt | None = None
    retry: Retry | None = None
    args: dict[str, Any] | None = None


SinkList = Annotated[
    list[Sink],
    BeforeValidator(
        desugar_sinks, json_schema_input_type=list[dict[str, dict[str, Any]]] | list[Sink]
    ),
]


class Result(Model):
    """The result pipeline: `this` -> (select) -> pick -> out -> as / collect / sink.

    `select` names fields of `this` (a mapping) to keep: the worker keeps the whole result
    in the result store and reports only those fields and `_ref`, the reference the
    `artifact` tool reads the whole back by (docs/dsl.md, "Large results"). Sinks still
    write the whole result."""

    select: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=100
    )
    pick: Any = None
    as_: Identifier | None = Field(default=None, alias="as")
    collect: Collect | None = None
    sink: SinkList = Field(default_factory=list)


def _upstream_set(value: Any, handler: ValidatorFunctionWrapHandler, info: Any) -> Any:
    """A step's or an arc's `set` (upstream NoETL's `ctx` variables): only in upstream's
    dialect (and when a validated model is read back); in this engine's own language it
    is an unknown key, reported as any other. Keys name `ctx` variables (`ctx.NAME`, or a
    plain `NAME`); `iter.*` belongs to a loop iteration, which a step or arc is not."""
    context = info.context
    if value is not None and context is not None and context.get("dialect") != UPSTREAM:
        raise PydanticCustomError("extra_forbidden", "Extra inputs are not permitted")
    value = handler(value)
    for key in value or {}:
        target = parse_key(key)
        if target.scope != "ctx":
            raise ValueError(
                f"'{key}': iter variables belong to one loop iteration (a task of the "
                f"loop's pipeline sets them); a step's or an arc's set writes ctx.NAME"
            )
    return value


# Upstream NoETL's `set:` of a step or an arc (noetl.engine.variables).
CtxSet = Annotated[dict[str, Any] | None, WrapValidator(_upstream_set)]


class NextEdge(Model):
    step: StepName
    when: Condition | None = None
    set: SkipJsonSchema[CtxSet] = None


class NextSpec(Model):
    mode: Literal["inclusive", "exclusive"] = "inclusive"
    to: list[NextEdge] = Field(min_length=1)


Next = Annotated[
    NextSpec,
    BeforeValidator(
        desugar_next,
        json_schema_input_type=StepName | list[StepName | NextEdge] | NextSpec,
    ),
]


class CaseThen(Model):
    """Actions of a matched `case` branch (seed 004)."""

    tool: ToolField | None = None
    set: dict[str, Any] | None = None
    result: Result | None = None
    sink: SinkList | None = None
    retry: Retry | None = None
    fail: str | bool | None = None
    skip: bool | None = None
    next: Next | None = None


class CaseBranch(Model):
    when: Condition
    then: CaseThen
    priority: int | None = None


EvalMode = Literal["on_entry", "on_event"]


class StepSpec(Model):
    """Step-level options for `case` evaluation (seed 004)."""

    case_mode: Literal["exclusive", "inclusive"] = "exclusive"
    # Not set: after the tool for a step with one, on entry otherwise (`Step.case_eval_mode`).
    eval_mode: EvalMode | None = Field(
        default=None,
        description="on_event (after the step's tool; the default for a step with a tool) "
        "or on_entry (at dispatch, before the tool; the default for a step without one)",
    )
    next_policy: Literal["end_step", "break_chain", "defer"] = "end_step"
    branch_order: Literal["source", "priority"] = "source"


class Step(Model):
    step: StepName
    desc: str | None = None
    when: Condition | None = None
    bind: dict[str, Any] = Field(default_factory=dict)
    loop: LoopField | None = None
    tool: ToolField | None = None
    result: Result | None = None
    retry: Retry | None = None
    next: Next | None = None
    compensate: StepName | None = None
    case: list[CaseBranch] | None = None
    spec: StepSpec | None = None
    set: SkipJsonSchema[CtxSet] = None

    @model_validator(mode="before")
    @classmethod
    def _desugar(cls, data: Any) -> Any:
        return desugar_step(data)

    @property
    def edges(self) -> list[NextEdge]:
        return list(self.next.to) if self.next else []

    @property
    def case_eval_mode(self) -> EvalMode:
        """When the step's `case` is evaluated: `spec.eval_mode` when given; else after the
        tool (`on_event`) for a step with a tool, as seed 004's flow goes (tool, then case,
        then routing), and on entry for a step without one (there is no outcome to wait
        for)."""
        if self.spec is not None and self.spec.eval_mode is not None:
            return self.spec.eval_mode
        return "on_event" if self.tool is not None else "on_entry"


class WorkbookTask(Model):
    """A named, reusable task: called with `tool: {kind: workbook, name: <name>}`."""

    name: Identifier
    desc: str | None = None
    tool: ToolField
    result: Result | None = None

    @model_validator(mode="before")
    @classmethod
    def _desugar(cls, data: Any) -> Any:
        return desugar_step(data)


ON_STEP_FAIL_PATTERN = r"^(halt|continue|route_edge:.+)$"
OnStepFail = Annotated[str, StringConstraints(pattern=ON_STEP_FAIL_PATTERN)]


class Policy(Model):
    """Failure policies (seed 000 section 8.8).

    A key left out is None, "not set": the engine then takes the configuration's default
    (`policies.*`), else the built-in one (halt, retry, treat_as_false); see
    `noetl.engine.options.effective_policy`."""

    on_step_fail: OnStepFail | None = None
    on_sink_fail: Literal["retry", "fail_step", "async_ignore"] | None = None
    on_when_error: Literal["treat_as_false", "fail_step"] | None = None
    rollback: Literal["none", "on_fail"] = "none"
    # How many runs one step may have in an execution: an edge on a cycle of the graph
    # runs its target again (`fetch -> check -> fetch`); past this, the step fails.
    max_runs: Annotated[int, Field(ge=1, le=1_000_000)] = 1000

    @property
    def route_edge_target(self) -> str | None:
        if self.on_step_fail is not None and self.on_step_fail.startswith("route_edge:"):
            return self.on_step_fail.split(":", 1)[1]
        return None


class Metadata(Model):
    name: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    path: str | None = None
    version: str | int | float | None = None
    description: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class Playbook(Model):
    """A whole playbook document."""

    api_version: Literal["noetl.io/v2"] | None = Field(default=None, alias="apiVersion")
    kind: Literal["Playbook"] | None = None
    metadata: Metadata
    workload: dict[str, Any] = Field(default_factory=dict)
    workbook: list[WorkbookTask] = Field(default_factory=list)
    policy: Policy = Field(default_factory=Policy)
    workflow: list[Step] = Field(min_length=1)
    # Schedules that start the playbook by themselves (noetl.dsl.triggers).
    triggers: Annotated[list[Trigger], AfterValidator(unique_triggers)] = Field(
        default_factory=list
    )
    # How the file was written: set by the loader (a file cannot write it), kept in the
    # model so a validated playbook read back from JSON keeps its dialect's behaviour.
    dialect: SkipJsonSchema[Dialect] = NATIVE

    @property
    def upstream(self) -> bool:
        """Whether the playbook was written in upstream NoETL's dialect."""
        return self.dialect == UPSTREAM

    @property
    def entry(self) -> str:
        """The step named `start` if there is one, else the first step."""
        names = [s.step for s in self.workflow]
        return "start" if "start" in names else names[0]

    def step(self, name: str) -> Step:
        for item in self.workflow:
            if item.step == name:
                return item
        raise KeyError(name)

    def task(self, name: str) -> WorkbookTask:
        for item in self.workbook:
            if item.name == name:
                return item
        raise KeyError(name)


ROOT_KEYS = frozenset((f.alias or n) for n, f in Playbook.model_fields.items()) - {"dialect"}
STEP_KEYS = frozenset(Step.model_fields)
