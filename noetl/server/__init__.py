"""The HTTP API of `noetl server` (FastAPI): executions, playbooks, health."""

from noetl.server.app import create_app

__all__ = ["create_app"]
