"""The Python API: run and validate playbooks from a program.

```python
import noetl

result = noetl.run("flow.yaml", workload={"n": 3})
if result.ok:
    print(result.context["total"])
report = noetl.validate("flow.yaml")
```

A playbook is given as a path (`str` or `pathlib.Path`), as YAML text, or as a dict. An
invalid one raises `noetl.PlaybookError` (its `diagnostics`: code, message, line, field)
from `run`; `validate` returns them. `run` runs the playbook embedded, as `noetl run`
does (python steps in a pool of child processes, which is started and stopped inside the
call: no `if __name__ == "__main__":` guard is needed), and returns its `RunResult`.

The database: by default a SQLite file in a temporary directory, deleted when `run`
returns (the result holds what the run did); `db=` keeps the run in that database (a
file path, or a `postgresql://` URL) for `noetl exec`, `noetl dlq` or `noetl ui`.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noetl.decision.records import RunResult
from noetl.dsl.diagnostics import Diagnostic
from noetl.dsl.validate import LoadResult, load_playbook, load_playbook_text
from noetl.errors import PlaybookError

__all__ = ["Validation", "run", "validate"]

Playbook = str | Path | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Validation:
    """What `validate` found: `ok` when the playbook has no error (warnings allowed)."""

    ok: bool
    diagnostics: tuple[Diagnostic, ...]

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity.value == "error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity.value != "error")


def validate(playbook: Playbook) -> Validation:
    """Validate a playbook (a path, YAML text or a dict); never raises for its content."""
    loaded, _ = _load(playbook)
    return Validation(loaded.ok, tuple(loaded.diagnostics))


def run(
    playbook: Playbook,
    workload: Mapping[str, Any] | None = None,
    *,
    db: str | Path | None = None,
    workers: int | None = None,
    timeout: float | None = None,
) -> RunResult:
    """Run a playbook to its end and return its result (`result.ok`, `status`, `steps`,
    `context`, `error`, `duration_s`). PlaybookError when it is not valid; TimeoutError
    when `timeout` seconds pass first (the execution is canceled)."""
    from noetl.runtime.local import embedded_runtime  # noqa: PLC0415 - the runtime is heavy
    from noetl.scripts import read_scripts  # noqa: PLC0415

    loaded, base = _load(playbook)
    if not loaded.ok:
        raise PlaybookError(loaded.errors)
    model = read_scripts(loaded.require(), base, file=loaded.file)
    text = loaded.source.text if loaded.source else ""
    with tempfile.TemporaryDirectory(prefix="noetl-run-") as scratch:
        where = str(db) if db is not None else str(Path(scratch) / "noetl.db")
        with embedded_runtime(where, workers=workers) as runtime:
            execution_id = runtime.start(
                model, workload=dict(workload or {}), source_text=text, path=loaded.file
            )
            return _wait(runtime, execution_id, timeout)


def _wait(runtime: Any, execution_id: str, timeout: float | None) -> RunResult:
    if timeout is None:
        result: RunResult = runtime.wait([execution_id])[0]
        return result
    deadline = time.monotonic() + timeout
    expired = threading.Event()

    def progress(_: Any) -> None:
        if not expired.is_set() and time.monotonic() >= deadline:
            expired.set()
            runtime.cancel(execution_id)

    result = runtime.wait([execution_id], on_progress=progress)[0]
    if expired.is_set():
        raise TimeoutError(
            f"execution {execution_id} did not end within {timeout} s; it was canceled"
        )
    return result


def _load(playbook: Playbook) -> tuple[LoadResult, Path]:
    """The playbook validated, and the directory its script files are relative to."""
    if isinstance(playbook, Mapping):
        import yaml  # noqa: PLC0415

        text = yaml.safe_dump(dict(playbook), sort_keys=False)
        return load_playbook_text(text, "<dict>"), Path.cwd()
    if isinstance(playbook, Path) or (isinstance(playbook, str) and _looks_like_path(playbook)):
        path = Path(playbook)
        if not path.exists():
            raise FileNotFoundError(f"no playbook file {path}")
        return load_playbook(path), path.resolve().parent
    return load_playbook_text(str(playbook), "<text>"), Path.cwd()


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and ":" not in text.split("/", maxsplit=1)[0] and len(text) < 4096
