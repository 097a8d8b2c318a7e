"""noetl.core is the leaf every layer imports: its names, and what importing it pulls in."""

from __future__ import annotations

import json
import subprocess
import sys

from noetl import core

_LOADED = (
    "import json, sys, {module}; "
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('noetl.'))))"
)


def _noetl_modules_after_import(module: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _LOADED.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(out))


def test_all_names_exist() -> None:
    assert sorted(core.__all__) == core.__all__
    for name in core.__all__:
        assert hasattr(core, name)


def test_core_imports_nothing_of_noetl_but_errors() -> None:
    loaded = _noetl_modules_after_import("noetl.core")
    assert loaded - {m for m in loaded if m.startswith("noetl.core")} == {"noetl.errors"}


def test_the_renderer_does_not_load_the_engine() -> None:
    loaded = _noetl_modules_after_import("noetl.dsl.render")
    assert "noetl.dsl.render" in loaded
    assert not {m for m in loaded if m.startswith("noetl.engine")}


def test_store_errors_have_one_home() -> None:
    from noetl.store import base

    assert base.ConcurrencyError is core.ConcurrencyError
    assert base.NotFoundError is core.NotFoundError
    assert base.StoreUnavailableError is core.StoreUnavailableError
    assert core.ConcurrencyError.__module__ == "noetl.core.errors"
