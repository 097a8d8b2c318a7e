"""Seed 002's "too complex then alert" at the start of an execution: its plan's score
(`noetl.dsl.complexity`) at or over `complexity_refuse` refuses the start. Reporting a
start over `complexity_warn` (a log event and a metric) and escalating its dead letters
is the observers' (noetl.observability); a dead-letter entry records the score
(noetl.decision.dlq)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl.dsl.complexity import Complexity, estimate
from noetl.dsl.model import Playbook
from noetl.engine.options import EngineOptions
from noetl.errors import TooComplexError

__all__ = ["admit"]


def admit(playbook: Playbook, workload: Mapping[str, Any], options: EngineOptions) -> Complexity:
    """The plan's complexity; TooComplexError when it scores `complexity_refuse` or more."""
    found = estimate(playbook, workload)
    limit = options.complexity_refuse
    if limit is not None and found.score >= limit:
        raise TooComplexError(
            f"playbook {playbook.metadata.name!r} is too complex to start: its plan scores "
            f"{found.score} (complexity.refuse is {limit}), mostly {found.biggest()}"
        )
    return found
