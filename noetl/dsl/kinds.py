"""Typed configuration of each tool kind and sink kind.

A tool's configuration lives under `tool.spec`; each kind has a model here, so unknown or
mistyped keys are caught when the playbook is validated, not when it runs. Third-party
kinds registered through the `noetl.tools` entry point group add their own models.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_DOTTED = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


# --- tools -------------------------------------------------------------------------------


class LibImport(SpecModel):
    """`from <from> import <import>`, bound to the alias that names it in `libs`."""

    from_: str = Field(alias="from", pattern=_DOTTED)
    import_: str = Field(alias="import", pattern=_NAME)


SCRIPT_DESCRIPTION = (
    "a file under playbooks.root whose text is the code (python) or the SQL (postgres, "
    "duckdb): read when an execution of the playbook starts, so workers need no copy"
)


class PythonSpec(SpecModel):
    """Inline `code` defining `main(context, args)`, or `module` plus `callable`, or a
    `script` file holding the code (read into `code` when an execution starts).

    `style: toplevel` runs the code top to bottom instead (upstream NoETL's convention):
    each arg is a plain name, the outcome is a top-level `result` variable or `return`.
    `libs` imports modules for the code, by the alias the code uses."""

    code: str | None = None
    module: str | None = None
    script: str | None = Field(default=None, description=SCRIPT_DESCRIPTION)
    callable: str = "main"
    style: Literal["main", "toplevel"] = "main"
    libs: dict[Annotated[str, StringConstraints(pattern=_NAME)], str | LibImport] = Field(
        default_factory=dict
    )

    @field_validator("libs")
    @classmethod
    def _module_names(cls, libs: dict[str, str | LibImport]) -> dict[str, str | LibImport]:
        for alias, target in libs.items():
            if isinstance(target, str) and not re.fullmatch(_DOTTED, target):
                raise ValueError(f"libs.{alias} must name a module (like os or google.cloud)")
        return libs

    @model_validator(mode="after")
    def _one_source(self) -> PythonSpec:
        if self.script is not None:
            if self.code is not None or self.module is not None:
                raise ValueError("python tool takes spec.script or spec.code/module, not both")
        elif (self.code is None) == (self.module is None):
            raise ValueError("python tool needs exactly one of spec.code or spec.module")
        return self


HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
# The method is upper-cased before validation, so the schema accepts either case.
_METHODS_ANY_CASE = [m for name in get_args(HttpMethod) for m in (name, name.lower())]


class HttpSpec(SpecModel):
    url: str
    method: HttpMethod = Field(default="GET", json_schema_extra={"enum": _METHODS_ANY_CASE})
    headers: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    json_body: Any = Field(default=None, alias="json")
    body: str | None = None
    follow_redirects: bool = True
    timeout: float | None = Field(default=None, gt=0, description="seconds (default 30)")
    credential: str | None = Field(
        default=None,
        description="a credential of the worker (bearer, basic, api_key or header), sent as "
        "a request header (Authorization for bearer and basic)",
    )

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_body(self) -> HttpSpec:
        if self.json_body is not None and self.body is not None:
            raise ValueError("http tool takes spec.json or spec.body, not both")
        return self


Statements = str | list[str]


def _command_or_query(data: Any) -> Any:
    """`command` (or `script`) stands in for `query`: a spec with one and no query gets
    `query: null`, so a spec with none of them still reports the missing query."""
    if isinstance(data, dict) and ("command" in data or "script" in data) and "query" not in data:
        return {**data, "query": None}
    return data


def _one_of_query_command(
    query: str | None, command: Statements | None, script: str | None, kind: str
) -> None:
    if script is not None:
        if query is not None or command is not None:
            raise ValueError(f"{kind} tool takes spec.script or spec.query/command, not both")
    elif (query is None) == (command is None):
        raise ValueError(f"{kind} tool needs exactly one of spec.query and spec.command")


class PostgresSpec(SpecModel):
    """A parameterized query; values come from `args`, never from string formatting.

    `command` (instead of `query`): several statements, run in order in one transaction;
    the result keeps each statement's rows (`command_0`, `command_1`, ...)."""

    query: str | None
    command: Statements | None = None
    script: str | None = Field(default=None, description=SCRIPT_DESCRIPTION)
    credential: str | None = None
    dsn: str | None = None

    _command = model_validator(mode="before")(_command_or_query)

    @model_validator(mode="after")
    def _one_sql(self) -> PostgresSpec:
        _one_of_query_command(self.query, self.command, self.script, "postgres")
        return self


class DuckdbSpec(SpecModel):
    """One statement in `query`, or several in `command` (as for postgres)."""

    query: str | None
    command: Statements | None = None
    script: str | None = Field(default=None, description=SCRIPT_DESCRIPTION)
    database: str = ":memory:"

    _command = model_validator(mode="before")(_command_or_query)

    @model_validator(mode="after")
    def _one_sql(self) -> DuckdbSpec:
        _one_of_query_command(self.query, self.command, self.script, "duckdb")
        return self


class PlaybookSpec(SpecModel):
    """Run another playbook (registered path or file) as a child execution."""

    path: str
    # A catalog version: a number, or a template that renders to one.
    version: int | str | None = None
    # The child's step whose result is this task's result (else the child's context).
    return_step: str | None = Field(default=None, min_length=1)


class WorkbookSpec(SpecModel):
    """Run the task of this playbook's `workbook:` section with this name."""

    name: str


class NoopSpec(SpecModel):
    """Does nothing; its result is its rendered `args`."""


class ArtifactSpec(SpecModel):
    """Read back a whole result kept in the result store by its reference (`_ref` of a
    step with `result.select`): `ref`, or `result_ref` in the arguments."""

    action: Literal["get"] = "get"
    ref: str | None = None


RuleAction = Literal["continue", "retry", "jump", "break", "fail"]


class RuleThen(SpecModel):
    """What a matched policy rule does (`do`), with its options: `retry` runs the task
    again (`attempts` tries in all, `delay` seconds apart, growing with `backoff`), `jump`
    goes on at the task named `to`. `set` writes `ctx.<name>` (execution variables),
    `iter.<name>` (loop-iteration variables) or a plain name the later tasks see."""

    do: RuleAction = "continue"
    attempts: int = Field(default=3, ge=1, le=100)
    delay: float = Field(default=1.0, ge=0, le=3600)
    backoff: Literal["none", "fixed", "linear", "exponential"] = "none"
    to: str | None = None
    set: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _jump_target(self) -> RuleThen:
        if self.do == "jump" and not self.to:
            raise ValueError("a rule with do: jump needs 'to', the task to go on at")
        return self


class PolicyRule(SpecModel):
    """One rule of a task's policy: `then` when `when` holds (no `when`: always, the
    `else` rule)."""

    when: str | bool | None = None
    then: RuleThen


class PipelineTask(SpecModel):
    """One task of a pipeline: a label, a tool block (any kind but pipeline), its policy
    rules and what it sets once it ran."""

    name: str = Field(pattern=_NAME)
    tool: dict[str, Any]
    rules: list[PolicyRule] = Field(default_factory=list)
    set: dict[str, Any] = Field(default_factory=dict)


class PipelineSpec(SpecModel):
    """Tasks run in order by one worker as one task of the step (upstream NoETL's list
    under `tool`; see noetl.worker.pipeline). The step's result is the last task's."""

    tasks: list[PipelineTask] = Field(min_length=1)

    @model_validator(mode="after")
    def _names(self) -> PipelineSpec:
        names = [task.name for task in self.tasks]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"pipeline task names must be unique: {', '.join(twice)} twice")
        for task in self.tasks:
            if task.tool.get("kind") == "pipeline":
                raise ValueError(f"pipeline task '{task.name}' is itself a pipeline")
            for rule in task.rules:
                if rule.then.to is not None and rule.then.to not in names:
                    raise ValueError(
                        f"pipeline task '{task.name}' jumps to '{rule.then.to}', which is "
                        f"not a task of this pipeline (tasks: {', '.join(names)})"
                    )
        return self


