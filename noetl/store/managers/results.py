"""The result store (`store.results`): whole results kept outside the event log.

A step that selects fields of its result keeps the selection in its context and the
whole result here, under a reference the `artifact` tool reads back (docs/dsl.md,
"Large results"). References are random and unguessable (`noetl://results/<128-bit
hex>`); a result is written once and never changed.
"""

from __future__ import annotations

import secrets
from typing import Any

from noetl.store._json import dumps, loads
from noetl.store.connector import Connector, Row
from noetl.store.records import StoredResult

REF_PREFIX = "noetl://results/"


def new_ref() -> str:
    """A fresh, unguessable reference."""
    return REF_PREFIX + secrets.token_hex(16)


def is_ref(value: Any) -> bool:
    """Whether `value` has the shape of a result reference."""
    return isinstance(value, str) and value.startswith(REF_PREFIX) and len(value) < 200


class Results:
    """`ResultStore` over a connector."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def put(self, execution_id: str, step: str | None, value: Any) -> StoredResult:
        """Keep `value` (JSON-able) under a new reference."""
        # ASCII JSON text (NUL written as the escape `\\u0000`): any `text` column holds it.
        body = dumps(value)
        ref = new_ref()
        size = len(body.encode("utf-8"))
        params = {"ref": ref, "execution_id": execution_id, "step": step, "bytes": size}
        self._db.execute("put_result", {**params, "body": body})
        return StoredResult(ref, execution_id, step, size, value)

    def get(self, ref: str) -> StoredResult | None:
        """The result kept under `ref`, or None."""
        if not is_ref(ref):
            return None
        row = self._db.fetch_one("get_result", {"ref": ref})
        return None if row is None else self._row(row)

    def count(self, execution_id: str) -> tuple[int, int]:
        """How many results an execution keeps here, and their bytes."""
        row = self._db.fetch_one("count_results", {"execution_id": execution_id})
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def _row(self, row: Row) -> StoredResult:
        ref, execution_id, step, size, body, created_at = row
        value = loads(body)
        return StoredResult(ref, execution_id, step, int(size), value, self._db.epoch(created_at))
