"""The decider keeps engines by playbook text in a bounded cache, and each execution is
stored with its own playbook's model however the cache turns over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noetl.core import ConcurrencyError
from noetl.decision import decider as decider_module
from noetl.decision.decider import Decider
from noetl.dsl.policy import DslPolicy
from noetl.errors import PlaybookError
from noetl.store import SqliteStore

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: p{n}}}
workflow:
  - step: start
    tool: {{kind: noop, args: {{n: {n}}}}}
"""


def test_engines_are_bounded_and_each_execution_keeps_its_own_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decider_module, "ENGINES", 2)
    store = SqliteStore(tmp_path / "noetl.db")
    try:
        decider = Decider(store)
        started = {}
        for round_ in range(3):  # engines dropped and built again, their models dumped again
            for n in range(5):
                execution_id = decider.start(
                    PLAYBOOK.format(n=n), path=None, workload=None, parent_execution_id=None,
                    now=1.0 + round_,
                )  # fmt: skip
                started[execution_id] = n
            assert len(decider._engines) <= 2
            assert len(decider._dumped) <= 2
        for execution_id, n in started.items():
            compiled = store.get_compiled(execution_id)
            assert compiled is not None
            assert json.loads(compiled)["metadata"]["name"] == f"p{n}"
    finally:
        store.close()


def test_a_dsl_policy_is_checked_once_per_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment's DSL policy (here: strict) is checked as a text first starts; the
    next starts of that text read no YAML. A text the policy refuses is refused each time."""
    reads: list[str] = []
    real = decider_module.load_playbook_text

    def counted(text: str, name: str = "<playbook>", **kwargs: Any) -> Any:
        reads.append(name)
        return real(text, name, **kwargs)

    monkeypatch.setattr(decider_module, "load_playbook_text", counted)
    store = SqliteStore(tmp_path / "noetl.db")
    try:
        decider = Decider(store, dsl=DslPolicy(strict=True))
        for now in (1.0, 2.0, 3.0):
            decider.start(
                PLAYBOOK.format(n=1), path=None, workload=None, parent_execution_id=None,
                now=now,
            )  # fmt: skip
        assert len(reads) == 2  # the policy's check and the engine's build, once each
        warned = PLAYBOOK.format(n=2) + "    unknown_field: 1\n"
        for _ in range(2):
            with pytest.raises(PlaybookError):
                decider.start(warned, path=None, workload=None, parent_execution_id=None, now=4.0)
        assert len(reads) == 4
    finally:
        store.close()


def test_a_start_makes_another_id_when_its_own_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id the start made that another process made and stored first is made again;
    an id the caller chose is refused."""
    store = SqliteStore(tmp_path / "noetl.db")
    try:
        decider = Decider(store)
        taken = decider.start(
            PLAYBOOK.format(n=1), path=None, workload=None, parent_execution_id=None, now=1.0
        )
        made = iter([taken, taken, "2000000000001"])
        monkeypatch.setattr(decider_module, "new_execution_id", lambda _now: next(made))
        started = decider.start(
            PLAYBOOK.format(n=2), path=None, workload=None, parent_execution_id=None, now=2.0
        )
        assert started == "2000000000001"
        assert store.get_execution(started) is not None
        assert json.loads(store.get_compiled(taken) or "{}")["metadata"]["name"] == "p1"
        with pytest.raises(ConcurrencyError):
            decider.start(
                PLAYBOOK.format(n=3), path=None, workload=None, parent_execution_id=None,
                now=3.0, execution_id=taken,
            )  # fmt: skip
        made = iter([taken] * decider_module.ID_TRIES)
        with pytest.raises(ConcurrencyError):
            decider.start(
                PLAYBOOK.format(n=4), path=None, workload=None, parent_execution_id=None,
                now=4.0,
            )  # fmt: skip
    finally:
        store.close()
