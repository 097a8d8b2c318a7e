"""Retries, the dead-letter queue and its replay against a real HTTP server on loopback.

The server answers 503 a given number of times, then 200. The playbook runs in the
embedded runtime over a SQLite file (as `noetl run` does); the replay runs in a local
cluster (an orchestrator and a worker in threads) over the same file, as
`noetl dlq replay --db` does, and through the HTTP API.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl import __version__
from noetl.dsl.validate import load_playbook_text
from noetl.engine.retry import RetryRule, backoff_delay, jitter_key
from noetl.runtime.local import embedded_runtime, local_cluster, wait_finished
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.store import SqliteStore
from noetl.store.base import DeadLetterStatus
from tests.helpers.auth import auth_headers
from tests.helpers.flaky_http import Flaky
from tests.helpers.testclient import TestClient


def playbook(url: str, attempts: int) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: orders}}
workflow:
  - step: fetch
    tool:
      kind: http
      spec: {{method: GET, url: "{url}"}}
      retry:
        max_attempts: {attempts}
        initial_delay: 0.2
        backoff_multiplier: 2
        max_delay: 5
        jitter: true
    result: {{as: order}}
    next: total
  - step: total
    tool:
      kind: python
      code: |
        def main(context, args):
            return {{"call": args["order"]["data"]["call"]}}
      args: {{order: "{{{{ order }}}}"}}
    result: {{as: total}}
"""


def run(db: Path, text: str) -> tuple[str, str]:
    with embedded_runtime(str(db), workers=2) as runtime:
        result = runtime.run(load_playbook_text(text).require())
    return result.execution_id, result.status.value


def test_a_step_succeeds_on_the_attempt_after_n_failures_with_its_policys_delays(
    flaky: Flaky, tmp_path: Path
) -> None:
    flaky.failures = 3
    db = tmp_path / "noetl.db"
    execution_id, status = run(db, playbook(flaky.url, attempts=4))
    assert status == "ok"
    assert len(flaky.calls) == 4
    store = SqliteStore(db)
    try:
        events = store.load_events(execution_id)
        assert store.list_dead_letters() == []
    finally:
        store.close()
    retries = [e for e in events if e.type == "retry.started"]
    assert [e.payload["attempt"] for e in retries] == [2, 3, 4]
    rule = RetryRule(4, 0.2, 2.0, 5.0, True, "exponential", source="tool")
    for attempt, event in enumerate(retries, start=1):
        base = min(0.2 * 2 ** (attempt - 1), 5.0)
        expected = backoff_delay(rule, attempt, jitter_key(execution_id, "fetch", attempt))
        assert event.payload["delay_ms"] == round(expected * 1000)
        assert base * 0.5 <= expected <= base  # jitter keeps it within [half, full]
        gap = flaky.calls[attempt] - flaky.calls[attempt - 1]
        assert gap >= expected - 0.02, (attempt, gap, expected)
    total = next(e for e in events if e.type == "step.finished" and e.step == "total")
    assert total.payload["result"] == {"call": 4}


def test_exhausted_attempts_end_in_the_dlq_and_a_replay_completes_the_execution(
    flaky: Flaky, tmp_path: Path
) -> None:
    flaky.failures = 10
    db = tmp_path / "noetl.db"
    execution_id, status = run(db, playbook(flaky.url, attempts=2))
    assert status == "fail"
    assert len(flaky.calls) == 2
    message_id = f"{execution_id}.fetch"
    store = SqliteStore(db)
    try:
        (entry,) = store.list_dead_letters()
        assert entry.message_id == message_id
        assert (entry.step, entry.tool_kind, entry.reason, entry.attempts) == (
            "fetch",
            "http",
            "exhausted",
            2,
        )
        assert "503" in entry.last_error
        assert entry.payload["spec"]["url"] == flaky.url
        assert entry.status is DeadLetterStatus.PENDING

        flaky.failures = 0  # the server recovers
        before = store.get_execution(execution_id)
        assert before is not None
        with local_cluster(store, execution_id, workers=2) as orchestrator:
            replayed = orchestrator.dlq.replay(message_id, by="test")
            assert replayed.replayed
            again = orchestrator.dlq.replay(message_id, by="test")  # twice = once
            assert not again.replayed
            record = wait_finished(store, execution_id, after_seq=before.last_seq, timeout=60)
        assert record.status.value == "ok"
        after = store.get_dead_letter(message_id)
        assert after is not None
        assert (after.message_id, after.status, after.replays) == (
            message_id,
            DeadLetterStatus.REPLAYED,
            1,
        )
        row = store.get_task(message_id)
        assert row is not None
        assert (row["task_id"], row["status"], row["attempt"]) == (message_id, "done", 1)
        types = [e.type for e in store.load_events(execution_id)]
        assert types.count("workflow.reopened") == 1
        assert types.count("task.replayed") == 1
        assert types[-1] == "workflow.finished"
        steps = store.get_steps(execution_id)
        assert steps["fetch"]["status"] == "ok"
        assert steps["total"]["status"] == "ok"
    finally:
        store.close()
    assert len(flaky.calls) == 3  # the replay called once more, and succeeded


