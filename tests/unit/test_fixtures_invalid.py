"""Every invalid playbook in tests/fixtures/invalid yields the diagnostic its header names.

Header format (first lines of each fixture):

    # expect: <line> <code> <text>
    # legacy: off            (optional: load with allow_legacy=False)

`<text>` is what `Diagnostic.format()` prints after `error <code>: `, without the trailing
`[path]`, so it includes the `step 'name':` prefix when the diagnostic has a step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from noetl.dsl import Diagnostic, load_playbook, load_playbook_text
from noetl.errors import PlaybookError

INVALID = Path(__file__).resolve().parents[1] / "fixtures" / "invalid"
FIXTURES = sorted(INVALID.glob("*.yaml"))
HEADER = re.compile(r"^# expect: (?P<line>\d+) (?P<code>[EW]\d{3}) (?P<text>.+)$")
NAME = re.compile(r"^\d{2}_[a-z0-9_]+\.yaml$")


@dataclass(frozen=True)
class Expectation:
    line: int
    code: str
    text: str
    allow_legacy: bool


def read_expectation(path: Path) -> Expectation:
    lines = path.read_text(encoding="utf-8").splitlines()
    match = HEADER.match(lines[0])
    assert match, f"{path.name}: first line must be '# expect: <line> <code> <text>'"
    legacy_off = len(lines) > 1 and lines[1].strip() == "# legacy: off"
    return Expectation(
        line=int(match["line"]),
        code=match["code"],
        text=match["text"],
        allow_legacy=not legacy_off,
    )


def shown_text(diag: Diagnostic) -> str:
    """The part of `format()` after `error CODE: `, without the trailing `[path]`."""
    marker = f" {diag.severity.value} {diag.code}: "
    text = diag.format().split(marker, 1)[1]
    suffix = f" [{diag.key}]"
    if diag.path:
        assert text.endswith(suffix)
        text = text[: -len(suffix)]
    return text


def test_there_are_enough_fixtures() -> None:
    assert len(FIXTURES) >= 30
    bad_names = [p.name for p in FIXTURES if not NAME.match(p.name)]
    assert bad_names == []


def test_fixture_numbers_are_unique() -> None:
    numbers = [p.name[:2] for p in FIXTURES]
    assert len(numbers) == len(set(numbers))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_first_error_is_the_expected_one(path: Path) -> None:
    expected = read_expectation(path)
    result = load_playbook(path, allow_legacy=expected.allow_legacy)
    assert result.ok is False
    assert result.playbook is None
    assert result.errors, "an invalid fixture must give at least one error"
    first = result.errors[0]
    assert (first.line, first.code, shown_text(first)) == (
        expected.line,
        expected.code,
        expected.text,
    )
    assert first.file == str(path)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_each_fixture_exercises_one_error(path: Path) -> None:
    expected = read_expectation(path)
    result = load_playbook(path, allow_legacy=expected.allow_legacy)
    assert [d.code for d in result.errors] == [expected.code]


def test_legacy_off_fixtures_are_valid_with_legacy_on() -> None:
    """The `# legacy: off` fixtures fail only because legacy forms are turned off."""
    legacy_off = [p for p in FIXTURES if not read_expectation(p).allow_legacy]
    assert len(legacy_off) >= 2
    for path in legacy_off:
        result = load_playbook(path, allow_legacy=True)
        assert result.ok, [d.format() for d in result.errors]
        assert {d.code for d in result.warnings} == {"W201"}


def test_shown_text_strips_only_the_path() -> None:
    diag = Diagnostic(
        code="E100",
        message="unknown step key 'nxt'",
        file="f.yaml",
        line=3,
        step="a",
        path=("workflow", 0, "nxt"),
    )
    assert (
        diag.format() == "f.yaml:3: error E100: step 'a': unknown step key 'nxt' [workflow[0].nxt]"
    )
    assert shown_text(diag) == "step 'a': unknown step key 'nxt'"


def test_require_raises_playbook_error_with_every_error() -> None:
    path = INVALID / "02_unknown_step_key.yaml"
    result = load_playbook(path)
    with pytest.raises(PlaybookError) as info:
        result.require()
    assert info.value.diagnostics == result.errors
    assert str(info.value) == "\n".join(d.format() for d in result.errors)
    assert info.value.retryable is False


def test_text_and_file_loading_agree() -> None:
    path = INVALID / "15_next_edge_missing_step.yaml"
    from_file = load_playbook(path)
    from_text = load_playbook_text(path.read_bytes(), str(path))
    assert from_text.diagnostics == from_file.diagnostics
