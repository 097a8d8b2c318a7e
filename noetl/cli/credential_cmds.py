"""`noetl credential set | list | delete | rotate | keygen`: named credentials kept in the
database (`--db` / NOETL_DB), encrypted with `credentials.key` (NOETL_CREDENTIALS_KEY).

Values go in through a file or stdin (`--data-file -`), never through an argument (it
would stay in the shell's history and the process list), and never come back out: `list`
shows names, types, key ids and times.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import yaml

from noetl.cli.settings import db_option, with_settings
from noetl.config import Settings
from noetl.core import NotFoundError
from noetl.credentials.keys import Keyring, new_key
from noetl.credentials.records import (
    KNOWN_TYPES,
    Credential,
    CredentialError,
    check_usable,
    parse_credential,
)
from noetl.credentials.store import check_name, rotate_all, save_credential
from noetl.errors import ConfigError
from noetl.store import open_store

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("credential")
def credential_group() -> None:
    """Named credentials in the database, encrypted (values never shown)."""


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _read_data(source: str) -> Any:
    """The YAML or JSON in the file (`-`: stdin); ConfigError naming it and the line."""
    named = "stdin" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"data file {named}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"data file {named}: is not UTF-8 text") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{named}:{mark.line + 1}" if mark is not None else named
        raise ConfigError(f"data file {where}: is not valid YAML or JSON") from None


def _record(name: str, kind: str | None, content: Any, source: str) -> Credential:
    """The credential from `--type` and the data file: the file holds the fields (`data`),
    or a whole upstream record (`{name, type, data}`), whose type `--type` may omit."""
    named = "stdin" if source == "-" else source
    if not isinstance(content, dict):
        raise ConfigError(f"data file {named}: must be a map of the credential's fields")
    whole = "type" in content and isinstance(content.get("data"), dict)
    if whole:
        inner = content.get("name")
        if inner is not None and str(inner) != name:
            raise ConfigError(
                f"data file {named}: the record is named {str(inner)!r}, not {name!r}"
            )
        if kind is not None and str(content["type"]).strip().lower() != kind.strip().lower():
            raise ConfigError(
                f"data file {named}: the record's type {content['type']!r} is not --type {kind!r}"
            )
        raw: dict[str, Any] = content
    elif kind is None:
        raise ConfigError(
            f"data file {named} holds the fields only: give their --type "
            f"({', '.join(sorted(KNOWN_TYPES))}, ...)"
        )
    else:
        raw = {"type": kind, "data": content}
    try:
        return parse_credential(name, raw)
    except CredentialError as exc:
        raise ConfigError(str(exc)) from None


def _check(credential: Credential) -> str | None:
    try:
        warning = check_usable(credential)
    except CredentialError as exc:
        raise ConfigError(str(exc)) from None
    return None if warning is None else f"warning: {warning}"


@credential_group.command("set")
@click.argument("name")
@click.option(
    "--type",
    "kind",
    default=None,
    help="postgres, bearer, basic, api_key, header, s3 (others are kept for third-party "
    "tools). Optional when the file is a whole record with its type.",
)
@click.option(
    "--data-file",
    "data_file",
    required=True,
    metavar="FILE",
    help="YAML or JSON: the fields (e.g. db_host, db_port, db_user, db_password, db_name), "
    "or a whole record {name, type, data}; `-` reads stdin.",
)
@json_option
@db_option
@with_settings
def set_cmd(
    *, name: str, kind: str | None, data_file: str, as_json: bool, settings: Settings
) -> None:
    """Store (or replace) credential NAME, encrypted with NOETL_CREDENTIALS_KEY."""
    check_name(name)
    credential = _record(name, kind, _read_data(data_file), data_file)
    warning = _check(credential)
    keyring = Keyring(settings.credentials.key)
    keyring.primary_id  # noqa: B018 - no key: fail before the database is opened
    store = open_store(settings.db.url)
    try:
        row, created = save_credential(store.credentials, keyring, credential, time.time())
    finally:
        store.close()
    if warning:
        click.echo(warning, err=True)
    if as_json:
        click.echo(json.dumps({**row.summary(), "created": created}, indent=2))
        return
    verb = "stored" if created else "replaced"
    click.echo(f"{verb} credential {row.name!r} ({row.type}, key {row.key_id})")


@credential_group.command("list")
@json_option
@db_option
@with_settings
def list_cmd(*, as_json: bool, settings: Settings) -> None:
    """Every stored credential: name, type, key id and times (never a value)."""
    store = open_store(settings.db.url)
    try:
        rows = [row.summary() for row in store.credentials.all()]
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({"items": rows}, indent=2))
        return
    if not rows:
        click.echo("no credentials; store one with `noetl credential set NAME --data-file F`")
        return
    head = ("NAME", "TYPE", "KEY", "CREATED", "UPDATED")
    table = [head] + [
        (r["name"], r["type"], r["key_id"], _when(r["created_at"]), _when(r["updated_at"]))
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


@credential_group.command("delete")
@click.argument("name")
@db_option
@with_settings
def delete_cmd(*, name: str, settings: Settings) -> None:
    """Delete credential NAME; exit 1 if there is none."""
    store = open_store(settings.db.url)
    try:
        deleted = store.credentials.delete(name)
    finally:
        store.close()
    if not deleted:
        raise NotFoundError(f"no credential {name!r} (see `noetl credential list`)")
    click.echo(f"deleted credential {name!r}")


@credential_group.command("rotate")
@json_option
@db_option
@with_settings
def rotate_cmd(*, as_json: bool, settings: Settings) -> None:
    """Encrypt every stored credential again with the FIRST key of NOETL_CREDENTIALS_KEY
    (list the new key first, the old ones after it; drop the old ones afterwards)."""
    keyring = Keyring(settings.credentials.key)
    primary = keyring.primary_id
    store = open_store(settings.db.url)
    try:
        done = rotate_all(store.credentials, keyring)
    finally:
        store.close()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "key_id": primary,
                    "rotated": list(done.rotated),
                    "current": list(done.current),
                    "changed": list(done.changed),
                },
                indent=2,
            )
        )
        return
    click.echo(
        f"{len(done.rotated)} credential(s) encrypted again with key {primary}, "
        f"{len(done.current)} already under it"
        + (f", {len(done.changed)} set meanwhile (run rotate again)" if done.changed else "")
    )


@credential_group.command("keygen")
def keygen_cmd() -> None:
    """Print a new random key for NOETL_CREDENTIALS_KEY (nothing is stored)."""
    click.echo(new_key())
