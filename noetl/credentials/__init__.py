"""Named credentials: the records a playbook names (`credential: pg_local`, upstream's
`auth: pg_local`), where they are found, and what the built-in tools make of them.

    records     the record format (upstream's `{type, data}`, or an untyped map), the
                mapping to a postgres connection, an http header, s3 keys; which values
                are masked (pure, no I/O)
    file        the credentials file: a YAML or JSON map of names to records
    keys        the Fernet keys that encrypt credentials kept in the database
    store       the `CredentialStore` port (`store.credentials`), saving, opening and
                rotating stored credentials, and the database as a secret provider

Where a worker looks (`noetl.credentials.scope.default_provider`): the environment, the
secrets file, the credentials file, then the database; the first that knows the name wins.
"""

from __future__ import annotations

from dataclasses import dataclass

from noetl.credentials.records import Credential, CredentialError, parse_credential
from noetl.credentials.store import CredentialStore, StoredCredential

__all__ = [
    "Credential",
    "CredentialConfig",
    "CredentialError",
    "CredentialStore",
    "StoredCredential",
    "parse_credential",
]


@dataclass(frozen=True, slots=True)
class CredentialConfig:
    """Where credentials come from besides the environment and the secrets file: the
    credentials file, and the keys of those kept in the database (the settings'
    `credentials` section, built once by the command)."""

    file: str | None = None
    keys: tuple[str, ...] = ()

    def __repr__(self) -> str:  # never the keys
        return f"CredentialConfig(file={self.file!r}, keys={len(self.keys)})"
