"""The shape the codebase keeps (CONTRIBUTING.md): small modules, and no module using
another module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "noetl"
MAX_LINES = 500
# Underscored names that are public API of the standard library (namedtuple's, ast's).
STDLIB_PUBLIC = {"_fields", "_asdict", "_replace", "_make", "_field_defaults"}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_here(tree: ast.AST) -> set[str]:
    """Private names this module defines: functions, classes, assigned names and
    attributes, `__slots__` entries."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # `__slots__` entries, dataclass fields by name
    return {name for name in names if _private(name)}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    relative = path.relative_to(PACKAGE.parent)
    module = ".".join(relative.with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: list[str] = []
    defined = _defined_here(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("noetl"):
            for alias in node.names:
                if not _private(alias.name):
                    continue
                target = PACKAGE.parent.joinpath(*f"{node.module}.{alias.name}".split("."))
                is_module = target.with_suffix(".py").exists() or target.is_dir()
                if is_module and node.module == package:
                    continue  # a package's private module, used inside the package
                found.append(f"{relative}:{node.lineno}: imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super":
                continue
            if node.attr in defined or node.attr in STDLIB_PUBLIC:
                continue
            found.append(f"{relative}:{node.lineno}: reaches {ast.unparse(node)}")
    return found


def test_no_module_is_over_the_size_limit() -> None:
    over = {
        str(path.relative_to(PACKAGE.parent)): count
        for path in _modules()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert over == {}, f"modules over {MAX_LINES} lines (split them by concern): {over}"


def test_no_module_uses_another_modules_private_names() -> None:
    found = [line for path in _modules() for line in _violations(path)]
    assert found == [], "private names used across modules:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from noetl.cli.live import _STYLE\n", "imports noetl.cli.live._STYLE"),
        ("def f(engine):\n    return engine._emit\n", "reaches engine._emit"),
    ],
)
def test_the_check_finds_a_private_name_used_across_modules(
    tmp_path: Path, source: str, expected: str
) -> None:
    # The checker itself must be able to fail: a module written into the package tree
    # (in a scratch copy of its path) that reaches a private name is reported.
    module = PACKAGE / "_structure_probe.py"
    assert not module.exists()
    module.write_text(source, encoding="utf-8")
    try:
        found = _violations(module)
    finally:
        module.unlink()
    assert any(expected in line for line in found), found
