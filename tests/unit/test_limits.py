"""Limits on data from outside (noetl.dsl.limits): depth, NUL characters, size."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from noetl.dsl.limits import MAX_DEPTH, check_data, strip_nul
from noetl.dsl.source import MAX_DEPTH as PLAYBOOK_DEPTH
from noetl.redaction import redact


def nested(levels: int, leaf: Any = "leaf") -> Any:
    value = leaf
    for index in range(levels):
        value = {"a": value} if index % 2 else [value]
    return value


def test_the_limit_is_the_playbooks() -> None:
    assert MAX_DEPTH == PLAYBOOK_DEPTH == 64


@pytest.mark.parametrize("levels", [0, 1, 63, 64])
def test_data_up_to_the_limit_passes(levels: int) -> None:
    assert check_data(nested(levels)) is None


@pytest.mark.parametrize("levels", [65, 350, 900, 50_000])
def test_data_past_the_limit_is_named_without_recursing(levels: int) -> None:
    problem = check_data({"x": nested(levels)}, root="workload")
    assert problem is not None and problem.kind == "depth"
    assert problem.path.startswith("workload.x")
    assert "more than 64 levels deep" in problem.message


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": "x\x00y"}, "workload.a"),
        ({"users": [{"name": "ok"}, {"name": "bad\x00"}]}, "workload.users[1].name"),
        ({"k\x00": 1}, "workload['k\\x00']"),
        ({"t": ("a", "\x00")}, "workload.t[1]"),
        ({"odd key": {"x": "\x00"}}, "workload['odd key'].x"),
    ],
)
def test_a_nul_character_is_found_and_its_place_named(value: Any, path: str) -> None:
    problem = check_data(value, root="workload")
    assert problem is not None and problem.kind == "nul"
    assert problem.path == path
    assert "NUL" in str(problem)


def test_size_is_about_the_json_size() -> None:
    value = {"rows": [{"id": i, "name": f"n{i}"} for i in range(1000)]}
    size = len(json.dumps(value))
    assert check_data(value, max_bytes=size * 2) is None
    problem = check_data(value, max_bytes=size // 2)
    assert problem is not None and problem.kind == "size"
    assert str(size // 2) in problem.message


def test_non_string_keys_and_scalars_are_fine() -> None:
    assert check_data({1: [None, True, 2.5, {"x": 3}]}) is None


def test_strip_nul_keeps_text_readable() -> None:
    assert strip_nul("a\x00b") == "a\ufffdb"
    text = "clean"
    assert strip_nul(text) is text


def test_redaction_shows_data_past_the_limit_as_a_marker() -> None:
    shown = redact({"deep": nested(5000), "password": "pw"})
    assert shown["password"] == "***"
    json.dumps(shown)  # serializable: never too deep
    assert "nested deeper than 64 levels" in json.dumps(shown)


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_a_number_json_cannot_hold_is_named(number: float) -> None:
    problem = check_data({"rows": [{"v": 1.5}, {"v": number}]}, root="result")
    assert problem is not None and problem.kind == "number"
    assert problem.path == "result.rows[1].v"
    assert check_data({"v": 1.5, "n": 10**30}) is None
