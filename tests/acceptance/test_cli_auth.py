"""`noetl auth token ...` on a database, and `noetl server start` with authentication:
the loopback rule, tokens made by the CLI, and sessions on NATS K/V."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT
from tests.helpers import cli


def noetl(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """The CLI without the developer's NOETL_* settings; never a traceback."""
    return cli.noetl(*args, env=env, timeout=timeout, clean_env=True, no_traceback=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --- tokens -----------------------------------------------------------------------------------


def test_create_list_and_revoke_tokens(tmp_path: Path) -> None:
    env = {"NOETL_DB": str(tmp_path / "noetl.db")}
    empty = noetl("auth", "token", "list", env=env)
    assert empty.returncode == 0 and "no tokens" in empty.stdout

    created = noetl("auth", "token", "create", "--role", "admin", "--name", "ops", env=env)
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("noetl_") and len(secret) >= 49 and "\n" not in secret
    assert "shown this once" in created.stderr and "never expires" in created.stderr

    as_json = noetl(
        "auth", "token", "create", "--role", "viewer", "--expires-in", "7", "--json", env=env
    )
    viewer = json.loads(as_json.stdout)
    assert viewer["role"] == "viewer" and viewer["name"] == "viewer"
    assert viewer["expires_at"] == pytest.approx(viewer["created_at"] + 7 * 86400)

    listed = noetl("auth", "token", "list", env=env)
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "ROLE", "STATE", "CREATED", "LAST", "USED", "EXPIRES"]
    assert any(" ops " in line and " admin " in line and "active" in line for line in lines)
    assert secret not in listed.stdout and viewer["token"] not in listed.stdout

    token_id = next(line.split()[0] for line in lines if " ops " in line)
    revoked = noetl("auth", "token", "revoke", token_id, env=env)
    assert revoked.returncode == 0 and f"revoked {token_id}" in revoked.stdout
    again = noetl("auth", "token", "revoke", token_id, env=env)
    assert again.returncode == 0 and "already revoked" in again.stderr
    state = json.loads(noetl("auth", "token", "list", "--json", env=env).stdout)
    assert {t["name"]: t["state"] for t in state["items"]} == {"ops": "revoked", "viewer": "active"}
    missing = noetl("auth", "token", "revoke", "tok_nope", env=env)
    assert missing.returncode == 1 and "no API token 'tok_nope'" in missing.stderr


def test_a_bad_role_is_a_usage_error(tmp_path: Path) -> None:
    proc = noetl("auth", "token", "create", "--role", "root", "--db", str(tmp_path / "x.db"))
    assert proc.returncode == 2 and "'root' is not one of" in proc.stderr


# --- the server ---------------------------------------------------------------------------------


def test_the_server_refuses_to_listen_beyond_loopback_without_authentication(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "noetl.db")
    for args, env in (
        (("--host", "0.0.0.0", "--no-auth"), {}),
        (("--host", "0.0.0.0"), {"NOETL_AUTH_ENABLED": "false"}),
    ):
        proc = noetl("server", "start", *args, "--db", db, env=env, timeout=30)
        assert proc.returncode == 3, proc.stderr
        assert "refusing to serve the API on 0.0.0.0 without authentication" in proc.stderr
        assert "noetl auth token create --role admin" in proc.stderr


class Server:
    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / f"server-{self.port}.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "noetl", "server", "start", "--port", str(self.port), *args],
                cwd=ROOT,
                env={**full_env, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def test_without_authentication_a_loopback_server_is_open(
    tmp_path: Path, servers: list[Server]
) -> None:
    server = Server(tmp_path, "--no-auth", "--db", str(tmp_path / "noetl.db"))
    servers.append(server)
    assert httpx.get(f"{server.url}/api/executions", timeout=10).status_code == 200
    assert "authentication is off" in server.log.read_text()


def test_a_token_revoked_on_the_database_is_refused_within_the_delay(
    tmp_path: Path, servers: list[Server]
) -> None:
    """The server trusts a token it read for `server.revocation_delay_s`; a revocation
    made elsewhere (here the CLI, on the database) is refused once that time is up."""
    db = str(tmp_path / "noetl.db")
    created = noetl("auth", "token", "create", "--role", "viewer", "--json", "--db", db)
    token = json.loads(created.stdout)
    env = {"NOETL_DB": db, "NOETL_SERVER_REVOCATION_DELAY_S": "0.5"}
    server = Server(tmp_path, env=env)
    servers.append(server)
    headers = {"Authorization": f"Bearer {token['token']}"}
    assert httpx.get(f"{server.url}/api/executions", headers=headers, timeout=10).status_code == 200
    assert noetl("auth", "token", "revoke", token["id"], "--db", db).returncode == 0
    time.sleep(0.6)
    refused = httpx.get(f"{server.url}/api/executions", headers=headers, timeout=10)
    assert refused.status_code == 401, refused.text


def test_a_server_with_sessions_on_nats(
    tmp_path: Path, servers: list[Server], nats_url: str, nats_bucket: str
) -> None:
    db = str(tmp_path / "noetl.db")
    token = noetl("auth", "token", "create", "--role", "operator", "--db", db).stdout.strip()
    env = {
        "NOETL_DB": db,
        "NOETL_SESSIONS_BACKEND": "nats",
        "NOETL_SESSIONS_NATS_URL": nats_url,
        "NOETL_SESSIONS_NATS_BUCKET": nats_bucket,
        "NOETL_SESSIONS_TTL_S": "120",
    }
    server = Server(tmp_path, env=env)
    servers.append(server)
    assert httpx.get(f"{server.url}/api/executions", timeout=10).status_code == 401
    opened = httpx.post(
        f"{server.url}/api/sessions", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert opened.status_code == 201, opened.text
    body = opened.json()
    assert body["expires_at"] == pytest.approx(body["created_at"] + 120)
    session = {"Authorization": f"Bearer {body['session_token']}"}
    assert httpx.get(f"{server.url}/api/executions", headers=session, timeout=10).status_code == 200
    # The CLI takes a session token as well as an API token.
    listed = noetl(
        "playbook", "list", "--server", server.url, env={"NOETL_API_TOKEN": body["session_token"]}
    )
    assert listed.returncode == 0, listed.stderr
    ended = httpx.delete(
        f"{server.url}/api/sessions/{body['session_token']}", headers=session, timeout=10
    )
    assert ended.status_code == 200
    assert httpx.get(f"{server.url}/api/executions", headers=session, timeout=10).status_code == 401


def test_the_server_does_not_start_when_nats_is_unreachable(tmp_path: Path) -> None:
    env = {
        "NOETL_SESSIONS_BACKEND": "nats",
        "NOETL_SESSIONS_NATS_URL": f"nats://ada:s3cret@127.0.0.1:{free_port()}",
    }
    proc = noetl("server", "start", "--db", str(tmp_path / "noetl.db"), env=env, timeout=30)
    assert proc.returncode == 3
    assert "NATS session store" in proc.stderr and "s3cret" not in proc.stderr
