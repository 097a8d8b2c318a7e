"""docs/tutorial.md, run as a newcomer would: every `bash` block of the page, in order, in
one shell, in an empty directory; PostgreSQL and a free port given through the variables
the page reads (`NOETL_DB`, `PORT`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.distributed.cluster import free_port

pytestmark = [pytest.mark.services, pytest.mark.slow]

TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)


def script() -> str:
    blocks = BLOCK.findall(TUTORIAL.read_text(encoding="utf-8"))
    assert len(blocks) >= 6, "the tutorial's commands are in ```bash blocks"
    return "set -euo pipefail\n" + "\n".join(blocks)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the tutorial uses curl")
def test_every_command_of_the_tutorial_works(tmp_path: Path, pg_database: str) -> None:
    bindir = Path(sys.executable).parent
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("NOETL_")},
        "NOETL_DB": pg_database,
        "PORT": str(free_port()),
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        ["bash", "-c", script()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    logs = "".join(
        f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log"))
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:] + logs
    out = proc.stdout
    assert '  loud = "HELLO, NOETL!"' in out
    assert "the run failed, as it should" in out
    assert re.search(r"item 2 \(0\): ZeroDivisionError", out)
    # the local replay, then the server's: both executions end ok
    assert re.search(r"replayed \S+\.divide\.2: execution \d+ continues", out)
    assert len(re.findall(r"execution \d+ (finished: )?ok", out)) >= 2, out
    assert "it failed: one item divides by zero" in out
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
