"""A `playbook` tool's `return_step` checked against its child when the child is known
without running anything: `noetl validate` / `lint` look for the child's file as
`noetl run` does (`file_lookup`: `find_file` under `playbooks.root`, the working
directory by default); a server registering or validating a playbook looks in its
catalog (`noetl.server.routes.playbooks`).

A path or a `return_step` that is a template, a child not found, or a child that is not
a valid playbook is not checked here: the run checks it before starting the child (the
step fails naming the step and the child's path).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noetl.dsl.diagnostics import Diagnostic
from noetl.dsl.validate import LoadResult
from noetl.errors import PathRefusedError
from noetl.store.base import Store
from noetl.tools.child_steps import StepNames, find_file

__all__ = ["ChildLookup", "catalog_lookup", "file_lookup", "with_child_checks"]

CODE = "E333"

# The text of the child at `path` (and catalog `version`), or None when it is not known.
ChildLookup = Callable[[str, int | None], str | None]


def with_child_checks(
    result: LoadResult, lookup: ChildLookup, names: StepNames | None = None
) -> LoadResult:
    """`result` with an error for each `return_step` its known child has no step of."""
    names = names or StepNames()
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
        text = lookup(path, _version(tool.spec.get("version")))
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


def _version(value: Any) -> int | None:
    """A literal catalog version (a template or nothing: the latest)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def file_lookup(root: Path) -> ChildLookup:
    """Children as `noetl run` finds files: `find_file` under `root` (a catalog version
    names no file)."""

    def lookup(path: str, version: int | None) -> str | None:
        return None if version is not None else _child_text(path, root)

    return lookup


def catalog_lookup(store: Store) -> ChildLookup:
    """Children as registered in `store`'s catalog (that version, else the latest)."""

    def lookup(path: str, version: int | None) -> str | None:
        record = store.get_playbook(path, version)
        return None if record is None else record.text

    return lookup


def _child_text(path: str, root: Path) -> str | None:
    try:
        file, _ = find_file(path, root)
        return None if file is None else file.read_text(encoding="utf-8")
    except (PathRefusedError, OSError, UnicodeDecodeError):
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
