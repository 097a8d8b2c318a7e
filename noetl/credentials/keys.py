"""The keys that encrypt credentials kept in the database: Fernet (AES-128-CBC with an
HMAC-SHA256, from the `cryptography` package), one key or several.

`credentials.key` (NOETL_CREDENTIALS_KEY) holds one key, or several separated by commas:
the FIRST encrypts, every one decrypts (`MultiFernet`). That is how a key is rotated: put
the new key first and keep the old one after it, run `noetl credential rotate` (every
stored credential is encrypted again with the first key), then drop the old key.

A key is 32 random bytes, url-safe base64 (44 characters), as `noetl credential keygen`
prints it. Each stored credential records the id of the key that encrypted it (`key_id`:
the first 12 hex digits of the key's SHA-256, which tells nothing about the key), so a
credential that no configured key can open is reported as such, naming that id.

`cryptography` is imported on first use, so commands that never touch a stored credential
do not pay for it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from noetl.errors import ConfigError

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

__all__ = [
    "KEY_SETTING",
    "CredentialKeyError",
    "Keyring",
    "check_key",
    "key_id",
    "new_key",
]

KEY_SETTING = "NOETL_CREDENTIALS_KEY (credentials.key)"
_KEY_BYTES = 32


class CredentialKeyError(ConfigError):
    """No key is configured, a key is malformed, or no configured key opens a stored
    credential. The message never holds a key or a value."""


def check_key(key: str) -> bytes:
    """The raw bytes of a Fernet key; ValueError (without the key) when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(key.strip().encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError("is not url-safe base64") from None
    if len(raw) != _KEY_BYTES:
        raise ValueError(f"must decode to {_KEY_BYTES} bytes (got {len(raw)})")
    return raw


def key_id(key: str) -> str:
    """A short id of a key: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(key.strip().encode("ascii")).hexdigest()[:12]


def new_key() -> str:
    """A new random key, url-safe base64."""
    from cryptography.fernet import Fernet  # noqa: PLC0415 - only when needed

    return Fernet.generate_key().decode("ascii")


class Keyring:
    """The configured keys: the first encrypts, all decrypt."""

    def __init__(self, keys: Sequence[str] = ()) -> None:
        cleaned = [key.strip() for key in keys if key.strip()]
        for position, key in enumerate(cleaned, start=1):
            try:
                check_key(key)
            except ValueError as exc:
                raise CredentialKeyError(
                    f"key {position} of {KEY_SETTING} is not a Fernet key: it {exc}; "
                    "make one with `noetl credential keygen`"
                ) from None
        self._keys = tuple(cleaned)
        self._fernet: MultiFernet | None = None

    def __repr__(self) -> str:
        return f"Keyring(ids={list(self.ids)})"

    def __bool__(self) -> bool:
        return bool(self._keys)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(key_id(key) for key in self._keys)

    @property
    def primary_id(self) -> str:
        """The id of the key that encrypts; CredentialKeyError when there is none."""
        self._require("encrypt credentials")
        return key_id(self._keys[0])

    def _require(self, action: str) -> None:
        if not self._keys:
            raise CredentialKeyError(
                f"no key to {action} with: set {KEY_SETTING} to a key from "
                "`noetl credential keygen` (the same key on every worker and CLI that "
                "reads credentials from the database)"
            )

    def _multi(self) -> MultiFernet:
        if self._fernet is None:
            from cryptography.fernet import Fernet, MultiFernet  # noqa: PLC0415

            self._fernet = MultiFernet([Fernet(key.encode("ascii")) for key in self._keys])
        return self._fernet

    def encrypt(self, plaintext: bytes) -> tuple[str, str]:
        """(the token, the id of the key that made it)."""
        self._require("encrypt credentials")
        return self._multi().encrypt(plaintext).decode("ascii"), self.primary_id

    def decrypt(self, token: str, *, what: str, made_with: str) -> bytes:
        """The plaintext of `token`; CredentialKeyError naming `what` (the credential) and
        the id of the key that encrypted it when no configured key opens it."""
        self._require(f"decrypt {what}")
        from cryptography.fernet import InvalidToken  # noqa: PLC0415

        try:
            return self._multi().decrypt(token.encode("ascii"))
        except (InvalidToken, UnicodeEncodeError):
            raise CredentialKeyError(self._wrong(what, made_with)) from None

    def rotate(self, token: str, *, what: str, made_with: str) -> str:
        """`token` encrypted again with the first key (its value unchanged)."""
        self._require("rotate credentials")
        from cryptography.fernet import InvalidToken  # noqa: PLC0415

        try:
            return self._multi().rotate(token.encode("ascii")).decode("ascii")
        except (InvalidToken, UnicodeEncodeError):
            raise CredentialKeyError(self._wrong(what, made_with)) from None

    def _wrong(self, what: str, made_with: str) -> str:
        known = ", ".join(self.ids)
        if made_with in self.ids:
            return (
                f"{what} cannot be decrypted: it is damaged (its key {made_with} is "
                f"configured, but the stored value does not verify); set it again"
            )
        return (
            f"{what} cannot be decrypted: it was encrypted with key {made_with}, which is "
            f"not among the keys of {KEY_SETTING} (ids: {known}); add that key (after the "
            "current one) or set the credential again"
        )
