"""A pipeline's progress between attempts (noetl.worker.pipeline_state): what a checkpoint
holds, how a new attempt resumes from it, the bounds of the runs it reports."""

from __future__ import annotations

import json
from typing import Any

import pytest

from noetl.worker.pipeline_state import MAX_TRACE, LocalCheckpoints, Progress, trace_entry


def test_a_progress_round_trips_through_json() -> None:
    progress = Progress(
        index=2, tries=1, runs=5, prev={"a": [1, "x"]}, results={"t": 1}, names={"n": "v"},
        ctx={"c": 1}, iter={"i": 2}, ctx_patch={"c": 1}, end="retry",
        trace=[{"task": "t", "try": 1}],
    )  # fmt: skip
    assert Progress.of_value(json.loads(json.dumps(progress.to_value()))) == progress


@pytest.mark.parametrize(
    "change",
    [
        {"version": 2},
        {"index": -1},
        {"tries": True},
        {"runs": "3"},
        {"results": []},
        {"ctx": None},
        {"trace": {}},
        {"end": "maybe"},
    ],
)
def test_a_value_that_is_not_a_progress_is_ignored(change: dict[str, Any]) -> None:
    assert Progress.of_value({**Progress().to_value(), **change}) is None
    assert Progress.of_value("text") is None


def test_only_a_pending_rule_retry_goes_on_counting_its_tries() -> None:
    kept = Progress(index=1, tries=2, trace=[{"task": "a"}], more=3)
    assert Progress(**{**vars_of(kept), "end": "retry"}).resumed().tries == 2
    assert Progress(**{**vars_of(kept), "end": "fail"}).resumed().tries == 0
    died = Progress(**{**vars_of(kept), "end": None}).resumed()
    assert died.tries == 0 and died.index == 1
    # the runs of an attempt that died are reported by the next one; a reported one's not
    assert died.trace == [{"task": "a"}] and died.more == 3
    assert Progress(**{**vars_of(kept), "end": "fail"}).resumed().trace == []


def vars_of(progress: Progress) -> dict[str, Any]:
    return {name: getattr(progress, name) for name in Progress.__slots__}


def test_the_runs_reported_are_bounded() -> None:
    progress = Progress()
    for number in range(MAX_TRACE + 7):
        progress.record({"task": "t", "try": number})
    reported = progress.reported()
    assert len(reported) == MAX_TRACE + 1
    assert reported[-1] == {"more": 7}


def test_a_trace_entry_cuts_a_long_error() -> None:
    entry = trace_entry("t", 1, 1, ok=False, do="fail", duration_ms=1.23456, error="x" * 1000)
    assert len(entry["error"]) == 303 and entry["duration_ms"] == 1.235
    assert "error" not in trace_entry("t", 1, 1, ok=True, do="continue", duration_ms=0, error="e")


def test_local_checkpoints_keep_a_copy_and_refuse_a_stale_attempt() -> None:
    store = LocalCheckpoints(limit=2)
    value: dict[str, Any] = {"results": {}}
    assert store.save("t1", "e", 2, value)
    value["results"]["late"] = 1  # what the pipeline changes later is not what was saved
    kept = store.load("t1")
    assert kept is not None and kept.value == {"results": {}}
    assert not store.save("t1", "e", 1, {"stale": True})
    assert store.save("t2", "e", 1, {}) and store.save("t3", "e", 1, {})
    assert store.load("t1") is None  # the oldest of more than `limit`
    store.drop("t2")
    assert store.load("t2") is None and store.load("t3") is not None
