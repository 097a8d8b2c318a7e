"""Optional dependencies: the pip extras, what needs them, and the message that says how to
install one.

The base install runs playbooks on SQLite and PostgreSQL with the python, http, postgres,
file and playbook tools. Four features need more:

    extra    installs                                  needed by
    duckdb   duckdb                                    the duckdb tool and the duckdb sink
    s3       boto3                                     the s3 sink
    nats     nats-py                                   `sessions.backend: nats`
    otel     opentelemetry-api, -sdk, -exporter-otlp   `tracing.enabled` with an exporter
             -proto-http

`noetl[all]` installs them all. The modules that use them import them when first used, so
a missing extra costs nothing until then. Validation asks `installed` (the import system's
`find_spec`: a lookup of what could be imported, nothing is imported nor read) so a playbook
that needs a missing extra fails before it runs (E340); at run time `load` turns the
ImportError into a `MissingExtraError` with the same advice.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from types import ModuleType

from noetl.errors import MissingExtraError

__all__ = [
    "EXTRAS",
    "SINK_EXTRAS",
    "TOOL_EXTRAS",
    "install_hint",
    "installed",
    "load",
    "needs_extra",
]

# Each extra and the modules it provides (all of them must be importable).
EXTRAS: Mapping[str, tuple[str, ...]] = {
    "duckdb": ("duckdb",),
    "s3": ("boto3", "botocore"),
    "nats": ("nats",),
    "otel": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
}
# The tool kinds and sink kinds that need an extra.
TOOL_EXTRAS: Mapping[str, str] = {"duckdb": "duckdb"}
SINK_EXTRAS: Mapping[str, str] = {"duckdb": "duckdb", "s3": "s3"}


def install_hint(extra: str) -> str:
    """The command that installs an extra."""
    return f"pip install 'noetl[{extra}]'"


def needs_extra(what: str, extra: str) -> str:
    """`<what>, which needs an extra: pip install 'noetl[<extra>]'`."""
    return f"{what}, which needs an extra: {install_hint(extra)}"


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package; a module set to None
        return False


def installed(extra: str, modules: tuple[str, ...] | None = None) -> bool:
    """Whether every module of `extra` (or the given ones of it) can be imported; none is
    imported here."""
    return all(_findable(module) for module in modules or EXTRAS[extra])


def load(module: str, extra: str, what: str) -> ModuleType:
    """`import module`; MissingExtraError (`needs_extra(what, extra)`) when it, or a
    package it comes with, is not installed. An ImportError from inside an installed
    package (a broken install) is raised as it is."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or ""
        roots = {name.split(".")[0] for name in EXTRAS[extra]}
        if missing.split(".")[0] in roots:
            raise MissingExtraError(needs_extra(what, extra)) from None
        raise