def judged(url: str, retry: str) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: judged}}
workflow:
  - step: fetch
    tool:
      kind: http
      spec: {{method: GET, url: "{url}"}}
      retry: {retry}
    result: {{as: order}}
"""


@pytest.mark.parametrize("failures", [0, 2])
def test_retry_when_retries_a_503_and_an_answer_that_is_not_ready(
    flaky: Flaky, tmp_path: Path, failures: int
) -> None:
    flaky.failures, flaky.pending = failures, 2
    retry = (
        "{max_attempts: 6, initial_delay: 0.05, jitter: false, "
        "retry_when: \"{{ status_code == 503 or (data and data.state == 'pending') }}\"}"
    )
    execution_id, status = run(tmp_path / "noetl.db", judged(flaky.url, retry))
    assert status == "ok"
    assert len(flaky.calls) == failures + 3  # 503s, two pending answers, then done
    store = SqliteStore(tmp_path / "noetl.db")
    try:
        retries = [e for e in store.load_events(execution_id) if e.type == "retry.started"]
    finally:
        store.close()
    assert [e.payload["reason"] for e in retries] == ["retry_when"] * (failures + 2)


def test_stop_when_stops_at_the_first_503(flaky: Flaky, tmp_path: Path) -> None:
    flaky.failures = 10
    retry = '{max_attempts: 6, initial_delay: 0.05, stop_when: "{{ status_code == 503 }}"}'
    execution_id, status = run(tmp_path / "noetl.db", judged(flaky.url, retry))
    assert status == "fail"
    assert len(flaky.calls) == 1
    store = SqliteStore(tmp_path / "noetl.db")
    try:
        (entry,) = store.list_dead_letters()
    finally:
        store.close()
    assert (entry.message_id, entry.reason) == (f"{execution_id}.fetch", "failed")


def test_a_loop_past_its_total_budget_fails_in_the_embedded_runtime(tmp_path: Path) -> None:
    text = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: budget}
workflow:
  - step: items
    loop:
      collection: "{{ range(20) | list }}"
      mode: sequential
      total_timeout_ms: 700
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            time.sleep(0.2)
            return 1
"""
    started = time.monotonic()
    execution_id, status = run(tmp_path / "noetl.db", text)
    elapsed = time.monotonic() - started
    assert status == "fail"
    assert elapsed < 3.0  # 20 items of 0.2 s would take 4 s
    store = SqliteStore(tmp_path / "noetl.db")
    try:
        events = store.load_events(execution_id)
        steps = store.get_steps(execution_id)
    finally:
        store.close()
    (timed_out,) = [e for e in events if e.type == "loop.timed_out"]
    assert timed_out.payload["total_timeout_ms"] == 700
    assert 1 <= timed_out.payload["completed"] <= 4
    assert "total budget of 700 ms" in steps["items"]["error"]


# --- the HTTP API ----------------------------------------------------------------------------


@pytest.fixture
def failed(tmp_path: Path) -> tuple[Path, str]:
    """A SQLite file with one failed execution whose step `divide` is dead-lettered."""
    text = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: divide}
workload: {password: hunter2}
workflow:
  - step: divide
    tool:
      kind: python
      code: |
        def main(context, args):
            return 10 / args["d"]
      args: {d: 0, api_key: plain-in-playbook}
    result: {as: q}
