"""Script files: the code or SQL a tool names by `spec.script`, read when an execution
starts.

A python, postgres or duckdb tool may keep its code or SQL in a file (`spec.script`;
upstream NoETL writes `script: {uri: PATH, source: {type: file}}`). The process that
starts the execution reads it (`noetl run`, the server, a worker starting a child
playbook) and puts its text into the validated playbook the execution keeps: `code` for
python, `command` for SQL. The workers that run the tasks need no copy of the file, and
the text is then what inline code or SQL would be (in upstream's dialect, a template
rendered when the task is built).

The path is taken from `playbooks.root` (what `noetl run` uses: the working directory,
unless configured), like the `playbook` tool's paths; one leading outside it is refused.
It may be a template of the playbook's workload (`uri: "{{ script_path }}"`), rendered
with the playbook's own workload values: a playbook is read once for all its executions,
so a value given at start does not change which file is read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from noetl.dsl.diagnostics import Diagnostic
from noetl.dsl.diagnostics import Path as DocPath
from noetl.dsl.model import Playbook, Tool
from noetl.dsl.render import Renderer
from noetl.errors import PathRefusedError, PlaybookError, TemplateError
from noetl.paths import PLAYBOOK_ROOT_SETTING, confine

__all__ = [
    "MAX_SCRIPT_BYTES",
    "SCRIPT_CODE",
    "ScriptReader",
    "has_scripts",
    "read_scripts",
    "script_reader",
]

MAX_SCRIPT_BYTES = 1024 * 1024
# Where a file's text goes, by tool kind.
SCRIPT_CODE = {"python": "code", "postgres": "command", "duckdb": "command"}
# A playbook (and the name of its file, for diagnostics) -> the playbook, its scripts read.
ScriptReader = Callable[[Playbook, str], Playbook]


def has_scripts(playbook: Playbook) -> bool:
    """Whether any tool of the playbook names a script file not read yet."""
    return any(_unread(tool) for _, tool in _tools(playbook))


def script_reader(root: Path, *, max_bytes: int = MAX_SCRIPT_BYTES) -> ScriptReader:
    """`read_scripts` bound to a root: what a runtime applies to each playbook it loads."""

    def read(playbook: Playbook, file: str) -> Playbook:
        return read_scripts(playbook, root, max_bytes=max_bytes, file=file)

    return read


def read_scripts(
    playbook: Playbook, root: Path, *, max_bytes: int = MAX_SCRIPT_BYTES, file: str = "<playbook>"
) -> Playbook:
    """The playbook with every tool's `spec.script` file read into its code or SQL (the
    playbook itself when it names none). Raises PlaybookError (E332, one diagnostic per
    script, naming the step and the path) when a file cannot be read."""
    if not has_scripts(playbook):
        return playbook
    workload = dict(playbook.workload)
    context = {**workload, "workload": workload}
    renderer = Renderer()
    problems: list[Diagnostic] = []
    texts: dict[DocPath, str] = {}
    for path, tool in _tools(playbook):
        if not _unread(tool):
            continue
        step = _step_of(playbook, path)
        try:
            texts[path] = _read(renderer, tool.spec["script"], context, root, max_bytes)
        except _Unreadable as exc:
            problems.append(
                Diagnostic(
                    code="E332",
                    message=f"its script file cannot be read: {exc}"
                    if path[0] == "workflow"
                    else f"the script file of {step} cannot be read: {exc}",
                    file=file,
                    step=step if path[0] == "workflow" else None,
                    path=(*path, "spec", "script"),
                )
            )
    if problems:
        raise PlaybookError(problems)
    return _replaced(playbook, texts)


class _Unreadable(Exception):
    pass


def _read(renderer: Renderer, uri: Any, context: dict[str, Any], root: Path, max_bytes: int) -> str:
    try:
        rendered = renderer.render(uri, context, field="script")
    except TemplateError as exc:
        raise _Unreadable(
            f"its path {uri!r} must render from the playbook's workload ({exc})"
        ) from None
    if not isinstance(rendered, str) or not rendered.strip():
        raise _Unreadable(f"its path must be a file path, got {rendered!r}")
    name = rendered.strip()
    if name.startswith("file://"):
        name = name[len("file://") :]
    try:
        target = confine(name, root, field="script", setting=PLAYBOOK_ROOT_SETTING)
    except PathRefusedError as exc:
        raise _Unreadable(str(exc)) from None
    if not target.is_file():
        raise _Unreadable(f"no file {name!r} under {root} ({PLAYBOOK_ROOT_SETTING})")
    size = target.stat().st_size
    if size > max_bytes:
        raise _Unreadable(f"{name!r} is {size} bytes, over the limit of {max_bytes}")
    try:
        return target.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise _Unreadable(f"{name!r} is not UTF-8 text") from None
    except OSError as exc:
        raise _Unreadable(f"{name!r}: {exc.strerror or exc}") from None


def _unread(tool: Tool) -> bool:
    return tool.kind in SCRIPT_CODE and tool.spec.get("script") is not None


def _tools(playbook: Playbook) -> list[tuple[DocPath, Tool]]:
    """Every tool of the playbook with where it is: steps, their case branches, the
    workbook's tasks."""
    found: list[tuple[DocPath, Tool]] = []
    for index, step in enumerate(playbook.workflow):
        if step.tool is not None:
            found.append((("workflow", index, "tool"), step.tool))
        for number, branch in enumerate(step.case or []):
            if branch.then.tool is not None:
                where = ("workflow", index, "case", number, "then", "tool")
                found.append((where, branch.then.tool))
    for index, task in enumerate(playbook.workbook):
        found.append((("workbook", index, "tool"), task.tool))
    return found


def _step_of(playbook: Playbook, path: DocPath) -> str:
    index = path[1]
    assert isinstance(index, int)
    if path[0] == "workflow":
        return playbook.workflow[index].step
    return f"workbook task {playbook.workbook[index].name}"


def _with_text(tool: Tool, text: str) -> Tool:
    spec = {k: v for k, v in tool.spec.items() if k != "script"}
    spec[SCRIPT_CODE[tool.kind]] = text
    if tool.kind != "python":
        spec.pop("query", None)  # None: the spec model's default for a script
    return tool.model_copy(update={"spec": spec})


def _replaced(playbook: Playbook, texts: dict[DocPath, str]) -> Playbook:
    steps = []
    for index, step in enumerate(playbook.workflow):
        update: dict[str, Any] = {}
        text = texts.get(("workflow", index, "tool"))
        if text is not None and step.tool is not None:
            update["tool"] = _with_text(step.tool, text)
        branches = []
        for number, branch in enumerate(step.case or []):
            text = texts.get(("workflow", index, "case", number, "then", "tool"))
            if text is not None and branch.then.tool is not None:
                then = branch.then.model_copy(update={"tool": _with_text(branch.then.tool, text)})
                branches.append(branch.model_copy(update={"then": then}))
            else:
                branches.append(branch)
        if step.case is not None:
            update["case"] = branches
        steps.append(step.model_copy(update=update) if update else step)
    tasks = []
    for index, task in enumerate(playbook.workbook):
        text = texts.get(("workbook", index, "tool"))
        tasks.append(
            task.model_copy(update={"tool": _with_text(task.tool, text)}) if text else task
        )
    return playbook.model_copy(update={"workflow": steps, "workbook": tasks})
