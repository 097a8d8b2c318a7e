"""Python code in upstream NoETL's convention (`style: toplevel`), run by the real pool."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from noetl.core import Outcome, Task
from noetl.pyscript import compile_toplevel
from noetl.worker.python_pool import PythonPool


def task(
    source: str,
    args: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    **spec: Any,
) -> Task:
    return Task(
        task_id="t1",
        execution_id="e1",
        step="step",
        kind="python",
        spec={"code": textwrap.dedent(source), "style": "toplevel", **spec},
        args=args or {},
        context=context or {},
        key="e1:step",
        timeout_ms=20_000,
    )


@pytest.fixture(scope="module")
def pool() -> Iterator[PythonPool]:
    with PythonPool(processes=1) as shared:
        yield shared


def ok(outcome: Outcome) -> Any:
    assert outcome.ok, outcome.error
    return outcome.this


def test_inputs_are_plain_names_and_the_outcome_is_result(pool: PythonPool) -> None:
    outcome = pool.run(
        task(
            """
            total = sum(values)
            print(f"{label}: {total}")
            result = {"label": label, "total": total, "keys": sorted(input_data)}
            """,
            {"values": [1, 2, 3], "label": "sum"},
        )
    )
    assert ok(outcome) == {"label": "sum", "total": 6, "keys": ["label", "values"]}
    assert outcome.stdout == "sum: 6\n"


def test_a_top_level_return_is_the_outcome(pool: PythonPool) -> None:
    source = """
        if n > 10:
            return {"big": True}
        n = n * 2  # an input may be assigned: it is the function's own name
        result = {"doubled": n}
        """
    assert ok(pool.run(task(source, {"n": 50}))) == {"big": True}
    assert ok(pool.run(task(source, {"n": 4}))) == {"doubled": 8}


def test_code_without_result_or_return_answers_null(pool: PythonPool) -> None:
    assert ok(pool.run(task("x = 1\n"))) is None
    assert ok(pool.run(task("if True:\n    return\n"))) is None


def test_context_has_get_and_the_common_modules_are_there(pool: PythonPool) -> None:
    outcome = pool.run(
        task(
            """
            prev = context.get("fetch", {})
            result = {
                "rows": prev.get("rows"),
                "missing": context.get("nothing", "default"),
                "json": json.dumps([1]),
                "uuid": isinstance(uuid.uuid4().hex, str),
            }
            """,
            context={"execution_id": "e1", "fetch": {"rows": [1, 2]}},
        )
    )
    assert ok(outcome) == {"rows": [1, 2], "missing": "default", "json": "[1]", "uuid": True}


def test_main_is_called_with_its_parameters_bound_by_name(pool: PythonPool) -> None:
    source = """
        def main(name, count=1, context=None, **rest):
            return {"greeting": [f"hi {name}"] * count, "eid": context["execution_id"],
                    "rest": rest}
        """
    outcome = pool.run(
        task(source, {"name": "Ada", "count": 2, "extra": 1}, {"execution_id": "e9"})
    )
    assert ok(outcome) == {"greeting": ["hi Ada", "hi Ada"], "eid": "e9", "rest": {"extra": 1}}
    missing = pool.run(task("def main(name):\n    return name\n", {"other": 1}))
    assert not missing.ok
    assert missing.error is not None
    assert "main() takes 'name', which is not one of the inputs (other)" in missing.error


def test_libs_are_imported_under_their_alias(pool: PythonPool) -> None:
    source = "result = [pth.basename('/a/b.txt'), dt(2020, 1, 2).isoformat(), m.sqrt(9)]\n"
    libs = {"pth": "os.path", "dt": {"from": "datetime", "import": "date"}, "m": "math"}
    assert ok(pool.run(task(source, libs=libs))) == ["b.txt", "2020-01-02", 3.0]
    broken = pool.run(task("result = 1\n", libs={"x": "no_such_module_anywhere"}))
    assert not broken.ok
    assert broken.error_type == "ModuleNotFoundError"


def test_errors_name_the_line_the_author_wrote(pool: PythonPool) -> None:
    source = "a = 1\nb = 2\nif a:\n    return a / 0\n"
    outcome = pool.run(task(source))
    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.startswith("ZeroDivisionError: division by zero")
    assert "inline code, line 4" in outcome.error
    assert "return a / 0" in outcome.error


def test_syntax_errors_keep_their_line() -> None:
    with pytest.raises(SyntaxError) as caught:
        compile_toplevel("x = 1\nreturn x +\n", "<inline>")
    assert caught.value.lineno == 2
    _, wrapped = compile_toplevel("return 1\n", "<inline>")
    assert wrapped
    _, plain = compile_toplevel("def f():\n    return 1\nresult = f()\n", "<inline>")
    assert not plain
