"""A parallel loop of python items, and a count of the batches its items go to children in,
for the tests of batched python tasks."""

from __future__ import annotations

import pytest

from noetl.core import Task
from noetl.worker.python_pool import PythonPool


def python_loop(n: int, body: str, *, timeout_ms: int | None = None) -> str:
    """A playbook whose step `fan` runs `body` (the lines of `main(context, args)`, with
    `time` imported and the item as `args['x']`) for the items 0 to n - 1, 64 at once,
    collecting the results into `doubled`."""
    code = "\n".join(f"            {line}" for line in body.splitlines())
    limit = "" if timeout_ms is None else f"\n      timeout_ms: {timeout_ms}"
    return f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: python_loop}}
workflow:
  - step: fan
    loop:
      collection: "{{{{ range({n}) | list }}}}"
      element: x
      mode: parallel
      max_concurrency: 64
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
{code}
      args: {{x: "{{{{ x }}}}"}}{limit}
    result:
      collect: {{into: doubled, mode: list}}
"""


def count_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the batches sent to python children from now on (`run_ahead` wrapped
    for the test)."""
    sizes: list[int] = []
    run_ahead = PythonPool.run_ahead

    def counted(self: PythonPool, tasks: list[Task]) -> int:
        sizes.append(len(tasks))
        return run_ahead(self, tasks)

    monkeypatch.setattr(PythonPool, "run_ahead", counted)
    return sizes
