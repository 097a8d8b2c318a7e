"""SEMANTICS section 6: loops. Also the seed acceptance test 2 (parallel loop + collect)."""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import Harness

from noetl.core import EnqueueTask, EventType, ExecutionStatus

E = EventType


def _loop(loop: str, *, result: str = "", next_: str = "", policy: str = "") -> Harness:
    """A loop step `lp` over `loop`, whose noop tool echoes `{v: item}`."""
    steps = f"""
- step: lp
  loop: {loop}
  tool: {{kind: noop, args: {{v: "{{{{ item }}}}"}}}}
"""
    if result:
        steps += f"  result: {result}\n"
    if next_:
        steps += f"  next: {next_}\n- step: after\n"
    return Harness.of(steps, policy=policy)


def _pending_indexes(h: Harness) -> list[int | None]:
    return [t.index for t in h.pending]


def _enqueued(commands: list[Any]) -> list[int | None]:
    return [c.task.index for c in commands if isinstance(c, EnqueueTask)]


def test_sequential_loop_dispatches_one_item_at_a_time() -> None:
    h = _loop("{collection: [a, b, c]}", result="{as: got}")
    assert h.trace() == [
        (E.WORKFLOW_STARTED, None),
        (E.STEP_CALLED, "lp"),
        (E.STEP_STARTED, "lp"),
        (E.LOOP_STARTED, "lp"),
        (E.LOOP_ITERATION_STARTED, "lp"),
    ]
    assert h.of_type(E.LOOP_STARTED)[0].payload == {"items": ["a", "b", "c"], "mode": "sequential"}
    started = h.of_type(E.LOOP_ITERATION_STARTED)[0].payload
    assert started["index"] == 0
    assert started["task"]["task_id"] == "e1.lp.0"
    assert started["task"]["args"] == {"v": "a"}
    assert _pending_indexes(h) == [0]
    decision = h.complete("lp", 0, this="A")
    assert h.trace(decision.events) == [
        (E.TOOL_PROCESSED, "lp"),
        (E.LOOP_ITERATION_FINISHED, "lp"),
        (E.LOOP_ITERATION_STARTED, "lp"),
    ]
    assert decision.events[1].payload == {"index": 0, "ok": True, "out": "A"}
    assert _enqueued(decision.commands) == [1]
    h.complete("lp", 1, this="B")
    decision = h.complete("lp", 2, this="C")
    assert h.trace(decision.events) == [
        (E.TOOL_PROCESSED, "lp"),
        (E.LOOP_ITERATION_FINISHED, "lp"),
        (E.LOOP_FINISHED, "lp"),
        (E.STEP_FINISHED, "lp"),
        (E.WORKFLOW_FINISHED, None),
    ]
    assert decision.events[2].payload == {"total": 3, "succeeded": 3, "failed": 0, "stopped": False}
    assert decision.events[3].payload == {
        "status": "ok",
        "result": ["A", "B", "C"],
        "saved_as": "got",
    }
    assert h.state.context == {"got": ["A", "B", "C"]}
    assert h.steps()["lp"] == {
        "status": "ok",
        "total": 3,
        "completed": 3,
        "succeeded": 3,
        "failed": 0,
    }
    assert h.status is ExecutionStatus.OK


def test_parallel_without_max_concurrency_dispatches_every_item() -> None:
    h = _loop("{collection: [a, b, c], mode: parallel}")
    assert _pending_indexes(h) == [0, 1, 2]
    assert h.of_type(E.LOOP_STARTED)[0].payload["mode"] == "parallel"


def test_parallel_max_concurrency_is_a_sliding_window() -> None:
    h = _loop("{collection: [0, 1, 2, 3, 4, 5], mode: parallel, max_concurrency: 2}")
    assert _pending_indexes(h) == [0, 1]
    # complete one -> exactly one more dispatched, whichever finished
    assert _enqueued(h.complete("lp", 1).commands) == [2]
    assert _pending_indexes(h) == [0, 2]
    assert _enqueued(h.complete("lp", 2).commands) == [3]
    assert _enqueued(h.fail("lp", 0).commands) == [4]
    assert _pending_indexes(h) == [3, 4]
    assert _enqueued(h.complete("lp", 4).commands) == [5]
    assert _enqueued(h.complete("lp", 5).commands) == []
    assert _pending_indexes(h) == [3]
    assert h.step_status("lp") == "running"
    h.complete("lp", 3)
    assert h.steps()["lp"] == {
        "status": "failed",
        "total": 6,
        "completed": 6,
        "succeeded": 5,
        "failed": 1,
        "error": "1 of 6 loop items failed",
    }


