"""The decider keeps engines by playbook text in a bounded cache, and each execution is
stored with its own playbook's model however the cache turns over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noetl.decision import decider as decider_module
from noetl.decision.decider import Decider
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
