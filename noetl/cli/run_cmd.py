"""`noetl run`: run a playbook in this process on SQLite (the embedded runtime)."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, cast

import click
from rich.console import Console

from noetl.cli.heap import settle
from noetl.cli.held_log import CurrentStderr, HeldLog
from noetl.cli.inputs import apply_sets, check_workload, read_workload, unknown_sets
from noetl.cli.live import LiveView
from noetl.cli.observe import (
    exporter_metrics,
    log_options,
    metrics_options,
    serve_metrics,
    setup_logging,
    setup_tracing,
)
from noetl.cli.settings import db_option, setting_option, with_settings
from noetl.cli.step_output import JsonOutputPrinter, OutputPrinter
from noetl.cli.summary import gather, print_summary, step_lines
from noetl.config import Settings
from noetl.core import ConcurrencyError, ExecutionStatus
from noetl.decision.records import RunResult
from noetl.dsl.model import Playbook
from noetl.dsl.validate import load_playbook
from noetl.errors import NoetlError, PlaybookError
from noetl.observability.trace_context import sampler_of
from noetl.runtime.embedded import EmbeddedRuntime
from noetl.runtime.local import embedded_runtime
from noetl.scripts import read_scripts
from noetl.worker.output import OutputListener

__all__ = ["db_option", "run_cmd"]


def json_errors(func: Callable[..., None]) -> Callable[..., None]:
    """With `--json`, a run that cannot start still prints one JSON object on stdout:
    `{"status": "invalid", "diagnostics": [...]}` for an invalid playbook, `{"status":
    "error", "error": ...}` for anything else; the message on stderr and the exit code stay
    as without `--json` (scripts read stdout, people read stderr)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            func(*args, **kwargs)
        except PlaybookError as exc:
            if kwargs.get("as_json"):
                diagnostics = [d.to_dict() for d in exc.diagnostics]
                click.echo(json.dumps({"status": "invalid", "diagnostics": diagnostics}))
            raise
        except (NoetlError, click.ClickException) as exc:
            if kwargs.get("as_json"):
                message = exc.format_message() if isinstance(exc, click.ClickException) else exc
                click.echo(json.dumps({"status": "error", "error": str(message)}))
            raise

    return wrapper


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
    "--quiet",
    "-q",
    is_flag=True,
    help="Do not print what steps print (it stays in the events: noetl exec logs).",
)
@setting_option(
    "run.workers",
    "--workers",
    type=click.IntRange(1, 256),
    help="Python processes, and threads for python tasks and for other tools.",
    default_text="from the machine: a python process a core, 16 threads a core (max 32)",
)
@setting_option(
    "secrets.file",
    "--secrets-file",
    type=click.Path(dir_okay=False),
    help="YAML or JSON file with `secrets:` and `credentials:` (besides NOETL_SECRET_<NAME>).",
)
@setting_option(
    "credentials.file",
    "--credentials-file",
    type=click.Path(dir_okay=False),
    help="YAML or JSON file of named credential records ({type, data}, upstream's format).",
)
@setting_option(
    "dsl.allow_legacy",
    "--legacy/--no-legacy",
    help="Accept legacy forms (iter/iterator/over/coll, save) with a deprecation warning.",
)
@log_options("WARNING")
@metrics_options(port=True)
@db_option
@json_errors
@with_settings
def run_cmd(
    *,
    file: Path,
    sets: tuple[str, ...],
    workload_file: Path | None,
    as_json: bool,
    quiet: bool,
    settings: Settings,
) -> None:
    """Run a playbook to completion; exit 0 when it ends ok, 1 otherwise. With
    --metrics-port, its metrics are served at http://HOST:PORT/metrics while it runs."""
    # Without a level set, the log is held until the run ends: printed if it fails.
    held = HeldLog() if settings.logging.level is None else None
    # Printed as they come: above the live view, through the stream it puts on stderr.
    stream = held if held is not None else CurrentStderr()
    setup_logging(settings, "WARNING", stream=cast("IO[str]", stream))
    loaded = load_playbook(file, policy=settings.dsl.policy())
    for warning in loaded.warnings:
        click.echo(warning.format(), err=True)
    if not loaded.ok:
        raise PlaybookError(loaded.errors)
    roots = settings.roots(Path.cwd())
    playbook = read_scripts(loaded.require(), roots.playbooks, file=str(file))
    _warn_route_edge(playbook, settings, str(file))
    workload = read_workload(workload_file) if workload_file else {}
    for unknown in unknown_sets({**playbook.workload, **workload}, sets):
        click.echo(unknown, err=True)
    workload = check_workload(apply_sets(workload, sets))
    text = loaded.source.text if loaded.source else ""
    metrics = exporter_metrics(settings)
    exporter = None
    tracing = setup_tracing(settings, "noetl")
    console = Console(stderr=True)
    try:
        with embedded_runtime(
            settings.db.url,
            workers=settings.run.workers,
            secrets_file=settings.secrets.file,
            credentials=settings.credentials.config(),
            metrics=metrics,
            log_events=True,
            options=settings.engine_options(),
            max_result_bytes=settings.worker.max_result_bytes,
            result_inline_bytes=settings.worker.result_inline_bytes,
            tracing=tracing,
            sampler=sampler_of(settings.tracing),
            roots=roots,
            on_output=_printer(settings, console, quiet=quiet),
        ) as runtime:
            try:
                if metrics is not None and settings.metrics.port is not None:
                    exporter = serve_metrics(metrics, settings.metrics.port, settings.metrics.host)
                result = _run(
                    runtime,
                    playbook,
                    workload,
                    text,
                    str(file),
                    as_json=as_json,
                    lines=step_lines(loaded.source, playbook),
                    held=held,
                    console=console,
                )
            finally:
                if exporter is not None:
                    exporter.close()
    except ConcurrencyError as exc:
        # Another process wrote to the execution: most likely an operator canceled it from
        # the console (`noetl ui`) over the same database. The log there is the truth.
        click.echo(
            f"error: {exc}: the execution was changed by another process (canceled from the "
            "console?); this run stops here, and its state is in the database",
            err=True,
        )
        sys.exit(1)
    finally:
        if tracing is not None:
            tracing.shutdown()  # exports the spans still queued
        if held is not None and not held.released:
            _release(held, None, as_json=as_json)  # the run did not end: print the log
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    sys.exit(0 if result.status is ExecutionStatus.OK else 1)


