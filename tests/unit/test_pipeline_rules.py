"""The pipeline tool and its policy rules: each action, the defaults, `set`, the bounds.

The tasks run through a real `ToolRegistry` whose `noop` kind is replaced by a scripted
tool: each call pops the next outcome of its task's script (by the task's `args.script`),
and records what it was given.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any

import pytest

from noetl.core import Outcome, Task
from noetl.dsl.render import Renderer
from noetl.worker.pipeline import PipelineTool
from noetl.worker.pipeline_state import LocalCheckpoints, Progress
from noetl.worker.policy_rules import Action, decide, output_view, retry_delay
from noetl.worker.tools import ToolRegistry


class Scripted:
    """`noop` tasks answer from scripts: `ok:<value>`, `err:<type>:<retryable>`,
    `http:<status>`, `sleep:<seconds>`."""

    kind = "noop"
    uses_credentials = False

    def __init__(self, scripts: dict[str, list[str]]) -> None:
        self.scripts = scripts
        self.calls: list[Task] = []

    def run(self, task: Task) -> Outcome:
        self.calls.append(task)
        script = self.scripts[str(task.args["script"])]
        step = script.pop(0) if len(script) > 1 else script[0]
        kind, _, rest = step.partition(":")
        if kind == "ok":
            return Outcome(task.task_id, ok=True, this={"value": rest, "args": task.args})
        if kind == "http":
            return Outcome(
                task.task_id,
                ok=False,
                this={"status_code": int(rest), "headers": {}},
                error=f"HTTP {rest}",
                error_type="HttpError",
                retryable=True,
            )
        if kind == "sleep":
            time.sleep(float(rest))
            return Outcome(task.task_id, ok=True, this={"slept": rest})
        error_type, _, retryable = rest.partition(":")
        return Outcome(
            task.task_id,
            ok=False,
            error=f"boom {error_type}",
            error_type=error_type,
            retryable=retryable == "yes",
        )


def pipeline(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"tasks": list(tasks), "render_code": True}


def step(name: str, script: str, *rules: dict[str, Any], **extra: Any) -> dict[str, Any]:
    args = {"script": script, **extra.pop("args", {})}
    return {"name": name, "tool": {"kind": "noop", "args": args}, "rules": list(rules), **extra}


def rule(when: str | None = None, **then: Any) -> dict[str, Any]:
    return {"then": then} if when is None else {"when": when, "then": then}


def run(
    spec: dict[str, Any],
    scripts: dict[str, list[str]],
    *,
    context: dict[str, Any] | None = None,
    timeout_ms: int | None = None,
) -> tuple[Outcome, Scripted]:
    """Run the pipeline task as the engine would: again (the next attempt, same task id)
    while its outcome asks for a rule's retry, without waiting the delay."""
    outcomes, scripted = attempts(spec, scripts, context=context, timeout_ms=timeout_ms)
    return outcomes[-1], scripted


def attempts(
    spec: dict[str, Any],
    scripts: dict[str, list[str]],
    *,
    context: dict[str, Any] | None = None,
    timeout_ms: int | None = None,
    tool: PipelineTool | None = None,
) -> tuple[list[Outcome], Scripted]:
    """Each attempt's outcome (see `run`)."""
    scripted = Scripted(scripts)
    registry = ToolRegistry([scripted])
    tool = PipelineTool(registry, checkpoints=None if tool is None else tool.checkpoints)
    registry.register(tool)
    task = Task(
        task_id="e1.s",
        execution_id="e1",
        step="s",
        kind="pipeline",
        spec=spec,
        args={},
        context={"execution_id": "e1", "step": "s", "workload": {"w": 5}, **(context or {})},
        key="e1:s",
        timeout_ms=timeout_ms,
    )
    outcomes = [registry.run(task)]
    while outcomes[-1].retry is not None and not outcomes[-1].retry.get("exhausted"):
        assert len(outcomes) < 50, "the pipeline keeps asking for retries"
        task = dataclasses.replace(task, attempt=task.attempt + 1)
        outcomes.append(registry.run(task))
    return outcomes, scripted


