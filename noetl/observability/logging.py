"""Structured logs (seed 000, 8.2): JSON lines for machines, a compact text for terminals.

* `configure_logging(level, fmt)` installs one handler on the root logger: `json` writes
  one object per line (`ts` ISO-8601 UTC with milliseconds, `level`, `logger`, `msg`, then
  `event` and the fields), `text` writes `time level logger msg key=value ...`.
* `log_event(logger, level, name, **fields)` logs a named event; it checks the level first,
  so an event nobody reads costs one comparison.
* Context is injected into every record, whatever logged it: the task a thread runs
  (`bind_task`, set by `ToolRegistry.run`: execution_id, step_id, call_id, loop_index,
  loop_key, tool_kind, attempt) and any fields of `log_context(...)`.
* Redaction (`noetl.redaction`) is applied to every record: values under
  sensitive keys are masked, and so is every secret value a worker resolved, wherever it
  appears (message, fields, traceback).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import IO, Any, Literal

from noetl.core import Task
from noetl.errors import ConfigError
from noetl.redaction import REDACT_KEYS, SECRET_VALUES, SecretValues, redact

__all__ = [
    "FIELDS_ATTR",
    "LOG_FORMATS",
    "JsonFormatter",
    "TextFormatter",
    "bind_task",
    "configure_logging",
    "log_context",
    "log_event",
    "reset_task",
]

LogFormat = Literal["json", "text"]
LOG_FORMATS = ("json", "text")
# The record attribute holding an event's fields (one attribute: no clash with LogRecord's).
FIELDS_ATTR = "noetl_fields"
# Field names that contain a sensitive word but hold identifiers or shapes, not secrets.
_SAFE_FIELDS = ("loop_key", "key", "collect_key", "spec_signature", "idempotency_key")

_TASK: ContextVar[Task | None] = ContextVar("noetl_log_task", default=None)
_FIELDS: ContextVar[Mapping[str, Any] | None] = ContextVar("noetl_log_fields", default=None)


def bind_task(task: Task) -> Token[Task | None]:
    """Make `task` the context of this thread's log records; returns the token to reset."""
    return _TASK.set(task)


def reset_task(token: Token[Task | None]) -> None:
    _TASK.reset(token)


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add `fields` to every record logged inside the block (in this context)."""
    current = _FIELDS.get()
    token = _FIELDS.set({**current, **fields} if current else fields)
    try:
        yield
    finally:
        _FIELDS.reset(token)


def log_event(logger: logging.Logger, level: int, name: str, /, **fields: Any) -> None:
    """Log the event `name` with `fields` (None values left out), if `level` is enabled."""
    if logger.isEnabledFor(level):
        clean = {k: v for k, v in fields.items() if v is not None}
        logger.log(level, name, extra={FIELDS_ATTR: {"event": name, **clean}})


def _task_fields(task: Task) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "execution_id": task.execution_id,
        "step_id": task.step,
        "call_id": task.task_id,
        "tool_kind": task.kind,
        "attempt": task.attempt,
    }
    if task.index is not None:
        fields["loop_index"] = task.index
        prefix = f"{task.execution_id}:{task.step}:"
        if task.key.startswith(prefix):
            fields["loop_key"] = task.key[len(prefix) :]
    return fields


class _Structured(logging.Formatter):
    """The fields of a record: task context, log_context fields, the event's own fields,
    redacted by key and by secret value."""

    def __init__(
        self, *, redact_keys: Collection[str] = REDACT_KEYS, secrets: SecretValues | None = None
    ) -> None:
        super().__init__()
        self.redact_keys = tuple(k.lower() for k in redact_keys)
        self.secrets = SECRET_VALUES if secrets is None else secrets

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        task = _TASK.get()
        if task is not None:
            fields.update(_task_fields(task))
        extra = _FIELDS.get()
        if extra:
            fields.update(extra)
        own = getattr(record, FIELDS_ATTR, None)
        if own:
            fields.update(own)
        if fields:
            fields = redact(fields, keep=_SAFE_FIELDS, keys=self.redact_keys)
        return fields

    def text_of(self, record: logging.LogRecord) -> tuple[str, str | None]:
        """The message and the traceback (if any), secrets masked."""
        message = record.getMessage()
        error = None
        if record.exc_info:
            error = self.formatException(record.exc_info)
        elif record.exc_text:
            error = record.exc_text
        if self.secrets:
            message = self.secrets.mask(message)
            error = self.secrets.mask(error)
        return message, error


def _iso(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class JsonFormatter(_Structured):
    """One JSON object per line (seed 000, 8.2 "Common Fields")."""

    def format(self, record: logging.LogRecord) -> str:
        message, error = self.text_of(record)
        line: dict[str, Any] = {
            "ts": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": message,
        }
        line.update(self.fields(record))
        if error is not None:
            line["exc"] = error
        if self.secrets:
            line = self.secrets.mask(line)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(_Structured):
    """`HH:MM:SS.mmm LEVEL logger message key=value ...`, for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        message, error = self.text_of(record)
        fields = self.fields(record)
        fields.pop("event", None)  # the message is the event's name
        parts = [
            time.strftime("%H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}",
            f"{record.levelname:<7}",
            record.name,
            message,
        ]
        for key, value in fields.items():
            # A string stays as it is unless it spans lines: one record, one line.
            plain = isinstance(value, str) and "\n" not in value
            text = value if plain else json.dumps(value, default=str, ensure_ascii=False)
            parts.append(f"{key}={text}")
        line = " ".join(parts)
        if self.secrets:
            line = self.secrets.mask(line)
        if error is not None:
            line += "\n" + error
        return line


class _NoetlHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler `configure_logging` installed, so calling it again replaces it."""


def configure_logging(
    level: str | int = "INFO",
    fmt: str = "text",
    *,
    redact_keys: Collection[str] = REDACT_KEYS,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Send log records to `stream` (stderr) in `fmt` (json|text). The `noetl` loggers log
    from `level`; other libraries from WARNING (from DEBUG when `level` is DEBUG).
    ConfigError for an unknown level or format. Returns the handler installed."""
    numeric = _level(level)
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    formatter: logging.Formatter = (
        JsonFormatter(redact_keys=redact_keys)
        if fmt == "json"
        else TextFormatter(redact_keys=redact_keys)
    )
    handler = _NoetlHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _NoetlHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(min(numeric, logging.WARNING) if numeric <= logging.DEBUG else logging.WARNING)
    logging.getLogger("noetl").setLevel(numeric)
    return handler


def _level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    numeric = logging.getLevelName(level.strip().upper())
    if not isinstance(numeric, int):
        raise ConfigError(
            f"log level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got {level!r}"
        )
    return numeric
