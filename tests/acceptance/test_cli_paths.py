"""Paths a playbook names stay under their configured root: the file sink's `path`
(`sinks.file.root`) and the `playbook` tool's `path` (`playbooks.root`), with the real
`noetl run` CLI in a subprocess (root: its working directory by default). `..`, an
absolute path elsewhere and a symlink leading out are refused with an error naming the
step, the field, the path and the root; a path inside works; and a file that is not a
playbook never has its contents quoted in a step's error."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.helpers.cli import noetl

# What a secret-bearing file holds; it must never reach a step error, a log or the output.
CANARY = "sk-live-CANARY-7f3a9"
SECRET_FILE = f"api_key: {CANARY}\npassword: hunter2-{CANARY}\n"
CHILD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child}
workflow:
  - step: start
    tool: {kind: noop, args: {n: 1}}
    result: {as: got}
"""


def sink_step(name: str, path: str) -> str:
    return (
        f"  - step: {name}\n"
        "    tool: {kind: noop, args: {a: 1}}\n"
        f"    result: {{sink: [{{file: {{path: {json.dumps(path)}}}}}]}}\n"
    )


def tool_step(name: str, path: str) -> str:
    return f"  - step: {name}\n    tool: {{kind: playbook, path: {json.dumps(path)}}}\n"


def playbook(steps: dict[str, str]) -> str:
    """Every step called at once from `start`; a failure is recorded and the rest go on."""
    names = ", ".join(steps)
    head = (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: paths}\n"
        "policy: {on_step_fail: continue}\nworkflow:\n"
        f"  - step: start\n    next: {{mode: inclusive, to: [{names}]}}\n"
    )
    return head + "".join(steps.values())


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """root/ (the working directory), outside/ with a secret file, root/link -> outside."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.yaml").write_text(SECRET_FILE, encoding="utf-8")
    (root / "secret.yaml").write_text(SECRET_FILE, encoding="utf-8")  # inside, not a playbook
    (root / "child.yaml").write_text(CHILD, encoding="utf-8")
    (root / "link").symlink_to(outside, target_is_directory=True)
    return {"root": root, "outside": outside, "db": tmp_path / "noetl.db"}


def run(
    text: str, layout: dict[str, Path], **env: str
) -> tuple[subprocess.CompletedProcess[str], Any]:
    path = layout["root"].parent / "paths.yaml"
    path.write_text(text, encoding="utf-8")
    proc = noetl(
        "run",
        path,
        "--json",
        "--db",
        layout["db"],
        cwd=layout["root"],
        env={"PYTHONPATH": str(ROOT), **env},
        no_traceback=True,
    )
    return proc, json.loads(proc.stdout)


def test_file_sink_paths_outside_the_root_are_refused_and_inside_work(
    layout: dict[str, Path],
) -> None:
    root, outside = layout["root"], layout["outside"]
    escapes = {
        "dotdot": "../outside/x.json",
        "absolute": str(outside / "y.json"),
        "symlink": "link/z.json",
    }
    steps = {name: sink_step(name, path) for name, path in escapes.items()}
    steps["inside"] = sink_step("inside", "out/ok.json")
    steps["inside_abs"] = sink_step("inside_abs", str(root / "abs.json"))

    _, out = run(playbook(steps), layout)

    for name, path in escapes.items():
        step = out["steps"][name]
        assert step["status"] == "failed", step
        assert f"step '{name}': spec.path {path!r} resolves outside the root " in step["error"]
        assert str(root.resolve()) in step["error"]
        assert "sinks.file.root, NOETL_SINKS_FILE_ROOT" in step["error"]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.yaml"]  # nothing written
    assert (out["steps"]["inside"]["status"], out["steps"]["inside_abs"]["status"]) == (
        "ok",
        "ok",
    )
    assert json.loads((root / "out" / "ok.json").read_text()) == {"a": 1}
    assert json.loads((root / "abs.json").read_text()) == {"a": 1}


def test_playbook_tool_paths_outside_the_root_are_refused_and_never_quoted(
    layout: dict[str, Path],
) -> None:
    root, outside = layout["root"], layout["outside"]
    escapes = {
        "dotdot": "../outside/secret.yaml",
        "absolute": "/etc/passwd",
        "symlink": "link/secret.yaml",
    }
    steps = {name: tool_step(name, path) for name, path in escapes.items()}
    steps["not_a_playbook"] = tool_step("not_a_playbook", "secret.yaml")
    steps["inside"] = tool_step("inside", "child.yaml")

    proc, out = run(playbook(steps), layout)

    for name, path in escapes.items():
        error = out["steps"][name]["error"]
        assert f"step '{name}': spec.path {path!r} resolves outside the root " in error
        assert str(root.resolve()) in error and "playbooks.root, NOETL_PLAYBOOKS_ROOT" in error
    error = out["steps"]["not_a_playbook"]["error"]
    assert "playbook file 'secret.yaml' is not a valid playbook (E" in error
    assert out["steps"]["inside"]["status"] == "ok"
    everything = proc.stdout + proc.stderr
    assert CANARY not in everything and "hunter2" not in everything
    assert "root:x:0:0" not in everything
    assert outside.exists()  # untouched


def test_a_file_read_under_a_wide_root_never_reaches_the_step_error(
    layout: dict[str, Path],
) -> None:
    """With the root at `/`, reading /etc/passwd is allowed: it is not a playbook, and the
    error says where and which code, not what the file holds."""
    secret = layout["outside"] / "secret.yaml"
    steps = {
        "passwd": tool_step("passwd", "/etc/passwd"),
        "secret": tool_step("secret", str(secret)),
    }

    proc, out = run(playbook(steps), layout, NOETL_PLAYBOOKS_ROOT="/")

    for name in steps:
        error = out["steps"][name]["error"]
        assert "is not a valid playbook (E" in error and "noetl validate" in error
    everything = proc.stdout + proc.stderr
    passwd_first = Path("/etc/passwd").read_text().splitlines()[0]
    assert passwd_first not in everything and "root:x:0:0" not in everything
    assert CANARY not in everything and "hunter2" not in everything
