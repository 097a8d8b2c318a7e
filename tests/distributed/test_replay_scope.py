"""`noetl dlq replay --db postgresql://...` on a database a server and its workers share:
real server, worker and CLI processes on a real PostgreSQL. The replay reopens only its
execution and returns; with --run-here it runs only that execution's tasks. The other
executions' steps (which append a line to a file every time they RUN) run exactly once,
on the cluster's workers."""

from __future__ import annotations

import collections
import json
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from tests.distributed.cluster import Cluster, wait_until
from tests.helpers.cli import noetl

pytestmark = [pytest.mark.services, pytest.mark.slow]

RECORD = """\
import time
def main(context, args):
    with open(args["out"], "a") as fh:
        fh.write(args["tag"] + ":" + args["step"] + "\\n")
    time.sleep(args.get("sleep", 0))
    return 10 / args.get("d", 1)
"""


def playbook(name: str, steps: list[str], *, sleep: float = 0.0, d: int = 1) -> str:
    lines = ["apiVersion: noetl.io/v2", "kind: Playbook", f"metadata: {{name: {name}}}"]
    lines.append("workflow:")
    for index, step in enumerate(steps):
        divisor = d if index == 0 else 1
        lines += [
            f"  - step: {step}",
            "    tool:",
            "      kind: python",
            f"      code: {json.dumps(RECORD)}",
            '      args: {out: "{{ workload.out }}", tag: "{{ workload.tag }}", '
            f"step: {step}, sleep: {sleep}, d: {divisor}}}",
        ]
        if index + 1 < len(steps):
            lines.append(f"    next: {steps[index + 1]}")
    return "\n".join(lines) + "\n"


TARGET = playbook("target", ["divide", "done"], d=0)  # divide fails: dead-lettered
OTHER_STEPS = ["one", "two", "three"]


def replay(db: str, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = noetl("dlq", "replay", *args, "--db", db, drop=["NOETL_DB"], timeout=180)
    return proc, time.monotonic() - started


def runs(path: Path) -> collections.Counter[str]:
    return collections.Counter(path.read_text(encoding="utf-8").split())


def holders(db: str) -> dict[str, set[str]]:
    """The workers that ever held a task of each execution (the last holder of each
    row: a claim overwrites it, so a row the CLI held shows it unless taken again)."""
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT execution_id, worker_id FROM task_queue").fetchall()
    found: dict[str, set[str]] = collections.defaultdict(set)
    for execution_id, worker_id in rows:
        found[execution_id].add(str(worker_id))
    return found


def queued_of(db: str, execution_ids: list[str]) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT count(*) FROM task_queue WHERE status = 'queued' AND execution_id = ANY(%s)",
            (execution_ids,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def failed_target(cluster: Cluster, out: Path, tag: str) -> str:
    execution_id = cluster.start_execution(TARGET, {"out": str(out), "tag": tag})
    assert cluster.wait_finished(execution_id)["status"] == "fail"
    return execution_id


def others(cluster: Cluster, out: Path, count: int, sleep: float) -> list[str]:
    text = playbook("other", OTHER_STEPS, sleep=sleep)
    ids = [cluster.start_execution(text, {"out": str(out), "tag": f"o{i}"}) for i in range(count)]
    wait_until(lambda: queued_of(cluster.db, ids) > 0, 30, "tasks of other executions queued")
    return ids


def test_a_replay_on_postgres_reopens_returns_and_leaves_the_rest_to_the_workers(
    cluster: Cluster, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    cluster.start_server()
    cluster.start_worker("w1", concurrency=2)
    target = failed_target(cluster, out, "t")
    # 6 x 3 steps of 3 s on 2 slots: the last two executions wait 18 s in the queue.
    other_ids = others(cluster, out, 6, sleep=3.0)

    proc, elapsed = replay(cluster.db, f"{target}.divide", "--patch", "args.d=2")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"execution {target} continues on the workers (reopened)" in proc.stdout
    assert elapsed < 20, f"the replay took {elapsed:.1f}s"  # the CLI's start-up, mostly
    assert queued_of(cluster.db, other_ids) > 0  # the others still waited for the workers
    assert cluster.wait_finished(target, timeout=90)["status"] == "ok"
    for execution_id in other_ids:
        assert cluster.wait_finished(execution_id, timeout=90)["status"] == "ok"
    held = holders(cluster.db)
    assert not any(w.startswith(("local:", "cli:")) for ws in held.values() for w in ws), held
    counts = runs(out)
    assert counts == {
        "t:divide": 2,  # the failure, then the replay
        "t:done": 1,
        **{f"o{i}:{step}": 1 for i in range(6) for step in OTHER_STEPS},
    }


def test_run_here_runs_only_the_replayed_executions_tasks(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "runs.txt"
    cluster.start_server()
    cluster.start_worker("w1", concurrency=1)
    target = failed_target(cluster, out, "t")
    other_ids = others(cluster, out, 4, sleep=1.0)

    proc, _ = replay(cluster.db, f"{target}.divide", "--patch", "args.d=2", "--run-here")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"execution {target} ok" in proc.stdout
    assert queued_of(cluster.db, other_ids) > 0  # still the worker's, not the CLI's
    for execution_id in other_ids:
        assert cluster.wait_finished(execution_id, timeout=120)["status"] == "ok"
    held = holders(cluster.db)
    here = {e for e, ws in held.items() if any(w.startswith("local:") for w in ws)}
    assert here == {target}, held
    counts = runs(out)
    assert counts == {
        "t:divide": 2,
        "t:done": 1,
        **{f"o{i}:{step}": 1 for i in range(4) for step in OTHER_STEPS},
    }
