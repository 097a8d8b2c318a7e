"""`noetl playbook`: the server's playbook catalog (register versions, list them)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from noetl.cli.client import ApiError, Client, Server, server_option
from noetl.dsl.diagnostics import Diagnostic, Severity

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("playbook")
def playbook_group() -> None:
    """The playbook catalog of a NoETL server."""


def _warning(item: dict[str, Any], file: str) -> str:
    key = item.get("key")
    return Diagnostic(
        code=str(item.get("code", "")),
        message=str(item.get("message", "")),
        file=file,
        line=item.get("line"),
        step=item.get("step"),
        path=(key,) if key else (),
        severity=Severity.WARNING,
    ).format()


@playbook_group.command("register")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--path", "catalog_path", help="Catalog path (default: the metadata.path).")
@json_option
@server_option
def register_cmd(*, file: Path, catalog_path: str | None, as_json: bool, server: Server) -> None:
    """Validate and register FILE as the next version of its path."""
    body = {"content": file.read_text(encoding="utf-8"), "path": catalog_path}
    with Client(server) as client:
        try:
            data = client.post("/api/playbooks", body, file=str(file))
        except ApiError as exc:
            if exc.status == 422 and "body.path" in exc.message:
                exc.message += "; give one with --path"
            raise
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for item in data.get("warnings", []):
        click.echo(_warning(item, str(file)), err=True)
    click.echo(f"registered {data['path']} version {data['version']} ({data['name']})")


@playbook_group.command("list")
@json_option
@server_option
def list_cmd(*, as_json: bool, server: Server) -> None:
    """List registered playbooks (the latest version of each)."""
    with Client(server) as client:
        data = client.get("/api/playbooks")
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    items = data.get("items", [])
    if not items:
        click.echo("no playbooks registered")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("path", "version", "name", "registered"):
        table.add_column(column)
    for item in items:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(item["created_at"])))
        table.add_row(item["path"], str(item["version"]), item["name"], when)
    Console(soft_wrap=True).print(table)
