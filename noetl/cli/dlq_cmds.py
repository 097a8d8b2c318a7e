"""`noetl dlq`: list, show, replay and discard dead-letter entries.

On a server (`--server` / NOETL_SERVER_URL, the default) through its API; or directly on a
database with `--db` / NOETL_DB (the SQLite file `noetl run` writes, or PostgreSQL), where
`replay` also carries the reopened execution on to its end in this process.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from typing import Any, Protocol
from urllib.parse import quote

import click

from noetl.cli.client import DEFAULT_SERVER, Client, Server, token_option
from noetl.cli.inputs import parse_value
from noetl.runtime.dlq import check_patch_key

STATUSES = ("pending", "replayed", "discarded", "all")


class Backend(Protocol):
    def list(self, status: str | None, execution_id: str | None, limit: int) -> dict[str, Any]: ...

    def show(self, message_id: str) -> dict[str, Any]: ...

    def replay(self, message_id: str, patch: dict[str, Any]) -> dict[str, Any]: ...

    def discard(self, message_id: str, reason: str) -> dict[str, Any]: ...

    def last_seq(self, execution_id: str) -> int: ...

    def finish(self, execution_id: str, after_seq: int) -> dict[str, Any]: ...


class ApiBackend:
    def __init__(self, client: Client) -> None:
        self.client = client

    def list(self, status: str | None, execution_id: str | None, limit: int) -> dict[str, Any]:
        found: dict[str, Any] = self.client.get(
            "/api/dlq", status=status, execution_id=execution_id, limit=limit
        )
        return found

    def show(self, message_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.client.get(f"/api/dlq/{quote(message_id, safe='')}")
        return found

    def replay(self, message_id: str, patch: dict[str, Any]) -> dict[str, Any]:
        path = f"/api/dlq/{quote(message_id, safe='')}/replay"
        answer: dict[str, Any] = self.client.post(path, {"patch": patch})
        return answer

    def discard(self, message_id: str, reason: str) -> dict[str, Any]:
        path = f"/api/dlq/{quote(message_id, safe='')}/discard"
        answer: dict[str, Any] = self.client.post(path, {"reason": reason})
        return answer

    def last_seq(self, execution_id: str) -> int:
        return int(self._execution(execution_id)["last_seq"])

    def finish(self, execution_id: str, after_seq: int) -> dict[str, Any]:
        import time

        while True:
            found = self._execution(execution_id)
            if found["last_seq"] > after_seq and found["status"] != "running":
                return found
            time.sleep(0.5)

    def _execution(self, execution_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.client.get(f"/api/executions/{quote(execution_id, safe='')}")
        return found


class LocalBackend:
    """Straight on a database; a replay runs the reopened execution here."""

    def __init__(self, db: str, stack: ExitStack, *, secrets_file: str | None) -> None:
        from noetl.runtime.orchestrator import Orchestrator
        from noetl.store import open_store

        self.store = open_store(db)
        stack.callback(self.store.close)
        self.orchestrator = Orchestrator(self.store, owner="cli")
        self.secrets_file = secrets_file

    def list(self, status: str | None, execution_id: str | None, limit: int) -> dict[str, Any]:
        from noetl.store.base import DeadLetterStatus

        entries = self.store.list_dead_letters(
            status=None if status is None else DeadLetterStatus(status),
            execution_id=execution_id,
            limit=limit,
        )
        return {
            "items": [entry.summary() for entry in entries],
            "limit": limit,
            "offset": 0,
            "counts": self.store.dead_letter_counts(),
        }

    def show(self, message_id: str) -> dict[str, Any]:
        return self.orchestrator.dlq.get(message_id).to_dict()

    def replay(self, message_id: str, patch: dict[str, Any]) -> dict[str, Any]:
        result = self.orchestrator.dlq.replay(message_id, patch=patch, by="cli")
        return {
            "message_id": result.message_id,
            "execution_id": result.execution_id,
            "replayed": result.replayed,
            "status": result.status.value,
        }

    def discard(self, message_id: str, reason: str) -> dict[str, Any]:
        return self.orchestrator.dlq.discard(message_id, reason).to_dict()

    def last_seq(self, execution_id: str) -> int:
        record = self.store.get_execution(execution_id)
        return 0 if record is None else record.last_seq

    def finish(self, execution_id: str, after_seq: int) -> dict[str, Any]:
        import os

        from noetl.config import load_settings
        from noetl.runtime.local import local_cluster, wait_finished

        # The engine decides here as `noetl run` would: with the configured defaults.
        settings = load_settings(None, os.environ)
        secrets_file = self.secrets_file or settings.secrets.file
        with local_cluster(
            self.store, secrets_file=secrets_file, options=settings.engine_options()
        ):
            record = wait_finished(self.store, execution_id, after_seq=after_seq)
        return {
            "execution_id": execution_id,
            "status": record.status.value,
            "steps": self.store.get_steps(execution_id),
        }


def backend_options(func: Any) -> Any:
    """`--server`, `--token`, `--db` and `--secrets-file`, on every command."""
    func = token_option(func)
    func = click.option(
        "--secrets-file",
        type=click.Path(dir_okay=False),
        envvar="NOETL_SECRETS_FILE",
        help="With --db: secrets for the tasks a replay runs here.",
    )(func)
    func = click.option(
        "--db",
        default=None,
        envvar="NOETL_DB",
        show_envvar=True,
        help="Work on this database directly instead of a server (SQLite file or postgresql://).",
    )(func)
    return click.option(
        "--server",
        default=DEFAULT_SERVER,
        envvar="NOETL_SERVER_URL",
        show_envvar=True,
        show_default=True,
        help="Base URL of the NoETL server (unless --db is given).",
    )(func)


def _backend(
    stack: ExitStack, server: str, db: str | None, secrets_file: str | None, token: str | None
) -> Backend:
    if db:
        return LocalBackend(db, stack, secrets_file=secrets_file)
    return ApiBackend(stack.enter_context(Client(Server(server, token or None))))


@click.group("dlq")
def dlq_group() -> None:
    """The dead-letter queue: tasks that failed for good, to replay or discard. On a server
    (--server), or on a database directly (--db)."""


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@dlq_group.command("list")
@click.option(
    "--status",
    type=click.Choice(STATUSES),
    default="pending",
    show_default=True,
    help="Entries of this status (all: every entry).",
)
@click.option("--execution", "execution_id", default=None, help="Only this execution's.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@json_option
@backend_options
def list_cmd(
    status: str, execution_id: str | None, limit: int, as_json: bool, **where: Any
) -> None:
    """List entries, most recently failed first."""
    with ExitStack() as stack:
        found = _backend(stack, **where).list(
            None if status == "all" else status, execution_id, limit
        )
    if as_json:
        _echo_json(found)
        return
    items = found["items"]
    if not items:
        click.echo(f"no {'' if status == 'all' else status + ' '}dead-letter entries")
    for item in items:
        error = " ".join(str(item["last_error"]).split())
        click.echo(
            f"{item['message_id']} | {item['step']} | {item['tool_kind'] or '-'} | "
            f"{item['reason']} | {item['attempts']} attempts | {item['status']} | {error[:80]}"
        )
    counts = found.get("counts", {})
    if counts:
        click.echo("(" + ", ".join(f"{n} {s}" for s, n in counts.items()) + ")")


@dlq_group.command("show")
@click.argument("message_id")
@json_option
@backend_options
def show_cmd(message_id: str, as_json: bool, **where: Any) -> None:
    """Show one entry: the error, its stack, the redacted task and context excerpt."""
    with ExitStack() as stack:
        entry = _backend(stack, **where).show(message_id)
    if as_json:
        _echo_json(entry)
        return
    for key in (
        "message_id",
        "execution_id",
        "step",
        "loop_index",
        "loop_key",
        "tool_kind",
        "sink_id",
        "status",
        "reason",
        "attempts",
        "replays",
        "error_type",
        "last_error",
        "discard_reason",
    ):
        if entry.get(key) is not None:
            click.echo(f"{key}: {entry[key]}")
    if entry.get("last_stack"):
        click.echo("last_stack:\n" + str(entry["last_stack"]))
    click.echo("payload: " + json.dumps(entry.get("payload"), indent=2, default=str))
    click.echo("context_excerpt: " + str(entry.get("context_excerpt", "")))


@dlq_group.command("replay")
@click.argument("message_id")
@click.option(
    "--patch",
    "patches",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change the task before it runs again: spec.<key>, args.<key> or timeout_ms "
    "(values are YAML scalars: 3, true, text).",
)
@click.option(
    "--wait/--no-wait",
    default=None,
    help="Wait for the execution to end (default: yes with --db, where it runs here).",
)
@json_option
@backend_options
def replay_cmd(
    message_id: str,
    patches: tuple[str, ...],
    wait: bool | None,
    as_json: bool,
    **where: Any,
) -> None:
    """Replay an entry with its original message id; its execution continues from there.
    Replaying twice replays once."""
    patch = _patch(patches)
    with ExitStack() as stack:
        backend = _backend(stack, **where)
        before = backend.last_seq(backend.show(message_id)["execution_id"])
        answer = backend.replay(message_id, patch)
        if wait is None:
            wait = isinstance(backend, LocalBackend)
        if not as_json:
            if answer["replayed"]:
                click.echo(f"replayed {message_id}: execution {answer['execution_id']} continues")
            else:
                click.echo(f"{message_id} was replayed already; nothing to do")
        if not wait:
            if as_json:
                _echo_json(answer)
            return
        # The orchestrator takes the replay up after this call: wait for the log to move.
        finished = backend.finish(answer["execution_id"], before)
    if as_json:
        _echo_json({**answer, "execution": finished})
    else:
        click.echo(f"execution {answer['execution_id']} {finished['status']}")
    sys.exit(0 if finished["status"] == "ok" else 1)


@dlq_group.command("discard")
@click.argument("message_id")
@click.option("--reason", required=True, help="Why the entry is given up.")
@json_option
@backend_options
def discard_cmd(message_id: str, reason: str, as_json: bool, **where: Any) -> None:
    """Give an entry up, with a reason."""
    if not reason.strip():
        raise click.BadParameter("a discard needs a reason", param_hint="--reason")
    with ExitStack() as stack:
        entry = _backend(stack, **where).discard(message_id, reason)
    if as_json:
        _echo_json(entry)
    else:
        click.echo(f"discarded {message_id}: {reason}")


def _patch(items: tuple[str, ...]) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="--patch")
        try:
            check_patch_key(key)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--patch") from None
        patch[key] = parse_value(raw)
    return patch


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))
