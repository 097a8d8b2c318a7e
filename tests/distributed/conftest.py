"""The `cluster` fixture of the distributed tests: servers and workers as real processes
on a fresh PostgreSQL database, all stopped when the test ends. A test module that needs
a cluster set up otherwise (extra environment) defines its own `cluster`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed.cluster import Cluster


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path) -> Iterator[Cluster]:
    cl = Cluster(db=pg_database, workdir=tmp_path)
    try:
        yield cl
    finally:
        cl.stop_all()
