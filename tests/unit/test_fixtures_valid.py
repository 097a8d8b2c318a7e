"""Every valid playbook in tests/fixtures/valid loads, and normalizes to the canonical form."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl.dsl import Playbook, Severity, load_playbook
from noetl.dsl.model import NextEdge, RetryPolicy

VALID = Path(__file__).resolve().parents[1] / "fixtures" / "valid"
FIXTURES = sorted(VALID.glob("*.yaml"))


def load(name: str) -> Playbook:
    result = load_playbook(VALID / name)
    assert result.ok, [d.format() for d in result.errors]
    return result.require()


def test_there_are_enough_fixtures() -> None:
    assert len(FIXTURES) >= 8


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_loads_without_errors(path: Path) -> None:
    result = load_playbook(path)
    assert [d.format() for d in result.errors] == []
    assert result.ok is True
    assert isinstance(result.playbook, Playbook)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_warnings_are_only_the_intended_ones(path: Path) -> None:
    expected = {"04_legacy_forms.yaml": {"W201"}, "10_minimal.yaml": {"W402"}}.get(path.name, set())
    result = load_playbook(path)
    assert {d.code for d in result.warnings} == expected
    assert all(d.severity is Severity.WARNING for d in result.warnings)


def test_next_forms_normalize_to_mode_and_edges() -> None:
    pb = load("01_next_forms.yaml")
    start = pb.step("start").next
    assert start is not None
    assert start.mode == "inclusive"
    assert start.to == [NextEdge(step="fan_out")]

    fan_out = pb.step("fan_out").next
    assert fan_out is not None
    assert (fan_out.mode, [e.step for e in fan_out.to]) == ("inclusive", ["left", "right"])

    left = pb.step("left").next
    assert left is not None
    assert [(e.step, e.when) for e in left.to] == [
        ("join", "{{ ok('left') }}"),
        ("recover", "{{ fail('left') }}"),
    ]
    assert pb.step("right").edges == [NextEdge(step="join")]

    join = pb.step("join").next
    assert join is not None
    assert join.mode == "exclusive"
    assert [(e.step, e.when) for e in join.to] == [
        ("big", "{{ workload.n > 10 }}"),
        ("small", None),
    ]

    big = pb.step("big").next
    assert big is not None
    assert big.mode == "exclusive"
    assert [e.step for e in big.to] == ["finish", "recover"]

    assert pb.step("small").edges == [NextEdge(step="finish")]
    assert pb.step("finish").next is None
    assert pb.entry == "start"


def test_retry_forms() -> None:
    pb = load("02_retry_forms.yaml")
    assert pb.step("start").retry == RetryPolicy()
    three = pb.step("three_times").retry
    assert three is not None
    assert three.max_attempts == 3
    never = pb.step("never").retry
    assert never is not None
    assert never.max_attempts == 1
    block = pb.step("block").retry
    assert block == RetryPolicy(
        max_attempts=5,
        initial_delay=0.5,
        backoff_multiplier=3,
        max_delay=10,
        jitter=False,
        backoff="linear",
        retry_when="{{ this.status in [502, 503] }}",
        stop_when="{{ this.status == 404 }}",
    )
    tool = pb.step("on_tool").tool
    assert tool is not None
    assert tool.retry is not None
    assert tool.retry.max_attempts == 2
    assert tool.timeout_ms == 2000
    assert tool.spec == {
        "url": "https://example.com/items",
        "method": "post",
        "json": {"name": "x"},
    }


def test_loops_and_their_aliases() -> None:
    pb = load("03_loops.yaml")
    canonical = pb.step("start").loop
    assert canonical is not None
    assert canonical.collection == "{{ workload.users }}"
    assert (canonical.element, canonical.mode, canonical.max_concurrency) == ("user", "parallel", 2)
    assert canonical.min_success_ratio == 0.5
    assert (canonical.item_timeout_ms, canonical.total_timeout_ms) == (1000, 60000)

    upstream = pb.step("upstream").loop
    assert upstream is not None
    assert upstream.collection == "{{ workload.users }}"  # from `in`
    assert upstream.element == "person"  # from `iterator`
    assert (upstream.mode, upstream.max_concurrency) == ("parallel", 4)  # from `spec`

    literal = pb.step("literal").loop
    assert literal is not None
    assert literal.collection == [1, 2, 3]
    assert (literal.element, literal.mode) == ("item", "sequential")
    assert literal.until == "{{ _loop.index >= 2 }}"


def test_legacy_forms_give_warnings_and_canonical_loops_and_sinks() -> None:
    result = load_playbook(VALID / "04_legacy_forms.yaml")
    assert result.ok
    warnings = [(d.code, d.line, d.step, d.key) for d in result.warnings]
    assert warnings == [
        ("W201", 10, "start", "workflow[0].iter"),
        ("W201", 12, "start", "workflow[0].save"),
        ("W201", 20, "over_step", "workflow[1].over"),
        ("W201", 25, "coll_step", "workflow[2].coll"),
        ("W201", 32, "iterator_step", "workflow[3].iterator"),
        ("W201", 36, "iterator_step", "workflow[3].save"),
    ]
    pb = result.require()
    start = pb.step("start")
    assert start.loop is not None
    assert start.loop.collection == "{{ workload.items }}"
    assert start.loop.element == "item"
    assert start.result is not None
    [sink] = start.result.sink
    assert (sink.kind, sink.spec) == ("postgres", {"table": "items", "mode": "upsert", "key": "id"})

    over = pb.step("over_step").loop
    assert over is not None
    assert over.collection == ["a", "b"]
    coll = pb.step("coll_step").loop
    assert coll is not None
    assert coll.element == "n"
    iterator = pb.step("iterator_step")
    assert iterator.loop is not None
    assert (iterator.loop.collection, iterator.loop.element) == ("{{ workload.items }}", "row")
    assert iterator.result is not None
    assert [(s.kind, s.spec) for s in iterator.result.sink] == [
        ("file", {"path": "rows.jsonl", "format": "jsonl"})
    ]


def test_sinks_as_one_key_maps() -> None:
    pb = load("05_sinks.yaml")
    result = pb.step("start").result
    assert result is not None
    assert result.as_ == "rows"
    assert result.collect is not None
    assert (result.collect.into, result.collect.mode, result.collect.key) == (
        "by_id",
        "map",
        "{{ out.id }}",
    )
    postgres, file, duckdb = result.sink
    assert postgres.kind == "postgres"
    assert postgres.id == "main_table"
    assert postgres.spec == {"table": "rows", "mode": "upsert", "key": ["id"]}
    assert postgres.timeout_ms == 5000
    assert postgres.retry is not None
    assert postgres.retry.max_attempts == 3
    assert (file.kind, file.spec, file.async_) == ("file", {"path": "rows.json"}, True)
    assert (duckdb.kind, duckdb.spec) == ("duckdb", {"table": "rows", "mode": "replace"})

    single = pb.step("single").result
    assert single is not None
    assert [(s.kind, s.spec["bucket"]) for s in single.sink] == [("s3", "my-bucket")]
    assert single.collect is not None
    assert single.collect.mode == "list"


def test_workbook_tasks() -> None:
    pb = load("06_workbook.yaml")
    assert [t.name for t in pb.workbook] == ["fetch_user", "total"]
    fetch = pb.task("fetch_user")
    assert fetch.tool.kind == "http"
    assert fetch.tool.spec == {"url": "https://example.com/users/{{ workload.user_id }}"}
    assert fetch.result is not None
    assert fetch.result.pick == "{{ this.body }}"
    start_tool = pb.step("start").tool
    assert start_tool is not None
    assert (start_tool.kind, start_tool.spec, start_tool.args) == (
        "workbook",
        {"name": "fetch_user"},
        {"id": 7},
    )
    sum_tool = pb.step("sum_up").tool
    assert sum_tool is not None
    assert sum_tool.spec == {"name": "total"}
    assert pb.metadata.version == "1.2"


def test_case_blocks() -> None:
    pb = load("07_case.yaml")
    step = pb.step("start")
    assert step.spec is not None
    assert step.spec.branch_order == "priority"
    assert step.case is not None
    first, second, last = step.case
    assert (first.when, first.priority, first.then.set) == (
        "{{ workload.score >= 90 }}",
        1,
        {"grade": "a"},
    )
    assert first.then.next is not None
    assert [e.step for e in first.then.next.to] == ["excellent"]
    assert first.then.sink is not None
    assert [(s.kind, s.spec) for s in first.then.sink] == [("file", {"path": "excellent.json"})]
    assert second.then.tool is not None
    assert second.then.tool.kind == "python"
    assert "code" in second.then.tool.spec
    assert second.then.result is not None  # moved up from then.tool.result
    assert second.then.result.as_ == "verdict"
    assert (last.when, last.then.fail) == (True, "score too low")


def test_policy_block() -> None:
    pb = load("08_policy.yaml")
    assert pb.policy.on_step_fail == "route_edge:cleanup"
    assert pb.policy.route_edge_target == "cleanup"
    assert (pb.policy.on_sink_fail, pb.policy.on_when_error, pb.policy.rollback) == (
        "fail_step",
        "fail_step",
        "on_fail",
    )
    assert [s.compensate for s in pb.workflow] == ["release", "refund", None, None, None]


def test_tool_shorthand_and_result_inside_tool() -> None:
    pb = load("09_tool_shorthand.yaml")
    start_tool = pb.step("start").tool
    assert start_tool is not None
    assert (start_tool.kind, start_tool.spec, start_tool.args) == ("noop", {}, {})

    compute = pb.step("compute")
    assert compute.tool is not None
    assert compute.tool.kind == "python"
    assert compute.tool.spec == {"code": 'def main(context, args):\n    return args["x"] * 2\n'}
    assert compute.tool.args == {"x": "{{ factor }}"}
    assert compute.bind == {"factor": 3}
    assert compute.result is not None  # moved up from tool.result
    assert compute.result.as_ == "doubled"

    fetch = pb.step("fetch").tool
    assert fetch is not None
    assert fetch.spec == {
        "url": "https://example.com/data",
        "headers": {"Accept": "application/json"},
    }
    query = pb.step("query").tool
    assert query is not None
    assert query.spec == {"query": "select * from users where id = %(id)s", "credential": "main_db"}
    assert query.args == {"id": "{{ doubled }}"}


def test_minimal_playbook_entry_is_the_first_step() -> None:
    pb = load("10_minimal.yaml")
    assert pb.entry == "only"
    assert pb.api_version is None
    assert pb.step("only").tool is None
    assert pb.step("only").edges == []


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", FIXTURES + EXAMPLES, ids=lambda p: p.name)
def test_the_compiled_form_reads_back_as_the_same_playbook(path: Path) -> None:
    """Servers store a playbook as its model's JSON (`execution_input.compiled`) and the
    processes that decide for its executions read that back instead of the YAML."""
    playbook = load_playbook(path).require()

    again = Playbook.model_validate_json(playbook.model_dump_json(by_alias=True))

    assert again == playbook
