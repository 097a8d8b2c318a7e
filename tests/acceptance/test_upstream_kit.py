"""Every playbook of the upstream NoETL conformance kit is read without an internal error:
it validates, or fails with exactly ONE error naming what this engine does not support yet
(E330) or the tool kinds it does not have (E331). A negative fixture (expected to end
FAILED) may fail validation any way it likes, but never crash the validator.

The kit lives beside the repository (`../shared/upstream-e2e`); it is test data of
upstream's, never copied into the project.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from noetl.dsl import load_playbook
from noetl.dsl.model import UPSTREAM

KIT = Path(__file__).resolve().parents[2].parent / "shared" / "upstream-e2e"
PLAYBOOKS = KIT / "fixtures" / "playbooks"
UNSUPPORTED = {"E330", "E331"}


def _expected() -> dict[str, str]:
    cases = KIT / "CASES.tsv"
    if not cases.is_file():
        return {}
    with cases.open(encoding="utf-8") as handle:
        return {row["path"]: row["expected"] for row in csv.DictReader(handle, delimiter="\t")}


def _playbooks() -> list[Path]:
    return sorted(PLAYBOOKS.rglob("*.yaml")) if PLAYBOOKS.is_dir() else []


@pytest.mark.skipif(not PLAYBOOKS.is_dir(), reason=f"the upstream conformance kit is not at {KIT}")
def test_every_kit_playbook_validates_or_names_what_is_missing() -> None:
    expected = _expected()
    found = _playbooks()
    assert len(found) >= 100, f"only {len(found)} playbooks under {PLAYBOOKS}"
    valid, unsupported, problems = [], [], []
    for path in found:
        relative = path.relative_to(KIT).as_posix()
        result = load_playbook(path)  # raises only on an internal error
        errors = result.errors
        if expected.get(relative) == "FAILED":
            continue
        if not errors:
            assert result.playbook is not None
            valid.append(relative)
        elif len(errors) == 1 and errors[0].code in UNSUPPORTED:
            assert errors[0].line, relative
            unsupported.append(relative)
        else:
            problems.append(f"{relative}: {[d.format() for d in errors]}")
    assert problems == []
    # What this engine reads today; a change that loses one of them is a regression.
    assert len(valid) >= 39, valid


@pytest.mark.skipif(not PLAYBOOKS.is_dir(), reason=f"the upstream conformance kit is not at {KIT}")
def test_the_kit_is_read_in_upstream_dialect() -> None:
    read = [load_playbook(path) for path in _playbooks()]
    upstream = [r for r in read if r.notes and r.notes[0].code == "I001"]
    # A file with no construct only upstream has (plain `def main()` code and arcs) is
    # the same in both readings and is read natively.
    assert len(upstream) >= len(read) - 2
    for result in read:
        if result.playbook is not None and result.notes:
            assert result.playbook.dialect == UPSTREAM
