"""`Store.complete_many` one completion at a time: what the embedded stores do, and what
PostgreSQL falls back to when its one transaction for all of them is refused."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from noetl.store.records import Append, Completed, Completion, Lease

CompleteOne = Callable[..., list[Lease] | None]

__all__ = ["check_distinct", "one_by_one"]


def check_distinct(items: Sequence[Completion]) -> None:
    """ValueError when two completions continue one execution (they chain instead)."""
    seen: set[str] = set()
    for item in items:
        execution_id = item.append.execution_id
        if execution_id in seen:
            raise ValueError(f"two completions of execution {execution_id} in one call")
        seen.add(execution_id)


def one_by_one(
    complete: CompleteOne, items: Sequence[Completion], *, worker_id: str, lease_s: float
) -> list[Completed]:
    """Each completion through `complete` (a store's `complete_and_commit`), each in its
    own transaction: what one raises is its own answer, and the rest still go."""
    results: list[Completed] = []
    for item in items:
        append: Append = item.append
        try:
            results.append(
                complete(
                    item.task_id,
                    item.token,
                    append,
                    worker_id=worker_id,
                    lease=item.lease,
                    lease_s=lease_s,
                )
            )
        except Exception as exc:  # this completion's own: stale, unavailable, refused value
            results.append(exc)
    return results
