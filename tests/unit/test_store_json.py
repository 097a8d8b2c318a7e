"""The stores' JSON text: what `json.dumps` writes, compactly, for any JSON value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from noetl.store._json import dumps, loads

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(values)
def test_dumps_writes_what_json_dumps_writes(value: Any) -> None:
    assert dumps(value) == json.dumps(value, separators=(",", ":"))


def test_keys_and_values_json_cannot_hold_are_refused_or_turned_as_json_turns_them() -> None:
    assert dumps({1: "a", None: 2, 1.5: True}) == '{"1":"a","null":2,"1.5":true}'
    assert loads(dumps({"é\x00": [float("inf")]})) == {"é\x00": [float("inf")]}
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps({"a": object()})
    with pytest.raises(TypeError):
        dumps({(1, 2): 1})


def test_a_value_that_holds_itself_is_refused() -> None:
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(RecursionError):
        dumps(looped)
