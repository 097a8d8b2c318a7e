"""The API the operator console reads: paging, step detail, validation, workers, the page.

Over a real SQLite file and a real Orchestrator (FastAPI's TestClient); a test plays the
worker with the store's queue (`claim`, `complete`) and turns the orchestrator by hand.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import threading
import tomllib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl import __version__
from noetl.core import Outcome
from noetl.runtime.orchestrator import Orchestrator
from noetl.runtime.views import ViewCache, load_view
from noetl.server.app import create_app
from noetl.server.routes.ui import SECURITY_HEADERS, load_assets
from noetl.store import SqliteStore
from noetl.store.base import Store, WorkerRecord
from tests.helpers.auth import auth_headers

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]

INSTANT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: instant}
workflow:
  - step: start
"""

LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: loop, path: team/loop}
workload: {api_token: s3cr3t}
workflow:
  - step: start
    next: [items]
  - step: items
    loop:
      collection: [1, 2, 3]
      mode: parallel
    tool:
      kind: noop
      args: {n: "{{ item }}"}
      retry: {max_attempts: 2, initial_delay: 0, jitter: false}
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    adapter = SqliteStore(tmp_path / "noetl.db")
    yield adapter
    adapter.close()


@pytest.fixture
def orchestrator(store: SqliteStore) -> Orchestrator:
    return Orchestrator(store, owner="test")


@pytest.fixture
def client(store: SqliteStore, orchestrator: Orchestrator) -> Iterator[TestClient]:
    app = create_app(store, orchestrator, version=__version__)
    with TestClient(app, headers=auth_headers(store)) as test_client:
        yield test_client


def start(client: TestClient, playbook: str, workload: dict[str, Any] | None = None) -> str:
    response = client.post(
        "/api/executions", json={"playbook": playbook, "workload": workload or {}}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["execution_id"])


def work(store: Store, orchestrator: Orchestrator, *, fail: set[int] = frozenset()) -> int:
    """Play a worker for every queued task (failing loop items in `fail`), then let the
    orchestrator decide; returns how many tasks ran."""
    leases = store.claim("test-worker", limit=100)
    for lease in leases:
        task = lease.task
        if task.index in fail:
            outcome = Outcome(
                task.task_id, ok=False, error=f"item {task.index} broke", error_type="ValueError"
            )
        else:
            this = {"n": task.args.get("n"), "password": "hunter2"}
            outcome = Outcome(task.task_id, ok=True, this=this, duration_ms=1.5)
        assert store.complete(task.task_id, lease.token, outcome.to_payload())
    orchestrator.run_once()
    return len(leases)


# --- the executions list -----------------------------------------------------------------


def test_list_pages_say_where_the_next_page_starts(client: TestClient) -> None:
    ids = [start(client, INSTANT) for _ in range(5)]
    first = client.get("/api/executions", params={"limit": 2}).json()
    assert [i["execution_id"] for i in first["items"]] == ids[::-1][:2]
    assert first["next_offset"] == 2
    second = client.get("/api/executions", params={"limit": 2, "offset": 2}).json()
    assert [i["execution_id"] for i in second["items"]] == ids[::-1][2:4]
    last = client.get("/api/executions", params={"limit": 2, "offset": 4}).json()
    assert [i["execution_id"] for i in last["items"]] == [ids[0]]
    assert last["next_offset"] is None
    exact = client.get("/api/executions", params={"limit": 5}).json()
    assert (len(exact["items"]), exact["next_offset"]) == (5, None)
    assert client.get("/api/executions", params={"status": "running"}).json()["next_offset"] is None
    widest = client.get("/api/executions", params={"limit": 1000}).json()  # the most allowed
    assert (len(widest["items"]), widest["next_offset"]) == (5, None)


# --- one step ----------------------------------------------------------------------------