class PluginSpec(SpecModel):
    """The spec of a third-party tool that declares no model: any keys."""

    model_config = ConfigDict(extra="allow", frozen=True)


class _ToolKinds(dict[str, type[BaseModel]]):
    """Tool kinds and their spec models: the built-ins, then the third-party tools of the
    `noetl.tools` entry point group, loaded the first time a kind is not a built-in (or
    when all kinds are listed), so commands that never meet one do not pay for the scan."""

    _loaded = False

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for kind, tool in plugin_tools().items():
                self.setdefault(kind, getattr(tool, "spec_model", None) or PluginSpec)

    def __missing__(self, kind: str) -> type[BaseModel]:
        if self._loaded:
            raise KeyError(kind)
        self._load()
        return self[kind]

    def get(self, kind: str, default: Any = None) -> Any:
        try:
            return self[kind]
        except KeyError:
            return default

    def __contains__(self, kind: object) -> bool:
        return isinstance(kind, str) and self.get(kind) is not None

    def __iter__(self) -> Any:
        self._load()
        return super().__iter__()

    def items(self) -> Any:
        self._load()
        return super().items()

    def keys(self) -> Any:
        self._load()
        return super().keys()


TOOL_SPECS: dict[str, type[BaseModel]] = _ToolKinds(
    {
        "python": PythonSpec,
        "http": HttpSpec,
        "postgres": PostgresSpec,
        "duckdb": DuckdbSpec,
        "playbook": PlaybookSpec,
        "workbook": WorkbookSpec,
        "noop": NoopSpec,
        "pipeline": PipelineSpec,
        "artifact": ArtifactSpec,
    }
)
BUILTIN_TOOL_KINDS = frozenset(dict.keys(TOOL_SPECS))

