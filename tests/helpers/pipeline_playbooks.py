"""Upstream-style playbooks with tool pipelines and policy rules, and the loopback HTTP
server they call: run embedded (tests/acceptance/test_upstream_pipelines.py) and on a
server with workers over PostgreSQL (tests/distributed/test_pipelines_distributed.py)."""

from __future__ import annotations

import json
import textwrap
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: {name}\n  path: tests/{name}\n"


class CountingApi(ThreadingHTTPServer):
    """`/flaky/<key>`: 500 for the first two calls of each key, then 200 `{n, key}`;
    `/down/<key>`: always 500; `/gone/<key>`: always 404. Counts the calls by path."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CountingApi

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.calls[self.path] += 1
            number = self.server.calls[self.path]
        kind, _, key = self.path.strip("/").partition("/")
        if kind == "flaky":
            status = 500 if number <= 2 else 200
        else:
            status = 404 if kind == "gone" else 500
        data = json.dumps({"n": number, "key": key}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def playbook(name: str, body: str) -> str:
    return HEAD.format(name=name) + textwrap.dedent(body)


def pipeline_playbook(api: str, key: str) -> str:
    """A pipeline that retries an http call (500, 500, 200), reads its result in SQL and
    in python, loops with `jump` over an `iter` variable, stops with `break`, and sets
    `ctx` variables; a single tool with rules retries as a pipeline of one task; a check
    step asserts what the pipeline's result is."""
    return playbook(
        "pipelines",
        f"""
        workload:
          api: {api}
          key: {key}
          pg: pg_local
        workflow:
          - step: start
            tool:
              - name: fetch
                kind: http
                url: "{{{{ api }}}}/flaky/{{{{ key }}}}-a"
                spec:
                  policy:
                    rules:
                      - when: >-
                          {{{{ output.status == 'error' and output.http.status in [500, 503] }}}}
                        then: {{do: retry, attempts: 4, delay: 0.05, backoff: linear}}
                      - when: "{{{{ output.status == 'error' }}}}"
                        then: {{do: fail}}
                      - else:
                          then:
                            do: continue
                            set: {{ctx.fetched_on: "{{{{ _attempt }}}}"}}
              - name: store
                kind: postgres
                auth: "{{{{ pg }}}}"
                command: >-
                  SELECT {{{{ _prev.data.n }}}}::int AS n, '{{{{ fetch.data.key }}}}' AS key
                set:
                  row: "{{{{ output.rows[0] }}}}"
              - name: count
                kind: python
                input:
                  i: "{{{{ iter.i | default(0) }}}}"
                  n: "{{{{ row.n }}}}"
                code: |
                  result = {{"i": i + 1, "n": n}}
                spec:
                  policy:
                    rules:
                      - when: "{{{{ output.data.i < 3 }}}}"
                        then: {{do: jump, to: count, set: {{iter.i: "{{{{ output.data.i }}}}"}}}}
                      - else:
                          then: {{do: break, set_ctx: {{counted: "{{{{ output.data.i }}}}"}}}}
              - name: never
                kind: python
                code: |
                  raise RuntimeError("break must stop the pipeline")
            next:
              spec: {{mode: exclusive}}
              arcs:
                - step: single
          - step: single
            tool:
              kind: http
              url: "{{{{ api }}}}/flaky/{{{{ key }}}}-b"
              spec:
                policy:
                  rules:
                    - when: "{{{{ output.http.status == 500 }}}}"
                      then: {{do: retry, attempts: 3, delay: 0.05}}
            next:
              spec: {{mode: exclusive}}
              arcs:
                - step: check
          - step: check
            tool:
              kind: python
              input:
                piped: "{{{{ start }}}}"
                single: "{{{{ single.data }}}}"
              code: |
                assert piped == {{"i": 3, "n": 3}}, piped
                assert single["n"] == 3, single
                result = {{"checked": True}}
        """,
    )


def exhausted_playbook(api: str, key: str) -> str:
    """A retry that never succeeds (`attempts: 2`), then a `fail` rule on a 404."""
    return playbook(
        "exhausted",
        f"""
        workload:
          api: {api}
        workflow:
          - step: start
            tool:
              - name: down
                kind: http
                url: "{{{{ api }}}}/down/{key}"
                spec:
                  policy:
                    rules:
                      - when: "{{{{ output.error.kind == 'server_error' }}}}"
                        then: {{do: retry, attempts: 2, delay: 0}}
              - name: after
                kind: python
                code: |
                  result = 1
        """,
    )


def ctx_patch(events: list[dict[str, Any]], step: str) -> dict[str, Any]:
    """The `ctx` the step's task reported (its last attempt's `tool.processed` payload)."""
    for event in reversed(events):
        if event["type"] == "tool.processed" and event.get("step") == step:
            return dict(event["payload"].get("ctx") or {})
    raise AssertionError(f"no tool.processed for {step}")


def loop_playbook() -> str:
    """A pipeline per loop item: the element is `iter.<iterator>` as well as its name."""
    return playbook(
        "looped",
        """
        workflow:
          - step: start
            loop:
              in: [1, 2, 3]
              iterator: number
              spec: {mode: parallel}
            tool:
              - name: square
                kind: python
                input: {n: "{{ iter.number }}", same: "{{ number }}"}
                code: |
                  assert n == same
                  result = n * n
              - name: label
                kind: python
                input: {sq: "{{ _prev }}"}
                code: |
                  result = {"square": sq}
            next:
              spec: {mode: exclusive}
              arcs:
                - step: check
          - step: check
            tool:
              kind: python
              input: {looped: "{{ start }}"}
              code: |
                assert sorted(r["square"] for r in looped) == [1, 4, 9], looped
                result = {"checked": True}
        """,
    )
