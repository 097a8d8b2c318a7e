"""The settings of NoETL (seed 000, section 8.12 "Config Knobs"), as pydantic models.

One frozen `Settings` holds a section per concern. Every key has a default, so an empty
file (or none) is a valid configuration; `noetl.config.loader` fills them from a YAML file,
`NOETL_<SECTION>_<KEY>` environment variables and command-line flags, and explains every
bad value. Validators never put a value that may hold a secret (a DSN, an endpoint) into
their messages.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from noetl.config.jobs import RetentionSettings, SchedulerSettings
from noetl.config.messaging import BusSettings, SessionsSettings, TriggersSettings
from noetl.config.section import Section
from noetl.credentials import CredentialConfig
from noetl.credentials.keys import check_key
from noetl.dsl.model import ON_STEP_FAIL_PATTERN
from noetl.dsl.policy import DslPolicy
from noetl.engine.options import EngineOptions
from noetl.engine.retry import RetryDefaults
from noetl.paths import Roots
from noetl.redaction import REDACT_KEYS

__all__ = ["DEFAULT_DB", "Settings"]

DEFAULT_DB = os.path.join(".noetl", "noetl.db")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_DB_SCHEMES = ("memory", "sqlite", "postgresql", "postgres")

Millis = Annotated[int, Field(ge=1)]
Port = Annotated[int, Field(ge=1, le=65535)]
# 0: any free port (the exporter says which).
AnyPort = Annotated[int, Field(ge=0, le=65535)]
Slots = Annotated[int, Field(ge=1, le=512)]


class OrchestratorSettings(Section):
    """How the orchestrator works. NoETL routes after the synchronous sinks (they run
    inside the task) and renders args before dispatch (the engine does), so only `true`
    is accepted for those two."""

    evaluate_when_timeout_ms: Millis = 100
    route_after_all_sinks: bool = True
    render_args_server_side: bool = True

    @field_validator("route_after_all_sinks")
    @classmethod
    def _sinks_first(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "only true is supported: sinks run within their task, so a step routes after them"
            )
        return value

    @field_validator("render_args_server_side")
    @classmethod
    def _rendered_by_engine(cls, value: bool) -> bool:
        if not value:
            raise ValueError("only true is supported: the engine renders args before dispatch")
        return value


class _Retry(Section):
    """Exponential backoff: `base_ms * multiplier ** (attempt - 1)`, capped at `max_ms`,
    scaled by a factor in [0.5, 1) with jitter."""

    max_attempts: Annotated[int, Field(ge=1, le=1000)]
    base_ms: Annotated[int, Field(ge=0)]
    max_ms: Annotated[int, Field(ge=0)]
    multiplier: Annotated[float, Field(ge=1, le=100)] = 2.0
    jitter: bool = True

    def defaults(self) -> RetryDefaults:
        return RetryDefaults(
            max_attempts=self.max_attempts,
            initial_delay=self.base_ms / 1000,
            backoff_multiplier=self.multiplier,
            max_delay=self.max_ms / 1000,
            jitter=self.jitter,
        )


class PluginRetry(_Retry):
    """The retry of a step without `retry` (transient errors only)."""

    max_attempts: Annotated[int, Field(ge=1, le=1000)] = 6
    base_ms: Annotated[int, Field(ge=0)] = 200
    max_ms: Annotated[int, Field(ge=0)] = 30_000


class SinkRetry(_Retry):
    """The retry of a sink write without `retry` (retryable errors only)."""

    max_attempts: Annotated[int, Field(ge=1, le=1000)] = 8
    base_ms: Annotated[int, Field(ge=0)] = 200
    max_ms: Annotated[int, Field(ge=0)] = 60_000


class RetriesSettings(Section):
    plugin: PluginRetry = PluginRetry()
    sink: SinkRetry = SinkRetry()


class TimeoutsSettings(Section):
    """Budgets of what a playbook leaves without one; null: none from the configuration."""

    tool_default_ms: Millis | None = 30_000
    sink_default_ms: Millis | None = 30_000
    loop_item_ms: Millis | None = 30_000
    loop_total_ms: Millis | None = None


class DlqSettings(Section):
    enabled: bool = True
    topic: Annotated[str, Field(min_length=1, max_length=256)] = "noetl-dlq"
    retention_days: Annotated[int, Field(ge=1)] = 30


class TracingSettings(Section):
    enabled: bool = False
    sample_rate: Annotated[float, Field(ge=0, le=1)] = 0.1
    force_sample_on_error: bool = True
    exporter: Literal["otlp", "console", "none"] = "otlp"
    endpoint: str | None = None

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme, sep, rest = value.strip().partition("://")
        if not sep or scheme.lower() not in ("http", "https", "grpc") or not rest:
            raise ValueError("must be an http://, https:// or grpc:// URL")
        return value.strip()


class MetricsSettings(Section):
    """Prometheus metrics: the server serves them at `path` on its API port; a worker or
    `noetl run` serves them on an exporter of its own only when `port` is set (so workers
    sharing a host do not fight over one port)."""

    enabled: bool = True
    port: AnyPort | None = None
    host: str = "127.0.0.1"
    path: str = "/metrics"

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or any(c.isspace() for c in value):
            raise ValueError("must be a URL path starting with '/', without spaces")
        return value


class LoggingSettings(Section):
    """NoETL's own logs. `level` unset: INFO for servers and workers, WARNING for
    `noetl run` (whose terminal shows a live view)."""

    level: str | None = None
    format: Literal["json", "text"] = "text"
    redact_keys: tuple[Annotated[str, Field(min_length=1)], ...] = REDACT_KEYS

    @field_validator("level", mode="before")
    @classmethod
    def _level(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        level = value.strip().upper()
        level = "WARNING" if level == "WARN" else level
        if level not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return level


class PoliciesSettings(Section):
    """Defaults of a playbook's `policy` block (a playbook that sets a key wins)."""

    on_step_fail: str = "halt"
    on_sink_fail: Literal["retry", "fail_step", "async_ignore"] = "retry"
    on_when_error: Literal["treat_as_false", "fail_step"] = "treat_as_false"

    @field_validator("on_step_fail")
    @classmethod
    def _step_fail(cls, value: str) -> str:
        if not re.match(ON_STEP_FAIL_PATTERN, value) or value.endswith(":"):
            raise ValueError("must be halt, continue or route_edge:<step>")
        return value

    @field_validator("on_sink_fail", mode="before")
    @classmethod
    def _seed_spelling(cls, value: Any) -> Any:
        # Seed 000 writes "max_attempts→fail_step": fail the step once the retries are used.
        if isinstance(value, str) and value.replace("->", "→") == "max_attempts→fail_step":
            return "fail_step"
        return value


