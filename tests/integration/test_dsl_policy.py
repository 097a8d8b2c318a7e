"""Seed 003's rollout flags: which forms of playbook a deployment accepts (native DSL v2,
its legacy aliases, upstream NoETL's dialect), strict validation, and the environment
variables that set them."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl.config import load_settings
from noetl.dsl.policy import DslPolicy
from noetl.dsl.validate import load_playbook, load_playbook_text
from noetl.errors import ConfigError
from tests.helpers.cli import noetl

ROOT = Path(__file__).resolve().parents[2]
LEGACY = ROOT / "tests/fixtures/valid/04_legacy_forms.yaml"
UPSTREAM = ROOT / "examples/upstream_pipeline.yaml"
WARNS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: warns}
workflow:
  - step: start
    next: [a]
  - step: a
  - step: orphan
"""


def codes(result: object) -> list[tuple[str, str]]:
    return [(d.code, d.severity.value) for d in result.diagnostics]  # type: ignore[attr-defined]


def test_strict_makes_every_warning_an_error() -> None:
    relaxed = load_playbook_text(WARNS, "w.yaml")
    assert relaxed.ok and ("W401", "warning") in codes(relaxed)
    strict = load_playbook_text(WARNS, "w.yaml", policy=DslPolicy(strict=True))
    assert not strict.ok
    (error,) = strict.errors
    assert error.code == "W401" and error.line == 8 and "strict" in error.message


def test_dialects_refuse_the_forms_left_out() -> None:
    native_only = DslPolicy(accept=frozenset({"native"}))
    upstream = load_playbook(UPSTREAM, policy=native_only)
    assert not upstream.ok and upstream.errors[0].code == "E341"
    assert "upstream NoETL's dialect" in upstream.errors[0].message
    assert load_playbook(UPSTREAM).ok
    legacy = load_playbook(LEGACY, policy=native_only)
    assert not legacy.ok and "legacy" in legacy.errors[0].message.lower()
    assert load_playbook(LEGACY, policy=DslPolicy()).ok
    native = load_playbook_text(WARNS, policy=DslPolicy(accept=frozenset({"upstream"})))
    assert [d.code for d in native.errors] == ["E341"]


def test_the_environment_sets_the_flags() -> None:
    settings = load_settings(
        environ={
            "NOETL_STRICT_DSL_VALIDATION": "true",
            "NOETL_ALLOW_LEGACY_ITER": "false",
            "NOETL_DSL_DIALECTS": "native,upstream",
        }
    )
    assert settings.dsl.strict is True and settings.dsl.allow_legacy is False
    assert settings.dsl.policy() == DslPolicy(accept=frozenset({"native", "upstream"}), strict=True)
    # NOETL_ALLOW_LEGACY_ITER alone keeps legacy out even when the dialects list it.
    assert (
        "legacy" not in load_settings(environ={"NOETL_ALLOW_LEGACY_ITER": "0"}).dsl.policy().accept
    )
    assert load_settings(environ={"NOETL_DSL_V2_ENABLED": "true"}).dsl.v2_enabled
    with pytest.raises(ConfigError, match=r"NOETL_DSL_V2_ENABLED.*DSL v2 only"):
        load_settings(environ={"NOETL_DSL_V2_ENABLED": "false"})
    with pytest.raises(ConfigError, match="NOETL_DSL_DIALECTS"):
        load_settings(environ={"NOETL_DSL_DIALECTS": "native,v1"})


def test_the_cli_applies_them(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(WARNS, encoding="utf-8")
    assert noetl("validate", path, clean_env=True).returncode == 0
    strict = noetl("validate", "--strict", path, clean_env=True)
    assert strict.returncode == 1 and "W401" in strict.stdout + strict.stderr
    env = {"NOETL_STRICT_DSL_VALIDATION": "true"}
    run = noetl("run", path, "--db", tmp_path / "n.db", env=env, clean_env=True)
    assert run.returncode == 1 and "W401" in run.stderr
    shown = noetl("config", "show", env=env, clean_env=True)
    assert "strict: true" in shown.stdout and "NOETL_STRICT_DSL_VALIDATION" in shown.stdout


def test_the_server_applies_them_to_its_catalog_and_starts(tmp_path: Path) -> None:
    from noetl import __version__
    from noetl.runtime.orchestrator import Orchestrator
    from noetl.server.app import create_app
    from noetl.store.sqlite import SqliteStore
    from tests.helpers.auth import auth_headers
    from tests.helpers.testclient import TestClient

    store = SqliteStore(tmp_path / "n.db")
    strict = DslPolicy(strict=True)
    try:
        orchestrator = Orchestrator(store, owner="test", dsl=strict)
        app = create_app(store, orchestrator, version=__version__, dsl=strict)
        with TestClient(app, headers=auth_headers(store)) as client:
            registered = client.post("/api/playbooks", json={"content": WARNS, "path": "w"})
            assert registered.status_code == 422 and "W401" in registered.text
            checked = client.post("/api/playbooks/validate", json={"content": WARNS})
            assert checked.json()["valid"] is False
            started = client.post("/api/executions", json={"playbook": WARNS})
            assert started.status_code == 422 and "W401" in started.text
        relaxed = create_app(store, Orchestrator(store, owner="test"), version=__version__)
        with TestClient(relaxed, headers=auth_headers(store)) as client:
            assert client.post("/api/executions", json={"playbook": WARNS}).status_code == 201
    finally:
        store.close()
