"""The secret canary in distributed mode: a server and a worker as real processes on a
real PostgreSQL database. The secret is configured on the worker only; after a success and
after a failure it must appear in no table, no process log and no API response."""

from __future__ import annotations

import json
import uuid
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from noetl.credentials.keys import new_key
from tests.acceptance.test_secret_canary import (  # noqa: F401 - http_url: the fixture
    CREDENTIAL_PLAYBOOK,
    PLAYBOOK,
    Recorder,
    credential_records,
    http_url,
)
from tests.distributed.cluster import Cluster
from tests.helpers.cli import noetl
from tests.helpers.fake_pg import RefusingPostgres
from tests.helpers.spans import CONSOLE_TRACING, console_spans


def database_text(dsn: str) -> str:
    """Every row of every table of the database, as text."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        ]
        return "\n".join(
            str(conn.execute(f'SELECT t::text FROM "{table}" t').fetchall()) for table in tables
        )


@pytest.mark.parametrize("outcome", ["success", "python_failure"])
def test_a_secret_on_the_worker_reaches_its_services_and_nothing_else(
    outcome: str,
    cluster: Cluster,
    http_url: str,  # noqa: F811 - the fixture, imported above
    pg_dsn: str,
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    cluster.env = dict(CONSOLE_TRACING)  # both processes write every span to their output
    cluster.start_server()
    cluster.env = {  # the worker alone knows the secret and the credential
        **CONSOLE_TRACING,
        "NOETL_SECRET_CANARY": canary,
        "NOETL_CREDENTIAL_warehouse": json.dumps({"dsn": pg_dsn}),
        "NOETL_LOG_LEVEL": "DEBUG",
    }
    cluster.start_worker("w1")
    playbook = PLAYBOOK.format(url=f"{http_url}/ok")

    execution_id = cluster.start_execution(playbook, {"fail": outcome == "python_failure"})
    result = cluster.wait_finished(execution_id, timeout=60)

    assert Recorder.seen == [f"Bearer {canary}"]
    if outcome == "success":
        assert result["status"] == "ok", result
        assert result["context"]["computed"]["length"] == len(canary)
    else:
        assert result["status"] == "fail", result
    paths = [
        "/api/executions",
        f"/api/executions/{execution_id}",
        f"/api/executions/{execution_id}/events?limit=1000",
        "/api/dlq?status=pending",
    ]
    entries = httpx.get(f"{cluster.url}/api/dlq", headers=cluster.headers, timeout=30).json()[
        "items"
    ]
    assert len(entries) == (0 if outcome == "success" else 1)  # the DLQ is checked too
    paths += [f"/api/dlq/{entry['message_id']}" for entry in entries]
    responses = [
        httpx.get(f"{cluster.url}{path}", headers=cluster.headers, timeout=30).text
        for path in paths
    ]
    cluster.stop_all()
    logs = "\n".join(proc.output() for proc in cluster.procs)
    assert "worker" in logs and "listening" in logs  # both processes' output was captured
    spans = console_spans(logs)
    services = {span["resource"]["attributes"]["service.name"] for span in spans}
    assert services == {"noetl-server", "noetl-worker"}
    assert {"server.execution", "worker.plugin.http", "worker.plugin.python"} <= {
        span["name"] for span in spans
    }
    for where, text in (
        ("the database", database_text(cluster.db)),
        ("the logs", logs),
        ("the API", "\n".join(responses)),
    ):
        assert canary not in text, f"the secret leaked into {where}"


@pytest.mark.parametrize("outcome", ["success", "wrong_password"])
@pytest.mark.parametrize("source", ["file", "database"])
def test_a_credential_on_the_worker_reaches_its_services_and_nothing_else(
    source: str,
    outcome: str,
    cluster: Cluster,
    http_url: str,  # noqa: F811 - the fixture, imported above
    pg_dsn: str,
) -> None:
    token = f"tok-canary-{uuid.uuid4().hex}"
    password = f"pw-canary-{uuid.uuid4().hex}"
    key = new_key()
    with RefusingPostgres() as refusing:
        records = credential_records(pg_dsn, token, password, refusing.port)
        worker_env = {**CONSOLE_TRACING, "NOETL_LOG_LEVEL": "DEBUG"}
        if source == "file":
            creds = cluster.workdir / "credentials.json"
            creds.write_text(json.dumps(records), encoding="utf-8")
            worker_env["NOETL_CREDENTIALS_FILE"] = str(creds)
        else:  # stored by the CLI; the key is given to it and to the worker, not the server
            for name, record in records.items():
                stored = noetl(
                    "credential",
                    "set",
                    name,
                    "--data-file",
                    "-",
                    stdin=json.dumps(record),
                    env={"NOETL_DB": cluster.db, "NOETL_CREDENTIALS_KEY": key},
                    timeout=60,
                )
                assert stored.returncode == 0, stored.stderr
            worker_env["NOETL_CREDENTIALS_KEY"] = key
        cluster.env = dict(CONSOLE_TRACING)
        cluster.start_server()
        cluster.env = worker_env  # the worker alone can read the credentials
        cluster.start_worker("w1")
        playbook = CREDENTIAL_PLAYBOOK.format(url=f"{http_url}/ok")
        workload = {"pg_auth": "guarded" if outcome == "wrong_password" else "warehouse"}
        execution_id = cluster.start_execution(playbook, workload)
        result = cluster.wait_finished(execution_id, timeout=60)
        refused = list(refusing.passwords)

    assert Recorder.seen == [f"Bearer {token}"]
    assert result["context"]["called"]["data"] == {"you_sent": "Bearer ***"}
    if outcome == "success":
        assert result["status"] == "ok", result
        assert result["context"]["queried"]["rows"] == [{"who": urlsplit(pg_dsn).username}]
    else:
        assert result["status"] == "fail", result
        assert refused == [password]  # the server got it, and quoted it back
    paths = [
        "/api/executions",
        f"/api/executions/{execution_id}",
        f"/api/executions/{execution_id}/events?limit=1000",
        "/api/dlq?status=pending",
        "/api/credentials",
    ]
    entries = httpx.get(f"{cluster.url}/api/dlq", headers=cluster.headers, timeout=30).json()[
        "items"
    ]
    assert len(entries) == (0 if outcome == "success" else 1)
    paths += [f"/api/dlq/{entry['message_id']}" for entry in entries]
    responses = [
        httpx.get(f"{cluster.url}{path}", headers=cluster.headers, timeout=30).text
        for path in paths
    ]
    if outcome == "wrong_password":
        assert 'password authentication failed for user \\"app\\" (sent \\"***\\")' in "".join(
            responses
        )
    cluster.stop_all()
    logs = "\n".join(proc.output() for proc in cluster.procs)
    assert "worker.plugin.postgres" in {span["name"] for span in console_spans(logs)}
    for where, text in (
        ("the database", database_text(cluster.db)),
        ("the logs", logs),
        ("the API", "\n".join(responses)),
    ):
        for value in (token, password, key):
            assert value not in text, f"a credential value leaked into {where}"
