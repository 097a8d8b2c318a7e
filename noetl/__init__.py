"""NoETL-py: a workflow orchestration engine for YAML playbooks.

`noetl.run(playbook, workload)` and `noetl.validate(playbook)` are the Python API
(docs/python-api.md); they load the engine on first use, so `import noetl` stays cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["PlaybookError", "RunResult", "Validation", "__version__", "run", "validate"]

_LAZY = {
    "run": "noetl.api",
    "validate": "noetl.api",
    "Validation": "noetl.api",
    "RunResult": "noetl.decision.records",
    "PlaybookError": "noetl.errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'noetl' has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    return getattr(importlib.import_module(module), name)
