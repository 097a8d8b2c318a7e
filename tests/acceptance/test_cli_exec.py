"""`noetl exec`, `noetl playbook` and `noetl server health` against a real server.

One uvicorn process (the API app plus the orchestrator loop over a SQLite file, started
by a tiny launcher rather than `noetl server start`) serves the whole module on a free
loopback port; the real CLI runs in subprocesses. No workers run, so playbooks here either
have no tools (they finish when started) or stay running until canceled.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from noetl.auth import Role
from tests.conftest import ROOT
from tests.helpers import cli
from tests.helpers.auth import bearer, token_in_database

# The tokens made in each server's database before it starts: url -> role -> token.
TOKENS: dict[str, dict[Role, str]] = {}

LAUNCHER = textwrap.dedent(
    """
    import sys, threading

    import uvicorn

    from noetl.runtime.orchestrator import Orchestrator
    from noetl.server.app import create_app
    from noetl.store import SqliteStore

    store = SqliteStore(sys.argv[1])
    orchestrator = Orchestrator(store, owner="acceptance")
    stop = threading.Event()
    threading.Thread(target=orchestrator.serve, args=(stop.is_set,), daemon=True).start()
    app = create_app(store, orchestrator, version="acceptance")
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    """
)

NO_TOOLS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: cli_no_tools
  path: cli/no_tools
workload:
  api_token: s3cr3t
  who: world
workflow:
  - step: start
    result:
      pick: "{{ workload }}"
      as: seen
    next: [items]
  - step: items
    loop:
      collection: [1, 2]
"""

WAITS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: cli_waits
workflow:
  - step: start
    tool:
      kind: noop
