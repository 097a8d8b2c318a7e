"""A `nats:` trigger on real `noetl server start` processes, PostgreSQL and NATS
JetStream: a server killed (SIGKILL) after it started a message's execution but before
NATS got the message's ack. NATS delivers the message again once its ack wait passed;
the restarted server finds the delivery's claim and its execution, acknowledges it and
starts nothing more. The next message starts as usual."""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from noetl.bus.subscriptions import durable_name, stream_name
from noetl.decision.workloads import stored_workload
from noetl.store import open_store
from noetl.store.base import Store, TickStatus
from tests.distributed.cluster import Cluster, Proc, wait_until
from tests.helpers.nats import consumer_state, delete_stream, publish
from tests.helpers.nats_proxy import AckTrap

pytestmark = [pytest.mark.services, pytest.mark.slow]

NAME = "jobs/orders:created"


def playbook(subject: str) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: orders, path: jobs/orders}}
workload: {{n: null}}
triggers:
  - name: created
    nats: {{subject: "{subject}"}}
workflow:
  - step: start
    tool: {{kind: noop, args: {{n: "{{{{ workload.n }}}}"}}}}
"""


@pytest.fixture
def subject(nats_url: str) -> Iterator[str]:
    name = f"noetl_test_{uuid.uuid4().hex[:12]}.orders"
    yield name
    delete_stream(nats_url, stream_name(name))


@pytest.fixture
def store(pg_database: str) -> Iterator[Store]:
    st = open_store(pg_database)
    try:
        yield st
    finally:
        st.close()


def workloads(store: Store) -> list[object]:
    found = [stored_workload(store, r.execution_id) for r in store.list_executions(limit=100)]
    return sorted(w["n"] for w in found)  # type: ignore[type-var]


def test_a_server_killed_before_the_ack_starts_no_second_execution(
    cluster: Cluster, store: Store, nats_url: str, subject: str
) -> None:
    parts = urlsplit(nats_url)
    victim: list[Proc] = []
    trap = AckTrap(
        (parts.hostname or "127.0.0.1", parts.port or 4222),
        lambda: victim[0].signal(signal.SIGKILL),
    )
    cluster.env.update(
        {
            "NOETL_TRIGGERS_NATS_URL": trap.url,
            "NOETL_TRIGGERS_NATS_ACK_WAIT_S": "2",
            "NOETL_SCHEDULER_POLL_S": "0.2",
        }
    )
    try:
        victim.append(cluster.start_server(name="server"))
        response = httpx.post(
            f"{cluster.url}/api/playbooks",
            json={"content": playbook(subject)},
            headers=cluster.headers,
            timeout=30,
        )
        assert response.status_code == 201, response.text
        stream, durable = stream_name(subject), durable_name(NAME)

        def bound() -> bool:
            try:
                consumer_state(nats_url, stream, durable)
            except Exception:
                return False
            return True

        wait_until(bound, 30, "the trigger's consumer")
        (first,) = publish(nats_url, subject, [json.dumps({"n": 1}).encode()])
        wait_until(trap.sprung.is_set, 30, "the server to acknowledge the message")
        victim[0].popen.wait(timeout=10)
        # killed after the start, before NATS got the ack
        assert workloads(store) == [1]
        assert consumer_state(nats_url, stream, durable)["ack_floor"] < first

        cluster.env["NOETL_TRIGGERS_NATS_URL"] = nats_url
        again = cluster.start_server(port=cluster.port, name="server-again")
        wait_until(
            lambda: consumer_state(nats_url, stream, durable)["ack_floor"] >= first,
            60,
            "the redelivered message acknowledged",
        )
        assert consumer_state(nats_url, stream, durable)["redelivered"] == 0  # acked: gone
        assert workloads(store) == [1]  # no second execution
        assert "outcome=duplicate" in again.output()

        (second,) = publish(nats_url, subject, [json.dumps({"n": 2}).encode()])
        wait_until(lambda: len(workloads(store)) == 2, 30, "the next message's execution")
        assert workloads(store) == [1, 2]
        started = [
            t for t in store.schedules.ticks(NAME, limit=10) if t.status is TickStatus.STARTED
        ]
        assert len(started) == 2
        wait_until(
            lambda: consumer_state(nats_url, stream, durable)["ack_floor"] >= second,
            30,
            "the next message acknowledged",
        )
    finally:
        cluster.stop_all()
        trap.close()
