"""`noetl exec`: start, watch, cancel and inspect executions on a NoETL server."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
from rich.console import Console, Group
from rich.live import Live

from noetl.cli.client import ApiError, Client, Server, server_option
from noetl.cli.frame import Rates, of_api, render
from noetl.cli.inputs import apply_sets, check_workload, parse_value, read_workload
from noetl.cli.live import print_summary
from noetl.core import ExecutionStatus
from noetl.decision.records import RunResult

id_option = click.option("--id", "execution_id", required=True, help="Execution id.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _url(execution_id: str, *rest: str) -> str:
    parts = [quote(execution_id, safe=""), *(quote(p, safe="") for p in rest)]
    return "/api/executions/" + "/".join(parts)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


@click.group("exec")
def exec_group() -> None:
    """Executions on a NoETL server: start, status, cancel, events."""


@exec_group.command("start")
@click.option(
    "--workflow",
    required=True,
    metavar="PATH|FILE",
    help="A local playbook file (sent inline) or the path of a registered playbook.",
)
@click.option(
    "--workload",
    "workload_file",
    type=click.Path(path_type=Path),
    help="A JSON file with the workload.",
)
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a workload value (dotted keys)."
)
@click.option(
    "--trace",
    is_flag=True,
    help="Trace this execution whatever the sample rate (sets workload.trace: true; the "
    "server needs tracing.enabled).",
)
@json_option
@server_option
def start_cmd(
    *,
    workflow: str,
    workload_file: Path | None,
    sets: tuple[str, ...],
    trace: bool,
    as_json: bool,
    server: Server,
) -> None:
    """Start an execution and print its id."""
    workload = read_workload(workload_file) if workload_file else {}
    workload = check_workload(apply_sets(workload, sets))
    if trace:
        workload["trace"] = True
    local = Path(workflow)
    body: dict[str, Any] = {"workload": workload}
    file: str | None = None
    if local.is_file():
        body["playbook"] = local.read_text(encoding="utf-8")
        file = workflow
    else:
        body["path"] = workflow
    with Client(server) as client:
        try:
            created = client.post("/api/executions", body, file=file)
        except ApiError as exc:
            if exc.status == 404 and file is None:
                exc.message += f"; there is no local file {workflow!r} either"
            raise
    if as_json:
        _echo_json({"execution_id": created["execution_id"]})
    else:
        click.echo(created["execution_id"])


def _render(data: dict[str, Any], width: int = 80, rates: Rates | None = None) -> Group:
    """The status of an execution: the live view's frame (noetl.cli.frame)."""
    return render(of_api(data), width, rates)


def _result(data: dict[str, Any]) -> RunResult:
    """The server's answer as the RunResult `noetl run` summarizes."""
    started = float(data.get("created_at") or 0.0)
    return RunResult(
        execution_id=data["execution_id"],
        status=ExecutionStatus(data["status"]),
        steps=data.get("steps", {}),
        context=data.get("context", {}),
        started_at=started,
        finished_at=started + float(data.get("duration_s") or 0.0),
        error=data.get("error"),
        ctx=data.get("ctx") or {},
    )


def _terminal(data: dict[str, Any]) -> bool:
    return ExecutionStatus(data["status"]).terminal


def _watch(client: Client, execution_id: str, interval: float, console: Console | None) -> Any:
    """Poll until the execution finishes, redrawing the view on a terminal."""
    url = _url(execution_id)
    data = client.get(url)
    if console is None:
        while not _terminal(data):
            time.sleep(interval)
            data = client.get(url)
        return data
    rates = Rates()
    frame = _render(data, console.width, rates)
    # not transient: the last frame stays on the screen
    with Live(frame, console=console, refresh_per_second=4, transient=False) as live:
        while not _terminal(data):
            time.sleep(interval)
            data = client.get(url)
            live.update(_render(data, console.width, rates))
    return data


def status_code(status: str) -> int:
    """The exit code of `exec status`: 1 when the execution failed or was canceled, else
    0 (ok, or still running without --watch)."""
    ended_badly = (ExecutionStatus.FAIL.value, ExecutionStatus.CANCELED.value)
    return 1 if status in ended_badly else 0


