"""The configuration: defaults, the YAML file, NOETL_* variables and flags, in that order of
precedence; every bad value explained with where it came from; secrets never repeated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl.config import Settings, env_name, leaves, load_settings, render, resolve
from noetl.credentials.keys import new_key
from noetl.engine import EngineOptions
from noetl.engine.retry import RetryDefaults
from noetl.errors import ConfigError

NO_ENV: dict[str, str] = {}


def write(tmp_path: Path, text: str, name: str = "noetl.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(*args: Any, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        resolve(*args, **kwargs)
    return str(info.value)


# --- defaults ----------------------------------------------------------------------------


def test_defaults_are_the_seed_values() -> None:
    settings = load_settings(None, NO_ENV)
    assert settings == Settings()
    plugin, sink = settings.retries.plugin, settings.retries.sink
    assert (plugin.max_attempts, plugin.base_ms, plugin.max_ms) == (6, 200, 30_000)
    assert (sink.max_attempts, sink.base_ms, sink.max_ms) == (8, 200, 60_000)
    assert (plugin.multiplier, plugin.jitter, sink.multiplier, sink.jitter) == (2, True, 2, True)
    assert settings.timeouts.tool_default_ms == 30_000
    assert settings.timeouts.loop_total_ms is None
    assert (settings.policies.on_step_fail, settings.policies.on_sink_fail) == ("halt", "retry")
    assert settings.db.url.endswith("noetl.db")
    assert settings.server_pool == "default"


def test_engine_options_from_the_settings() -> None:
    settings = load_settings(
        None,
        {
            "NOETL_RETRIES_PLUGIN_MAX_ATTEMPTS": "2",
            "NOETL_RETRIES_PLUGIN_BASE_MS": "50",
            "NOETL_RETRIES_SINK_MAX_MS": "1000",
            "NOETL_RETRIES_SINK_JITTER": "false",
            "NOETL_TIMEOUTS_TOOL_DEFAULT_MS": "100",
            "NOETL_TIMEOUTS_LOOP_ITEM_MS": "none",
            "NOETL_POLICIES_ON_STEP_FAIL": "continue",
            "NOETL_COMPLEXITY_REFUSE": "50000",
        },
    )
    assert settings.engine_options() == EngineOptions(
        retry=RetryDefaults(max_attempts=2, initial_delay=0.05, max_delay=30.0),
        sink_retry=RetryDefaults(max_attempts=8, initial_delay=0.2, max_delay=1.0, jitter=False),
        tool_timeout_ms=100,
        sink_timeout_ms=30_000,
        loop_item_timeout_ms=None,
        on_step_fail="continue",
        on_sink_fail="retry",
        on_when_error="treat_as_false",
        complexity_warn=10_000,
        complexity_refuse=50_000,
    )


def test_every_key_has_an_environment_variable() -> None:
    paths = [leaf.path for leaf in leaves()]
    assert "retries.plugin.max_attempts" in paths and "worker.continue" in paths
    assert env_name("retries.plugin.max_attempts") == "NOETL_RETRIES_PLUGIN_MAX_ATTEMPTS"
    assert len({leaf.env for leaf in leaves()}) == len(paths)


def test_the_keys_shared_with_logging_and_metrics() -> None:
    paths = {leaf.path for leaf in leaves()}
    shared = {
        "logging.level",
        "logging.format",
        "logging.redact_keys",
        "metrics.enabled",
        "metrics.port",
        "metrics.path",
    }
    assert shared <= paths


# --- the file ----------------------------------------------------------------------------

EXAMPLE = """\
# retries for flaky tools
retries:
  plugin:
    max_attempts: 3
    base_ms: 100
tracing:
  enabled: true
  sample_rate: 0.5
logging:
  redact_keys: [password, pin]
worker:
  continue: false