def test_step_detail_shows_progress_attempts_and_a_masked_result(
    client: TestClient, store: SqliteStore, orchestrator: Orchestrator
) -> None:
    execution_id = start(client, LOOP)
    url = f"/api/executions/{execution_id}/steps/items"
    running = client.get(url).json()
    assert (running["status"], running["total"], running["completed"]) == ("running", 3, 0)
    assert running["result"] is None
    assert [a["status"] for a in running["attempts"]] == ["running"] * 3
    assert work(store, orchestrator, fail={1}) == 3  # item 1 fails, and is retried
    assert work(store, orchestrator, fail={1}) == 1  # and fails again
    detail = client.get(url).json()
    assert detail["status"] == "failed"
    assert (detail["completed"], detail["succeeded"], detail["failed"]) == (3, 2, 1)
    assert detail["error"] == "1 of 3 loop items failed"
    assert detail["started_at"] <= detail["finished_at"]
    assert [(a["index"], a["attempt"], a["status"]) for a in detail["attempts"]] == [
        (0, 1, "ok"),
        (1, 1, "failed"),
        (2, 1, "ok"),
        (1, 2, "failed"),
    ]
    assert detail["attempts_total"] == 4
    # The second failure of item 1 ended its task: that attempt is the dead letter.
    assert [a["dead_lettered"] for a in detail["attempts"]] == [False, False, False, True]
    assert not any(a["replay"] for a in detail["attempts"])
    assert detail["attempts"][1]["error"] == "item 1 broke"
    assert detail["attempts"][1]["error_type"] == "ValueError"
    assert detail["attempts"][0]["output"] == '{"n": 1, "password": "***"}'
    assert detail["attempts"][0]["duration_ms"] == 1.5
    # The result is indented JSON with secrets masked, whatever its size.
    assert '"password": "***"' in detail["result"]
    assert "hunter2" not in client.get(url).text
    assert detail["result_truncated"] is False

    failed = client.get(url, params={"status": "failed", "limit": 1, "offset": 1}).json()
    assert failed["attempts_total"] == 2
    assert [(a["index"], a["attempt"]) for a in failed["attempts"]] == [(1, 2)]
    cut = client.get(url, params={"result_limit": 10}).json()
    assert (len(cut["result"]), cut["result_truncated"]) == (10, True)
    start_step = client.get(f"/api/executions/{execution_id}/steps/start").json()
    assert (start_step["status"], start_step["attempts"], start_step["total"]) == ("ok", [], None)


def test_step_detail_errors(client: TestClient) -> None:
    execution_id = start(client, INSTANT)
    missing = client.get(f"/api/executions/{execution_id}/steps/nope")
    assert missing.status_code == 404
    assert "no step 'nope'" in missing.json()["message"]
    assert client.get("/api/executions/123/steps/start").status_code == 404
    bad = client.get(f"/api/executions/{execution_id}/steps/start", params={"status": "weird"})
    assert (bad.status_code, bad.json()["error"]) == (422, "invalid_request")
    assert "query.status" in bad.json()["message"]


def test_the_timeline_has_every_step_and_a_span_per_attempt(
    client: TestClient, store: SqliteStore, orchestrator: Orchestrator
) -> None:
    execution_id = start(client, LOOP)
    url = f"/api/executions/{execution_id}/timeline"
    running = client.get(url).json()
    assert (running["status"], running["finished_at"], running["limit"]) == ("running", None, 20)
    assert [s["step"] for s in running["steps"]] == ["start", "items"]
    items = running["steps"][1]
    assert (items["status"], items["finished_at"], items["tasks"]) == ("running", None, 3)
    assert running["now"] >= items["started_at"] >= running["started_at"]
    work(store, orchestrator, fail={1})
    work(store, orchestrator, fail={1})
    done = client.get(url, params={"limit": 1}).json()
    items = done["steps"][1]
    assert items["status"] == "failed" and items["finished_at"] >= items["started_at"]
    # Only item 1 is listed (its two failed attempts); the two others are summed up.
    assert [(s["index"], s["attempt"], s["status"]) for s in items["spans"]] == [
        (1, 1, "failed"),
        (1, 2, "failed"),
    ]
    assert items["spans"][0]["error"] == "item 1 broke"
    assert items["hidden"] == {
        "tasks": 2,
        "attempts": 2,
        "statuses": {"ok": 2},
        "started_at": items["started_at"],
        "finished_at": items["hidden"]["finished_at"],
    }
    assert client.get("/api/executions/123/timeline").status_code == 404
    assert client.get(url, params={"limit": 0}).status_code == 422


