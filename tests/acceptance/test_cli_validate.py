"""`noetl validate`, `noetl lint` and `noetl schema`, run as a real subprocess."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from noetl.dsl.source import read_source, to_plain
from tests.helpers.cli import noetl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VALID = sorted((FIXTURES / "valid").glob("*.yaml"))

GOOD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: good
workflow:
  - step: start
    tool: noop
    next: end
  - step: end
    tool: noop
"""

SEVERAL_ERRORS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: broken
workflow:
  - step: start
    tool: noop
    nxt: load
  - step: load
    tool: {kind: http}
    next: missing
  - step: report
    when: "{{ done('ghost') }}"
    loop:
      collection: [1]
      max_concurrency: many
"""

WITH_WARNINGS = """\
metadata:
  name: warns
workflow:
  - step: start
    iter: [1, 2]
    tool: noop
  - step: orphan
    tool: noop
"""


def write(tmp_path: Path, text: str, name: str = "playbook.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@cache
def schema() -> dict[str, Any]:
    proc = noetl("schema")
    assert proc.returncode == 0, proc.stderr
    loaded: dict[str, Any] = json.loads(proc.stdout)
    return loaded


def test_validate_a_valid_file(tmp_path: Path) -> None:
    proc = noetl("validate", write(tmp_path, GOOD))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "1 file(s) checked: 0 error(s); all valid\n"
    assert proc.stderr == ""


def test_validate_lists_every_error(tmp_path: Path) -> None:
    path = write(tmp_path, SEVERAL_ERRORS)
    proc = noetl("validate", path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"{path}:8: error E100: step 'start': unknown step key 'nxt'; did you mean 'next'? "
        "[workflow[0].nxt]",
        f"{path}:10: error E101: step 'load': http tool is missing required key 'url' "
        "[workflow[1].tool.spec.url]",
        f"{path}:11: error E302: step 'load': next names step 'missing', which does not exist "
        "[workflow[1].next]",
        f"{path}:13: error E311: step 'report': done() names step 'ghost', which does not exist "
        "[workflow[2].when]",
        f"{path}:16: error E102: step 'report': 'max_concurrency' must be an integer; "
        "got a string 'many' [workflow[2].loop.max_concurrency]",
        "1 file(s) checked: 5 error(s)",
    ]


def test_validate_several_files_fails_if_one_fails(tmp_path: Path) -> None:
    good = write(tmp_path, GOOD, "good.yaml")
    bad = write(tmp_path, SEVERAL_ERRORS, "bad.yaml")
    proc = noetl("validate", good, bad)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == "2 file(s) checked: 5 error(s)"
    assert str(good) not in proc.stderr


def test_validate_a_directory(tmp_path: Path) -> None:
    (tmp_path / "nested").mkdir()
    write(tmp_path, GOOD, "a.yaml")
    write(tmp_path / "nested", GOOD, "b.yml")
    write(tmp_path, "not yaml, not looked at", "notes.txt")
    proc = noetl("validate", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "2 file(s) checked: 0 error(s); all valid\n"


def test_validate_json_output(tmp_path: Path) -> None:
    good = write(tmp_path, GOOD, "good.yaml")
    bad = write(tmp_path, SEVERAL_ERRORS, "bad.yaml")
    proc = noetl("validate", "--json", good, bad)
    assert proc.returncode == 1
    assert proc.stderr == ""
    payload = json.loads(proc.stdout)
    assert set(payload) == {"valid", "files"}
    assert payload["valid"] is False
    assert [(f["file"], f["valid"]) for f in payload["files"]] == [
        (str(good), True),
        (str(bad), False),
    ]
    assert payload["files"][0]["diagnostics"] == []
    diagnostics = payload["files"][1]["diagnostics"]
    assert [d["code"] for d in diagnostics] == ["E100", "E101", "E302", "E311", "E102"]
    assert diagnostics[0] == {
        "severity": "error",
        "code": "E100",
        "message": "unknown step key 'nxt'; did you mean 'next'?",
        "file": str(bad),
        "line": 8,
        "step": "start",
        "key": "workflow[0].nxt",
    }


def test_validate_hides_warnings_and_lint_shows_them(tmp_path: Path) -> None:
    path = write(tmp_path, WITH_WARNINGS)
    proc = noetl("validate", path)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stdout + proc.stderr

    proc = noetl("lint", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{path}:1: warning W402: apiVersion is missing; add 'apiVersion: noetl.io/v2'",
        f"{path}:5: warning W201: step 'start': 'iter' is a legacy form, normalized to 'loop'; "
        "run `noetl codemod` to rewrite it [workflow[0].iter]",
        f"{path}:7: warning W401: step 'orphan': step 'orphan' is unreachable from the entry "
        "step 'start' [workflow[1].step]",
        "1 file(s) checked: 0 error(s), 3 warning(s); all valid",
    ]
    assert proc.stderr == ""


def test_lint_strict_fails_on_warnings(tmp_path: Path) -> None:
    path = write(tmp_path, WITH_WARNINGS)
    proc = noetl("lint", "--strict", path)
    assert proc.returncode == 1
    assert "W401" in proc.stdout
    assert proc.stderr.splitlines() == ["failed: --strict treats warnings as errors"]

    proc = noetl("lint", "--strict", write(tmp_path, GOOD, "good.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_lint_json_includes_warnings(tmp_path: Path) -> None:
    proc = noetl("lint", "--json", write(tmp_path, WITH_WARNINGS))
    assert proc.returncode == 0
    diagnostics = json.loads(proc.stdout)["files"][0]["diagnostics"]
    assert [(d["severity"], d["code"]) for d in diagnostics] == [
        ("warning", "W402"),
        ("warning", "W201"),
        ("warning", "W401"),
    ]


def test_no_legacy_turns_legacy_forms_into_errors(tmp_path: Path) -> None:
    path = write(tmp_path, WITH_WARNINGS)
    proc = noetl("validate", "--no-legacy", path)
    assert proc.returncode == 1
    assert f"{path}:5: error E202: step 'start': 'iter' is a legacy form" in proc.stderr


def test_legacy_env_var_twin(tmp_path: Path) -> None:
    path = write(tmp_path, WITH_WARNINGS)
    proc = noetl("validate", path, env={"NOETL_ALLOW_LEGACY": "false"})
    assert proc.returncode == 1
    assert "E202" in proc.stderr


UNREADABLE = [
    ("malformed.yaml", b"a: [1, 2\n", "E005", "is not valid YAML"),
    ("empty.yaml", b"", "E004", "is empty; a playbook needs at least metadata and workflow"),
    ("comments.yaml", b"# only a comment\n", "E004", "is empty"),
    ("binary.yaml", b"\x7fELF\x02\x01\x01\x00\x00\x00", "E003", "is a binary file, not YAML text"),
    ("latin1.yaml", b"metadata:\n  name: caf\xe9\n", "E003", "is not UTF-8 text"),
    ("list.yaml", b"- just\n- a list\n", "E011", "a playbook must be a map"),
    ("missing.yaml", None, "E001", "file not found"),
]


def test_unreadable_files_give_one_line_each_and_no_traceback(tmp_path: Path) -> None:
    paths = []
    for name, content, _, _ in UNREADABLE:
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        paths.append(path)
    proc = noetl("validate", *paths)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == len(UNREADABLE) + 1  # one line per file, then the summary
    for line, path, (_, _, code, message) in zip(lines, paths, UNREADABLE, strict=False):
        assert line.startswith(f"{path}")
        assert f" error {code}: {message}" in line
    assert lines[-1] == f"{len(UNREADABLE)} file(s) checked: {len(UNREADABLE)} error(s)"


def test_validate_without_files_is_a_usage_error() -> None:
    proc = noetl("validate")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "Missing argument" in proc.stderr


# --- the JSON Schema ---------------------------------------------------------------------


def test_schema_is_a_draft_2020_12_json_schema() -> None:
    document = schema()
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert document["$id"] == "https://noetl.io/schemas/playbook-v2.json"
    assert document["required"] == ["metadata", "workflow"]
    assert document["additionalProperties"] is False
    assert set(document["properties"]) == {
        "apiVersion",
        "kind",
        "metadata",
        "workload",
        "workbook",
        "policy",
        "workflow",
        "triggers",
    }
    assert set(document["$defs"]["ToolSpecs"]["properties"]) == {
        "artifact",
        "duckdb",
        "http",
        "noop",
        "pipeline",
        "playbook",
        "postgres",
        "python",
        "workbook",
    }


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_valid_fixtures_are_valid_against_the_schema(path: Path) -> None:
    document = to_plain(read_source(path).tree)
    validator = jsonschema.Draft202012Validator(schema())
    assert [e.message for e in validator.iter_errors(document)] == []


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ({"metadata": {"name": "x"}}, []),  # no workflow
        ({"metadata": {"name": "x"}, "workflow": []}, ["workflow"]),
        (
            {"metadata": {"name": "x"}, "workflows": [{"step": "a"}], "workflow": [{"step": "a"}]},
            [],
        ),
        ({"metadata": {"name": "x"}, "workflow": [{"step": "a", "nxt": "b"}]}, ["workflow", 0]),
        ({"metadata": {"name": "x"}, "workflow": [{"step": "1bad"}]}, ["workflow", 0, "step"]),
        (
            {"metadata": {"name": "x"}, "workflow": [{"step": "a", "retry": "x"}]},
            ["workflow", 0, "retry"],
        ),
        (
            {
                "metadata": {"name": "x"},
                "workflow": [{"step": "a", "loop": {"collection": [], "max_concurrency": "many"}}],
            },
            ["workflow", 0, "loop"],
        ),
        (
            {
                "metadata": {"name": "x"},
                "workflow": [{"step": "a", "next": {"mode": "exclusiv", "to": ["a"]}}],
            },
            ["workflow", 0, "next"],
        ),
        (
            {
                "metadata": {"name": "x"},
                "workflow": [{"step": "a", "tool": {"kind": "http", "metod": "GET"}}],
            },
            ["workflow", 0, "tool"],
        ),
        (
            {"apiVersion": "noetl.io/v1", "metadata": {"name": "x"}, "workflow": [{"step": "a"}]},
            ["apiVersion"],
        ),
        ([{"step": "a"}], []),
    ],
    ids=[
        "no-workflow",
        "empty-workflow",
        "unknown-root-key",
        "unknown-step-key",
        "bad-step-name",
        "retry-string",
        "max-concurrency-string",
        "next-mode-typo",
        "unknown-tool-key",
        "api-version",
        "list-document",
    ],
)
def test_structurally_invalid_documents_are_rejected_by_the_schema(
    document: Any, where: list[str | int]
) -> None:
    validator = jsonschema.Draft202012Validator(schema())
    errors = list(validator.iter_errors(document))
    assert errors, "the schema accepted an invalid document"
    assert list(errors[0].absolute_path) == where


CHILD_OF_RETURN_STEP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child}
workflow:
  - step: first
    tool: noop
"""


