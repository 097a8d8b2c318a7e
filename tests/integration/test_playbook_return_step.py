"""The `playbook` tool's `return_step`, a loop over child playbooks and child playbooks by
catalog-style path, in the embedded runtime (a real SQLite file)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from noetl.core import ExecutionStatus
from noetl.dsl.validate import load_playbook_text
from noetl.paths import Roots
from noetl.runtime.local import embedded_runtime
from noetl.store.base import ExecutionRecord, Store

# Two steps: `return_step: made` must give the first one's result, not the last one's.
CHILD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child}
workload: {n: 1, sleep: 0, skip: false}
workflow:
  - step: made
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            started = time.time()
            time.sleep(args["sleep"])
            return {"n": args["n"], "tripled": args["n"] * 3, "span": [started, time.time()]}
      args: {n: "{{ workload.n }}", sleep: "{{ workload.sleep }}"}
    next:
      - {step: skipped, when: "{{ workload.skip }}"}
      - {step: last, when: "{{ not workload.skip }}"}
  - step: skipped
    tool: {kind: noop, args: {never: true}}
  - step: last
    tool: {kind: noop, args: {done: true}}
"""


def parent(tool: str, *, loop: str = "", result: str = "result: {as: child}") -> str:
    return (
        "apiVersion: noetl.io/v2\n"
        "kind: Playbook\n"
        "metadata: {name: parent}\n"
        "workflow:\n"
        "  - step: call\n"
        f"{loop}"
        f"    tool: {tool}\n"
        f"    {result}\n"
    )


def kids_of(store: Store, parent_id: str) -> list[ExecutionRecord]:
    return [r for r in store.list_executions(limit=1000) if r.parent_execution_id == parent_id]


def run_parent(
    root: Path, text: str, *, workers: int = 2, register: dict[str, str] | None = None
) -> tuple[Any, list[ExecutionRecord]]:
    db = str(root / f"noetl-{time.monotonic_ns()}.db")  # a fresh store (and catalog) each run
    with embedded_runtime(db, workers=workers, roots=Roots(root, root)) as rt:
        for path, child in (register or {}).items():
            rt.store.register_playbook(path, "child", child, time.time())
        playbook = load_playbook_text(text, "parent.yaml").require()
        result = rt.run(playbook, source_text=text)
        return result, kids_of(rt.store, result.execution_id)


def test_return_step_gives_that_step_of_the_child_as_the_result(tmp_path: Path) -> None:
    (tmp_path / "child.yaml").write_text(CHILD, encoding="utf-8")
    text = parent("{kind: playbook, path: child.yaml, return_step: made, args: {n: 4}}")
    result, kids = run_parent(tmp_path, text)
    assert result.status is ExecutionStatus.OK, result
    (kid,) = kids
    assert kid.status is ExecutionStatus.OK
    got = result.context["child"]
    assert (got["n"], got["tripled"]) == (4, 12)
    # Without return_step the result is the child's id, status and context, as before.
    text = parent("{kind: playbook, path: child.yaml, args: {n: 4}}")
    result, kids = run_parent(tmp_path, text)
    assert set(result.context["child"]) == {"execution_id", "status", "context"}


def test_a_return_step_that_did_not_run_gives_null(tmp_path: Path) -> None:
    (tmp_path / "child.yaml").write_text(CHILD, encoding="utf-8")
    tool = "{kind: playbook, path: child.yaml, return_step: skipped, args: {skip: false}}"
    result, kids = run_parent(tmp_path, parent(tool))
    assert result.status is ExecutionStatus.OK, result
    (kid,) = kids
    assert kid.status is ExecutionStatus.OK
    assert result.context["child"] is None


def test_a_return_step_the_child_does_not_have_fails_before_the_child_starts(
    tmp_path: Path,
) -> None:
    (tmp_path / "child.yaml").write_text(CHILD, encoding="utf-8")
    text = parent("{kind: playbook, path: child.yaml, return_step: nowhere}")
    result, kids = run_parent(tmp_path, text)
    assert result.status is ExecutionStatus.FAIL
    assert kids == []
    error = result.steps["call"]["error"]
    assert "return_step 'nowhere' is not a step of child playbook 'child.yaml'" in error
    assert "last, made, skipped" in error


