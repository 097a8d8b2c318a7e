"""Structured logs: the JSON and text formats, injected context, redaction by key and by
secret value, and the log events written from committed events."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from engine_harness import Harness, TaskFailure

from noetl.core import Outcome, Task
from noetl.errors import ConfigError
from noetl.observability.log_events import LogObserver
from noetl.observability.logging import (
    JsonFormatter,
    TextFormatter,
    bind_task,
    configure_logging,
    log_context,
    log_event,
    reset_task,
)
from noetl.redaction import MASK, SecretValues

CANARY = "canary-7f3a9c21-secret"
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


class Capture:
    """A logger whose records land, formatted, in a list of lines."""

    def __init__(self, formatter: logging.Formatter, name: str = "noetl.test") -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(formatter)
        self.logger = logging.getLogger(name)
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False

    def lines(self) -> list[str]:
        return [line for line in self.stream.getvalue().splitlines() if line]

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines()]

    def close(self) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.propagate = True
        self.logger.setLevel(logging.NOTSET)


@pytest.fixture
def secrets() -> SecretValues:
    values = SecretValues()
    values.remember(CANARY)
    return values


@pytest.fixture
def capture(secrets: SecretValues) -> Iterator[Capture]:
    cap = Capture(JsonFormatter(secrets=secrets))
    yield cap
    cap.close()


def make_task(**changes: Any) -> Task:
    fields: dict[str, Any] = {
        "task_id": "e1.fetch.3",
        "execution_id": "e1",
        "step": "fetch",
        "kind": "http",
        "spec": {},
        "args": {},
        "context": {},
        "key": "e1:fetch:user-3",
        "index": 3,
        "attempt": 2,
    }
    fields.update(changes)
    return Task(**fields)


def test_a_json_line_has_the_common_fields(capture: Capture) -> None:
    log_event(capture.logger, logging.INFO, "step_done", step_id="fetch", ok=True, skipped=None)
    (line,) = capture.records()
    assert TS.match(line["ts"]), line["ts"]
    assert (line["level"], line["logger"], line["msg"], line["event"]) == (
        "INFO",
        "noetl.test",
        "step_done",
        "step_done",
    )
    assert line["step_id"] == "fetch" and line["ok"] is True
    assert "skipped" not in line  # None values are left out


def test_the_task_context_is_injected_into_every_record(capture: Capture) -> None:
    token = bind_task(make_task())
    try:
        capture.logger.info("plain %s message", "formatted")
        log_event(capture.logger, logging.DEBUG, "plugin_start", tool_kind="http")
    finally:
        reset_task(token)
    capture.logger.info("after")
    first, second, after = capture.records()
    for line in (first, second):
        assert {k: line[k] for k in ("execution_id", "step_id", "call_id", "tool_kind")} == {
            "execution_id": "e1",
            "step_id": "fetch",
            "call_id": "e1.fetch.3",
            "tool_kind": "http",
        }
        assert (line["loop_index"], line["loop_key"], line["attempt"]) == (3, "user-3", 2)
    assert first["msg"] == "plain formatted message"
    assert "execution_id" not in after


def test_log_context_adds_fields_inside_its_block(capture: Capture) -> None:
    with log_context(execution_id="e9", worker_id="w1"), log_context(step_id="s"):
        capture.logger.warning("inside")
    capture.logger.warning("outside")
    inside, outside = capture.records()
    assert (inside["execution_id"], inside["worker_id"], inside["step_id"]) == ("e9", "w1", "s")
    assert "execution_id" not in outside


def test_values_under_sensitive_keys_are_masked_and_identifiers_kept(capture: Capture) -> None:
    log_event(
        capture.logger,
        logging.INFO,
        "sink_done",
        loop_key="key-1",
        headers={"Authorization": "Bearer abc", "accept": "json"},
        api_token="abc",
    )
    (line,) = capture.records()
    assert line["loop_key"] == "key-1"
    assert line["headers"] == {"Authorization": MASK, "accept": "json"}
    assert line["api_token"] == MASK


def test_a_secret_value_never_appears_whatever_carries_it(capture: Capture) -> None:
    capture.logger.info("connecting with %s", CANARY)
    log_event(capture.logger, logging.WARNING, "task_dlq", error=f"auth failed for {CANARY}")
    try:
        raise RuntimeError(f"boom {CANARY}")
    except RuntimeError:
        capture.logger.exception("failed")
    text = capture.stream.getvalue()
    assert CANARY not in text
    first, second, third = capture.records()
    assert first["msg"] == f"connecting with {MASK}"
    assert second["error"] == f"auth failed for {MASK}"
    assert "RuntimeError: boom ***" in third["exc"]


def test_the_text_format_is_one_readable_line(secrets: SecretValues) -> None:
    cap = Capture(TextFormatter(secrets=secrets), name="noetl.text")
    try:
        log_event(cap.logger, logging.INFO, "step_done", step_id="s", ok=True, note=CANARY)
        (line,) = cap.lines()
    finally:
        cap.close()
    assert re.match(r"^\d\d:\d\d:\d\d\.\d{3} INFO +noetl.text step_done step_id=s ok=true", line)
    assert CANARY not in line and f"note={MASK}" in line


def test_configure_logging_installs_one_handler_and_checks_its_input() -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("noetl").level)
    stream = io.StringIO()
    try:
        configure_logging("INFO", "json", stream=stream)
        handler = configure_logging("debug", "json", stream=stream)
        assert [h for h in root.handlers if type(h) is type(handler)] == [handler]
        logging.getLogger("noetl.x").debug("seen")
        logging.getLogger("elsewhere").debug("seen too at DEBUG")
        configure_logging("INFO", "text", stream=stream)
        logging.getLogger("elsewhere").info("other libraries log from WARNING")
        logging.getLogger("noetl.x").debug("not at INFO")
        with pytest.raises(ConfigError, match="log level"):
            configure_logging("LOUD", "json")
        with pytest.raises(ConfigError, match="log format"):
            configure_logging("INFO", "xml")
    finally:
        for h in list(root.handlers):
            if h not in saved[0]:
                root.removeHandler(h)
        root.setLevel(saved[1])
        logging.getLogger("noetl").setLevel(saved[2])
    lines = stream.getvalue().splitlines()
    assert [json.loads(x)["msg"] for x in lines] == ["seen", "seen too at DEBUG"]


# --- log events from committed events ------------------------------------------------


LOOP = """
- step: start
  next: [items]
