"""`noetl codemod`, run as a real subprocess on real files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.helpers.cli import noetl

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"
EXPECTED = LEGACY / "expected"


def codemod(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return noetl("codemod", *args, timeout=60)


def copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copyfile(LEGACY / name, target)
    return target


def test_prints_the_rewritten_text_and_leaves_the_file(tmp_path: Path) -> None:
    path = copy("iter_forms.yaml", tmp_path)
    before = path.read_text(encoding="utf-8")
    proc = codemod(path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (EXPECTED / "iter_forms.yaml").read_text(encoding="utf-8")
    assert proc.stderr.splitlines() == [
        f"{path}: line 13: step 'start': 'iter' -> 'loop'",
        f"{path}: line 24: step 'fan': 'iterator' -> 'loop'",
        f"{path}: line 25: step 'fan': loop 'in' -> 'collection'",
        f"{path}: line 26: step 'fan': loop 'iterator' -> 'element'",
        f"{path}: line 28: step 'fan': loop 'spec.mode' -> 'mode'",
        f"{path}: line 29: step 'fan': loop 'spec.max_in_flight' -> 'max_concurrency'",
        f"{path}: line 34: step 'listed': 'over' -> 'loop'",
        f"{path}: line 41: step 'flow': 'coll' -> 'loop'",
    ]
    assert path.read_text(encoding="utf-8") == before


def test_write_rewrites_in_place_and_then_check_passes(tmp_path: Path) -> None:
    path = copy("save_forms.yaml", tmp_path)
    proc = codemod("--write", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == f"{path}: rewritten"
    assert path.read_text(encoding="utf-8") == (EXPECTED / "save_forms.yaml").read_text(
        encoding="utf-8"
    )
    again = codemod("--check", path)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")


def test_check_exits_1_when_a_file_would_change_and_touches_nothing(tmp_path: Path) -> None:
    legacy = copy("four_space.yaml", tmp_path)
    canonical = copy("canonical.yaml", tmp_path)
    before = legacy.read_text(encoding="utf-8")
    proc = codemod("--check", canonical, legacy)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert f"{legacy}: would be rewritten" in proc.stderr.splitlines()
    assert proc.stderr.splitlines()[-1] == "1 file(s) would change"
    assert str(canonical) not in proc.stderr
    assert legacy.read_text(encoding="utf-8") == before


def test_check_exits_0_for_a_canonical_file(tmp_path: Path) -> None:
    path = copy("canonical.yaml", tmp_path)
    proc = codemod("--check", path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_write_leaves_a_canonical_file_byte_for_byte(tmp_path: Path) -> None:
    path = copy("canonical.yaml", tmp_path)
    before = path.read_bytes()
    proc = codemod("-w", path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert path.read_bytes() == before


def test_tool_iterator_is_reported_but_is_not_a_change(tmp_path: Path) -> None:
    path = copy("tool_iterator.yaml", tmp_path)
    proc = codemod("--check", path)
    assert proc.returncode == 0
    assert proc.stderr == (
        f"{path}: line 7: step 'start': 'tool: iterator' cannot be rewritten automatically; "
        "rewrite it by hand as a 'loop:' block on the step "
        "(loop: {collection: ..., element: ...})\n"
    )


def test_an_unparsable_file_fails_with_its_line_and_the_others_are_still_rewritten(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("metadata:\n  name: t\nworkflow: [\n", encoding="utf-8")
    good = copy("four_space.yaml", tmp_path)
    proc = codemod("--write", bad, good)
    assert proc.returncode == 1
    assert f"{bad}:3: error E005: is not valid YAML" in proc.stderr
    assert good.read_text(encoding="utf-8") == (EXPECTED / "four_space.yaml").read_text(
        encoding="utf-8"
    )
