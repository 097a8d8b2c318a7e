"""`noetl dlq`: list, show, replay and discard dead-letter entries.

On a server (`--server` / NOETL_SERVER_URL, the default) through its API; or directly on a
database with `--db` / NOETL_DB (the SQLite file `noetl run` writes, or PostgreSQL).

A replay on a database never makes this process a worker of the whole database: it
reopens the one execution (decides the replay it posted, and nothing of any other
execution) and either returns, the workers continuing it, or with `--run-here` runs that
execution's tasks (and its child executions') here until it ends. `--run-here` is the
default on a SQLite file, where no worker may be running; on PostgreSQL the default is
to reopen and return. See docs/operations.md, "Commands on a shared database".
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import click

from noetl.cli.client import Client, Server, token_option
from noetl.cli.inputs import parse_value
from noetl.cli.settings import check_db_directory
from noetl.config import DEFAULT_DB
from noetl.decision.dlq import check_patch_key
from noetl.errors import ConflictError

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
    """Straight on a database. A replay reopens its execution here (deciding only that
    execution's inputs); `run_here` carries it on in this process, scoped to it."""

    def __init__(self, db: str, stack: ExitStack, *, secrets_file: str | None) -> None:
        from noetl.config import load_settings
        from noetl.runtime.orchestrator import Orchestrator
        from noetl.store import open_store, sqlite_file

        # The engine decides here as the servers and `noetl run` do: with the configured
        # defaults (built once, here at the edge).
        self.settings = load_settings(None, os.environ)
        self.store = open_store(db)
        stack.callback(self.store.close)
        self.orchestrator = Orchestrator(
            self.store, owner=f"cli:{os.getpid()}", options=self.settings.engine_options()
        )
        self.secrets_file = secrets_file or self.settings.secrets.file
        # A SQLite file is usually the one `noetl run` wrote, with no worker over it.
        self.shared = sqlite_file(db) is None

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

    def reopen(
        self, execution_id: str, message_id: str, after_seq: int, *, timeout_s: float = 10.0
    ) -> str | None:
        """Decide the posted replay (and whatever else waits for this execution alone),
        unless a server does first: "" once the task is queued again, the reason when the
        engine refused it, None when it was not decided within `timeout_s` (a server holds
        the input: it will)."""
        import time

        from noetl.runtime.orchestrator import Orchestrator

        only = frozenset({execution_id})
        deciding = Orchestrator(
            self.store,
            owner=f"cli:{os.getpid()}",
            options=self.settings.engine_options(),
            scope=lambda: only,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            deciding.run_once()
            verdict = _replay_verdict(self.store, execution_id, message_id, after_seq)
            if verdict is not None or time.monotonic() > deadline:
                return verdict
            self.store.wait_for("inputs", 0.05)

    def finish(self, execution_id: str, after_seq: int) -> dict[str, Any]:
        """Wait for the workers to end the execution."""
        from noetl.runtime.local import wait_finished

        record = wait_finished(self.store, execution_id, after_seq=after_seq, poll_s=0.2)
        return self._result(execution_id, record.status.value)

    def run_here(self, execution_id: str, after_seq: int) -> dict[str, Any]:
        """Run the execution's tasks (and its children's) here until it ends. SIGTERM
        stops it as Ctrl-C does: what runs finishes, the rest goes back to the queue."""
        import signal

        def _interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return self._run_here(execution_id, after_seq)
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _run_here(self, execution_id: str, after_seq: int) -> dict[str, Any]:
        from noetl.runtime.local import local_cluster, wait_finished

        with local_cluster(
            self.store,
            execution_id,
            secrets_file=self.secrets_file,
            credentials=self.settings.credentials.config(),
            options=self.settings.engine_options(),
            # Run here as `noetl run` ran it: paths from the working directory.
            roots=self.settings.roots(Path.cwd()),
        ):
            try:
                record = wait_finished(self.store, execution_id, after_seq=after_seq)
            except KeyboardInterrupt:
                click.echo(
                    "interrupted: finishing the tasks running here, giving the others back "
                    "to the queue (Ctrl-C again: give the running ones back too)",
                    err=True,
                )
                raise
        return self._result(execution_id, record.status.value)

    def _result(self, execution_id: str, status: str) -> dict[str, Any]:
        return {
            "execution_id": execution_id,
            "status": status,
            "steps": self.store.get_steps(execution_id),
        }


def _replay_verdict(store: Any, execution_id: str, message_id: str, after_seq: int) -> str | None:
    """What the log says of the replay of `message_id` after `after_seq`: "" replayed,
    the reason when refused, None when it was not decided yet."""
    from noetl.core import EventType

    for event in store.load_events(execution_id, after_seq=after_seq):
        if event.type == EventType.TASK_REPLAYED and event.payload.get("task_id") == message_id:
            return ""
        if (
            event.type == EventType.OPERATOR_REFUSED
            and event.payload.get("message_id") == message_id
        ):
            return str(event.payload.get("reason") or "refused")
    return None


def backend_options(func: Any) -> Any:
    """`--server`, `--token`, `--db` and `--secrets-file`, on every command."""
    func = token_option(func)
    func = click.option(
        "--secrets-file",
        type=click.Path(dir_okay=False),
        envvar="NOETL_SECRETS_FILE",
        help="With --db: secrets for the tasks a replay runs here (--run-here).",
    )(func)
    func = click.option(
        "--db",
        default=None,
        envvar="NOETL_DB",
        show_envvar=True,
        help="The database to work on when no server is named (SQLite file or "
        "postgresql://; default: the file `noetl run` writes).",
    )(func)
    return click.option(
        "--server",
        default=None,
        envvar="NOETL_SERVER_URL",
        show_envvar=True,
        help="Base URL of a NoETL server (without one: the database of --db).",
    )(func)


def _backend(
    stack: ExitStack,
    server: str | None,
    db: str | None,
    secrets_file: str | None,
    token: str | None,
) -> Backend:
    """A server when one is named, else the database (docs/operations.md, "Inspecting
    executions: a server, or the database")."""
    if server:
        return ApiBackend(stack.enter_context(Client(Server(server, token or None))))
    check_db_directory(db or DEFAULT_DB)
    return LocalBackend(db or DEFAULT_DB, stack, secrets_file=secrets_file)


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
    "--run-here/--no-run-here",
    "run_here",
    default=None,
    help="With --db: run the reopened execution's tasks (and its child executions') in "
    "this process until it ends; never a task of another execution. Without it, the "
    "execution is reopened and the command returns: the workers continue it. Default: "
    "yes on a SQLite file (where no worker may run), no on PostgreSQL.",
)
@click.option(
    "--wait/--no-wait",
    default=None,
    help="Wait for the execution to end (default: only with --run-here, which runs it "
    "here; --no-wait on a SQLite file means --no-run-here).",
)
@json_option
@backend_options
def replay_cmd(
    message_id: str,
    patches: tuple[str, ...],
    run_here: bool | None,
    wait: bool | None,
    as_json: bool,
    **where: Any,
) -> None:
    """Replay an entry with its original message id; its execution continues from there.
    Replaying twice replays once.

    On a database (--db), this command reopens only that execution; it runs tasks only
    with --run-here (the default on a SQLite file), and then only that execution's."""
    patch = _patch(patches)
    if run_here and not where.get("db"):
        raise click.BadParameter("--run-here needs --db (a server's workers run it)")
    if run_here and wait is False:
        raise click.BadParameter("--run-here runs the execution to its end: drop --no-wait")
    with ExitStack() as stack:
        backend = _backend(stack, **where)
        execution_id = backend.show(message_id)["execution_id"]
        before = backend.last_seq(execution_id)
        answer = backend.replay(message_id, patch)
        if not answer["replayed"]:
            if as_json:
                _echo_json(answer)
            else:
                click.echo(f"{message_id} was replayed already; nothing to do")
            return
        if isinstance(backend, LocalBackend):
            if run_here is None:
                run_here = not backend.shared and wait is not False
            if run_here:
                _say(as_json, f"replayed {message_id}: execution {execution_id} continues here")
                finished = backend.run_here(execution_id, before)
                _finished(answer, finished, as_json)
            refusal = backend.reopen(execution_id, message_id, before)
            if refusal:
                raise ConflictError(f"cannot replay {message_id}: {refusal}")
            how = "reopened" if refusal == "" else "posted; a server will reopen it"
            _say(
                as_json,
                f"replayed {message_id}: execution {execution_id} continues on the workers ({how})",
            )
        else:
            _say(as_json, f"replayed {message_id}: execution {execution_id} continues")
        if not wait:
            if as_json:
                _echo_json(answer)
            return
        # The workers take the replay up after this call: wait for the log to move.
        finished = backend.finish(execution_id, before)
    _finished(answer, finished, as_json)


def _say(as_json: bool, text: str) -> None:
    if not as_json:
        click.echo(text)


def _finished(answer: dict[str, Any], finished: dict[str, Any], as_json: bool) -> None:
    """Print how the execution ended and exit 0 when ok, 1 otherwise."""
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
