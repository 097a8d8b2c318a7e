"""`noetl server start`: the REST API and the orchestrator loop in one process."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from noetl import __version__
from noetl.auth.cache import CachedTokens
from noetl.cli.bus_opt import bus_option, close_store, open_store_with_bus
from noetl.cli.heap import settle
from noetl.cli.observe import (
    log_options,
    metrics_options,
    new_metrics,
    setup_logging,
    setup_tracing,
)
from noetl.cli.settings import db_option, setting_option, with_settings
from noetl.cli.sink_runner import sink_connections, start_sink_runner, stop_sink_runner
from noetl.config import Settings
from noetl.config.extras import check_sessions
from noetl.errors import ConfigError
from noetl.paths import data_dir
from noetl.runtime.nats_triggers import NatsTriggers
from noetl.runtime.orchestrator import Orchestrator
from noetl.runtime.scheduler import Scheduler, SchedulerOptions
from noetl.scripts import script_reader

if TYPE_CHECKING:
    from noetl.observability import Observer
    from noetl.observability.metrics import Metrics
    from noetl.observability.tracing import Tracing
    from noetl.store.base import Store

log = logging.getLogger("noetl.server")


def _uvicorn_server() -> type:
    import uvicorn

    class _NoSignals(uvicorn.Server):
        """uvicorn re-raises the signal it caught once it has shut down, which would end
        the process before the orchestrator stops and the store closes; we handle
        SIGTERM/SIGINT ourselves instead."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return _NoSignals


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or `localhost`."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_exposure(settings: Settings, host: str) -> None:
    """ConfigError (exit 3) when the API would listen on `host`, beyond loopback, without
    authentication."""
    if not settings.auth.enabled and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the API on {host} without authentication: auth.enabled is "
            "false, which is allowed only on a loopback address (127.0.0.1, ::1, localhost). "
            "Enable it (NOETL_AUTH_ENABLED=true, the default) and create a token with "
            "`noetl auth token create --role admin`, or listen on 127.0.0.1"
        )


auth_option = setting_option(
    "auth.enabled",
    "--auth/--no-auth",
    help="Require a bearer token on the API (--no-auth: only on a loopback --host).",
)

scheduler_option = setting_option(
    "scheduler.enabled",
    "--scheduler/--no-scheduler",
    help="Start the ticks of schedules (any number of servers may: each tick starts once).",
)


@click.command("start")
@setting_option("server.host", "--host", help="Address the API listens on.")
@setting_option("server.port", "--port", type=click.IntRange(1, 65535), help="Port of the API.")
@setting_option(
    "server.pool",
    "--pool",
    help="Pool new tasks are queued in (unset: worker.pool, NOETL_WORKER_POOL).",
    default_text="worker.pool",
)
@bus_option
@auth_option
@scheduler_option
@log_options("INFO")
@metrics_options(port=False, path=True)
@db_option
@with_settings
def server_start(*, settings: Settings) -> None:
    """Serve the API and orchestrate executions until SIGTERM / Ctrl-C; the metrics are at
    /metrics on the API's port (unless --no-metrics)."""
    serve(settings, host=settings.server.host, port=settings.server.port, name="noetl server")


def serve(settings: Settings, *, host: str, port: int, name: str, note: str = "") -> None:
    """The API (with the console at /ui/) and the orchestrator loop over `settings.db`,
    until SIGTERM / Ctrl-C; `note` is printed after the address."""
    import uvicorn

    from noetl.credentials.keys import Keyring
    from noetl.server.app import create_app
    from noetl.server.auth import Gate
    from noetl.sessions import Sessions, open_session_store

    _Server = _uvicorn_server()

    check_exposure(settings, host)
    check_sessions(settings.sessions)  # a missing extra stops the start before any work
    setup_logging(settings, "INFO")
    tracing = setup_tracing(settings, "noetl-server")
    # Tasks queued by this server's commits are announced on the bus after each commit.
    store, bus = open_store_with_bus(settings, connections=sink_connections(settings))
    try:
        sessions = Sessions(
            open_session_store(settings.sessions, store), ttl_s=settings.sessions.ttl_s
        )
    except BaseException:
        close_store(store, bus)
        raise
    tokens = CachedTokens(store.tokens, ttl_s=settings.server.revocation_delay_s)
    gate = Gate(tokens, sessions, enabled=settings.auth.enabled)
    _warn_about_auth(settings, host, store.tokens.all())
    owner = f"{socket.gethostname()}:{os.getpid()}"
    metrics = new_metrics(store) if settings.metrics.enabled else None
    orchestrator, observer = _orchestrator(settings, store, owner, metrics, tracing)
    stop = threading.Event()
    scheduler, loops = _loops(settings, orchestrator, metrics, stop)
    app = create_app(
        store,
        orchestrator,
        version=__version__,
        metrics=metrics,
        metrics_path=settings.metrics.path,
        gate=gate,
        max_body_bytes=settings.server.max_body_bytes,
        credential_keys=Keyring(settings.credentials.key),
        dsl=settings.dsl.policy(),
        scheduler=scheduler,
    )
    for loop in loops:
        loop.start()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    server = _Server(config)
    _handle_signals(server)
    auth = "on" if settings.auth.enabled else "OFF"
    click.echo(
        f"{name} {owner} listening on http://{host}:{port}{note} "
        f"(authentication {auth}, sessions in {settings.sessions.backend})",
        err=True,
    )
    sink_runner = None
    try:
        sink_runner = start_sink_runner(
            settings, store, observer=observer, bus=bus, log=lambda t: click.echo(t, err=True)
        )
        settle()  # start-up is over: its objects stay out of the collector's walks
        server.run()  # returns on SIGTERM / SIGINT after finishing open requests
    finally:
        stop_sink_runner(sink_runner)  # its writes finish first, the loop still running
        stop.set()
        for loop in loops:
            loop.join(timeout=10)
        if tracing is not None:
            tracing.shutdown()  # exports the spans still queued
        sessions.close()
        close_store(store, bus)
        click.echo(f"{name} stopped", err=True)


