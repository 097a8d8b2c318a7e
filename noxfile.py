"""Developer sessions: one per test level, and the lint.

`nox -s unit` (or `nox -l` to list them) runs in the current environment: no session
creates a virtualenv or installs anything, so install the project first
(`pip install -e ".[dev]"`, the README's command). Arguments after `--` go to pytest:
`nox -s contract -- -k sqlite -x`.

What each level needs (a test that needs a missing service is skipped, or fails under
NOETL_TEST_REQUIRE_SERVICES=1 as in CI, `.ci/run`):

- unit: nothing (memory store, fake clocks, pure engine).
- contract: every store adapter; PostgreSQL (NOETL_TEST_PG_DSN, by default
  postgresql://postgres@127.0.0.1:5432/test) and NATS JetStream (NOETL_TEST_NATS_URL).
- golden: nothing (recorded event logs replayed).
- integration: SQLite files, PostgreSQL, NATS, loopback HTTP servers, promtool.
- acceptance: the real CLI in a subprocess; PostgreSQL for some.
- browser: Debian's Chromium (NOETL_TEST_CHROMIUM) and Playwright.
- distributed: real `noetl server` and `noetl worker` processes over PostgreSQL.
"""

from __future__ import annotations

import sys

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "unit", "contract", "golden"]


def _pytest(session: nox.Session, *paths: str) -> None:
    session.run(sys.executable, "-m", "pytest", *paths, *session.posargs)


@nox.session(python=False)
def unit(session: nox.Session) -> None:
    """The pure engine, DSL and small modules, over the memory store."""
    _pytest(session, "tests/unit")


@nox.session(python=False)
def contract(session: nox.Session) -> None:
    """One Store contract suite run against memory, SQLite and PostgreSQL (and NATS)."""
    _pytest(session, "tests/contract")


@nox.session(python=False)
def golden(session: nox.Session) -> None:
    """Recorded event logs replayed through the engine."""
    _pytest(session, "tests/golden")


@nox.session(python=False)
def integration(session: nox.Session) -> None:
    """Real SQLite files, PostgreSQL, NATS and HTTP servers on loopback."""
    _pytest(session, "tests/integration")


@nox.session(python=False)
def acceptance(session: nox.Session) -> None:
    """The real `noetl` command line in a subprocess, over real playbooks."""
    _pytest(session, "tests/acceptance")


@nox.session(python=False)
def browser(session: nox.Session) -> None:
    """The operator console in a headless Chromium."""
    _pytest(session, "tests/browser")


@nox.session(python=False)
def distributed(session: nox.Session) -> None:
    """Servers and workers as real processes sharing one PostgreSQL database."""
    _pytest(session, "tests/distributed")


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """What the docs promise of the code: ruff, ruff's format, strict types and the layers
    (import-linter's contracts in pyproject.toml)."""
    session.run(sys.executable, "-m", "ruff", "check", ".")
    session.run(sys.executable, "-m", "ruff", "format", "--check", ".")
    session.run(sys.executable, "-m", "mypy", "--strict", "noetl")
    session.run("lint-imports", external=True)
