"""`noetl run` imports what its playbook uses: the hello world example (python steps)
imports none of the libraries of the tools, sinks and services it does not use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import EXAMPLES
from tests.helpers.cli import ROOT, cli_env

UNUSED = ("duckdb", "boto3", "nats", "fastapi", "uvicorn", "psycopg", "httpx", "opentelemetry")


def test_a_run_of_python_steps_imports_no_unused_library(tmp_path: Path) -> None:
    probe = (
        "import json, sys\nfrom noetl.cli.main import main\n"
        f"try:\n    main(['run', {str(EXAMPLES / 'hello_world.yaml')!r}, '--json', "
        f"'--db', {str(tmp_path / 'db.sqlite')!r}])\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        f"names = sorted({{m.split('.')[0] for m in sys.modules}} & set({UNUSED!r}))\n"
        "print(json.dumps({'code': code, 'imported': names}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=cli_env(clean_env=True),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "imported": []}