def _printer(settings: Settings, console: Console, *, quiet: bool) -> OutputListener | None:
    """What prints the steps' output as it comes (None: nothing, `--quiet`)."""
    if quiet:
        return None
    if settings.logging.format == "json":
        return JsonOutputPrinter()
    return OutputPrinter(console)


def _release(held: HeldLog, result: RunResult | None, *, as_json: bool) -> None:
    """Print the held log when the run did not end ok; else say how many lines it had."""
    if result is None or result.status is not ExecutionStatus.OK:
        held.release(sys.stderr)
        return
    hidden = held.discard()
    if hidden and not as_json:
        click.echo(
            f"({hidden} log lines of failures the playbook handled are hidden: "
            "--log-level WARNING prints them)",
            err=True,
        )


def _warn_route_edge(playbook: Playbook, settings: Settings, path: str) -> None:
    """Say so when the configured `route_edge:<step>` default cannot apply here (the
    engine then halts, see `noetl.engine.options.effective_policy`)."""
    default = settings.policies.on_step_fail
    if playbook.policy.on_step_fail is not None or not default.startswith("route_edge:"):
        return
    target = default.split(":", 1)[1]
    if all(step.step != target for step in playbook.workflow):
        click.echo(
            f"{path}: warning: the configured policies.on_step_fail {default!r} names no step "
            "of this playbook; an unhandled failure halts it",
            err=True,
        )


def _run(
    runtime: EmbeddedRuntime,
    playbook: Playbook,
    workload: dict[str, Any],
    text: str,
    path: str,
    *,
    as_json: bool,
    lines: Mapping[str, int] | None = None,
    held: HeldLog | None = None,
    console: Console | None = None,
) -> RunResult:
    settle()  # start-up is over: its objects stay out of the collector's walks
    execution_id = runtime.start(playbook, workload=workload, source_text=text, path=path)
    console = console or Console(stderr=True)
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
    if held is not None:
        _release(held, result, as_json=as_json)  # the log before the summary
    if not as_json:
        from noetl.runtime.views import iter_events  # only for a summary

        # A page at a time: a loop of a million items leaves millions of events.
        facts = gather(iter_events(runtime.store, execution_id), lines)
        print_summary(Console(soft_wrap=True), result, facts)
    return result
