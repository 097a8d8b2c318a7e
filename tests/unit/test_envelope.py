"""Upstream's result envelope forms: `.data`, `.result`, and payload fields read through
the envelope (noetl.dsl.envelope), as templates and policy rules see them."""

from __future__ import annotations

import pytest

from noetl.core import Outcome
from noetl.dsl.envelope import StepResult
from noetl.dsl.render import Renderer
from noetl.errors import TemplateError
from noetl.worker.policy_rules import output_view

RENDER = Renderer()
HTTP = {"status_code": 200, "headers": {}, "data": {"meta": {"page": 1, "pages": 3}, "n": [1]}}


def test_a_payload_field_is_read_through_the_envelope_and_keys_win() -> None:
    out = StepResult.of(HTTP)
    assert RENDER.render("{{ r.meta.page }}/{{ r.meta.pages }}", {"r": out}) == "1/3"
    assert RENDER.render("{{ r.data.n }}", {"r": out}) == [1]  # the key `data` wins
    assert RENDER.render("{{ r.status_code }}", {"r": out}) == 200
    plain = StepResult.of({"rows": [1, 2]})
    assert RENDER.render("{{ r.data.rows | length }}", {"r": plain}) == 2
    assert RENDER.render("{{ r.result.rows[1] }}", {"r": plain}) == 2


def test_a_missing_name_is_still_undefined_and_values_come_out_as_plain_data() -> None:
    out = StepResult.of(HTTP)
    with pytest.raises(TemplateError) as caught:
        RENDER.render("{{ r.nothing }}", {"r": out})
    assert str(caught.value) == "undefined value: 'dict object' has no attribute 'nothing'"
    assert RENDER.render("{{ r.nothing | default(7) }}", {"r": out}) == 7
    whole = RENDER.render("{{ r }}", {"r": out})
    assert type(whole) is dict and whole == HTTP
    assert StepResult.of([1]) == [1] and not isinstance(StepResult.of([1]), StepResult)


def test_output_of_an_http_task_reads_the_body_through_its_data() -> None:
    outcome = Outcome(task_id="t", ok=True, this=HTTP)
    view = output_view("http", outcome, attempt=1)
    text = "{{ output.data.meta.page < output.data.meta.pages and output.http.status == 200 }}"
    assert RENDER.render(text, {"output": view}) is True
    assert RENDER.render("{{ output.data.data.n }}", {"output": view}) == [1]
