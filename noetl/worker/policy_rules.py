"""A pipeline task's outcome as its policy rules read it, and the rules' decision.

Pure functions (no I/O, no clock): `output_view` builds what the names `output` and
`outcome` hold once a task ran; `decide` evaluates the task's rules over it, top to
bottom, and returns the first match's action; `retry_delay` is the wait before a retry.

`output` (upstream NoETL's name; `outcome` is the same value):

* `status`: "ok" or "error"; `data` (and `result`): the task's result (for an error, what
  the tool reported with it: an http error's status and headers);
* `error`: `{kind, retryable, message, code, status, type}` for an error, where `kind`
  is one of upstream's categories (`rate_limit`, `auth`, `not_found`, `client_error`,
  `server_error`, `timeout`, `connection`, `db_deadlock`, `db_constraint`,
  `db_connection`, `db_timeout`, `schema`, `parse`, `unknown`) and `status` the HTTP
  status; for an ok task the same keys, all empty (the map itself is false), so
  `output.error.retryable` reads false rather than failing;
* `http`: `{status, headers}` (status None for other kinds), `pg`: `{code}` (a
  PostgreSQL SQLSTATE), `meta`: `{attempt, duration_ms}`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from noetl.core import Outcome
from noetl.dsl.envelope import StepResult
from noetl.dsl.render import Renderer
from noetl.errors import TemplateError

__all__ = ["Action", "decide", "output_view", "retry_delay"]

_SQLSTATE = re.compile(r"SQLSTATE ([0-9A-Z]{5})")
_TIMEOUTS = frozenset({"TimeoutError", "TaskTimeoutError", "ReadTimeout", "WriteTimeout"})
_SCHEMA = frozenset({"KeyError", "IndexError", "TypeError", "ValueError", "AttributeError"})
_MAX_DELAY_S = 3600.0


class _NoError(dict[str, Any]):
    """`output.error` of a task that succeeded: its keys are there (empty) so a rule may
    read `output.error.retryable` whatever the status, and the map itself is false."""

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class Action:
    """What a rule (or the default) decided: `do` with its options (see kinds.RuleThen)."""

    do: str
    attempts: int = 3
    delay: float = 1.0
    backoff: str = "none"
    to: str | None = None
    set: dict[str, Any] = field(default_factory=dict)
    # which rule matched (its position), None for the default
    rule: int | None = None


def output_view(kind: str, outcome: Outcome, attempt: int) -> dict[str, Any]:
    """What `output` / `outcome` hold for a task of `kind` that ended with `outcome`."""
    this = outcome.this
    status = _http_status(kind, this)
    headers = this.get("headers") if kind == "http" and isinstance(this, Mapping) else None
    sqlstate = None
    if not outcome.ok and outcome.error:
        found = _SQLSTATE.search(outcome.error)
        sqlstate = found.group(1) if found else None
    view: dict[str, Any] = {
        "status": "ok" if outcome.ok else "error",
        "data": StepResult.of(this),  # upstream's envelope forms: noetl.dsl.envelope
        "result": StepResult.of(this),
        "error": _error(kind, outcome, status, sqlstate) if not outcome.ok else _no_error(),
        "http": {"status": status, "headers": headers or {}},
        "pg": {"code": sqlstate, "sqlstate": sqlstate},
        "meta": {"attempt": attempt, "duration_ms": round(outcome.duration_ms, 3)},
    }
    return view


def _no_error() -> _NoError:
    return _NoError(kind=None, retryable=False, message=None, code=None, status=None, type=None)


def _http_status(kind: str, this: Any) -> int | None:
    if kind != "http" or not isinstance(this, Mapping):
        return None
    value = this.get("status_code")
    return value if isinstance(value, int) else None


def _error(kind: str, outcome: Outcome, status: int | None, sqlstate: str | None) -> dict[str, Any]:
    error_type = outcome.error_type or "Error"
    if status is not None:
        code = f"HTTP_{status}"
    elif sqlstate is not None:
        code = f"PG_{sqlstate}"
    else:
        code = error_type
    return {
        "kind": _kind(kind, error_type, status, sqlstate),
        "retryable": outcome.retryable,
        "message": outcome.error or "",
        "code": code,
        "status": status,
        "type": error_type,
    }


def _kind(kind: str, error_type: str, status: int | None, sqlstate: str | None) -> str:
    """Upstream NoETL's error category of a failure."""
    if status is not None:
        return _http_kind(status)
    if sqlstate is not None:
        return _pg_kind(sqlstate)
    if error_type in _TIMEOUTS or error_type.endswith("Timeout"):
        return "timeout"
    if "Connect" in error_type or error_type in ("NetworkError", "RemoteProtocolError"):
        return "connection"
    if kind == "python":
        if "JSON" in error_type:
            return "parse"
        if error_type in _SCHEMA:
            return "schema"
    return "unknown"


def _http_kind(status: int) -> str:
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    return "server_error" if status >= 500 else "client_error"


def _pg_kind(sqlstate: str) -> str:
    if sqlstate in ("40001", "40P01"):
        return "db_deadlock"
    if sqlstate.startswith("23"):
        return "db_constraint"
    if sqlstate.startswith("08"):
        return "db_connection"
    return "db_timeout" if sqlstate == "57014" else "unknown"


def decide(
    rules: list[Mapping[str, Any]],
    values: Mapping[str, Any],
    renderer: Renderer,
    *,
    ok: bool,
) -> Action:
    """The action of the first rule whose `when` holds (a rule without `when` always
    does); with no rule matching, or no rules: continue when the task succeeded, fail
    when it failed. A `when` that fails to render does not match."""
    for index, rule in enumerate(rules):
        when = rule.get("when")
        if when is not None:
            try:
                matched = renderer.truthy(when, values, field=f"rules[{index}].when")
            except TemplateError:
                matched = False
            if not matched:
                continue
        then = rule.get("then") or {}
        return Action(
            do=str(then.get("do", "continue")),
            attempts=int(then.get("attempts", 3)),
            delay=float(then.get("delay", 1.0)),
            backoff=str(then.get("backoff", "none")),
            to=then.get("to"),
            set=dict(then.get("set") or {}),
            rule=index,
        )
    return Action(do="continue" if ok else "fail")


def retry_delay(action: Action, retries: int) -> float:
    """Seconds to wait before retry number `retries` (1 for the first): `delay` each time
    (`none`, `fixed`), times the retry's number (`linear`), doubling from `delay`
    (`exponential`); at most an hour."""
    if action.backoff == "linear":
        delay = action.delay * retries
    elif action.backoff == "exponential":
        delay = action.delay * 2 ** min(retries - 1, 30)
    else:
        delay = action.delay
    return min(max(delay, 0.0), _MAX_DELAY_S)
