"""Features of a pip extra that is not installed: validation (E340), the run-time message
of a tool and of a sink, and the settings checked when a process starts.

A missing package is simulated with `sys.modules[name] = None` (what `import name` then
refuses, and what `importlib.util.find_spec` reports as absent); the modules of NoETL
that import it are dropped from `sys.modules` so they are imported again."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from noetl.config.extras import check_sessions, check_tracing
from noetl.config.model import SessionsSettings, TracingSettings
from noetl.core import Task
from noetl.dsl.validate import load_playbook_text
from noetl.errors import ErrorClass, MissingExtraError, error_class
from noetl.extras import installed, load
from noetl.sinks import SinkRegistry, run_sinks
from noetl.tools.lazy import LazyTool

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: extras
workflow:
  - step: start
    next: load
  - step: load
    tool:
      kind: duckdb
      spec:
        query: select 1 as x
    result:
      sink:
        - s3:
            bucket: b
            key: k.json
        - kind: duckdb
          spec:
            database: out.db
            table: t
"""


def missing(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make `names` not importable, and NoETL's modules that import them be imported anew."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)
    for name in ("noetl.tools.duckdb_tool", "noetl.sinks.duckdb", "noetl.sinks.s3"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def task(kind: str, *, sinks: tuple[dict[str, Any], ...] = ()) -> Task:
    return Task(
        task_id="t1",
        execution_id="e1",
        step="load",
        kind=kind,
        spec={"query": "select 1"},
        args={},
        context={"workload": {}},
        key="e1:load",
        sinks=sinks,
    )


def test_installed_reads_what_the_import_system_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    assert installed("duckdb")  # the test environment has every extra
    missing(monkeypatch, "duckdb")
    assert not installed("duckdb")


def test_validation_names_the_step_the_field_the_line_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing(monkeypatch, "duckdb", "boto3")
    loaded = load_playbook_text(PLAYBOOK, "extras.yaml")
    assert not loaded.ok
    found = [(d.code, d.step, d.line, d.key, d.message) for d in loaded.errors]
    assert found == [
        (
            "E340",
            "load",
            10,
            "workflow[1].tool.kind",
            "uses the duckdb tool, which needs an extra: pip install 'noetl[duckdb]'",
        ),
        (
            "E340",
            "load",
            15,
            "workflow[1].result.sink[0].s3",
            "uses the s3 sink, which needs an extra: pip install 'noetl[s3]'",
        ),
        (
            "E340",
            "load",
            18,
            "workflow[1].result.sink[1].kind",
            "uses the duckdb sink, which needs an extra: pip install 'noetl[duckdb]'",
        ),
    ]
    assert loaded.errors[0].format() == (
        "extras.yaml:10: error E340: step 'load': uses the duckdb tool, which needs an "
        "extra: pip install 'noetl[duckdb]' [workflow[1].tool.kind]"
    )


def test_with_the_extras_installed_the_playbook_is_valid() -> None:
    loaded = load_playbook_text(PLAYBOOK, "extras.yaml")
    assert loaded.ok, [d.format() for d in loaded.errors]


def test_a_missing_s3_extra_leaves_the_duckdb_tool_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    missing(monkeypatch, "boto3")
    codes = [(d.code, d.key) for d in load_playbook_text(PLAYBOOK, "extras.yaml").errors]
    assert codes == [("E340", "workflow[1].result.sink[0].s3")]


def test_a_task_of_a_tool_whose_extra_is_missing_fails_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing(monkeypatch, "duckdb")
    tool = LazyTool("duckdb", "noetl.tools.duckdb_tool:DuckdbTool", extra="duckdb")
    outcome = tool.run(task("duckdb"))
    assert not outcome.ok
    assert outcome.error == (
        "step 'load' uses the duckdb tool, which needs an extra: pip install 'noetl[duckdb]'"
    )
    assert outcome.error_type == "MissingExtraError"
    assert error_class(outcome.to_payload()) is ErrorClass.FATAL  # never retried
    with pytest.raises(MissingExtraError):
        tool.loaded()


def test_a_lazy_tool_imports_its_module_with_its_first_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "noetl.tools.duckdb_tool", raising=False)
    tool = LazyTool("duckdb", "noetl.tools.duckdb_tool:DuckdbTool", extra="duckdb")
    assert "noetl.tools.duckdb_tool" not in sys.modules
    outcome = tool.run(task("duckdb"))
    assert "noetl.tools.duckdb_tool" in sys.modules
    assert outcome.ok, outcome.error
    assert outcome.this["rows"] == [{"1": 1}]


def test_a_sink_whose_extra_is_missing_fails_its_task_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing(monkeypatch, "boto3")
    sink = {"id": "s3_0", "kind": "s3", "spec": {"bucket": "b", "key": "k.json"}}
    report = run_sinks(task("noop", sinks=(sink,)), {"a": 1}, registry=SinkRegistry())
    assert report.summaries[0]["status"] == "failed"
    assert report.summaries[0]["error"] == (
        "step 'load' uses the s3 sink, which needs an extra: pip install 'noetl[s3]'"
    )
    assert report.error is not None and "pip install 'noetl[s3]'" in report.error


def test_load_raises_an_import_error_from_inside_an_installed_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A broken install is not a missing extra: its own ImportError is the truth.
    missing(monkeypatch, "yaml")
    with pytest.raises(ImportError) as caught:
        load("yaml", "duckdb", "the duckdb tool")
    assert not isinstance(caught.value, MissingExtraError)


@pytest.mark.parametrize(
    ("settings", "module"),
    [
        (TracingSettings(enabled=True), "opentelemetry.exporter.otlp.proto.http"),
        (TracingSettings(enabled=True, exporter="console"), "opentelemetry.sdk"),
    ],
)
def test_tracing_that_exports_needs_the_otel_extra(
    monkeypatch: pytest.MonkeyPatch, settings: TracingSettings, module: str
) -> None:
    check_tracing(settings)  # installed: nothing to say
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtraError) as caught:
        check_tracing(settings)
    assert str(caught.value) == (
        f"tracing.exporter is '{settings.exporter}' (tracing.enabled), which needs an extra: "
        "pip install 'noetl[otel]'"
    )


