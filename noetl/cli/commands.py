"""The commands of `noetl`, each imported when it is invoked.

A command's module imports what the command needs (the DSL, a store, the server, an HTTP
client); importing them all would make every command, and `noetl --help`, as slow as the
sum. `LazyGroup` knows each command by name, where it is defined and the first paragraph
of its help (what `noetl --help` lists), and imports its module when the command is
looked up to run. A unit test checks the table against the commands' own help.
"""

from __future__ import annotations

import gc
import importlib
from dataclasses import dataclass
from typing import Any

import click
from click.utils import make_default_short_help

__all__ = ["COMMANDS", "Entry", "LazyGroup", "load"]


@dataclass(frozen=True, slots=True)
class Entry:
    """Where a command is defined (`module:attribute`), the first paragraph of its help,
    the subcommands of a group that other modules define (`module:attribute`), and what
    to start before its module is imported."""

    target: str
    help: str
    attach: tuple[str, ...] = ()
    # Called (`module:function`) before the command's module is imported, unless help is
    # asked for: work that may start while the imports run.
    prepare: str | None = None


COMMANDS: dict[str, Entry] = {
    "auth": Entry(
        "noetl.cli.auth_cmds:auth_group", "API authentication: tokens for the server's API."
    ),
    "codemod": Entry(
        "noetl.cli.dsl_cmds:codemod_cmd",
        "Rewrite legacy forms into canonical DSL v2, keeping comments.",
    ),
    "config": Entry(
        "noetl.cli.config_cmds:config_group",
        "The configuration: a YAML file (--config / NOETL_CONFIG) and NOETL_* variables.",
    ),
    "credential": Entry(
        "noetl.cli.credential_cmds:credential_group",
        "Named credentials in the database, encrypted (values never shown).",
    ),
    "db": Entry(
        "noetl.cli.db_cmds:db_group",
        "The database schema: create it, upgrade it, show its version.",
    ),
    "dlq": Entry(
        "noetl.cli.dlq_cmds:dlq_group",
        "The dead-letter queue: tasks that failed for good, to replay or discard. On a server "
        "(--server), or on a database directly (--db).",
    ),
    "exec": Entry(
        "noetl.cli.exec_cmds:exec_group",
        "Executions on a NoETL server: start, status, cancel, events.",
        attach=("noetl.cli.logs_cmd:logs_cmd",),
    ),
    "lint": Entry(
        "noetl.cli.dsl_cmds:lint_cmd",
        "Like validate, and also show warnings (unreachable steps, legacy forms, ...).",
    ),
    "outbox": Entry(
        "noetl.cli.outbox_cmds:outbox_group",
        "The outbox relay: publish the rows of an outbox table (PostgreSQL) to NATS JetStream.",
    ),
    "playbook": Entry(
        "noetl.cli.playbook_cmds:playbook_group", "The playbook catalog of a NoETL server."
    ),
    "run": Entry(
        "noetl.cli.run_cmd:run_cmd",
        "Run a playbook to completion; exit 0 when it ends ok, 1 otherwise. With "
        "--metrics-port, its metrics are served at http://HOST:PORT/metrics while it runs.",
        # The python pool's fork server boots while the run imports and reads its playbook.
        prepare="noetl.worker.fork:prestart",
    ),
    "schedule": Entry(
        "noetl.cli.schedule_cmds:schedule_group",
        "Schedules that start registered playbooks by themselves: create, list, pause, "
        "resume, delete, run-now, token.",
    ),
    "schema": Entry(
        "noetl.cli.dsl_cmds:schema_cmd", "Print the JSON Schema of the playbook language."
    ),
    "server": Entry(
        "noetl.cli.server_cmds:server_group",
        "The NoETL server: REST API and orchestrator over a shared database.",
        attach=("noetl.cli.serve:server_start",),
    ),
    "ui": Entry(
        "noetl.cli.ui_cmd:ui_cmd",
        "Open the operator console over a database (default: the one `noetl run` writes).",
    ),
    "validate": Entry(
        "noetl.cli.dsl_cmds:validate_cmd",
        "Check playbooks; exit 0 when all are valid, 1 otherwise (every error is listed).",
    ),
    "worker": Entry(
        "noetl.cli.worker_cmds:worker_group",
        "Workers: lease tasks from the database and run them.",
    ),
}


def _attribute(target: str) -> click.Command:
    module, _, name = target.partition(":")
    command = getattr(importlib.import_module(module), name)
    if not isinstance(command, click.Command):  # pragma: no cover - a wrong table entry
        raise TypeError(f"{target} is not a click command")
    return command


def load(name: str) -> click.Command:
    """Import the command `name` (and the subcommands its group gets from elsewhere).

    The garbage collector pauses meanwhile: imports make objects by the hundred thousand
    and free almost none, so its passes over them (a tenth of the import time) find
    nothing. What the imports made is then frozen (`gc.freeze`): later passes skip it."""
    entry = COMMANDS[name]
    enabled = gc.isenabled()
    gc.disable()
    try:
        command = _attribute(entry.target)
        if isinstance(command, click.Group):
            for target in entry.attach:
                sub = _attribute(target)
                if sub.name not in command.commands:
                    command.add_command(sub)
    finally:
        if enabled:
            gc.freeze()
            gc.enable()
    return command


class LazyGroup(click.Group):
    """A group whose commands (`COMMANDS`) are imported when looked up; its help lists
    them from the table, importing none."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        entry = COMMANDS.get(args[0]) if args else None
        helping = any(arg in ctx.help_option_names for arg in args[1:])
        if entry is not None and entry.prepare and args[0] not in self.commands and not helping:
            module, _, name = entry.prepare.partition(":")
            getattr(importlib.import_module(module), name)()
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            # click suggests a close name among the commands it has loaded: offer all.
            unknown = getattr(exc, "command_name", None)
            if unknown is None:
                raise
            error: Any = type(exc)
            raise error(unknown, possibilities=self.list_commands(ctx), ctx=ctx) from None

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.add_command(load(cmd_name), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click's, with the help of a command not imported yet taken from the table."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows: list[tuple[str, str]] = []
        for name in names:
            command = self.commands.get(name)
            if command is None:
                rows.append((name, make_default_short_help(COMMANDS[name].help, limit)))
            elif not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)
