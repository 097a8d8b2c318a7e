"""`Store.continue_many` and `Store.create_executions` one item at a time: what the
embedded stores do, and what PostgreSQL falls back to when its one transaction for all of
them is refused."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from noetl.store.records import Completed, Completion, Lease, NewExecution

CompleteOne = Callable[..., list[Lease] | None]
CreateOne = Callable[..., None]

__all__ = ["OneAtATime", "check_distinct", "create_each", "one_by_one"]


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
        try:
            results.append(
                complete(
                    item.task_id,
                    item.token,
                    item.append,
                    worker_id=worker_id,
                    lease=item.lease,
                    lease_s=lease_s,
                )
            )
        except Exception as exc:  # this completion's own: stale, unavailable, refused value
            results.append(exc)
    return results


def create_each(create: CreateOne, items: Sequence[NewExecution]) -> list[Exception | None]:
    """Each new execution through `create` (a store's `create_execution`), each in its
    own transaction: what one raises is its own answer, and the rest still go."""
    results: list[Exception | None] = []
    for item in items:
        try:
            create(item.record, item.initial, compiled=item.compiled, latest=item.latest)
        except Exception as exc:  # this start's own: its id exists, a newer playbook, a value
            results.append(exc)
        else:
            results.append(None)
    return results


class OneAtATime:
    """`continue_many` and `create_executions` as an embedded store has them: each item in
    a transaction of its own (they cost little, and none waits on a network)."""

    complete_and_commit: CompleteOne
    create_execution: CreateOne

    def continue_many(
        self, items: Sequence[Completion], *, worker_id: str, lease_s: float = 30.0
    ) -> list[Completed]:
        """Each completion on its own (see `Store.continue_many`)."""
        check_distinct(items)
        return one_by_one(self.complete_and_commit, items, worker_id=worker_id, lease_s=lease_s)

    def create_executions(self, items: Sequence[NewExecution]) -> list[Exception | None]:
        """Each execution on its own (see `Store.create_executions`)."""
        return create_each(self.create_execution, items)
