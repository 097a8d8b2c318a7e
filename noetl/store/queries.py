"""Named queries: the SQL of each dialect, in `noetl/store/sql/`.

A query starts at a `-- name: NAME` line and runs to the next one; comments above the
name line belong to the query before it (they say why it is written so).

`<dialect>.sql` holds the queries of the managers (`noetl.store.managers`), the same names
in both dialects: a manager asks its connector for a query by name and gets its dialect's
text. Their parameters are named (`%(name)s` on PostgreSQL, `:name` on SQLite), so one
mapping of values serves both. `<dialect>_queue.sql` holds the statements only that
dialect's own code runs (the writes of a commit, the task queue and the inbox, whose
shapes differ: one `UPDATE ... RETURNING` on PostgreSQL, a read and a write in one locked
transaction on SQLite). Names are unique across a dialect's files, which are read once,
at import.
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


def read(name: str) -> dict[str, str]:
    """The queries of the file `sql/<name>.sql`."""
    return parse(resources.files("noetl.store").joinpath("sql", f"{name}.sql").read_text("utf-8"))


def _load(dialect: str) -> Mapping[str, str]:
    shared, own = read(dialect), read(f"{dialect}_queue")
    twice = sorted(set(shared) & set(own))
    if twice:
        raise ValueError(f"{dialect} queries defined twice: {', '.join(twice)}")
    return MappingProxyType({**shared, **own})


QUERIES: Mapping[str, Mapping[str, str]] = {dialect: _load(dialect) for dialect in DIALECTS}
