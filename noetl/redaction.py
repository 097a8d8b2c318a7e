"""Redaction: what API responses, logs, traces, the DLQ and `noetl config show` must never
show (seed 000, 8.9).

Two rules, applied together wherever data leaves the process:

* By key: a value stored under a key that looks sensitive (`REDACT_KEYS`, matched as a
  case-insensitive substring at any depth of mappings and lists) is replaced by `MASK`.
  Substring matching errs on the side of hiding (`author` contains `auth`, `monkey`
  contains `key`): a leaked token costs more than a hidden harmless value.
* By value: every secret value a worker resolved for a task (`noetl.credentials.scope`)
  is remembered in `SECRET_VALUES`, and log lines mask those values wherever they appear,
  whatever the key (an error message quoting a DSN, a URL with a token in it).

A URL or DSN is shown without its password (`mask_url`): the password of its user part,
query parameters under a sensitive name, and `password=...` words of a keyword DSN.

`signature_of` describes a value's shape (keys and types, never values), for log lines and
spans that must say what a tool was given without saying what it was.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from noetl.dsl.limits import MAX_DEPTH

__all__ = [
    "MASK",
    "REDACT_KEYS",
    "SECRET_VALUES",
    "SecretValues",
    "mask_url",
    "redact",
    "redact_event_payload",
    "sensitive",
    "signature_of",
]

# seed 000, 8.9
REDACT_KEYS: tuple[str, ...] = (
    "password",
    "token",
    "secret",
    "authorization",
    "key",
    "auth",
    "api_key",
    "bearer",
    "credential",
)
MASK = "***"
# `password=...` (or pwd / passwd) in a keyword DSN or any other text.
_PASSWORD_WORD = re.compile(r"(?i)\b(password|passwd|pwd)(\s*=\s*)('[^']*'|\"[^\"]*\"|\S+)")
MIN_MASKED = 3  # shorter values are not masked by value: "a" would mask every "a"


def sensitive(key: object, keys: Collection[str] = REDACT_KEYS) -> bool:
    """True if a value stored under `key` must not be shown."""
    lowered = str(key).lower()
    return any(word in lowered for word in keys)


def redact(value: Any, *, keep: Collection[str] = (), keys: Collection[str] = REDACT_KEYS) -> Any:
    """A copy of `value` with every value under a sensitive key replaced by `MASK`.

    `keep` names top-level keys left as they are (fields the engine itself writes whose
    names happen to match, such as an event's idempotency `key`); nested keys are always
    checked. A map or list nested more than `MAX_DEPTH` levels deep (data from before
    the limits of `noetl.dsl.limits`) is shown as a short text saying so: what is shown
    must never be too deep to serialize.
    """
    return _redact(value, keep, keys, 0)


def _redact(value: Any, keep: Collection[str], keys: Collection[str], depth: int) -> Any:
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_DEPTH:
        return f"<nested deeper than {MAX_DEPTH} levels: not shown>"
    if isinstance(value, Mapping):
        return {
            k: (v if k in keep else MASK if sensitive(k, keys) else _redact(v, (), keys, depth + 1))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(item, (), keys, depth + 1) for item in value]
    return value


# Fields the engine writes into event payloads whose names match but whose values are
# identifiers, not secrets: a loop item's rendered key, its collect key, a task's
# idempotency key. Everything else (workload, bind, args, results, context) is user data.
_EVENT_FIELDS = ("key", "collect_key")


def redact_event_payload(payload: Mapping[str, Any]) -> dict[str, Any]:
    """An event payload with user data masked like the context, identifiers kept."""
    out: dict[str, Any] = redact(payload, keep=(*_EVENT_FIELDS, "task"))
    task = payload.get("task")
    if isinstance(task, Mapping):
        out["task"] = redact(task, keep=("key",))
    return out


class SecretValues:
    """The secret values this process handed to tasks, so logs can mask them anywhere.

    Bounded (the oldest values are forgotten past `limit`); `mask` reads a snapshot, so
    threads may remember values while others mask."""

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = limit
        self._known: dict[str, None] = {}
        self._ordered: tuple[str, ...] = ()  # longest first, so a longer value masks whole
        self._lock = threading.Lock()

    def remember(self, value: str) -> None:
        if len(value) < MIN_MASKED or value in self._known:
            return
        with self._lock:
            self._known[value] = None
            while len(self._known) > self._limit:
                del self._known[next(iter(self._known))]
            self._ordered = tuple(sorted(self._known, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._ordered)

    def mask(self, value: Any) -> Any:
        """`value` with every remembered secret replaced by `MASK` (strings, lists, maps)."""
        ordered = self._ordered
        if not ordered:
            return value
        return _mask(value, ordered)

    def clear(self) -> None:
        with self._lock:
            self._known.clear()
            self._ordered = ()


def _mask(value: Any, secrets: Sequence[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, Mapping):
        return {_mask(k, secrets): _mask(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask(v, secrets) for v in value]
    return value


# The process's secret values: workers add to it (SecretScope), log formatters read it.
SECRET_VALUES = SecretValues()

_MAX_DEPTH = 4
_MAX_KEYS = 20
_MAX_KEY_CHARS = 40


def signature_of(value: Any) -> str:
    """The shape of `value`: keys and type names, never values, e.g.
    `{method:str,url:str,headers:{Authorization:str}}`. Bounded in depth and width."""
    return _shape(value, 0)


def _shape(value: Any, depth: int) -> str:
    if isinstance(value, Mapping):
        if depth >= _MAX_DEPTH:
            return "{...}"
        parts = []
        for index, (key, item) in enumerate(value.items()):
            if index >= _MAX_KEYS:
                parts.append("...")
                break
            name = str(key)[:_MAX_KEY_CHARS]
            parts.append(f"{name}:{_shape(item, depth + 1)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        if depth >= _MAX_DEPTH:
            return "[...]"
        return f"[{_shape(value[0], depth + 1)}]"
    if value is None:
        return "null"
    return type(value).__name__


def mask_url(text: str) -> str:
    """`text` (a URL, a DSN, any string) with its passwords replaced by `MASK`:
    `postgresql://ada:s3cret@db/x` -> `postgresql://ada:***@db/x`; a query parameter with a
    sensitive name and a `password=...` word are masked too. Text that holds none is
    returned as it is."""
    masked = _PASSWORD_WORD.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    if "://" not in masked:
        return masked
    try:
        parts = urlsplit(masked)
        password = parts.password
    except ValueError:  # not a URL after all (a bad port, brackets): hide what may follow
        scheme, _, _ = masked.partition("://")
        return f"{scheme}://{MASK}"
    netloc = parts.netloc
    if password is not None:
        user, _, host = netloc.rpartition("@")
        name = user.split(":", 1)[0]
        netloc = f"{name}:{MASK}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(sensitive(k) for k, _ in pairs):
            query = urlencode([(k, MASK if sensitive(k) else v) for k, v in pairs], safe="*")
    if netloc == parts.netloc and query == parts.query:
        return masked
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
