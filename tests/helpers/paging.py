"""A paginated JSON API on loopback and a playbook that pages through it with a cycle of
the graph (`fetch -> check -> fetch`), shared by the embedded and distributed tests."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

PAGES = 4
PER_PAGE = 3


class PagingHandler(BaseHTTPRequestHandler):
    """`GET /items?page=N`: PER_PAGE items and `next` (null on the last of PAGES pages)."""

    def do_GET(self) -> None:
        query = parse_qs(urlparse(self.path).query)
        page = int(query.get("page", ["1"])[0])
        items = [page * 100 + i for i in range(PER_PAGE)] if 1 <= page <= PAGES else []
        body = json.dumps(
            {"page": page, "items": items, "next": page + 1 if page < PAGES else None}
        )
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def paging_playbook(api: str) -> str:
    """Native DSL: fetch a page, check it, go back to fetch while there is a next page."""
    return f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: paging_cycle, path: tests/paging_cycle}}
workload: {{api: "{api}"}}
workflow:
  - step: start
    tool: noop
    next: [fetch]
  - step: fetch
    tool:
      kind: http
      url: "{{{{ workload.api }}}}/items"
      params: {{page: "{{{{ (pages | default([]) | length) + 1 }}}}"}}
    result:
      pick: "{{{{ this.data }}}}"
      collect: {{into: pages}}
    next: [check]
  - step: check
    tool: noop
    next:
      mode: exclusive
      to:
        - {{step: fetch, when: "{{{{ pages[-1].next is not none }}}}"}}
        - {{step: report}}
  - step: report
    tool:
      kind: noop
      args:
        items: "{{{{ pages | map(attribute='items') | sum(start=[]) }}}}"
        fetched: "{{{{ pages | length }}}}"
    result: {{as: report}}
"""


EXPECTED_REPORT = {
    "items": [page * 100 + i for page in range(1, PAGES + 1) for i in range(PER_PAGE)],
    "fetched": PAGES,
}
