"""Credential records and what the built-in tools make of them. Pure: no I/O.

A credential is a map found under a name (in the environment, a file or the database).
Two forms are read:

* **A typed record**, upstream NoETL's format: `{type: postgres, data: {db_host, db_port,
  db_user, db_password, db_name}}`. The fields may also stand beside `type` instead of
  under `data`; `name`, `description` and `tags` beside it are descriptive only.
* **An untyped map**, NoETL's older form: `{dsn: "postgresql://..."}`, libpq keywords
  (`host`, `dbname`, `user`, `password`, ...) or `{aws_access_key_id, ...}`.

What a tool takes:

    postgres tool and sink   type postgres (or an untyped map): a DSN, or connection fields
                             (db_host/host, db_port/port, db_user/user, db_password/password,
                             db_name/dbname/database, sslmode and the other ssl* keywords)
    http tool                bearer {token}, basic {username, password},
                             api_key {api_key or value, header_name: X-API-Key},
                             header {header_name, value}: a request header
    s3 sink                  type s3 or aws (or an untyped map): aws_access_key_id,
                             aws_secret_access_key, aws_session_token

Any other type (snowflake, a cloud service account, an OAuth flow, ...) fails the task with
a `CredentialError` naming the credential, its type and what the tool takes. No message
here ever holds a field's value.

`secret_values` says which values must be masked in what a task reports: for a known type,
the values under names that look secret (password, token, key, secret, auth, ...) and a
header's `value`, plus what is derived from them (a DSN, an `Authorization` header); for an
unknown type and for an untyped map, every string value.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from noetl.errors import FatalError
from noetl.redaction import sensitive

__all__ = [
    "HTTP_TYPES",
    "KNOWN_TYPES",
    "Credential",
    "CredentialError",
    "HttpAuth",
    "check_usable",
    "http_auth",
    "parse_credential",
    "postgres_conninfo",
    "s3_keys",
    "secret_values",
]

POSTGRES = "postgres"
HTTP_TYPES = ("bearer", "basic", "api_key", "header")
S3_TYPES = ("s3", "aws")
KNOWN_TYPES = frozenset({POSTGRES, *HTTP_TYPES, *S3_TYPES})
# Other spellings of a type, as upstream records write them.
_TYPE_ALIASES = {"postgresql": POSTGRES, "apikey": "api_key", "api-key": "api_key"}
# Keys of a typed record that describe it; every other key beside `type` is a field.
_DESCRIPTIVE = frozenset({"type", "name", "description", "tags", "data"})
# Fields whose value is the secret even though the name does not say so.
_SECRET_FIELDS = frozenset({"value", "dsn", "connection_string", "conninfo"})


class CredentialError(FatalError):
    """A credential that cannot be used as found: a malformed record, a type the tool does
    not take, a missing field, or one that cannot be decrypted. Never retried; the message
    names the credential and the field, never a value."""


@dataclass(frozen=True, slots=True)
class Credential:
    """A credential as found: its name, its type (None for an untyped map) and its fields
    (the record's `data`, or the untyped map itself)."""

    name: str
    type: str | None
    data: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return f"credential {self.name!r}" + (f" (type {self.type!r})" if self.type else "")


def parse_credential(name: str, raw: Mapping[str, Any]) -> Credential:
    """The credential a map holds (see the module docstring); CredentialError when its
    `type` or `data` has the wrong shape."""
    if "type" not in raw:
        return Credential(name, None, dict(raw))
    kind = raw["type"]
    if not isinstance(kind, str) or not kind.strip():
        raise CredentialError(f"credential {name!r}: `type` must be a non-empty string")
    kind = kind.strip().lower()
    kind = _TYPE_ALIASES.get(kind, kind)
    data = raw.get("data")
    if data is None:
        data = {k: v for k, v in raw.items() if k not in _DESCRIPTIVE}
    elif not isinstance(data, Mapping):
        raise CredentialError(f"credential {name!r}: `data` must be a map of its fields")
    return Credential(name, kind, dict(data))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def secret_values(credential: Credential) -> list[str]:
    """The values to mask in what a task that used this credential reports."""
    if credential.type is None or credential.type not in KNOWN_TYPES:
        return list(_strings(credential.data))
    found: list[str] = []
    for key, value in credential.data.items():
        if key in _SECRET_FIELDS or sensitive(key):
            found.extend(_strings(value))
    return found


def _unsupported(credential: Credential, tool: str, takes: str) -> CredentialError:
    return CredentialError(
        f"{credential.describe()} cannot be used by the {tool}: it takes {takes} credentials"
    )


def _text(credential: Credential, *names: str, required: bool = True) -> str | None:
    """The first of the fields `names` that is set, as a non-empty string."""
    for name in names:
        value = credential.data.get(name)
        if value is None or value == "":
            continue
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise CredentialError(f"{credential.describe()}: field {name!r} must be a string")
        return str(value)
    if required:
        wanted = " or ".join(repr(n) for n in names)
        raise CredentialError(f"{credential.describe()} has no {wanted} field")
    return None


# --- postgres -----------------------------------------------------------------------------

# Record fields (upstream's names first) -> libpq keywords.
_PG_FIELDS = {
    "db_host": "host",
    "host": "host",
    "hostname": "host",
    "server": "host",
    "hostaddr": "hostaddr",
    "db_port": "port",
    "port": "port",
    "db_name": "dbname",
    "dbname": "dbname",
    "database": "dbname",
    "db": "dbname",
    "db_user": "user",
    "user": "user",
    "username": "user",
    "db_password": "password",
    "password": "password",
    "sslmode": "sslmode",
    "ssl": "sslmode",
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "sslpassword": "sslpassword",
    "connect_timeout": "connect_timeout",
    "application_name": "application_name",
    "options": "options",
    "target_session_attrs": "target_session_attrs",
}
_PG_EXPECTED = "db_host, db_port, db_user, db_password and db_name (or dsn)"


def postgres_conninfo(credential: Credential) -> str:
    """A libpq connection string for the postgres tool and sink: the record's `dsn` as it
    is, else its connection fields as `key='value'` pairs. Fields of other names are left
    out (upstream records carry descriptive ones)."""
    if credential.type not in (None, POSTGRES):
        raise _unsupported(credential, "postgres tool", "postgres")
    dsn = _text(credential, "dsn", "connection_string", "conninfo", required=False)
    if dsn is not None:
        return dsn
    params: dict[str, str] = {}
    origin: dict[str, str] = {}
    for name, value in credential.data.items():
        keyword = _PG_FIELDS.get(name)
        if keyword is None or value is None or value == "":
            continue
        text = _pg_value(credential, name, value)
        if keyword in params and params[keyword] != text:
            raise CredentialError(
                f"{credential.describe()}: fields {origin[keyword]!r} and {name!r} "
                "disagree; keep one"
            )
        params[keyword] = text
        origin[keyword] = name
    if not params:
        raise CredentialError(f"{credential.describe()} has no connection fields: {_PG_EXPECTED}")
    port = params.get("port")
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise CredentialError(
            f"{credential.describe()}: field {origin['port']!r} must be a port number"
        )
    return " ".join(f"{key}={_quote(value)}" for key, value in params.items())


def _pg_value(credential: Credential, name: str, value: Any) -> str:
    if name == "ssl" and isinstance(value, bool):  # upstream's `ssl: true`
        return "require" if value else "disable"
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise CredentialError(f"{credential.describe()}: field {name!r} must be a string")
    return str(value)


def _quote(value: str) -> str:
    """A libpq keyword value: single-quoted, backslash and quote escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# --- http ---------------------------------------------------------------------------------

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_HTTP_TAKES = ", ".join(HTTP_TYPES)


@dataclass(frozen=True, slots=True)
class HttpAuth:
    """What the http tool sends for a credential: one header, and the derived values to
    mask besides the credential's own (the encoded `Basic` value)."""

    header: str
    value: str
    derived: tuple[str, ...] = ()


def http_auth(credential: Credential) -> HttpAuth:
    """The header the http tool sends for a bearer, basic, api_key or header credential."""
    kind = credential.type
    if kind == "bearer":
        token = _text(credential, "token", "value", "access_token")
        return HttpAuth("Authorization", f"Bearer {_header_value(credential, token)}")
    if kind == "basic":
        user = _text(credential, "username", "user", "login") or ""
        password = _text(credential, "password", required=False) or ""
        if ":" in user:
            raise CredentialError(f"{credential.describe()}: the username cannot hold ':'")
        encoded = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return HttpAuth("Authorization", f"Basic {encoded}", derived=(encoded,))
    if kind == "api_key":
        name = _text(credential, "header_name", "header", required=False) or "X-API-Key"
        key = _text(credential, "api_key", "value", "key")
        return HttpAuth(_header_name(credential, name), _header_value(credential, key))
    if kind == "header":
        header = _text(credential, "header_name", "header", "name")
        value = _text(credential, "value")
        return HttpAuth(_header_name(credential, header), _header_value(credential, value))
    raise _unsupported(credential, "http tool", _HTTP_TAKES)


def _header_name(credential: Credential, name: str | None) -> str:
    if name is None or not _HEADER_NAME.match(name):
        raise CredentialError(f"{credential.describe()}: the header name is not a valid name")
    return name


def _header_value(credential: Credential, value: str | None) -> str:
    if value is None or any(c in value for c in "\r\n\0"):
        raise CredentialError(
            f"{credential.describe()}: the header value holds a line break or NUL"
        )
    return value


# --- s3 -----------------------------------------------------------------------------------

_AWS_FIELDS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")


def s3_keys(credential: Credential) -> dict[str, str]:
    """The AWS keys of an s3 (or aws, or untyped) credential, as boto3 names them."""
    if credential.type not in (None, *S3_TYPES):
        raise _unsupported(credential, "s3 sink", ", ".join(S3_TYPES))
    found: dict[str, str] = {}
    for name in _AWS_FIELDS:
        value = _text(credential, name, required=False)
        if value is not None:
            found[name] = value
    if "aws_access_key_id" not in found or "aws_secret_access_key" not in found:
        raise CredentialError(
            f"{credential.describe()} needs aws_access_key_id and aws_secret_access_key"
        )
    return found


def check_usable(credential: Credential) -> str | None:
    """Map a typed credential as a task would (so a mistake shows when it is stored, not
    in a run; CredentialError); a warning for a type no built-in tool takes."""
    if credential.type == POSTGRES:
        postgres_conninfo(credential)
    elif credential.type in HTTP_TYPES:
        http_auth(credential)
    elif credential.type in S3_TYPES:
        s3_keys(credential)
    else:
        return (
            f"no built-in tool takes credentials of type {credential.type!r}; a postgres, "
            "http or s3 step that names it fails (a third-party tool may read it)"
        )
    return None
