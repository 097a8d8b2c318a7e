"""`evolve` makes what `dataclasses.replace` makes, faster where it may."""

from __future__ import annotations

import dataclasses

import pytest

from noetl.core import Task
from noetl.core.evolve import evolve
from noetl.store.base import Append

TASK = Task(
    task_id="t", execution_id="e", step="s", kind="python", spec={"code": "x"}, args={"a": 1},
    context={}, key="e:s", index=3, secrets=("k",),
)  # fmt: skip


def test_a_copy_with_the_changes_as_replace_makes_it() -> None:
    changed = evolve(TASK, context={"workload": {}}, attempt=2)
    assert changed == dataclasses.replace(TASK, context={"workload": {}}, attempt=2)
    assert (changed.context, changed.attempt, TASK.context, TASK.attempt) == (
        {"workload": {}},
        2,
        {},
        1,
    )
    assert evolve(TASK) == TASK and evolve(TASK) is not TASK
    append = Append(execution_id="e", expected_seq=4, events=[])
    assert evolve(append, expected_seq=7) == dataclasses.replace(append, expected_seq=7)


def test_a_name_that_is_not_a_field_is_refused() -> None:
    with pytest.raises(TypeError, match="'atempt'"):
        evolve(TASK, atempt=2)


@dataclasses.dataclass(frozen=True)
class Checked:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("negative")


@dataclasses.dataclass
class Derived:
    n: int
    twice: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.twice = 2 * self.n


def test_a_class_whose_init_does_more_goes_through_replace() -> None:
    with pytest.raises(ValueError, match="negative"):
        evolve(Checked(1), n=-1)
    assert evolve(Derived(2), n=5).twice == 10