"""

INVALID = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: cli_invalid
workflow:
  - step: start
    next: nowhere
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a running server."""
    tmp = tmp_path_factory.mktemp("server")
    launcher = tmp / "launch.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    TOKENS[url] = {role: token_in_database(str(tmp / "noetl.db"), role) for role in Role}
    log = (tmp / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, str(launcher), str(tmp / "noetl.db"), str(port)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, (tmp / "server.log").read_text()
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def noetl(
    *args: str, server: str | None = None, timeout: float = 60, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI with NOETL_SERVER_URL = `server` and NOETL_API_TOKEN = `token` (by default
    the server's admin token)."""
    env: dict[str, str] = {}
    if server is not None:
        env["NOETL_SERVER_URL"] = server
        token = TOKENS.get(server, {}).get(Role.ADMIN) if token is None else token
    if token:
        env["NOETL_API_TOKEN"] = token
    return cli.noetl(
        *args,
        env=env,
        drop=["NOETL_SERVER_URL", "NOETL_API_TOKEN"],
        timeout=timeout,
        no_traceback=True,
    )


def noetl_all(*calls: tuple[str, ...], server: str) -> list[subprocess.CompletedProcess[str]]:
    """Independent CLI calls, run side by side (each one is mostly interpreter start-up)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: noetl(*args, server=server), calls))


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def api_start(server: str, playbook: str) -> str:
    """Start an execution without the CLI (for tests about other commands)."""
    response = httpx.post(
        f"{server}/api/executions", json={"playbook": playbook}, headers=admin(server)
    )
    assert response.status_code == 201, response.text
    execution_id: str = response.json()["execution_id"]
    return execution_id


def api_status(server: str, execution_id: str) -> dict[str, Any]:
    url = f"{server}/api/executions/{execution_id}"
    data: dict[str, Any] = httpx.get(url, headers=admin(server)).json()
    return data


def admin(server: str) -> dict[str, str]:
    return bearer(TOKENS[server][Role.ADMIN])


def test_server_health(server: str) -> None:
    proc = noetl("server", "health", "--server", server)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"ok: noetl acceptance at {server}, database ok"


def test_connection_refused_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    proc = noetl("exec", "status", "--id", "1", server=url)
    assert proc.returncode == 3
    assert url in proc.stderr
    assert "connection refused" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_start_a_local_file_and_read_its_status(server: str, tmp_path: Path) -> None:
    playbook = write(tmp_path, "no_tools.yaml", NO_TOOLS)
    workload = write(tmp_path, "workload.json", json.dumps({"who": "file", "n": 1}))
    inputs = ("--workload", str(workload), "--set", "n=2")
    started = noetl("exec", "start", "--workflow", str(playbook), *inputs, "--json", server=server)
    assert started.returncode == 0, started.stderr
    created = json.loads(started.stdout)
    assert list(created) == ["execution_id"]
    execution_id = created["execution_id"]

    status, run = noetl_all(
        ("exec", "status", "--id", execution_id, "--json"),
        ("run", str(playbook), "--json", "--db", str(tmp_path / "run.db"), *inputs),
        server=server,
    )
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["execution_id"] == execution_id
    assert data["status"] == "ok"
    assert data["steps"] == {
        "start": {"status": "ok"},
        "items": {"status": "ok", "total": 2, "completed": 2, "succeeded": 2, "failed": 0},
    }
    assert data["context"] == {"seen": {"api_token": "***", "who": "file", "n": 2}}
    # The same object `noetl run --json` prints (plus where and when).
    local = json.loads(run.stdout)
    assert set(local) <= set(data)
    assert local["steps"] == data["steps"]
    assert local["context"]["seen"]["who"] == data["context"]["seen"]["who"]

    watched = noetl("exec", "status", "--id", execution_id, "--watch", server=server)
    assert watched.returncode == 0
    assert f"execution {execution_id} finished: ok" in watched.stdout


def test_start_with_trace_asks_for_the_execution_to_be_traced(server: str, tmp_path: Path) -> None:
    playbook = write(tmp_path, "no_tools.yaml", NO_TOOLS)
    traced, plain = noetl_all(
        ("exec", "start", "--workflow", str(playbook), "--trace", "--json"),
        ("exec", "start", "--workflow", str(playbook), "--json"),
        server=server,
    )
    assert traced.returncode == 0 and plain.returncode == 0, traced.stderr + plain.stderr
    workloads = [
        api_status(server, json.loads(proc.stdout)["execution_id"])["workload"]
        for proc in (traced, plain)
    ]
    assert workloads[0]["trace"] is True
    assert "trace" not in workloads[1]
    assert workloads[0]["who"] == workloads[1]["who"] == "world"


def test_events(server: str) -> None:
    execution_id = api_start(server, NO_TOOLS)
    text, typed, of_step = noetl_all(
        ("exec", "events", "--id", execution_id),
        ("exec", "events", "--id", execution_id, "--json", "--type", "step.finished"),
        ("exec", "events", "--id", execution_id, "--step", "items"),
        server=server,
    )
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "workflow.started" in lines[0]
    assert "workflow.finished" in lines[-1]
    assert "s3cr3t" not in text.stdout
    items = json.loads(typed.stdout)["items"]
    assert [(e["type"], e["step"]) for e in items] == [
        ("step.finished", "start"),
        ("step.finished", "items"),
    ]
    assert of_step.returncode == 0
    assert of_step.stdout.count("loop.iteration.finished") == 2
    assert "step.called" in of_step.stdout
    assert " start " not in of_step.stdout


def test_playbook_register_list_and_start_by_path(server: str, tmp_path: Path) -> None:
    playbook = write(tmp_path, "no_tools.yaml", NO_TOOLS)
    first, renamed = noetl_all(
        ("playbook", "register", str(playbook)),
        ("playbook", "register", str(playbook), "--path", "cli/other"),
        server=server,
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "registered cli/no_tools version 1 (cli_no_tools)"
    assert renamed.stdout.strip() == "registered cli/other version 1 (cli_no_tools)"
    listed, started = noetl_all(
        ("playbook", "list"),
        ("exec", "start", "--workflow", "cli/other", "--set", "who=path"),
        server=server,
    )
    assert "cli/no_tools" in listed.stdout
    assert "cli/other" in listed.stdout
    assert started.returncode == 0, started.stderr
    data = api_status(server, started.stdout.strip())
    assert data["playbook_path"] == "cli/other"
    assert data["context"]["seen"]["who"] == "path"


def test_rejections_exit_1_with_the_servers_message(server: str, tmp_path: Path) -> None:
    bad = write(tmp_path, "invalid.yaml", INVALID)
    start, register, missing, unknown = noetl_all(
        ("exec", "start", "--workflow", str(bad)),
        ("playbook", "register", str(bad)),
        ("exec", "start", "--workflow", "no/such/playbook"),
        ("exec", "status", "--id", "424242"),
        server=server,
    )
    for proc in (start, register):
        assert proc.returncode == 1
        assert f"{bad}:7: error E" in proc.stderr  # the local file name and the line
        assert "nowhere" in proc.stderr
    assert missing.returncode == 1
    assert "'no/such/playbook' is not registered" in missing.stderr
    assert "no local file" in missing.stderr
    assert unknown.returncode == 1
    assert "execution 424242 not found (HTTP 404)" in unknown.stderr


def test_cancel_a_running_execution_while_watching(server: str) -> None:
    execution_id = api_start(server, WAITS)
    env = {**os.environ, "NOETL_SERVER_URL": server, "NOETL_API_TOKEN": TOKENS[server][Role.ADMIN]}
    args = ("exec", "status", "--id", execution_id, "--watch", "--interval", "0.1", "--json")
    watch = subprocess.Popen(
        [sys.executable, "-m", "noetl", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        canceled = noetl("exec", "cancel", "--id", execution_id, server=server)
        assert canceled.returncode == 0, canceled.stderr
        assert canceled.stdout.strip() == f"cancel requested for execution {execution_id}"
        out, err = watch.communicate(timeout=30)
    finally:
        watch.kill()
    assert watch.returncode == 1, err
    final = json.loads(out)
    assert final["status"] == "canceled"
    assert final["steps"]["start"]["status"] == "canceled"
    again = noetl("exec", "cancel", "--id", execution_id, server=server)
    assert again.returncode == 0
    assert "already finished (canceled)" in again.stdout


# --- authentication -----------------------------------------------------------------------


def test_without_a_token_the_cli_says_how_to_pass_one(server: str) -> None:
    proc = noetl("exec", "status", "--id", "1", server=server, token="")
    assert proc.returncode == 1
    assert "missing bearer token" in proc.stderr and "(HTTP 401)" in proc.stderr
    assert "NOETL_API_TOKEN" in proc.stderr and "noetl auth token create" in proc.stderr


def test_a_wrong_token_is_refused_without_being_echoed(server: str) -> None:
    wrong = "noetl_" + "x" * 43
    proc = noetl("playbook", "list", server=server, token=wrong)
    assert proc.returncode == 1
    assert "the token is not valid" in proc.stderr and "(HTTP 401)" in proc.stderr
    assert wrong not in proc.stderr + proc.stdout


def test_a_viewer_reads_but_cannot_start(server: str, tmp_path: Path) -> None:
    viewer = TOKENS[server][Role.VIEWER]
    playbook = write(tmp_path, "no_tools.yaml", NO_TOOLS)
    listed, started = (
        noetl("playbook", "list", "--json", server=server, token=viewer),
        noetl("exec", "start", "--workflow", str(playbook), server=server, token=viewer),
    )
    assert listed.returncode == 0, listed.stderr
    assert started.returncode == 1
    assert "needs the operator role" in started.stderr and "(HTTP 403)" in started.stderr
    # --token wins over NOETL_API_TOKEN
    flagged = noetl(
        "exec", "start", "--workflow", str(playbook), "--token", TOKENS[server][Role.OPERATOR],
        server=server, token=viewer,
    )  # fmt: skip
    assert flagged.returncode == 0, flagged.stderr


def test_dlq_commands_send_the_token(server: str) -> None:
    refused = noetl("dlq", "list", "--json", server=server, token="")
    assert refused.returncode == 1 and "(HTTP 401)" in refused.stderr
    listed = noetl("dlq", "list", "--json", server=server)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["items"] == []


FAILS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fails}
workflow:
  - step: start
    result: {pick: "{{ 1 // 0 }}", as: nothing}
"""


def test_status_exits_1_for_a_failed_execution_with_or_without_watch(
    server: str, tmp_path: Path
) -> None:
    playbook = write(tmp_path, "fails.yaml", FAILS)
    started = noetl("exec", "start", "--workflow", str(playbook), "--json", server=server)
    assert started.returncode == 0, started.stderr
    execution_id = json.loads(started.stdout)["execution_id"]
    watched = noetl("exec", "status", "--id", execution_id, "--watch", "--interval", "0.1",
                    server=server)  # fmt: skip
    assert watched.returncode == 1, watched.stdout + watched.stderr
    status = noetl("exec", "status", "--id", execution_id, server=server)
    assert status.returncode == 1
    assert f"execution {execution_id} finished: fail" in status.stdout
    assert "ZeroDivisionError" in status.stdout