"""
    db = tmp_path / "noetl.db"
    execution_id, status = run(db, text)
    assert status == "fail"
    return db, execution_id


@pytest.fixture
def api(failed: tuple[Path, str]) -> Iterator[tuple[TestClient, SqliteStore, str]]:
    db, execution_id = failed
    store = SqliteStore(db)
    orchestrator = Orchestrator(store, owner="test")
    app = create_app(store, orchestrator, version=__version__)
    try:
        with TestClient(app, headers=auth_headers(store)) as client:
            yield client, store, execution_id
    finally:
        store.close()


def test_the_api_lists_and_shows_entries_redacted(
    api: tuple[TestClient, SqliteStore, str],
) -> None:
    client, _, execution_id = api
    listed = client.get("/api/dlq", params={"status": "pending"})
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert body["counts"] == {"pending": 1, "replayed": 0, "discarded": 0}
    (item,) = body["items"]
    assert item["message_id"] == f"{execution_id}.divide"
    assert item["reason"] == "failed"
    assert "payload" not in item
    shown = client.get(f"/api/dlq/{item['message_id']}").json()
    assert shown["payload"]["args"] == {"d": 0, "api_key": "***"}
    assert "hunter2" not in json.dumps(shown)
    assert "plain-in-playbook" not in json.dumps(shown)
    assert shown["last_error"] == "ZeroDivisionError: division by zero"
    assert "inline code, line 2" in shown["last_stack"]
    assert "task" not in shown
    assert client.get("/api/dlq", params={"status": "discarded"}).json()["items"] == []
    missing = client.get("/api/dlq/nope")
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")


def test_the_api_replays_once_and_refuses_what_cannot_run_again(
    api: tuple[TestClient, SqliteStore, str],
) -> None:
    client, store, execution_id = api
    message_id = f"{execution_id}.divide"
    bad = client.post(f"/api/dlq/{message_id}/replay", json={"patch": {"kind": "http"}})
    assert bad.status_code == 422
    assert "cannot patch 'kind'" in bad.text
    first = client.post(f"/api/dlq/{message_id}/replay", json={"patch": {"args.d": 5}})
    assert first.status_code == 200, first.text
    assert first.json() == {
        "message_id": message_id,
        "execution_id": execution_id,
        "replayed": True,
        "status": "replayed",
    }
    second = client.post(f"/api/dlq/{message_id}/replay", json={})
    assert second.json()["replayed"] is False
    (replay,) = store.claim_inputs("test", limit=10)
    assert replay.kind == "replay"
    assert replay.payload["task"]["args"]["d"] == 5
    assert replay.payload["patched"] == ["args.d"]
    discard = client.post(f"/api/dlq/{message_id}/discard", json={"reason": "late"})
    assert discard.status_code == 409
    assert "only a pending entry can be discarded" in discard.json()["message"]


def test_the_api_discards_with_a_reason_and_then_refuses_a_replay(
    api: tuple[TestClient, SqliteStore, str],
) -> None:
    client, _, execution_id = api
    message_id = f"{execution_id}.divide"
    assert client.post(f"/api/dlq/{message_id}/discard", json={}).status_code == 422
    assert client.post(f"/api/dlq/{message_id}/discard", json={"reason": "  "}).status_code == 422
    done = client.post(f"/api/dlq/{message_id}/discard", json={"reason": "bad input data"})
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["discard_reason"]) == ("discarded", "bad input data")
    refused = client.post(f"/api/dlq/{message_id}/replay", json={})
    assert refused.status_code == 409
    assert "was discarded: bad input data" in refused.json()["message"]


def test_force_complete_through_the_api(tmp_path: Path) -> None:
    text = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: gate}
workflow:
  - step: start
    next: [gate, slow]
  - step: slow
    tool: {kind: python, code: "def main(context, args):\\n    return 1\\n"}
  - step: gate
    when: "{{ false }}"
    tool: {kind: noop}
"""
    store = SqliteStore(tmp_path / "noetl.db")
    orchestrator = Orchestrator(store, owner="test")
    app = create_app(store, orchestrator, version=__version__)
    try:
        with TestClient(app, headers=auth_headers(store)) as client:
            execution_id = client.post("/api/executions", json={"playbook": text}).json()[
                "execution_id"
            ]
            url = f"/api/admin/executions/{execution_id}/steps"
            assert client.post(f"{url}/nope/force-complete").status_code == 404
            bad = client.post(f"{url}/gate/force-complete", json={"status": "maybe"})
            assert bad.status_code == 422
            accepted = client.post(
                f"{url}/gate/force-complete", json={"result": {"v": 1}, "reason": "ops"}
            )
            assert accepted.status_code == 202, accepted.text
            assert accepted.json() == {
                "execution_id": execution_id,
                "step": "gate",
                "accepted": True,
            }
            orchestrator.run_once()
            steps = client.get(f"/api/executions/{execution_id}").json()["steps"]
            assert steps["gate"]["status"] == "ok"
            assert client.post(f"{url}/gate/force-complete").status_code == 409
            assert client.post(f"{url}/start/force-complete").status_code == 409
    finally:
        store.close()