def test_a_playbook_detail_has_its_masked_workload_defaults(client: TestClient) -> None:
    assert client.post("/api/playbooks", json={"content": LOOP}).status_code == 201
    detail = client.get("/api/playbooks/team/loop").json()
    assert detail["workload"] == {"api_token": "***"}


# --- views are cached and caught up --------------------------------------------------------


def test_cached_views_catch_up_to_the_same_answer_as_a_fresh_fold(
    client: TestClient, store: SqliteStore, orchestrator: Orchestrator
) -> None:
    execution_id = start(client, LOOP)
    cache = ViewCache(store, size=1)
    answers = []
    while True:
        cached = cache.read(execution_id, lambda v: (v.to_dict(0.0), v.graph_dict()))
        fresh = load_view(store, execution_id)
        assert fresh is not None
        assert cached == (fresh.to_dict(0.0), fresh.graph_dict())
        answers.append(cached[0]["last_seq"])
        if cached[0]["status"] != "running":
            break
        work(store, orchestrator, fail={2})
    assert len(answers) >= 3 and answers == sorted(set(answers))  # it did move on
    other = start(client, INSTANT)  # evicts the first (size 1); both still read right
    assert cache.read(other, lambda v: v.state.status.value) == "ok"
    assert cache.read(execution_id, lambda v: v.state.status.value) == "fail"
    assert cache.read("no-such-id", lambda v: v) is None


def test_concurrent_reads_of_one_execution_agree(
    client: TestClient, store: SqliteStore, orchestrator: Orchestrator
) -> None:
    execution_id = start(client, LOOP)
    work(store, orchestrator)
    results: list[Any] = []

    def read() -> None:
        for _ in range(20):
            results.append(client.get(f"/api/executions/{execution_id}/graph").json())

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 80
    assert all(r == results[0] for r in results)
    assert [n["status"] for n in results[0]["nodes"]] == ["ok", "ok"]


# --- playbook validation -------------------------------------------------------------------


