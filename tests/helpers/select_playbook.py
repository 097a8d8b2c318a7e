"""A playbook whose steps return results far larger than what they keep (`result.select`),
read back whole by the `artifact` tool: shared by the embedded and distributed tests."""

from __future__ import annotations

import json
from typing import Any

ITEM_BYTES = 2000
ITEMS = 200  # a result of about 400 KB
SELECT_PLAYBOOK = f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: select_results, path: tests/select_results}}
workflow:
  - step: start
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              items = [{{"id": i, "data": "x" * {ITEM_BYTES}}} for i in range({ITEMS})]
              return {{"status": "ok", "count": len(items), "items": items}}
    result:
      select: [status, count, absent]
      as: big
    next: [pages]
  - step: pages
    loop:
      collection: [0, 1, 2]
      element: page
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              return {{"page": args["page"], "rows": ["r" * 1000] * 100}}
      args: {{page: "{{{{ page }}}}"}}
    result:
      select: [page]
      collect: {{into: pages}}
    next: [load]
  - step: load
    tool:
      kind: artifact
      ref: "{{{{ big._ref }}}}"
    result:
      pick: "{{{{ {{'n': this['items'] | length, 'last': this['items'][-1]['id']}} }}}}"
      as: loaded
    next: [check]
  - step: check
    tool:
      kind: noop
      args:
        count: "{{{{ big.count }}}}"
        kept_items: "{{{{ 'items' in big }}}}"
        bytes_over: "{{{{ big._bytes > {ITEMS * ITEM_BYTES} }}}}"
        pages: "{{{{ pages | map(attribute='page') | list }}}}"
        page_refs: "{{{{ pages | map(attribute='_ref') | unique | list | length }}}}"
        loaded: "{{{{ loaded }}}}"
    result: {{as: verdict}}
"""
EXPECTED_VERDICT: dict[str, Any] = {
    "count": ITEMS,
    "kept_items": False,
    "bytes_over": True,
    "pages": [0, 1, 2],
    "page_refs": 3,
    "loaded": {"n": ITEMS, "last": ITEMS - 1},
}
# No event but the one that reads the whole result back (the artifact step's
# `tool.processed`, and the `step.started` of the step after it, whose context holds it)
# carries it: every other event stays small whatever the tools returned.
SMALL_EVENT_BYTES = 8_000


def big_events(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(type, step) of the events over SMALL_EVENT_BYTES of JSON."""
    return [
        (e["type"], e.get("step"))
        for e in events
        if len(json.dumps(e.get("payload"))) > SMALL_EVENT_BYTES
    ]
