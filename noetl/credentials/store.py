"""Credentials kept in the database, encrypted: the `CredentialStore` port (`store.credentials`
on every Store) and what the CLI and the workers do with it.

The store holds ciphertext only: each row is a name, the record's type (shown by `noetl
credential list`), the Fernet token of the whole record (`{"type", "data"}` as JSON), the id
of the key that made it and two times. Encrypting and decrypting happen here, above the
store, with the `Keyring` of the process, so a store adapter never sees a value or a key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from noetl.credentials.keys import CredentialKeyError, Keyring
from noetl.credentials.records import Credential, CredentialError
from noetl.errors import ConfigError

__all__ = [
    "CredentialStore",
    "DatabaseCredentials",
    "Rotation",
    "StoredCredential",
    "check_name",
    "open_stored",
    "rotate_all",
    "save_credential",
]

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True, slots=True)
class StoredCredential:
    """A row of the `credential` table (times in epoch seconds). `ciphertext` is the
    Fernet token of the record; `key_id` the id of the key that made it."""

    name: str
    type: str
    ciphertext: str
    key_id: str
    created_at: float
    updated_at: float

    def __repr__(self) -> str:  # never the ciphertext, even encrypted
        return f"StoredCredential(name={self.name!r}, type={self.type!r}, key_id={self.key_id!r})"

    def summary(self) -> dict[str, Any]:
        """What `noetl credential list` shows: never the value."""
        return {
            "name": self.name,
            "type": self.type,
            "key_id": self.key_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


class CredentialStore(Protocol):
    """Where encrypted credentials are kept: the same database as everything else."""

    def put(self, credential: StoredCredential) -> bool:
        """Store it under its name, replacing the credential there (whose `created_at` is
        kept); True when the name was new."""

    def get(self, name: str) -> StoredCredential | None:
        """The credential of this name, or None."""

    def all(self) -> list[StoredCredential]:
        """Every credential, by name."""

    def delete(self, name: str) -> bool:
        """Remove it; False when there was none."""

    def reencrypt(self, name: str, expected: str, ciphertext: str, key_id: str) -> bool:
        """Replace the ciphertext and key id of `name` if its ciphertext is still
        `expected` (a `put` in between wins); whether it was replaced. Times unchanged."""


def check_name(name: str) -> str:
    """A credential name fit for the database: letters, digits, `_`, `.`, `-` (1-128)."""
    if not _NAME.match(name):
        raise ConfigError(
            f"credential name {name!r} is not valid: use letters, digits, '_', '.' and '-' "
            "(up to 128 characters, not starting with '.' or '-')"
        )
    return name


def _plaintext(credential: Credential) -> bytes:
    if credential.type is None:
        raise ConfigError(f"credential {credential.name!r} needs a type")
    try:
        text = json.dumps({"type": credential.type, "data": credential.data}, sort_keys=True)
    except (TypeError, ValueError):
        raise ConfigError(
            f"credential {credential.name!r} holds a value that is not JSON data "
            "(a date or a binary value?); quote it as text"
        ) from None
    return text.encode("utf-8")


def save_credential(
    store: CredentialStore, keyring: Keyring, credential: Credential, now: float
) -> tuple[StoredCredential, bool]:
    """Encrypt and store a typed credential: (the row, whether the name was new)."""
    ciphertext, made_with = keyring.encrypt(_plaintext(credential))
    row = StoredCredential(
        name=check_name(credential.name),
        type=str(credential.type),
        ciphertext=ciphertext,
        key_id=made_with,
        created_at=now,
        updated_at=now,
    )
    created = store.put(row)
    if not created:  # the row as stored: a replaced credential keeps its creation time
        row = store.get(row.name) or row
    return row, created


def open_stored(stored: StoredCredential, keyring: Keyring) -> dict[str, Any]:
    """The record (`{"type", "data"}`) of a stored credential; CredentialKeyError when no
    configured key opens it."""
    what = f"credential {stored.name!r} (in the database)"
    plain = keyring.decrypt(stored.ciphertext, what=what, made_with=stored.key_id)
    record = json.loads(plain)
    if not isinstance(record, dict):
        raise CredentialKeyError(f"{what} is not a record; set it again")
    return record


@dataclass(frozen=True, slots=True)
class Rotation:
    """What `rotate_all` did: names encrypted again, already under the first key, and
    set by someone else meanwhile (left as they were: the new value is already current)."""

    rotated: tuple[str, ...]
    current: tuple[str, ...]
    changed: tuple[str, ...]


def rotate_all(store: CredentialStore, keyring: Keyring) -> Rotation:
    """Encrypt every stored credential again with the first key. Stops at the first one
    no configured key opens (CredentialKeyError), with those before it done."""
    primary = keyring.primary_id
    rotated: list[str] = []
    current: list[str] = []
    changed: list[str] = []
    for row in store.all():
        if row.key_id == primary:
            current.append(row.name)
            continue
        what = f"credential {row.name!r} (in the database)"
        token = keyring.rotate(row.ciphertext, what=what, made_with=row.key_id)
        if store.reencrypt(row.name, row.ciphertext, token, primary):
            rotated.append(row.name)
        else:
            changed.append(row.name)
    return Rotation(tuple(rotated), tuple(current), tuple(changed))


class DatabaseCredentials:
    """A secret provider over `store.credentials`: read at each call (a credential set or
    rotated is used by the next task), decrypted with `keyring`. Knows no plain secrets."""

    def __init__(self, store: CredentialStore, keyring: Keyring) -> None:
        self.store = store
        self.keyring = keyring

    def secret(self, name: str) -> str | None:
        return None

    def credential(self, name: str) -> Mapping[str, Any] | None:
        stored = self.store.get(name)
        if stored is None:
            return None
        try:
            return open_stored(stored, self.keyring)
        except CredentialKeyError as exc:  # a task's failure, not the worker's
            raise CredentialError(f"{exc} (on this worker)") from None
