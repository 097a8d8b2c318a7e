"""Database values as JSON data (noetl.tools.jsonsafe)."""

from __future__ import annotations

import ipaddress
import json
import math
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest

from noetl.tools.jsonsafe import command_result, query_result, to_json_safe, unique_columns


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (True, True),
        (7, 7),
        (2**80, 2**80),
        ("text", "text"),
        (1.5, 1.5),
        (math.nan, None),
        (math.inf, None),
        (-math.inf, None),
        (Decimal("12"), 12),
        (Decimal("12.000"), 12),
        (Decimal("1E+3"), 1000),
        (Decimal("-0"), 0),
        (Decimal("12345678901234567890123"), 12345678901234567890123),
        (Decimal("12.25"), 12.25),
        (Decimal("NaN"), None),
        (Decimal("Infinity"), None),
        (Decimal("-Infinity"), None),
        (datetime(2024, 5, 6, 7, 8, 9, 123456), "2024-05-06T07:08:09.123456"),
        (datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC), "2024-05-06T07:08:09+00:00"),
        (
            datetime(2024, 5, 6, 7, 8, tzinfo=timezone(timedelta(hours=-5))),
            "2024-05-06T07:08:00-05:00",
        ),
        (date(2024, 2, 29), "2024-02-29"),
        (time(23, 59, 1), "23:59:01"),
        (timedelta(days=1, seconds=1, microseconds=500000), 86401.5),
        (timedelta(seconds=-90), -90.0),
        (UUID("12345678-1234-5678-1234-567812345678"), "12345678-1234-5678-1234-567812345678"),
        (b"\x00\xffhi", "AP9oaQ=="),
        (bytearray(b"abc"), "YWJj"),
        (memoryview(b"abc"), "YWJj"),
        ((1, "a"), [1, "a"]),
        ({3, 1, 2}, [1, 2, 3]),
        (frozenset({"b", "a"}), ["a", "b"]),
        (ipaddress.ip_address("10.0.0.1"), "10.0.0.1"),
    ],
)
def test_a_value_becomes_json_data(value: Any, expected: Any) -> None:
    safe = to_json_safe(value)
    assert safe == expected
    assert type(safe) is type(expected)


def test_containers_are_converted_all_the_way_down() -> None:
    value = {
        "when": [datetime(2024, 1, 1), (date(2024, 1, 2), {"n": Decimal("0.5")})],
        "ids": {UUID(int=1)},
        "nested": {"deeper": {"blob": b"x", "bad": math.nan}},
    }
    safe = to_json_safe(value)
    assert safe == {
        "when": ["2024-01-01T00:00:00", ["2024-01-02", {"n": 0.5}]],
        "ids": ["00000000-0000-0000-0000-000000000001"],
        "nested": {"deeper": {"blob": "eA==", "bad": None}},
    }
    # strict JSON: no NaN, no Infinity, nothing json cannot encode
    json.dumps(safe, allow_nan=False)


def test_keys_become_the_strings_json_would_write() -> None:
    safe = to_json_safe({2: "a", True: "b", None: "c", UUID(int=2): "d", (1, 2): "e"})
    assert safe == {
        "2": "a",
        "true": "b",
        "null": "c",
        "00000000-0000-0000-0000-000000000002": "d",
        "[1, 2]": "e",
    }


def test_a_set_of_mixed_types_has_a_stable_order() -> None:
    # sorted by JSON text: '"1"' < '1' < 'null'
    assert to_json_safe({1, "1", None}) == to_json_safe({None, "1", 1}) == ["1", 1, None]


def test_repeated_column_names_get_a_suffix() -> None:
    assert unique_columns(["id", "name", "id", "id", "id_2"]) == [
        "id",
        "name",
        "id_2",
        "id_3",
        "id_2_2",
    ]


def test_query_and_command_results_have_one_shape() -> None:
    result = query_result(["id", "id", "at"], [(1, 2, date(2024, 1, 1)), (3, 4, None)])
    assert result == {
        "rows": [
            {"id": 1, "id_2": 2, "at": "2024-01-01"},
            {"id": 3, "id_2": 4, "at": None},
        ],
        "rowcount": 2,
        "columns": ["id", "id_2", "at"],
    }
    assert query_result(["a"], []) == {"rows": [], "rowcount": 0, "columns": ["a"]}
    assert command_result(5) == {"rows": [], "rowcount": 5, "columns": []}
    assert command_result(-1) == {"rows": [], "rowcount": 0, "columns": []}
