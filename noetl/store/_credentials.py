"""Encrypted credentials (`store.credentials`) in memory and on SQLite. The rows hold
ciphertext only: encrypting and decrypting happen above the store (noetl.credentials)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from noetl.credentials.store import StoredCredential

Use = Callable[[], AbstractContextManager[sqlite3.Connection]]

CREDENTIAL_COLUMNS = "name, type, ciphertext, key_id, created_at, updated_at"


def credential_from_row(row: tuple[Any, ...]) -> StoredCredential:
    return StoredCredential(
        name=row[0],
        type=row[1],
        ciphertext=row[2],
        key_id=row[3],
        created_at=float(row[4]),
        updated_at=float(row[5]),
    )


class MemoryCredentials:
    """`CredentialStore` in a dict."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._rows: dict[str, StoredCredential] = {}

    def put(self, credential: StoredCredential) -> bool:
        with self._lock:
            old = self._rows.get(credential.name)
            if old is not None:
                credential = replace(credential, created_at=old.created_at)
            self._rows[credential.name] = credential
            return old is None

    def get(self, name: str) -> StoredCredential | None:
        with self._lock:
            return self._rows.get(name)

    def all(self) -> list[StoredCredential]:
        with self._lock:
            return [self._rows[name] for name in sorted(self._rows)]

    def delete(self, name: str) -> bool:
        with self._lock:
            return self._rows.pop(name, None) is not None

    def reencrypt(self, name: str, expected: str, ciphertext: str, key_id: str) -> bool:
        with self._lock:
            old = self._rows.get(name)
            if old is None or old.ciphertext != expected:
                return False
            self._rows[name] = replace(old, ciphertext=ciphertext, key_id=key_id)
            return True


class SqliteCredentials:
    """`CredentialStore` on the store's connection."""

    def __init__(self, use: Use, transaction: Use) -> None:
        self._use = use
        self._transaction = transaction

    def put(self, credential: StoredCredential) -> bool:
        with self._transaction() as conn:
            existed = conn.execute(
                "SELECT 1 FROM credential WHERE name = ?", (credential.name,)
            ).fetchone()
            conn.execute(
                f"INSERT INTO credential ({CREDENTIAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET type = excluded.type, "
                "ciphertext = excluded.ciphertext, key_id = excluded.key_id, "
                "updated_at = excluded.updated_at",
                (
                    credential.name,
                    credential.type,
                    credential.ciphertext,
                    credential.key_id,
                    credential.created_at,
                    credential.updated_at,
                ),
            )
        return existed is None

    def get(self, name: str) -> StoredCredential | None:
        with self._use() as conn:
            row = conn.execute(
                f"SELECT {CREDENTIAL_COLUMNS} FROM credential WHERE name = ?", (name,)
            ).fetchone()
        return None if row is None else credential_from_row(row)

    def all(self) -> list[StoredCredential]:
        with self._use() as conn:
            rows = conn.execute(
                f"SELECT {CREDENTIAL_COLUMNS} FROM credential ORDER BY name"
            ).fetchall()
        return [credential_from_row(row) for row in rows]

    def delete(self, name: str) -> bool:
        with self._transaction() as conn:
            cursor = conn.execute("DELETE FROM credential WHERE name = ?", (name,))
        return cursor.rowcount > 0

    def reencrypt(self, name: str, expected: str, ciphertext: str, key_id: str) -> bool:
        with self._transaction() as conn:
            cursor = conn.execute(
                "UPDATE credential SET ciphertext = ?, key_id = ? "
                "WHERE name = ? AND ciphertext = ?",
                (ciphertext, key_id, name, expected),
            )
        return cursor.rowcount > 0
