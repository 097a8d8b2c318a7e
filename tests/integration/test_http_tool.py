"""The http tool against a real HTTP server on loopback."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from noetl.core import Task
from noetl.credentials.scope import EnvSecrets
from noetl.tools.http import HttpTool, new_traceparent, safe_url
from noetl.worker.tools import ToolRegistry

MB = 1024 * 1024
TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
TOKEN = "tok-canary-123"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def do_GET(self) -> None:
        self._route()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def _route(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        parts = url.path.strip("/").split("/")
        route = parts[0]
        if route == "json":
            self._send(200, json.dumps({"hello": "world", "n": 1}), "application/json")
        elif route == "text":
            self._send(200, "plain text, not JSON", "text/plain; charset=utf-8")
        elif route == "flaky":  # /flaky/<name>: 500 the first time, 200 after
            self.server.calls[url.path] += 1
            if self.server.calls[url.path] == 1:
                self._send(500, "boom: the database is down", "text/plain")
            else:
                self._send(200, json.dumps({"recovered": True}), "application/json")
        elif route == "status":  # /status/<code>
            self._send(int(parts[1]), f"status {parts[1]} body " + "x" * 500, "text/plain")
        elif route == "slow":
            time.sleep(float(query.get("s", ["1.0"])[0]))
            self._send(200, "late", "text/plain")
        elif route == "big":  # /big?size=N[&length=0]
            self._big(int(query["size"][0]), with_length=query.get("length") != ["0"])
        elif route == "redirect":
            self.send_response(302)
            self.send_header("Location", "/json")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif route == "echo":
            self.server.authorizations.append(self.headers.get("Authorization"))
            echoed = {
                "method": self.command,
                "path": url.path,
                "query": query,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode("utf-8"),
            }
            self._send(200, json.dumps(echoed), "application/json")
        else:
            self._send(404, "no such route", "text/plain")

    def _send(self, status: int, text: str, content_type: str) -> None:
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Served-By", "Loopback")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _big(self, size: int, *, with_length: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if with_length:
            self.send_header("Content-Length", str(size))
        else:  # delimited by closing the connection: the client must count
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        chunk = b"a" * 65536
        sent = 0
        while sent < size:
            piece = chunk[: size - sent]
            self.wfile.write(piece)
            sent += len(piece)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.calls: Counter[str] = Counter()
        self.authorizations: list[str | None] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up early (timeout, refused body) is what some tests do

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    httpd = Server()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def tool() -> Iterator[HttpTool]:
    http = HttpTool()
    try:
        yield http
    finally:
        http.close()


def make_task(spec: dict[str, Any], **changes: Any) -> Task:
    fields: dict[str, Any] = {
        "task_id": "e.call",
        "execution_id": "e",
        "step": "call",
        "kind": "http",
        "spec": spec,
        "args": {},
        "context": {},
        "key": "e:call",
    }
    fields.update(changes)
    return Task(**fields)


def test_a_json_response_is_parsed(server: Server, tool: HttpTool) -> None:
    outcome = tool.run(make_task({"url": f"{server.base}/json"}))
    assert outcome.ok, outcome.error
    assert outcome.task_id == "e.call"
    assert outcome.this["status_code"] == 200
    assert outcome.this["data"] == {"hello": "world", "n": 1}
    assert outcome.this["headers"]["content-type"] == "application/json"
    assert outcome.this["headers"]["x-served-by"] == "Loopback"  # names lower-cased
    assert outcome.duration_ms > 0
    json.dumps(outcome.to_payload())  # the result is plain data


def test_a_text_response_is_text(server: Server, tool: HttpTool) -> None:
    outcome = tool.run(make_task({"url": f"{server.base}/text"}))
    assert outcome.ok
    assert outcome.this["data"] == "plain text, not JSON"


def test_a_500_is_retryable_and_the_retry_succeeds(server: Server, tool: HttpTool) -> None:
    task = make_task({"url": f"{server.base}/flaky/once", "method": "get"})
    first = tool.run(task)
    assert not first.ok
    assert first.retryable
    assert first.error_type == "HttpError"
    assert first.error == (
        f"HTTP 500 from GET {server.base}/flaky/once: boom: the database is down"
    )
    assert first.this["status_code"] == 500
    second = tool.run(make_task(task.spec, attempt=2))
    assert second.ok
    assert second.this["data"] == {"recovered": True}


def test_a_404_is_fatal(server: Server, tool: HttpTool) -> None:
    outcome = tool.run(make_task({"url": f"{server.base}/status/404"}))
    assert not outcome.ok
    assert not outcome.retryable
    assert outcome.error_type == "HttpError"
    assert outcome.error is not None
    assert outcome.error.startswith(f"HTTP 404 from GET {server.base}/status/404: status 404")
    # only the first 200 characters of the body
    assert len(outcome.error) == len(f"HTTP 404 from GET {server.base}/status/404: ") + 200


def test_an_error_without_a_body_has_no_trailing_colon(server: Server, tool: HttpTool) -> None:
    outcome = tool.run(make_task({"url": f"{server.base}/status/404", "method": "HEAD"}))
    assert not outcome.ok
    assert outcome.error == f"HTTP 404 from HEAD {server.base}/status/404"


@pytest.mark.parametrize("status", [408, 429, 503])
def test_408_429_and_5xx_are_retryable(server: Server, tool: HttpTool, status: int) -> None:
    outcome = tool.run(make_task({"url": f"{server.base}/status/{status}"}))
    assert not outcome.ok
    assert outcome.retryable
    assert outcome.error_type == "HttpError"
    assert outcome.error is not None
    assert outcome.error.startswith(f"HTTP {status} from GET")


def test_a_response_slower_than_the_timeout_is_retryable(server: Server, tool: HttpTool) -> None:
    started = time.monotonic()
    outcome = tool.run(make_task({"url": f"{server.base}/slow?s=1.5", "timeout": 0.3}))
    assert time.monotonic() - started < 1.2
    assert not outcome.ok
    assert outcome.retryable
    assert outcome.error_type == "ReadTimeout"
    assert outcome.error is not None
    assert f"GET {server.base}/slow" in outcome.error
    assert "s=1.5" not in outcome.error


def test_the_task_timeout_applies_when_the_spec_has_none(server: Server, tool: HttpTool) -> None:
    outcome = tool.run(make_task({"url": f"{server.base}/slow?s=1.5"}, timeout_ms=300))
    assert not outcome.ok
    assert outcome.retryable
    assert outcome.error_type == "ReadTimeout"


def test_a_5_mb_body_is_read(server: Server, tool: HttpTool) -> None:
    outcome = tool.run(make_task({"url": f"{server.base}/big?size={5 * MB}"}))
    assert outcome.ok, outcome.error
    assert len(outcome.this["data"]) == 5 * MB


@pytest.mark.parametrize("length", ["1", "0"], ids=["content-length", "until-close"])
def test_a_body_over_10_mb_is_refused(server: Server, tool: HttpTool, length: str) -> None:
    outcome = tool.run(make_task({"url": f"{server.base}/big?size={11 * MB}&length={length}"}))
    assert not outcome.ok
    assert not outcome.retryable
    assert outcome.error_type == "FatalError"
    assert outcome.error == (
        f"response body of GET {server.base}/big is larger than the http tool's "
        "10 MB limit; refused"
    )


def test_the_request_carries_key_trace_body_and_params(server: Server, tool: HttpTool) -> None:
    task = make_task(
        {
            "url": f"{server.base}/echo?fixed=1",
            "method": "POST",
            "headers": {"X-Custom": "yes", "X-Number": 7},
            "params": {"page": 2, "tag": ["a", "b"], "q": "x y"},
            "json": {"name": "noetl", "items": [1, 2]},
        },
        args={"ignored": True},
    )
    outcome = tool.run(task)
    assert outcome.ok, outcome.error
    echoed = outcome.this["data"]
    assert echoed["method"] == "POST"
    assert echoed["headers"]["idempotency-key"] == task.key
    assert TRACEPARENT.match(echoed["headers"]["traceparent"])
    assert echoed["headers"]["x-custom"] == "yes"
    assert echoed["headers"]["x-number"] == "7"
    assert echoed["headers"]["content-type"] == "application/json"
    assert json.loads(echoed["body"]) == {"name": "noetl", "items": [1, 2]}
    assert echoed["query"] == {"fixed": ["1"], "page": ["2"], "tag": ["a", "b"], "q": ["x y"]}


def test_args_are_the_json_body_of_a_post_without_one(server: Server, tool: HttpTool) -> None:
    post = tool.run(make_task({"url": f"{server.base}/echo", "method": "post"}, args={"a": 1}))
    assert json.loads(post.this["data"]["body"]) == {"a": 1}
    get = tool.run(make_task({"url": f"{server.base}/echo"}, args={"a": 1}))
    assert get.this["data"]["body"] == ""
    assert get.this["data"]["query"] == {}
    text = tool.run(
        make_task({"url": f"{server.base}/echo", "method": "PUT", "body": "raw"}, args={"a": 1})
    )
    assert text.this["data"]["body"] == "raw"


def test_the_spec_and_the_context_win_over_defaults(server: Server, tool: HttpTool) -> None:
    inherited = new_traceparent()
    echoed = tool.run(
        make_task({"url": f"{server.base}/echo"}, context={"traceparent": inherited})
    ).this["data"]["headers"]
    assert echoed["traceparent"] == inherited
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    echoed = tool.run(
        make_task(
            {
                "url": f"{server.base}/echo",
                "headers": {"idempotency-key": "mine", "TraceParent": own},
            },
            context={"traceparent": inherited},
        )
    ).this["data"]["headers"]
    assert echoed["idempotency-key"] == "mine"
    assert echoed["traceparent"] == own
    malformed = tool.run(
        make_task({"url": f"{server.base}/echo"}, context={"traceparent": "not-a-trace"})
    ).this["data"]["headers"]["traceparent"]
    assert TRACEPARENT.match(malformed)


def test_new_traceparents_are_valid_and_distinct() -> None:
    values = {new_traceparent() for _ in range(100)}
    assert len(values) == 100
    assert all(TRACEPARENT.match(v) and v.endswith("-01") for v in values)


def test_a_redirect_is_followed_unless_disabled(server: Server, tool: HttpTool) -> None:
    followed = tool.run(make_task({"url": f"{server.base}/redirect"}))
    assert followed.ok
    assert followed.this["data"] == {"hello": "world", "n": 1}
    kept = tool.run(make_task({"url": f"{server.base}/redirect", "follow_redirects": False}))
    assert kept.ok
    assert kept.this["status_code"] == 302
    assert kept.this["headers"]["location"] == "/json"


def test_a_refused_connection_is_retryable(tool: HttpTool) -> None:
    # Bound but not listening: a connection to it is refused, and no one can take the port.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        outcome = tool.run(
            make_task({"url": f"http://user:pw@127.0.0.1:{port}/x?key=sekrit", "method": "DELETE"})
        )
    assert not outcome.ok
    assert outcome.retryable
    assert outcome.error_type == "ConnectError"
    assert outcome.error is not None
    assert outcome.error.startswith(f"ConnectError on DELETE http://127.0.0.1:{port}/x: ")
    assert "pw" not in outcome.error
    assert "sekrit" not in outcome.error


def test_error_urls_lose_userinfo_and_query_values(server: Server, tool: HttpTool) -> None:
    url = server.base.replace("http://", "http://alice:hunter2@") + "/status/503?api_key=k123"
    outcome = tool.run(make_task({"url": url, "params": {"token": "p456"}}))
    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.startswith(f"HTTP 503 from GET {server.base}/status/503: ")
    for leaked in ("alice", "hunter2", "k123", "p456"):
        assert leaked not in outcome.error
    assert safe_url("https://u:p@[::1]:8443/a/b?c=d#e") == "https://[::1]:8443/a/b"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({}, "spec.url: Field required"),
        ({"url": "http://x", "method": "FETCH"}, "spec.method:"),
        ({"url": "http://x", "timeout": 0}, "spec.timeout:"),
        ({"url": "http://x", "verb": "GET"}, "spec.verb: Extra inputs"),
        ({"url": "http://x", "json": {}, "body": "b"}, "spec.json or spec.body, not both"),
    ],
)
def test_a_bad_spec_is_fatal_and_names_the_field(
    tool: HttpTool, spec: dict[str, Any], field: str
) -> None:
    outcome = tool.run(make_task(spec))
    assert not outcome.ok
    assert not outcome.retryable
    assert outcome.error_type == "FatalError"
    assert outcome.error is not None
    assert outcome.error.startswith("invalid http spec: ")
    assert field in outcome.error


def test_a_bad_url_or_header_is_fatal_and_not_quoted(server: Server, tool: HttpTool) -> None:
    bad_port = tool.run(make_task({"url": "http://127.0.0.1:notaport/x"}))
    assert not bad_port.ok
    assert not bad_port.retryable
    assert bad_port.error_type == "FatalError"
    assert bad_port.error == "spec.url is not a valid URL: GET http://127.0.0.1:notaport/x"
    bad_scheme = tool.run(make_task({"url": "ftp://127.0.0.1/x"}))
    assert not bad_scheme.ok
    assert not bad_scheme.retryable
    assert bad_scheme.error_type == "UnsupportedProtocol"
    for value in ("caf\u00e9-s3cr3t", "line\nbreak-s3cr3t"):
        bad_header = tool.run(make_task({"url": f"{server.base}/echo", "headers": {"X": value}}))
        assert not bad_header.ok
        assert not bad_header.retryable
        assert bad_header.error is not None
        assert "s3cr3t" not in bad_header.error


def test_a_secret_header_reaches_the_server_and_is_masked_in_the_outcome(
    server: Server, tool: HttpTool
) -> None:
    registry = ToolRegistry([tool], secrets=EnvSecrets({"NOETL_SECRET_TOKEN": TOKEN}))
    task = make_task(
        {"url": f"{server.base}/echo", "headers": {"Authorization": "Bearer <<secret:TOKEN>>"}},
        secrets=("TOKEN",),
    )
    outcome = registry.run(task)
    assert outcome.ok, outcome.error
    assert server.authorizations[-1] == f"Bearer {TOKEN}"  # the server got the real token
    echoed = outcome.this["data"]  # and echoed it back: the outcome shows only the mask
    assert echoed["headers"]["authorization"] == "Bearer ***"
    assert TOKEN not in json.dumps(outcome.to_payload())
    assert "***" in json.dumps(outcome.this)


def test_concurrent_tasks_share_one_client(server: Server, tool: HttpTool) -> None:
    results: list[bool] = []

    def call(i: int) -> None:
        task = make_task({"url": f"{server.base}/echo", "params": {"i": i}}, key=f"e:call:{i}")
        outcome = tool.run(task)
        results.append(
            outcome.ok and outcome.this["data"]["headers"]["idempotency-key"] == f"e:call:{i}"
        )

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert results == [True] * 8
