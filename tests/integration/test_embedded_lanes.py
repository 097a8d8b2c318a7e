"""The embedded runtime's two lanes: I/O tools are not held to one thread a core.

A loop of HTTP calls against a real loopback server whose every answer takes a while:
sized from the machine, the runtime has many threads for tools other than python, so the
calls overlap far beyond the machine's cores; `workers=N` holds them to N, as before.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from noetl.core import ExecutionStatus
from noetl.dsl import load_playbook_text
from noetl.runtime.local import embedded_runtime
from tests.helpers.loopback import base_url, serving

ITEMS = 12


class Slow(BaseHTTPRequestHandler):
    """Answers after 0.3 s, counting the requests in progress at once."""

    lock = threading.Lock()
    now = 0
    most = 0

    def do_GET(self) -> None:
        cls = type(self)
        with cls.lock:
            cls.now += 1
            cls.most = max(cls.most, cls.now)
        time.sleep(0.3)
        with cls.lock:
            cls.now -= 1
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def loop_of_calls(url: str) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: calls}}
workflow:
  - step: start
    loop:
      collection: "{{{{ range({ITEMS}) | list }}}}"
      mode: parallel
      max_concurrency: {ITEMS}
    tool: {{kind: http, spec: {{method: GET, url: "{url}/item"}}}}
"""


def most_at_once(tmp_path: Path, workers: int | None) -> int:
    Slow.now = Slow.most = 0
    with serving(Slow) as server:
        text = loop_of_calls(base_url(server))
        playbook = load_playbook_text(text, "calls.yaml").require()
        with embedded_runtime(str(tmp_path / f"noetl-{workers}.db"), workers=workers) as runtime:
            result = runtime.run(playbook, source_text=text)
    assert result.status is ExecutionStatus.OK, result.error
    return Slow.most


def test_http_items_overlap_beyond_the_cores_by_default(tmp_path: Path) -> None:
    assert most_at_once(tmp_path, None) == ITEMS


def test_workers_n_holds_other_tools_to_n_threads(tmp_path: Path) -> None:
    assert most_at_once(tmp_path, 2) == 2
