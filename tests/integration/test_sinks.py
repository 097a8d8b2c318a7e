"""Sinks end to end on the worker side: real PostgreSQL, a real DuckDB file, real files and
a real S3 endpoint (moto's server on loopback), run through `ToolRegistry.run`."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import duckdb
import psycopg
import pytest
from moto.server import ThreadedMotoServer

from noetl.core import EnqueueTask, Outcome, Task
from noetl.credentials.scope import EnvSecrets
from noetl.dsl import build_graph, load_playbook_text
from noetl.engine import Engine
from noetl.errors import FatalError, RetryableError
from noetl.sinks import REGISTRY, retry_delays, run_sinks
from noetl.sinks.file import FileWriter
from noetl.worker.tools import ToolRegistry

S3_KEYS = {"aws_access_key_id": "testing-key", "aws_secret_access_key": "testing-secret"}
FAST = {"max_attempts": 3, "initial_delay": 0, "jitter": False}


class ResultTool:
    """A tool whose `this` is fixed, so the test controls what the sinks write."""

    kind = "result"

    def __init__(self, this: Any) -> None:
        self.this = this

    def run(self, task: Task) -> Outcome:
        return Outcome(task_id=task.task_id, ok=True, this=self.this)


def sink(kind: str, spec: dict[str, Any], **options: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "kind": kind,
        "spec": spec,
        "id": options.pop("id", kind),
        "async": options.pop("async_", False),
        "timeout_ms": options.pop("timeout_ms", None),
        "retry": options.pop("retry", None),
    }
    entry.update(options)
    return entry


def run(
    this: Any,
    *sinks: dict[str, Any],
    pick: Any = None,
    env: Mapping[str, str] | None = None,
    secrets: tuple[str, ...] = (),
    context: dict[str, Any] | None = None,
) -> Outcome:
    task = Task(
        task_id="e1.load",
        execution_id="e1",
        step="load",
        kind="result",
        spec={},
        args={},
        context=context or {"execution_id": "e1", "step": "load", "workload": {}},
        key="e1:load",
        secrets=secrets,
        sinks=tuple(sinks),
        pick=pick,
    )
    registry = ToolRegistry([ResultTool(this)], secrets=EnvSecrets(dict(env or {})))
    return registry.run(task)


ROWS = [
    {"id": 1, "name": "ada", "tags": ["a"]},
    {"id": 2, "name": "bob", "score": 7.5},
]


# --- postgres -----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file sink writes under the working directory (its default root): the test's."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def pg(pg_database: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE people (id int PRIMARY KEY, name text, tags jsonb, score float8)"
        )
        conn.execute("CREATE TABLE victim (id int)")
        yield conn


def pg_rows(conn: psycopg.Connection[Any], table: str = "people") -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()


@pytest.mark.services
def test_postgres_insert_through_a_credential(
    pg: psycopg.Connection[Any], pg_database: str
) -> None:
    env = {"NOETL_CREDENTIAL_WAREHOUSE": pg_database}
    spec = {"table": "people", "credential": "WAREHOUSE"}
    outcome = run(ROWS, sink("postgres", spec, id="main"), env=env)
    assert outcome.ok, outcome.error
    assert pg_rows(pg) == [(1, "ada", ["a"], None), (2, "bob", None, 7.5)]
    [summary] = outcome.sinks
    assert summary["status"] == "ok"
    assert (summary["id"], summary["key"], summary["rows"], summary["attempts"]) == (
        "main",
        "e1:load:main",
        2,
        1,
    )
    assert outcome.to_payload()["sinks"] == [summary]


@pytest.mark.services
def test_postgres_upsert_twice_writes_no_duplicates(
    pg: psycopg.Connection[Any], pg_database: str
) -> None:
    spec = {"table": "public.people", "mode": "upsert", "key": "id", "dsn": pg_database}
    assert run(ROWS, sink("postgres", spec)).ok
    changed = [{"id": 1, "name": "ada lovelace"}, {"id": 3, "name": "cy"}]
    outcome = run(changed, sink("postgres", spec))
    assert outcome.ok, outcome.error
    assert [(r[0], r[1]) for r in pg_rows(pg)] == [(1, "ada lovelace"), (2, "bob"), (3, "cy")]
    assert run(changed, sink("postgres", spec)).ok  # a re-run: nothing new
    assert len(pg_rows(pg)) == 3


@pytest.mark.services
def test_postgres_table_names_are_quoted_identifiers(
    pg: psycopg.Connection[Any], pg_database: str
) -> None:
    outcome = run(
        ROWS, sink("postgres", {"table": "people; DROP TABLE victim", "dsn": pg_database})
    )
    assert not outcome.ok and outcome.error_type == "SinkError"
    assert "does not exist" in (outcome.error or "")
    assert outcome.sinks[0]["attempts"] == 1  # a missing table is not retried
    weird = 'odd"; DROP TABLE victim; --'
    pg.execute(psycopg.sql.SQL("CREATE TABLE {} (id int)").format(psycopg.sql.Identifier(weird)))
    assert run({"id": 5}, sink("postgres", {"table": weird, "dsn": pg_database})).ok
    assert pg_rows(pg, '"odd""; DROP TABLE victim; --"') == [(5,)]
    assert pg_rows(pg, "victim") == []  # still there
    outcome = run(ROWS, sink("postgres", {"table": "a.b.c", "dsn": pg_database}))
    assert "at most 2" in (outcome.error or "")


@pytest.mark.services
def test_postgres_column_names_are_quoted_identifiers(
    pg: psycopg.Connection[Any], pg_database: str
) -> None:
    spec = {"table": "people", "dsn": pg_database}
    evil = {"id": 9, 'name") VALUES (1); DROP TABLE victim; --': "x"}
    outcome = run(evil, sink("postgres", spec))
    assert not outcome.ok and outcome.error_type == "SinkError"
    assert "does not exist" in (outcome.error or "")
    assert pg_rows(pg, "victim") == [] and pg_rows(pg) == []
    pg.execute('CREATE TABLE quoted (id int, "say ""hi""" text)')
    assert run({"id": 1, 'say "hi"': "hello"}, sink("postgres", {**spec, "table": "quoted"})).ok
    assert pg_rows(pg, "quoted") == [(1, "hello")]