def labels(scripted: Scripted) -> list[str]:
    return [call.key.rsplit(":", 1)[1] for call in scripted.calls]


# --- defaults and continue ----------------------------------------------------------------


def test_tasks_run_in_order_and_the_result_is_the_last_one() -> None:
    outcome, scripted = run(
        pipeline(step("a", "a"), step("b", "b", args={"got": "{{ _prev.value }}"})),
        {"a": ["ok:1"], "b": ["ok:2"]},
    )
    assert outcome.ok
    assert outcome.this["value"] == "2"
    assert labels(scripted) == ["a", "b"]
    assert scripted.calls[1].args["got"] == "1"


def test_without_rules_an_error_fails_the_pipeline_and_stops_it() -> None:
    outcome, scripted = run(
        pipeline(step("a", "a"), step("b", "b")), {"a": ["err:KeyError:no"], "b": ["ok:2"]}
    )
    assert not outcome.ok
    assert outcome.error == "task 'a': boom KeyError"
    assert outcome.error_type == "KeyError"
    assert labels(scripted) == ["a"]


def test_without_rules_the_error_keeps_its_retryability_for_the_engine() -> None:
    outcome, _ = run(pipeline(step("a", "a")), {"a": ["err:RetryableError:yes"]})
    assert not outcome.ok and outcome.retryable


def test_rules_that_match_nothing_continue_on_ok_and_fail_on_error() -> None:
    never = rule("{{ false }}", do="break")
    outcome, scripted = run(
        pipeline(step("a", "a", never), step("b", "b", never), step("c", "c")),
        {"a": ["ok:1"], "b": ["err:ValueError:yes"], "c": ["ok:3"]},
    )
    assert not outcome.ok
    assert labels(scripted) == ["a", "b"]
    assert outcome.retryable  # no rule decided it


def test_continue_on_error_goes_on_and_prev_stays_the_last_success() -> None:
    outcome, scripted = run(
        pipeline(
            step("a", "a"),
            step("b", "b", rule("{{ output.status == 'error' }}", do="continue")),
            step("c", "c", args={"prev": "{{ _prev.value }}"}),
        ),
        {"a": ["ok:1"], "b": ["err:KeyError:no"], "c": ["ok:3"]},
    )
    assert outcome.ok
    assert scripted.calls[2].args["prev"] == "1"


# --- retry ------------------------------------------------------------------------------


def test_retry_runs_the_task_again_until_it_succeeds() -> None:
    retry = rule("{{ output.error.message in ['HTTP 500', 'HTTP 503'] }}", do="retry", delay=0)
    outcome, scripted = run(
        pipeline(step("a", "a", retry, args={"n": "{{ _attempt }}"})),
        {"a": ["http:500", "http:503", "ok:done"]},
    )
    assert outcome.ok
    assert outcome.this["value"] == "done"
    assert [call.args["n"] for call in scripted.calls] == [1, 2, 3]


def test_retry_stops_after_attempts_tries_in_all_and_fails_for_good() -> None:
    retry = rule("{{ output.status == 'error' }}", do="retry", attempts=2, delay=0)
    outcome, scripted = run(pipeline(step("a", "a", retry)), {"a": ["http:500"]})
    assert not outcome.ok
    assert len(scripted.calls) == 2
    assert outcome.error == "task 'a' failed after 2 attempts: HTTP 500"
    assert outcome.error_type == "PolicyFailure"
    assert not outcome.retryable  # the policy decided: the engine does not run it again


