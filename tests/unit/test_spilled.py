"""A spilled result as templates read it (noetl.dsl.spilled): the envelope's keys as they
are, any other field or element loaded once from the whole result; the value as a whole
stays the envelope."""

from __future__ import annotations

import json
from typing import Any

import pytest

from noetl.dsl.render import Renderer
from noetl.dsl.spilled import SpilledResult, is_spilled, lazy

ENVELOPE = {"count": 3, "_ref": "noetl://results/ab", "_store": "db", "_bytes": 9, "_spilled": True}
WHOLE = {"count": 3, "rows": [{"id": 0}, {"id": 1}, {"id": 2}], "meta": {"page": 7}}


class Reads:
    def __init__(self, whole: Any) -> None:
        self.whole = whole
        self.refs: list[str] = []

    def __call__(self, ref: str) -> Any:
        self.refs.append(ref)
        if self.whole is None:
            raise KeyError(ref)
        return self.whole


def render(template: str, value: Any) -> Any:
    return Renderer().render(template, {"big": value})


def test_fields_left_out_load_once_from_the_whole_result() -> None:
    reads = Reads(WHOLE)
    big = lazy(dict(ENVELOPE), reads)
    assert isinstance(big, SpilledResult)
    assert render("{{ big.count }}", big) == 3
    assert reads.refs == []  # the envelope's own keys need no read
    assert render("{{ big.rows | length }}", big) == 3
    assert render("{{ big.rows[2].id }}", big) == 2
    assert render("{{ big['meta']['page'] }}", big) == 7
    assert render("{{ big.meta.page is defined and big.nothing is not defined }}", big) is True
    assert reads.refs == ["noetl://results/ab"]  # loaded once


def test_the_value_as_a_whole_stays_the_envelope() -> None:
    big = lazy(dict(ENVELOPE), Reads(WHOLE))
    assert json.loads(json.dumps(big)) == ENVELOPE
    assert render("{{ big | list }}", big) == list(ENVELOPE)
    assert dict(big) == ENVELOPE


def test_a_list_result_reads_by_index() -> None:
    envelope = {**ENVELOPE, "_count": 3}
    big = lazy(envelope, Reads(["a", "b", "c"]))
    assert render("{{ big[1] }}", big) == "b"
    assert render("{{ big._count }}", big) == 3


def test_a_result_that_cannot_be_read_leaves_the_field_undefined() -> None:
    big = lazy(dict(ENVELOPE), Reads(None))
    assert render("{{ big.rows is defined }}", big) is False
    assert render("{{ big.count }}", big) == 3


@pytest.mark.parametrize(
    "value",
    [
        {"_ref": "noetl://results/ab", "_spilled": "yes"},
        {"_ref": 5, "_spilled": True},
        {"rows": [1]},
        [1, 2],
        "text",
        None,
    ],
)
def test_only_an_envelope_is_wrapped(value: Any) -> None:
    assert not is_spilled(value)
    assert lazy(value, Reads(WHOLE)) is value


def test_without_a_reader_an_envelope_is_itself() -> None:
    envelope = dict(ENVELOPE)
    assert lazy(envelope, None) is envelope
