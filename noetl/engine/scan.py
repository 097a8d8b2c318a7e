"""What a step's tool, as written, mentions: `secrets`, or upstream's `ctx` / `iter` outside
the templates the engine renders. Found once per step (or case branch) and kept by the
engine (`Engine.scan`), since a step's templates never change; building its tasks
(`noetl.engine.tasks`, `noetl.engine.case_actions`) asks here."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["StepScan"]

# A template expression or statement (the engine renders it before the task is sent).
_TEMPLATE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)


class StepScan:
    """The answers so far, by step name (or `<step>.case<index>` for a branch's tool)."""

    __slots__ = ("secret_steps", "variable_steps")

    def __init__(self) -> None:
        self.secret_steps: dict[str, bool] = {}
        self.variable_steps: dict[str, bool] = {}

    def may_reference_secrets(
        self, name: str, kind: str, spec: dict[str, Any], args: dict[str, Any]
    ) -> bool:
        """Whether the step's tool templates mention `secrets` at all. When they do not,
        the task lists no secrets, even if data rendered into it holds marker text: a
        marker stands for a secret only where a template put it."""
        known = self.secret_steps.get(name)
        if known is None:
            known = "secrets" in json.dumps([kind, spec, args], default=str)
            self.secret_steps[name] = known
        return known

    def reads_variables(
        self,
        name: str,
        spec: dict[str, Any],
        args: dict[str, Any],
        sinks: tuple[dict[str, Any], ...],
    ) -> bool:
        """Whether the step's tool, as written, mentions `ctx` or `iter` outside the
        templates the engine renders, so its task must carry them to the worker: python
        code reading `context.get('ctx')`, a sink's `args` (rendered by the worker). An
        upstream playbook's args, code and SQL are rendered here, so `{{ ctx.x }}` in them
        needs nothing in the task; a task that reads neither stays as small as before."""
        known = self.variable_steps.get(name)
        if known is None:
            rendered = _TEMPLATE.sub("", json.dumps([spec, args], default=str))
            text = rendered + json.dumps([sink.get("args") for sink in sinks], default=str)
            known = "ctx" in text or "iter" in text
            self.variable_steps[name] = known
        return known
