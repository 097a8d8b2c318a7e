"""Command-line flags that set a key of the configuration, and the one place the CLI builds
the settings (`with_settings`).

A `setting_option` is an ordinary click option whose value, when given on the command line,
overrides the key it names; its environment twin and default are the configuration's
(`NOETL_<SECTION>_<KEY>`, listed in its help), read by `noetl.config` and not by click, so
the precedence is one rule: defaults < file < environment < flags.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from noetl.config import Settings, env_name, load_settings
from noetl.config.loader import ALIASES

# The directory of the default database (noetl.config.DEFAULT_DB): made when missing.
DATA_DIR_NAME = ".noetl"

F = TypeVar("F", bound=Callable[..., Any])

config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="YAML configuration file [env: NOETL_CONFIG].",
)


@functools.cache
def _defaults() -> dict[str, Any]:
    return Settings().model_dump(mode="json", by_alias=True)


def _default(path: str) -> Any:
    value: Any = _defaults()
    for part in path.split("."):
        value = value[part]
    return value


class SettingOption(click.Option):
    """A click option that overrides the configuration key `setting` when given."""

    def __init__(self, param_decls: list[str], *, setting: str, **attrs: Any) -> None:
        default = _default(setting)
        shown = "none" if default is None else json.dumps(default).strip('"')
        envs = ", ".join((env_name(setting), *ALIASES.get(setting, ())))
        note = f"[{setting}; env: {envs}; default: {attrs.pop('default_text', shown)}]"
        attrs["help"] = f"{attrs.get('help', '')} {note}".strip()
        attrs["default"] = None
        super().__init__(param_decls, **attrs)
        self.setting = setting


def setting_option(setting: str, *param_decls: str, **attrs: Any) -> Callable[[F], F]:
    """An option for configuration key `setting` (see the module docstring)."""
    return click.option(*param_decls, cls=SettingOption, setting=setting, **attrs)


def with_settings(func: F) -> F:
    """Give the command `settings` (built from `--config`, the environment and its setting
    options) instead of those options' values; also adds `--config`."""

    @functools.wraps(func)
    def wrapper(*args: Any, config_file: Path | None = None, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        flags: dict[str, tuple[Any, str]] = {}
        for param in ctx.command.params:
            if isinstance(param, SettingOption) and param.name is not None:
                value = kwargs.pop(param.name, None)
                given = ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE
                if given and value is not None:
                    flags[param.setting] = (value, _flag(param, value))
        settings = load_settings(config_file, os.environ, flags)
        if "db.url" in {p.setting for p in ctx.command.params if isinstance(p, SettingOption)}:
            check_db_directory(settings.db.url)
        return func(*args, settings=settings, **kwargs)

    return config_option(wrapper)  # type: ignore[return-value]


def check_db_directory(url: str) -> None:
    """A SQLite database must go in a directory that exists: NoETL makes its own data
    directory (`.noetl`) and no other, so a mistyped `--db` path creates nothing. (A path
    under a file is left to the store, which says it cannot open it: exit 3.)"""
    from noetl.store import sqlite_file

    path = sqlite_file(url)
    if path is None:
        return
    parent = Path(path).parent
    if parent.name == DATA_DIR_NAME or parent.exists() or str(parent) in ("", "."):
        return  # what exists but is no directory is the store's to say (it cannot open)
    raise click.BadParameter(
        f"{path}: the directory {parent} does not exist (create it first; only NoETL's own "
        f"{DATA_DIR_NAME} directory is made for you)",
        param_hint="--db / NOETL_DB",
    )


def _flag(param: click.Option, value: Any) -> str:
    """The option as it was spelled (`--no-continue` for a false boolean pair)."""
    if param.is_flag and value is False and param.secondary_opts:
        return param.secondary_opts[0]
    return param.opts[0]


db_option = setting_option(
    "db.url",
    "--db",
    help="Database: a SQLite file path (or sqlite:///path, memory://, postgresql://...).",
)
