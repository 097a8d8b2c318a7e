"""The task bus with real processes: a server and workers started with NOETL_BUS_URL on a
private nats-server. Whatever happens to the bus (NATS restarted mid-loop, an announcement
delivered twice) or to a worker (kill -9 mid-loop), the execution ends ok and each item
runs once: the claim in the database decides, an announcement only wakes a worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from noetl.bus import subject_of
from tests.distributed.cluster import Cluster, wait_until
from tests.distributed.test_faults import RECORD, runs
from tests.helpers.nats_server import PrivateNats

pytestmark = [pytest.mark.services, pytest.mark.slow]

ITEMS = 24


def loop_playbook(sleep: float) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: bus_loop}}
workflow:
  - step: items
    loop: {{collection: "{{{{ range({ITEMS}) | list }}}}", element: n, mode: parallel,
            max_concurrency: 4}}
    tool:
      kind: python
      code: {json.dumps(RECORD)}
      args: {{out: "{{{{ workload.out }}}}", step: "i{{{{ n }}}}", sleep: {sleep}}}
"""


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[PrivateNats]:
    server = PrivateNats(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path, nats_server: PrivateNats) -> Iterator[Cluster]:
    cl = Cluster(db=pg_database, workdir=tmp_path, env={"NOETL_BUS_URL": nats_server.url})
    try:
        yield cl
    finally:
        cl.stop_all()


def _start(cluster: Cluster, out: Path, sleep: float = 0.15) -> str:
    cluster.start_server()
    cluster.start_worker("w1", lease_s=3.0, concurrency=2)
    cluster.start_worker("w2", lease_s=3.0, concurrency=2)
    return cluster.start_execution(loop_playbook(sleep), {"out": str(out)})


def _all_once(out: Path) -> None:
    counts = runs(out)
    assert sorted(counts) == sorted(f"i{n}" for n in range(ITEMS))
    assert set(counts.values()) == {1}, counts


def _bus_used(cluster: Cluster) -> None:
    for proc in cluster.procs:
        assert "task bus connected" in proc.output() or "task bus: nats://" in proc.output()


def test_nats_restarted_mid_loop(
    cluster: Cluster, nats_server: PrivateNats, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    execution_id = _start(cluster, out)
    wait_until(lambda: sum(runs(out).values()) >= 4, 30, "the first items")
    nats_server.stop()
    wait_until(lambda: sum(runs(out).values()) >= 10, 30, "items run without the bus")
    nats_server.start()
    assert cluster.wait_finished(execution_id, timeout=60)["status"] == "ok"
    _all_once(out)
    _bus_used(cluster)
    # The workers are back on the bus once NATS is.
    wait_until(
        lambda: all("reconnected" in p.output() for p in cluster.procs[1:]),
        30,
        "the workers to reconnect to the bus",
    )


def test_a_worker_killed_mid_loop(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "runs.txt"
    execution_id = _start(cluster, out, sleep=0.3)
    wait_until(lambda: sum(runs(out).values()) >= 4, 30, "the first items")
    cluster.procs[1].kill9()
    assert cluster.wait_finished(execution_id, timeout=60)["status"] == "ok"
    counts = runs(out)
    assert sorted(counts) == sorted(f"i{n}" for n in range(ITEMS))
    # Only the tasks in flight on the killed worker (its 2 slots) may have run again.
    assert sum(count - 1 for count in counts.values()) <= 2, counts
    finished = [e for e in cluster.events(execution_id) if e["type"] == "step.finished"]
    assert finished


async def _published(url: str) -> int:
    nc = await nats.connect(url, connect_timeout=2)
    try:
        info = await nc.jetstream().stream_info("NOETL_TASKS")
        return int(info.state.last_seq)
    finally:
        await nc.close()


async def _publish(url: str, subject: str, count: int) -> None:
    nc = await nats.connect(url, connect_timeout=2)
    try:
        for _ in range(count):
            await nc.publish(subject, b"")
        await nc.flush()
    finally:
        await nc.close()


def test_announcements_delivered_twice(
    cluster: Cluster, nats_server: PrivateNats, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    execution_id = _start(cluster, out)
    wait_until(lambda: sum(runs(out).values()) >= 2, 30, "the first items")
    # Every announcement again, and more: the extra wake-ups claim nothing twice.
    asyncio.run(_publish(nats_server.url, subject_of("default"), 3 * ITEMS))
    assert cluster.wait_finished(execution_id, timeout=60)["status"] == "ok"
    _all_once(out)
    _bus_used(cluster)
    # The commits announced the items too (besides the duplicates published here).
    assert asyncio.run(_published(nats_server.url)) >= 3 * ITEMS + ITEMS
