"""The named queries of the SQL stores: both dialects name the same queries, each once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from noetl.store import managers
from noetl.store.queries import QUERIES, parse, read
from noetl.store.records import PRUNED_TABLES


def _used_by_managers() -> set[str]:
    """The query names the managers (written once for both dialects) ask for: named as
    they are, or one per table a prune deletes from (`f"prune_{table}"`)."""
    call = re.compile(r"\b(?:execute|fetch_one|fetch_all)\(\s*\"(\w+)\"")
    per_table = re.compile(r"\b(?:execute|fetch_one|fetch_all)\(\s*f\"(\w+)\{table\}\"")
    folder = Path(managers.__file__).parent
    names = set()
    for path in folder.glob("*.py"):
        text = path.read_text()
        names.update(call.findall(text))
        names.update(
            f"{prefix}{table}" for prefix in per_table.findall(text) for table in PRUNED_TABLES
        )
    return names


def test_both_dialects_define_the_managers_queries_and_only_those() -> None:
    assert set(read("postgres")) == set(read("sqlite")) == _used_by_managers()
    assert all(text.strip() for dialect in QUERIES.values() for text in dialect.values())


def test_a_query_runs_to_the_next_name_and_leaves_the_next_ones_comment() -> None:
    text = "-- name: one\nSELECT 1\n\n-- why two is so\n-- name: two\nSELECT 2\n"
    assert parse(text) == {"one": "SELECT 1", "two": "SELECT 2"}


def test_a_name_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse("-- name: one\nSELECT 1\n-- name: one\nSELECT 2\n")


def test_placeholders_are_the_dialects_own() -> None:
    assert not any("%(" in text for text in QUERIES["sqlite"].values())
    assert not any(" :" in text for text in QUERIES["postgres"].values())
