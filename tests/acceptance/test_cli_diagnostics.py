"""Diagnostics speak YAML: `noetl validate` on small bad playbooks names types as YAML does
(a map, a list, a string, a number, a boolean, null), never Python's classes, and names the
key path the file has, not the one normalization rewrote it into."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import noetl

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: diag\n"

# name -> (the workflow, the expected (code, message, key) of its only error)
CASES: dict[str, tuple[str, tuple[str, str, str]]] = {
    "arcs_item_is_a_list": (
        "workflow:\n  - step: a\n    next:\n      spec: {mode: exclusive}\n      arcs:\n"
        "        - [b]\n  - step: b\n",
        (
            "E200",
            "an edge must be a step name or a {step, when} map, got a list",
            "workflow[0].next.arcs[0]",
        ),
    ),
    "arcs_when_is_a_map": (
        "workflow:\n  - step: a\n    next:\n      spec: {mode: exclusive}\n      arcs:\n"
        "        - {step: b, when: {x: 1}}\n  - step: b\n",
        (
            "E102",
            "'when' must be a string or a boolean; got a map",
            "workflow[0].next.arcs[0].when",
        ),
    ),
    "arcs_missing_step": (
        "workflow:\n  - step: a\n    next:\n      arcs:\n        - step: b\n        - step: c\n"
        "  - step: b\n",
        (
            "E302",
            "next names step 'c', which does not exist",
            "workflow[0].next.arcs[1].step",
        ),
    ),
    "arcs_mode_typo": (
        "workflow:\n  - step: a\n    next:\n      spec: {mode: exclusiv}\n      arcs: [b]\n"
        "  - step: b\n",
        (
            "E102",
            "'mode' must be 'inclusive' or 'exclusive'; got a string 'exclusiv'",
            "workflow[0].next.spec.mode",
        ),
    ),
    "next_string_missing_step": (
        "workflow:\n  - step: a\n    next: lod\n",
        ("E302", "next names step 'lod', which does not exist", "workflow[0].next"),
    ),
    "next_list_missing_step": (
        "workflow:\n  - step: a\n    next: [a2, lod]\n  - step: a2\n",
        ("E302", "next names step 'lod', which does not exist", "workflow[0].next[1]"),
    ),
    "loop_spec_alias": (
        "workflow:\n  - step: a\n    loop:\n      in: [1]\n      spec: {max_in_flight: many}\n",
        (
            "E102",
            "'max_in_flight' must be an integer; got a string 'many'",
            "workflow[0].loop.spec.max_in_flight",
        ),
    ),
    "loop_in_alias": (
        "workflow:\n  - step: a\n    loop:\n      in: 7\n",
        (
            "E102",
            "'in' must be a string or a list; got a number 7",
            "workflow[0].loop.in",
        ),
    ),
    "retry_zero": (
        "workflow:\n  - step: a\n    tool: noop\n    retry: 0\n",
        ("E102", "'retry' must be greater than 0; got a number 0", "workflow[0].retry"),
    ),
    "tool_shorthand": (
        "workflow:\n  - step: a\n    tool:\n      kind: http\n      url: 5\n",
        ("E102", "'url' must be a string; got a number 5", "workflow[0].tool.url"),
    ),
    "tool_shorthand_next_to_spec": (
        "workflow:\n  - step: a\n    tool:\n      kind: http\n      spec: {url: x}\n"
        "      follow_redirects: maybe\n",
        (
            "E102",
            "'follow_redirects' must be a boolean; got a string 'maybe'",
            "workflow[0].tool.follow_redirects",
        ),
    ),
    "sink_one_key_map": (
        "workflow:\n  - step: a\n    tool: noop\n    result:\n      sink:\n"
        "        - postgres: {table: t, id: 5}\n",
        ("E102", "'id' must be a string; got a number 5", "workflow[0].result.sink[0].postgres.id"),
    ),
    "sink_one_key_map_spec": (
        "workflow:\n  - step: a\n    tool: noop\n    result:\n      sink:\n"
        "        - postgres: {table: [t]}\n",
        (
            "E102",
            "'table' must be a string; got a list",
            "workflow[0].result.sink[0].postgres.table",
        ),
    ),
    "result_inside_tool": (
        "workflow:\n  - step: a\n    tool:\n      kind: noop\n      result: {as: true}\n",
        ("E102", "'as' must be a string; got a boolean true", "workflow[0].tool.result.as"),
    ),
    "legacy_save": (
        "workflow:\n  - step: a\n    tool: noop\n    save: {file: {path: 5}}\n",
        ("E102", "'path' must be a string; got a number 5", "workflow[0].save.file.path"),
    ),
    "legacy_iter": (
        "workflow:\n  - step: a\n    iter: {collection: [1], mode: fast}\n",
        (
            "E102",
            "'mode' must be 'sequential' or 'parallel'; got a string 'fast'",
            "workflow[0].iter.mode",
        ),
    ),
    "case_branch_next": (
        "workflow:\n  - step: a\n    case:\n      - when: true\n        then: {next: lod}\n",
        (
            "E302",
            "case next names step 'lod', which does not exist",
            "workflow[0].case[0].then.next",
        ),
    ),
    "jitter_number": (
        "workflow:\n  - step: a\n    tool: noop\n    retry: {jitter: 3}\n",
        ("E102", "'jitter' must be a boolean; got a number 3", "workflow[0].retry.jitter"),
    ),
    "metadata_null": (
        "workflow:\n  - step: a\n",
        ("E102", "'metadata' must be a map; got null", "metadata"),
    ),
    "step_is_a_string": (
        "workflow:\n  - just text\n",
        ("E102", "step must be a map; got a string 'just text'", "workflow[0]"),
    ),
    "key_is_a_number": (
        "workflow:\n  - step: a\n    1: x\n",
        ("E009", "map keys must be strings, got a number 1", ""),
    ),
    "loop_is_a_string": (
        "workflow:\n  - step: a\n    loop: '{{ xs }}'\n",
        (
            "E200",
            "loop must be a block like {collection, element}, got a string",
            "workflow[0].loop",
        ),
    ),
}

# Python's words for types and pydantic's, which a playbook author never wrote.
INTERNAL = re.compile(
    r"\b(YMap|YSeq|dict|NoneType|str|int|float|bool|list\[|mapping|Input should|"
    r"instance of|Value error|True|False|None)\b"
)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every case validated by one `noetl validate --json` run."""
    folder = tmp_path_factory.mktemp("diagnostics")
    paths = {}
    for name, (body, _) in CASES.items():
        head = (
            HEAD
            if name != "metadata_null"
            else HEAD.replace("metadata:\n  name: diag\n", "metadata:\n")
        )
        path = folder / f"{name}.yaml"
        path.write_text(head + body, encoding="utf-8")
        paths[str(path)] = name
    proc = noetl("validate", "--json", *paths, timeout=60)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    return {paths[f["file"]]: f["diagnostics"] for f in report["files"]}


