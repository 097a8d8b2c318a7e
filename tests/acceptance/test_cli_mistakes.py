"""Mistakes on the command line caught before anything runs: a `--set` value that looks
like JSON but does not parse, a `--set` key the workload does not have, `--db` into a
directory that does not exist, a missing file that has a `.yaml` twin, a mis-indented
line. The real CLI in subprocesses."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.cli import noetl

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: greet}
workload: {name: world, count: 1}
workflow:
  - step: start
    result: {pick: "{{ workload.name }}", as: who}
"""


def write(tmp_path: Path, text: str = PLAYBOOK, name: str = "greet.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_set_value_that_looks_like_json_but_does_not_parse_is_an_error(tmp_path: Path) -> None:
    proc = noetl("run", write(tmp_path), "--db", tmp_path / "n.db", "--set", 'name={"a": 1',
                 clean_env=True)  # fmt: skip
    assert proc.returncode == 2
    assert 'Invalid value for --set: name={"a": 1: looks like JSON but does not parse' in (
        proc.stderr
    )
    assert not (tmp_path / "n.db").exists()
    fine = noetl("run", write(tmp_path), "--db", tmp_path / "n.db", "--set", "name={a: 1}",
                 clean_env=True)  # fmt: skip
    assert fine.returncode == 0, fine.stderr


def test_a_set_key_the_workload_lacks_warns_with_the_closest_one(tmp_path: Path) -> None:
    proc = noetl("run", write(tmp_path), "--db", tmp_path / "n.db", "--set", "nmae=Ada",
                 clean_env=True)  # fmt: skip
    assert proc.returncode == 0
    assert (
        "warning: --set nmae: not a key of the playbook's workload (its keys: name, count); "
        "did you mean 'name'?"
    ) in proc.stderr


def test_db_into_a_missing_directory_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    for args in (("run", write(tmp_path)), ("exec", "list"), ("dlq", "list")):
        proc = noetl(*args, "--db", missing / "n.db", clean_env=True)
        assert proc.returncode == 2, proc.stderr
        assert f"the directory {missing} does not exist" in proc.stderr
    assert not (tmp_path / "no").exists()
    # NoETL's own data directory is made when missing: the default database
    default = noetl("run", write(tmp_path), cwd=tmp_path, clean_env=True)
    assert default.returncode == 0, default.stderr
    assert (tmp_path / ".noetl" / "noetl.db").exists()


def test_a_missing_file_suggests_the_file_it_may_mean(tmp_path: Path) -> None:
    write(tmp_path)
    for given in ("greet", "greet.yml", "geret.yaml"):
        proc = noetl("validate", tmp_path / given, clean_env=True)
        assert proc.returncode != 0
        assert f"file not found; did you mean {tmp_path / 'greet.yaml'}?" in proc.stderr + (
            proc.stdout
        )


def test_a_mis_indented_line_is_named(tmp_path: Path) -> None:
    text = PLAYBOOK + "  - step: after\n     tool: {kind: noop}\n"
    proc = noetl("validate", write(tmp_path, text), clean_env=True)
    assert proc.returncode != 0
    assert "greet.yaml:9: error E005" in proc.stdout + proc.stderr