def test_a_retry_is_asked_of_the_engine_with_the_rules_delay() -> None:
    retry = rule(
        "{{ output.status == 'error' }}", do="retry", attempts=3, delay=0.1, backoff="linear"
    )
    outcomes, scripted = attempts(
        pipeline(step("a", "a"), step("b", "b", retry)),
        {"a": ["ok:1"], "b": ["http:500", "http:503", "ok:2"]},
    )
    first, second, last = outcomes
    assert first.retry == {"task": "b", "try": 1, "attempts": 3, "delay_s": 0.1}
    assert second.retry == {"task": "b", "try": 2, "attempts": 3, "delay_s": 0.2}
    assert not first.ok and first.retryable and first.error == "task 'b' (try 1 of 3): HTTP 500"
    assert last.ok and last.retry is None and last.this["value"] == "2"
    # the attempts after the first resume at `b`: `a` ran once
    assert labels(scripted) == ["a", "b", "b", "b"]
    # each attempt lists its task runs
    assert [(t["task"], t["try"], t["attempt"], t["do"]) for t in first.tasks] == [
        ("a", 1, 1, "continue"),
        ("b", 1, 1, "retry"),
    ]
    assert [(t["task"], t["try"], t["attempt"], t["ok"]) for t in last.tasks] == [("b", 3, 3, True)]


def test_exhausted_retries_say_so_to_the_engine() -> None:
    retry = rule("{{ output.status == 'error' }}", do="retry", attempts=2, delay=0)
    outcomes, _ = attempts(pipeline(step("a", "a", retry)), {"a": ["http:500"]})
    assert [o.retry for o in outcomes] == [
        {"task": "a", "try": 1, "attempts": 2, "delay_s": 0.0},
        {"task": "a", "attempts": 2, "exhausted": True},
    ]


def test_an_attempt_after_a_lost_worker_resumes_after_the_last_task_saved() -> None:
    """The worker died during `c`: the next attempt runs `c` again, not `a` nor `b`, and
    still sees their results and the names they set; the runs of the attempt that died
    are reported by the next one."""
    first, scripted = attempts(
        pipeline(step("a", "a"), step("b", "b", set={"seen": "{{ a.value }}"}), step("c", "c")),
        {"a": ["ok:1"], "b": ["ok:2"], "c": ["ok:3"]},
    )
    assert first[-1].ok and labels(scripted) == ["a", "b", "c"]
    # what a worker that died during `c` left behind: its checkpoint before `c`
    registry = ToolRegistry([Scripted({})])
    tool = PipelineTool(registry)
    saved = Progress(
        index=2,
        runs=2,
        prev={"value": "2"},
        results={"a": {"value": "1"}, "b": {"value": "2"}},
        names={"seen": "1"},
        trace=[{"task": "a", "attempt": 1, "try": 1}, {"task": "b", "attempt": 1, "try": 1}],
    )
    assert tool.checkpoints.save("e1.s", "e1", 1, saved.to_value())
    outcomes, scripted = attempts(
        pipeline(
            step("a", "a"),
            step("b", "b"),
            step("c", "c", args={"got": "{{ seen }}-{{ b.value }}-{{ _prev.value }}"}),
        ),
        {"a": ["ok:1"], "b": ["ok:2"], "c": ["ok:3"]},
        tool=tool,
    )
    [outcome] = outcomes
    assert outcome.ok and outcome.this["value"] == "3"
    assert labels(scripted) == ["c"]
    assert scripted.calls[0].args["got"] == "1-2-2"
    assert [t["task"] for t in outcome.tasks] == ["a", "b", "c"]
    assert tool.checkpoints.load("e1.s") is None  # a pipeline that ended well forgets it


def test_a_stale_attempt_stops_when_a_later_one_saved_its_progress() -> None:
    registry = ToolRegistry([Scripted({})])
    tool = PipelineTool(registry)
    assert tool.checkpoints.save("e1.s", "e1", 5, Progress().to_value())
    outcomes, scripted = attempts(
        pipeline(step("a", "a"), step("b", "b")), {"a": ["ok:1"], "b": ["ok:2"]}, tool=tool
    )
    assert not outcomes[-1].ok and outcomes[-1].error_type == "LeaseLost"
    assert labels(scripted) == []  # it stops before running anything

    class Newer(LocalCheckpoints):
        def save(self, task_id: str, execution_id: str, attempt: int, value: Any) -> bool:
            return False  # a later attempt saved in the meantime

    tool = PipelineTool(ToolRegistry([Scripted({})]), checkpoints=Newer())
    outcomes, scripted = attempts(
        pipeline(step("a", "a"), step("b", "b")), {"a": ["ok:1"], "b": ["ok:2"]}, tool=tool
    )
    assert outcomes[-1].error_type == "LeaseLost"
    assert labels(scripted) == ["a"]  # it stops at its first save


