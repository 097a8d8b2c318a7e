"""Retry `on` (which failures retry: error, status_code, exception) and `scope` (the
failed tool, or the step's whole chain), run embedded against a loopback HTTP server and
real python processes; the events say which trigger matched."""

from __future__ import annotations

import json
import textwrap
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import noetl
from noetl.core import EventType
from noetl.store import open_store


class StatusApi(ThreadingHTTPServer):
    """`/<status>/<times>/<key>`: answers `status` for the first `times` calls of the
    path, then 200 `{"n": calls}`."""

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
    server: StatusApi

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.calls[self.path] += 1
            number = self.server.calls[self.path]
        status, times, _ = self.path.strip("/").split("/", 2)
        code = int(status) if number <= int(times) else 200
        data = json.dumps({"n": number}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def api() -> Iterator[StatusApi]:
    server = StatusApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def run(tmp_path: Path, body: str, **workload: Any) -> tuple[noetl.RunReport, list[Any]]:
    text = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: triggers}\n"
    text += textwrap.dedent(body)
    db = tmp_path / "n.db"
    report = noetl.run(text, workload, db=db, workers=2, timeout=60)
    store = open_store(str(db))
    try:
        events = store.load_events(report.execution_id)
    finally:
        store.close()
    return report, events


def retries(events: list[Any]) -> list[dict[str, Any]]:
    return [e.payload for e in events if e.type == EventType.RETRY_STARTED]


FETCH = """\
workload: {{url: ""}}
workflow:
  - step: start
    tool:
      kind: http
      spec: {{url: "{{{{ workload.url }}}}"}}
      retry:
        max_attempts: 4
        initial_delay: 0.01
        jitter: false
        {retry}
"""


def test_status_code_retries_the_listed_statuses(tmp_path: Path, api: StatusApi) -> None:
    body = FETCH.format(retry="on: [status_code]\n        status_codes: [404]")
    report, events = run(tmp_path, body, url=f"{api.base}/404/2/a")
    assert report.ok, report.error
    assert api.calls["/404/2/a"] == 3
    assert [(r["attempt"], r["trigger"]) for r in retries(events)] == [
        (2, "status_code"),
        (3, "status_code"),
    ]


def test_status_code_leaves_other_statuses_alone(tmp_path: Path, api: StatusApi) -> None:
    body = FETCH.format(retry="on: status_code\n        status_codes: [429]")
    report, events = run(tmp_path, body, url=f"{api.base}/503/1/b")
    assert not report.ok  # a 503 is not listed: the first answer stands
    assert retries(events) == []
    assert api.calls["/503/1/b"] == 1


def test_status_code_defaults_to_the_transient_statuses(tmp_path: Path, api: StatusApi) -> None:
    report, events = run(
        tmp_path, FETCH.format(retry="on: [status_code]"), url=f"{api.base}/503/2/c"
    )
    assert report.ok, report.error
    assert len(retries(events)) == 2


PYTHON = """\
workflow:
  - step: start
    tool:
      kind: python
      args: {{error: "{{{{ workload.error }}}}"}}
      code: |
        import os, tempfile
        class QuotaExceeded(Exception):
            pass
        def main(context, args):
            marker = os.path.join(tempfile.gettempdir(), "noetl-trig-" + context["execution_id"])
            if not os.path.exists(marker):
                open(marker, "w").close()
                kinds = {{"key": KeyError, "value": ValueError, "quota": QuotaExceeded}}
                raise kinds[args["error"]]("first")
            return "second"
      retry:
        max_attempts: 3
        initial_delay: 0.01
        on: [exception]
        exceptions: [KeyError, QuotaExceeded]
"""


@pytest.mark.parametrize(("error", "retried"), [("key", True), ("quota", True), ("value", False)])
def test_exception_retries_only_the_named_types(tmp_path: Path, error: str, retried: bool) -> None:
    report, events = run(tmp_path, PYTHON.format(), error=error)
    assert report.ok is retried, report.error
    assert [r.get("trigger") for r in retries(events)] == (["exception"] if retried else [])


CHAIN = """\
workload: {{log: ""}}
workflow:
  - step: start
    tool:
      kind: pipeline
      spec:
        tasks:
          - name: first
            tool:
              kind: python
              args: {{log: "{{{{ workload.log }}}}"}}
              code: |
                def main(context, args):
                    with open(args["log"], "a") as f:
                        f.write("first\\n")
                    return 1
          - name: second
            tool:
              kind: python
              args: {{log: "{{{{ workload.log }}}}"}}
              code: |
                def main(context, args):
                    with open(args["log"]) as f:
                        runs = f.read().count("second")
                    with open(args["log"], "a") as f:
                        f.write("second\\n")
                    if runs == 0:
                        raise ConnectionError("flaky")
                    return 2
    retry: {{max_attempts: 2, initial_delay: 0.01{scope}}}
"""


@pytest.mark.parametrize(
    ("scope", "runs"),
    [
        ("", ["first", "second", "second"]),
        (", scope: chain", ["first", "second", "first", "second"]),
    ],
)
def test_chain_scope_runs_the_whole_chain_again(
    tmp_path: Path, scope: str, runs: list[str]
) -> None:
    log = tmp_path / "runs.log"
    report, events = run(tmp_path, CHAIN.format(scope=scope), log=str(log))
    assert report.ok, report.error
    assert log.read_text().split() == runs
    (retry,) = retries(events)
    assert retry.get("scope") == ("chain" if scope else None)


CASE_CHAIN = """\
workload: {{log: ""}}
workflow:
  - step: start
    spec: {{eval_mode: on_entry}}
    case:
      - when: "{{{{ true }}}}"
        then:
          tool:
            kind: python
            args: {{log: "{{{{ workload.log }}}}"}}
            code: |
              def main(context, args):
                  with open(args["log"], "a") as f:
                      f.write("token\\n")
                  return "t"
          result: {{as: token}}
    tool:
      kind: python
      args: {{log: "{{{{ workload.log }}}}", token: "{{{{ token }}}}"}}
      code: |
        def main(context, args):
            with open(args["log"]) as f:
                runs = f.read().count("fetch")
            with open(args["log"], "a") as f:
                f.write("fetch\\n")
            if runs < 2:
                raise ConnectionError("token expired")
            return args["token"]
    retry: {{max_attempts: {attempts}, initial_delay: 0.01{scope}}}
"""


@pytest.mark.parametrize(
    ("scope", "attempts", "ok", "runs"),
    [
        ("", 3, True, ["token", "fetch", "fetch", "fetch"]),
        (", scope: chain", 3, True, ["token", "fetch", "token", "fetch", "token", "fetch"]),
        (", scope: chain", 2, False, ["token", "fetch", "token", "fetch"]),
    ],
)
def test_chain_scope_runs_the_case_branch_tools_again(
    tmp_path: Path, scope: str, attempts: int, ok: bool, runs: list[str]
) -> None:
    log = tmp_path / "runs.log"
    body = CASE_CHAIN.format(scope=scope, attempts=attempts)
    report, events = run(tmp_path, body, log=str(log))
    assert report.ok is ok, report.error
    assert log.read_text().split() == runs
    started = [e.payload for e in events if e.type == EventType.TOOL_STARTED]
    assert [t["task"]["attempt"] for t in started] == (
        list(range(1, attempts + 1)) if scope else [1]
    )
    if scope:
        assert all(r.get("restart") == "case" for r in retries(events))
