"""Retries, decided by the engine from a task's outcome (seed 001). Pure: no I/O, no clock,
no randomness, so replaying a log reproduces every decision and every delay.

* `rule_for` resolves the policy of a step: `retry` inside its `tool`, else on the step,
  else on the workbook task its tool calls, else the engine's `RetryDefaults` (seed 000:
  6 attempts, 200 ms, x2, 30 s cap, jitter), which retries transient errors only. A `retry`
  block takes the DSL's defaults for the keys it leaves out (`noetl.dsl.model.RetryPolicy`).
* `backoff_delay` is the wait after a failed attempt: `exponential`, `linear` or `fixed`
  from `initial_delay`, capped at `max_delay`; with jitter, scaled by a factor in
  [0.5, 1) drawn from a sha256 of (execution, step, loop index, attempt).
* `assess` decides: finish with the outcome, retry after a delay, or stop because the
  attempts are used up (exhausted).
* `requested` decides the retry a pipeline's policy rule asks for in its outcome
  (`Outcome.retry`): the rule counted the tries and computed the delay on the worker; the
  engine takes them from the recorded outcome, so a replay decides the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from noetl.core.backoff import backoff_seconds
from noetl.dsl.model import Condition, Playbook, RetryPolicy, Step, Tool
from noetl.errors import ErrorClass, TemplateError, error_class, http_status

__all__ = [
    "DEFAULT_STATUS_CODES",
    "Attempt",
    "Backoff",
    "RetryAction",
    "RetryDefaults",
    "RetryRule",
    "Verdict",
    "assess",
    "backoff_delay",
    "jitter_factor",
    "jitter_key",
    "matched_trigger",
    "requested",
    "retry_names",
    "rule_for",
    "rule_for_tool",
]

Backoff = Literal["exponential", "linear", "fixed"]
Source = Literal["tool", "step", "workbook", "default"]
Scope = Literal["tool", "chain"]
# The statuses `on: [status_code]` retries when the block lists none.
DEFAULT_STATUS_CODES = frozenset({408, 429, 500, 502, 503, 504})
# Renders a condition against the step's template names plus `names`; may raise
# TemplateError.
Check = Callable[[Condition, Mapping[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class RetryDefaults:
    """The policy of a step without any `retry` (from the configuration; seed 000)."""

    max_attempts: int = 6
    initial_delay: float = 0.2
    backoff_multiplier: float = 2.0
    max_delay: float = 30.0
    jitter: bool = True
    backoff: Backoff = "exponential"

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("retry defaults: max_attempts must be at least 1")
        if self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError("retry defaults: delays must not be negative")
        if self.backoff_multiplier < 1:
            raise ValueError("retry defaults: backoff_multiplier must be at least 1")
        if self.backoff not in ("exponential", "linear", "fixed"):
            raise ValueError(f"retry defaults: unknown backoff {self.backoff!r}")


@dataclass(frozen=True, slots=True)
class RetryRule:
    """The effective retry policy of one step; `source` says where it came from."""

    max_attempts: int
    initial_delay: float
    backoff_multiplier: float
    max_delay: float
    jitter: bool
    backoff: Backoff
    retry_when: Condition | None = None
    stop_when: Condition | None = None
    source: Source = "default"
    scope: Scope = "tool"
    on: tuple[str, ...] | None = None  # the triggers written (None: any retryable failure)
    status_codes: frozenset[int] = DEFAULT_STATUS_CODES
    exceptions: frozenset[str] = frozenset()

    @property
    def configured(self) -> bool:
        """Written in the playbook (retries any non-fatal failure), not the default policy
        (retries transient failures only)."""
        return self.source != "default"

    @classmethod
    def of_defaults(cls, defaults: RetryDefaults) -> RetryRule:
        return cls(
            max_attempts=defaults.max_attempts,
            initial_delay=defaults.initial_delay,
            backoff_multiplier=defaults.backoff_multiplier,
            max_delay=defaults.max_delay,
            jitter=defaults.jitter,
            backoff=defaults.backoff,
        )

    @classmethod
    def of_block(cls, block: RetryPolicy, source: Source) -> RetryRule:
        return cls(
            max_attempts=block.max_attempts,
            initial_delay=block.initial_delay,
            backoff_multiplier=block.backoff_multiplier,
            max_delay=block.max_delay,
            jitter=block.jitter,
            backoff=block.backoff,
            retry_when=block.retry_when,
            stop_when=block.stop_when,
            source=source,
            scope=block.scope,
            on=None if block.on is None else tuple(dict.fromkeys(block.on)),
            status_codes=(
                DEFAULT_STATUS_CODES
                if block.status_codes is None
                else frozenset(block.status_codes)
            ),
            exceptions=frozenset(block.exceptions or ()),
        )


def rule_for(step: Step, playbook: Playbook, defaults: RetryDefaults) -> RetryRule:
    """The retry policy of a step's tasks: tool, then step, then workbook task, then default.

    The call site wins over the workbook: `retry` on the step's `tool` or on the step
    overrides the one on the workbook task's tool."""
    tool = step.tool
    if tool is not None and tool.retry is not None:
        return RetryRule.of_block(tool.retry, "tool")
    if step.retry is not None:
        return RetryRule.of_block(step.retry, "step")
    if tool is not None and tool.kind == "workbook":
        try:
            task = playbook.task(str(tool.spec.get("name")))
        except KeyError:
            task = None  # the validator reports it; the dispatch fails the step
        if task is not None and task.tool.retry is not None:
            return RetryRule.of_block(task.tool.retry, "workbook")
    return RetryRule.of_defaults(defaults)


