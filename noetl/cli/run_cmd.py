"""`noetl run`: run a playbook in this process on SQLite (the embedded runtime)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from noetl.cli.inputs import apply_sets, read_workload
from noetl.cli.live import LiveView, print_summary
from noetl.cli.observe import (
    log_options,
    metrics_options,
    new_metrics,
    serve_metrics,
    setup_logging,
)
from noetl.dsl.model import Playbook
from noetl.dsl.validate import load_playbook
from noetl.engine import ExecutionStatus
from noetl.errors import PlaybookError
from noetl.runtime.embedded import EmbeddedRuntime, RunResult
from noetl.runtime.local import DEFAULT_DB, embedded_runtime

db_option = click.option(
    "--db",
    default=DEFAULT_DB,
    envvar="NOETL_DB",
    show_envvar=True,
    show_default=True,
    help="Database: a SQLite file path (or sqlite:///path, memory://).",
)


@click.command("run")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a workload value (dotted keys)."
)
@click.option(
    "--workload",
    "workload_file",
    type=click.Path(path_type=Path),
    help="A JSON file with the workload.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the result.")
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    envvar="NOETL_WORKERS",
    help="Worker processes (default: CPU count).",
)
@click.option(
    "--secrets-file",
    type=click.Path(dir_okay=False),
    envvar="NOETL_SECRETS_FILE",
    help="YAML or JSON file with `secrets:` and `credentials:` (besides NOETL_SECRET_<NAME>).",
)
@log_options("WARNING")
@metrics_options(port=True)
@db_option
def run_cmd(
    *,
    file: Path,
    sets: tuple[str, ...],
    workload_file: Path | None,
    as_json: bool,
    workers: int | None,
    secrets_file: str | None,
    log_level: str,
    log_format: str,
    metrics_enabled: bool,
    metrics_port: int | None,
    metrics_host: str,
    db: str,
) -> None:
    """Run a playbook to completion; exit 0 when it ends ok, 1 otherwise. With
    --metrics-port, its metrics are served at http://HOST:PORT/metrics while it runs."""
    setup_logging(log_level, log_format)
    loaded = load_playbook(file)
    for warning in loaded.warnings:
        click.echo(warning.format(), err=True)
    if not loaded.ok:
        raise PlaybookError(loaded.errors)
    playbook = loaded.require()
    workload = read_workload(workload_file) if workload_file else {}
    workload = apply_sets(workload, sets)
    text = loaded.source.text if loaded.source else ""
    metrics = new_metrics() if metrics_enabled and metrics_port is not None else None
    exporter = None
    with embedded_runtime(
        db, workers=workers, secrets_file=secrets_file, metrics=metrics, log_events=True
    ) as runtime:
        try:
            if metrics is not None and metrics_port is not None:
                exporter = serve_metrics(metrics, metrics_port, metrics_host)
            result = _run(runtime, playbook, workload, text, str(file), as_json=as_json)
        finally:
            if exporter is not None:
                exporter.close()
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    sys.exit(0 if result.status is ExecutionStatus.OK else 1)


def _run(
    runtime: EmbeddedRuntime,
    playbook: Playbook,
    workload: dict[str, Any],
    text: str,
    path: str,
    *,
    as_json: bool,
) -> RunResult:
    execution_id = runtime.start(playbook, workload=workload, source_text=text, path=path)
    console = Console(stderr=True)
    live = not as_json and console.is_terminal
    while True:
        try:
            if live:
                with LiveView(console) as view:
                    result = runtime.wait([execution_id], on_progress=view.update)[0]
            else:
                result = runtime.wait([execution_id])[0]
            break
        except KeyboardInterrupt:
            console.print("canceling (press Ctrl-C again to abort)...")
            runtime.cancel(execution_id)
    if not as_json:
        print_summary(Console(soft_wrap=True), result)
    return result
