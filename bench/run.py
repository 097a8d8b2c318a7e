"""Benchmarks of NoETL through its public entry points.

    python bench/run.py --workload chain --mode embedded --json
    python bench/run.py --workload fanout --mode embedded --n 10000 --json
    python bench/run.py --workload chain --mode postgres --workers 2 --json

Prints one JSON object: workload, mode, workers, n, wall_s, per_step_ms, items_per_s,
peak_rss_mb (fields that do not apply are null). Wall time runs from the call that starts
the execution to its terminal status; peak RSS is sampled over this process and all of its
descendants (the python tool's child processes included).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
from rss import RssSampler, postgres_cpu_seconds, tree_cpu_seconds

from noetl.auth import Role, issue_token
from noetl.cli.heap import settle
from noetl.dsl import load_playbook_text
from noetl.runtime.local import embedded_runtime
from noetl.store import open_store

ADD_ONE = "def main(context, args):\n    return args['v'] + 1\n"
DOUBLE = "def main(context, args):\n    return args['x'] * 2\n"


def chain_playbook(n: int) -> str:
    """W1: n sequential python steps, each adding 1 to the previous step's result."""
    lines = [
        "apiVersion: noetl.io/v2",
        "kind: Playbook",
        "metadata: {name: bench_chain}",
        "workflow:",
    ]
    for i in range(n):
        prev = "0" if i == 0 else '"{{ v }}"'
        lines += [
            f"  - step: s{i}",
            "    tool:",
            "      kind: python",
            f"      code: {json.dumps(ADD_ONE)}",
            f"      args: {{v: {prev}}}",
            "    result: {as: v}",
        ]
        if i + 1 < n:
            lines.append(f"    next: s{i + 1}")
    return "\n".join(lines) + "\n"


# Templates make ranges of at most 100,000 items; a longer collection comes from a step.
MAX_RANGE = 100_000
RANGE_STEP = "def main(context, args):\n    return list(range(args['n']))\n"


def fanout_playbook(n: int, concurrency: int = 64) -> str:
    """W2: an n-item parallel loop of trivial python items, results collected into a list
    (over 100,000 items, the collection is a first step's result, kept in the result
    store)."""
    collection = "{{ range(workload.n) | list }}"
    first = ""
    if n > MAX_RANGE:
        collection = "{{ numbers }}"
        first = f"""  - step: numbers
    tool:
      kind: python
      code: {json.dumps(RANGE_STEP)}
      args: {{n: "{{{{ workload.n }}}}"}}
    result: {{as: numbers}}
    next: fan
"""
    return f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: bench_fanout}}
workload: {{n: {n}}}
workflow:
{first}  - step: fan
    loop:
      collection: "{collection}"
      element: x
      mode: parallel
      max_concurrency: {concurrency}
    tool:
      kind: python
      code: {json.dumps(DOUBLE)}
      args: {{x: "{{{{ x }}}}"}}
    result:
      collect: {{into: doubled, mode: list}}
"""


JOIN_STEPS = 4  # start, A, B, join
BURST_STEPS = 5


def join_playbook() -> str:
    """W3: A and B in parallel, then a join gated on both."""
    return f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: bench_join}}
workflow:
  - step: start
    next: [A, B]
  - step: A
    tool: {{kind: python, code: {json.dumps(ADD_ONE)}, args: {{v: 1}}}}
    result: {{as: a}}
    next: join
  - step: B
    tool: {{kind: python, code: {json.dumps(ADD_ONE)}, args: {{v: 2}}}}
    result: {{as: b}}
    next: join
  - step: join
    when: "{{{{ done('A') and done('B') }}}}"
    tool: {{kind: python, code: {json.dumps(ADD_ONE)}, args: {{v: "{{{{ a + b }}}}"}}}}
    result: {{as: v}}
"""


def burst_playbook() -> str:
    """W4: a 5-step sequential playbook (started many times at once)."""
    return chain_playbook(BURST_STEPS).replace("bench_chain", "bench_burst")


def _playbook_for(workload: str, n: int) -> str:
    return {
        "chain": lambda: chain_playbook(n),
        "fanout": lambda: fanout_playbook(n),
        "join": join_playbook,
        "burst": burst_playbook,
    }[workload]()


MANY = {"join": (JOIN_STEPS, 6), "burst": (BURST_STEPS, BURST_STEPS)}  # steps, expected v
# The warm-up run of the workload itself before the clock (the peers' n as well).
WARM_N = 5