def rule_for_tool(tool: Tool, playbook: Playbook, defaults: RetryDefaults) -> RetryRule:
    """The retry policy of a tool that is not a step's own (a case branch's): its `retry`,
    else its workbook task's, else the default policy."""
    if tool.retry is not None:
        return RetryRule.of_block(tool.retry, "tool")
    if tool.kind == "workbook":
        try:
            task = playbook.task(str(tool.spec.get("name")))
        except KeyError:
            task = None
        if task is not None and task.tool.retry is not None:
            return RetryRule.of_block(task.tool.retry, "workbook")
    return RetryRule.of_defaults(defaults)


# --- delays ------------------------------------------------------------------------------


def jitter_key(execution_id: str, step: str, attempt: int, index: int | None = None) -> str:
    """What the jitter of the delay after `attempt` is drawn from (the loop index keeps the
    items of one loop from retrying in lockstep)."""
    where = step if index is None else f"{step}[{index}]"
    return f"{execution_id}:{where}:{attempt}"


def jitter_factor(key: str) -> float:
    """A number in [0, 1) fixed by `key`: the first 8 bytes of its sha256."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def backoff_delay(rule: RetryRule, attempt: int, key: str) -> float:
    """Seconds to wait after failed attempt `attempt` (1, 2, ...) before the next one.

    exponential: `initial_delay * backoff_multiplier ** (attempt - 1)`; linear:
    `initial_delay * attempt`; fixed: `initial_delay`; capped at `max_delay`. Jitter scales
    the capped delay by a factor in [0.5, 1) (half fixed, half drawn from `key`), so a delay
    never passes the cap and retries of one execution still spread out."""
    return backoff_seconds(
        attempt,
        initial=rule.initial_delay,
        multiplier=rule.backoff_multiplier,
        max_delay=rule.max_delay,
        backoff=rule.backoff,
        jitter=jitter_factor(key) if rule.jitter else None,
    )


# --- deciding ----------------------------------------------------------------------------


class RetryAction(StrEnum):
    FINISH = "finish"  # the outcome stands
    RETRY = "retry"  # run the task again after `delay_s`
    EXHAUSTED = "exhausted"  # a retry was wanted, but no attempt is left


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with a task's outcome.

    `reason` says why a retry was wanted: `retry_when` (the condition was true),
    `transient` (a transient error), `failed` (another non-fatal failure under a `retry`
    written in the playbook). `error`, when set, fails the task with that message: a
    `retry_when` / `stop_when` that could not be evaluated, or a successful output that
    `retry_when` still rejected when the attempts ran out."""

    action: RetryAction
    reason: str | None = None
    delay_s: float = 0.0
    error: str | None = None
    trigger: str | None = None  # the trigger of `on` that matched (when `on` is written)


FINISH = Verdict(RetryAction.FINISH)
RULE = "rule"  # the reason of a retry a pipeline's policy rule asked for
_MAX_RULE_DELAY_S = 3600.0


def requested(request: Mapping[str, Any]) -> Verdict:
    """The verdict on a retry a pipeline's policy rule asked for (`Outcome.retry`): run
    the task again after its `delay_s` (at most an hour; a delay that is not a finite,
    non-negative number waits none), or, `exhausted`, the rule's attempts ran out."""
    if request.get("exhausted") is True:
        return Verdict(RetryAction.EXHAUSTED, reason=RULE)
    raw = request.get("delay_s")
    delay = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else 0.0
    if not 0.0 <= delay <= _MAX_RULE_DELAY_S:  # also NaN
        delay = _MAX_RULE_DELAY_S if delay > _MAX_RULE_DELAY_S else 0.0
    return Verdict(RetryAction.RETRY, reason=RULE, delay_s=delay)


@dataclass(frozen=True, slots=True)
class Attempt:
    """The outcome of one attempt (`number`, from 1) of one task.

    `rule` and `kind`, when set, are those of a task that is not the step's own (a case
    branch's tool); otherwise the step's retry rule and tool kind apply."""

    task_id: str
    step: Step
    index: int | None
    outcome: dict[str, Any]
    number: int
    rule: RetryRule | None = None
    kind: str | None = None


