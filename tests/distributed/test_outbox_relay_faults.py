"""`noetl outbox relay` as a real process on the real PostgreSQL and NATS JetStream:
killed with SIGKILL after publishing and before marking, then started again, every row
ends sent and the stream holds each message once (deduplicated by Nats-Msg-Id); stopped
with SIGTERM, it ends its pass and exits 0; it publishes what examples/outbox_relay.yaml
records. `noetl outbox init` makes the table."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.outbox import (
    Names,
    delete_stream,
    insert_rows,
    stream_messages,
    table_rows,
    unique_names,
)

ROOT = Path(__file__).resolve().parents[2]
ROWS = 12


@pytest.fixture
def names(nats_url: str) -> Iterator[Names]:
    made = unique_names()
    yield made
    delete_stream(nats_url, made.stream)


def noetl(*args: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "noetl", *args],
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def relay_args(db: str, nats_url: str, names: Names, *extra: str) -> list[str]:
    return [
        "outbox", "relay", "--db", db, "--nats", nats_url, "--table", names.table,
        "--stream", names.stream, "--subject-prefix", names.prefix, "--poll", "0.1",
        "--backoff", "0.05", *extra,
    ]  # fmt: skip


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def init_table(db: str, names: Names, log: Path) -> None:
    proc = noetl("outbox", "init", "--db", db, "--table", names.table, log=log)
    assert proc.wait(timeout=60) == 0, log.read_text()
    rows = [(f"evt-{i}", "orders", {"n": i}) for i in range(ROWS)]
    insert_rows(db, names.table, rows)


@pytest.mark.slow
def test_a_relay_killed_between_publish_and_mark_delivers_each_row_once(
    pg_empty_database: str, nats_url: str, names: Names, tmp_path: Path
) -> None:
    db, log = pg_empty_database, tmp_path / "relay.log"
    init_table(db, names, log)

    # Pauses after each acknowledged publish, before marking the row sent.
    first = noetl(*relay_args(db, nats_url, names, "--pause-after-publish", "60"), log=log)
    try:
        wait_for(lambda: len(stream_messages(nats_url, names.stream)) >= 1, "a publish")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    published_before = stream_messages(nats_url, names.stream)
    assert published_before  # published, and then the relay died before marking
    assert {r["status"] for r in table_rows(db, names.table).values()} == {"pending"}

    second = noetl(*relay_args(db, nats_url, names, "--once"), log=log)
    assert second.wait(timeout=60) == 0, log.read_text()

    state = table_rows(db, names.table)
    assert {r["status"] for r in state.values()} == {"sent"}, state
    messages = stream_messages(nats_url, names.stream)
    ids = [m[1] for m in messages]
    assert sorted(ids) == sorted(state)
    assert len(ids) == len(set(ids)) == ROWS
    assert published_before[0] in messages  # the first publish was kept, not repeated


@pytest.mark.slow
def test_sigterm_stops_the_relay_and_its_metrics_count_the_rows(
    pg_empty_database: str, nats_url: str, names: Names, tmp_path: Path
) -> None:
    db, log = pg_empty_database, tmp_path / "relay.log"
    init_table(db, names, log)
    proc = noetl(*relay_args(db, nats_url, names, "--metrics-port", "0"), log=log)
    try:
        wait_for(lambda: "metrics on" in log.read_text(), "the metrics exporter")
        url = re.search(r"metrics on (\S+)", log.read_text())
        assert url is not None
        wait_for(
            lambda: {r["status"] for r in table_rows(db, names.table).values()} == {"sent"},
            "every row sent",
        )
        with urllib.request.urlopen(url.group(1), timeout=5) as resp:
            text = resp.read().decode()
        assert f'noetl_outbox_published_total{{table="{names.table}"}} {ROWS}.0' in text
        assert f'noetl_outbox_unsent{{table="{names.table}"}} 0.0' in text
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert f"relayed {ROWS} row(s)" in log.read_text()
    assert len(stream_messages(nats_url, names.stream)) == ROWS


def test_the_relay_refuses_sqlite(tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    db = f"sqlite:///{tmp_path / 'x.db'}"
    proc = noetl("outbox", "relay", "--db", db, "--nats", "nats://127.0.0.1:1", log=log)
    assert proc.wait(timeout=60) == 3
    assert "needs PostgreSQL" in log.read_text()


def run_example(db: str, sqlite: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "noetl", "run", str(ROOT / "examples" / "outbox_relay.yaml"),
         "--json", "--db", str(sqlite), "--set", f"dsn={db}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "ok"
    context: dict[str, object] = out["context"]
    return context


@pytest.mark.slow
def test_the_example_records_intents_that_the_relay_publishes(
    pg_empty_database: str, nats_url: str, names: Names, tmp_path: Path
) -> None:
    db, log = pg_empty_database, tmp_path / "relay.log"
    assert run_example(db, tmp_path / "run.sqlite")["outbox"] == {
        "pending": 2, "sent": 0, "dead": 0
    }  # fmt: skip
    relay = noetl(
        "outbox", "relay", "--db", db, "--nats", nats_url, "--stream", names.stream,
        "--subject-prefix", names.prefix, "--once", log=log,
    )  # fmt: skip
    assert relay.wait(timeout=60) == 0, log.read_text()
    # Run again: the intents are recorded again, unchanged, and stay sent.
    assert run_example(db, tmp_path / "run.sqlite")["outbox"] == {
        "pending": 0, "sent": 2, "dead": 0
    }  # fmt: skip
    messages = stream_messages(nats_url, names.stream)
    assert sorted((m[0], m[1]) for m in messages) == [
        (f"{names.prefix}.orders.placed", "order_placed:o-1"),
        (f"{names.prefix}.orders.placed", "order_placed:o-2"),
    ]
    assert json.loads(messages[0][2])["event"] == "placed"
