"""Secret references: rendered to markers by the engine, resolved and masked by the worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Outcome, Task
from noetl.core.secrets import SECRETS, marker, referenced
from noetl.credentials.scope import (
    ChainSecrets,
    EnvSecrets,
    FileSecrets,
    SecretScope,
    current_scope,
)
from noetl.errors import ConfigError
from noetl.worker.tools import NoopTool, ToolRegistry
from tests.unit.engine_harness import Harness

TOKEN = "tok-3f9a1c77-canary"


def make_task(**changes: Any) -> Task:
    fields: dict[str, Any] = {
        "task_id": "e.s",
        "execution_id": "e",
        "step": "s",
        "kind": "noop",
        "spec": {},
        "args": {},
        "context": {},
        "key": "e:s",
    }
    fields.update(changes)
    return Task(**fields)


def test_a_reference_renders_as_its_marker_anywhere_in_a_value() -> None:
    assert SECRETS.API_TOKEN == marker("API_TOKEN") == "<<secret:API_TOKEN>>"
    assert SECRETS["db_pass"] == "<<secret:db_pass>>"
    with pytest.raises(KeyError):
        SECRETS["not a name"]
    assert referenced({"h": ["Bearer <<secret:A>>", "<<secret:B>>x"], "n": 1}) == {"A", "B"}
    assert referenced("<<secret:bad name>>") == set()


def test_the_engine_never_renders_a_secret_value() -> None:
    harness = Harness.of(
        """
        - step: call
          tool:
            kind: http
            url: "https://api.example.test/{{ workload.path }}"
            headers: {Authorization: "Bearer {{ secrets.API_TOKEN }}"}
            args: {password: "{{ secrets['DB_PASS'] }}", plain: "{{ workload.path }}"}
        """,
        workload={"path": "items"},
    )
    [task] = harness.dispatched

    assert task.spec["url"] == "https://api.example.test/items"  # spec templates render
    assert task.spec["headers"] == {"Authorization": "Bearer <<secret:API_TOKEN>>"}
    assert task.args == {"password": "<<secret:DB_PASS>>", "plain": "items"}
    assert task.secrets == ("API_TOKEN", "DB_PASS")
    assert Task.from_dict(json.loads(json.dumps(task.to_dict()))) == task


def test_code_and_sql_are_taken_literally() -> None:
    harness = Harness.of(
        """
        - step: py
          tool:
            kind: python
            code: "def main(context, args):\\n    return '{% raw %}x{% endraw %}'\\n"
        """
    )
    [task] = harness.dispatched
    assert "{% raw %}x{% endraw %}" in task.spec["code"]


def test_the_worker_resolves_markers_and_masks_values_in_the_outcome() -> None:
    scope = SecretScope(EnvSecrets({"NOETL_SECRET_API_TOKEN": TOKEN}))
    task = make_task(
        spec={"headers": {"Authorization": "Bearer <<secret:API_TOKEN>>"}},
        args={"echo": "<<secret:API_TOKEN>>", "other": "<<secret:UNLISTED>>"},
        secrets=("API_TOKEN",),
    )

    resolved = scope.resolve(task)

    assert resolved.spec == {"headers": {"Authorization": f"Bearer {TOKEN}"}}
    # only the task's own names are resolved: marker text from data stays as it is
    assert resolved.args == {"echo": TOKEN, "other": "<<secret:UNLISTED>>"}
    outcome = Outcome(
        "e.s", ok=False, this={TOKEN: [f"x{TOKEN}y"]}, error=f"denied {TOKEN}", stdout=TOKEN
    )
    masked = scope.mask_outcome(outcome)
    assert TOKEN not in json.dumps(
        {"this": masked.this, "error": masked.error, "stdout": masked.stdout}
    )
    assert masked.this == {"***": ["x***y"]} and masked.error == "denied ***"


def test_a_missing_secret_fails_the_task_naming_it_not_a_value() -> None:
    registry = ToolRegistry([NoopTool()], secrets=EnvSecrets({}))
    outcome = registry.run(make_task(args={"a": "<<secret:NOPE>>"}, secrets=("NOPE",)))

    assert not outcome.ok
    assert "secret 'NOPE' is not configured" in (outcome.error or "")
    assert "NOETL_SECRET_NOPE" in (outcome.error or "")


def test_env_names_follow_the_environment_convention_after_the_exact_spelling() -> None:
    env = EnvSecrets(
        {
            "NOETL_SECRET_API_TOKEN": "upper",
            "NOETL_SECRET_both": "exact",
            "NOETL_SECRET_BOTH": "upper-both",
            "NOETL_SECRET_MY_KEY_2": "dashed",
            "NOETL_CREDENTIAL_WAREHOUSE": '{"dsn": "postgresql://h/db"}',
        }
    )
    assert env.secret("api_token") == "upper"
    assert env.secret("API_TOKEN") == "upper"
    assert env.secret("both") == "exact"  # the exact spelling is asked first
    assert env.secret("my-key.2") == "dashed"
    assert env.secret("other") is None
    assert env.credential("warehouse") == {"dsn": "postgresql://h/db"}


def test_a_missing_lower_case_secret_names_both_variables() -> None:
    registry = ToolRegistry([NoopTool()], secrets=EnvSecrets({}))
    outcome = registry.run(make_task(args={"a": "<<secret:api_token>>"}, secrets=("api_token",)))

    assert not outcome.ok
    assert "NOETL_SECRET_api_token or NOETL_SECRET_API_TOKEN" in (outcome.error or "")


def test_the_registry_masks_what_a_tool_returns() -> None:
    registry = ToolRegistry([NoopTool()], secrets=EnvSecrets({"NOETL_SECRET_T": TOKEN}))
    outcome = registry.run(make_task(args={"t": "<<secret:T>>"}, secrets=("T",)))

    assert outcome.ok and outcome.this == {"t": "***"}  # noop echoes its (resolved) args


def test_credentials_come_from_env_or_file_and_are_masked(tmp_path: Path) -> None:
    path = tmp_path / "secrets.yaml"
    path.write_text(
        "secrets: {API: from-file}\n"
        "credentials:\n  warehouse: {dsn: 'postgresql://u:pw-9911@h/db'}\n",
        encoding="utf-8",
    )
    provider = ChainSecrets(
        [
            EnvSecrets({"NOETL_SECRET_API": "from-env", "NOETL_CREDENTIAL_raw": "dsn-text"}),
            FileSecrets(path),
        ]
    )
    assert provider.secret("API") == "from-env"  # the first provider wins
    assert provider.credential("raw") == {"dsn": "dsn-text"}
    scope = SecretScope(provider)
    assert scope.credential("warehouse") == {"dsn": "postgresql://u:pw-9911@h/db"}
    assert scope.mask("connect postgresql://u:pw-9911@h/db failed") == "connect *** failed"
    with pytest.raises(Exception, match="credential 'missing' is not configured"):
        scope.credential("missing")


def test_a_bad_secrets_file_is_a_clear_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("secrets: [1, 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.yaml is not valid YAML \(line"):
        FileSecrets(bad)
    with pytest.raises(ConfigError, match=r"(?i)no such file"):
        FileSecrets(tmp_path / "missing.yaml")
    odd = tmp_path / "odd.yaml"
    odd.write_text("credentials: {db: just-a-string}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="credential 'db' is not a map"):
        FileSecrets(odd)


def test_tools_see_the_scope_of_their_task() -> None:
    seen: list[dict[str, Any]] = []

    class NeedsCredential:
        kind = "needs"

        def run(self, task: Task) -> Outcome:
            seen.append(current_scope().credential("db"))
            return Outcome(task.task_id, ok=True, this="connected with pw-12345")

    registry = ToolRegistry(
        [NeedsCredential()], secrets=EnvSecrets({"NOETL_CREDENTIAL_db": '{"password": "pw-12345"}'})
    )
    outcome = registry.run(make_task(kind="needs"))

    assert seen == [{"password": "pw-12345"}]
    assert outcome.this == "connected with ***"


def test_marker_text_from_data_is_never_a_secret_reference() -> None:
    harness = Harness.of(
        """
        - step: echo
          tool: {kind: noop, args: {value: "{{ workload.value }}"}}
        """,
        workload={"value": "<<secret:ADMIN_TOKEN>>"},
    )
    [task] = harness.dispatched

    assert task.args == {"value": "<<secret:ADMIN_TOKEN>>"}
    assert task.secrets == ()  # so a worker leaves the text as it is
    registry = ToolRegistry([NoopTool()], secrets=EnvSecrets({"NOETL_SECRET_ADMIN_TOKEN": "x1"}))
    assert registry.run(task).this == {"value": "<<secret:ADMIN_TOKEN>>"}