dlq:
"""


def test_a_file_sets_keys_and_each_keeps_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, EXAMPLE)
    resolved = resolve(path, NO_ENV)
    settings = resolved.settings
    assert settings.retries.plugin.max_attempts == 3
    assert settings.retries.plugin.max_ms == 30_000  # a key left out keeps its default
    assert settings.tracing.sample_rate == 0.5
    assert settings.logging.redact_keys == ("password", "pin")
    assert settings.worker.continue_ is False
    assert resolved.origin("retries.plugin.max_attempts").describe() == f"file {path}:4"
    assert resolved.origin("worker.continue").describe() == f"file {path}:12"
    assert resolved.origin("retries.plugin.max_ms").describe() == "default"
    assert resolved.file == str(path)


def test_an_empty_file_is_every_default(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, "# nothing yet\n\n"), NO_ENV) == Settings()


def test_noetl_config_names_the_file_and_config_file_wins(tmp_path: Path) -> None:
    a = write(tmp_path, "server: {port: 1111}\n", "a.yaml")
    b = write(tmp_path, "server: {port: 2222}\n", "b.yaml")
    assert load_settings(None, {"NOETL_CONFIG": str(a)}).server.port == 1111
    assert load_settings(b, {"NOETL_CONFIG": str(a)}).server.port == 2222


# --- precedence --------------------------------------------------------------------------


def test_precedence_default_file_env_flag(tmp_path: Path) -> None:
    path = write(tmp_path, "worker: {concurrency: 2, lease_s: 10, poll_s: 1}\n")
    env = {"NOETL_WORKER_CONCURRENCY": "3", "NOETL_WORKER_LEASE_S": "20"}
    resolved = resolve(path, env, {"worker.concurrency": (4, "--concurrency")})
    worker = resolved.settings.worker
    assert (worker.concurrency, worker.lease_s, worker.poll_s, worker.pool) == (4, 20, 1, "default")
    assert resolved.origin("worker.concurrency").describe() == "flag --concurrency"
    assert resolved.origin("worker.lease_s").describe() == "env NOETL_WORKER_LEASE_S"
    assert resolved.origin("worker.poll_s").describe() == f"file {path}:1"
    assert resolved.origin("worker.pool").describe() == "default"


@pytest.mark.parametrize(
    ("name", "path", "value", "expected"),
    [
        ("NOETL_DB", "db.url", "memory://", "memory://"),
        ("NOETL_LOG_LEVEL", "logging.level", "debug", "DEBUG"),
        ("NOETL_WORKERS", "run.workers", "3", 3),
        ("NOETL_ALLOW_LEGACY", "dsl.allow_legacy", "false", False),
        ("NOETL_SECRETS_FILE", "secrets.file", "s.yaml", "s.yaml"),
        ("NOETL_WORKER_POOL", "worker.pool", "gpu", "gpu"),
    ],
)
def test_the_older_variable_names_still_work(
    name: str, path: str, value: str, expected: Any
) -> None:
    resolved = resolve(None, {name: value})
    section, key = path.split(".")
    assert resolved.settings.model_dump(by_alias=True)[section][key] == expected
    assert resolved.origin(path).describe() == f"env {name}"


def test_the_inline_limit_of_results_is_read_and_held_under_the_largest_result() -> None:
    assert load_settings(None, {}).worker.result_inline_bytes == 256 * 1024
    env = {"NOETL_WORKER_RESULT_INLINE_BYTES": "65536"}
    assert load_settings(None, env).worker.result_inline_bytes == 65536
    env["NOETL_WORKER_MAX_RESULT_BYTES"] = "32768"
    assert "at most worker.max_result_bytes (32768)" in error_of(None, env)
    # the default is not held to a smaller largest result: nothing past it is reported
    assert load_settings(None, {"NOETL_WORKER_MAX_RESULT_BYTES": "32768"}).worker


def test_the_canonical_name_wins_over_an_older_one() -> None:
    env = {"NOETL_LOG_LEVEL": "debug", "NOETL_LOGGING_LEVEL": "error"}
    assert load_settings(None, env).logging.level == "ERROR"


def test_the_server_pool_follows_the_worker_pool_unless_set() -> None:
    assert load_settings(None, {"NOETL_WORKER_POOL": "gpu"}).server_pool == "gpu"
    env = {"NOETL_WORKER_POOL": "gpu", "NOETL_SERVER_POOL": "cpu"}
    assert load_settings(None, env).server_pool == "cpu"


def test_environment_values_lists_and_nulls() -> None:
    env = {
        "NOETL_LOGGING_REDACT_KEYS": " password, pin ,,",
        "NOETL_TIMEOUTS_TOOL_DEFAULT_MS": "",
        "NOETL_TRACING_ENDPOINT": "null",
        "NOETL_METRICS_ENABLED": "yes",
        "NOETL_POLICIES_ON_SINK_FAIL": "max_attempts→fail_step",  # the seed's spelling
    }
    settings = load_settings(None, env)
    assert settings.logging.redact_keys == ("password", "pin")
    assert settings.timeouts.tool_default_ms is None
    assert settings.tracing.endpoint is None
    assert settings.metrics.enabled is True
    assert settings.policies.on_sink_fail == "fail_step"


def test_other_noetl_variables_are_left_alone() -> None:
    env = {
        "NOETL_SERVER_URL": "http://server:8083",
        "NOETL_SECRET_API_TOKEN": "x",
        "NOETL_CREDENTIAL_PG": "{}",
        "NOETL_TEST_REQUIRE_SERVICES": "1",
    }
    assert load_settings(None, env) == Settings()


# --- errors ------------------------------------------------------------------------------


def test_an_unknown_key_names_the_file_line_and_a_near_miss(tmp_path: Path) -> None:
    path = write(tmp_path, "retries:\n  plugin:\n    max_atempts: 3\n")
    assert error_of(path, NO_ENV) == (
        f"{path}:3: unknown key 'retries.plugin.max_atempts' in 'retries.plugin'; "
        "did you mean 'max_attempts'?"
    )


def test_an_unknown_section(tmp_path: Path) -> None:
    path = write(tmp_path, "retry:\n  plugin: {}\n")
    assert error_of(path, NO_ENV) == (
        f"{path}:1: unknown key 'retry' at the top level; did you mean 'retries'?"
    )


def test_a_section_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "dlq: true\n")
    assert error_of(path, NO_ENV).startswith(f"{path}:1: 'dlq' must be a mapping of its keys (")


def test_a_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "- a\n- b\n")
    assert error_of(path, NO_ENV).startswith(
        f"{path}:1: the configuration must be a mapping of sections (orchestrator, retries,"
    )


def test_yaml_syntax_and_duplicate_keys_name_the_line(tmp_path: Path) -> None:
    bad = write(tmp_path, "server:\n  port: 1\n  host: [x\n", "bad.yaml")
    assert error_of(bad, NO_ENV).startswith(f"{bad}:")
    assert "is not valid YAML" in error_of(bad, NO_ENV)
    twice = write(tmp_path, "server:\n  port: 1\n  port: 2\n", "twice.yaml")
    assert error_of(twice, NO_ENV).startswith(f"{twice}:3: duplicate key 'port'")


def test_a_missing_file_says_where_its_name_came_from(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    assert error_of(missing, NO_ENV) == f"{missing}: configuration file not found"
    assert error_of(None, {"NOETL_CONFIG": str(missing)}) == (
        f"{missing} (from NOETL_CONFIG): configuration file not found"
    )


def test_a_bad_value_in_the_file_names_line_key_value_and_what_is_allowed(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "logging:\n  format: xml\n")
    assert error_of(path, NO_ENV) == (
        f"{path}:2: logging.format = 'xml': input should be 'json' or 'text'"
    )


# Each constrained key, a bad value, and words of its message.
BAD_VALUES = [
    ("orchestrator.evaluate_when_timeout_ms", "0", "greater than or equal to 1"),
    ("orchestrator.route_after_all_sinks", "false", "only true is supported"),
    ("orchestrator.render_args_server_side", "false", "only true is supported"),
    ("retries.plugin.max_attempts", "0", "greater than or equal to 1"),
    ("retries.plugin.base_ms", "-1", "greater than or equal to 0"),
    ("retries.plugin.max_ms", "soon", "valid integer"),
    ("retries.plugin.multiplier", "0.5", "greater than or equal to 1"),
    ("retries.plugin.jitter", "sometimes", "valid boolean"),
    ("retries.sink.max_attempts", "1001", "less than or equal to 1000"),
    ("timeouts.tool_default_ms", "0", "greater than or equal to 1"),
    ("timeouts.sink_default_ms", "1.5", "valid integer"),
    ("timeouts.loop_item_ms", "-5", "greater than or equal to 1"),
    ("timeouts.loop_total_ms", "x", "valid integer"),
    ("dlq.enabled", "2", "valid boolean"),
    ("dlq.retention_days", "0", "greater than or equal to 1"),
    ("tracing.sample_rate", "1.5", "less than or equal to 1"),
    ("tracing.exporter", "jaeger", "'otlp', 'console' or 'none'"),
    ("tracing.endpoint", "jaeger:4318", "http://, https:// or grpc:// URL"),
    ("metrics.port", "70000", "less than or equal to 65535"),
    ("metrics.path", "metrics", "starting with '/'"),
    ("logging.level", "LOUD", "DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ("logging.format", "xml", "'json' or 'text'"),
    ("policies.on_step_fail", "route_edge:", "halt, continue or route_edge:<step>"),
    ("policies.on_sink_fail", "drop", "'retry', 'fail_step' or 'async_ignore'"),
    ("policies.on_when_error", "raise", "'treat_as_false' or 'fail_step'"),
    ("db.url", "mysql://db/x", "unknown scheme 'mysql'"),
    ("server.port", "0", "greater than or equal to 1"),
    ("worker.concurrency", "513", "less than or equal to 512"),
    ("worker.python_processes", "0", "greater than or equal to 1"),
    ("worker.lease_s", "0", "greater than 0"),
    ("worker.poll_s", "fast", "valid number"),
    ("worker.continue", "maybe", "valid boolean"),
    ("worker.chain_steps", "65", "less than or equal to 64"),
    ("worker.chain_ms", "-1", "greater than or equal to 0"),
    ("worker.result_inline_bytes", "1023", "greater than or equal to 1024"),
    ("worker.result_inline_bytes", "33554432", "at most worker.max_result_bytes (16777216)"),
    ("run.workers", "257", "less than or equal to 256"),
    ("dsl.allow_legacy", "perhaps", "valid boolean"),
]


@pytest.mark.parametrize(("path", "value", "words"), BAD_VALUES)
def test_every_bad_value_from_the_environment_is_explained(
    path: str, value: str, words: str
) -> None:
    name = env_name(path)
    message = error_of(None, {name: value})
    assert message.startswith(f"{name}: {path}")
    assert words in message
    assert "\n" not in message


@pytest.mark.parametrize(("path", "value", "words"), BAD_VALUES)
def test_every_bad_value_from_the_file_is_explained(
    tmp_path: Path, path: str, value: str, words: str
) -> None:
    *sections, key = path.split(".")
    text = "".join(f"{'  ' * i}{s}:\n" for i, s in enumerate(sections))
    text += f"{'  ' * len(sections)}{key}: {json.dumps(value)}\n"
    file = write(tmp_path, text)
    message = error_of(file, NO_ENV)
    assert message.startswith(f"{file}:{len(sections) + 1}: {path}")
    assert words in message


def test_a_bad_flag_is_named() -> None:
    message = error_of(None, NO_ENV, {"server.port": (0, "--port")})
    assert message == "--port: server.port = 0: input should be greater than or equal to 1"


def test_an_unknown_variable_of_a_section_is_an_error_with_a_suggestion() -> None:
    assert error_of(None, {"NOETL_RETRIES_PLUGIN_MAX_ATEMPTS": "3"}) == (
        "NOETL_RETRIES_PLUGIN_MAX_ATEMPTS: unknown setting; "
        "did you mean 'NOETL_RETRIES_PLUGIN_MAX_ATTEMPTS'?"
    )


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, "server:\n  prot: 1\nmetrics:\n  port: 70000\n")
    lines = error_of(path, {"NOETL_TRACING_SAMPLE_RATE": "2"}).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"{path}:2: unknown key 'server.prot'")
    assert lines[1].startswith("NOETL_TRACING_SAMPLE_RATE: tracing.sample_rate = '2'")
    assert lines[2].startswith(f"{path}:4: metrics.port = 70000")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NOETL_DB", "mysql://ada:hunter2@db/x"),
        ("NOETL_DB_URL", "oracle://ada:hunter2@db/x"),
        ("NOETL_TRACING_ENDPOINT", "ada:hunter2@jaeger:4318"),
        ("NOETL_METRICS_PORT", "postgresql://ada:hunter2@db/x"),
        ("NOETL_LOGGING_LEVEL", "host=db password=hunter2"),
        ("NOETL_DLQ_RETENTION_DAYS", "https://x/?token=hunter2"),
    ],
)
def test_a_secret_is_never_repeated_in_an_error(name: str, value: str) -> None:
    message = error_of(None, {name: value})
    assert message.startswith(f"{name}: ")
    assert "hunter2" not in message


def test_a_secret_in_the_file_is_never_repeated(tmp_path: Path) -> None:
    path = write(tmp_path, "db:\n  url: 'mssql://sa:hunter2@db/x'\n")
    message = error_of(path, NO_ENV)
    assert message.startswith(f"{path}:2: db.url: unknown scheme 'mssql'")
    assert "hunter2" not in message


# --- config show -------------------------------------------------------------------------


def shown(resolved: Any) -> tuple[str, dict[str, Any]]:
    text = render(resolved)
    data = json.loads(render(resolved, as_json=True))
    return text, data


def test_show_masks_passwords_and_sensitive_keys(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "tracing:\n  endpoint: 'https://otel:hunter2@collector:4318/v1?api_key=k3y&x=1'\n",
    )
    env = {
        "NOETL_DB": "postgresql://ada:s3cret@db.internal:5432/noetl",
        "NOETL_SECRETS_FILE": "/etc/noetl/secrets.yaml",
    }
    text, data = shown(resolve(path, env))
    for secret in ("hunter2", "s3cret", "k3y"):
        assert secret not in text
        assert secret not in json.dumps(data)
    config = data["config"]
    assert config["db"]["url"] == "postgresql://ada:***@db.internal:5432/noetl"
    assert config["tracing"]["endpoint"] == "https://otel:***@collector:4318/v1?api_key=***&x=1"
    # Names that look sensitive but hold no secret are shown.
    assert config["secrets"]["file"] == "/etc/noetl/secrets.yaml"
    assert "password" in config["logging"]["redact_keys"]


def test_show_gives_each_value_its_source(tmp_path: Path) -> None:
    path = write(tmp_path, EXAMPLE)
    text, data = shown(resolve(path, {"NOETL_METRICS_PORT": "9100"}, {"run.workers": (2, "-w")}))
    assert data["sources"]["retries.plugin.max_attempts"] == f"file {path}:4"
    assert data["sources"]["metrics.port"] == "env NOETL_METRICS_PORT"
    assert data["sources"]["run.workers"] == "flag -w"
    assert data["sources"]["dlq.topic"] == "default"
    assert "    max_attempts: 3  # file " in text
    assert "  port: 9100  # env NOETL_METRICS_PORT" in text


def test_show_yaml_reads_back_as_the_same_configuration(tmp_path: Path) -> None:
    resolved = resolve(write(tmp_path, EXAMPLE), NO_ENV)
    text, data = shown(resolved)
    assert yaml.safe_load(text) == data["config"]
    again = write(tmp_path, text, "again.yaml")
    assert load_settings(again, NO_ENV) == resolved.settings


def test_the_operations_guide_documents_every_key_and_variable() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text("utf-8")
    for leaf in leaves():
        assert f"`{leaf.path}`" in guide, leaf.path
        for name in (leaf.env, *leaf.aliases):
            assert f"`{name}`" in guide, name


def test_the_credentials_key_is_checked_masked_and_never_repeated(tmp_path: Path) -> None:
    one, two = new_key(), new_key()
    from_env = load_settings(None, {"NOETL_CREDENTIALS_KEY": f" {one} , {two} "})
    assert from_env.credentials.key == (one, two)
    in_file = write(tmp_path, f"credentials:\n  file: creds.yaml\n  key: [{one}]\n")
    settings = load_settings(in_file, NO_ENV)
    assert settings.credentials.config().keys == (one,)
    assert settings.credentials.file == "creds.yaml"
    text, data = shown(resolve(in_file, NO_ENV))
    assert data["config"]["credentials"] == {"file": "creds.yaml", "key": "***"}
    assert one not in text
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"NOETL_CREDENTIALS_KEY": f"{one},hunter2-not-a-key"})
    assert str(caught.value) == (
        "NOETL_CREDENTIALS_KEY: credentials.key: key 2 is not a Fernet key: it is not "
        "url-safe base64; make one with `noetl credential keygen`"
    )
