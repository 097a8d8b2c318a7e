"""The one error tree of NoETL.

    NoetlError
    ├── PlaybookError          a playbook failed to load or validate (carries diagnostics)
    ├── ConfigError            a bad setting at start-up
    │   └── MissingExtraError  a feature whose pip extra is not installed (noetl.extras)
    ├── ConflictError          a request the current state does not allow (replaying a
    │                          discarded DLQ entry, force-completing a finished step)
    │   └── SessionConflictError  a session changed since it was read (noetl.sessions)
    ├── AuthenticationError    no credential, or one that is unknown, expired or revoked
    ├── PermissionDeniedError  a valid credential whose role is too low
    ├── store errors (noetl.core.errors): ConcurrencyError, NotFoundError (and its
    │   HistoryPrunedError: retention deleted the execution's history),
    │   StalePlaybookError (a newer version registered since a cached read),
    │   StoreUnavailableError (retryable when the database is only busy)
    ├── RetryableError         transient: a retry may succeed
    │   └── TaskTimeoutError   a tool, sink or loop item ran past its budget
    ├── FatalError             permanent: retrying cannot help
    │   ├── TemplateError      a template failed to render
    │   │   └── UndefinedNameError  it read a name, key or attribute that is not there
    │   ├── SinkError          a sink write failed for good
    │   ├── CredentialError    a credential that cannot be used (noetl.credentials)
    │   └── PathRefusedError   a file path resolves outside its configured root
    └── CancelError            the execution was canceled

Each error knows whether it may be retried (`retryable`). The CLI maps errors to exit codes
in one place (`noetl.cli.main`), the server to HTTP status in one place.

Outcomes cross process boundaries as data, so the engine classifies a failed outcome by its
`error_type` name, its `retryable` flag and (for `HttpError`) its status: `error_class`
says `transient`, `fatal` or `other`; `classify` says whether it is retryable (seed 000,
"When to Retry"). The engine's retry policy (`noetl.engine.retry`) builds on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from noetl.dsl.diagnostics import Diagnostic

__all__ = [
    "FATAL_ERROR_TYPES",
    "RETRYABLE_HTTP_STATUS",
    "TRANSIENT_ERROR_TYPES",
    "AuthenticationError",
    "CancelError",
    "ConfigError",
    "ConflictError",
    "ErrorClass",
    "FatalError",
    "MissingExtraError",
    "NoetlError",
    "PathRefusedError",
    "PermissionDeniedError",
    "PlaybookError",
    "RetryableError",
    "SinkError",
    "TaskTimeoutError",
    "TemplateError",
    "classify",
    "error_class",
    "http_status",
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


class ConflictError(NoetlError):
    """The request conflicts with the current state of what it names."""


class TooComplexError(NoetlError):
    """An execution whose plan scores at or over `complexity.refuse` is not started (the
    API answers 422, the CLI exits 1); the message names the score and what makes it."""


class AuthenticationError(NoetlError):
    """The request carries no credential, or one that is unknown, expired or revoked (the
    API answers 401). The message never repeats the credential."""


class PermissionDeniedError(NoetlError):
    """The credential is valid but its role does not allow the request (the API answers
    403)."""


class RetryableError(NoetlError):
    """A transient failure: network, timeout, 5xx, serialization failure."""

    retryable = True


class TaskTimeoutError(RetryableError):
    """A tool, sink or loop item exceeded its time budget."""


class FatalError(NoetlError):
    """A permanent failure: validation, 4xx other than 408/429, user code error."""


class TemplateError(FatalError):
    """A template failed to parse or render."""


class UndefinedNameError(TemplateError):
    """A template read a name (or a key, an attribute) that is not there."""


class SinkError(FatalError):
    """A sink write failed after its own retries."""


class PathRefusedError(FatalError):
    """A path a step names (a file sink's `path`, the `playbook` tool's `path`) resolves
    outside the root its setting confines it to: `..`, an absolute path elsewhere, or a
    symlink that leads out. `str()` names the field, the path, the root and the setting,
    and the step once `at(step)` is given."""

    def __init__(self, *, field: str, path: str, root: str, setting: str) -> None:
        self.field = field
        self.path = path
        self.root = root
        self.setting = setting
        self.step: str | None = None
        super().__init__(self._message())

    def at(self, step: str) -> PathRefusedError:
        """The same error, naming the step it happened in."""
        self.step = step
        self.args = (self._message(),)
        return self

    def _message(self) -> str:
        where = f"step '{self.step}': " if self.step else ""
        return (
            f"{where}{self.field} {self.path!r} resolves outside the root {self.root} "
            f"({self.setting}); use a path inside it, or configure another root"
        )

    def __str__(self) -> str:
        return self._message()


class MissingExtraError(ConfigError, FatalError):
    """A feature needs an optional dependency that is not installed (a pip extra such as
    `noetl[duckdb]`); the message names the extra and how to install it
    (`noetl.extras`). Fatal: retrying cannot install it."""


class CancelError(NoetlError):
    """The execution was canceled by a user or an operator."""


# --- classifying an outcome ------------------------------------------------------------

# Error type names (as outcomes report them: the exception's class name) a second attempt
# may get past: timeouts, lost or refused connections, broken responses, database
# serialization failures and deadlocks, a busy store.
TRANSIENT_ERROR_TYPES = frozenset(
    {
        "RetryableError",
        "TaskTimeoutError",
        "TimeoutError",
        "Timeout",
        "TimeoutException",
        "ConnectTimeout",
        "ReadTimeout",
        "WriteTimeout",
        "PoolTimeout",
        "ConnectionError",
        "ConnectError",
        "ConnectionResetError",
        "ConnectionRefusedError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "NetworkError",
        "ReadError",
        "WriteError",
        "RemoteProtocolError",
        "ProxyError",
        "SerializationError",
        "SerializationFailure",
        "DeadlockError",
        "DeadlockDetected",
        "StoreUnavailableError",
    }
)
# Error type names retrying cannot help, whatever the outcome's `retryable` flag says:
# invalid input or configuration, a template or secret that does not resolve, a sink that
# failed after its own retries, a canceled run.
FATAL_ERROR_TYPES = frozenset(
    {
        "FatalError",
        "TemplateError",
        "SinkError",
        "PathRefusedError",
        "SecretError",
        "CredentialError",
        "PlaybookError",
        "ConfigError",
        "MissingExtraError",
        "ConflictError",
        "ValidationError",
        "CancelError",
        # A result the worker could not report (a value the store cannot hold): the same
        # result would be refused again (noetl.worker.reporting).
        "ReportError",
        # A task's `ctx` patch the engine refused (noetl.engine.variables): the same
        # values would be refused again.
        "CtxRefused",
        # A pipeline's policy rule failed the task, or its retries ran out: the policy has
        # decided (noetl.worker.pipeline).
        "PolicyFailure",
    }
)
# HTTP statuses worth another attempt; any other 4xx is fatal, any 5xx transient.
RETRYABLE_HTTP_STATUS = frozenset({408, 429})


class ErrorClass(StrEnum):
    """What a failed outcome says about trying again."""

    TRANSIENT = "transient"  # a retry may succeed: retried by default
    FATAL = "fatal"  # a retry cannot succeed: never retried
    OTHER = "other"  # not known either way: retried only under an explicit `retry`


def http_status(value: Any) -> int | None:
    """The status of an HTTP-shaped value (a map with an integer `status_code`), else None."""
    if isinstance(value, Mapping):
        status = value.get("status_code")
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def error_class(outcome: Mapping[str, Any]) -> ErrorClass | None:
    """The class of a failed outcome payload (`ok`, `error_type`, `retryable`, `this`);
    None for a successful one.

    In order: a fatal error type is fatal even when flagged retryable (a CancelError is,
    unless the worker flagged it: its pool was closing); an `HttpError` is transient for
    408, 429 and 5xx and fatal for other 4xx; then the `retryable` flag; then the
    transient error types; anything else is `other`."""
    if outcome.get("ok"):
        return None
    error_type = outcome.get("error_type")
    retryable = outcome.get("retryable") is True
    if error_type in FATAL_ERROR_TYPES and not (error_type == "CancelError" and retryable):
        return ErrorClass.FATAL
    if error_type == "HttpError":
        status = http_status(outcome.get("this"))
        if status is None:
            status = http_status(outcome)
        if status is not None and status >= 400:
            transient = status in RETRYABLE_HTTP_STATUS or status >= 500
            return ErrorClass.TRANSIENT if transient else ErrorClass.FATAL
    if retryable or error_type in TRANSIENT_ERROR_TYPES:
        return ErrorClass.TRANSIENT
    return ErrorClass.OTHER


def classify(outcome: Mapping[str, Any]) -> bool:
    """Whether a failed outcome payload is retryable (transient); False for a success."""
    return error_class(outcome) is ErrorClass.TRANSIENT
