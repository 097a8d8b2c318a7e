"""Diagnostics: one problem found in a playbook, with where it is and what to do."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

Path = tuple[str | int, ...]


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"  # a note `lint` shows (how a file was read); never fails, even --strict


def format_path(path: Path) -> str:
    """Render a document path like `workflow[2].tool.spec`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One error, warning or note about a playbook.

    `code` is stable and documented in docs/dsl.md; `message` is for people.
    """

    code: str
    message: str
    file: str
    line: int | None = None
    step: str | None = None
    path: Path = ()
    severity: Severity = Severity.ERROR

    @property
    def key(self) -> str:
        """The document path of the offending key (e.g. `workflow[1].next`)."""
        return format_path(self.path)

    def format(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        parts = [f"{where}: {self.severity.value} {self.code}:"]
        if self.step:
            parts.append(f"step '{self.step}':")
        parts.append(self.message)
        text = " ".join(parts)
        if self.path:
            text += f" [{self.key}]"
        return text

    def to_dict(self) -> dict[str, object]:
        return {
            "severity": self.severity.value,
            "code": self.code,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "step": self.step,
            "key": self.key or None,
        }


def has_errors(diagnostics: Sequence[Diagnostic]) -> bool:
    return any(d.severity is Severity.ERROR for d in diagnostics)
