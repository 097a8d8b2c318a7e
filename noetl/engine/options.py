"""The engine's defaults for what a playbook leaves unsaid: one frozen value, built from
the configuration at the edge (`noetl.config`) and given to every `Engine`.

Pure data: the engine reads it at construction and while deciding, so the same options
and the same inputs always give the same events. `EngineOptions()` is the engine's own
behaviour when nothing is configured: the seed's retry defaults for tools, and no default
for sink retries (the worker's own: `noetl.sinks`), timeouts (each tool's own) or policies
(halt, retry, treat_as_false).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from noetl.dsl.model import ON_STEP_FAIL_PATTERN, Playbook, Policy
from noetl.dsl.spilled import Resolve
from noetl.engine.retry import RetryDefaults

__all__ = ["EffectivePolicy", "EngineOptions", "effective_policy"]

_ON_SINK_FAIL = ("retry", "fail_step", "async_ignore")
_ON_WHEN_ERROR = ("treat_as_false", "fail_step")
# What a playbook gets when neither it nor the options set a policy.
_BUILTIN_POLICY = {
    "on_step_fail": "halt",
    "on_sink_fail": "retry",
    "on_when_error": "treat_as_false",
}


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """Defaults the engine applies where a playbook says nothing.

    * `retry`: the retry policy of a step without `retry` (transient errors only).
    * `sink_retry`: the retry of a sink without its own `retry`; None leaves it to the
      worker's default.
    * `tool_timeout_ms`: the timeout of a task whose step sets no `tool.timeout_ms` (nor,
      in a loop, `loop.item_timeout_ms`); `loop_item_timeout_ms`, when set, instead for a
      loop item. Never applied to the `playbook` tool, which waits for a child execution.
      None: each tool's own default.
    * `sink_timeout_ms`: the timeout of a sink write without `timeout_ms`.
    * `loop_total_timeout_ms`: the total budget of a loop without `total_timeout_ms`.
    * `on_step_fail`, `on_sink_fail`, `on_when_error`: the defaults of a playbook's
      `policy` block (a playbook that sets one wins).
    * `dead_letters`: record tasks that fail for good in the dead-letter queue
      (`task.dead_lettered`); off, they only fail their step.
    * `complexity_warn`, `complexity_refuse`: the scores of an execution's plan
      (`noetl.dsl.complexity`) at which its start is reported too complex (a log event, a
      metric; its dead letters escalated) or refused. None: never.
    * `sinks_pool`: where sinks run. None (the default): in the worker, right after its
      tool. A pool: the worker runs the tool only and the sinks run in a `sinks` task of
      that pool (the server's own, `sinks.in_worker: false`), for deployments whose
      workers may not reach the sinks' systems (`noetl.engine.handoff`).
    * `resolve`: reads a spilled result back by its reference (the result store's read,
      from the runtime), so templates read its fields (`noetl.dsl.spilled`); results
      are written once and never change, so decisions stay a function of the log. None:
      a spilled result is its envelope.
    """

    retry: RetryDefaults = field(default_factory=RetryDefaults)
    sink_retry: RetryDefaults | None = None
    tool_timeout_ms: int | None = None
    sink_timeout_ms: int | None = None
    loop_item_timeout_ms: int | None = None
    loop_total_timeout_ms: int | None = None
    on_step_fail: str | None = None
    on_sink_fail: str | None = None
    on_when_error: str | None = None
    dead_letters: bool = True
    complexity_warn: int | None = None
    complexity_refuse: int | None = None
    sinks_pool: str | None = None
    resolve: Resolve | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        timeouts = (
            "tool_timeout_ms",
            "sink_timeout_ms",
            "loop_item_timeout_ms",
            "loop_total_timeout_ms",
        )
        for name in timeouts:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"engine options: {name} must be at least 1 ms")
        if self.on_step_fail is not None and not re.match(ON_STEP_FAIL_PATTERN, self.on_step_fail):
            raise ValueError(f"engine options: unknown on_step_fail {self.on_step_fail!r}")
        if self.on_sink_fail is not None and self.on_sink_fail not in _ON_SINK_FAIL:
            raise ValueError(f"engine options: unknown on_sink_fail {self.on_sink_fail!r}")
        if self.on_when_error is not None and self.on_when_error not in _ON_WHEN_ERROR:
            raise ValueError(f"engine options: unknown on_when_error {self.on_when_error!r}")

    def sink_retry_json(self) -> dict[str, Any] | None:
        """`sink_retry` as a sink's `retry` travels to the worker (a RetryPolicy as JSON)."""
        if self.sink_retry is None:
            return None
        r = self.sink_retry
        return {
            "max_attempts": r.max_attempts,
            "initial_delay": r.initial_delay,
            "backoff_multiplier": r.backoff_multiplier,
            "max_delay": r.max_delay,
            "jitter": r.jitter,
            "backoff": r.backoff,
        }


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """A playbook's failure policies as the engine applies them: every key set."""

    on_step_fail: str
    on_sink_fail: str
    on_when_error: str
    rollback: str
    max_runs: int = 1000


def effective_policy(playbook: Playbook, options: EngineOptions) -> EffectivePolicy:
    """The playbook's `policy` with every key it leaves unset taken from the options, else
    the built-in default. A default `route_edge:<step>` naming a step this playbook does
    not have is `halt` for it (the validator only checks a playbook's own policy)."""
    own: Policy = playbook.policy
    on_step_fail = own.on_step_fail or options.on_step_fail or _BUILTIN_POLICY["on_step_fail"]
    if own.on_step_fail is None and on_step_fail.startswith("route_edge:"):
        target = on_step_fail.split(":", 1)[1]
        if not any(step.step == target for step in playbook.workflow):
            on_step_fail = "halt"
    return EffectivePolicy(
        on_step_fail=on_step_fail,
        on_sink_fail=own.on_sink_fail or options.on_sink_fail or _BUILTIN_POLICY["on_sink_fail"],
        on_when_error=(
            own.on_when_error or options.on_when_error or _BUILTIN_POLICY["on_when_error"]
        ),
        rollback=own.rollback,
        max_runs=own.max_runs,
    )
