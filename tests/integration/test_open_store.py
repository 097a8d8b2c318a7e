"""open_store: the one place a store URL turns into an adapter."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl.errors import ConfigError
from noetl.store import MemoryStore, SqliteStore, StoreUnavailableError, open_store


def test_memory_url() -> None:
    store = open_store("memory://")
    assert type(store) is MemoryStore
    store.close()


# tmp_path is absolute, so "sqlite://" + path is the documented sqlite:///abs/path.db and
# "sqlite:///" + path is SQLAlchemy's sqlite:////abs/path.db.
@pytest.mark.parametrize("prefix", ["sqlite://", "sqlite:///", ""])
def test_sqlite_urls_and_plain_paths(tmp_path: Path, prefix: str) -> None:
    path = tmp_path / "sub" / "noetl.db"

    store = open_store(prefix + str(path))
    try:
        assert type(store) is SqliteStore
        assert store.path == path
        assert path.is_file()
    finally:
        store.close()


def test_relative_sqlite_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    store = open_store("sqlite://rel/noetl.db")
    try:
        assert isinstance(store, SqliteStore)
        assert store.path == tmp_path / "rel" / "noetl.db"
    finally:
        store.close()


def test_unreachable_postgres_names_the_server_but_not_the_password() -> None:
    for url in (
        "postgresql://user:s3cret@127.0.0.1:1/noetl",
        "postgres://user:s3cret@127.0.0.1:1/noetl",
    ):
        with pytest.raises(StoreUnavailableError) as caught:
            open_store(url)
        message = str(caught.value)
        assert "s3cret" not in message
        assert "127.0.0.1" in message


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u:pw@h/db", "unknown store URL scheme 'mysql'"),
        ("", "the store URL is empty"),
        ("sqlite://", "names no file"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        open_store(url)
    assert "expected memory://, sqlite:///path/to/noetl.db or a file path" in str(caught.value)
