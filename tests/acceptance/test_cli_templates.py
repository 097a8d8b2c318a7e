"""Templates in `noetl run`, end to end: runaway templates fail their steps at once with the
limit they break, and keys named like dict methods read as data everywhere."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers.cli import noetl
from tests.helpers.template_playbooks import (
    DATA_CONTEXT,
    DATA_SINK_BODY,
    DATA_SINK_FILE,
    DATA_WORKLOAD,
    data_first_playbook,
    runaway_errors,
    runaway_playbook,
)


def run_json(
    path: Path,
    db: Path,
    *extra: str,
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    # Before the render limits, the first of these steps alone ran for many minutes.
    proc = noetl(
        "run", path, "--json", "--db", db, *extra, env=env, timeout=timeout, no_traceback=True
    )
    return proc.returncode, json.loads(proc.stdout)


def test_runaway_templates_fail_their_steps_with_the_limit(
    tmp_path: Path, write_playbook: Callable[[str], Path]
) -> None:
    code, out = run_json(write_playbook(runaway_playbook()), tmp_path / "db.sqlite")
    assert code == 0, out  # `on_step_fail: continue`: every failure was handled
    errors = runaway_errors()
    steps = out["steps"]
    assert steps["start"] == {"status": "ok"}
    for step, error in errors.items():
        assert steps[step] == {"status": "failed", "error": error}, step


def test_mapping_keys_named_like_dict_methods_are_data(
    tmp_path: Path, write_playbook: Callable[[str], Path]
) -> None:
    out_dir = tmp_path / "out"
    path = write_playbook(data_first_playbook(str(out_dir)))
    code, out = run_json(
        path,
        tmp_path / "db.sqlite",
        "--workload",
        _workload(tmp_path),
        env={"NOETL_SINKS_FILE_ROOT": str(tmp_path)},  # the sink writes under tmp_path
    )
    assert code == 0, out
    assert {k: v for k, v in out["context"].items() if k in DATA_CONTEXT} == DATA_CONTEXT
    assert {name: s["status"] for name, s in out["steps"].items()} == {
        "start": "ok",
        "each": "ok",
        "decide": "ok",
    }
    assert json.loads((out_dir / DATA_SINK_FILE).read_text()) == DATA_SINK_BODY


def _workload(tmp_path: Path) -> str:
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(DATA_WORKLOAD), encoding="utf-8")
    return str(path)
