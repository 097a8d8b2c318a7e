"""Reading the spans the `console` trace exporter wrote into a process's output."""

from __future__ import annotations

import json
from typing import Any

# Environment of a process that traces every execution to its stderr.
CONSOLE_TRACING = {
    "NOETL_TRACING_ENABLED": "true",
    "NOETL_TRACING_EXPORTER": "console",
    "NOETL_TRACING_SAMPLE_RATE": "1",
}
_START = '{\n    "name": "'


def console_spans(text: str) -> list[dict[str, Any]]:
    """Every span document in `text` (log lines may sit between them)."""
    decoder = json.JSONDecoder()
    spans: list[dict[str, Any]] = []
    at = text.find(_START)
    while at >= 0:
        span, end = decoder.raw_decode(text, at)
        spans.append(span)
        at = text.find(_START, end)
    return spans


def trace_hex(trace_id: int) -> str:
    """A trace id as the console exporter writes it."""
    return f"0x{trace_id:032x}"