def test_retry_delays() -> None:
    assert retry_delay(Action("retry", delay=0.5), 3) == 0.5
    assert retry_delay(Action("retry", delay=0.5, backoff="fixed"), 3) == 0.5
    assert retry_delay(Action("retry", delay=0.5, backoff="linear"), 3) == 1.5
    assert retry_delay(Action("retry", delay=0.5, backoff="exponential"), 1) == 0.5
    assert retry_delay(Action("retry", delay=0.5, backoff="exponential"), 4) == 4.0
    assert retry_delay(Action("retry", delay=10, backoff="exponential"), 100) == 3600.0


def test_no_task_starts_after_a_cancel() -> None:
    scripted = Scripted({"a": ["sleep:0.3"], "b": ["ok:2"]})
    registry = ToolRegistry([scripted])
    tool = PipelineTool(registry)
    registry.register(tool)
    task = Task(
        "e1.s", "e1", "s", "pipeline", pipeline(step("a", "a"), step("b", "b")), {}, {}, "e1:s"
    )
    result: list[Outcome] = []
    thread = threading.Thread(target=lambda: result.append(registry.run(task)))
    thread.start()
    while not scripted.calls:
        time.sleep(0.01)
    assert registry.cancel("e1.s")
    thread.join(timeout=5)
    [outcome] = result
    assert not outcome.ok and outcome.error_type == "CancelError"
    assert labels(scripted) == ["a"]


def test_each_task_gets_the_time_left_of_the_pipeline() -> None:
    outcome, scripted = run(
        pipeline(step("a", "a"), step("b", "b")),
        {"a": ["sleep:0.2"], "b": ["ok:1"]},
        timeout_ms=5000,
    )
    assert outcome.ok
    first, second = (call.timeout_ms for call in scripted.calls)
    assert first is not None and second is not None and second <= first - 150


# --- jump, break, fail ---------------------------------------------------------------------


def test_jump_goes_on_at_the_named_task_and_loops_while_a_rule_says_so() -> None:
    again = rule("{{ _prev.value != 'last' }}", do="jump", to="fetch")
    outcome, scripted = run(
        pipeline(step("fetch", "pages"), step("count", "count", again), step("end", "end")),
        {
            "pages": ["ok:1", "ok:2", "ok:last"],
            "count": ["ok:1", "ok:2", "ok:last"],
            "end": ["ok:end"],
        },
    )
    assert outcome.ok
    assert labels(scripted) == ["fetch", "count"] * 3 + ["end"]


def test_break_stops_the_pipeline_successfully_with_the_last_result() -> None:
    outcome, scripted = run(
        pipeline(step("a", "a", rule(do="break")), step("b", "b")),
        {"a": ["ok:1"], "b": ["ok:2"]},
    )
    assert outcome.ok and outcome.this["value"] == "1"
    assert labels(scripted) == ["a"]


def test_fail_on_a_successful_task_fails_the_step() -> None:
    outcome, scripted = run(
        pipeline(step("a", "a", rule("{{ output.data.value == '1' }}", do="fail")), step("b", "b")),
        {"a": ["ok:1"], "b": ["ok:2"]},
    )
    assert not outcome.ok
    assert outcome.error == "task 'a': a rule failed it"
    assert not outcome.retryable
    assert labels(scripted) == ["a"]