def test_validate_reports_errors_and_warnings_without_registering(client: TestClient) -> None:
    broken = LOOP.replace("next: [items]", "next: [nowhere]")
    response = client.post("/api/playbooks/validate", json={"content": broken, "path": "x.yaml"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["valid"] is False
    assert (body["name"], body["workload"], body["steps"]) == (None, None, [])
    (diag,) = body["diagnostics"]
    assert (diag["severity"], diag["line"], diag["step"], diag["file"]) == (
        "error",
        7,
        "start",
        "x.yaml",
    )
    assert "nowhere" in diag["message"]
    unversioned = LOOP.replace("apiVersion: noetl.io/v2\n", "")
    ok = client.post("/api/playbooks/validate", json={"content": unversioned}).json()
    assert ok["valid"] is True
    assert [d["code"] for d in ok["diagnostics"]] == ["W402"]
    assert (ok["name"], ok["path"], ok["steps"]) == ("loop", "team/loop", ["start", "items"])
    assert ok["workload"] == {"api_token": "***"}  # defaults, masked
    assert client.get("/api/playbooks").json()["items"] == []
    garbled = client.post("/api/playbooks/validate", json={"content": "a: [unclosed"}).json()
    assert garbled["valid"] is False and garbled["diagnostics"][0]["line"] == 1
    empty = client.post("/api/playbooks/validate", json={"content": ""})
    assert (empty.status_code, empty.json()["error"]) == (422, "invalid_request")


# --- workers -------------------------------------------------------------------------------


def test_workers_list_says_which_are_alive(store: SqliteStore, orchestrator: Orchestrator) -> None:
    now = 1_000_000.0
    app = create_app(store, orchestrator, version="1", clock=lambda: now)
    for worker_id, status, beat in (
        ("w-live", "running", now - 5),
        ("w-quiet", "running", now - 600),
        ("w-gone", "stopped", now - 1),
        ("w-drain", "draining", now - 2),
    ):
        store.register_worker(
            WorkerRecord(worker_id, "default", "host", 1, status, now - 900, beat)
        )
    with TestClient(app, headers=auth_headers(store)) as client:
        body = client.get("/api/workers").json()
        assert [(w["worker_id"], w["alive"]) for w in body["items"]] == [
            ("w-drain", True),
            ("w-live", True),
        ]
        assert body["alive"] == 2
        assert body["items"][1]["heartbeat_age_s"] == 5.0
        everyone = client.get("/api/workers", params={"include_stopped": True}).json()
        assert {w["worker_id"]: w["alive"] for w in everyone["items"]} == {
            "w-drain": True,
            "w-gone": False,
            "w-live": True,
            "w-quiet": False,
        }
        patient = client.get("/api/workers", params={"alive_within_s": 3600}).json()
        assert patient["alive"] == 3


# --- the console page ----------------------------------------------------------------------


def test_the_console_page_and_its_assets(client: TestClient) -> None:
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
    assert client.get("/", follow_redirects=False).headers["location"] == "/ui/"
    page = client.get("/ui/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    for name, value in SECURITY_HEADERS.items():
        assert page.headers[name.lower()] == value
    assert "script-src 'self'" in page.headers["content-security-policy"]
    # Every file the page and the modules refer to is served, with the right type.
    referenced = set(re.findall(r'(?:src|href)="([\w./-]+\.(?:js|css))"', page.text))
    assert referenced == {"console.css", "js/app.js"}
    seen: set[str] = set()
    queue = sorted(referenced)
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        response = client.get(f"/ui/{name}")
        assert response.status_code == 200, name
        if name.endswith(".js"):
            assert response.headers["content-type"] == "text/javascript; charset=utf-8"
            base = name.rsplit("/", 1)[0]
            for target in re.findall(r'from "(\.[\w./]+)"', response.text):
                queue.append(posixpath.normpath(posixpath.join(base, target)))
    assert {"js/graph.js", "js/views/dlq.js", "js/views/playbooks.js"} <= seen
    assert seen == set(load_assets()) - {"index.html"}  # nothing shipped goes unused


def test_console_assets_are_revalidated_and_never_leak_other_files(client: TestClient) -> None:
    first = client.get("/ui/js/app.js")
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == "no-cache"
    again = client.get("/ui/js/app.js", headers={"If-None-Match": etag})
    assert (again.status_code, again.content) == (304, b"")
    for path in ("/ui/../app.py", "/ui/%2e%2e/app.py", "/ui/js/../../app.py", "/ui/nope.js"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"] == "not_found"


def test_console_routes_are_not_in_the_api_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p == "/" or p.startswith("/ui")]
    for path, method in (
        ("/api/executions/{execution_id}/steps/{step}", "get"),
        ("/api/executions/{execution_id}/timeline", "get"),
        ("/api/playbooks/validate", "post"),
        ("/api/workers", "get"),
    ):
        assert paths[path][method]["summary"], path


def test_the_console_never_builds_markup_from_strings() -> None:
    # Data reaches the page as text nodes and attribute values (dom.js), never as HTML.
    sources = {path.name: path.read_text() for path in (ROOT / "noetl/server/ui").rglob("*.js")}
    assert len(sources) >= 10
    for name, text in sources.items():
        for needle in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert needle not in text, (name, needle)


def test_every_console_file_ships_in_the_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["noetl"]
    files = [
        str(path.relative_to(ROOT / "noetl"))
        for path in (ROOT / "noetl/server/ui").rglob("*")
        if path.is_file()
    ]
    assert files
    for name in files:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name
    assert set(load_assets()) == {f.removeprefix("server/ui/") for f in files}
