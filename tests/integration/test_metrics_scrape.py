"""Metrics scraped over real HTTP and parsed: the embedded runtime's exporter, and a server
(`/metrics`) with a worker (its exporter) as real processes on PostgreSQL. The logs of
those processes, in JSON, are parsed too: every line an object, context injected, the
canary secret nowhere. Together they answer seed 002's question from the outside: did the
run execute, and how far did it get?"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from noetl.dsl.validate import load_playbook_text
from noetl.observability.exporter import start_exporter
from noetl.observability.metrics import ALL_METRIC_NAMES, Metrics
from noetl.paths import Roots
from noetl.runtime.local import embedded_runtime
from tests.distributed.cluster import Cluster, free_port, wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

DEMO = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: scrape_demo}}
workload: {{rows: [1, 2, 3, 4]}}
workflow:
  - step: start
    next: [items, gated]
  - step: items
    loop: {{collection: "{{{{ workload.rows }}}}", element: n, mode: parallel}}
    tool: {{kind: noop, args: {{n: "{{{{ n }}}}", token: "{{{{ secrets.CANARY }}}}"}}}}
    result:
      collect: {{into: all}}
      sink: {{file: {{path: "{out}/{{{{ n }}}}.json", id: rows}}}}
  - step: gated
    when: "{{{{ done('items') }}}}"
    tool: {{kind: noop}}
"""

SLOW = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: slow_demo}}
workflow:
  - step: wait
    tool:
      kind: python
      code: |
        import time
        from pathlib import Path
        def main(context, args):
            deadline = time.time() + 20
            while not Path(args["release"]).exists() and time.time() < deadline:
                time.sleep(0.02)
            return 1
      args: {{release: "{release}"}}
"""


def scrape(url: str, headers: dict[str, str] | None = None) -> Samples:
    response = httpx.get(url, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of `name` whose labels include `labels`."""
    return sum(
        value
        for (metric, have), value in samples.items()
        if metric == name and set(labels.items()) <= set(have)
    )


def families(samples: Samples) -> set[str]:
    names = set()
    for sample, _ in samples:
        name = sample
        for suffix in ("_bucket", "_sum", "_count"):
            if sample.endswith(suffix) and sample[: -len(suffix)] in ALL_METRIC_NAMES:
                name = sample[: -len(suffix)]
        names.add(name)
    return names


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    value = f"canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("NOETL_SECRET_CANARY", value)
    return value


def test_the_embedded_runtime_serves_its_metrics(tmp_path: Path, canary: str) -> None:
    metrics = Metrics()
    demo = load_playbook_text(DEMO.format(out=tmp_path / "out")).require()
    release = tmp_path / "release"
    slow = load_playbook_text(SLOW.format(release=release)).require()
    with embedded_runtime(
        str(tmp_path / "db.sqlite"), workers=2, metrics=metrics, roots=Roots(tmp_path, tmp_path)
    ) as runtime:
        exporter = start_exporter(metrics.registry, 0)
        try:
            result = runtime.run(demo)
            assert result.status.value == "ok", result
            after = scrape(exporter.url)
            slow_id = runtime.start(slow)
            running = scrape(exporter.url)  # its python task waits for the release file
            release.write_text("go")
            assert runtime.wait([slow_id])[0].status.value == "ok"
            finished = scrape(exporter.url)
        finally:
            exporter.close()

    wf = {"workflow": "scrape_demo"}
    assert get(after, "noetl_executions_started_total", **wf) == 1
    assert get(after, "noetl_executions_completed_total", **wf, status="ok") == 1
    assert get(after, "noetl_loop_items_total", **wf, step="items") == 4
    assert get(after, "noetl_loop_completed_total", **wf, step="items", ok="true") == 4
    assert get(after, "noetl_step_runs_total", **wf, step="gated") == 1
    assert get(after, "noetl_when_eval_total", **wf, step="gated", outcome="false") == 1
    assert get(after, "noetl_when_eval_total", **wf, step="gated", outcome="true") == 1
    assert get(after, "noetl_step_duration_seconds_count", **wf, step="items") == 1
    # sinks: reported with the outcomes (server side) and counted where they ran
    assert get(after, "noetl_sink_dispatch_total", sink="rows", **wf, step="items") == 4
    assert get(after, "noetl_sink_duration_seconds_count", sink="rows", **wf, step="items") == 4
    assert get(after, "noetl_sink_tasks_completed_total", sink="rows", ok="true") == 4
    # the worker threads of the embedded runtime: pool "local"
    assert get(after, "noetl_worker_tasks_started_total", kind="noop", pool="local") == 5
    assert get(after, "noetl_worker_tasks_completed_total", kind="noop", pool="local",
               ok="true") == 5  # fmt: skip
    assert get(after, "noetl_worker_task_duration_seconds_count", kind="noop") == 5
    assert get(after, "noetl_dlq_total", kind="noop", sink="") == 0
    # state gauges from the store: one running execution while the slow task waits
    assert get(after, "noetl_executions_running", workflow="scrape_demo") == 0
    assert get(running, "noetl_executions_running", workflow="slow_demo") == 1
    assert get(running, "noetl_execution_progress_age_seconds", workflow="slow_demo") >= 0
    assert ("noetl_execution_progress_age_seconds", (("workflow", "slow_demo"),)) in running
    assert get(finished, "noetl_executions_running", workflow="slow_demo") == 0
    assert get(finished, "noetl_executions_completed_total", workflow="slow_demo",
               status="ok") == 1  # fmt: skip
    assert families(finished) <= ALL_METRIC_NAMES


