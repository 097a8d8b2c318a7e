"""The one error tree of NoETL.

    NoetlError
    ├── PlaybookError          a playbook failed to load or validate (carries diagnostics)
    ├── ConfigError            a bad setting at start-up
    ├── store errors (noetl.store.base): ConcurrencyError, NotFoundError,
    │   StoreUnavailableError (retryable when the database is only busy)
    ├── RetryableError         transient: a retry may succeed
    │   └── TaskTimeoutError   a tool, sink or loop item ran past its budget
    ├── FatalError             permanent: retrying cannot help
    │   ├── TemplateError      a template failed to render
    │   └── SinkError          a sink write failed for good
    └── CancelError            the execution was canceled

Each error knows whether it may be retried (`retryable`). The CLI maps errors to exit codes
in one place (`noetl.cli.main`), the server to HTTP status in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from noetl.dsl.diagnostics import Diagnostic

__all__ = [
    "CancelError",
    "ConfigError",
    "FatalError",
    "NoetlError",
    "PlaybookError",
    "RetryableError",
    "SinkError",
    "TaskTimeoutError",
    "TemplateError",
]


class NoetlError(Exception):
    """Base of every error NoETL raises on purpose."""

    retryable: bool = False


class PlaybookError(NoetlError):
    """A playbook could not be loaded or is invalid; `diagnostics` lists every problem."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(d.format() for d in self.diagnostics))


class ConfigError(NoetlError):
    """A configuration value is missing or wrong."""


class RetryableError(NoetlError):
    """A transient failure: network, timeout, 5xx, serialization failure."""

    retryable = True


class TaskTimeoutError(RetryableError):
    """A tool, sink or loop item exceeded its time budget."""


class FatalError(NoetlError):
    """A permanent failure: validation, 4xx other than 408/429, user code error."""


class TemplateError(FatalError):
    """A template failed to parse or render."""


class SinkError(FatalError):
    """A sink write failed after its own retries."""


class CancelError(NoetlError):
    """The execution was canceled by a user or an operator."""