def test_tracing_that_exports_nothing_needs_no_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    check_tracing(TracingSettings(enabled=False))
    check_tracing(TracingSettings(enabled=True, exporter="none"))


def test_nats_sessions_need_the_nats_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    check_sessions(SessionsSettings(backend="nats"))
    monkeypatch.setitem(sys.modules, "nats", None)
    check_sessions(SessionsSettings(backend="database"))
    with pytest.raises(MissingExtraError, match=r"sessions.backend is 'nats', which needs"):
        check_sessions(SessionsSettings(backend="nats"))


def test_a_run_with_tracing_on_and_no_otel_stops_at_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from noetl.cli.main import main

    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http", None)
    monkeypatch.setenv("NOETL_TRACING_ENABLED", "true")
    playbook = tmp_path / "p.yaml"
    head = PLAYBOOK.split("  - step: load", maxsplit=1)[0]
    playbook.write_text(head.replace("    next: load\n", ""))
    with pytest.raises(SystemExit) as exited:
        main(["run", str(playbook), "--db", str(tmp_path / "db.sqlite")])
    assert exited.value.code == 3
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "error: tracing.exporter is 'otlp' (tracing.enabled), which needs an extra: "
            "pip install 'noetl[otel]'"
        )
    )


def test_a_server_with_nats_sessions_and_no_nats_stops_at_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from noetl.cli.main import main

    monkeypatch.setitem(sys.modules, "nats", None)
    monkeypatch.setenv("NOETL_SESSIONS_BACKEND", "nats")
    with pytest.raises(SystemExit) as exited:
        main(["server", "start", "--db", str(tmp_path / "db.sqlite")])
    assert exited.value.code == 3
    assert capsys.readouterr().err.strip() == (
        "error: sessions.backend is 'nats', which needs an extra: pip install 'noetl[nats]'"
    )
    assert not (tmp_path / "db.sqlite").exists()  # stopped before opening anything


NATS_TRIGGER = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: orders}
triggers:
  - name: created
    nats: {subject: orders.created}
workflow:
  - step: start
    tool: {kind: noop}
"""


def test_a_nats_trigger_needs_the_nats_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_playbook_text(NATS_TRIGGER, "orders.yaml").ok
    missing(monkeypatch, "nats")
    found = [d.format() for d in load_playbook_text(NATS_TRIGGER, "orders.yaml").errors]
    assert found == [
        "orders.yaml:6: error E340: uses the nats trigger 'created', which needs an extra: "
        "pip install 'noetl[nats]' [triggers[0].nats]"
    ]