# --- distributed: a server and a worker, real processes, PostgreSQL --------------------


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path) -> Iterator[Cluster]:
    cl = Cluster(db=pg_database, workdir=tmp_path)
    try:
        yield cl
    finally:
        cl.stop_all()


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of a process's output that is a log record (JSON); others are the
    one-line banners the commands print on stderr."""
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


@pytest.mark.services
def test_a_server_and_a_worker_serve_their_metrics_and_json_logs(
    cluster: Cluster, tmp_path: Path
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    cluster.env = {"NOETL_LOGGING_FORMAT": "json", "NOETL_LOGGING_LEVEL": "DEBUG"}
    cluster.start_server()
    worker_port = free_port()
    cluster.env = {
        "NOETL_LOGGING_FORMAT": "json",
        "NOETL_LOG_LEVEL": "DEBUG",  # the old name still works
        "NOETL_SECRET_CANARY": canary,
        "NOETL_METRICS_PORT": str(worker_port),
        "NOETL_SINKS_FILE_ROOT": str(tmp_path),  # the file sink writes there
    }
    cluster.start_worker("w1")
    worker_url = f"http://127.0.0.1:{worker_port}/metrics"

    def exporter_up() -> bool:
        try:
            return httpx.get(worker_url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(exporter_up, 30, "the worker's exporter")

    demo_id = cluster.start_execution(DEMO.format(out=tmp_path / "out"))
    assert cluster.wait_finished(demo_id)["status"] == "ok"

    release = tmp_path / "release"
    slow_id = cluster.start_execution(SLOW.format(release=release))
    server_url = f"{cluster.url}/metrics"
    # The server's metrics are not public: Prometheus sends a (viewer) token.
    assert httpx.get(server_url, timeout=10).status_code == 401

    def leased() -> bool:
        return (
            get(
                scrape(server_url, cluster.headers),
                "noetl_task_queue_tasks",
                pool="default",
                status="leased",
            )
            == 1
        )

    wait_until(leased, 30, "the slow task to be leased")
    during = scrape(server_url, cluster.headers)
    release.write_text("go")
    assert cluster.wait_finished(slow_id)["status"] == "ok"

    def heartbeat_seen() -> bool:
        return total(scrape(worker_url), "noetl_worker_heartbeat_timestamp") > 0

    wait_until(heartbeat_seen, 30, "the worker's heartbeat gauge")
    server = scrape(server_url, cluster.headers)
    worker = scrape(worker_url)

    # Decisions are counted where they were committed (the server, or the worker's
    # continuation): summed, each happened once.
    def both(name: str, **labels: str) -> float:
        return total(server, name, **labels) + total(worker, name, **labels)

    wf = {"workflow": "scrape_demo"}
    # executions started and finished: the server reads them from the database, whoever
    # committed them (the worker's continuation finished both executions here)
    assert get(server, "noetl_executions_started_total", **wf) == 1
    assert get(server, "noetl_executions_completed_total", **wf, status="ok") == 1
    assert total(worker, "noetl_executions_completed_total") == 0
    assert both("noetl_loop_items_total", **wf, step="items") == 4
    assert both("noetl_loop_completed_total", **wf, step="items", ok="true") == 4
    assert both("noetl_step_runs_total", **wf) == 3  # start, items, gated
    assert both("noetl_sink_dispatch_total", sink="rows") == 4
    assert get(server, "noetl_executions_completed_total", workflow="slow_demo", status="ok") == 1
    # the worker's own metrics
    assert total(worker, "noetl_worker_tasks_started_total", kind="noop", pool="default") == 5
    assert total(worker, "noetl_worker_tasks_completed_total", kind="python", ok="true") == 1
    assert total(worker, "noetl_sink_tasks_completed_total", sink="rows", ok="true") == 4
    assert total(worker, "noetl_task_queue_delay_seconds_count", pool="default") == 6
    assert total(worker, "noetl_worker_reports_total", pool="default") == 6
    # state gauges, read by the server from the database
    assert get(during, "noetl_executions_running", workflow="slow_demo") == 1
    assert get(during, "noetl_task_queue_inflight", pool="default") == 1
    assert total(server, "noetl_executions_running") == 0
    assert get(server, "noetl_task_queue_inflight", pool="default") == 0  # present when idle
    assert total(server, "noetl_worker_heartbeat_timestamp", pool="default") > time.time() - 3600
    assert families(server) <= ALL_METRIC_NAMES and families(worker) <= ALL_METRIC_NAMES

    cluster.stop_all()
    server_log, worker_log = (proc.output() for proc in cluster.procs)
    assert canary not in server_log and canary not in worker_log
    server_records, worker_records = json_lines(server_log), json_lines(worker_log)
    for record in server_records + worker_records:
        assert {"ts", "level", "logger", "msg"} <= set(record), record
    done = [r for r in server_records + worker_records if r.get("event") == "execution_finished"]
    assert {(r["execution_id"], r["status"]) for r in done} == {(demo_id, "ok"), (slow_id, "ok")}
    step_done = [
        r for r in server_records + worker_records
        if r.get("event") == "step_done" and r["execution_id"] == demo_id
    ]  # fmt: skip
    assert sorted(r["step_id"] for r in step_done) == ["gated", "items", "start"]
    items = next(r for r in step_done if r["step_id"] == "items")
    assert items["counters"] == {"total": 4, "completed": 4, "succeeded": 4, "failed": 0}
    # worker events carry the task's context without being told
    started = [r for r in worker_records if r.get("event") == "plugin_start"]
    assert len(started) == 6
    for record in started:
        assert record["execution_id"] in (demo_id, slow_id)
        assert record["call_id"].startswith(record["execution_id"])
        assert "spec_signature" in record
    kinds = {r["event"] for r in worker_records if "event" in r}
    assert {"task_claimed", "plugin_start", "plugin_done", "sink_start", "sink_done",
            "task_ack"} <= kinds  # fmt: skip


def test_scrapes_while_the_runtime_works_are_safe(tmp_path: Path, canary: str) -> None:
    """Scraping from another thread while the embedded runtime records never fails."""
    metrics = Metrics()
    demo = load_playbook_text(DEMO.format(out=tmp_path / "out")).require()
    errors: list[BaseException] = []
    stop = threading.Event()
    with embedded_runtime(
        str(tmp_path / "db.sqlite"), workers=2, metrics=metrics, roots=Roots(tmp_path, tmp_path)
    ) as runtime:
        exporter = start_exporter(metrics.registry, 0)

        def scraper() -> None:
            while not stop.is_set():
                try:
                    scrape(exporter.url)
                except BaseException as exc:
                    errors.append(exc)
                    return

        thread = threading.Thread(target=scraper, daemon=True)
        thread.start()
        try:
            for _ in range(3):
                assert runtime.run(demo).status.value == "ok"
        finally:
            stop.set()
            thread.join(timeout=10)
            exporter.close()
        final = scrape_text(metrics)  # the execution counters are read from the open store
    assert errors == []
    assert get(final, "noetl_executions_started_total", workflow="scrape_demo") == 3
    assert get(final, "noetl_step_runs_total", workflow="scrape_demo", step="items") == 3


def scrape_text(metrics: Metrics) -> Samples:
    from prometheus_client import generate_latest

    out: Samples = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out
