"""The README's first playbook works exactly as shown."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import ROOT
from tests.helpers.cli import noetl


def test_readme_playbook_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(.*?)```", readme, re.DOTALL)
    assert block is not None
    playbook = tmp_path / "greet.yaml"
    playbook.write_text(block.group(1), encoding="utf-8")
    proc = noetl("run", playbook, "--json", "--set", "name=Ada", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["context"] == {"greeting": {"message": "Hello, Ada!"}, "loud": "HELLO, ADA!"}


def test_readme_commands_are_the_ci_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = 'pip install -e ".[dev]" && python -m pytest'
    assert test_command in readme
    assert test_command in ci
