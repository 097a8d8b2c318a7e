"""A parallel loop of python items, for the tests of batched python tasks."""

from __future__ import annotations


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
