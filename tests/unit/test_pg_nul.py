"""The NUL escape of the PostgreSQL adapter (`noetl.store._pg_nul`), as pure functions: any
string, keys included, comes back exactly, and nothing it writes holds a NUL escape."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from noetl.store._json import dumps
from noetl.store._pg_nul import MARK, json_in, json_out, jsonb_loads, pg_dumps, text_in, text_out

# Small alphabets make the awkward neighbours (NUL next to MARK, backslashes before "u")
# frequent; `st.text()` adds everything else.
awkward = st.text(alphabet=["\x00", MARK, "0", "\\", "u", "f", "d", '"', "a", "é"], max_size=12)
strings = st.one_of(awkward, st.text(max_size=8))
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), strings),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(strings, inner, max_size=4)
    ),
    max_leaves=12,
)


def as_postgres_returns_it(text: str) -> str:
    """What `jsonb::text` gives back: escapes decoded, non-ASCII characters as they are."""
    return json.dumps(json.loads(text), ensure_ascii=False)


@settings(max_examples=500, deadline=None)
@given(strings)
def test_text_round_trips_and_holds_no_nul(value: str) -> None:
    stored = text_in(value)
    assert "\x00" not in stored
    assert text_out(stored) == value


@settings(max_examples=500, deadline=None)
@given(values)
def test_json_round_trips_and_holds_no_nul_escape(value: Any) -> None:
    written = pg_dumps(value)
    assert "\x00" not in json.dumps(json.loads(written), ensure_ascii=False)
    returned = as_postgres_returns_it(written)
    assert json.loads(json_out(returned)) == value
    assert jsonb_loads(returned.encode()) == value
    assert jsonb_loads(returned) == value


def test_values_without_nul_or_mark_are_untouched() -> None:
    text = dumps({"a": "\\u0000 is only text here", "é": [1, 2]})
    assert json_in(text) is text
    assert json_out(text) is text
    assert text_in("plain") == "plain"


def test_the_escape_of_nul_is_mark_and_zero() -> None:
    assert text_in("a\x00b" + MARK) == "a" + MARK + "0b" + MARK + MARK
    assert json.loads(pg_dumps({"k\x00": "\x00"})) == {"k" + MARK + "0": MARK + "0"}