def _handle_signals(server: Any) -> None:
    def _on_signal(signum: int, frame: FrameType | None) -> None:
        if server.should_exit:
            server.force_exit = True  # a second signal: do not wait for open requests
        server.should_exit = True

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def _loops(
    settings: Settings, orchestrator: Orchestrator, metrics: Any, stop: threading.Event
) -> tuple[Scheduler, list[threading.Thread]]:
    """The scheduler of this server, and the threads of its loops: the orchestrator's and
    (unless --no-scheduler; the API still runs schedules now) the scheduler's."""
    loops = [
        threading.Thread(
            target=orchestrator.serve, args=(stop.is_set,), name="noetl-orchestrator", daemon=True
        )
    ]
    scheduler = Scheduler(
        orchestrator.store,
        orchestrator,
        owner=orchestrator.owner,
        options=SchedulerOptions(
            grace=settings.scheduler.grace_s,
            poll_s=settings.scheduler.poll_s,
            recover_after_s=settings.scheduler.recover_after_s,
        ),
        metrics=metrics,
        events=_nats_triggers(settings, orchestrator, metrics)
        if settings.scheduler.enabled
        else None,
    )
    if settings.scheduler.enabled:
        loops.append(
            threading.Thread(
                target=scheduler.serve, args=(stop.is_set,), name="noetl-scheduler", daemon=True
            )
        )
    loops += _retention(settings, orchestrator.store, metrics, stop)
    loops.append(_partitions(settings, orchestrator.store, stop))
    return scheduler, loops


def _nats_triggers(
    settings: Settings, orchestrator: Orchestrator, metrics: Metrics | None
) -> NatsTriggers:
    """What consumes the subjects of the `nats:` triggers (nothing until one exists)."""
    return NatsTriggers(
        orchestrator,
        owner=orchestrator.owner,
        default_url=settings.triggers.nats_url or settings.bus.url,
        clock=time.time,
        ack_wait_s=settings.triggers.nats_ack_wait_s,
        metrics=metrics,
    )


def _retention(
    settings: Settings, store: Store, metrics: Metrics | None, stop: threading.Event
) -> list[threading.Thread]:
    """The retention job's thread (`retention.enabled`; else none), not started yet."""
    if not settings.retention.enabled:
        return []
    from noetl.runtime.retention import RetentionJob, RetentionPolicy

    job = RetentionJob(
        store,
        RetentionPolicy.of(settings),
        interval_s=settings.retention.interval_s,
        metrics=metrics,
    )
    thread = threading.Thread(target=job.serve, args=(stop,), name="noetl-retention", daemon=True)
    log.info(
        "retention on: executions finished over %s ago are pruned every %g s",
        settings.retention.older_than,
        settings.retention.interval_s,
    )
    return [thread]


def _partitions(settings: Settings, store: Store, stop: threading.Event) -> threading.Thread:
    """The partition job's thread (PostgreSQL's event_log and step_state; a pass does
    nothing on the other stores), not started yet."""
    from noetl.runtime.partitions import PartitionJob

    job = PartitionJob(store, period_days=settings.db.partition_days)
    return threading.Thread(target=job.serve, args=(stop,), name="noetl-partitions", daemon=True)


def _orchestrator(
    settings: Settings,
    store: Store,
    owner: str,
    metrics: Metrics | None,
    tracing: Tracing | None,
) -> tuple[Orchestrator, Observer]:
    """The server's orchestrator over `store`, and the observer it reports to."""
    from noetl.observability import observer_for
    from noetl.observability.trace_context import sampler_of

    pool = settings.server_pool
    observer = observer_for(
        metrics=metrics,
        pool=pool,
        tracing=tracing,
        load_events=store.load_events,
        complexity_warn=settings.complexity.warn,
    )
    orchestrator = Orchestrator(
        store,
        owner=owner,
        pool=pool,
        observer=observer,
        options=settings.engine_options(),
        sampler=sampler_of(settings.tracing),
        # Script files a started playbook names are read here, from playbooks.root.
        scripts=script_reader(settings.roots(data_dir(os.environ)).playbooks),
        dsl=settings.dsl.policy(),
    )
    return orchestrator, observer


def _warn_about_auth(settings: Settings, host: str, tokens: list[Any]) -> None:
    if not settings.auth.enabled:
        log.warning(
            "authentication is off (auth.enabled: false): every request to the API on %s "
            "acts as admin",
            host,
        )
    elif not any(not t.revoked for t in tokens):
        log.warning(
            "no API token exists: every request will be refused (401); create one with "
            "`noetl auth token create --role admin`"
        )
