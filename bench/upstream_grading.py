"""Grading of the upstream conformance kit's cases, as upstream's gate grades them.

Pure functions over what a run gave (the JSON `noetl run --json` prints, or the
execution the API shows, or the API's answer to an invalid playbook), so the rules can be
tested without the kit. `upstream_e2e.py` runs the cases and hands the results here.

A case passes when its execution reaches a terminal status within the timeout that is the
one CASES.tsv expects: `COMPLETED` for most, a failed execution for the negative ones
(`FAILED`; a playbook refused as invalid counts as failed there, with a note). Upstream's
gate checks nothing else, but many fixtures compute a soft verdict of their own
(`test_passed: true`, `status: passed`, `all_checks_passed`, ...): those are reported
beside the grade, never part of it.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "Case",
    "CaseResult",
    "Got",
    "Run",
    "Verdict",
    "cause",
    "first_error",
    "grade",
    "interpret",
    "read_cases",
    "render_text",
    "report",
    "select",
    "soft_verdicts",
]

EXPECTED = ("COMPLETED", "FAILED")
_COLUMNS = ("path", "group", "in_upstream_core_gate", "expected")
# Short enough for one terminal line beside the other columns.
ERROR_WIDTH = 160


class Got(StrEnum):
    """How a run ended. Upstream knows only the first two; the others say why there was
    no terminal status."""

    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    INVALID = "INVALID"  # refused before it ran (validation)
    TIMEOUT = "TIMEOUT"  # no terminal status within the timeout
    ERROR = "ERROR"  # the run could not start or its answer could not be read


@dataclass(frozen=True, slots=True)
class Case:
    """One row of CASES.tsv."""

    path: str
    group: str
    core: bool
    expected: str


def read_cases(text: str, source: str = "CASES.tsv") -> list[Case]:
    """The cases of a CASES.tsv text; ValueError naming the line of a malformed row."""
    lines = text.splitlines()
    if not lines or tuple(lines[0].split("\t")) != _COLUMNS:
        raise ValueError(f"{source}:1: expected the header {'<TAB>'.join(_COLUMNS)}")
    cases = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != len(_COLUMNS) or cells[3] not in EXPECTED or cells[2] not in ("yes", "no"):
            raise ValueError(
                f"{source}:{number}: expected path, group, yes|no, COMPLETED|FAILED "
                "separated by tabs"
            )
        cases.append(Case(cells[0], cells[1], cells[2] == "yes", cells[3]))
    return cases


def select(cases: Sequence[Case], only: Sequence[str] | None) -> list[Case]:
    """The cases `--only` picks (all without it), in their order: each value is a group's
    name, a glob over paths (`*`, `?`, `[`), or a part of a path."""
    if not only:
        return list(cases)
    groups = {case.group for case in cases}

    def picked(case: Case, pattern: str) -> bool:
        if pattern in groups:
            return case.group == pattern
        if any(char in pattern for char in "*?["):
            return fnmatch.fnmatchcase(case.path, pattern)
        return pattern in case.path

    return [case for case in cases if any(picked(case, pattern) for pattern in only)]


# --- soft verdicts -----------------------------------------------------------------------

# Booleans that fixtures set to say whether their own checks held.
_FLAG_KEYS = frozenset({"test_passed", "all_checks_passed", "all_passed", "passed"})
# Keys whose text value may be a verdict (`status: passed`, `test: passed`).
_WORD_KEYS = frozenset({"status", "test", "test_status", "test_result"})
_WORDS = {"passed": True, "pass": True, "failed": False, "fail": False}
# A step result can hold megabytes (heavy-payload fixtures): stop looking after this many
# values rather than walk all of it.
_MAX_NODES = 200_000


@dataclass(frozen=True, slots=True)
class Verdict:
    """A verdict a playbook computed: where it was found and whether it says passed."""

    where: str
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "passed": self.passed}


def soft_verdicts(doc: Mapping[str, Any] | None, limit: int = 20) -> list[Verdict]:
    """The verdicts in a run's saved context and step results (not in the step summaries'
    own `status`, which is the engine's, not the playbook's), first `limit` of them."""
    if not doc:
        return []
    roots: list[tuple[str, Any]] = [("context", doc.get("context"))]
    steps = doc.get("steps")
    if isinstance(steps, Mapping):
        roots += [
            (f"steps.{name}.result", s.get("result"))
            for name, s in steps.items()
            if isinstance(s, Mapping)
        ]
    found: list[Verdict] = []
    budget = [_MAX_NODES]
    for where, value in roots:
        for verdict in _walk(where, value, budget):
            found.append(verdict)
            if len(found) >= limit:
                return found
    return found


def _walk(where: str, value: Any, budget: list[int]) -> Iterator[Verdict]:
    budget[0] -= 1
    if budget[0] < 0:
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            here = f"{where}.{key}"
            if key in _FLAG_KEYS and isinstance(item, bool):
                yield Verdict(here, item)
            elif key in _WORD_KEYS and isinstance(item, str) and item.lower() in _WORDS:
                yield Verdict(here, _WORDS[item.lower()])
            else:
                yield from _walk(here, item, budget)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(f"{where}[{index}]", item, budget)


def verdict_summary(verdicts: Sequence[Verdict]) -> str | None:
    """`passed (2)`, `FAILED at context.x.test_passed`, or None when there is none."""
    if not verdicts:
        return None
    failed = [v for v in verdicts if not v.passed]
    if failed:
        return f"FAILED at {failed[0].where}" + (f" (+{len(failed) - 1})" if failed[1:] else "")
    return f"passed ({len(verdicts)})"


# --- what a run gave ---------------------------------------------------------------------


def one_line(text: str, width: int = ERROR_WIDTH) -> str:
    """The first non-blank line of `text`, shortened to `width` characters."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def _diagnostic(item: Mapping[str, Any]) -> str:
    where = f" line {item['line']}" if item.get("line") else ""
    step = f" step {item['step']!r}" if item.get("step") else ""
    return one_line(f"{item.get('code', '?')}{where}{step}: {item.get('message', '')}")


