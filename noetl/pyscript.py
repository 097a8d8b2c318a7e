"""Python code in upstream NoETL's convention (`style: toplevel` of the python tool).

The code runs top to bottom; its outcome is a top-level `return` or, when it ends without
one, its top-level `result` variable. Python refuses `return` outside a function, so code
holding one is compiled as the body of a function whose parameters are the names the code
is given (its inputs), which keeps each statement at its own line: an error names the
line the author wrote. Code without a top-level `return` runs as a module, so the
functions it defines see each other and its top-level names.

Standard library only: the python tool's child processes import it (see
`noetl.worker._pychild`), and the validator compiles code with it.
"""

from __future__ import annotations

import ast
import keyword
from collections.abc import Iterable, Iterator
from types import CodeType

__all__ = ["FUNCTION", "NO_RESULT", "compile_toplevel", "has_toplevel_return", "usable_name"]

FUNCTION = "__noetl_toplevel__"
NO_RESULT = "__noetl_no_result__"  # what the function returns when `result` is never set
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def usable_name(name: str) -> bool:
    """Whether an input can be bound as a plain name of the code."""
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__")


def _statements(body: Iterable[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of the top-level code, not descending into functions and classes."""
    stack: list[ast.AST] = list(body)
    while stack:
        current = stack.pop()
        yield current
        if not isinstance(current, _SCOPES):
            stack.extend(ast.iter_child_nodes(current))


def has_toplevel_return(module: ast.Module) -> bool:
    return any(isinstance(node, ast.Return) for node in _statements(module.body))


def compile_toplevel(code: str, filename: str, names: Iterable[str] = ()) -> tuple[CodeType, bool]:
    """`(code object, wrapped)`: the module itself, or (when it returns at top level) a
    module defining `FUNCTION(<names>)`, which returns the outcome (`NO_RESULT` when it
    ends without `return` and without setting `result`). Raises SyntaxError with the
    line inside `code`."""
    module = ast.parse(code, filename)
    if not has_toplevel_return(module):
        return compile(module, filename, "exec"), False
    end = len(code.splitlines()) or 1
    fallback = ast.parse(
        f"try:\n    return result\nexcept NameError:\n    return {NO_RESULT}\n"
    ).body
    for node in fallback:
        ast.increment_lineno(node, end)
    arguments = ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg=name) for name in names],
        kwonlyargs=[],
        kw_defaults=[],
        defaults=[],
    )
    fields: dict[str, object] = {
        "name": FUNCTION,
        "args": arguments,
        "body": [*module.body, *fallback],
        "decorator_list": [],
        "returns": None,
        "lineno": 1,
        "col_offset": 0,
    }
    if "type_params" in ast.FunctionDef._fields:  # Python 3.12 and later
        fields["type_params"] = []
    function = ast.FunctionDef(**fields)  # type: ignore[arg-type]
    wrapped = ast.Module(body=[function], type_ignores=[])
    ast.fix_missing_locations(wrapped)
    return compile(wrapped, filename, "exec"), True
