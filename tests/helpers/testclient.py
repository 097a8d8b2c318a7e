"""FastAPI's TestClient, imported once without Starlette's nudge towards `httpx2` (either
client drives the app the same way; the warning would fail tests under `-W error`)."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

__all__ = ["TestClient"]
