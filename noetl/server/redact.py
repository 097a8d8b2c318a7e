"""Masking secrets in what the API returns: the rules of `noetl.redaction`, which logs,
the DLQ and `noetl config show` share; these names stay importable from here."""

from __future__ import annotations

import json
from typing import Any

from noetl.redaction import MASK, REDACT_KEYS, redact, redact_event_payload, sensitive

__all__ = ["MASK", "REDACT_KEYS", "masked_json", "redact", "redact_event_payload", "sensitive"]


def masked_json(value: Any, limit: int, *, indent: int | None = None) -> tuple[str, bool]:
    """`value` masked and written as JSON, cut to `limit` characters; (text, was it cut).

    For previews: a result of a loop over many items can be megabytes, and what a person
    reads is its beginning."""
    text = json.dumps(redact(value), indent=indent, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return text, False
    return text[:limit], True
