"""Checks of what a tool takes literally: inline python `code` and the SQL `query`.

Code and SQL are never rendered as templates (`LITERAL_SPEC_FIELDS` in noetl.dsl.kinds):
values reach them through `args` (python's `args`, SQL parameters), so a template cannot
inject code or SQL. The validator therefore compiles python code as it is written (E312 on
a syntax error) and warns about template markers in code or SQL, which would run as they
are (W412): `{{ workload.n }}` in python is a set of a set, a `NameError` at run time.
"""

from __future__ import annotations

import io
import itertools
import re
import tokenize
from dataclasses import dataclass

from noetl.pyscript import compile_toplevel

# A quoted SQL literal or identifier, or a comment: where `{{` is only text.
_SQL_TEXT = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/", re.DOTALL)
_TEMPLATE_MARK = re.compile(r"\{\{|\{%")
_EXPRESSION = re.compile(r"\{\{.*?\}\}", re.DOTALL)


@dataclass(frozen=True, slots=True)
class CodeProblem:
    """A problem found in a literal field: its message and the line inside the value."""

    message: str
    lineno: int


def python_syntax(code: str, *, toplevel: bool = False) -> CodeProblem | None:
    """The syntax error of python source, with its line in the source. `toplevel`: code
    in upstream NoETL's convention, which may `return` at top level (noetl.pyscript)."""
    try:
        if toplevel:
            compile_toplevel(code, "<inline>")
        else:
            compile(code, "<inline>", "exec")
    except SyntaxError as exc:
        lineno = exc.lineno or 1
        hint = ""
        if _TEMPLATE_MARK.search(code) and not toplevel:
            hint = "; code is not a template: pass values in tool.args"
        return CodeProblem(f"{exc.msg} (code line {lineno}){hint}", lineno)
    return None


def rendered_python_syntax(code: str) -> CodeProblem | None:
    """The syntax error of python code that is rendered as a template before it runs
    (upstream NoETL's dialect): each `{{ ... }}` stands for a name, on its own lines, so
    the code can be compiled as written. Code with `{% ... %}` statements is only known
    once rendered, so it is not checked."""
    if "{%" in code:
        return None
    placeholder = _EXPRESSION.sub(lambda m: "_" + "\n" * m.group().count("\n"), code)
    return python_syntax(placeholder, toplevel=True)


def python_template(code: str) -> int | None:
    """The line of a `{{` in python code outside strings and comments (two `{` tokens in a
    row): a template written into code, which runs as a set display and fails."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):  # pragma: no cover - compiled before
        return None
    for first, second in itertools.pairwise(tokens):
        if first.string == "{" == second.string and first.end == second.start:
            return first.start[0]
    return None


def sql_template(query: str) -> int | None:
    """The line of a `{{` or `{%` in SQL outside quoted text and comments."""
    blanked = _SQL_TEXT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), query)
    found = _TEMPLATE_MARK.search(blanked)
    return None if found is None else blanked.count("\n", 0, found.start()) + 1