@pytest.mark.services
def test_postgres_unreachable_is_retried_then_fails_the_task(pg_database: str) -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere?connect_timeout=2"
    started = time.perf_counter()
    outcome = run(ROWS, sink("postgres", {"table": "people", "dsn": dsn}, id="pg"))
    elapsed = time.perf_counter() - started
    assert not outcome.ok
    assert outcome.error_type == "SinkError" and not outcome.retryable
    assert (outcome.error or "").startswith("sink 'pg' (postgres) failed after 3 attempts: ")
    assert outcome.sinks[0]["attempts"] == 3
    assert elapsed >= 0.6  # the default waits: 0.2 s, then 0.4 s
    assert outcome.this == ROWS  # the tool's result is kept


@pytest.mark.services
def test_postgres_dsn_from_a_secret_is_masked(
    pg: psycopg.Connection[Any], pg_database: str
) -> None:
    env = {"NOETL_SECRET_PG_DSN": pg_database}
    spec = {"table": "missing_table", "dsn": "<<secret:PG_DSN>>"}
    outcome = run(ROWS, sink("postgres", spec), env=env, secrets=("PG_DSN",))
    assert not outcome.ok
    assert pg_database not in json.dumps(outcome.to_payload())
    spec["table"] = "people"
    assert run(ROWS, sink("postgres", spec), env=env, secrets=("PG_DSN",)).ok


# --- duckdb -------------------------------------------------------------------------------


def duck_rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path)) as conn:
        return conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()


