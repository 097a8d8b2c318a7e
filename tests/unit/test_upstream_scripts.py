"""Code and SQL kept in a file (`script:`): read into the playbook when an execution
starts (noetl.scripts), so the workers that run the tasks need no copy of the file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from noetl.core import Task
from noetl.decision.decider import Decider
from noetl.dsl import load_playbook_text
from noetl.dsl.model import Playbook
from noetl.errors import PlaybookError
from noetl.scripts import has_scripts, read_scripts, script_reader
from noetl.store import SqliteStore
from noetl.worker.tools import NoopTool, ToolRegistry

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: sample
  path: tests/upstream/scripts
"""


def text(body: str) -> str:
    return HEAD + textwrap.dedent(body)


def load(body: str) -> Playbook:
    result = load_playbook_text(text(body), "sample.yaml")
    assert result.errors == [], [d.format() for d in result.errors]
    assert result.playbook is not None
    return result.playbook


def errors(body: str) -> list[str]:
    return [d.format() for d in load_playbook_text(text(body), "sample.yaml").errors]


PYTHON_FILE = """
workload:
  script_path: ./scripts/greet.py
workflow:
  - step: start
    tool:
      kind: python
      script:
        uri: "{{ script_path }}"
        source: {type: file}
      input: {name: Ada, count: 2}
"""

SQL_FILE = """
workflow:
  - step: start
    tool:
      kind: postgres
      auth: pg_local
      script: {uri: sql/setup.sql, source: {type: file}}
    next:
      spec: {mode: exclusive}
      arcs: [{step: ducks}]
  - step: ducks
    tool:
      kind: duckdb
      script: {uri: sql/setup.sql, source: {type: file}}
"""


def files(root: Path) -> None:
    (root / "scripts").mkdir()
    (root / "scripts" / "greet.py").write_text(
        "def main(name, count=1):\n    return {'said': [name] * count}\n", encoding="utf-8"
    )
    (root / "sql").mkdir()
    (root / "sql" / "setup.sql").write_text("CREATE TABLE t (id int);\n", encoding="utf-8")


# --- reading the dialect ----------------------------------------------------------------


def test_a_file_script_is_kept_as_the_path_to_read() -> None:
    playbook = load(PYTHON_FILE)
    tool = playbook.workflow[0].tool
    assert tool is not None
    assert tool.spec == {"script": "{{ script_path }}", "style": "toplevel"}
    assert has_scripts(playbook)
    sql = load(SQL_FILE)
    assert [s.tool.spec.get("script") for s in sql.workflow if s.tool] == ["sql/setup.sql"] * 2


@pytest.mark.parametrize("source", ["gcs", "s3", "http"])
def test_a_remote_script_source_is_one_error_naming_its_type(source: str) -> None:
    found = errors(
        f"""
        workflow:
          - step: start
            tool:
              kind: python
              script: {{uri: "x://bucket/run.py", source: {{type: {source}}}}}
        """
    )
    assert len(found) == 1, found
    assert "E330" in found[0]
    assert f"`script:` from a '{source}' source" in found[0]


def test_a_script_and_inline_code_together_are_refused() -> None:
    found = errors(
        """
        workflow:
          - step: start
            tool:
              kind: postgres
              command: SELECT 1
              script: {uri: a.sql, source: {type: file}}
        """
    )
    assert any("both 'script' and 'command'" in line for line in found), found


def test_a_file_script_on_an_http_tool_is_reported() -> None:
    found = errors(
        """
        workflow:
          - step: start
            tool:
              kind: http
              url: http://127.0.0.1:1/
              script: {uri: a.py, source: {type: file}}
        """
    )
    assert len(found) == 1 and "`script:` files for a http tool" in found[0], found


def test_an_inline_sql_script_is_the_command() -> None:
    playbook = load(
        """
        workflow:
          - step: start
            tool:
              kind: duckdb
              script: {uri: inline, source: {type: inline, code: SELECT 1 AS one}}
        """
    )
    tool = playbook.workflow[0].tool
    assert tool is not None and tool.spec["command"] == "SELECT 1 AS one"


# --- reading the files ------------------------------------------------------------------


def test_the_files_are_read_into_code_and_command(tmp_path: Path) -> None:
    files(tmp_path)
    python = read_scripts(load(PYTHON_FILE), tmp_path)
    tool = python.workflow[0].tool
    assert tool is not None and "script" not in tool.spec
    assert tool.spec["code"].startswith("def main(name, count=1):")
    assert tool.spec["style"] == "toplevel" and tool.args == {"name": "Ada", "count": 2}
    assert not has_scripts(python)
    sql = read_scripts(load(SQL_FILE), tmp_path)
    specs = [s.tool.spec for s in sql.workflow if s.tool]
    assert [spec["command"] for spec in specs] == ["CREATE TABLE t (id int);\n"] * 2
    assert all("script" not in spec for spec in specs)
    # The result is still a valid playbook: it survives the JSON an execution keeps.
    again = Playbook.model_validate_json(sql.model_dump_json(by_alias=True))
    assert again == sql


