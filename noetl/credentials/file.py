"""The credentials file (`credentials.file`, NOETL_CREDENTIALS_FILE, `--credentials-file`): a
YAML or JSON file of named credential records, in upstream NoETL's format.

    pg_local:
      type: postgres
      data: {db_host: localhost, db_port: 5432, db_user: demo, db_password: demo,
             db_name: demo_noetl}
    api:
      type: bearer
      data: {token: "..."}

A list of records that carry their `name` (upstream's JSON files, one after another) is
read too. The file is read and checked when the provider is made (a command fails at
once, naming the file and the line), and read again at call time whenever it changed, so
an edited credential is used by the next task; a file that became unreadable or invalid
fails the tasks that need it, with the same message.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from noetl.credentials.records import CredentialError, parse_credential
from noetl.errors import ConfigError

__all__ = ["CredentialsFile", "read_credentials_file"]


def _problem(path: Path, line: int | None, message: str) -> ConfigError:
    where = f"{path}:{line}" if line else str(path)
    return ConfigError(f"credentials file {where}: {message}")


def _lines(text: str) -> dict[int, int]:
    """The line of each top-level entry (by position), for messages."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    if isinstance(node, yaml.MappingNode):
        return {i: key.start_mark.line + 1 for i, (key, _) in enumerate(node.value)}
    if isinstance(node, yaml.SequenceNode):
        return {i: item.start_mark.line + 1 for i, item in enumerate(node.value)}
    return {}


def read_credentials_file(path: Path) -> dict[str, dict[str, Any]]:
    """The records of a credentials file by name; ConfigError naming the file and the line
    of the first problem (never a value)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise _problem(path, None, f"cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise _problem(path, None, "is not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise _problem(path, line, "is not valid YAML or JSON") from None
    lines = _lines(text)
    if data is None:
        return {}
    if isinstance(data, list):
        entries = _named_entries(path, data, lines)
    elif isinstance(data, dict):
        entries = [
            (str(name), record, lines.get(i)) for i, (name, record) in enumerate(data.items())
        ]
    else:
        raise _problem(path, 1, "must map each credential name to its record")
    records: dict[str, dict[str, Any]] = {}
    for name, record, line in entries:
        if not isinstance(record, dict):
            raise _problem(path, line, f"credential {name!r} must be a map (type and data)")
        inner = record.get("name")
        if inner is not None and str(inner) != name:
            raise _problem(path, line, f"credential {name!r} has the name {str(inner)!r} inside")
        try:
            parse_credential(name, record)
        except CredentialError as exc:
            raise _problem(path, line, str(exc)) from None
        if name in records:
            raise _problem(path, line, f"credential {name!r} is given twice")
        records[name] = record
    return records


def _named_entries(
    path: Path, data: list[Any], lines: Mapping[int, int]
) -> list[tuple[str, Any, int | None]]:
    entries: list[tuple[str, Any, int | None]] = []
    for i, record in enumerate(data):
        name = record.get("name") if isinstance(record, dict) else None
        if not isinstance(name, str) or not name:
            raise _problem(path, lines.get(i), "each record of a list needs a `name`")
        entries.append((name, record, lines.get(i)))
    return entries


class CredentialsFile:
    """A secret provider over a credentials file (credentials only, no plain secrets)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._records = read_credentials_file(self.path)

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _refresh(self) -> dict[str, dict[str, Any]]:
        stamp = self._stat()
        with self._lock:
            if stamp != self._stamp or stamp is None:
                try:
                    records = read_credentials_file(self.path)
                except ConfigError as exc:  # the task that needs it fails, not the worker
                    raise CredentialError(str(exc)) from None
                self._records, self._stamp = records, stamp
            return self._records

    def secret(self, name: str) -> str | None:
        return None

    def credential(self, name: str) -> Mapping[str, Any] | None:
        return self._refresh().get(name)
