"""Encrypted named credentials (`store.credentials`). The rows hold ciphertext only:
encrypting and decrypting happen above the store (noetl.credentials)."""

from __future__ import annotations

from noetl.credentials.store import StoredCredential
from noetl.store._credentials import credential_from_row
from noetl.store.connector import Connector, Row


class Credentials:
    """`CredentialStore` over a connector."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def _row(self, row: Row) -> StoredCredential:
        epoch = self._db.epoch
        return credential_from_row((*row[:4], epoch(row[4]), epoch(row[5])))

    def put(self, credential: StoredCredential) -> bool:
        """Store `credential` (a new name, or new contents for one, its created_at
        kept); True when the name is new."""
        params = {
            "name": credential.name,
            "type": credential.type,
            "ciphertext": credential.ciphertext,
            "key_id": credential.key_id,
            "created_at": self._db.ts(credential.created_at),
            "updated_at": self._db.ts(credential.updated_at),
        }
        with self._db.transaction() as tx:
            tx.fetch_one("lock_credential", params)
            existed = tx.fetch_one("credential_exists", params)
            tx.execute("put_credential", params)
        return existed is None

    def get(self, name: str) -> StoredCredential | None:
        row = self._db.fetch_one("get_credential", {"name": name})
        return None if row is None else self._row(row)

    def all(self) -> list[StoredCredential]:
        return [self._row(row) for row in self._db.fetch_all("list_credentials")]

    def delete(self, name: str) -> bool:
        return self._db.execute("delete_credential", {"name": name}) > 0

    def reencrypt(self, name: str, expected: str, ciphertext: str, key_id: str) -> bool:
        params = {"name": name, "expected": expected, "ciphertext": ciphertext, "key_id": key_id}
        return self._db.execute("reencrypt_credential", params) > 0
