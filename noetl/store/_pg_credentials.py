"""Encrypted credentials (`PostgresStore.credentials`) on the store's connection pool.
Times are timestamptz in the database and epoch seconds outside it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

import psycopg

from noetl.credentials.store import StoredCredential
from noetl.store._credentials import CREDENTIAL_COLUMNS, credential_from_row

Conn = psycopg.Connection[tuple[Any, ...]]
Use = Callable[[], AbstractContextManager[Conn]]


def _ts(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _row(row: tuple[Any, ...]) -> StoredCredential:
    return credential_from_row(
        tuple(value.timestamp() if isinstance(value, datetime) else value for value in row)
    )


class PgCredentials:
    """`CredentialStore` on the store's pool."""

    def __init__(self, connection: Use, transaction: Use) -> None:
        self._connection = connection
        self._transaction = transaction

    def put(self, credential: StoredCredential) -> bool:
        with self._connection() as conn:
            # xmax = 0 only for a row this statement inserted (not one it updated).
            row = conn.execute(
                f"INSERT INTO credential ({CREDENTIAL_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (name) DO UPDATE SET type = excluded.type, "
                "ciphertext = excluded.ciphertext, key_id = excluded.key_id, "
                "updated_at = excluded.updated_at "
                "RETURNING (xmax = 0)",
                (
                    credential.name,
                    credential.type,
                    credential.ciphertext,
                    credential.key_id,
                    _ts(credential.created_at),
                    _ts(credential.updated_at),
                ),
            ).fetchone()
        return bool(row and row[0])

    def get(self, name: str) -> StoredCredential | None:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT {CREDENTIAL_COLUMNS} FROM credential WHERE name = %s", (name,)
            ).fetchone()
        return None if row is None else _row(row)

    def all(self) -> list[StoredCredential]:
        with self._connection() as conn:
            rows = conn.execute(
                f'SELECT {CREDENTIAL_COLUMNS} FROM credential ORDER BY name COLLATE "C"'
            ).fetchall()
        return [_row(row) for row in rows]

    def delete(self, name: str) -> bool:
        with self._connection() as conn:
            cursor = conn.execute("DELETE FROM credential WHERE name = %s", (name,))
        return cursor.rowcount > 0

    def reencrypt(self, name: str, expected: str, ciphertext: str, key_id: str) -> bool:
        with self._connection() as conn:
            cursor = conn.execute(
                "UPDATE credential SET ciphertext = %s, key_id = %s "
                "WHERE name = %s AND ciphertext = %s",
                (ciphertext, key_id, name, expected),
            )
        return cursor.rowcount > 0