_plugins: dict[str, Any] | None = None


def plugin_tools() -> dict[str, Any]:
    """Third-party tools by kind, from the `noetl.tools` entry point group (loaded once).

    An entry point names a tool class (made with no arguments) or a tool object, with a
    `kind` string, a `run(task) -> Outcome` method and, optionally, `spec_model` (a
    pydantic model of its spec; without one any spec is accepted). A plugin cannot replace
    a built-in kind."""
    global _plugins  # noqa: PLW0603 - a process-wide cache of the entry point scan
    if _plugins is None:
        from importlib.metadata import entry_points  # noqa: PLC0415 - only when needed

        found: dict[str, Any] = {}
        for point in entry_points(group="noetl.tools"):
            loaded = point.load()
            tool = loaded() if isinstance(loaded, type) else loaded
            kind = getattr(tool, "kind", None)
            if not isinstance(kind, str) or kind in BUILTIN_TOOL_KINDS:
                continue
            found[kind] = tool
        _plugins = found
    return _plugins


# --- sinks -------------------------------------------------------------------------------


class PostgresSink(SpecModel):
    table: str
    mode: Literal["insert", "upsert"] = "insert"
    key: str | list[str] | None = None
    credential: str | None = None
    dsn: str | None = None

    @model_validator(mode="after")
    def _upsert_key(self) -> PostgresSink:
        if self.mode == "upsert" and not self.key:
            raise ValueError("postgres sink with mode: upsert needs a key")
        return self


class DuckdbSink(SpecModel):
    table: str
    database: str = ":memory:"
    mode: Literal["insert", "replace", "upsert"] = "insert"
    key: str | list[str] | None = None


class FileSink(SpecModel):
    path: str
    format: Literal["json", "jsonl", "csv"] = "json"


class S3Sink(SpecModel):
    bucket: str
    key: str
    format: Literal["json", "jsonl", "csv"] = "json"
    endpoint_url: str | None = None
    region: str | None = None
    credential: str | None = None


SINK_SPECS: dict[str, type[SpecModel]] = {
    "postgres": PostgresSink,
    "duckdb": DuckdbSink,
    "file": FileSink,
    "s3": S3Sink,
}


# Spec fields taken literally, never rendered as templates: code, and SQL (its values come
# from `args` as query parameters, so a template cannot inject SQL).
# Playbooks in upstream NoETL's dialect render code and SQL (see noetl.dsl.upstream).
LITERAL_SPEC_FIELDS: dict[str, frozenset[str]] = {
    "python": frozenset({"code", "module", "callable", "style", "libs"}),
    "postgres": frozenset({"query", "command"}),
    "duckdb": frozenset({"query", "command"}),
}


def spec_fields(model: type[BaseModel]) -> set[str]:
    """The keys a spec accepts (by alias)."""
    return {f.alias or name for name, f in model.model_fields.items()}
