"""The dead-letter queue as operators see it: list, show, count, replay, discard.

Entries are written with the commit that gives up on a task (the adapters'
`_pg_dlq` / `_sqlite_dlq`, in the commit's transaction); this manager reads them and
moves them on."""

from __future__ import annotations

from typing import Any

from noetl.core import HistoryPrunedError, NotFoundError
from noetl.store._rows import DLQ_COLUMNS, check_page, dead_letter_from_row
from noetl.store.connector import Connector, Row
from noetl.store.records import DeadLetter, DeadLetterStatus

# Free text that may quote what a task returned or raised (a NUL included), and the JSON
# columns (read as text): the connector undoes how its database had to store them.
_TEXT_COLUMNS = frozenset(
    {"reason", "error_type", "last_error", "last_stack", "context_excerpt", "discard_reason"}
)
_JSON_COLUMNS = frozenset({"loop_key", "payload", "task"})
_TEXT = tuple(index for index, column in enumerate(DLQ_COLUMNS) if column in _TEXT_COLUMNS)
_JSON = tuple(index for index, column in enumerate(DLQ_COLUMNS) if column in _JSON_COLUMNS)


class DeadLetters:
    """`DeadLetterPort` over a connector."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def _entry(self, row: Row) -> DeadLetter:
        values = list(row)
        for index in _TEXT:
            if isinstance(values[index], str):
                values[index] = self._db.text_out(values[index])
        for index in _JSON:
            if isinstance(values[index], str):
                values[index] = self._db.json_text_out(values[index])
        return dead_letter_from_row(values)

    def list_dead_letters(
        self,
        *,
        status: DeadLetterStatus | None = None,
        execution_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[DeadLetter]:
        """Entries, most recently failed first (by last_seen, then message id)."""
        check_page(limit, offset)
        params = {
            "status": None if status is None else DeadLetterStatus(status).value,
            "execution_id": execution_id,
            "limit": limit,
            "offset": offset,
        }
        return [self._entry(row) for row in self._db.fetch_all("list_dead_letters", params)]

    def get_dead_letter(self, message_id: str) -> DeadLetter | None:
        row = self._db.fetch_one("get_dead_letter", {"message_id": message_id})
        return None if row is None else self._entry(row)

    def dead_letter_counts(self) -> dict[str, int]:
        """How many entries there are of each status (every status listed, 0 included)."""
        found = {status.value: 0 for status in DeadLetterStatus}
        for status, count in self._db.fetch_all("dead_letter_counts"):
            found[status] = int(count)
        return found

    def pending_dead_letters(self, execution_id: str) -> dict[str, int]:
        rows = self._db.fetch_all("pending_dead_letters", {"execution_id": execution_id})
        return {step: int(count) for step, count in rows}

    def post_replay(self, message_id: str, payload: dict[str, Any]) -> bool:
        """Mark a pending entry replayed and post its REPLAY input, in one transaction;
        False when it is not pending, NotFoundError when there is no such entry,
        HistoryPrunedError when its execution's history was pruned."""
        params = {"message_id": message_id, "payload": self._db.json_in(payload)}
        with self._db.transaction() as tx:
            row = tx.fetch_one("dead_letter_status", params)
            if row is None:
                raise NotFoundError(f"no dead-letter entry {message_id}")
            if row[0] != DeadLetterStatus.PENDING:
                return False
            if row[2] is not None:
                raise HistoryPrunedError(row[1], tx.epoch(row[2]))
            tx.execute("mark_replayed", params)
            tx.execute("post_replay_input", {**params, "execution_id": row[1]})
            tx.notify("inputs")
        return True

    def discard_dead_letter(self, message_id: str, reason: str) -> bool:
        """Mark a pending entry discarded with `reason`; False when it is not pending,
        NotFoundError when there is no such entry."""
        params = {"message_id": message_id, "reason": self._db.text_in(reason)}
        with self._db.transaction() as tx:
            row = tx.fetch_one("dead_letter_status", params)
            if row is None:
                raise NotFoundError(f"no dead-letter entry {message_id}")
            if row[0] != DeadLetterStatus.PENDING:
                return False
            tx.execute("mark_discarded", params)
        return True
