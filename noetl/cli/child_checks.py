"""What `noetl validate` and `noetl lint` check beyond one file: a `playbook` tool's
`return_step` against the child it names, when that child is a file they can find.

The child is looked for as `noetl run` looks for it (noetl.tools.child_steps
`file_candidates`, under `playbooks.root`, the working directory by default). A path or
a `return_step` that is a template, a child that is only in a server's catalog, or a
child file that is not a valid playbook is not checked here: the run checks it before
starting the child (the step fails naming the step and the child's path).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from noetl.dsl.diagnostics import Diagnostic
from noetl.dsl.validate import LoadResult
from noetl.errors import PathRefusedError
from noetl.paths import PLAYBOOK_ROOT_SETTING, confine
from noetl.tools.child_steps import StepNames, file_candidates

__all__ = ["with_child_checks"]

CODE = "E333"


def with_child_checks(result: LoadResult, root: Path, names: StepNames) -> LoadResult:
    """`result` with an error for each `return_step` its child file has no step of."""
    playbook = result.playbook
    if playbook is None:
        return result
    found: list[Diagnostic] = []
    for index, step in enumerate(playbook.workflow):
        tool = step.tool
        if tool is None or tool.kind != "playbook":
            continue
        path, returned = tool.spec.get("path"), tool.spec.get("return_step")
        if not isinstance(path, str) or not _literal(path) or not _literal(returned):
            continue
        text = _child_text(path, root)
        steps = None if text is None else names(text, path)
        if steps is None or returned in steps:
            continue
        found.append(
            Diagnostic(
                code=CODE,
                message=(
                    f"return_step {returned!r} is not a step of child playbook {path!r} "
                    f"(its steps: {', '.join(sorted(steps))})"
                ),
                file=result.file,
                line=_line(result, index),
                step=step.step,
                path=("workflow", index, "tool", "return_step"),
            )
        )
    if not found:
        return result
    return dataclasses.replace(result, playbook=None, diagnostics=[*result.diagnostics, *found])


def _literal(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and "{{" not in value and "{%" not in value


def _child_text(path: str, root: Path) -> str | None:
    for name in file_candidates(path):
        try:
            file = confine(name, root, field="spec.path", setting=PLAYBOOK_ROOT_SETTING)
            if file.is_file():
                return file.read_text(encoding="utf-8")
        except (PathRefusedError, OSError, UnicodeDecodeError):
            return None
    return None


def _line(result: LoadResult, index: int) -> int | None:
    """The line of the step's `return_step` (or of its tool, or the step) in the file."""
    tree: Any = result.source.tree if result.source is not None else None
    try:
        step: Any = tree["workflow"][index]
    except (TypeError, KeyError, IndexError):
        return None
    tool: Any = step.get("tool") if hasattr(step, "get") else None
    spec: Any = tool.get("spec") if hasattr(tool, "get") else None
    for node in (spec, tool):
        if hasattr(node, "key_line") and "return_step" in node:
            return int(node.key_line("return_step"))
    line = getattr(tool, "line", None) or getattr(step, "line", None)
    return int(line) if line else None
