"""A playbook whose steps return results over the inline limit without `result.select`:
the worker spills them to the result store and reports envelopes; a later step reads a
small field directly, a field the envelope left out (loaded from the result store field by
field), and the whole result through the `artifact` tool. Shared by the embedded and
distributed tests."""

from __future__ import annotations

import json
from typing import Any

ROWS = 1000
ROW_BYTES = 1000  # a result of about 1 MB
PAGE_ITEMS = 300  # a loop item's result of about 300 KB, over the 256 KiB default
SPILL_PLAYBOOK = f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: spill_results, path: tests/spill_results}}
workflow:
  - step: start
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              rows = [{{"id": i, "data": "x" * {ROW_BYTES}}} for i in range({ROWS})]
              return {{"status": "ok", "count": len(rows), "rows": rows}}
    result: {{as: big}}
    next: [pages]
  - step: pages
    loop:
      collection: [0, 1]
      element: page
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              return ["p" * 1000] * {PAGE_ITEMS}
      args: {{page: "{{{{ page }}}}"}}
    result:
      collect: {{into: pages}}
    next: [load]
  - step: load
    tool:
      kind: artifact
      ref: "{{{{ big._ref }}}}"
    result:
      pick: "{{{{ {{'n': this['rows'] | length, 'last': this['rows'][-1]['id']}} }}}}"
      as: loaded
    next: [check]
  - step: check
    tool:
      kind: noop
      args:
        status: "{{{{ big.status }}}}"
        count: "{{{{ big.count }}}}"
        in_envelope: "{{{{ 'rows' in (big | list) }}}}"
        rows_read: "{{{{ big.rows | length }}}}"
        last_row: "{{{{ big.rows[-1].id }}}}"
        spilled: "{{{{ big._spilled }}}}"
        bytes_over: "{{{{ big._bytes > {ROWS * ROW_BYTES} }}}}"
        page_counts: "{{{{ pages | map(attribute='_count') | list }}}}"
        loaded: "{{{{ loaded }}}}"
    result: {{as: verdict}}
"""
EXPECTED_VERDICT: dict[str, Any] = {
    "status": "ok",
    "count": ROWS,
    "in_envelope": False,  # the event log and the state keep the envelope alone
    "rows_read": ROWS,  # a field left out of it reads from the result store
    "last_row": ROWS - 1,
    "spilled": True,
    "bytes_over": True,
    "page_counts": [PAGE_ITEMS, PAGE_ITEMS],
    "loaded": {"n": ROWS, "last": ROWS - 1},
}
# An event whose payload is over this many bytes of JSON is big: only the artifact step's
# `tool.processed`, which reads the whole result back, may be.
SMALL_EVENT_BYTES = 20_000


def big_events(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(type, step) of the events over SMALL_EVENT_BYTES of JSON."""
    return [
        (e["type"], e.get("step"))
        for e in events
        if len(json.dumps(e.get("payload"))) > SMALL_EVENT_BYTES
    ]
