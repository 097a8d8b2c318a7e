"""Run upstream NoETL's end-to-end fixtures (the conformance kit) on this engine.

    python bench/upstream_e2e.py --kit ../shared/upstream-e2e
    python bench/upstream_e2e.py --kit ../shared/upstream-e2e --distributed --json
    python bench/upstream_e2e.py --kit ../shared/upstream-e2e --only no-credentials
    python bench/upstream_e2e.py --kit ../shared/upstream-e2e --only '*/pagination/*'

What it sets up, as upstream's suite does on its cluster, and tears down at the end:

* the kit's mock HTTP API (`fixtures/servers/paginated_api.py`, FastAPI) on a free
  loopback port; every case gets `--set api_url=http://127.0.0.1:PORT`;
* a scratch PostgreSQL database (on `--pg-dsn`, dropped unless `--keep`) that every
  postgres credential name the fixtures use points at: a credentials file
  (`NOETL_CREDENTIALS_FILE`, upstream's record format) and `NOETL_CREDENTIAL_<NAME>`;
* the catalog: every kit playbook that validates, under its `metadata.path` (children
  started with `kind: playbook` are found there);
* `save_storage_test/create_tables.yaml` run first when a postgres case is selected.

Each case then runs as `noetl run FILE --json` in a fresh SQLite database (embedded), or,
with `--distributed`, through a `noetl server` and two `noetl worker` processes on a
PostgreSQL database of their own, started over the API and polled until terminal. The
grading is upstream's (see upstream_grading.py). Exit code: 0 when every case passed, 1
otherwise, 3 when the environment could not be set up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import httpx
import psycopg
import yaml
from psycopg import sql
from upstream_grading import (
    Case,
    CaseResult,
    Run,
    interpret,
    read_cases,
    render_text,
    report,
    select,
)

from noetl.dsl import load_playbook_text
from noetl.store import open_store

ROOT = Path(__file__).resolve().parent.parent
# Every name upstream's fixtures give a postgres credential (`auth:`, `credential:`,
# `pg_auth:` and the like, as written or as a workload default).
CREDENTIAL_NAMES = (
    "pg_local",
    "pg_k8s",
    "pg_auth",
    "test_postgres",
    "noetl_connection",
    "pg_noetl_k8s",
    "noetl_ducklake_catalog",
    "pg_test",
    "pg_tutorial",
    "pg_trade",
)
SETUP_CASE = "fixtures/playbooks/save_storage_test/create_tables.yaml"
# Upstream runs locally with `--input fixtures/payloads/pg_local.json --merge` on the
# playbooks whose workload picks a credential with `pg_auth`.
LOCAL_PAYLOAD = "fixtures/payloads/pg_local.json"
WORKERS = 2


class SetupError(Exception):
    """The environment could not be set up (exit code 3)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SetupError(f"{what} exited ({proc.returncode}):\n{_tail(log)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise SetupError(f"{what} did not answer {url} within 30 s:\n{_tail(log)}")


def _tail(log: Path, size: int = 3000) -> str:
    return log.read_text(encoding="utf-8", errors="replace")[-size:] if log.exists() else ""


def _stop(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _spawn(
    args: list[str], *, env: dict[str, str], cwd: Path, log: Path
) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            args, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )


@contextlib.contextmanager
def mock_api(kit: Path, workdir: Path, env: dict[str, str]) -> Iterator[str]:
    """The kit's mock API on a free loopback port (its script would listen on every
    interface, so its app is served with uvicorn's command line); its base URL."""
    port = free_port()
    args = [sys.executable, "-m", "uvicorn", "paginated_api:app"]
    args += f"--host 127.0.0.1 --port {port} --log-level warning".split()
    args += ["--app-dir", str(kit / "fixtures" / "servers")]
    log = workdir / "mock-api.log"
    proc = _spawn(args, env=env, cwd=workdir, log=log)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(f"{url}/health", proc, log, "the mock API")
        yield url
    finally:
        _stop(proc)


@contextlib.contextmanager
def scratch_database(admin_dsn: str, label: str, *, keep: bool) -> Iterator[str]:
    """A new empty database on the server of `admin_dsn`; its URL. Dropped afterwards
    unless `keep`."""
    name = f"noetl_{label}_{os.getpid()}_{int(time.time())}"
    try:
        with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        raise SetupError(f"cannot create a database on {_shown(admin_dsn)}: {exc}") from None
    try:
        yield urlsplit(admin_dsn)._replace(path="/" + name).geturl()
    finally:
        if keep:
            print(f"kept database {name}", file=sys.stderr)
        else:
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                conn.execute(drop.format(sql.Identifier(name)))


def _shown(dsn: str) -> str:
    parts = urlsplit(dsn)
    host = parts.hostname or "localhost"
    return f"{parts.scheme}://{parts.username or ''}@{host}:{parts.port or 5432}{parts.path}"


def credentials(dsn: str, workdir: Path) -> dict[str, str]:
    """Every credential name pointing at `dsn`: the environment that says so (a
    credentials file in upstream's record format, and the `{"dsn": ...}` variables)."""
    parts = urlsplit(dsn)
    data = {
        "db_host": parts.hostname or "127.0.0.1",
        "db_port": str(parts.port or 5432),
        "db_user": unquote(parts.username or "postgres"),
        "db_password": unquote(parts.password or ""),
        "db_name": parts.path.lstrip("/"),
    }
    records = {name: {"type": "postgres", "data": data} for name in CREDENTIAL_NAMES}
    file = workdir / "credentials.json"
    file.write_text(json.dumps(records, indent=2), encoding="utf-8")
    env = {"NOETL_CREDENTIALS_FILE": str(file)}
    env |= {f"NOETL_CREDENTIAL_{name.upper()}": json.dumps({"dsn": dsn}) for name in records}
    return env


@dataclass(frozen=True)
class Kit:
    root: Path

    @property
    def cases(self) -> list[Case]:
        tsv = self.root / "CASES.tsv"
        return read_cases(tsv.read_text(encoding="utf-8"), str(tsv))

    def playbooks(self) -> Iterator[tuple[str, str]]:
        """(path under the kit, text) of every playbook file in the kit."""
        base = self.root / "fixtures" / "playbooks"
        for file in sorted([*base.rglob("*.yaml"), *base.rglob("*.yml")]):
            yield str(file.relative_to(self.root)), file.read_text(encoding="utf-8")

    def start(self, case: Case, api_url: str) -> Start:
        """How a case is started: its file, the mock API's URL, and the local payload
        when the playbook's workload picks a credential with `pg_auth`."""
        file = self.root / case.path
        text = file.read_text(encoding="utf-8")
        payload = None
        with contextlib.suppress(yaml.YAMLError):
            doc = yaml.safe_load(text)
            declared = doc.get("workload") if isinstance(doc, dict) else None
            if isinstance(declared, dict) and "pg_auth" in declared:
                payload = self.root / LOCAL_PAYLOAD
        return Start(file, text, api_url, payload)


@dataclass(frozen=True)
class Start:
    file: Path
    text: str
    api_url: str
    payload: Path | None  # a JSON file merged over the playbook's workload

    def workload(self) -> dict[str, Any]:
        """What `--workload PAYLOAD --set api_url=URL` gives."""
        payload = json.loads(self.payload.read_text(encoding="utf-8")) if self.payload else {}
        return {**payload, "api_url": self.api_url}


class Runner(Protocol):
    def run(self, start: Start) -> Run: ...


class Embedded:
    """`noetl run FILE --json` in a subprocess, each in a fresh SQLite database (a copy of
    one that holds the catalog)."""

    def __init__(self, kit: Kit, workdir: Path, env: dict[str, str], timeout: float) -> None:
        self.kit, self.workdir, self.env, self.timeout = kit, workdir, env, timeout
        self.template = workdir / "catalog.db"
        self.runs = 0

    def register(self) -> dict[str, int]:
        store = open_store(str(self.template))  # creates the schema
        counts = {"registered": 0, "invalid": 0, "without_path": 0}
        try:
            for name, text in self.kit.playbooks():
                loaded = load_playbook_text(text, name)
                meta = loaded.playbook.metadata if loaded.ok and loaded.playbook else None
                if meta is None:
                    counts["invalid"] += 1
                elif not meta.path:
                    counts["without_path"] += 1
                else:
                    store.register_playbook(meta.path, meta.name, text, time.time())
                    counts["registered"] += 1
        finally:
            store.close()
        return counts

    def run(self, start: Start) -> Run:
        self.runs += 1
        db = self.workdir / f"case-{self.runs:03d}.db"
        shutil.copyfile(self.template, db)
        args = [sys.executable, "-m", "noetl", "run", str(start.file), "--json", "--db", str(db)]
        args += ["--set", f"api_url={start.api_url}"]
        if start.payload:
            args += ["--workload", str(start.payload)]
        started = time.monotonic()
        pipe = subprocess.PIPE
        proc = subprocess.Popen(
            args, cwd=self.workdir, env=self.env, stdout=pipe, stderr=pipe, start_new_session=True
        )
        try:
            out, err = proc.communicate(timeout=self.timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            # Its python child processes too: they are in its session.
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            timed_out = True
        seconds = time.monotonic() - started
        stderr = err.decode("utf-8", "replace")
        (self.workdir / f"case-{self.runs:03d}.log").write_text(stderr, encoding="utf-8")
        doc = None
        with contextlib.suppress(ValueError):
            doc = json.loads(out)
        return interpret(doc, seconds, timed_out=timed_out, timeout_s=self.timeout, stderr=stderr)


class Cluster:
    """A `noetl server` and two `noetl worker` processes sharing a PostgreSQL database."""

    def __init__(self, db: str, workdir: Path, env: dict[str, str], timeout: float) -> None:
        self.env = {**env, "NOETL_DB": db}
        self.workdir, self.timeout = workdir, timeout
        self.procs: list[subprocess.Popen[bytes]] = []
        self.url = ""
        self.client = httpx.Client(timeout=30)

    def start(self) -> None:
        open_store(self.env["NOETL_DB"]).close()  # creates the schema before anyone races
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        noetl = [sys.executable, "-m", "noetl"]
        server = [*noetl, *f"server start --host 127.0.0.1 --port {port} --no-auth".split()]
        log = self.workdir / "server.log"
        self.procs.append(_spawn(server, env=self.env, cwd=self.workdir, log=log))
        _wait_healthy(f"{self.url}/health", self.procs[0], log, "noetl server")
        for index in range(1, WORKERS + 1):
            worker = [*noetl, "worker", "start", "--poll", "0.2"]
            log = self.workdir / f"worker-{index}.log"
            self.procs.append(_spawn(worker, env=self.env, cwd=self.workdir, log=log))

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _stop(proc)
        self.client.close()

    def register(self, kit: Kit) -> dict[str, int]:
        counts = {"registered": 0, "invalid": 0, "without_path": 0}
        for _, text in kit.playbooks():
            response = self.client.post(f"{self.url}/api/playbooks", json={"content": text})
            if response.is_success:
                counts["registered"] += 1
            elif "body.path" in response.text:
                counts["without_path"] += 1
            else:
                counts["invalid"] += 1
        return counts

    def run(self, start: Start) -> Run:
        started = time.monotonic()
        body = {"playbook": start.text, "workload": start.workload()}
        try:
            response = self.client.post(f"{self.url}/api/executions", json=body)
            answer = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            error = {"status": "error", "error": f"starting it over the API: {exc!r}"}
            return interpret(error, time.monotonic() - started)
        if response.status_code == 422 and "diagnostics" in answer:
            doc = {"status": "invalid", "diagnostics": answer["diagnostics"]}
            return interpret(doc, time.monotonic() - started)
        if response.status_code != 201:
            error = {"status": "error", "error": answer.get("message", response.text)}
            return interpret(error, time.monotonic() - started)
        execution = f"{self.url}/api/executions/{answer['execution_id']}"
        doc = {"execution_id": answer["execution_id"]}
        while time.monotonic() - started < self.timeout:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                doc = self.client.get(execution).json()
            if doc.get("status") in ("ok", "fail", "canceled"):
                return interpret(doc, time.monotonic() - started)
            time.sleep(0.2)
        # Cancel it, so that it does not take the workers from the next cases.
        with contextlib.suppress(httpx.HTTPError):
            self.client.post(f"{execution}/cancel")
        return interpret(doc, time.monotonic() - started, timed_out=True, timeout_s=self.timeout)


def run_cases(kit: Kit, runner: Runner, cases: list[Case], api_url: str) -> list[CaseResult]:
    results = []
    for number, case in enumerate(cases, start=1):
        result = CaseResult(case, runner.run(kit.start(case, api_url)))
        mark = "ok" if result.graded.passed else "FAIL"
        progress = f"[{number}/{len(cases)}] {mark:<4} {result.run.got:<9}"
        print(f"{progress} {result.run.seconds:6.1f}s {case.path}", file=sys.stderr)
        results.append(result)
    return results


def _environment(workdir: Path, kit: Kit) -> dict[str, str]:
    """What every process started here gets: this tree first on the path, files the
    fixtures write kept out of the kit, and no bytecode written into it."""
    env = dict(os.environ)
    env.pop("NOETL_DB", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["NOETL_PLAYBOOKS_ROOT"] = str(kit.root)
    env["NOETL_SINKS_FILE_ROOT"] = str(workdir / "sinks")
    (workdir / "sinks").mkdir()
    # The fixtures name their files from upstream's repository root (`./fixtures/...`).
    (workdir / "fixtures").symlink_to(kit.root / "fixtures")
    return env


def conformance(args: argparse.Namespace) -> dict[str, Any]:
    """Set everything up, run the selected cases, tear down; the report."""
    kit = Kit(Path(args.kit).resolve())
    if not (kit.root / "CASES.tsv").is_file():
        raise SetupError(f"{kit.root} has no CASES.tsv: is --kit the conformance kit?")
    cases = select(kit.cases, args.only)
    if not cases:
        raise SetupError(f"--only {' '.join(args.only)!r} matches no case")
    mode = "distributed" if args.distributed else "embedded"
    with contextlib.ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="noetl-upstream-e2e-"))
        if args.keep:
            print(f"kept working directory {workdir}", file=sys.stderr)
        else:
            stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        env = _environment(workdir, kit)
        data_db = stack.enter_context(scratch_database(args.pg_dsn, "e2e", keep=args.keep))
        env |= credentials(data_db, workdir)
        api_url = stack.enter_context(mock_api(kit.root, workdir, env))
        runner: Embedded | Cluster
        if args.distributed:
            cluster_db = stack.enter_context(
                scratch_database(args.pg_dsn, "e2e_cluster", keep=args.keep)
            )
            runner = Cluster(cluster_db, workdir, env, args.timeout)
            stack.callback(runner.stop)
            runner.start()
            catalog = runner.register(kit)
        else:
            runner = Embedded(kit, workdir, env, args.timeout)
            catalog = runner.register()
        setup = None
        if any(case.group == "postgres-only" for case in cases):
            [setup] = run_cases(
                kit, runner, [Case(SETUP_CASE, "setup", True, "COMPLETED")], api_url
            )
        results = run_cases(kit, runner, cases, api_url)
    return report(
        results,
        mode=mode,
        kit=str(kit.root),
        timeout_s=args.timeout,
        catalog=catalog,
        setup=setup.to_dict() if setup else None,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kit", required=True, help="the conformance kit's directory")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="through a noetl server and two workers on PostgreSQL",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--only",
        action="append",
        help="a group (no-credentials, postgres-only), a glob over paths, or a part of a "
        "path; may be given more than once",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument(
        "--pg-dsn",
        default="postgresql://postgres@127.0.0.1:5432/",
        help="a PostgreSQL server to create scratch databases on",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch databases and the working directory"
    )
    args = parser.parse_args(argv)
    try:
        doc = conformance(args)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        setup = doc.get("setup")
        if setup:
            print(f"setup {setup['path']}: {setup['got']} {setup['error'] or ''}".rstrip())
        print(f"mode {doc['mode']}; catalog {doc['catalog']}\n")
        print(render_text(doc))
    return 0 if doc["totals"]["all"]["passed"] == doc["totals"]["all"]["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