def retry_names(
    outcome: Mapping[str, Any], attempt: int, rule: RetryRule, step: str
) -> dict[str, Any]:
    """The names `retry_when` and `stop_when` see, besides the step's usual ones (seed 001).

    `this` / `result` (the tool's output; an HTTP error's status and headers), `data`
    (`this.data` when `this` has one, else `this`), `status_code` (the HTTP status when
    `this` is HTTP-shaped, else 0: no HTTP answer), `success`, `error` and `error_type`
    (None on success), `retryable`, `attempt` (the one that just ended, from 1),
    `max_attempts`, and `node_id` (the step's name)."""
    this = outcome.get("this")
    ok = bool(outcome.get("ok"))
    data = this.get("data") if isinstance(this, Mapping) and "data" in this else this
    return {
        "this": this,
        "result": this,
        "data": data,
        "status_code": http_status(this) or 0,
        "success": ok,
        "error": None if ok else str(outcome.get("error") or "tool failed"),
        "error_type": None if ok else outcome.get("error_type"),
        "retryable": error_class(outcome) is ErrorClass.TRANSIENT,
        "attempt": attempt,
        "max_attempts": rule.max_attempts,
        "node_id": step,
    }


def assess(
    rule: RetryRule,
    outcome: Mapping[str, Any],
    attempt: int,
    check: Check,
    *,
    step: str,
    key: str,
) -> Verdict:
    """Decide what follows the outcome of attempt `attempt` (from 1) of a task.

    1. A fatal error is never retried. 2. Whether a retry is wanted: `retry_when` when the
    rule has one (it may reject a successful output); else never for a success; else, for
    a failure, always under a playbook `retry` and only when transient under the default.
    3. `stop_when`, when true, cancels a wanted retry. 4. A wanted retry runs if attempts
    are left (after `backoff_delay`), else the task is exhausted.
    Templates are evaluated only when they can change the answer, so a run without
    retries evaluates nothing."""
    ok = bool(outcome.get("ok"))
    kind = error_class(outcome)
    if rule.on is not None:
        return _triggered(rule, outcome, attempt, check, step=step, key=key)
    if kind is ErrorClass.FATAL or (ok and rule.retry_when is None):
        return FINISH
    names: dict[str, Any] | None = None
    if rule.retry_when is not None:
        names = retry_names(outcome, attempt, rule, step)
        try:
            wanted = check(rule.retry_when, names)
        except TemplateError as exc:
            return Verdict(RetryAction.FINISH, error=f"retry.retry_when: {exc}")
        reason = "retry_when"
    else:
        wanted = rule.configured or kind is ErrorClass.TRANSIENT
        reason = "transient" if kind is ErrorClass.TRANSIENT else "failed"
    if not wanted:
        return FINISH
    if rule.stop_when is not None:
        names = names or retry_names(outcome, attempt, rule, step)
        try:
            if check(rule.stop_when, names):
                return FINISH
        except TemplateError as exc:
            return Verdict(RetryAction.FINISH, error=f"retry.stop_when: {exc}")
    if attempt >= rule.max_attempts:
        error = None if not ok else f"retry_when was still true after {attempt} attempts"
        return Verdict(RetryAction.EXHAUSTED, reason=reason, error=error)
    return Verdict(RetryAction.RETRY, reason=reason, delay_s=backoff_delay(rule, attempt, key))


def matched_trigger(rule: RetryRule, outcome: Mapping[str, Any]) -> str | None:
    """The first trigger of `rule.on` the outcome matches: `error` (a failure that is not
    fatal), `status_code` (an HTTP status, of an answer or of an HTTP error, in
    `status_codes`: even a 4xx the block lists, which the default never retries),
    `exception` (a failure whose error type is named in `exceptions`, by its class name
    or its dotted path)."""
    ok = bool(outcome.get("ok"))
    for trigger in rule.on or ():
        if trigger == "error" and not ok and error_class(outcome) is not ErrorClass.FATAL:
            return trigger
        if trigger == "status_code" and http_status(outcome.get("this")) in rule.status_codes:
            return trigger
        if trigger == "exception" and not ok:
            name = str(outcome.get("error_type") or "")
            if name and (name in rule.exceptions or name.rsplit(".", 1)[-1] in rule.exceptions):
                return trigger
    return None


def _triggered(
    rule: RetryRule,
    outcome: Mapping[str, Any],
    attempt: int,
    check: Check,
    *,
    step: str,
    key: str,
) -> Verdict:
    """`assess` for a rule with `on`: a retry is wanted when a trigger matches (and
    `retry_when`, when written too, is true); then `stop_when` and the attempts left, as
    for every rule."""
    trigger = matched_trigger(rule, outcome)
    if trigger is None:
        return FINISH
    names: dict[str, Any] | None = None
    for condition, stops in ((rule.retry_when, False), (rule.stop_when, True)):
        if condition is None:
            continue
        names = names or retry_names(outcome, attempt, rule, step)
        try:
            verdict = check(condition, names)
        except TemplateError as exc:
            field = "stop_when" if stops else "retry_when"
            return Verdict(RetryAction.FINISH, error=f"retry.{field}: {exc}")
        if verdict == stops:
            return FINISH
    if attempt >= rule.max_attempts:
        error = None
        if outcome.get("ok"):
            error = f"the answer's status still matched after {attempt} attempts"
        return Verdict(RetryAction.EXHAUSTED, reason=trigger, error=error, trigger=trigger)
    delay = backoff_delay(rule, attempt, key)
    return Verdict(RetryAction.RETRY, reason=trigger, delay_s=delay, trigger=trigger)
