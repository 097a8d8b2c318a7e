"""`noetl server`: the distributed-mode server (`start` runs it, `health` asks it)."""

from __future__ import annotations

import json
import sys

import click

from noetl.cli.client import EXIT_UNREACHABLE, Client, Server, server_option


@click.group("server")
def server_group() -> None:
    """The NoETL server: REST API and orchestrator over a shared database."""


@server_group.command("health")
@click.option("--json", "as_json", is_flag=True, help="Print the server's answer as JSON.")
@server_option
def health_cmd(*, as_json: bool, server: Server) -> None:
    """Check that the server answers and reaches its database; exit 3 if not."""
    with Client(server) as client:
        data = client.request("GET", "/health", ok=(503,))
    healthy = data.get("database") == "ok"
    if as_json:
        click.echo(json.dumps(data, indent=2))
    elif healthy:
        click.echo(f"ok: noetl {data.get('version')} at {client.base_url}, database ok")
    else:
        click.echo(
            f"error: noetl {data.get('version')} at {client.base_url} is up, "
            "but its database is unavailable (see the server log)",
            err=True,
        )
    if not healthy:
        sys.exit(EXIT_UNREACHABLE)
