"""Masking secrets in what the API returns: the rules of `noetl.redaction`, which logs,
the DLQ and `noetl config show` share; these names stay importable from here."""

from __future__ import annotations

from noetl.redaction import MASK, REDACT_KEYS, redact, redact_event_payload, sensitive

__all__ = ["MASK", "REDACT_KEYS", "redact", "redact_event_payload", "sensitive"]
