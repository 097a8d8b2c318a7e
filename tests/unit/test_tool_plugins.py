"""Third-party tools through the `noetl.tools` entry point group: a real distribution on
sys.path (a `.dist-info` with `entry_points.txt`), found by importlib.metadata."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl.core import Task
from noetl.dsl import kinds
from noetl.dsl.validate import load_playbook_text
from noetl.worker.python_pool import PythonPool
from noetl.worker.tools import default_registry

PLUGIN = """
from pydantic import BaseModel, ConfigDict

from noetl.core import Outcome


class ShoutSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    word: str


class ShoutTool:
    kind = "shout"
    spec_model = ShoutSpec

    def run(self, task):
        return Outcome(task.task_id, ok=True, this=task.spec["word"].upper() + "!")
"""


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[None]:
    (tmp_path / "noetl_shout.py").write_text(PLUGIN, encoding="utf-8")
    dist = tmp_path / "noetl_shout-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: noetl-shout\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[noetl.tools]\nshout = noetl_shout:ShoutTool\n")
    # dict's own methods: the kinds' overrides would load the plugins while saving them
    saved_specs = dict(dict.items(kinds.TOOL_SPECS))
    saved = (kinds._plugins, saved_specs, kinds.TOOL_SPECS._loaded)  # type: ignore[attr-defined]
    sys.path.insert(0, str(tmp_path))
    kinds._plugins = None
    kinds.TOOL_SPECS._loaded = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("noetl_shout", None)
        kinds._plugins = saved[0]
        dict.clear(kinds.TOOL_SPECS)
        dict.update(kinds.TOOL_SPECS, saved[1])
        kinds.TOOL_SPECS._loaded = saved[2]  # type: ignore[attr-defined]


def playbook(spec: str) -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: noetl.io/v2
        kind: Playbook
        metadata: {{name: plug}}
        workflow:
          - step: s
            tool: {{kind: shout, spec: {spec}}}
        """
    )


def test_a_plugin_kind_validates_with_its_spec_model_and_runs(plugin: None) -> None:
    assert load_playbook_text(playbook("{word: hi}")).ok
    bad = load_playbook_text(playbook("{wrd: hi}"))
    assert not bad.ok
    assert any("wrd" in d.message for d in bad.diagnostics)

    with PythonPool(processes=1) as pool:
        registry = default_registry(pool)
        assert "shout" in registry
        task = Task("e.s", "e", "s", "shout", {"word": "hi"}, {}, {}, "e:s")
        assert registry.run(task).this == "HI!"


def test_without_plugins_an_unknown_kind_is_still_an_error() -> None:
    result = load_playbook_text(playbook("{word: hi}"))
    assert not result.ok
    assert any(d.code == "E304" for d in result.diagnostics)
