"""`noetl auth token create | list | revoke`: API tokens, on the database directly.

They open the database (`--db` / NOETL_DB, as `noetl db ...`) rather than asking a server,
since the first admin token has to be made before any token exists. An admin can also
manage tokens through the API (`/api/admin/tokens`).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import click

from noetl.auth import Role, issue_token
from noetl.cli.settings import db_option, with_settings
from noetl.config import Settings
from noetl.core import NotFoundError
from noetl.store import open_store

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("auth")
def auth_group() -> None:
    """API authentication: tokens for the server's API."""


@auth_group.group("token")
def token_group() -> None:
    """API tokens (roles: viewer < operator < admin), kept hashed in the database."""


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@token_group.command("create")
@click.option(
    "--role",
    type=click.Choice([r.value for r in Role]),
    required=True,
    help="viewer: read; operator: also start, cancel, replay; admin: everything.",
)
@click.option("--name", default=None, help="What the token is for (default: the role).")
@click.option(
    "--expires-in",
    "expires_in",
    type=click.FloatRange(min=0, min_open=True, max=3650),
    default=None,
    metavar="DAYS",
    help="Expire after this many days (default: never).",
)
@json_option
@db_option
@with_settings
def create_cmd(
    *, role: str, name: str | None, expires_in: float | None, as_json: bool, settings: Settings
) -> None:
    """Create a token and print it: it is shown this once (only its hash is stored). The
    token alone goes to stdout, so `export NOETL_API_TOKEN=$(noetl auth token create ...)`
    works."""
    store = open_store(settings.db.url)
    try:
        now = time.time()
        seconds = None if expires_in is None else expires_in * 86400
        secret, token = issue_token(
            store.tokens, role=Role(role), name=name or role, now=now, expires_in_s=seconds
        )
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({**token.summary(now), "token": secret}, indent=2))
        return
    click.echo(secret)
    expiry = f"expires {_when(token.expires_at)}" if token.expires_at else "never expires"
    click.echo(
        f"created {token.token_id} {token.name!r} ({token.role.value}, {expiry}); "
        "the token is shown this once: keep it now",
        err=True,
    )


@token_group.command("list")
@json_option
@db_option
@with_settings
def list_cmd(*, as_json: bool, settings: Settings) -> None:
    """Every token: id, name, role, dates and state (never the token)."""
    store = open_store(settings.db.url)
    try:
        tokens = store.tokens.all()
    finally:
        store.close()
    now = time.time()
    rows = [t.summary(now) for t in tokens]
    if as_json:
        click.echo(json.dumps({"items": rows}, indent=2))
        return
    if not rows:
        click.echo("no tokens; create one with `noetl auth token create --role admin`")
        return
    head = ("ID", "NAME", "ROLE", "STATE", "CREATED", "LAST USED", "EXPIRES")
    table = [head] + [
        (
            r["id"],
            r["name"],
            r["role"],
            r["state"],
            _when(r["created_at"]),
            _when(r["last_used_at"]),
            _when(r["expires_at"]),
        )
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


@token_group.command("revoke")
@click.argument("token_id")
@json_option
@db_option
@with_settings
def revoke_cmd(*, token_id: str, as_json: bool, settings: Settings) -> None:
    """Revoke a token at once (its sessions end too); exit 1 if there is no such token."""
    store = open_store(settings.db.url)
    try:
        before = store.tokens.get(token_id)
        token = store.tokens.revoke(token_id, time.time())
    finally:
        store.close()
    if token is None:
        raise NotFoundError(f"no API token {token_id!r} (see `noetl auth token list`)")
    if as_json:
        out: dict[str, Any] = token.summary(time.time())
        click.echo(json.dumps(out, indent=2))
    elif before is not None and before.revoked:
        click.echo(f"{token_id} ({token.name!r}) was already revoked", err=True)
    else:
        click.echo(f"revoked {token_id} ({token.name!r}, {token.role.value})")