class DbSettings(Section):
    """The database (`url`). PostgreSQL: `partition_days` is the span of each partition
    of `event_log` and `step_state` the server makes ahead of time (two spans ahead,
    checked hourly)."""

    url: Annotated[str, Field(min_length=1)] = DEFAULT_DB
    partition_days: Annotated[int, Field(ge=1, le=366)] = 7

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        scheme, sep, _ = value.strip().partition("://")
        if sep and scheme.lower() not in _DB_SCHEMES:
            shown = scheme if scheme.isidentifier() else "?"
            raise ValueError(
                f"unknown scheme {shown!r}; expected a file path, sqlite:///path, memory:// "
                "or postgresql://user:password@host:port/database"
            )
        return value.strip()


class ServerSettings(Section):
    host: Annotated[str, Field(min_length=1)] = "127.0.0.1"
    port: Port = 8083
    # The pool new tasks are queued in; null: the same as `worker.pool`.
    pool: Annotated[str, Field(min_length=1)] | None = None
    # The largest request body the API reads (a bigger one is a 413); also `noetl ui`'s.
    max_body_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 16 * 1024 * 1024
    # How long a token read from the database is trusted (noetl.auth.cache): a token
    # revoked through another process is still accepted here for at most this long.
    # 0: read it on every request. (Not under `auth`: `config show` masks that section.)
    revocation_delay_s: Annotated[float, Field(ge=0, le=60)] = 1.0


class UiSettings(Section):
    """`noetl ui`: the console and the API over a database, on a port of their own."""

    host: Annotated[str, Field(min_length=1)] = "127.0.0.1"
    port: Port = 8084


