"""The real `noetl` command line in a subprocess, for acceptance and distributed tests.

`noetl(*args)` runs `python -m noetl ARGS` with this interpreter (so the checkout under
test, not whatever `noetl` is on PATH) from the repository root, captures its output as
text and never raises on a non-zero exit: tests look at `returncode`, `stdout`, `stderr`.

The environment is this process's, changed in order: `clean_env` strips every `NOETL_*`
variable but the test settings (`NOETL_TEST*`, e.g. the PostgreSQL URL), so a developer's
own configuration cannot leak into a run; `drop` removes the named variables; `env` adds
or replaces some. `no_traceback` asserts the command failed (if it failed) with a message,
not a Python traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli_env(
    env: Mapping[str, str] | None = None, *, drop: Iterable[str] = (), clean_env: bool = False
) -> dict[str, str]:
    """The environment `noetl` gets (see the module docstring)."""
    environ = dict(os.environ)
    if clean_env:
        environ = {
            k: v
            for k, v in environ.items()
            if not k.startswith("NOETL_") or k.startswith("NOETL_TEST")
        }
    for name in drop:
        environ.pop(name, None)
    environ.update(env or {})
    return environ


def noetl(
    *args: str | Path,
    cwd: str | Path | None = ROOT,
    env: Mapping[str, str] | None = None,
    drop: Iterable[str] = (),
    clean_env: bool = False,
    stdin: str | None = None,
    timeout: float = 120,
    no_traceback: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m noetl *args` and return what it did (see the module docstring)."""
    proc = subprocess.run(
        [sys.executable, "-m", "noetl", *map(str, args)],
        cwd=cwd,
        env=cli_env(env, drop=drop, clean_env=clean_env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if no_traceback:
        assert "Traceback" not in proc.stderr, proc.stderr
    return proc
