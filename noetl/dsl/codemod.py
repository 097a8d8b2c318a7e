"""Rewrite legacy playbook forms into canonical DSL v2 (placeholder until implemented)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class CodemodResult:
    text: str
    changed: bool
    notes: list[str] = field(default_factory=list)


def rewrite_file(path: Path) -> CodemodResult:
    text = path.read_text(encoding="utf-8")
    return CodemodResult(text=text, changed=False)