def test_the_first_matching_rule_wins_and_else_matches_the_rest() -> None:
    rules = [
        rule("{{ output.error.message == 'HTTP 429' }}", do="retry", attempts=2, delay=0),
        rule("{{ output.status == 'error' }}", do="continue"),
        rule(do="fail"),
    ]
    outcome, scripted = run(
        pipeline(step("a", "a", *rules), step("b", "b")),
        {"a": ["http:429", "http:404"], "b": ["ok:2"]},
    )
    assert outcome.ok
    assert labels(scripted) == ["a", "a", "b"]


# --- set, names ---------------------------------------------------------------------------


def test_set_writes_ctx_iter_and_names_that_later_tasks_see_and_returns_ctx() -> None:
    remember = rule(
        "{{ output.status == 'ok' }}",
        do="continue",
        set={"ctx.total": "{{ output.data.value | int + 1 }}", "iter.seen": "{{ _task }}"},
    )
    outcome, scripted = run(
        pipeline(
            step("a", "a", remember, set={"kept": "{{ output.value }}"}),
            step(
                "b",
                "b",
                args={
                    "t": "{{ ctx.total }}",
                    "s": "{{ iter.seen }}",
                    "k": "{{ kept }}",
                    "a": "{{ a.value }}",
                    "r": "{{ results.a.value }}",
                    "w": "{{ w }}",
                },
            ),
        ),
        {"a": ["ok:41"], "b": ["ok:2"]},
        context={"ctx": {"before": 1}},
    )
    assert outcome.ok
    assert scripted.calls[1].args == {
        "script": "b",
        "t": 42,
        "s": "a",
        "k": "41",
        "a": "41",
        "r": "41",
        "w": 5,
    }
    assert outcome.ctx == {"total": 42}
    assert scripted.calls[1].context["ctx"] == {"before": 1, "total": 42}


def test_output_and_outcome_are_the_same_view() -> None:
    same = rule("{{ output == outcome and outcome.status == 'ok' }}", do="break")
    outcome, _ = run(
        pipeline(step("a", "a", same), step("b", "b", rule(do="fail"))),
        {"a": ["ok:1"], "b": ["ok:2"]},
    )
    assert outcome.ok


def test_a_template_error_in_a_task_is_a_failure_the_rules_see() -> None:
    outcome, scripted = run(
        pipeline(
            step(
                "a",
                "a",
                rule("{{ output.error.type == 'TemplateError' }}", do="continue"),
                args={"x": "{{ missing.name }}"},
            ),
            step("b", "b"),
        ),
        {"a": ["ok:1"], "b": ["ok:2"]},
    )
    assert outcome.ok
    assert labels(scripted) == ["b"]


def test_output_view_of_errors() -> None:
    http = output_view(
        "http",
        Outcome(
            "t",
            ok=False,
            this={"status_code": 503, "headers": {"a": "b"}},
            error="HTTP 503",
            error_type="HttpError",
            retryable=True,
        ),
        2,
    )
    assert http["status"] == "error"
    assert http["http"] == {"status": 503, "headers": {"a": "b"}}
    assert http["error"]["kind"] == "server_error" and http["error"]["retryable"]
    assert http["error"]["status"] == 503 and http["meta"]["attempt"] == 2
    pg = output_view(
        "postgres",
        Outcome("t", ok=False, error="postgres: SQLSTATE 40P01: deadlock", error_type="X"),
        1,
    )
    assert pg["pg"]["code"] == "40P01" and pg["error"]["kind"] == "db_deadlock"
    ok = output_view("python", Outcome("t", ok=True, this={"rows": []}), 1)
    assert ok["data"] == {"rows": []} and ok["http"]["status"] is None
    assert not ok["error"] and ok["error"]["retryable"] is False


def test_a_when_that_fails_to_render_does_not_match() -> None:
    action = decide(
        [rule("{{ nothing.here }}", do="break"), rule(do="continue")], {}, Renderer(), ok=True
    )
    assert action.do == "continue" and action.rule == 1


