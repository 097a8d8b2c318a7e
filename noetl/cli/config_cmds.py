"""`noetl config show`: the configuration in effect, and where each value came from."""

from __future__ import annotations

import os
from pathlib import Path

import click

from noetl.cli.settings import config_option
from noetl.config import render, resolve


@click.group("config")
def config_group() -> None:
    """The configuration: a YAML file (--config / NOETL_CONFIG) and NOETL_* variables."""


@config_group.command("show")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {config, sources}.")
def config_show(*, config_file: Path | None, as_json: bool) -> None:
    """Print the effective configuration (secrets masked); exit 3 if it is invalid."""
    click.echo(render(resolve(config_file, os.environ), as_json=as_json), nl=False)
