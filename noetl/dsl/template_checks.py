"""Checks of the templates in a playbook: E310 (a template that does not parse) and E311
(a template that names a step the playbook does not have).

Code and SQL in a tool's spec are taken literally, never rendered, so they are left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from noetl.dsl.diagnostics import Diagnostic, Path
from noetl.dsl.kinds import LITERAL_SPEC_FIELDS
from noetl.dsl.locate import source_path, value_line
from noetl.dsl.messages import step_name, suggest
from noetl.dsl.model import UPSTREAM
from noetl.dsl.source import Source
from noetl.dsl.templates import NameRead, check_syntax, is_template, name_reads, step_references
from noetl.dsl.yaml_tree import YMap, line_at

__all__ = ["Reads", "literal_field", "strings", "template_checks"]


def strings(node: Any, path: Path) -> Iterator[tuple[Path, str]]:
    """Every string under `node`, with its path (`path` is the path of `node`)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from strings(value, (*path, index))
    elif isinstance(node, str):
        yield path, node


def _step_names(tree: YMap) -> list[str]:
    steps = tree.get("workflow")
    if not isinstance(steps, list):
        return []
    return [s["step"] for s in steps if isinstance(s, dict) and isinstance(s.get("step"), str)]


def literal_field(tree: YMap, path: Path) -> bool:
    """Whether the string at `path` is a tool spec field taken literally (code, SQL; an
    upstream NoETL playbook renders them)."""
    if tree.get("dialect") == UPSTREAM or len(path) < 3 or path[-3] != "tool" or path[-2] != "spec":
        return False
    node: Any = tree
    for part in path[:-2]:
        node = node[part]
    kind = node.get("kind") if isinstance(node, dict) else None
    return isinstance(kind, str) and path[-1] in LITERAL_SPEC_FIELDS.get(kind, ())


# The names each template reads, by its path: what the name checks look at.
Reads = dict[Path, tuple[str, tuple[NameRead, ...]]]


def template_checks(tree: YMap, source: Source, reads: Reads | None = None) -> list[Diagnostic]:
    """Syntax of every template, and steps named by helpers and `step.<name>`. Code and SQL
    are not templates (they are taken literally), so they are left out. `reads`, when
    given, receives the names each valid template of a native playbook reads (found here,
    while its parse is at hand)."""
    diags: list[Diagnostic] = []
    names = set(_step_names(tree))
    if tree.get("dialect") == UPSTREAM:
        reads = None
    for section in ("workflow", "workbook"):
        for path, text in strings(tree.get(section), (section,)):
            if not is_template(text) or literal_field(tree, path):
                continue
            key_line = line_at(tree, path) or 1
            problem = check_syntax(text)
            if problem is not None:
                diags.append(
                    Diagnostic(
                        code="E310",
                        message=f"template syntax error: {problem.message}",
                        file=source.name,
                        line=value_line(source.lines, key_line, text, problem.lineno),
                        step=step_name(tree, path),
                        path=source_path(tree, path),
                    )
                )
                continue
            if reads is not None:
                reads[path] = (text, name_reads(text))
            if not names:
                continue
            for ref in step_references(text):
                if ref.name not in names:
                    diags.append(
                        Diagnostic(
                            code="E311",
                            message=f"{ref.via} names step '{ref.name}', which does not "
                            f"exist{suggest(ref.name, names)}",
                            file=source.name,
                            line=value_line(source.lines, key_line, text, ref.lineno),
                            step=step_name(tree, path),
                            path=source_path(tree, path),
                        )
                    )
    return diags
