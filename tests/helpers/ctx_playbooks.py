"""An upstream-style playbook that keeps its state in execution variables (`ctx`): set by
a step's `set` and an arc's `set`, read by a loop's `in` and `iter`, rendered into SQL and
python code, and read by code on the worker (`context.get('ctx')`). Shared by the
embedded (`noetl run`) and the distributed tests."""

from __future__ import annotations

from typing import Any

from noetl.core import Event
from noetl.engine import ExecutionState, fold

CTX_PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: ctx_flow
  path: tests/ctx_flow
workload:
  pg_auth: pg_local
  table: ctx_words
workflow:
  - step: start
    tool:
      kind: python
      input: {words: [a, b, c]}
      code: |
        result = {"words": words, "count": len(words)}
    set:
      ctx.words: "{{ result.words }}"
      ctx.seen: 0
    next:
      spec: {mode: exclusive}
      arcs:
        - step: never
          when: "{{ ctx.seen > 0 }}"
        - step: each
          when: "{{ ctx.seen == 0 and start.count == 3 }}"
          set:
            ctx.started_by: "{{ event.name }}"
  - step: never
    tool: {kind: python, code: "raise RuntimeError('ctx was read wrong')"}
  - step: each
    loop:
      in: "{{ ctx.words }}"
      iterator: word
      spec: {mode: parallel, max_in_flight: 2}
    tool:
      kind: python
      input: {w: "{{ iter.word }}", i: "{{ iter._index }}"}
      code: |
        assert context.get("iter") == {"word": w, "_index": i}, context.get("iter")
        result = {"w": w.upper(), "i": i}
    set:
      ctx.upper: "{{ result | map(attribute='w') | list }}"
    next:
      spec: {mode: exclusive}
      arcs:
        - step: store
          set:
            ctx.seen: "{{ ctx.seen + (result | length) }}"
            ctx.db.table: "{{ table }}"
  - step: store
    tool:
      kind: postgres
      auth: "{{ pg_auth }}"
      command: |
        CREATE TABLE {{ ctx.db.table }} (word text, position int);
        {% for w in ctx.upper %}
        INSERT INTO {{ ctx.db.table }} VALUES ('{{ w }}', {{ loop.index0 }});
        {% endfor %}
        SELECT count(*) AS n FROM {{ ctx.db.table }};
    set:
      ctx.stored: "{{ result.rows[0].n }}"
    next:
      spec: {mode: exclusive}
      arcs:
        - step: check
  - step: check
    tool:
      kind: python
      input:
        stored: "{{ ctx.stored }}"
        missing: "{{ ctx.missing | default('none') }}"
      code: |
        upper = {{ ctx.upper | tojson }}
        assert upper == ["A", "B", "C"], upper
        assert stored == 3, stored
        assert "{{ ctx.started_by }}" == "call.done"
        assert missing == "none"
        assert context.get("ctx")["db"] == {"table": "ctx_words"}  # as the worker has it
        result = {"seen": {{ ctx.seen }}, "table": "{{ ctx.db.table }}"}
"""

CTX_FINAL = {
    "words": ["a", "b", "c"],
    "seen": 3,
    "started_by": "call.done",
    "upper": ["A", "B", "C"],
    "db": {"table": "ctx_words"},
    "stored": 3,
}
CTX_CHECK = {"seen": 3, "table": "ctx_words"}


def ctx_of(events: list[dict[str, Any]], steps: list[str]) -> dict[str, Any]:
    """The execution's `ctx` folded again from its recorded events."""
    state = ExecutionState.new("folded", steps)
    fold(state, (Event.from_dict({**e, "execution_id": "folded"}) for e in events))
    return state.ctx


CTX_STEPS = ["start", "never", "each", "store", "check"]
