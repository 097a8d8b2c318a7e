"""The secret canary: a unique secret value used in an HTTP header, a SQL parameter and a
python argument must reach the services that need it and nowhere else: not the database,
not the CLI's output or logs, not the API's responses. Checked after a success and after
a failure, with the real CLI in a subprocess, a real HTTP server on loopback and the real
PostgreSQL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from noetl.credentials.keys import new_key
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.store import SqliteStore
from tests.conftest import ROOT
from tests.helpers.auth import auth_headers
from tests.helpers.cli import noetl
from tests.helpers.fake_pg import RefusingPostgres
from tests.helpers.loopback import base_url, serving
from tests.helpers.spans import CONSOLE_TRACING, console_spans

with warnings.catch_warnings():
    # Starlette asks for `httpx2` instead of `httpx`; either drives the app the same way.
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: canary}}
workload: {{fail: false}}
workflow:
  - step: call
    tool:
      kind: http
      url: "{url}"
      headers: {{Authorization: "Bearer {{{{ secrets.CANARY }}}}"}}
    result: {{as: called}}
    next: query
  - step: query
    tool:
      kind: postgres
      credential: warehouse
      query: "SELECT length(%(token)s::text) AS n, %(token)s::text AS echoed"
      args: {{token: "{{{{ secrets.CANARY }}}}"}}
    result: {{as: queried}}
    next: compute
  - step: compute
    tool:
      kind: python
      code: |
        def main(context, args):
            print("using", args["token"])
            if args["fail"]:
                raise ValueError("rejected " + args["token"])
            return {{"length": len(args["token"]), "echo": args["token"]}}
      args: {{token: "{{{{ secrets.CANARY }}}}", fail: "{{{{ workload.fail }}}}"}}
    result: {{as: computed}}
"""


