"""The store's errors, which every layer above the store handles, and the error type a
store reports for a task it cannot decode.

They are defined here, at the bottom, so that the runtime, the server and the CLI can
catch them without importing a store adapter; `noetl.store` re-exports them as part of
its public surface. See `noetl.errors` for the whole error tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from noetl.errors import NoetlError

__all__ = [
    "UNDECODABLE_ERROR",
    "ConcurrencyError",
    "HistoryPrunedError",
    "NotFoundError",
    "StalePlaybookError",
    "StoreUnavailableError",
]

# The `error_type` of the outcome a store reports for a queued task it cannot decode: the
# store writes it, the engine dead-letters such a task as `undecodable`.
UNDECODABLE_ERROR = "UndecodableTask"


class ConcurrencyError(NoetlError):
    """Another writer appended to the execution first (expected sequence did not match),
    or another commit consumed an input this one decided on.

    `execution_ids` names the executions whose append was refused (every one of a commit,
    where the adapter can tell), so a batch can be committed again without them;
    `input_ids` the inputs another commit consumed already: they were decided elsewhere
    and must not be decided again."""

    def __init__(
        self, message: str, execution_ids: Sequence[str] = (), input_ids: Sequence[int] = ()
    ) -> None:
        super().__init__(message)
        self.execution_ids = tuple(execution_ids)
        self.input_ids = tuple(input_ids)


class NotFoundError(NoetlError):
    """No such execution."""


class HistoryPrunedError(NotFoundError):
    """The execution finished and retention (`noetl db prune`) deleted its history: its
    events, steps, tasks and inputs are gone; only a tombstone of its row is kept (id,
    playbook, status, times, `pruned_at`). A NotFoundError, so every caller that handles
    a missing execution handles it; its message says when the history went."""

    def __init__(self, execution_id: str, pruned_at: float) -> None:
        when = datetime.fromtimestamp(pruned_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        super().__init__(
            f"execution {execution_id} has finished and its history was pruned on {when} "
            "(retention): its events, steps and tasks are gone, only its status and times "
            "are kept"
        )
        self.execution_id = execution_id
        self.pruned_at = pruned_at


class StalePlaybookError(NoetlError):
    """A start of the latest version of a registered playbook, read from a cache, was
    refused: a newer version of `path` was registered since (nothing was written). The
    caller reads the catalog again and starts the newer one."""

    def __init__(self, path: str, version: int) -> None:
        super().__init__(f"playbook {path!r} has a version newer than {version}")
        self.path = path
        self.version = version


class StoreUnavailableError(NoetlError):
    """The database cannot be opened or used (missing directory, no permission, locked).

    The message names the database and what to do about it. A locked or busy database is
    transient (`retryable`); a path that cannot be opened is not.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
