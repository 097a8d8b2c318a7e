"""Masking secrets in what NoETL shows: API responses, the dead-letter queue (seed 000, 8.9).

A value is hidden when its KEY looks sensitive: the key contains one of `REDACT_KEYS`,
case-insensitively, at any depth of nested mappings and lists. Substring matching errs on
the side of hiding (`author` contains `auth`, `monkey` contains `key`); a leaked token
costs more than a hidden harmless value.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

REDACT_KEYS = ("password", "token", "secret", "authorization", "key", "auth", "api_key")
MASK = "***"


def sensitive(key: object) -> bool:
    """True if a value stored under `key` must not be shown."""
    lowered = str(key).lower()
    return any(word in lowered for word in REDACT_KEYS)


def redact(value: Any, *, keep: Collection[str] = ()) -> Any:
    """A copy of `value` with every value under a sensitive key replaced by `MASK`.

    `keep` names top-level keys left as they are (fields the engine itself writes whose
    names happen to match, such as an event's idempotency `key`); nested keys are always
    checked.
    """
    if isinstance(value, Mapping):
        return {
            k: (v if k in keep else MASK if sensitive(k) else redact(v)) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
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
