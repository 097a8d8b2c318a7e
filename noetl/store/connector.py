"""The connector port: what a manager (`noetl.store.managers`) needs from a database.

A manager holds the domain logic of one part of the store once; a connector runs its
named queries (`noetl.store.queries`) on one database and hides where the databases
differ: placeholders and query texts (the dialect's `.sql` file), the clock (SQLite:
the store's clock, injectable, given to every query as `now`; PostgreSQL: the database's
`now()`), how times and text are stored (timestamptz and NUL escaping on PostgreSQL, epoch
seconds and plain text on SQLite) and notifications (PostgreSQL's NOTIFY; none on SQLite,
whose waiters poll).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

Params = Mapping[str, Any]
Row = tuple[Any, ...]


class DuplicateKeyError(Exception):
    """A statement would have written a second row with the same primary or unique key
    (raised by the connector in place of its driver's error; the transaction is rolled
    back)."""


class Connector(Protocol):
    """Named queries on one database, outside a transaction (each call on its own) or in
    one (`transaction`)."""

    dialect: str

    def execute(self, query: str, params: Params | None = None) -> int:
        """Run the query `query` names; the rows it changed."""

    def fetch_one(self, query: str, params: Params | None = None) -> Row | None:
        """The first row of the query `query` names, or None."""

    def fetch_all(self, query: str, params: Params | None = None) -> list[Row]:
        """Every row of the query `query` names."""

    def session(self) -> AbstractContextManager[Connector]:
        """A connector whose calls share one connection, each on its own (reads that
        belong together, without a transaction's locks)."""

    def transaction(self) -> AbstractContextManager[Connector]:
        """A connector whose calls run in ONE transaction, committed when the block ends
        and rolled back when it raises. SQLite holds the write lock from its start."""

    def notify(self, channel: str) -> None:
        """Wake those waiting on `channel` ("tasks" or "inputs") after what was written
        commits; a no-op where the database has no notifications."""

    def exclusive(self, key: int) -> AbstractContextManager[bool]:
        """Whether this process may run a database-wide job named by `key` for the block,
        one process at a time: PostgreSQL, True if it took the session advisory lock `key`
        (held, on a connection of its own, until the block ends), False if another session
        holds it; SQLite always True (each write transaction holds the file's write lock,
        which serializes the writers already). Nothing waits for the lock."""

    def ts(self, seconds: float) -> Any:
        """Epoch seconds as the database stores a time."""

    def epoch(self, value: Any) -> float:
        """A time read from the database as epoch seconds."""

    def json_in(self, value: Any) -> str:
        """A value as JSON text the database can store."""

    def text_in(self, text: str) -> str:
        """Free text as the database can store it."""

    def text_out(self, text: str) -> str:
        """Free text read back as it was written."""

    def json_value(self, value: Any) -> Any:
        """A JSON column as read (PostgreSQL: decoded already; SQLite: its text) decoded."""

    def json_text_out(self, text: str) -> str:
        """JSON text read back (a JSON column selected as text) as it was written."""
