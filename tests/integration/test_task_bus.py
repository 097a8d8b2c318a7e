"""The task bus against a real (private) NATS JetStream server: announcements wake a
waiter once each, a stopped server makes `wait` answer None at once (the worker then waits
on the database), and the bus comes back by itself when the server does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl.bus import open_bus, subject_of
from noetl.bus.nats_bus import NatsTaskBus
from tests.helpers.nats_server import PrivateNats

pytestmark = [pytest.mark.services]


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[PrivateNats]:
    server = PrivateNats(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bus(nats_server: PrivateNats) -> Iterator[NatsTaskBus]:
    opened = open_bus(nats_server.url)
    assert isinstance(opened, NatsTaskBus)
    try:
        assert opened.wait_connected(10)
        yield opened
    finally:
        opened.close()


def test_subjects_name_the_pool() -> None:
    assert subject_of("default") == "noetl.tasks.default"
    assert subject_of("a.b *>") == "noetl.tasks.a_b___"


def test_each_announcement_wakes_one_wait(bus: NatsTaskBus) -> None:
    assert bus.wait("p1", 0.2) is False  # nothing announced: the timeout
    bus.announce(["p1", "p1", "p2"])
    assert bus.wait("p1", 5) is True
    assert bus.wait("p1", 5) is True
    assert bus.wait("p1", 0.3) is False  # both consumed
    assert bus.wait("p2", 5) is True


def test_a_stopped_server_falls_back_and_the_bus_reconnects(
    nats_server: PrivateNats, bus: NatsTaskBus
) -> None:
    nats_server.stop()
    deadline = time.monotonic() + 10
    while bus.connected and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    assert bus.wait("p1", 5) is None  # at once: the caller waits on the database
    assert time.monotonic() - started < 1
    bus.announce(["p1"])  # dropped, never raises
    nats_server.start()
    assert bus.wait_connected(15)
    bus.announce(["p1"])
    assert bus.wait("p1", 5) is True  # the stream was declared again


def test_a_declaration_refused_after_a_reconnect_is_tried_again(
    nats_server: PrivateNats, bus: NatsTaskBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Right after a restart, JetStream may not answer yet: the stream is declared again
    # until it holds, or the bus would stay off (workers on the database) for good.
    declare = bus._declare
    refused = []

    async def refuse_once() -> None:
        if not refused:
            refused.append(True)
            raise TimeoutError("jetstream not ready")
        await declare()

    monkeypatch.setattr(bus, "_declare", refuse_once)
    nats_server.stop()
    deadline = time.monotonic() + 10
    while bus.connected and time.monotonic() < deadline:
        time.sleep(0.05)
    nats_server.start()
    assert bus.wait_connected(15)
    assert refused
    bus.announce(["p1"])
    assert bus.wait("p1", 5) is True


def test_an_unreachable_server_never_blocks(tmp_path: Path) -> None:
    away = open_bus(PrivateNats(tmp_path).url)  # nothing listens there
    try:
        started = time.monotonic()
        assert away.wait("p1", 2) is None
        away.announce(["p1"])
        assert time.monotonic() - started < 1
    finally:
        away.close()
