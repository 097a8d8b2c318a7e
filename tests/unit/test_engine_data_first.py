"""Templates read data before Python attributes: `a.b` on a mapping is its key `b` when it
has one (`workload.items` is the workload's `items`, not `dict.items`), in every template
the engine renders: gates, bind, args, sink specs, pick, loop collections, edges, case."""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import Harness

from noetl.core import ExecutionStatus, StepStatus
from noetl.dsl.render import Renderer
from noetl.engine.state import StepNamespace, StepRun
from noetl.errors import TemplateError

WORKLOAD: dict[str, Any] = {
    "items": [{"values": 1, "keys": "a"}, {"values": 2, "keys": "b"}],
    "keys": {"update": 1},
    "values": {"keys": "K"},
    "get": "g",
    "pop": "P",
    "copy": [1],
    "update": "u",
}

PLAYBOOK = """
- step: start
  when: "{{ workload.get == 'g' and workload.keys.update == 1 }}"
  bind: {n: "{{ workload.items | length }}", cp: "{{ workload.copy }}"}
  tool:
    kind: noop
    args:
      items: "{{ workload.items }}"
      values: "{{ workload.values }}"
      pop: "{{ workload.pop }}"
      update: "{{ workload.update }}"
      n: "{{ n }}"
      cp: "{{ cp }}"
  result:
    pick: "{{ {'items': this.items, 'keys': this.values.keys, 'get': this.pop} }}"
    as: res
    sink:
      - file: {path: "/tmp/out-{{ workload.values.keys }}-{{ workload.items | length }}.json"}
  next:
    - {step: each, when: "{{ res.items | length == 2 and res.get == 'P' }}"}
- step: each
  loop: {collection: "{{ res.items }}", element: it}
  tool: {kind: noop, args: {v: "{{ it.values }}", k: "{{ it.keys }}"}}
  result: {as: looped}
  next: decide
- step: decide
  case:
    - when: "{{ res.keys == 'K' and looped[1].v == 2 and looped[0].k == 'a' }}"
      then: {set: {chosen: "{{ res.get }}", copied: "{{ workload.copy }}"}}
"""


def test_mapping_keys_named_like_dict_methods_are_data_in_every_template() -> None:
    h = Harness.of(PLAYBOOK, workload=WORKLOAD)
    task = h.task("start")
    assert task.args == {
        "items": WORKLOAD["items"],
        "values": {"keys": "K"},
        "pop": "P",
        "update": "u",
        "n": 2,
        "cp": [1],
    }
    assert task.sinks[0]["spec"]["path"] == "/tmp/out-K-2.json"
    h.run()
    assert h.status is ExecutionStatus.OK
    assert h.state.context["res"] == {"items": WORKLOAD["items"], "keys": "K", "get": "P"}
    assert h.state.context["looped"] == [{"v": 1, "k": "a"}, {"v": 2, "k": "b"}]
    assert h.state.context["chosen"] == "P"
    assert h.state.context["copied"] == [1]
    assert {name: s["status"] for name, s in h.steps().items()} == {
        "start": "ok",
        "each": "ok",
        "decide": "ok",
    }


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ d.items }}", [1, 2]),
        ("{{ d.keys }}", "k"),
        ("{{ d.values | sum }}", 3),
        ("{{ d.get }}", "g"),
        ("{{ d.update }}", "u"),
        ("{{ d.pop }}", "p"),
        ("{{ d.copy }}", "c"),
        ("{{ d['items'] }}", [1, 2]),
        ("{{ step.items.status.ok }}", True),  # a step named `items`
        ("{% for x in d.items %}{{ x }}{% endfor %}", "12"),
        ("{{ d.items | length }}", 2),
        # No such key: the attribute, as before.
        ("{{ e.get('a') }}", 1),
        ("{{ e.items() | list }}", [["a", 1]]),
        ("{{ e.keys() | list }}", ["a"]),
        # `attr` always reaches the attribute.
        ("{{ (d | attr('keys'))() | list | length }}", 7),
    ],
)
def test_a_key_wins_over_an_attribute(template: str, expected: Any) -> None:
    context = {
        "d": {
            "items": [1, 2],
            "keys": "k",
            "values": [1, 2],
            "get": "g",
            "update": "u",
            "pop": "p",
            "copy": "c",
        },
        "e": {"a": 1},
        "step": StepNamespace({"items": StepRun(status=StepStatus.OK)}),
    }
    assert Renderer().render(template, context) == expected


def test_an_attribute_that_is_not_data_is_still_an_error() -> None:
    with pytest.raises(TemplateError, match="builtin_function_or_method, not data"):
        Renderer().render("{{ e.items }}", {"e": {"a": 1}})
