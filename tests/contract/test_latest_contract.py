"""Contract: a start that names the version it took for the latest of its playbook
(`latest`, read from a server's cache) is refused, writing nothing, when a newer version
of the path is registered; the other starts created with it go in."""

from __future__ import annotations

import dataclasses

import pytest

from noetl.store.base import Append, NewExecution, StalePlaybookError, Store, Timer
from tests.contract.test_queue_contract import last_seq, make_record, started
from tests.contract.test_together_contract import new_execution

PATH = "playbooks/demo.yaml"  # make_record's path


def register(store: Store, versions: int) -> None:
    for version in range(1, versions + 1):
        store.register_playbook(PATH, "demo", f"name: demo\n# v{version}\n", now=1.0)


def taking(latest: int | None, item: NewExecution) -> NewExecution:
    return dataclasses.replace(item, latest=latest)


def test_starts_of_the_latest_version_go_in(store: Store) -> None:
    register(store, 2)

    results = store.create_executions(
        [taking(2, new_execution("e1", "a")), taking(None, new_execution("e2", "a"))]
    )
    store.create_execution(make_record("e3"), compiled=None, latest=2)

    assert results == [None, None]
    assert [last_seq(store, e) for e in ("e1", "e2")] == [1, 1]
    assert store.get_execution("e3") is not None


def test_a_start_of_an_older_version_is_refused_alone(store: Store) -> None:
    register(store, 2)

    results = store.create_executions(
        [
            taking(2, new_execution("e1", "a")),
            taking(1, new_execution("e2", "a")),
            taking(None, new_execution("e3", "a")),
        ]
    )

    assert results[0] is None and results[2] is None
    refused = results[1]
    assert isinstance(refused, StalePlaybookError)
    assert (refused.path, refused.version) == (PATH, 1)
    assert "has a version newer than 1" in str(refused)
    assert store.get_execution("e2") is None  # nothing of it was written
    assert store.get_task("e2.a") is None
    claimed = sorted(lease.task.task_id for lease in store.claim("w1", limit=10))
    assert claimed == ["e1.a", "e3.a"]


def test_a_lone_stale_start_writes_nothing(store: Store) -> None:
    register(store, 3)

    with pytest.raises(StalePlaybookError):
        store.create_execution(make_record("e1"), Append("e1", 0, started("e1"), now=1.0), latest=2)

    assert store.get_execution("e1") is None
    store.create_execution(make_record("e1"), Append("e1", 0, started("e1"), now=1.0), latest=3)
    assert last_seq(store, "e1") == 1


def test_a_stale_start_with_a_timer_is_refused_too(store: Store) -> None:
    register(store, 2)
    timed = NewExecution(
        make_record("e1"),
        Append("e1", 0, started("e1"), now=1.0, timers=[Timer(3600.0, {"step": "later"})]),
        latest=1,
    )

    [refused] = store.create_executions([timed])

    assert isinstance(refused, StalePlaybookError)
    assert store.get_execution("e1") is None


def test_a_path_with_no_registered_playbook_has_nothing_newer(store: Store) -> None:
    assert store.create_executions([taking(4, new_execution("e1", "a"))]) == [None]
    assert last_seq(store, "e1") == 1
