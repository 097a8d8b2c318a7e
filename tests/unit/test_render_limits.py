"""The renderer's limits: a template that would hold a process fails fast with a clear
TemplateError and bounded memory, and the same template always stops at the same step."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from noetl.dsl.render import Renderer
from noetl.dsl.template_limits import Budget, measure
from noetl.errors import TemplateError

STEPS = "template went over the limit of 1000000 steps"
SIZE = "template builds a value over the limit of 1000000 characters"
SHARED = SIZE + " (counting repeated references)"
INT = "template builds an integer over the limit of 4300 digits"
OUTPUT = "template output is over the limit of 1000000 characters"
MB = 1024 * 1024

# Each of these held a process for minutes or allocated gigabytes.
RUNAWAYS = [
    ("{{ (10 ** 10000) ** 10000 }}", INT),
    ("{{ 2 ** 100000 }}", INT),
    (
        "{% set ns = namespace(n=3) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}"
        "{% endfor %}",
        INT,
    ),
    ("{{ 5 | round(-1000000000) }}", INT),
    ("{{ 5.5 | round(1000000000, 'ceil') }}", INT),
    ("{{ 'x'.center(2000000000) }}", SIZE),
    ("{{ 'x'.ljust(2000000000) }}", SIZE),
    ("{{ 'x'.rjust(2000000000, '-') }}", SIZE),
    ("{{ '1'.zfill(2000000000) }}", SIZE),
    ("{{ 'a\tb'.expandtabs(2000000000) }}", SIZE),
    ("{{ (1).to_bytes(2000000000, 'big') }}", SIZE),
    ("{{ 'x' * 10**9 }}", SIZE),
    ("{{ 10**9 * 'x' }}", SIZE),
    ("{{ ['x'] * 10**9 }}", SIZE),
    ("{{ ('x' * 1000).replace('x', 'y' * 1000).replace('y', 'z' * 1000) }}", SIZE),
    ("{{ ('x' * 1000) | replace('x', 'y' * 1000) | replace('y', 'z' * 1000) }}", SIZE),
    ("{{ ('x' * 1000000).replace('', '-') }}", SIZE),
    ("{{ ('-' * 1000).join(range(100000) | map('string')) }}", SIZE),
    ("{{ range(100000) | join('-' * 1000) }}", SIZE),
    ("{{ '{:>2000000000}'.format(1) }}", SIZE),
    ("{{ '{:{}}'.format(1, 2000000000) }}", SIZE),
    ("{{ '{:.2000000000f}'.format(1.0) }}", SIZE),
    ("{{ '{0}{0}{0}{0}'.format('x' * 400000) }}", SIZE),
    ("{{ '%2000000000s' % 1 }}", SIZE),
    ("{{ '%.2000000000f' % 1.0 }}", SIZE),
    ("{{ '%*s' % (2000000000, 'x') }}", SIZE),
    ("{{ '%2000000000s' | format(1) }}", SIZE),
    ("{{ 'x' | center(2000000000) }}", SIZE),
    ("{{ 'a\nb' | indent(2000000000) }}", SIZE),
    ("{{ 'a b c' | wordwrap(1, wrapstring='-' * 1000000) }}", SIZE),
    ("{{ 'a.io b.io' | urlize(target='x' * 1000000) }}", SIZE),
    ("{{ [1] | batch(1000, 'x' * 10000) | list }}", SIZE),
    ("{{ [1] | batch(2000000000, 'x') | list }}", "over the limit of 100000"),
    ("{{ [1] | slice(2000000000) | list }}", "over the limit of 100000"),
    ("{{ {'a': [1, 2]} | tojson(indent=2000000000) }}", SIZE),
    (
        "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}",
        SIZE,
    ),
    (
        "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}"
        "{% endfor %}",
        SIZE,
    ),
    (
        "{% set ns = namespace(s=['x']) %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}"
        "{% endfor %}",
        SIZE,
    ),
    (
        "{% set s = 'x' * 100000 %}{% set a = [s, s] %}{% set b = [a, a] %}{% set c = [b, b] %}"
        "{% set d = [c, c] %}{{ d | length }}",
        SHARED,
    ),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", STEPS),
    ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", OUTPUT),
    (
        "{% set l = range(1000) | list %}{% for a in l %}{% for b in l %}{% for c in l %}"
        "{% endfor %}{% endfor %}{% endfor %}",
        STEPS,
    ),
    (
        "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
        "{{ f(60) }}",
        STEPS,
    ),
    ("{% set s = 'ab' * 400000 %}{% for i in range(100000) %}{{ 'ba' in s }}{% endfor %}", STEPS),
    ("{% set s = 'x' * 900000 %}{% for i in range(100000) %}{{ s.count('y') }}{% endfor %}", STEPS),
    ("{{ ('<>' * 400000) | striptags }}", STEPS),
    ("{{ range(20000) | map('string') | map('list') | list | sum(start=[]) }}", STEPS),
    (
        "{% set s = 'x' * 200000 %}{% set x %}{% for i in range(10) %}{{ s }}{% endfor %}"
        "{% endset %}",
        OUTPUT,
    ),
]


def _render(template: str, context: dict[str, Any] | None = None) -> Any:
    return Renderer().render(template, context or {})


@pytest.mark.parametrize(("template", "message"), [r for r in RUNAWAYS if r[1] != STEPS])
def test_a_runaway_template_fails_fast_with_bounded_memory(template: str, message: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError) as caught:
            _render(template)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert message in str(caught.value)
    assert peak < 48 * MB, f"peak {peak / MB:.0f} MB"


@pytest.mark.parametrize("template", [r[0] for r in RUNAWAYS if r[1] == STEPS])
def test_a_runaway_loop_stops_at_the_step_limit(template: str) -> None:
    with pytest.raises(TemplateError) as caught:
        _render(template)
    assert str(caught.value) == STEPS + " (operations, loop iterations and output count)"


REPEATED = {
    "s": "x" * 100_000,
    "rows": [{} for _ in range(20)],  # none has `x`: `default` repeats `s` twenty times
}


@pytest.mark.parametrize(
    "template",
    [
        "{{ rows | map(attribute='x', default=s) | list | tojson }}",
        "{{ rows | map(attribute='x', default=s) | list | string }}",
        "{{ rows | map(attribute='x', default=s) | list | join(',') }}",
        "{{ rows | map(attribute='x', default=s) | list | pprint }}",
        "text {{ rows | map(attribute='x', default=s) | list }}",
        "{{ rows | map(attribute='x', default=s) | list }}",
        "{{ rows | map(attribute='x', default=s) }}",
        "{{ (rows | map(attribute='x', default=s) | list) ~ '' }}",
        "{{ '%s' % (rows | map(attribute='x', default=s) | list) }}",
        "{{ '{}'.format(rows | map(attribute='x', default=s) | list) }}",
        "{{ 'x' in [rows | map(attribute='x', default=s) | list] }}",
    ],
)
def test_a_value_repeating_a_reference_is_as_big_as_its_text(template: str) -> None:
    with pytest.raises(TemplateError, match="over the limit of 1000000 characters"):
        _render(template, REPEATED)


def test_measure_counts_every_repeated_reference() -> None:
    text = "x" * 1000
    size = measure([text] * 10)
    assert size.chars == 10 * 1002 + 2 + 10
    assert size.shared
    flat = measure([f"{i:04}" * 250 for i in range(10)])
    assert flat.chars == size.chars
    assert not flat.shared
    inner = ["a", 1]
    nested = measure([inner, inner])
    assert nested.shared
    assert nested.chars == 2 * measure(inner).chars + 4


def test_big_data_passed_through_is_not_refused() -> None:
    # A workload list of any size may be read and returned as it is: it repeats nothing.
    rows = [{"id": i, "name": f"user {i}" * 4} for i in range(40_000)]
    assert measure(rows).chars > 1_000_000
    assert _render("{{ workload.rows }}", {"workload": {"rows": rows}}) == rows
    assert _render("{{ workload.rows | length }}", {"workload": {"rows": rows}}) == 40_000


def test_values_under_the_limits_render() -> None:
    context = {"s": "x" * 900_000}
    assert _render("{{ ('x' * 999999) | length }}") == 999_999
    assert _render("{{ s.center(1000000) | length }}", context) == 1_000_000
    assert _render("{{ '{:>10}'.format(1) }}") == "         1"
    assert _render("{{ '%5s|%-3d|%.2f' % ('a', 1, 2.5) }}") == "    a|1  |2.50"
    assert _render("{{ 10 ** 4000 > 0 }}") is True
    assert _render("{{ [[1], [2]] | sum(start=[]) }}") == [1, 2]
    assert _render("{{ 'a<b>c</b>' | striptags }}") == "ac"
    assert _render("{{ [1, 2, 3] | batch(2, 0) | list }}") == [[1, 2], [3, 0]]


def test_the_same_template_always_stops_at_the_same_step() -> None:
    """Steps are counted, not timed: a template that needs N steps renders with a budget of
    N and fails with N - 1, every time, on any machine, however loaded."""
    template = (
        "{% for row in rows %}{{ row.name | upper }}:{{ row['n'] * 2 }};"
        "{% if row.n is even %}{{ [row.n, row.name] | tojson }}{% endif %}{% endfor %}"
    )
    context = {"rows": [{"name": f"r{i}", "n": i} for i in range(50)]}
    expected = Renderer().render(template, context)

    def renders(steps: int) -> bool:
        try:
            assert Renderer(max_steps=steps).render(template, context) == expected
        except TemplateError as exc:
            assert "over the limit of" in str(exc)
            return False
        return True

    low, high = 1, 100_000
    while low < high:  # the least budget it renders with
        middle = (low + high) // 2
        low, high = (low, middle) if renders(middle) else (middle + 1, high)
    needed = low
    assert needed > 200  # loop iterations, reads, filters, operators and output all count
    for _ in range(5):
        assert renders(needed)
        assert not renders(needed - 1)


def test_the_budget_counts_steps() -> None:
    budget = Budget(max_steps=3, max_output=10)
    budget.tick(3)
    with pytest.raises(TemplateError, match="over the limit of 3 steps"):
        budget.tick()
    with pytest.raises(TemplateError, match="over the limit of 10 characters"):
        Budget(max_output=10).built(11)


def test_random_and_lorem_ipsum_are_not_available() -> None:
    with pytest.raises(TemplateError, match="No filter named 'random'"):
        _render("{{ [1, 2] | random }}")
    with pytest.raises(TemplateError, match="'lipsum' is undefined"):
        _render("{{ lipsum(1000000) }}")


def test_an_error_names_the_field_and_is_short() -> None:
    renderer = Renderer()
    with pytest.raises(TemplateError) as caught:
        renderer.render({"a": [1, {"b": "{{ 'x' * 10**9 }}"}]}, {}, field="args")
    assert str(caught.value) == f"args.a[1].b: {SIZE}"
    with pytest.raises(TemplateError) as caught:
        renderer.render("{{ d[k] }}", {"d": {}, "k": "k" * 100_000})
    assert len(str(caught.value)) < 600


def test_templates_keep_working() -> None:
    context = {
        "rows": [{"name": "a", "n": 2, "kids": [{"name": "c", "n": 1, "kids": []}]}],
        "m": {"b": 2, "a": 1},
    }
    cases = {
        "{% macro m(x, y=[1, 2]) %}[{{ x }}{{ y | length }}]{% endmacro %}{{ m(1) }}": "[12]",
        "{% set s %}n={{ m.a }}{% endset %}{{ s | upper }}": "N=1",
        "{% for r in rows recursive %}{{ r.name }}({{ loop(r.kids) }}){% endfor %}": "a(c())",
        "{% for k, v in m | dictsort %}{{ k }}{{ v }}{% endfor %}": "a1b2",
        "{% for i in range(3) if i %}{{ loop.index }}/{{ loop.length }} {% endfor %}": "1/2 2/2 ",
        "{% filter upper %}abc{% endfilter %}": "ABC",
        "{{ rows | map(attribute='name') | join(',') }}": "a",
        "{{ 'x' ~ 1 ~ none }}": "x1None",
        "{{ '%s-%03d' % ('a', 7) }}": "a-007",
        "{{ [3, 1, 2] | sort | first }}": 1,
        "{{ (1, 2) }}": [1, 2],
        "{{ m.items() | list }}": [["b", 2], ["a", 1]],
        "{{ 3 in [1, 2, 3] and 'a' in 'abc' and 1 < 2 < 3 }}": True,
    }
    for template, expected in cases.items():
        assert _render(template, context) == expected, template


@pytest.mark.parametrize(
    "template",
    [
        "{{ ns }}",
        "{{ ns.x | tojson }}",
        "{{ ns.x == ns.x }}",
        "{{ ns.x }}",
    ],
)
def test_a_value_that_contains_itself_is_endless(template: str) -> None:
    setup = "{% set ns = namespace(x=1) %}{% set ns.x = [ns, 1] %}"
    with pytest.raises(TemplateError, match="over the limit of 1000000 characters"):
        _render(setup + template)


def test_each_template_text_may_write_up_to_the_limit_and_steps_are_shared() -> None:
    text = "{% for i in range(1000) %}" + "x" * 900 + "{% endfor %}"
    rendered = Renderer().render({"a": text, "b": text}, {})
    assert len(rendered["a"]) == len(rendered["b"]) == 900_000
    with pytest.raises(TemplateError, match=r"^b: template went over the limit of 25000 steps"):
        Renderer(max_steps=25_000).render({"a": text, "b": text}, {})