class AuthSettings(Section):
    """API authentication. Off (`enabled: false`) only on a loopback address: `noetl
    server start` refuses to listen beyond it without authentication."""

    enabled: bool = True


class WorkerSettings(Section):
    pool: Annotated[str, Field(min_length=1)] = "default"
    concurrency: Slots | None = None
    python_processes: Slots | None = None
    lease_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    poll_s: Annotated[float, Field(gt=0, le=60)] = 0.5
    continue_: bool = Field(default=True, alias="continue")
    # A continuation's chain (noetl.worker.chain): the short python steps it may run past
    # its task before it commits them together (0: none), and for how long at most.
    chain_steps: Annotated[int, Field(ge=0, le=64)] = 8
    chain_ms: Annotated[float, Field(ge=0, le=10_000)] = 25.0
    # The largest result (as JSON) a task may return; a bigger one fails the task. Also
    # the limit of `noetl run`'s in-process workers.
    max_result_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 16 * 1024 * 1024
    # A successful result (as JSON) over this is kept whole in the result store and
    # reported as a small envelope with its reference (spilled; docs/dsl.md, "Large
    # results"), so events stay small. At most `max_result_bytes` when set.
    result_inline_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 256 * 1024

    @field_validator("result_inline_bytes")
    @classmethod
    def _inline_within_max(cls, value: int, info: ValidationInfo) -> int:
        most = info.data.get("max_result_bytes")
        if most is not None and value > most:
            raise ValueError(f"must be at most worker.max_result_bytes ({most})")
        return value


class RunSettings(Section):
    workers: Annotated[int, Field(ge=1, le=256)] | None = None


class DslSettings(Section):
    """What a deployment accepts of the DSL (seed 003's rollout flags, noetl.dsl.policy):
    `dialects`, the forms of playbook (native DSL v2, its legacy aliases, upstream NoETL's
    dialect); `allow_legacy`, the legacy aliases too (NOETL_ALLOW_LEGACY_ITER); `strict`,
    warnings fail validation (NOETL_STRICT_DSL_VALIDATION); `v2_enabled`, seed 003's
    NOETL_DSL_V2_ENABLED: this engine runs DSL v2 only, so false is refused."""

    allow_legacy: bool = True
    strict: bool = False
    dialects: tuple[Literal["native", "legacy", "upstream"], ...] = ("native", "legacy", "upstream")
    v2_enabled: bool = True

    @field_validator("v2_enabled")
    @classmethod
    def _v2_only(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "this engine runs DSL v2 only, so it cannot be turned off; to keep playbooks "
                "of some forms out, set dsl.dialects (native, legacy, upstream)"
            )
        return value

    def policy(self) -> DslPolicy:
        """The policy the validator applies (legacy aliases need both settings)."""
        accept = set(self.dialects)
        if not self.allow_legacy:
            accept.discard("legacy")
        return DslPolicy(accept=frozenset(accept), strict=self.strict)


class ComplexitySettings(Section):
    """Seed 002's "too complex then alert" (noetl.dsl.complexity): an execution whose
    plan scores `warn` or more is reported when it starts (the `plan.too_complex` log
    event, `noetl_plan_too_complex_total`) and its dead letters are escalated; one that
    scores `refuse` or more is not started. null: never."""

    warn: Annotated[int, Field(ge=1)] | None = 10_000
    refuse: Annotated[int, Field(ge=1)] | None = None


class SecretsSettings(Section):
    file: str | None = None


