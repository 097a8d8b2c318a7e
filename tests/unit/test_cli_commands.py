"""`noetl` loads each command when it runs: `--help` lists them all from the table of
`noetl.cli.commands`, importing none; a command imports its own module; importing the
entry point imports no heavy or optional library."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from noetl.cli.commands import COMMANDS, load
from noetl.cli.main import cli, main
from tests.helpers.cli import ROOT, cli_env

HEAVY = (
    "duckdb",
    "boto3",
    "botocore",
    "nats",
    "fastapi",
    "uvicorn",
    "psycopg",
    "psycopg_pool",
    "httpx",
    "opentelemetry",
)


def modules_after(code: str) -> dict[str, bool]:
    """Which of `noetl.cli.*` and HEAVY a fresh interpreter has imported after `code`."""
    probe = (
        f"{code}\nimport json, sys\n"
        "names = [m for m in sys.modules if m.startswith('noetl.cli.') "
        f"or m.split('.')[0] in {HEAVY!r}]\n"
        "print(json.dumps(names))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=cli_env(clean_env=True),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = set(json.loads(done.stdout.strip().splitlines()[-1]))
    return {name: name in names for name in names}


def test_help_lists_every_command_with_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--help"])
    out = capsys.readouterr().out
    listed = out.split("Commands:")[1].splitlines()
    names = [line.split()[0] for line in listed if line.strip()]
    assert names == sorted(COMMANDS)
    for name in COMMANDS:
        short = load(name).get_short_help_str(200)
        assert short[:30] in out, name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_table_holds_each_command_s_own_help(name: str) -> None:
    command = load(name)
    assert command.name == name
    first = (command.help or "").split("\n\n")[0]
    assert COMMANDS[name].help == " ".join(first.split())


def test_groups_get_the_subcommands_other_modules_define() -> None:
    exec_group, server_group = load("exec"), load("server")
    assert isinstance(exec_group, click.Group) and isinstance(server_group, click.Group)
    assert "logs" in exec_group.commands
    assert "start" in server_group.commands
    assert cli.get_command(click.Context(cli), "nope") is None


def test_importing_the_entry_point_imports_no_command_and_no_heavy_library() -> None:
    imported = modules_after("import noetl.cli.main")
    assert sorted(imported) == ["noetl.cli.commands", "noetl.cli.main"]


def test_help_imports_no_command() -> None:
    code = (
        "from noetl.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert sorted(modules_after(code)) == ["noetl.cli.commands", "noetl.cli.main"]


def test_a_command_imports_its_own_module_only() -> None:
    code = (
        "from noetl.cli.main import main\ntry:\n"
        "    main(['validate', 'examples/hello_world.yaml'])\n"
        "except SystemExit as exc:\n    assert exc.code == 0, exc.code"
    )
    imported = modules_after(code)
    assert "noetl.cli.dsl_cmds" in imported
    for other in ("run_cmd", "exec_cmds", "serve", "worker_cmds", "dlq_cmds", "auth_cmds"):
        assert f"noetl.cli.{other}" not in imported
    assert not [name for name in imported if name.split(".")[0] in HEAVY]


def test_an_unknown_command_gets_the_closest_name_among_all() -> None:
    # A fresh process: no command module is loaded yet.
    done = subprocess.run(
        [sys.executable, "-m", "noetl", "credentail"],
        cwd=ROOT,
        env=cli_env(clean_env=True),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "No such command 'credentail'. Did you mean 'credential'?" in done.stderr