def run_embedded(workload: str, n: int, workers: int | None) -> dict[str, Any]:
    text = _playbook_for(workload, n)
    playbook = load_playbook_text(text, f"bench_{workload}.yaml").require()
    runs = n if workload in MANY else 1
    with tempfile.TemporaryDirectory() as tmp, RssSampler() as rss:
        db = str(Path(tmp) / "bench.db")
        with embedded_runtime(db, workers=workers) as runtime:
            # Warm the python pool so the figure is the orchestration cost, not process start.
            warm = load_playbook_text(chain_playbook(2), "warm.yaml").require()
            runtime.run(warm)
            # Then the workload itself with n=5, as the peers warm up (bench/peers).
            if workload in MANY:
                runtime.wait([runtime.start(playbook, source_text=text) for _ in range(WARM_N)])
            else:
                small = _playbook_for(workload, WARM_N)
                runtime.run(load_playbook_text(small, f"warm_{workload}.yaml").require())
            # As `noetl run` does before its execution starts (noetl.cli.heap): what
            # start-up made is kept out of the collector's walks.
            settle()
            started = time.perf_counter()
            ids = [runtime.start(playbook, source_text=text) for _ in range(runs)]
            results = runtime.wait(ids)
            wall = time.perf_counter() - started
    for result in results:
        _check(workload, n, result.status.value, result.context)
    count = workers or os.cpu_count() or 1
    return _figures(workload, "embedded", count, n=n, wall=wall, peak_kb=rss.peak_kb)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _scratch_database(admin_dsn: str) -> Iterator[str]:
    """A new, empty PostgreSQL database for one benchmark run (dropped afterwards)."""
    name = f"noetl_bench_{os.getpid()}_{int(time.time())}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(admin_dsn)._replace(path="/" + name).geturl()
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _spawn(args: list[str], db: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NOETL_DB": db, "NOETL_LOG_LEVEL": "WARNING"}
    with log.open("wb") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "noetl", *args], env=env, stdout=fh, stderr=subprocess.STDOUT
        )


def wait_healthy(url: str, log: Path) -> None:
    """Wait (30 s at most) until the server at `url` answers /health; else exit with its log."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(log.read_text())
        time.sleep(0.1)


def _start_and_wait(
    url: str,
    db: str,
    text: str,
    runs: int = 1,
    timeout: float = 600,
    *,
    token: str,
    path: str | None = None,
) -> tuple[list[str], float]:
    """Start `runs` executions over the API at once (of the playbook registered at `path`,
    else of `text` inline); return their ids and the seconds from the first request to
    the last terminal status."""
    body = json.dumps({"playbook": text} if path is None else {"path": path}).encode()
    post = _Poster(url, token, body)
    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=min(8, runs)) as pool:
            ids = list(pool.map(post, range(runs)))
    finally:
        post.close()
    pending = set(ids)
    deadline = time.monotonic() + timeout
    # One light query per poll (status only), so watching does not load the database.
    with psycopg.connect(db, autocommit=True) as conn:
        while pending and time.monotonic() < deadline:
            rows = conn.execute(
                "SELECT execution_id FROM execution "
                "WHERE execution_id = ANY(%s) AND status <> 'running'",
                (list(pending),),
            ).fetchall()
            pending.difference_update(row[0] for row in rows)
            if pending:
                time.sleep(0.01)
    if pending:
        raise SystemExit(f"{len(pending)} executions did not finish in {timeout}s")
    return ids, time.perf_counter() - started


class _Poster:
    """`POST /api/executions` of one body from many threads, each over a keep-alive
    connection of its own (the standard library's client). The benchmark's client runs
    on the cores it measures: httpx took about 0.9 ms of CPU a request there, a seventh
    of what W4 spends in all (DBOS, the peer, starts its workflows in-process)."""

    def __init__(self, url: str, token: str, body: bytes) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.body = body
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def __call__(self, _: int) -> str:
        conn = self._connection()
        conn.request("POST", "/api/executions", body=self.body, headers=self.headers)
        response = conn.getresponse()
        answer = response.read()
        if response.status != 201:
            raise SystemExit(f"a start answered {response.status}: {answer[:500]!r}")
        return str(json.loads(answer)["execution_id"])

    def close(self) -> None:
        for conn in self._all:
            conn.close()


def _register(url: str, text: str, path: str, *, token: str) -> None:
    """Register the playbook under `path` (`POST /api/playbooks`)."""
    response = httpx.post(
        f"{url}/api/playbooks",
        json={"content": text, "path": path},
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    )
    response.raise_for_status()


# Python child processes per worker: trivial items need CPU, not processes.
PYTHON_PROCESSES = 4


def _cpu_by_role(procs: list[subprocess.Popen[bytes]]) -> dict[str, float]:
    """CPU seconds so far of the server, the workers (with their python children) and
    PostgreSQL: where a run's time goes when the machine is the limit."""
    return {
        "server": tree_cpu_seconds(procs[0].pid),
        "workers": sum(tree_cpu_seconds(proc.pid) for proc in procs[1:]),
        "postgres": postgres_cpu_seconds(),
    }


def run_postgres(  # noqa: PLR0917 - the benchmark's knobs, passed straight from argparse
    workload: str,
    n: int,
    workers: int,
    admin_dsn: str,
    concurrency: int | None = None,
    cpu_report: bool = False,
    bus: str | None = None,
) -> dict[str, Any]:
    """The server plus `workers` worker processes on a fresh PostgreSQL database (with the
    task bus at `bus`, a NATS JetStream URL, when given)."""
    text = _playbook_for(workload, n)
    runs = n if workload in MANY else 1
    with tempfile.TemporaryDirectory() as tmp, _scratch_database(admin_dsn) as db:
        store = open_store(db)  # also creates the schema
        token, _ = issue_token(store.tokens, role=Role.OPERATOR, name="bench", now=time.time())
        port = _free_port()
        on_bus = ["--bus", bus] if bus else []
        # No flags: the worker's own defaults, chosen from the machine, as a user runs it
        # (`--poll 0.2`, passed until round eleven, changed nothing measurable: W4 1.011,
        # W2 0.919 / 1.032, W1 0.982 the time or rate, pairs).
        slots = (
            []
            if concurrency is None
            else [
                "--concurrency",
                str(concurrency),
                "--python-processes",
                str(min(concurrency, PYTHON_PROCESSES)),
            ]
        )
        procs = [
            _spawn(["server", "start", "--port", str(port), *on_bus], db, Path(tmp) / "server.log")
        ]
        procs += [
            _spawn(
                ["worker", "start", *slots, *on_bus],
                db,
                Path(tmp) / f"w{i}.log",
            )
            for i in range(workers)
        ]
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, Path(tmp) / "server.log")
            try:
                # warm every worker
                _start_and_wait(url, db, chain_playbook(2 * workers), token=token)
                # Registered before the clock starts, as a deployment is: the server reads
                # its YAML then, not in the timed run (embedded mode reads it first too).
                path = f"bench/{workload}"
                _register(url, text, path, token=token)
                # Then the workload itself with n=5, as the peers warm up
                # (bench/peers): the workers have seen its steps before the clock.
                if workload in MANY:
                    _start_and_wait(url, db, text, WARM_N, token=token, path=path)
                else:
                    _start_and_wait(url, db, _playbook_for(workload, WARM_N), token=token)
                before = _cpu_by_role(procs)
                with RssSampler() as rss:
                    ids, wall = _start_and_wait(url, db, text, runs, token=token, path=path)
                if cpu_report:
                    after = _cpu_by_role(procs)
                    spent = {role: round(after[role] - before[role], 2) for role in after}
                    print(json.dumps({"cpu_s": spent, "wall_s": round(wall, 3)}), file=sys.stderr)
            except httpx.HTTPStatusError as exc:
                log = (Path(tmp) / "server.log").read_text()[-3000:]
                raise SystemExit(f"{exc}\n--- server log\n{log}") from None
            records = [store.get_execution(execution_id) for execution_id in ids]
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            store.close()
    for record in records:
        if record is None:
            raise SystemExit("an execution is missing")
        _check(workload, n, record.status.value, record.context)
    return _figures(workload, "postgres", workers, n=n, wall=wall, peak_kb=rss.peak_kb)