- step: items
  loop: {collection: "{{ workload.rows }}", element: n, mode: parallel}
  tool: {kind: python, code: pass}
  result: {collect: {into: all}}
"""


def observe(items: int, level: int, *, fail: bool = False) -> list[dict[str, Any]]:
    cap = Capture(JsonFormatter(secrets=SecretValues()), name="noetl.test.decisions")
    cap.logger.setLevel(level)
    observer = LogObserver(decisions=cap.logger, tasks=cap.logger)

    def handler(task: Task) -> Any:
        if fail and task.index == 0:
            raise TaskFailure("bad item", "ValueError")
        return task.index

    h = Harness.of(LOOP, workload={"rows": list(range(items))}, start=False)
    h.handlers = {"items": handler}
    h.start()
    h.run()
    observer.committed(h.engine.graph, h.state, h.events)
    try:
        return cap.records()
    finally:
        cap.close()


def test_a_big_loop_writes_as_many_info_lines_as_a_small_one() -> None:
    small = observe(3, logging.INFO)
    big = observe(60, logging.INFO)
    assert [r["event"] for r in small] == [r["event"] for r in big]
    assert [r["event"] for r in big] == [
        "execution_started",
        "step_called",
        "step_dispatch",
        "step_done",
        "route_edge_selected",
        "step_called",
        "step_dispatch",
        "result_integrate",
        "step_done",
        "execution_finished",
    ]
    dispatch = [r for r in big if r["event"] == "step_dispatch" and r["step_id"] == "items"]
    assert dispatch[0]["loop_plan"] == {"total": 60, "mode": "parallel"}
    done = next(r for r in big if r["event"] == "step_done" and r["step_id"] == "items")
    assert done["counters"] == {"total": 60, "completed": 60, "succeeded": 60, "failed": 0}
    assert all(r["execution_id"] == "e1" and r["workflow_ref"] == "test" for r in big)
    assert big[-1]["status"] == "ok" and big[-1]["steps"] == {"ok": 2}


def test_debug_adds_one_task_enqueue_per_item() -> None:
    records = observe(5, logging.DEBUG)
    enqueued = [r for r in records if r["event"] == "task_enqueue"]
    assert [r["loop_index"] for r in enqueued] == [0, 1, 2, 3, 4]
    assert {r["message_id"] for r in enqueued} == {f"e1.items.{i}" for i in range(5)}


def test_a_failed_item_is_a_dead_letter_at_warning() -> None:
    records = observe(3, logging.WARNING, fail=True)
    events = [r["event"] for r in records]
    assert events == ["task_dlq", "step_done", "step_failure_unhandled", "execution_finished"]
    dlq = records[0]
    assert (dlq["message_id"], dlq["error_class"], dlq["error"], dlq["tool_kind"]) == (
        "e1.items.0",
        "ValueError",
        "bad item",
        "python",
    )
    assert dlq["level"] == "WARNING"


def test_at_warning_the_same_warnings_are_written_as_at_info() -> None:
    """With INFO off only the events that may warn are looked at: none is lost."""
    for fail in (False, True):
        at_info = [r for r in observe(3, logging.INFO, fail=fail) if r.pop("level") != "INFO"]
        at_warning = observe(3, logging.WARNING, fail=fail)
        for record in (*at_info, *at_warning):
            record.pop("ts")
            record.pop("level", None)
        assert at_warning == at_info
        assert bool(at_warning) is fail


def test_worker_hooks_log_task_events_with_a_spec_signature_only() -> None:
    cap = Capture(JsonFormatter(secrets=SecretValues()), name="noetl.test.tasks")
    observer = LogObserver(worker_id="w1", decisions=cap.logger, tasks=cap.logger)
    task = make_task(spec={"url": f"https://h/?token={CANARY}", "method": "GET"})
    try:
        observer.claimed(task, 0.25)
        observer.tool_started(task)
        observer.tool_finished(task, Outcome(task.task_id, ok=True, duration_ms=5), 0.005)
        observer.sink_started(task, {"id": "out", "kind": "file"})
        failed = {"id": "out", "kind": "file", "status": "failed", "error": "disk full"}
        observer.sink_finished(task, {"id": "out", "kind": "file"}, failed)
        observer.reported(task, Outcome(task.task_id, ok=True, duration_ms=5), "continued")
        records = cap.records()
    finally:
        cap.close()
    assert [r["event"] for r in records] == [
        "task_claimed",
        "plugin_start",
        "plugin_done",
        "sink_start",
        "sink_done",
        "task_ack",
    ]
    claimed, start, done, _, sink_done, ack = records
    assert (claimed["worker_id"], claimed["queued_ms"], claimed["attempt"]) == ("w1", 250.0, 2)
    assert start["spec_signature"] == "{url:str,method:str}"
    assert CANARY not in json.dumps(records)
    assert (done["ok"], done["duration_ms"]) == (True, 5.0)
    assert (sink_done["level"], sink_done["ok"], sink_done["error"]) == (
        "WARNING",
        False,
        "disk full",
    )
    assert (ack["path"], ack["level"]) == ("continued", "DEBUG")
