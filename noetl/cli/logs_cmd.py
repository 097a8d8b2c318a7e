"""`noetl exec logs`: what an execution's steps printed and logged, attempt by attempt.

Each line is prefixed as `noetl run` prints it (`[step#item attempt N]`,
noetl.cli.step_output). `--follow` asks again every `--interval` seconds for what came
after the last answer until the execution ends (what a step prints reaches the log when
its attempt ends).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from noetl.cli.exec_cmds import Target, connect, json_option, target_option
from noetl.cli.step_output import label
from noetl.core import ExecutionStatus

__all__ = ["logs_cmd"]

FINAL = frozenset(status.value for status in ExecutionStatus if status.terminal)


@click.command("logs")
@click.argument("execution", required=False, metavar="ID")
@click.option("--id", "execution_id", help="Execution id (or give it as the argument).")
@click.option("--step", help="Only this step's output.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the execution ends.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 60),
    default=1.0,
    show_default=True,
    help="Seconds between reads with --follow.",
)
@json_option
@target_option
def logs_cmd(
    *,
    execution: str | None,
    execution_id: str | None,
    step: str | None,
    follow: bool,
    interval: float,
    as_json: bool,
    target: Target,
) -> None:
    """Print what an execution's steps printed and logged (stdout, stderr, log records),
    each line prefixed with its step, loop item and attempt. With --json, one JSON
    object per attempt and line of output."""
    ident = execution_id or execution
    if not ident:
        raise click.UsageError("give the execution id (noetl exec logs ID)")
    if execution_id and execution and execution_id != execution:
        raise click.UsageError("two different execution ids: give one")
    after = 0
    with connect(target) as client:
        while True:
            data = client.get(
                f"/api/executions/{ident}/logs", step=step, after_seq=after, limit=1000
            )
            items = data.get("items") or []
            for item in items:
                _print(item, as_json=as_json)
            after = int(data.get("last_seq") or after)
            if len(items) >= 1000:
                continue  # more is there already
            if not follow or data.get("status") in FINAL:
                return
            time.sleep(interval)


def _print(item: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(item, default=str))
        return
    prefix = label(item.get("step"), item.get("index"), int(item.get("attempt") or 1))
    for line in str(item.get("text") or "").splitlines():
        click.echo(f"{prefix} {line}")
