"""`noetl exec`: start, watch, cancel and inspect executions on a NoETL server."""

from __future__ import annotations

import functools
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
from rich.console import Console, Group
from rich.live import Live

from noetl.cli.client import ApiError, Client, Server, server_option, token_option
from noetl.cli.frame import Rates, of_api, render
from noetl.cli.inputs import apply_sets, check_workload, parse_value, read_workload
from noetl.cli.live import print_summary
from noetl.cli.local_api import local_client
from noetl.cli.settings import check_db_directory
from noetl.config import DEFAULT_DB
from noetl.core import ExecutionStatus
from noetl.decision.records import RunResult

id_option = click.option("--id", "execution_id", required=True, help="Execution id.")


@dataclass(frozen=True, slots=True)
class Target:
    """Where a command looks: a server when one is named, else a database."""

    server: Server | None
    db: str


def target_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """`--server` (NOETL_SERVER_URL) with `--token`, or `--db` (NOETL_DB; default: the
    file `noetl run` writes): a server only when one is named (noetl.cli.local_api)."""

    @functools.wraps(func)
    def wrapper(
        *args: Any, server: str | None, token: str | None, db: str | None, **kw: Any
    ) -> Any:
        named = Server(server, token or None) if server else None
        return func(*args, target=Target(named, db or DEFAULT_DB), **kw)

    wrapped = token_option(wrapper)
    wrapped = click.option(
        "--db",
        "db",
        default=None,
        envvar="NOETL_DB",
        help="The database to look in when no server is named (default: the file "
        "`noetl run` writes).",
    )(wrapped)
    return click.option(
        "--server",
        "server",
        default=None,
        envvar="NOETL_SERVER_URL",
        show_envvar=True,
        help="Base URL of a NoETL server (without one: the database of --db).",
    )(wrapped)


@contextmanager
def connect(target: Target) -> Iterator[Client]:
    """A client of the server, or of the API app over the database."""
    if target.server is not None:
        with Client(target.server) as client:
            yield client
        return
    check_db_directory(target.db)
    with local_client(target.db) as client:
        yield client


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
@target_option
def status_cmd(
    *, execution_id: str, watch: bool, interval: float, as_json: bool, target: Target
) -> None:
    """Show an execution (--json: the object `noetl run --json` prints).

    With --watch, follow it until it finishes. Exit 1 when it failed or was canceled,
    else 0 (it ended ok, or, without --watch, it is still running).
    """
    with connect(target) as client:
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
@target_option
def cancel_cmd(*, execution_id: str, as_json: bool, target: Target) -> None:
    """Cancel an execution (harmless if it already finished): on a server, asked of it;
    on a database, decided here for that execution alone."""
    with connect(target) as client:
        data = client.post(_url(execution_id, "cancel"))
        if data.get("canceled") and client.after_cancel is not None:
            client.after_cancel(execution_id)
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
@target_option
def events_cmd(
    *,
    execution_id: str,
    event_type: str | None,
    step: str | None,
    limit: int,
    as_json: bool,
    target: Target,
) -> None:
    """Print an execution's events in order (values under sensitive keys are masked)."""
    url = _url(execution_id, "steps", step, "events") if step else _url(execution_id, "events")
    with connect(target) as client:
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


_SINCE = re.compile(r"^(\d+)([smhd])$")
_SCAN_PAGES = 20  # pages of 1,000 executions read to find `--limit` matches


def parse_since(text: str, now: float) -> float:
    """`--since`: a duration back from now (`90s`, `30m`, `2h`, `7d`) or an ISO time
    (`2026-11-26T10:00`, local time unless it says its zone)."""
    match = _SINCE.match(text.strip())
    if match:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return now - int(match.group(1)) * unit
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither a duration (90s, 30m, 2h, 7d) nor a time (2026-11-26T10:00)",
            param_hint="--since",
        ) from None


@exec_group.command("list")
@click.option(
    "--status",
    type=click.Choice([s.value for s in ExecutionStatus]),
    help="Only executions in this status.",
)
@click.option("--playbook", help="Only executions of this playbook (its name or path).")
@click.option("--since", help="Only executions started since: 30m, 2h, 7d, or a time.")
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=20, show_default=True, help="At most."
)
@json_option
@target_option
def list_cmd(
    *,
    status: str | None,
    playbook: str | None,
    since: str | None,
    limit: int,
    as_json: bool,
    target: Target,
) -> None:
    """List executions, newest first."""
    after = None if since is None else parse_since(since, time.time())
    found: list[dict[str, Any]] = []
    with connect(target) as client:
        offset: int | None = 0
        for _ in range(_SCAN_PAGES):
            if offset is None or len(found) >= limit:
                break
            params = {"status": status, "limit": 1000, "offset": offset}
            page = client.get("/api/executions", **params)
            for item in page.get("items", []):
                if after is not None and float(item.get("created_at") or 0) < after:
                    offset = None  # newest first: the rest is older still
                    break
                names = (item.get("playbook_name"), item.get("playbook_path"))
                if playbook is None or playbook in names:
                    found.append(item)
            else:
                offset = page.get("next_offset")
    found = found[:limit]
    if as_json:
        _echo_json({"items": found})
        return
    for item in found:
        created = _clock(float(item.get("created_at") or 0))[:19]
        name = item.get("playbook_path") or item.get("playbook_name") or "-"
        pruned = "  (history pruned)" if item.get("pruned_at") is not None else ""
        click.echo(f"{item['execution_id']}  {item['status']:<9} {created}  {name}{pruned}")
    if not found:
        click.echo("no executions", err=True)
