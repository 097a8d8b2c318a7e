"""NoETL-py: a workflow orchestration engine for YAML playbooks.

`noetl.run(playbook, workload)` and `noetl.validate(playbook)` are the Python API
(docs/python-api.md); they load the engine on first use, so `import noetl` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ExecutionStatus",
    "PlaybookError",
    "RunReport",
    "StepReport",
    "StepStatus",
    "Validation",
    "__version__",
    "run",
    "validate",
]

_LAZY = {
    "run": "noetl.api",
    "validate": "noetl.api",
    "Validation": "noetl.api",
    "RunReport": "noetl.api_results",
    "StepReport": "noetl.api_results",
    "ExecutionStatus": "noetl.core",
    "StepStatus": "noetl.core",
    "PlaybookError": "noetl.errors",
    "ConfigError": "noetl.errors",
}

if TYPE_CHECKING:  # what the names are, for type checkers; loaded on first use
    from noetl.api import Validation, run, validate
    from noetl.api_results import RunReport, StepReport
    from noetl.core import ExecutionStatus, StepStatus
    from noetl.errors import ConfigError, PlaybookError


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'noetl' has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found at once next time
    return value
