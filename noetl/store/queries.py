"""Named queries: the SQL of each dialect in one file, `noetl/store/sql/<dialect>.sql`.

A query starts at a `-- name: NAME` line and runs to the next one; comments above the
name line belong to the query before it (they say why it is written so). Both files hold
the same names: a manager (`noetl.store.managers`) asks its connector for a query by name
and gets its dialect's text. Parameters are named (`%(name)s` on PostgreSQL, `:name` on
SQLite), so one mapping of values serves both. The files are read once, at import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

DIALECTS = ("postgres", "sqlite")
_NAME = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """The queries of one file, by name; ValueError for a name given twice."""
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        lines = body.strip().splitlines()
        # Comment lines at the end of a body introduce the next query.
        while lines and lines[-1].lstrip().startswith("--"):
            lines.pop()
        queries[name] = "\n".join(lines).strip()
    return queries


def _load(dialect: str) -> Mapping[str, str]:
    text = resources.files("noetl.store").joinpath("sql", f"{dialect}.sql").read_text("utf-8")
    return MappingProxyType(parse(text))


QUERIES: Mapping[str, Mapping[str, str]] = {dialect: _load(dialect) for dialect in DIALECTS}