def test_a_jump_loop_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("noetl.worker.pipeline.MAX_RUNS", 20)
    outcome, scripted = run(pipeline(step("a", "a", rule(do="jump", to="a"))), {"a": ["ok:1"]})
    assert not outcome.ok and "20 times" in (outcome.error or "")
    assert len(scripted.calls) == 20


class _Secrets:
    def secret(self, name: str) -> str | None:
        return "s3cr3t-value" if name == "TOKEN" else None

    def credential(self, name: str) -> None:
        return None


def test_secrets_are_resolved_for_the_task_and_masked_in_what_the_pipeline_returns() -> None:
    scripted = Scripted({"a": ["ok:1"], "b": ["ok:2"]})
    registry = ToolRegistry([scripted], secrets=_Secrets())
    registry.register(PipelineTool(registry))
    spec = pipeline(
        step("a", "a", args={"auth": "Bearer {{ secrets.TOKEN }}"}),
        step("b", "b", args={"seen": "{{ _prev.args.auth }}"}),
    )
    task = Task("e1.s", "e1", "s", "pipeline", spec, {}, {}, "e1:s")
    outcome = registry.run(task)
    assert outcome.ok
    first, second = scripted.calls
    assert first.args["auth"] == "Bearer s3cr3t-value"  # resolved where the task runs
    assert "s3cr3t-value" not in json.dumps(second.args)  # masked in what a task returns
    assert "s3cr3t-value" not in json.dumps(outcome.this)


def test_a_set_value_that_fails_to_render_keeps_its_text(caplog: pytest.LogCaptureFixture) -> None:
    remember = rule(do="continue", set={"ctx.missing": "{{ output.data.nothing.here }}"})
    outcome, scripted = run(
        pipeline(step("a", "a", remember), step("b", "b", args={"m": "{{ ctx.missing }}"})),
        {"a": ["ok:1"], "b": ["ok:2"]},
    )
    assert outcome.ok
    assert scripted.calls[1].args["m"] == "{{ output.data.nothing.here }}"
    assert "ctx.missing" in caplog.text and "its text is kept" in caplog.text


class CountingCheckpoints(LocalCheckpoints):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def save(self, task_id: str, execution_id: str, attempt: int, value: Any) -> bool:
        self.calls.append("save")
        return super().save(task_id, execution_id, attempt, value)

    def drop(self, task_id: str) -> None:
        self.calls.append("drop")
        super().drop(task_id)


def test_a_one_task_pipeline_that_ran_once_writes_no_checkpoint() -> None:
    store = CountingCheckpoints()
    tool = PipelineTool(ToolRegistry([Scripted({})]), checkpoints=store)
    outcomes, _ = attempts(pipeline(step("a", "a")), {"a": ["ok:1"]}, tool=tool)
    assert outcomes[-1].ok and store.calls == []


def test_a_replay_takes_over_the_progress_of_the_run_that_failed() -> None:
    """A replay from the dead-letter queue counts its attempts from 1 again: it resumes
    where the failed run stopped instead of taking the run for a later attempt."""
    store = CountingCheckpoints()
    tool = PipelineTool(ToolRegistry([Scripted({})]), checkpoints=store)
    failed = Progress(index=1, runs=4, prev={"value": "1"}, results={"a": {"value": "1"}})
    failed.end = "fail"
    assert store.save("e1.s", "e1", 3, failed.to_value())
    outcomes, scripted = attempts(
        pipeline(step("a", "a"), step("b", "b", args={"prev": "{{ a.value }}"})),
        {"a": ["ok:1"], "b": ["ok:2"]},
        tool=tool,
    )
    [outcome] = outcomes
    assert outcome.ok and labels(scripted) == ["b"]
    assert scripted.calls[0].args["prev"] == "1"
    # a run still going at a later attempt is not taken over: this attempt is stale
    going = Progress(index=1)
    going.end = "retry"
    assert store.save("e1.s", "e1", 3, going.to_value())
    outcomes, scripted = attempts(pipeline(step("a", "a"), step("b", "b")), {}, tool=tool)
    assert outcomes[-1].error_type == "LeaseLost" and scripted.calls == []
