"""Paths stay under their roots on a worker too: a real server and worker on PostgreSQL,
the roots given to the worker by its configuration (NOETL_SINKS_FILE_ROOT,
NOETL_PLAYBOOKS_ROOT), or its data directory by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.test_cli_paths import CANARY, playbook, sink_step, tool_step
from tests.distributed.cluster import Cluster

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_a_worker_refuses_paths_outside_its_configured_roots(
    cluster: Cluster, tmp_path: Path
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.yaml").write_text(f"api_key: {CANARY}\n", encoding="utf-8")
    (root / "secret.yaml").write_text(f"api_key: {CANARY}\n", encoding="utf-8")
    (root / "link").symlink_to(outside, target_is_directory=True)
    # The worker runs in the repository, not in `root`: only its settings name the root.
    cluster.env.update(NOETL_SINKS_FILE_ROOT=str(root), NOETL_PLAYBOOKS_ROOT=str(root))
    cluster.start_server()
    worker = cluster.start_worker("w1")
    steps = {
        "sink_dotdot": sink_step("sink_dotdot", "../outside/x.json"),
        "sink_absolute": sink_step("sink_absolute", str(outside / "y.json")),
        "sink_symlink": sink_step("sink_symlink", "link/z.json"),
        "sink_inside": sink_step("sink_inside", "out/ok.json"),
        "tool_dotdot": tool_step("tool_dotdot", "../outside/secret.yaml"),
        "tool_absolute": tool_step("tool_absolute", "/etc/passwd"),
        "tool_symlink": tool_step("tool_symlink", "link/secret.yaml"),
        "tool_not_a_playbook": tool_step("tool_not_a_playbook", "secret.yaml"),
    }

    execution_id = cluster.start_execution(playbook(steps))
    result = cluster.wait_finished(execution_id, timeout=90)

    errors = {name: result["steps"][name].get("error") or "" for name in steps}
    for name in steps:
        if name in ("sink_inside", "tool_not_a_playbook"):
            continue
        assert f"step '{name}': spec.path " in errors[name], errors
        assert f"resolves outside the root {root.resolve()}" in errors[name], errors
    assert result["steps"]["sink_inside"]["status"] == "ok"
    assert json.loads((root / "out" / "ok.json").read_text()) == {"a": 1}
    assert sorted(p.name for p in outside.iterdir()) == ["secret.yaml"]
    assert "is not a valid playbook (E" in errors["tool_not_a_playbook"]
    everything = json.dumps(result) + worker.output() + json.dumps(cluster.events(execution_id))
    assert CANARY not in everything and "root:x:0:0" not in everything


def test_a_workers_default_root_is_its_data_directory(cluster: Cluster, tmp_path: Path) -> None:
    data = tmp_path / "xdg"
    cluster.env["XDG_DATA_HOME"] = str(data)
    cluster.start_server()
    cluster.start_worker("w1")
    steps = {
        "inside": sink_step("inside", "reports/ok.json"),
        "escape": sink_step("escape", "../escaped.json"),
    }

    execution_id = cluster.start_execution(playbook(steps))
    result = cluster.wait_finished(execution_id, timeout=90)

    assert result["steps"]["inside"]["status"] == "ok"
    assert json.loads((data / "noetl" / "reports" / "ok.json").read_text()) == {"a": 1}
    error = result["steps"]["escape"]["error"]
    assert f"resolves outside the root {(data / 'noetl').resolve()}" in error
    assert not (data / "escaped.json").exists()