class Recorder(BaseHTTPRequestHandler):
    """Answers 200 (or 500 when the path says so) echoing the Authorization header."""

    seen: list[str] = []

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        Recorder.seen.append(auth)
        status = 500 if self.path.startswith("/fail") else 200
        body = json.dumps({"you_sent": auth}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_url() -> Iterator[str]:
    Recorder.seen = []
    with serving(Recorder) as server:
        yield base_url(server)


def run(
    playbook: Path, db: Path, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    return noetl("run", playbook, "--json", "--db", db, *extra, env=env)


def files_of(db: Path) -> bytes:
    """Every byte SQLite keeps for the database: the file, its WAL and shared memory."""
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def api_texts(db: Path) -> str:
    store = SqliteStore(db)
    try:
        client = TestClient(
            create_app(store, Orchestrator(store, owner="t"), version="t"),
            headers=auth_headers(store),
        )
        [item] = client.get("/api/executions").json()["items"]
        execution_id = item["execution_id"]
        paths = [
            "/api/executions",
            f"/api/executions/{execution_id}",
            f"/api/executions/{execution_id}/events?limit=1000",
            f"/api/executions/{execution_id}/graph",
            "/api/credentials",
        ]
        entries = client.get("/api/dlq", params={"status": "pending"}).json()["items"]
        paths += ["/api/dlq?status=pending"]
        paths += [f"/api/dlq/{entry['message_id']}" for entry in entries]
        responses = [client.get(path) for path in paths]
        assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
        return "\n".join(r.text for r in responses)
    finally:
        store.close()


@pytest.mark.parametrize("outcome", ["success", "http_failure", "python_failure"])
def test_a_secret_reaches_its_services_and_nothing_else(
    outcome: str, tmp_path: Path, http_url: str, pg_dsn: str
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    url = f"{http_url}/{'fail' if outcome == 'http_failure' else 'ok'}"
    playbook = tmp_path / "canary.yaml"
    playbook.write_text(PLAYBOOK.format(url=url), encoding="utf-8")
    db = tmp_path / "data" / "noetl.db"
    db.parent.mkdir()  # --db into a missing directory is refused
    env = {
        "NOETL_SECRET_CANARY": canary,
        "NOETL_CREDENTIAL_warehouse": json.dumps({"dsn": pg_dsn}),
        "NOETL_LOG_LEVEL": "DEBUG",
        **CONSOLE_TRACING,  # every span of the run on stderr
    }

    extra = ("--set", "fail=true") if outcome == "python_failure" else ()
    proc = run(playbook, db, env, *extra)

    # The secret was really used where it was needed (a 500 is retried: several calls)...
    assert Recorder.seen and set(Recorder.seen) == {f"Bearer {canary}"}
    result = json.loads(proc.stdout)
    if outcome == "success":
        assert proc.returncode == 0, proc.stderr
        assert result["context"]["queried"]["rows"][0]["n"] == len(canary)
        assert result["context"]["computed"]["length"] == len(canary)
        assert result["context"]["called"]["data"] == {"you_sent": "Bearer ***"}
    else:
        assert proc.returncode == 1
        assert result["status"] == "fail"
        expected = "HTTP 500" if outcome == "http_failure" else "rejected ***"
        assert expected in json.dumps(result)
        # the failed task is in the dead-letter queue, its error masked there too
        shown = noetl("dlq", "list", "--json", "--db", db, timeout=60)
        assert shown.returncode == 0, shown.stderr
        (entry,) = json.loads(shown.stdout)["items"]
        assert entry["step"] == ("call" if outcome == "http_failure" else "compute")
        assert canary not in shown.stdout
    # ...and appears nowhere else: not in the spans either (on stderr).
    names = {span["name"] for span in console_spans(proc.stderr)}
    assert {"server.execution", "server.dispatch", "worker.plugin.http"} <= names
    if outcome != "http_failure":
        assert {"worker.plugin.postgres", "worker.plugin.python"} <= names
    assert canary not in proc.stdout
    assert canary not in proc.stderr
    assert canary.encode() not in files_of(db)
    assert canary not in api_texts(db)


SECRET_LENGTH = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: secret_length}
workflow:
  - step: s
    tool:
      kind: python
      code: "def main(context, args):\\n    return len(args['t'])\\n"
      args: {t: "{{ secrets.T }}"}
    result: {as: n}
"""


def test_secrets_from_a_file_and_a_bad_file_named(tmp_path: Path) -> None:
    playbook = tmp_path / "p.yaml"
    playbook.write_text(SECRET_LENGTH, encoding="utf-8")
    good = tmp_path / "secrets.yaml"
    good.write_text("secrets: {T: seven77}\n", encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text("secrets: [unclosed\n", encoding="utf-8")
    db = tmp_path / "db.sqlite"

    ok = run(playbook, db, {}, "--secrets-file", str(good))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["context"]["n"] == len("seven77")

    failed = run(playbook, db, {}, "--secrets-file", str(bad))
    assert failed.returncode == 3  # an environment problem
    assert f"secrets file {bad} is not valid YAML (line" in failed.stderr
    assert "Traceback" not in failed.stderr


# --- credentials by name: from the credentials file and from the database ----------------

CREDENTIAL_PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: credential_canary}}
workload: {{pg_auth: warehouse}}
workflow:
  - step: call
    tool:
      kind: http
      url: "{url}"
      credential: api
    result: {{as: called}}
    next: query
  - step: query
    tool:
      kind: postgres
      credential: "{{{{ workload.pg_auth }}}}"
      query: "SELECT current_user AS who"
    result: {{as: queried}}
"""


def credential_records(
    pg_dsn: str, token: str, password: str, refusing_port: int
) -> dict[str, Any]:
    """Upstream records: the http bearer token and two postgres credentials, one for the
    real database (the password is never checked there) and one for a server that refuses
    the password and quotes it in its error."""
    parts = urlsplit(pg_dsn)

    def pg(host: str, port: int, user: str, db: str) -> dict[str, Any]:
        data = {"db_host": host, "db_port": str(port), "db_user": user}
        return {"type": "postgres", "data": {**data, "db_password": password, "db_name": db}}

    return {
        "api": {"type": "bearer", "data": {"token": token}},
        "warehouse": pg(
            parts.hostname or "", parts.port or 5432, parts.username or "", parts.path[1:]
        ),
        "guarded": pg("127.0.0.1", refusing_port, "app", "wh"),
    }


@pytest.mark.parametrize("outcome", ["success", "wrong_password"])
@pytest.mark.parametrize("source", ["file", "database"])
def test_a_credential_reaches_its_services_and_nothing_else(
    source: str, outcome: str, tmp_path: Path, http_url: str, pg_dsn: str
) -> None:
    token = f"tok-canary-{uuid.uuid4().hex}"
    password = f"pw-canary-{uuid.uuid4().hex}"
    key = new_key()
    playbook = tmp_path / "credential_canary.yaml"
    playbook.write_text(CREDENTIAL_PLAYBOOK.format(url=f"{http_url}/ok"), encoding="utf-8")
    db = tmp_path / "data" / "noetl.db"
    db.parent.mkdir()  # --db into a missing directory is refused
    env = {"NOETL_LOG_LEVEL": "DEBUG", **CONSOLE_TRACING}
    extra = ("--set", "pg_auth=guarded") if outcome == "wrong_password" else ()
    with RefusingPostgres() as refusing:
        records = credential_records(pg_dsn, token, password, refusing.port)
        if source == "file":
            creds = tmp_path / "credentials.json"
            creds.write_text(json.dumps(records), encoding="utf-8")
            env["NOETL_CREDENTIALS_FILE"] = str(creds)
        else:
            env["NOETL_CREDENTIALS_KEY"] = key
            for name, record in records.items():
                stored = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "noetl",
                        "credential",
                        "set",
                        name,
                        "--data-file",
                        "-",
                        "--db",
                        str(db),
                    ],
                    cwd=ROOT,
                    input=json.dumps(record),
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                    env={**os.environ, **env},
                )
                assert stored.returncode == 0, stored.stderr
        proc = run(playbook, db, env, *extra)
        refused = list(refusing.passwords)

    # The values were really used where they were needed...
    assert Recorder.seen == [f"Bearer {token}"]
    result = json.loads(proc.stdout)
    assert result["context"]["called"]["data"] == {"you_sent": "Bearer ***"}
    if outcome == "success":
        assert proc.returncode == 0, proc.stderr
        assert result["context"]["queried"]["rows"] == [{"who": urlsplit(pg_dsn).username}]
        assert refused == []
    else:
        assert proc.returncode == 1 and result["status"] == "fail"
        assert refused == [password]  # the server got it, and quoted it back
        assert 'password authentication failed for user \\"app\\" (sent \\"***\\")' in proc.stdout
        shown = noetl("dlq", "list", "--json", "--db", db, timeout=60)
        assert shown.returncode == 0, shown.stderr
        (entry,) = json.loads(shown.stdout)["items"]
        assert entry["step"] == "query"
        assert password not in shown.stdout and token not in shown.stdout
    # ...and appear nowhere else: not in the output, the logs, the spans, the database's
    # files (stored credentials are encrypted) or the API; nor does the key.
    assert "worker.plugin.postgres" in {span["name"] for span in console_spans(proc.stderr)}
    texts = {
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "the database": files_of(db).decode("utf-8", "replace"),
        "the API": api_texts(db),
    }
    for where, text in texts.items():
        for value in (token, password, key):
            assert value not in text, f"a credential value leaked into {where}"