def test_parallel_window_never_exceeds_max_concurrency_in_any_order() -> None:
    for order in ("fifo", "lifo"):
        h = _loop("{collection: [0, 1, 2, 3, 4, 5, 6], mode: parallel, max_concurrency: 3}")
        most = len(h.pending)
        while h.pending:
            h.answer(h.pending[0] if order == "fifo" else h.pending[-1])
            most = max(most, len(h.pending))
            assert len(h.pending) == min(3, 7 - h.state.steps["lp"].completed)
        assert most == 3
        assert h.status is ExecutionStatus.OK


def test_until_stops_a_sequential_loop_early() -> None:
    h = _loop(
        "{collection: [1, 2, 3, 4], until: '{{ out == 2 }}'}",
        result="{pick: '{{ this.v }}', as: got}",
        next_="after",
    )
    h.complete("lp", 0, this={"v": 1})
    decision = h.complete("lp", 1, this={"v": 2})
    finished = [e for e in decision.events if e.type == E.LOOP_ITERATION_FINISHED]
    assert finished[0].payload == {"index": 1, "ok": True, "out": 2, "stop": True}
    assert _enqueued(decision.commands) == []
    assert h.of_type(E.LOOP_FINISHED)[0].payload == {
        "total": 4,
        "succeeded": 2,
        "failed": 0,
        "stopped": True,
    }
    assert h.state.context == {"got": [1, 2]}
    assert h.steps()["lp"] == {
        "status": "ok",
        "total": 4,
        "completed": 2,
        "succeeded": 2,
        "failed": 0,
    }
    assert h.started_steps() == ["lp", "after"]
    assert h.status is ExecutionStatus.OK


def test_until_sees_this_and_the_element() -> None:
    h = _loop("{collection: [1, 2, 3], until: '{{ this.stop and item == 2 }}'}")
    h.complete("lp", 0, this={"stop": True})
    assert _pending_indexes(h) == [1]
    h.complete("lp", 1, this={"stop": True})
    assert h.steps()["lp"]["completed"] == 2
    assert h.status is ExecutionStatus.OK


def test_until_in_parallel_lets_running_items_finish_and_starts_no_more() -> None:
    h = _loop(
        "{collection: [0, 1, 2, 3, 4], mode: parallel, max_concurrency: 3, until: '{{ out }}'}"
    )
    assert _pending_indexes(h) == [0, 1, 2]
    decision = h.complete("lp", 1, this=True)
    assert _enqueued(decision.commands) == []
    assert h.step_status("lp") == "running"
    h.complete("lp", 2, this=False)
    assert h.step_status("lp") == "running"
    h.complete("lp", 0, this=False)
    assert h.of_type(E.LOOP_FINISHED)[0].payload == {
        "total": 5,
        "succeeded": 3,
        "failed": 0,
        "stopped": True,
    }
    assert h.finished("lp").payload["result"] == [False, True, False]
    assert h.status is ExecutionStatus.OK


def test_until_error_stops_the_loop_and_is_recorded() -> None:
    h = _loop("{collection: [1, 2, 3], until: '{{ out.nope.x }}'}")
    h.complete("lp", 0, this={})
    payload = h.of_type(E.LOOP_ITERATION_FINISHED)[0].payload
    assert payload["stop"] is True
    assert "nope" in payload["until_error"]
    assert h.steps()["lp"]["completed"] == 1
    assert h.status is ExecutionStatus.OK


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_empty_collection_finishes_ok_with_total_zero(mode: str) -> None:
    h = _loop(f"{{collection: [], mode: {mode}}}", result="{as: got}", next_="after")
    assert h.dispatched == []
    assert h.trace()[:9] == [
        (E.WORKFLOW_STARTED, None),
        (E.STEP_CALLED, "lp"),
        (E.STEP_STARTED, "lp"),
        (E.LOOP_STARTED, "lp"),
        (E.LOOP_FINISHED, "lp"),
        (E.STEP_FINISHED, "lp"),
        (E.NEXT_EVALUATED, "lp"),
        (E.STEP_CALLED, "after"),
        (E.STEP_STARTED, "after"),
    ]
    assert h.of_type(E.LOOP_FINISHED)[0].payload == {
        "total": 0,
        "succeeded": 0,
        "failed": 0,
        "stopped": False,
    }
    assert h.steps()["lp"] == {
        "status": "ok",
        "total": 0,
        "completed": 0,
        "succeeded": 0,
        "failed": 0,
    }
    assert h.state.context == {"got": []}
    assert h.status is ExecutionStatus.OK


def test_empty_collection_from_a_template() -> None:
    h = Harness.of(
        """
        - step: lp
          loop: {collection: "{{ workload.users }}", element: user, mode: parallel}
          tool: {kind: noop}
        """,
        workload={"users": []},
    )
    assert h.steps()["lp"]["total"] == 0
    assert h.status is ExecutionStatus.OK