def test_a_playbook_without_scripts_is_returned_as_it_is(tmp_path: Path) -> None:
    playbook = load(
        """
        workflow:
          - step: start
            tool: {kind: python, input: {}, code: "result = 1"}
        """
    )
    assert read_scripts(playbook, tmp_path) is playbook


def test_a_missing_file_names_the_step_and_the_path(tmp_path: Path) -> None:
    with pytest.raises(PlaybookError) as caught:
        read_scripts(load(PYTHON_FILE), tmp_path, file="sample.yaml")
    (diag,) = caught.value.diagnostics
    assert (diag.code, diag.step) == ("E332", "start")
    assert diag.path == ("workflow", 0, "tool", "spec", "script")
    assert "no file './scripts/greet.py'" in diag.message
    assert "playbooks.root" in diag.message


def test_a_path_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.sql").write_text("SELECT 1", encoding="utf-8")
    playbook = load(SQL_FILE.replace("sql/setup.sql", "../secret.sql"))
    with pytest.raises(PlaybookError) as caught:
        read_scripts(playbook, root)
    messages = [d.message for d in caught.value.diagnostics]
    assert len(messages) == 2  # every script that cannot be read, at once
    assert all("resolves outside the root" in m for m in messages), messages


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    files(tmp_path)
    with pytest.raises(PlaybookError, match="over the limit of 10"):
        read_scripts(load(PYTHON_FILE), tmp_path, max_bytes=10)


def test_a_path_template_must_come_from_the_workload(tmp_path: Path) -> None:
    playbook = load(PYTHON_FILE.replace("{{ script_path }}", "{{ start.path }}"))
    with pytest.raises(PlaybookError, match="must render from the playbook's workload"):
        read_scripts(playbook, tmp_path)


def test_a_workbook_task_reads_its_script(tmp_path: Path) -> None:
    files(tmp_path)
    playbook = load(
        """
        workbook:
          - name: greet
            tool:
              kind: python
              script: {uri: scripts/greet.py, source: {type: file}}
        workflow:
          - step: start
            tool: {kind: workbook, name: greet, input: {name: Bo}}
        """
    )
    read = read_scripts(playbook, tmp_path)
    assert read.workbook[0].tool.spec["code"].startswith("def main(")


# --- where they are read ----------------------------------------------------------------


def test_the_decider_reads_them_when_it_loads_a_playbook_text(tmp_path: Path) -> None:
    files(tmp_path)
    store = SqliteStore(str(tmp_path / "noetl.db"))
    try:
        engine = Decider(store, scripts=script_reader(tmp_path)).engine(text(PYTHON_FILE), None)
        tool = engine.playbook.workflow[0].tool
        assert tool is not None and tool.spec["code"].startswith("def main(")
        with pytest.raises(PlaybookError, match="E332"):
            Decider(store, scripts=script_reader(tmp_path / "elsewhere")).engine(
                text(PYTHON_FILE), None
            )
    finally:
        store.close()


def test_a_worker_refuses_a_task_whose_script_was_not_read() -> None:
    registry = ToolRegistry([NoopTool()])
    task = Task(
        task_id="e.start",
        execution_id="e",
        step="start",
        kind="postgres",
        spec={"script": "sql/setup.sql"},
        args={},
        context={},
        key="e:start",
    )
    outcome = registry.run(task)
    assert not outcome.ok and outcome.error_type == "FatalError"
    assert "the script file 'sql/setup.sql' was not read" in (outcome.error or "")


def test_output_select_and_the_artifact_kind_read_as_select_and_artifact() -> None:
    body = """
        workflow:
          - step: start
            tool: {kind: python, input: {}, code: "result = {'n': 1, 'rows': [1, 2]}"}
            output:
              store: {kind: auto}
              output_select: [n]
            next:
              spec: {mode: exclusive}
              arcs: [{step: load}]
          - step: load
            tool:
              kind: artifact
              action: get
              input: {result_ref: "{{ start._ref }}"}
        """
    loaded = load_playbook_text(text(body), "sample.yaml")
    assert loaded.errors == [], [d.format() for d in loaded.errors]
    assert loaded.playbook is not None
    start, load = loaded.playbook.workflow
    assert start.result is not None and start.result.select == ["n"]
    assert load.tool is not None and load.tool.kind == "artifact"
    assert load.tool.args == {"result_ref": "{{ start._ref }}"}
    assert errors(body.replace("output_select: [n]", "output_select: n")) != []
