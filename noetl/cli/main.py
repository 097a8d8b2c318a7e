"""Entry point of the `noetl` command; maps errors to exit codes in one place.

Exit codes: 0 success, 1 the thing checked or run failed (invalid playbook, failed
execution), 2 bad usage, 3 an internal or environment error (database unreachable, ...).
"""

from __future__ import annotations

import sys

import click

from noetl import __version__
from noetl.cli.auth_cmds import auth_group
from noetl.cli.config_cmds import config_group
from noetl.cli.credential_cmds import credential_group
from noetl.cli.db_cmds import db_group
from noetl.cli.dlq_cmds import dlq_group
from noetl.cli.dsl_cmds import codemod_cmd, lint_cmd, schema_cmd, validate_cmd
from noetl.cli.exec_cmds import exec_group
from noetl.cli.logs_cmd import logs_cmd
from noetl.cli.playbook_cmds import playbook_group
from noetl.cli.run_cmd import run_cmd
from noetl.cli.serve import server_start
from noetl.cli.server_cmds import server_group
from noetl.cli.ui_cmd import ui_cmd
from noetl.cli.worker_cmds import worker_group
from noetl.core import NotFoundError
from noetl.errors import ConfigError, ConflictError, NoetlError, PlaybookError

EXIT_FAILED = 1
EXIT_ERROR = 3


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="noetl")
def cli() -> None:
    """NoETL: run YAML playbooks on a laptop, scale them out on PostgreSQL."""


cli.add_command(validate_cmd)
cli.add_command(lint_cmd)
cli.add_command(schema_cmd)
cli.add_command(codemod_cmd)
cli.add_command(run_cmd)
cli.add_command(db_group)
cli.add_command(exec_group)
exec_group.add_command(logs_cmd)
cli.add_command(dlq_group)
cli.add_command(playbook_group)
cli.add_command(server_group)
server_group.add_command(server_start)
cli.add_command(worker_group)
cli.add_command(config_group)
cli.add_command(ui_cmd)
cli.add_command(auth_group)
cli.add_command(credential_group)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; known errors become a one-line message and an exit code."""
    try:
        cli.main(args=argv, prog_name="noetl", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except PlaybookError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_FAILED)
    except (ConflictError, NotFoundError) as exc:  # as the API's 409 and 404 answers
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    except ConfigError as exc:  # a bad setting: each problem on a line of its own
        lines = str(exc).splitlines() or ["invalid configuration"]
        if len(lines) == 1:
            click.echo(f"error: {lines[0]}", err=True)
        else:
            click.echo("error: invalid configuration:", err=True)
            for line in lines:
                click.echo(f"  {line}", err=True)
        sys.exit(EXIT_ERROR)
    except NoetlError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