def test_dict_collection_iterates_key_value_entries() -> None:
    h = Harness.of(
        """
        - step: lp
          loop: {collection: "{{ workload.prices }}", element: entry, mode: parallel}
          tool: {kind: noop, args: {k: "{{ entry.key }}", v: "{{ entry.value }}"}}
          result: {collect: {into: got, mode: list}}
        """,
        workload={"prices": {"apple": 1, "pear": 2}},
    )
    assert h.of_type(E.LOOP_STARTED)[0].payload["items"] == [
        {"key": "apple", "value": 1},
        {"key": "pear", "value": 2},
    ]
    assert [t.args for t in h.dispatched] == [{"k": "apple", "v": 1}, {"k": "pear", "v": 2}]
    h.run("lifo")
    assert h.state.context == {"got": [{"k": "apple", "v": 1}, {"k": "pear", "v": 2}]}


def test_strict_loop_fails_on_any_failed_item() -> None:
    h = _loop(
        "{collection: [1, 2, 3], mode: parallel}",
        result="{as: got}",
        policy="on_step_fail: continue",
    )
    h.complete("lp", 0, this="a")
    h.fail("lp", 1, error="item 1 broke")
    h.complete("lp", 2, this="c")
    finished = h.of_type(E.LOOP_ITERATION_FINISHED)
    assert finished[1].payload == {"index": 1, "ok": False, "error": "item 1 broke"}
    assert h.finished("lp").payload == {
        "status": "failed",
        "result": ["a", None, "c"],
        "error": "1 of 3 loop items failed",
    }
    assert h.state.context == {}  # a failed step saves nothing
    assert h.state.steps["lp"].result == ["a", None, "c"]
    assert h.status is ExecutionStatus.OK


def test_strict_loop_failure_halts_by_default() -> None:
    h = _loop("{collection: [1, 2]}")
    h.fail("lp", 0)
    assert _pending_indexes(h) == [1]  # the loop finishes its items first
    h.complete("lp", 1)
    assert h.status is ExecutionStatus.FAIL
    assert h.steps()["lp"]["error"] == "1 of 2 loop items failed"


@pytest.mark.parametrize(
    ("failures", "status"),
    [(0, "ok"), (1, "ok"), (2, "ok"), (3, "failed"), (4, "failed")],
)
def test_min_success_ratio(failures: int, status: str) -> None:
    h = _loop(
        "{collection: [0, 1, 2, 3], mode: parallel, min_success_ratio: 0.5}",
        result="{collect: {into: got, mode: list}}",
        policy="on_step_fail: continue",
    )
    for index in range(4):
        if index < failures:
            h.fail("lp", index)
        else:
            h.complete("lp", index, this=index)
    assert h.steps()["lp"]["status"] == status
    if status == "ok":
        assert h.state.context == {"got": list(range(failures, 4))}
    else:
        assert h.steps()["lp"]["error"] == f"{failures} of 4 loop items failed"


def test_result_as_and_collect_are_in_item_order_whatever_the_completion_order() -> None:
    h = Harness.of(
        """
        - step: lp
          loop: {collection: "{{ workload.users }}", element: user, mode: parallel}
          tool: {kind: noop}
          result:
            pick: "{{ this.score }}"
            as: scores
        - step: lp_list
          loop: {collection: "{{ workload.users }}", element: user, mode: parallel}
          tool: {kind: noop}
          result:
            pick: "{{ this.score }}"
            collect: {into: all_scores, mode: list}
        - step: lp_map
          loop: {collection: "{{ workload.users }}", element: user, mode: parallel}
          tool: {kind: noop}
          result:
            pick: "{{ this.score }}"
            collect: {into: by_user, mode: map, key: "{{ user.id }}-{{ this.tag }}-{{ out }}"}
        - step: start
          next: [lp, lp_list, lp_map]
        """,
        workload={"users": [{"id": i} for i in range(5)]},
    )
    assert len(h.pending) == 15
    for task in reversed(list(h.pending)):  # complete in reverse order
        assert task.index is not None
        h.complete(task.step, task.index, this={"score": task.index * 10, "tag": "t"})
    assert h.state.context == {
        "scores": [0, 10, 20, 30, 40],
        "all_scores": [0, 10, 20, 30, 40],
        "by_user": {f"{i}-t-{i * 10}": i * 10 for i in range(5)},
    }
    assert list(h.state.context["by_user"]) == [f"{i}-t-{i * 10}" for i in range(5)]
    assert h.status is ExecutionStatus.OK