def first_error(doc: Mapping[str, Any]) -> str | None:
    """The first failed step's error (`step 'x': first line`), else the execution's."""
    steps = doc.get("steps")
    if isinstance(steps, Mapping):
        for name, summary in steps.items():
            if isinstance(summary, Mapping) and summary.get("status") == "failed":
                error = summary.get("error")
                if error:
                    return one_line(f"step {name!r}: {error}")
    error = doc.get("error")
    return one_line(str(error)) if error else None


@dataclass(frozen=True, slots=True)
class Run:
    """What running one case gave."""

    got: Got
    seconds: float
    error: str | None = None
    verdicts: tuple[Verdict, ...] = ()
    execution_id: str | None = None
    diagnostics: int = 0  # how many errors an invalid playbook has (the first is `error`)


def interpret(
    doc: Mapping[str, Any] | None,
    seconds: float,
    *,
    timed_out: bool = False,
    timeout_s: float | None = None,
    stderr: str = "",
) -> Run:
    """A Run from a run's JSON: `noetl run --json` (`status` ok / fail / canceled, or
    `invalid` with `diagnostics`, or `error`), or the API's execution object."""
    verdicts = tuple(soft_verdicts(doc))
    execution_id = str(doc["execution_id"]) if doc and doc.get("execution_id") else None
    if timed_out:
        limit = f"{timeout_s:g} s" if timeout_s is not None else "the timeout"
        return Run(
            Got.TIMEOUT, seconds, f"no terminal status within {limit}", verdicts, execution_id
        )
    if doc is None:
        last = [line for line in stderr.splitlines() if line.strip()]
        error = one_line(last[-1]) if last else "no JSON answer and nothing on stderr"
        return Run(Got.ERROR, seconds, error)
    status = doc.get("status")
    if status == "ok":
        return Run(Got.COMPLETED, seconds, None, verdicts, execution_id)
    if status in ("fail", "canceled"):
        return Run(
            Got.FAILED, seconds, first_error(doc) or f"execution {status}", verdicts, execution_id
        )
    if status == "invalid":
        items = [d for d in doc.get("diagnostics") or [] if d.get("severity", "error") == "error"]
        error = _diagnostic(items[0]) if items else "invalid playbook"
        return Run(Got.INVALID, seconds, error, diagnostics=len(items))
    return Run(Got.ERROR, seconds, one_line(str(doc.get("error") or f"status {status!r}")))


# --- grading -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Graded:
    passed: bool
    note: str | None = None


def grade(expected: str, got: Got) -> Graded:
    """Upstream's rule: a terminal status within the timeout, the one expected."""
    if expected == "COMPLETED":
        return Graded(got is Got.COMPLETED)
    if got is Got.FAILED:
        return Graded(True)
    if got is Got.INVALID:
        return Graded(True, "refused as invalid before it ran; upstream fails it when it runs")
    return Graded(False)