def _check(workload: str, n: int, status: str, context: dict[str, Any]) -> None:
    if status != "ok":
        raise SystemExit(f"benchmark execution ended {status}")
    if workload in MANY and context.get("v") != MANY[workload][1]:
        raise SystemExit(f"{workload} computed {context.get('v')}, expected {MANY[workload][1]}")
    if workload == "chain" and context.get("v") != n:
        raise SystemExit(f"chain computed {context.get('v')}, expected {n}")
    if workload == "fanout" and len(context.get("doubled", [])) != n:
        raise SystemExit("fanout collected the wrong number of items")


def _figures(
    workload: str, mode: str, workers: int, *, n: int, wall: float, peak_kb: int
) -> dict[str, Any]:
    steps = n * MANY[workload][0] if workload in MANY else n
    return {
        "workload": workload,
        "mode": mode,
        "workers": workers,
        "n": n,
        "wall_s": round(wall, 4),
        # chain: per step; join / burst: per step over all executions
        "per_step_ms": round(wall * 1000 / steps, 4) if workload != "fanout" else None,
        # fanout: loop items per second; join / burst: executions per second
        "items_per_s": round(n / wall, 1) if workload != "chain" else None,
        "peak_rss_mb": round(peak_kb / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=["chain", "fanout", "join", "burst"], required=True)
    parser.add_argument("--mode", choices=["embedded", "postgres"], default="embedded")
    parser.add_argument(
        "--pg",
        default=os.environ.get("NOETL_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
        help="PostgreSQL DSN used to create a scratch database (postgres mode)",
    )
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="postgres mode: tasks at once per worker (with up to 4 python processes); "
        "default: the worker's own defaults, chosen from the machine",
    )
    parser.add_argument("--n", type=int, default=None, help="steps (chain) or items (fanout)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="postgres mode: print the CPU seconds of server, workers and PostgreSQL to stderr",
    )
    parser.add_argument(
        "--bus",
        default=None,
        metavar="URL",
        help="postgres mode: the task bus (nats://HOST:PORT) of the server and the workers",
    )
    args = parser.parse_args(argv)
    n = args.n or {"chain": 1000, "fanout": 10000, "join": 200, "burst": 500}[args.workload]
    if args.mode == "embedded":
        figures = run_embedded(args.workload, n, args.workers)
    else:
        figures = run_postgres(
            args.workload, n, args.workers or 1, args.pg, args.concurrency, args.cpu, args.bus
        )
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>12}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