def test_duckdb_creates_the_table_and_inserts(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    outcome = run(ROWS, sink("duckdb", {"database": str(db), "table": "people"}))
    assert outcome.ok, outcome.error
    assert duck_rows(db, "people") == [(1, "ada", '["a"]', None), (2, "bob", None, 7.5)]
    assert run(ROWS, sink("duckdb", {"database": str(db), "table": "people"})).ok
    assert len(duck_rows(db, "people")) == 4  # insert appends


def test_duckdb_upsert_twice_and_replace(tmp_path: Path) -> None:
    db = str(tmp_path / "w.duckdb")
    spec = {"database": db, "table": "people", "mode": "upsert", "key": ["id"]}
    assert run(ROWS, sink("duckdb", spec)).ok
    assert run([{"id": 2, "name": "bo", "tags": None, "score": 1.0}], sink("duckdb", spec)).ok
    assert run(ROWS, sink("duckdb", spec)).ok
    assert [r[:2] for r in duck_rows(tmp_path / "w.duckdb", "people")] == [(1, "ada"), (2, "bob")]
    replace = {"database": db, "table": "people", "mode": "replace"}
    assert run([{"id": 7, "name": "z"}], sink("duckdb", replace)).ok
    assert [r[:2] for r in duck_rows(tmp_path / "w.duckdb", "people")] == [(7, "z")]


def test_duckdb_names_are_quoted_identifiers(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    with duckdb.connect(str(db)) as conn:
        conn.execute("CREATE TABLE victim (id INTEGER)")
    weird = 'x"; DROP TABLE victim; --'
    evil_column = 'c") VALUES (1); DROP TABLE victim; --'
    outcome = run({"id": 1, evil_column: 2}, sink("duckdb", {"database": str(db), "table": weird}))
    assert outcome.ok, outcome.error  # a table and a column with odd names, nothing else
    assert duck_rows(db, '"x""; DROP TABLE victim; --"') == [(1, 2)]
    assert duck_rows(db, "victim") == []
    with duckdb.connect(str(db)) as conn:
        columns = [c[0] for c in conn.execute('DESCRIBE "x""; DROP TABLE victim; --"').fetchall()]
    assert columns == ["id", evil_column]
    outcome = run({"id": 1}, sink("duckdb", {"database": str(db), "table": "a..b"}))
    assert outcome.error_type == "SinkError" and "table name is empty" in (outcome.error or "")


def test_duckdb_rejects_an_in_memory_database_and_non_rows(tmp_path: Path) -> None:
    outcome = run(ROWS, sink("duckdb", {"table": "t"}))
    assert not outcome.ok and "in-memory" in (outcome.error or "")
    outcome = run("text", sink("duckdb", {"database": str(tmp_path / "d.db"), "table": "t"}))
    assert "writes a map or a list of maps, not a string" in (outcome.error or "")


# --- file ---------------------------------------------------------------------------------


def test_file_formats(tmp_path: Path) -> None:
    rows = [{"id": 1, "name": "ada"}, {"id": 2, "ok": True, "tags": ["x"], "none": None}]
    outcome = run(
        rows,
        sink("file", {"path": str(tmp_path / "a.json")}, id="a"),
        sink("file", {"path": str(tmp_path / "sub" / "b.jsonl"), "format": "jsonl"}, id="b"),
        sink("file", {"path": str(tmp_path / "c.csv"), "format": "csv"}, id="c"),
    )
    assert outcome.ok, outcome.error
    assert json.loads((tmp_path / "a.json").read_text()) == rows
    lines = (tmp_path / "sub" / "b.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == rows
    csv_text = (tmp_path / "c.csv").read_text()
    assert csv_text == 'id,name,ok,tags,none\n1,ada,,,\n2,,true,"[""x""]",\n'
    assert [s["rows"] for s in outcome.sinks] == [2, 2, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "c.csv", "sub"]


@pytest.mark.parametrize(
    ("fmt", "bad"),
    [
        ("json", {"fine": 1, "bad": {1, 2}}),
        ("jsonl", {"bad": object()}),
        ("json", {"nan": float("nan")}),
        ("csv", {"bad": object()}),
    ],
)
def test_file_writes_are_atomic(tmp_path: Path, fmt: str, bad: dict[str, Any]) -> None:
    target = tmp_path / f"out.{fmt}"
    target.write_text("old contents\n")
    rows = [{"id": i, "pad": "x" * 10_000} for i in range(50)] + [bad]  # fails mid-write
    with pytest.raises(FatalError):
        FileWriter().write(rows, {"path": str(target), "format": fmt}, "k")
    outcome = run(rows, sink("file", {"path": str(target), "format": fmt}, id="out"))
    if "nan" in bad:
        # A result JSON cannot hold is refused before any sink writes it.
        assert not outcome.ok and outcome.error_type == "ResultRefused"
        assert outcome.sinks == ()
    else:
        assert not outcome.ok and outcome.error_type == "SinkError"
        assert outcome.sinks[0]["attempts"] == 1
    assert target.read_text() == "old contents\n"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary file left


# --- s3 -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        client = boto3.session.Session(**S3_KEYS).client(
            "s3", endpoint_url=endpoint, region_name="us-east-1"
        )
        client.create_bucket(Bucket="exports")
        yield endpoint
    finally:
        server.stop()


def s3_object(endpoint: str, key: str) -> dict[str, Any]:
    client = boto3.session.Session(**S3_KEYS).client(
        "s3", endpoint_url=endpoint, region_name="us-east-1"
    )
    found: dict[str, Any] = client.get_object(Bucket="exports", Key=key)
    return found


def test_s3_puts_one_object_per_write(s3_endpoint: str) -> None:
    env = {"NOETL_CREDENTIAL_S3": json.dumps(S3_KEYS)}
    base = {"bucket": "exports", "endpoint_url": s3_endpoint, "region": "us-east-1"}
    outcome = run(
        ROWS,
        sink("s3", {**base, "key": "x/rows.csv", "format": "csv", "credential": "S3"}, id="c"),
        sink("s3", {**base, "key": "x/rows.json", "credential": "S3"}, id="j"),
        env=env,
    )
    assert outcome.ok, outcome.error
    csv_object = s3_object(s3_endpoint, "x/rows.csv")
    assert csv_object["Body"].read().decode() == (
        'id,name,tags,score\n1,ada,"[""a""]",\n2,bob,,7.5\n'
    )
    assert csv_object["ContentType"] == "text/csv"
    assert csv_object["Metadata"] == {"noetl-sink-key": "e1:load:c"}
    assert json.loads(s3_object(s3_endpoint, "x/rows.json")["Body"].read()) == ROWS
    assert S3_KEYS["aws_secret_access_key"] not in json.dumps(outcome.to_payload())
    assert [s["bytes"] > 0 for s in outcome.sinks] == [True, True]


def test_s3_failures(s3_endpoint: str) -> None:
    env = {"NOETL_CREDENTIAL_S3": json.dumps(S3_KEYS)}
    spec = {"bucket": "no-such-bucket", "key": "k", "endpoint_url": s3_endpoint}
    outcome = run(ROWS, sink("s3", {**spec, "credential": "S3"}, retry=FAST), env=env)
    assert not outcome.ok and "NoSuchBucket" in (outcome.error or "")
    assert outcome.sinks[0]["attempts"] == 1  # a 404 is final
    dead = {**spec, "endpoint_url": f"http://127.0.0.1:{free_port()}", "credential": "S3"}
    outcome = run(ROWS, sink("s3", dead, retry=FAST), env=env)
    assert not outcome.ok and outcome.sinks[0]["attempts"] == 3  # connection refused: retried
    outcome = run(ROWS, sink("s3", {**spec, "credential": "NOPE"}), env=env)
    assert "credential 'NOPE' is not configured" in (outcome.error or "")


# --- retries, async, timeouts, pick -------------------------------------------------------


class FlakySink:
    """Fails its first `failures` writes (retryably unless `fatal`), then records values."""

    kind = "flaky"

    def __init__(self) -> None:
        self.failures = 0
        self.fatal = False
        self.delay = 0.0
        self.calls = 0
        self.written: list[tuple[Any, dict[str, Any], str]] = []

    def write(self, value: Any, spec: Mapping[str, Any], key: str) -> dict[str, Any]:
        self.calls += 1
        time.sleep(self.delay)
        if self.calls <= self.failures:
            if self.fatal:
                raise FatalError(f"bad write {self.calls}")
            raise RetryableError(f"transient {self.calls}")
        self.written.append((value, dict(spec), key))
        return {"rows": 1, "seen": dict(spec)}


@pytest.fixture
def flaky() -> Iterator[FlakySink]:
    fake = FlakySink()
    REGISTRY.register(fake)
    try:
        yield fake
    finally:
        REGISTRY.unregister("flaky")


def test_retryable_failures_are_retried(flaky: FlakySink) -> None:
    flaky.failures = 2
    outcome = run({"a": 1}, sink("flaky", {}, retry=FAST))
    assert outcome.ok and outcome.sinks[0]["attempts"] == 3
    assert flaky.written == [({"a": 1}, {}, "e1:load:flaky")]


def test_a_synchronous_sink_fails_the_task_after_its_retries(flaky: FlakySink) -> None:
    flaky.failures = 99
    outcome = run({"a": 1}, sink("flaky", {}, id="audit"), sink("file", {"path": "x"}, id="f"))
    assert not outcome.ok and outcome.error_type == "SinkError"
    assert outcome.error == "sink 'audit' (flaky) failed after 3 attempts: transient 3"
    assert flaky.calls == 3
    assert [s["status"] for s in outcome.sinks] == ["failed", "skipped"]
    flaky.calls, flaky.fatal = 0, True
    outcome = run({"a": 1}, sink("flaky", {}, retry={"max_attempts": 5}))
    assert flaky.calls == 1  # a fatal error is not retried
    assert outcome.error == "sink 'flaky' (flaky) failed after 1 attempt: bad write 1"


def test_an_async_sink_never_fails_the_task(flaky: FlakySink, tmp_path: Path) -> None:
    flaky.failures = 99
    path = tmp_path / "out.json"
    outcome = run(
        {"a": 1},
        sink("flaky", {}, async_=True, retry=FAST),
        sink("file", {"path": str(path)}, id="f"),
    )
    assert outcome.ok and outcome.error is None
    assert [(s["id"], s["status"], s["async"]) for s in outcome.sinks] == [
        ("flaky", "failed", True),
        ("f", "ok", False),
    ]
    assert outcome.sinks[0]["error"] == "transient 3"
    assert json.loads(path.read_text()) == {"a": 1}
    assert flaky.calls == 3  # async sinks still retry


def test_timeout_ms_bounds_each_attempt(flaky: FlakySink) -> None:
    flaky.delay = 0.5
    started = time.perf_counter()
    outcome = run(
        {"a": 1}, sink("flaky", {}, timeout_ms=50, retry={"max_attempts": 2, "initial_delay": 0})
    )
    assert time.perf_counter() - started < 0.4
    assert not outcome.ok
    assert "failed after 2 attempts: the write took longer than 50 ms" in (outcome.error or "")


def test_pick_args_and_secret_markers_on_the_worker(flaky: FlakySink) -> None:
    context = {"execution_id": "e1", "step": "load", "workload": {"tag": "t"}, "item": 3}
    outcome = run(
        {"rows": [1, 2]},
        sink("flaky", {"token": "Bearer <<secret:TOKEN>>"}),
        sink("flaky", {}, id="with_args", args={"n": "{{ out | length }}", "raw": "{{ this }}"}),
        pick="{{ this.rows + [item, workload.tag, step] }}",
        env={"NOETL_SECRET_TOKEN": "s3cr3t-value"},
        secrets=("TOKEN",),
        context=context,
    )
    assert outcome.ok, outcome.error
    assert flaky.written[0][0] == [1, 2, 3, "t", "load"]
    assert flaky.written[0][1] == {"token": "Bearer s3cr3t-value"}  # resolved for the write
    assert outcome.sinks[0]["seen"] == {"token": "Bearer ***"}  # masked in the report
    assert flaky.written[1][0] == {"n": 5, "raw": {"rows": [1, 2]}}
    bad = run({"rows": []}, sink("flaky", {}), pick="{{ saved_by_another_step }}")
    assert not bad.ok and "result.pick (rendered for the sinks on the worker)" in (bad.error or "")
    assert bad.sinks[0]["status"] == "skipped"


def test_retry_when_and_stop_when_judge_a_failed_write(flaky: FlakySink) -> None:
    # retry_when retries even a fatal error while it holds...
    flaky.failures, flaky.fatal = 2, True
    retry = {**FAST, "max_attempts": 5, "retry_when": "{{ 'bad write' in error }}"}
    outcome = run({"a": 1}, sink("flaky", {}, retry=retry))
    assert outcome.ok and outcome.sinks[0]["attempts"] == 3
    # ...and stops retrying a retryable one when false
    flaky.calls, flaky.failures, flaky.fatal = 0, 99, False
    retry = {**FAST, "max_attempts": 5, "retry_when": "{{ attempt < 2 }}"}
    outcome = run({"a": 1}, sink("flaky", {}, retry=retry))
    assert not outcome.ok and flaky.calls == 2
    # stop_when gives up at once, with the names it sees
    flaky.calls = 0
    retry = {**FAST, "max_attempts": 5, "stop_when": "{{ sink_id == 'audit' and retryable }}"}
    outcome = run({"a": 1}, sink("flaky", {}, id="audit", retry=retry))
    assert not outcome.ok and flaky.calls == 1
    # a condition that cannot be rendered fails the sink, naming the key
    flaky.calls = 0
    retry = {**FAST, "retry_when": "{{ nope.deeper }}"}
    outcome = run({"a": 1}, sink("flaky", {}, retry=retry))
    assert not outcome.ok and "retry.retry_when" in (outcome.error or "")


def test_retry_delays() -> None:
    assert retry_delays(None, "k") == [0.2, 0.4]
    assert retry_delays({"max_attempts": 4, "initial_delay": 1, "backoff": "linear"}, "k") == [
        1.0,
        2.0,
        3.0,
    ]
    capped = {"max_attempts": 3, "initial_delay": 10, "max_delay": 15, "jitter": False}
    assert retry_delays(capped, "k") == [10.0, 15.0]
    jittered = retry_delays({"max_attempts": 3, "jitter": True}, "k")
    assert jittered == retry_delays({"max_attempts": 3, "jitter": True}, "k")  # seeded
    assert 0.1 <= jittered[0] <= 0.2 and 0.2 <= jittered[1] <= 0.4


def test_run_sinks_waits_between_attempts(flaky: FlakySink) -> None:
    flaky.failures = 2
    waits: list[float] = []
    task = Task("t", "e", "s", "x", {}, {}, {}, "e:s:0", sinks=(sink("flaky", {}),))
    report = run_sinks(task, {"v": 1}, sleep=waits.append)
    assert report.error is None and waits == [0.2, 0.4]


# --- the engine side ----------------------------------------------------------------------

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: sinks}}
{policy}
workflow:
  - step: start
    loop: {{collection: [10, 20], element: n, key: "k{{{{ n }}}}"}}
    tool: {{kind: noop, args: {{n: "{{{{ n }}}}"}}}}
    result:
      pick: "{{{{ this }}}}"
      sink:
        - postgres: {{table: "{{{{ workload.table }}}}", dsn: "{{{{ secrets.DSN }}}}"}}
        - file: {{id: copy, path: out.json, async: true, retry: 2, timeout_ms: 500}}
    next: plain
  - step: plain
    tool: noop
