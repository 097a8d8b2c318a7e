"""The Python API: run and validate playbooks from a program.

```python
import noetl

report = noetl.run("flow.yaml", workload={"n": 3})
if report.ok:
    print(report.context["total"])
else:
    for step in report.failed_steps:
        print(step.name, step.error, step.attempts)
print(noetl.validate("flow.yaml").ok)
```

A playbook is given as a path (`str` or `pathlib.Path`), as YAML text, or as a dict. An
invalid one raises `noetl.PlaybookError` (its `diagnostics`: code, message, line, step,
severity) from `run`; `validate` returns them. `run` runs the playbook embedded, as
`noetl run` does (python steps in a pool of child processes, which is started and stopped
inside the call: no `if __name__ == "__main__":` guard is needed, see
noetl.worker.python_pool), and returns a `RunReport` (noetl.api_results).

The database: by default a SQLite file in a temporary directory, deleted when `run`
returns (the report holds what the run did); `db=` keeps the run in that database (a
file path, or a `postgresql://` URL) for `noetl exec`, `noetl dlq` or `noetl ui`.

The settings: those `noetl run` reads (the `NOETL_CONFIG` file, the `NOETL_*` variables),
with `settings={"dotted.key": value}` over them, or a `noetl.config.Settings` as it is.
The database and the log are not taken from them: `db=` names the one, and `run` writes
no log (the report and the database hold what happened).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noetl.dsl.diagnostics import Diagnostic, Severity
from noetl.dsl.policy import DslPolicy
from noetl.dsl.validate import LoadResult, load_playbook, load_playbook_text
from noetl.errors import ConfigError, PlaybookError

if TYPE_CHECKING:
    from noetl.api_results import RunReport
    from noetl.config import Settings
    from noetl.runtime.embedded import EmbeddedRuntime

__all__ = ["Playbook", "Validation", "resolve_settings", "run", "validate"]

Playbook = str | Path | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Validation:
    """What `validate` found: `ok` when the playbook has no error (warnings allowed)."""

    ok: bool
    diagnostics: tuple[Diagnostic, ...]

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is Severity.ERROR)

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is not Severity.ERROR)


def validate(
    playbook: Playbook, *, settings: Settings | Mapping[str, Any] | None = None
) -> Validation:
    """Validate a playbook (a path, YAML text or a dict); never raises for its content
    (FileNotFoundError for a path that names no file)."""
    loaded, _ = _load(playbook, policy=resolve_settings(settings).dsl.policy())
    return Validation(loaded.ok, tuple(loaded.diagnostics))


def run(
    playbook: Playbook,
    workload: Mapping[str, Any] | None = None,
    *,
    db: str | Path | None = None,
    workers: int | None = None,
    timeout: float | None = None,
    settings: Settings | Mapping[str, Any] | None = None,
) -> RunReport:
    """Run a playbook to its end and return its report (`ok`, `status`, `steps`,
    `context`, `error`, `duration_s`). A failed run is a report, not an exception.
    PlaybookError when the playbook is not valid; ConfigError for a bad setting;
    TimeoutError when `timeout` seconds pass first (the execution is canceled);
    ValueError, naming where, for a workload the engine cannot take (nested too deep or
    holding itself, a NUL character, a number JSON cannot hold), as `noetl run --set`."""
    from noetl.dsl.limits import check_data  # noqa: PLC0415

    given = dict(workload or {})
    problem = check_data(given, root="workload")
    if problem is not None:
        raise ValueError(str(problem))
    # The runtime is heavy: it loads on the first run, so `import noetl` stays cheap.
    from noetl.runtime.local import embedded_runtime  # noqa: PLC0415
    from noetl.scripts import read_scripts  # noqa: PLC0415

    config = resolve_settings(settings)
    loaded, base = _load(playbook, policy=config.dsl.policy())
    if not loaded.ok:
        raise PlaybookError(loaded.errors)
    model = read_scripts(loaded.require(), base, file=loaded.file)
    text = loaded.source.text if loaded.source else ""
    with tempfile.TemporaryDirectory(prefix="noetl-run-") as scratch:
        where = str(db) if db is not None else str(Path(scratch) / "noetl.db")
        with embedded_runtime(
            where,
            workers=workers or config.run.workers,
            secrets_file=config.secrets.file,
            credentials=config.credentials.config(),
            options=config.engine_options(),
            roots=config.roots(Path.cwd()),
            max_result_bytes=config.worker.max_result_bytes,
            result_inline_bytes=config.worker.result_inline_bytes,
        ) as runtime:
            execution_id = runtime.start(model, workload=given, source_text=text, path=loaded.file)
            _wait(runtime, execution_id, timeout)
            return _report(runtime, execution_id, loaded, kept=where if db is not None else None)


def resolve_settings(settings: Settings | Mapping[str, Any] | None) -> Settings:
    """A Settings as it is; else what `noetl run` reads, with the dotted keys of
    `settings` over it. ConfigError for a key that is no setting or a bad value."""
    from noetl.config import Settings, load_settings  # noqa: PLC0415

    if isinstance(settings, Settings):
        return settings
    flags = {key: (value, f"settings[{key!r}]") for key, value in (settings or {}).items()}
    try:
        return load_settings(None, None, flags)
    except ConfigError:
        raise
    except ValueError as exc:  # a key that names no setting
        raise ConfigError(str(exc)) from exc


def _wait(runtime: EmbeddedRuntime, execution_id: str, timeout: float | None) -> None:
    if timeout is None:
        runtime.wait([execution_id])
        return
    deadline = time.monotonic() + timeout
    expired = threading.Event()

    def progress(_: object) -> None:
        if not expired.is_set() and time.monotonic() >= deadline:
            expired.set()
            runtime.cancel(execution_id)

    runtime.wait([execution_id], on_progress=progress)
    if expired.is_set():
        raise TimeoutError(
            f"execution {execution_id} did not end within {timeout} s; it was canceled"
        )


def _report(
    runtime: EmbeddedRuntime, execution_id: str, loaded: LoadResult, *, kept: str | None
) -> RunReport:
    from noetl.api_results import report  # noqa: PLC0415
    from noetl.cli.summary import gather, step_lines  # noqa: PLC0415

    lines = step_lines(loaded.source, loaded.require())
    facts = gather(runtime.store.load_events(execution_id), lines)
    state = runtime.state(execution_id)
    return report(runtime.result(execution_id), state.steps, facts, db=kept)


def _load(playbook: Playbook, *, policy: DslPolicy) -> tuple[LoadResult, Path]:
    """The playbook validated, and the directory its script files are relative to."""
    if isinstance(playbook, Mapping):
        import yaml  # noqa: PLC0415

        text = yaml.safe_dump(dict(playbook), sort_keys=False)
        return load_playbook_text(text, "<dict>", policy=policy), Path.cwd()
    if isinstance(playbook, Path) or (isinstance(playbook, str) and _looks_like_path(playbook)):
        path = Path(playbook)
        if not path.exists():
            raise FileNotFoundError(f"no playbook file {path}")
        return load_playbook(path, policy=policy), path.resolve().parent
    return load_playbook_text(str(playbook), "<text>", policy=policy), Path.cwd()


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and ":" not in text.split("/", maxsplit=1)[0] and len(text) < 4096
