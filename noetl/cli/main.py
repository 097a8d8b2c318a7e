"""Entry point of the `noetl` command; maps errors to exit codes in one place.

Exit codes: 0 success, 1 the thing checked or run failed (invalid playbook, failed
execution), 2 bad usage, 3 an internal or environment error (database unreachable, ...).
"""

from __future__ import annotations

import sys

import click

from noetl import __version__
from noetl.cli.commands import LazyGroup
from noetl.core import NotFoundError
from noetl.errors import ConfigError, ConflictError, NoetlError, PlaybookError, TooComplexError

EXIT_FAILED = 1
EXIT_ERROR = 3


# Each command's module is imported when the command runs (noetl.cli.commands), so a
# command pays for its own imports only, and `noetl --help` for none of them.
@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="noetl")
def cli() -> None:
    """NoETL: run YAML playbooks on a laptop, scale them out on PostgreSQL."""


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
    except (ConflictError, NotFoundError, TooComplexError) as exc:  # the API's 409, 404, 422
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