class CredentialsSettings(Section):
    """Named credentials (docs/tools.md, "Secrets and credentials"): `file`, a YAML or
    JSON file of records in upstream NoETL's format; `key`, the Fernet key (or keys,
    comma-separated: the first encrypts, all decrypt) of the credentials kept in the
    database. The key is a secret: never shown, and never repeated in an error."""

    file: Annotated[str, Field(min_length=1)] | None = None
    key: tuple[str, ...] = ()

    @field_validator("key", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("key")
    @classmethod
    def _fernet(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for position, key in enumerate(value, start=1):
            try:
                check_key(key)
            except ValueError as exc:
                raise ValueError(
                    f"key {position} is not a Fernet key: it {exc}; make one with "
                    "`noetl credential keygen`"
                ) from None
        return value

    def config(self) -> CredentialConfig:
        return CredentialConfig(file=self.file, keys=self.key)


class FileSinkSettings(Section):
    """Where the file sink writes: every `path` resolves under `root` (`..`, absolute
    paths elsewhere and symlinks out of it are refused). null: the working directory of
    `noetl run` and `noetl dlq replay --run-here`, the data directory of a worker
    (`$XDG_DATA_HOME/noetl`, else `~/.local/share/noetl`)."""

    root: Annotated[str, Field(min_length=1)] | None = None


class SinksSettings(Section):
    """Where sinks run. `in_worker` (NOETL_EXECUTE_SINKS_IN_WORKER), true: in the worker,
    right after their tool. false: the worker runs the tool only, and the server writes
    the result in a `sinks` task of `pool`, which each `noetl server start` serves with
    `concurrency` task slots (for workers that may not reach the sinks' systems)."""

    file: FileSinkSettings = FileSinkSettings()
    in_worker: bool = True
    pool: Annotated[str, Field(min_length=1)] = "server-sinks"
    concurrency: Annotated[int, Field(ge=1, le=64)] = 4


class PlaybooksSettings(Section):
    """Where the `playbook` tool reads a child playbook that is not in the catalog: its
    `path` resolves under `root`, as the file sink's does (null: the same defaults)."""

    root: Annotated[str, Field(min_length=1)] | None = None


class Settings(Section):
    """The whole configuration; each attribute is a section of the YAML file."""

    orchestrator: OrchestratorSettings = OrchestratorSettings()
    retries: RetriesSettings = RetriesSettings()
    timeouts: TimeoutsSettings = TimeoutsSettings()
    dlq: DlqSettings = DlqSettings()
    retention: RetentionSettings = RetentionSettings()
    tracing: TracingSettings = TracingSettings()
    metrics: MetricsSettings = MetricsSettings()
    logging: LoggingSettings = LoggingSettings()
    policies: PoliciesSettings = PoliciesSettings()
    db: DbSettings = DbSettings()
    server: ServerSettings = ServerSettings()
    ui: UiSettings = UiSettings()
    auth: AuthSettings = AuthSettings()
    sessions: SessionsSettings = SessionsSettings()
    worker: WorkerSettings = WorkerSettings()
    bus: BusSettings = BusSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    triggers: TriggersSettings = TriggersSettings()
    run: RunSettings = RunSettings()
    dsl: DslSettings = DslSettings()
    complexity: ComplexitySettings = ComplexitySettings()
    secrets: SecretsSettings = SecretsSettings()
    credentials: CredentialsSettings = CredentialsSettings()
    sinks: SinksSettings = SinksSettings()
    playbooks: PlaybooksSettings = PlaybooksSettings()

    def roots(self, default: Path) -> Roots:
        """The roots of the file sink and the `playbook` tool; `default` where unset
        (the command's: the working directory, or a worker's data directory)."""
        return Roots.of(self.sinks.file.root, self.playbooks.root, default)

    @property
    def server_pool(self) -> str:
        """The pool a server queues tasks in."""
        return self.server.pool or self.worker.pool

    def engine_options(self) -> EngineOptions:
        """The engine's defaults: retries, timeouts and failure policies."""
        return EngineOptions(
            retry=self.retries.plugin.defaults(),
            sink_retry=self.retries.sink.defaults(),
            tool_timeout_ms=self.timeouts.tool_default_ms,
            sink_timeout_ms=self.timeouts.sink_default_ms,
            loop_item_timeout_ms=self.timeouts.loop_item_ms,
            on_step_fail=self.policies.on_step_fail,
            on_sink_fail=self.policies.on_sink_fail,
            on_when_error=self.policies.on_when_error,
            loop_total_timeout_ms=self.timeouts.loop_total_ms,
            dead_letters=self.dlq.enabled,
            complexity_warn=self.complexity.warn,
            complexity_refuse=self.complexity.refuse,
            sinks_pool=None if self.sinks.in_worker else self.sinks.pool,
        )
