"""Masking secrets in what the API returns (seed 000, section 8.9 "API Masking").

The rules (which keys are sensitive) are shared with the rest of NoETL in
`noetl.redaction`; this module adds what only event payloads need.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl.redaction import MASK, REDACT_KEYS, redact, sensitive

__all__ = ["MASK", "REDACT_KEYS", "redact", "redact_event_payload", "sensitive"]

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
