"""`noetl schedule`: schedules on a NoETL server (create, list, pause, resume, delete,
run-now), through its API (`/api/schedules`)."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

import click
from rich.console import Console
from rich.table import Table

from noetl.cli.client import Client, Server, server_option

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _url(name: str, action: str = "") -> str:
    return f"/api/schedules/{quote(name, safe='/:')}" + (f"/{action}" if action else "")


@click.group("schedule")
def schedule_group() -> None:
    """Schedules that start registered playbooks by themselves: create, list, pause,
    resume, delete, run-now, token.

    On a server (--server): any number of servers may share a database, and each tick
    starts once (docs/schedules.md)."""


@schedule_group.command("create")
@click.argument("name")
@click.option("--playbook", "path", required=True, help="Catalog path of the playbook.")
@click.option("--cron", help="Cron expression (5 fields; 6 with seconds last).")
@click.option("--every", help="Fixed interval: 30s, 5m, 1h30m.")
@click.option("--webhook", is_flag=True, help="No time table: started by its webhook only.")
@click.option(
    "--nats-subject", help="No time table: one run per message on this JetStream subject."
)
@click.option("--nats-stream", help="The stream holding --nats-subject (default: found or made).")
@click.option("--nats-url", help="NATS server of --nats-subject (default triggers.nats_url).")
@click.option("--timezone", help="IANA time zone the cron is read in (default UTC).")
@click.option("--start", help="First time it may tick (ISO 8601).")
@click.option("--end", help="Last time it may tick (ISO 8601).")
@click.option("--workload", help="Workload as JSON (templates see {{ tick.time }}).")
@click.option(
    "--overlap",
    type=click.Choice(["skip", "buffer_one", "allow", "cancel_other"]),
    help="What a tick does while the last run still runs (default skip).",
)
@click.option(
    "--catchup",
    type=click.Choice(["none", "latest", "all"]),
    help="Which ticks missed while no server was up still fire (default latest).",
)
@click.option("--catchup-window", help="How far back missed ticks still fire (default 1h).")
@click.option("--paused", is_flag=True, help="Create it paused.")
@json_option
@server_option
def create_cmd(*, name: str, path: str, as_json: bool, server: Server, **given: Any) -> None:
    """Create (or replace) the schedule NAME starting PLAYBOOK on --cron, --every,
    --webhook or --nats-subject."""
    trigger = {k: v for k, v in given.items() if v not in (None, False)}
    nats = {
        k[5:]: trigger.pop(k) for k in ("nats_subject", "nats_stream", "nats_url") if k in trigger
    }
    if nats:
        trigger["nats"] = nats
    if "workload" in trigger:
        try:
            trigger["workload"] = json.loads(trigger["workload"])
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--workload") from None
    with Client(server) as client:
        data = client.post("/api/schedules", {"name": name, "path": path, "trigger": trigger})
    _print_one(data, as_json)


def _when(value: float | None) -> str:
    if value is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(value)))


def _kind(trigger: dict[str, Any]) -> str:
    """When a schedule starts: its cron, interval, webhook or NATS subject."""
    if trigger.get("webhook"):
        return "webhook"
    if isinstance(trigger.get("nats"), dict):
        return f"nats {trigger['nats'].get('subject')}"
    return trigger.get("cron") or f"every {trigger.get('every')}"


def _print_one(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    state = "paused" if data["paused"] else "active"
    upcoming = ", ".join(data["next_ticks"]) or "-"
    click.echo(f"{data['name']} ({state}) starts {data['path']}; next: {upcoming}")


@schedule_group.command("list")
@json_option
@server_option
def list_cmd(*, as_json: bool, server: Server) -> None:
    """List schedules with their next tick and last one."""
    with Client(server) as client:
        data = client.get("/api/schedules")
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    items = data.get("items", [])
    if not items:
        click.echo("no schedules")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("name", "playbook", "when", "state", "next", "last", "outcome"):
        table.add_column(column)
    for item in items:
        trigger = item["trigger"]
        when = _kind(trigger)
        last = item.get("last_tick") or {}
        table.add_row(
            item["name"],
            item["path"],
            when,
            "paused" if item["paused"] else "active",
            (item["next_ticks"] or ["-"])[0],
            last.get("time", "-"),
            last.get("status", "-"),
        )
    Console(soft_wrap=True).print(table)


def _action(name: str, action: str, server: Server, as_json: bool) -> None:
    with Client(server) as client:
        data = client.post(_url(name, action))
    _print_one(data, as_json)


@schedule_group.command("pause")
@click.argument("name")
@json_option
@server_option
def pause_cmd(*, name: str, as_json: bool, server: Server) -> None:
    """Pause NAME: no tick of it starts until it is resumed."""
    _action(name, "pause", server, as_json)


@schedule_group.command("resume")
@click.argument("name")
@json_option
@server_option
def resume_cmd(*, name: str, as_json: bool, server: Server) -> None:
    """Resume NAME (ticks missed while paused follow its catch-up policy)."""
    _action(name, "resume", server, as_json)


@schedule_group.command("delete")
@click.argument("name")
@server_option
def delete_cmd(*, name: str, server: Server) -> None:
    """Delete NAME and its ticks."""
    with Client(server) as client:
        client.request("DELETE", _url(name))
    click.echo(f"deleted {name}")


@schedule_group.command("run-now")
@click.argument("name")
@json_option
@server_option
def run_now_cmd(*, name: str, as_json: bool, server: Server) -> None:
    """Start NAME's playbook now (a manual tick; exit 1 when it could not start)."""
    with Client(server) as client:
        data = client.post(_url(name, "run"))
    if as_json:
        click.echo(json.dumps(data, indent=2))
    elif data.get("execution_id"):
        click.echo(f"started {data['execution_id']}")
    if not data.get("execution_id"):
        raise click.ClickException(f"{name} did not start: {data.get('error')}")


@schedule_group.command("token")
@click.argument("name")
@server_option
def token_cmd(*, name: str, server: Server) -> None:
    """Make a new token for NAME's webhook (POST /api/triggers/NAME); it is shown once, and
    the old one stops working. Needs the admin role."""
    with Client(server) as client:
        data = client.post(_url(name, "token"))
    click.echo(data["token"])