def test_a_loop_over_children_collects_each_return_step_with_bounded_concurrency(
    tmp_path: Path,
) -> None:
    (tmp_path / "child.yaml").write_text(CHILD, encoding="utf-8")
    loop = (
        "    loop: {collection: [1, 2, 3, 4, 5, 6], element: x, mode: parallel,"
        " max_concurrency: 2}\n"
    )
    tool = '{kind: playbook, path: child.yaml, return_step: made, args: {n: "{{ x }}", sleep: 0.4}}'
    text = parent(tool, loop=loop, result="result: {collect: {into: got, mode: list}}")
    # Four task slots: without the bound, all six children would run at once.
    result, kids = run_parent(tmp_path, text, workers=4)
    assert result.status is ExecutionStatus.OK, result
    assert len(kids) == 6 and {k.status for k in kids} == {ExecutionStatus.OK}
    got = result.context["got"]
    assert [g["tripled"] for g in got] == [3, 6, 9, 12, 15, 18]
    spans = [g["span"] for g in got]
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most <= 2, spans
    assert most == 2, spans  # and two did run side by side


def test_a_child_by_catalog_path_then_by_file_under_the_root(tmp_path: Path) -> None:
    # A registered path wins; else the file `x/y.yaml`, else `x/y/y.yaml` under the root.
    registered = CHILD.replace('"tripled": args["n"] * 3', '"tripled": -1')
    text = parent("{kind: playbook, path: flows/child, return_step: made, args: {n: 2}}")
    result, _ = run_parent(tmp_path, text, register={"flows/child": registered})
    assert result.status is ExecutionStatus.OK, result
    assert result.context["child"]["tripled"] == -1
    (tmp_path / "flows" / "child").mkdir(parents=True)
    (tmp_path / "flows" / "child" / "child.yaml").write_text(CHILD, encoding="utf-8")
    result, _ = run_parent(tmp_path, text)
    assert result.status is ExecutionStatus.OK, result
    assert result.context["child"]["tripled"] == 6
    (tmp_path / "flows" / "child.yaml").write_text(
        CHILD.replace('"tripled": args["n"] * 3', '"tripled": 0'), encoding="utf-8"
    )
    result, _ = run_parent(tmp_path, text)
    assert result.context["child"]["tripled"] == 0


def test_a_child_found_nowhere_names_every_file_tried(tmp_path: Path) -> None:
    text = parent("{kind: playbook, path: flows/missing}")
    result, kids = run_parent(tmp_path, text)
    assert result.status is ExecutionStatus.FAIL
    assert kids == []
    error = result.steps["call"]["error"]
    assert "'flows/missing' is neither registered nor a file" in error
    assert str(tmp_path.resolve()) in error
    for tried in ("flows/missing.yaml", "flows/missing.yml", "flows/missing/missing.yaml"):
        assert tried in error
    assert "a playbook with metadata.path 'flows/missing'" in error


def test_a_child_by_the_metadata_path_of_a_file_under_the_root(tmp_path: Path) -> None:
    # A decoy that names the path as a tool's, not as its own: skipped.
    decoy = parent("{kind: playbook, path: catalog/kid}").replace(
        "metadata: {name: parent}", "metadata: {name: decoy, path: catalog/other}"
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "decoy.yaml").write_text(decoy, encoding="utf-8")
    (tmp_path / "z" / "deep").mkdir(parents=True)
    declared = CHILD.replace("metadata: {name: child}", "metadata: {name: kid, path: catalog/kid}")
    (tmp_path / "z" / "deep" / "kid.yaml").write_text(declared, encoding="utf-8")
    text = parent("{kind: playbook, path: catalog/kid, return_step: made, args: {n: 5}}")
    result, kids = run_parent(tmp_path, text)
    assert result.status is ExecutionStatus.OK, result
    assert result.context["child"]["tripled"] == 15
    (kid,) = kids
    assert kid.playbook_path == "catalog/kid"