def test_loop_result_pick_error_fails_the_item() -> None:
    h = _loop("{collection: [1, 2], mode: parallel}", result="{pick: '{{ this.x }}'}")
    h.complete("lp", 1, this={"x": 1})
    h.complete("lp", 0, this={})
    payload = h.of_type(E.LOOP_ITERATION_FINISHED)[1].payload
    assert payload["ok"] is False
    assert payload["error"].startswith("result.pick: undefined value")
    assert h.status is ExecutionStatus.FAIL


def test_loop_args_error_fails_only_that_item() -> None:
    h = Harness.of(
        """
        - step: lp
          loop: {collection: [{x: 1}, {y: 2}, {x: 3}], mode: parallel, min_success_ratio: 0.5}
          tool: {kind: noop, args: {x: "{{ item.x }}"}}
          result: {as: got}
        """
    )
    assert _pending_indexes(h) == [0, 2]
    bad = h.of_type(E.LOOP_ITERATION_FINISHED)[0].payload
    assert bad == {
        "index": 1,
        "ok": False,
        "error": "tool: args.x: undefined value: 'dict object' has no attribute 'x'",
    }
    h.run()
    assert h.state.context == {"got": [{"x": 1}, None, {"x": 3}]}
    assert h.status is ExecutionStatus.OK


def test_loop_without_tool_outputs_its_items() -> None:
    h = Harness.of(
        """
        - step: lp
          loop: {collection: [1, 2, 3], mode: parallel}
          result: {pick: "{{ this * 2 }}", as: doubled}
        """
    )
    assert h.dispatched == []
    assert h.state.context == {"doubled": [2, 4, 6]}
    assert h.status is ExecutionStatus.OK


def test_loop_collection_sees_bind() -> None:
    h = Harness.of(
        """
        - step: lp
          bind: {xs: "{{ [1, 2] }}"}
          loop: {collection: "{{ xs }}", mode: parallel}
          tool: {kind: noop, args: {v: "{{ item }}"}}
        """
    )
    assert [t.args for t in h.dispatched] == [{"v": 1}, {"v": 2}]


def test_loop_aliases_and_timeouts_reach_the_tasks() -> None:
    h = Harness.of(
        """
        - step: lp
          loop:
            in: [1, 2, 3]
            iterator: n
            spec: {mode: parallel, max_in_flight: 2}
            item_timeout_ms: 500
          tool: {kind: noop, args: {n: "{{ n }}"}}
        - step: lp2
          loop: {collection: [1], item_timeout_ms: 500}
          tool: {kind: noop, timeout_ms: 100}
        - step: start
          next: [lp, lp2]
        """
    )
    assert [(t.step, t.args, t.timeout_ms) for t in h.pending] == [
        ("lp", {"n": 1}, 500),
        ("lp", {"n": 2}, 500),
        ("lp2", {}, 100),
    ]


def test_a_late_item_result_after_the_loop_finished_is_discarded() -> None:
    h = _loop("{collection: [1, 2], mode: parallel}", policy="on_step_fail: continue")
    task_id = h.task("lp", 0).task_id
    h.complete("lp", 0)
    assert h.outcome(task_id, ok=False, error="again").events == []
    assert h.steps()["lp"]["completed"] == 1


def test_acceptance_2_parallel_loop_with_collect_and_summarize() -> None:
    users = [{"name": n} for n in ("ann", "bob", "cyd", "dee")]
    h = Harness.of(
        """
        - step: proc_users
          loop: {collection: "{{ workload.users }}", element: user, mode: parallel}
          tool:
            kind: python
            code: pass
            args: {name: "{{ user.name }}"}
          result:
            collect: {into: all_scores, mode: list}
          next: [{step: summarize}]
        - step: summarize
          when: "{{ loop_done('proc_users') }}"
          tool:
            kind: python
            code: pass
            args: {scores: "{{ all_scores }}"}
          result: {as: summary}
        """,
        workload={"users": users},
        handlers={
            "proc_users": lambda task: len(task.args["name"]) * 10,
            "summarize": lambda task: {"n": len(task.args["scores"])},
        },
    )
    # N users -> N worker tasks, all in flight at once
    assert [t.step for t in h.pending] == ["proc_users"] * 4
    assert [t.args for t in h.pending] == [{"name": u["name"]} for u in users]
    for index in (3, 1, 0):
        h.answer_step("proc_users", index)
        assert h.of_type(E.STEP_CALLED, "summarize") == []
        assert all(t.step == "proc_users" for t in h.pending)
    h.answer_step("proc_users", 2)
    assert [t.step for t in h.pending] == ["summarize"]
    assert h.task("summarize").args == {"scores": [30, 30, 30, 30]}
    h.run()
    assert len(h.state.context["all_scores"]) == 4
    assert h.state.context["summary"] == {"n": 4}
    assert len(h.of_type(E.STEP_STARTED, "summarize")) == 1
    assert h.status is ExecutionStatus.OK
