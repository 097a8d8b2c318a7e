"""Masking in API responses: the rules of `noetl.redaction`, used by the routes."""

from noetl.redaction import MASK, REDACT_KEYS, redact, redact_event_payload, sensitive

__all__ = ["MASK", "REDACT_KEYS", "redact", "redact_event_payload", "sensitive"]