@pytest.mark.parametrize("name", list(CASES))
def test_the_error_names_yaml_types_and_the_files_key(
    reports: dict[str, list[dict[str, Any]]], name: str
) -> None:
    errors = [d for d in reports[name] if d["severity"] == "error"]
    assert [(d["code"], d["message"], d["key"] or "") for d in errors] == [CASES[name][1]]


def test_no_diagnostic_uses_an_internal_name(reports: dict[str, list[dict[str, Any]]]) -> None:
    leaks = [
        d["message"] for diags in reports.values() for d in diags if INTERNAL.search(d["message"])
    ]
    assert leaks == []


def test_the_text_output_says_the_same(tmp_path: Path) -> None:
    path = tmp_path / "arcs.yaml"
    path.write_text(HEAD + CASES["arcs_item_is_a_list"][0], encoding="utf-8")
    proc = noetl("validate", path, timeout=60)
    assert proc.stderr.splitlines()[0] == (
        f"{path}:10: error E200: step 'a': an edge must be a step name or a {{step, when}} map, "
        "got a list [workflow[0].next.arcs[0]]"
    )


ROUTING = HEAD + (
    "workflow:\n"
    "  - step: start\n"
    "    next: [a, b]\n"
    "  - step: a\n"
    "    tool: noop\n"
    "    next: join\n"
    "  - step: b\n"
    "    tool: noop\n"
    "    next: [join, start]\n"
    "  - step: join\n"
    "    tool: noop\n"
)


def test_routing_warnings_pass_validate_and_fail_lint_strict(tmp_path: Path) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text(ROUTING, encoding="utf-8")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return noetl(*args, path, timeout=60)

    assert run("validate").returncode == 0
    lint = run("lint")
    assert lint.returncode == 0
    assert lint.stdout.splitlines()[:2] == [
        f"{path}:13: warning W410: step 'b': next goes back to 'start', closing the cycle "
        "start -> b -> start: when this edge fires, 'start' runs again (a new run each time, "
        "up to policy.max_runs); make sure a condition on the cycle ends it "
        "[workflow[2].next[1]]",
        f"{path}:14: warning W411: step 'join': called by 'a' and 'b', which can both run, "
        "and without a when gate: the step runs on the first call and the later ones are "
        "ignored; to wait for its callers, add when: \"{{ done('a') and done('b') }}\" "
        "[workflow[3].step]",
    ]
    assert run("lint", "--strict").returncode == 1