@exec_group.command("status")
@id_option
@click.option("--watch", is_flag=True, help="Follow the execution until it finishes.")
@click.option(
    "--interval",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@json_option
@server_option
def status_cmd(
    *, execution_id: str, watch: bool, interval: float, as_json: bool, server: Server
) -> None:
    """Show an execution (--json: the object `noetl run --json` prints).

    With --watch, follow it until it finishes. Exit 1 when it failed or was canceled,
    else 0 (it ended ok, or, without --watch, it is still running).
    """
    with Client(server) as client:
        if not watch:
            data = client.get(_url(execution_id))
        else:
            console = Console(stderr=True)
            live = console if console.is_terminal and not as_json else None
            data = _watch(client, execution_id, interval, live)
    if as_json:
        _echo_json(data)
    elif watch or _terminal(data):
        print_summary(Console(soft_wrap=True), _result(data))
    else:
        console = Console()
        console.print(_render(data, console.width))
    sys.exit(status_code(str(data["status"])))


@exec_group.command("cancel")
@id_option
@json_option
@server_option
def cancel_cmd(*, execution_id: str, as_json: bool, server: Server) -> None:
    """Ask the server to cancel an execution (harmless if it already finished)."""
    with Client(server) as client:
        data = client.post(_url(execution_id, "cancel"))
    if as_json:
        _echo_json(data)
    elif data.get("canceled"):
        click.echo(f"cancel requested for execution {execution_id}")
    else:
        status = data.get("status", "finished")
        click.echo(f"execution {execution_id} already finished ({status}); nothing to cancel")


@exec_group.command("force-complete")
@id_option
@click.option("--step", required=True, help="The parked, pending or stuck step.")
@click.option(
    "--status",
    type=click.Choice(["ok", "failed"]),
    default="ok",
    show_default=True,
    help="How the step ends.",
)
@click.option(
    "--result",
    default=None,
    metavar="VALUE",
    help="The step's result (a YAML/JSON value; saved by its result.as).",
)
@click.option("--reason", default=None, help="Why (recorded in the event log).")
@json_option
@server_option
def force_complete_cmd(
    *,
    execution_id: str,
    step: str,
    status: str,
    result: str | None,
    reason: str | None,
    as_json: bool,
    server: Server,
) -> None:
    """Mark a step done by hand (runbook B): its tasks in flight are canceled and the
    execution routes on as if the step had finished by itself."""
    body: dict[str, Any] = {"status": status}
    if result is not None:
        body["result"] = parse_value(result)
    if reason:
        body["reason"] = reason
    path = f"/api/admin/executions/{quote(execution_id, safe='')}/steps/{quote(step, safe='')}"
    with Client(server) as client:
        data = client.post(f"{path}/force-complete", body)
    if as_json:
        _echo_json(data)
    else:
        click.echo(f"step {step} of execution {execution_id} will be marked {status}")


def _clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) + f".{int(ts * 1000) % 1000:03d}"


@exec_group.command("events")
@id_option
@click.option("--type", "event_type", help="Only events of this type (e.g. step.finished).")
@click.option("--step", help="Only events of this step.")
@click.option(
    "--limit", type=click.IntRange(1, 10_000), default=1000, show_default=True, help="At most."
)
@json_option
@server_option
def events_cmd(
    *,
    execution_id: str,
    event_type: str | None,
    step: str | None,
    limit: int,
    as_json: bool,
    server: Server,
) -> None:
    """Print an execution's events in order (values under sensitive keys are masked)."""
    url = _url(execution_id, "steps", step, "events") if step else _url(execution_id, "events")
    with Client(server) as client:
        data = client.get(url, event_type=event_type, limit=limit)
    if as_json:
        _echo_json(data)
        return
    for event in data.get("items", []):
        payload = json.dumps(event.get("payload") or {}, default=str, separators=(",", ":"))
        if len(payload) > 120:
            payload = payload[:117] + "..."
        click.echo(
            f"{event['seq']:>5}  {_clock(float(event['ts']))}  {event['type']:<24}  "
            f"{event.get('step') or '-':<16}  {payload}"
        )