@dataclass(frozen=True, slots=True)
class CaseResult:
    case: Case
    run: Run
    graded: Graded = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "graded", grade(self.case.expected, self.run.got))

    @property
    def soft(self) -> str | None:
        return verdict_summary(self.run.verdicts)

    @property
    def note(self) -> str | None:
        notes = [self.graded.note] if self.graded.note else []
        if self.run.got is Got.COMPLETED and self.soft and self.soft.startswith("FAILED"):
            notes.append("completed, but its own checks say it failed")
        return "; ".join(notes) or None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.case.path,
            "group": self.case.group,
            "core": self.case.core,
            "expected": self.case.expected,
            "got": self.run.got.value,
            "passed": self.graded.passed,
            "seconds": round(self.run.seconds, 2),
            "error": self.run.error,
            "diagnostics": self.run.diagnostics,
            "soft_verdict": self.soft,
            "verdicts": [v.to_dict() for v in self.run.verdicts],
            "note": self.note,
            "execution_id": self.run.execution_id,
        }


_NUMBER = re.compile(r"\b\d+\b")
_STEP_PREFIX = re.compile(r"^step '[^']*': |^step [^ :]+: ")
_DIAGNOSTIC_PREFIX = re.compile(r"^(E\d+|W\d+)( line \d+)?( step '[^']*')?: ")


def cause(result: CaseResult) -> str:
    """What a failed case failed on, with what varies between cases taken out (the step,
    the line, numbers), so that the same cause groups together."""
    run = result.run
    error = run.error or ""
    if run.got is Got.INVALID:
        code = _DIAGNOSTIC_PREFIX.match(error)
        message = _DIAGNOSTIC_PREFIX.sub("", error)
        return f"invalid: {code.group(1) if code else '?'} {message}"
    if run.got is Got.TIMEOUT:
        return "timeout"
    if run.got is Got.COMPLETED:
        return f"completed (expected {result.case.expected})"
    return f"{run.got.value.lower()}: " + _NUMBER.sub("N", _STEP_PREFIX.sub("", error))


# --- report ------------------------------------------------------------------------------


def _totals(results: Sequence[CaseResult]) -> dict[str, Any]:
    got = Counter(r.run.got.value for r in results)
    return {
        "cases": len(results),
        "passed": sum(r.graded.passed for r in results),
        "got": dict(sorted(got.items())),
        "soft_failed": sum(1 for r in results if r.soft and r.soft.startswith("FAILED")),
    }


def report(results: Sequence[CaseResult], **about: Any) -> dict[str, Any]:
    """The whole report as one JSON-ready document: `about` (mode, kit, ...), the cases,
    totals per group and overall, and the causes of failure, most frequent first."""
    groups: dict[str, list[CaseResult]] = {}
    for result in results:
        groups.setdefault(result.case.group, []).append(result)
    causes: dict[str, list[str]] = {}
    for result in results:
        if not result.graded.passed:
            causes.setdefault(cause(result), []).append(result.case.path)
    ranked = sorted(causes.items(), key=lambda item: (-len(item[1]), item[0]))
    return {
        **about,
        "cases": [r.to_dict() for r in results],
        "totals": {
            **{name: _totals(members) for name, members in groups.items()},
            "all": _totals(results),
        },
        "causes": [{"cause": c, "count": len(paths), "cases": paths} for c, paths in ranked],
    }


def _short(path: str) -> str:
    return path.removeprefix("fixtures/playbooks/")


def render_text(doc: Mapping[str, Any]) -> str:
    """The report for a terminal: a line per case (the error and the soft verdict below
    it), the totals per group, the causes of failure."""
    out = [
        f"{'':4}  {'group':<14}  {'expected':<9}  {'got':<9}  {'secs':>6}  path "
        "(under fixtures/playbooks/)"
    ]
    for case in doc["cases"]:
        mark = "ok" if case["passed"] else "FAIL"
        out.append(
            f"{mark:<4}  {case['group']:<14}  {case['expected']:<9}  {case['got']:<9}  "
            f"{case['seconds']:>6.1f}  {_short(case['path'])}"
        )
        more = case["diagnostics"] - 1
        if case["error"]:
            out.append(f"{'':6}error: {case['error']}" + (f" (+{more} more)" if more > 0 else ""))
        for label in ("soft_verdict", "note"):
            if case[label]:
                out.append(f"{'':6}{label.replace('_', ' ')}: {case[label]}")
    out.append("")
    for name, totals in doc["totals"].items():
        got = ", ".join(f"{k} {v}" for k, v in totals["got"].items())
        soft = f"; soft verdict failed {totals['soft_failed']}" if totals["soft_failed"] else ""
        out.append(f"{name:<14}  {totals['passed']}/{totals['cases']} passed  ({got}{soft})")
    if doc["causes"]:
        out += ["", "causes of failure (by first error):"]
        out += [f"{item['count']:>4}  {item['cause']}" for item in doc["causes"]]
    return "\n".join(out)