def test_a_return_step_is_checked_against_a_child_file_it_finds(tmp_path: Path) -> None:
    (tmp_path / "flows" / "child").mkdir(parents=True)
    (tmp_path / "flows" / "child" / "child.yaml").write_text(CHILD_OF_RETURN_STEP)

    def parent(path: str, step: str) -> Path:
        file = tmp_path / "parent.yaml"
        file.write_text(
            "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: parent}\nworkflow:\n"
            "  - step: call\n"
            f"    tool: {{kind: playbook, path: {path}, return_step: {step}}}\n"
        )
        return file

    bad = noetl("validate", parent("flows/child", "end"), cwd=tmp_path)
    assert bad.returncode == 1
    assert "parent.yaml:6: error E333: step 'call': return_step 'end' is not a step" in bad.stderr
    assert "child playbook 'flows/child' (its steps: first)" in bad.stderr
    assert noetl("validate", parent("flows/child", "first"), cwd=tmp_path).returncode == 0
    # A child it cannot find (only a server's catalog may have it) is checked at run time.
    assert noetl("validate", parent("flows/elsewhere", "end"), cwd=tmp_path).returncode == 0
    # The root is `playbooks.root` when it is set.
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (tmp_path / "flows").rename(moved / "flows")
    env = {"NOETL_PLAYBOOKS_ROOT": str(moved)}
    bad = noetl("validate", parent("flows/child", "end"), cwd=tmp_path, env=env)
    assert bad.returncode == 1 and "E333" in bad.stderr
