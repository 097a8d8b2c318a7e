"""Masking secrets in what the API returns: moved to `noetl.observability.redaction`,
which logs share; these names stay importable from here."""

from __future__ import annotations

from noetl.observability.redaction import (
    MASK,
    REDACT_KEYS,
    redact,
    redact_event_payload,
    sensitive,
)

__all__ = ["MASK", "REDACT_KEYS", "redact", "redact_event_payload", "sensitive"]