"""


def first_tasks(policy: str = "") -> list[Task]:
    engine = Engine(build_graph(load_playbook_text(PLAYBOOK.format(policy=policy)).require()))
    decision = engine.start(engine.new_state("e9"), {"table": "people"}, 0.0)
    return [c.task for c in decision.commands if isinstance(c, EnqueueTask)]


def test_the_engine_puts_rendered_sinks_on_the_task() -> None:
    task = first_tasks()[0]
    assert task.key == "e9:start:k10"
    assert task.pick == "{{ this }}"
    assert task.secrets == ("DSN",)
    postgres, copy = task.sinks
    assert postgres == {
        "kind": "postgres",
        "spec": {"table": "people", "dsn": "<<secret:DSN>>"},
        "id": "postgres_0",
        "async": False,
        "timeout_ms": None,
        "retry": None,
    }
    assert (copy["id"], copy["async"], copy["timeout_ms"]) == ("copy", True, 500)
    assert copy["retry"]["max_attempts"] == 2
    assert Task.from_dict(json.loads(json.dumps(task.to_dict()))) == task


def test_on_sink_fail_async_ignore_makes_every_sink_best_effort() -> None:
    task = first_tasks("policy: {on_sink_fail: async_ignore}")[0]
    assert [s["async"] for s in task.sinks] == [True, True]


def test_a_task_without_sinks_serializes_as_before() -> None:
    task = Task("t", "e", "s", "noop", {}, {}, {}, "e:s")
    assert set(task.to_dict()) == {
        "task_id",
        "execution_id",
        "step",
        "kind",
        "spec",
        "args",
        "context",
        "key",
        "index",
        "attempt",
        "timeout_ms",
    }
    assert "sinks" not in Outcome("t", ok=True).to_payload()


def test_sinks_need_a_tool() -> None:
    text = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: no_tool}
workflow:
  - step: start
    result:
      sink: {file: {path: out.json}}
"""
    engine = Engine(build_graph(load_playbook_text(text).require()))
    decision = engine.start(engine.new_state("e1"), {}, 0.0)
    finished = [e for e in decision.events if e.type == "step.finished"]
    assert finished[0].payload["status"] == "failed"
    assert "result.sink needs a tool" in finished[0].payload["error"]
