"""Secrets and credentials, resolved where a task runs and masked in what it reports.

Providers answer `secret(name)` (a string) and `credential(name)` (a mapping, such as
`{"dsn": "postgresql://..."}`), or None when they do not know the name:

* `EnvSecrets`: `NOETL_SECRET_<NAME>` and `NOETL_CREDENTIAL_<NAME>` (a credential's value
  is JSON, or a plain string taken as `{"dsn": value}`). `<NAME>` is first the name as
  written, then the environment's convention: upper case, with every character that is
  not a letter or a digit as `_` (`secrets.api_token` reads `NOETL_SECRET_API_TOKEN`).
* `FileSecrets`: a YAML or JSON file with `secrets: {NAME: value}` and
  `credentials: {NAME: {...}}` (`noetl worker start --secrets-file`, `NOETL_SECRETS_FILE`).
* `CredentialsFile` (`noetl.credentials.file`): a file of named credential records in
  upstream NoETL's format (`credentials.file`, NOETL_CREDENTIALS_FILE, `--credentials-file`).
* `DatabaseCredentials` (`noetl.credentials.store`): credentials kept encrypted in the
  database (`noetl credential set`), decrypted with `credentials.key`.
* `ChainSecrets`: the first provider that knows a name wins, in the order above. A vault
  or a cloud secret manager is one more class with the same two methods.

`SecretScope` is what one task sees: it resolves the markers of the task's secret names
(`noetl.core.secrets`) in the spec and args, hands credentials to tools, remembers every
value it handed out, and masks them in the outcome (result, error, stdout), so a value
never reaches the event log, the inbox, the DLQ, logs or API responses. Every value handed
out is also remembered process-wide (`noetl.redaction.SECRET_VALUES`), so
log lines mask it wherever it appears.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import yaml

from noetl.core import Outcome, Task
from noetl.core.secrets import MARKER
from noetl.credentials import CredentialConfig
from noetl.credentials.file import CredentialsFile
from noetl.credentials.keys import Keyring
from noetl.credentials.records import Credential, parse_credential, secret_values
from noetl.credentials.store import CredentialStore, DatabaseCredentials
from noetl.errors import ConfigError, FatalError
from noetl.redaction import SECRET_VALUES

MASK = "***"
MIN_MASKED = 3  # shorter values are not masked: "a" would mask every "a" in a result


class SecretError(FatalError):
    """A secret or credential the task needs is not known to any provider."""


class SecretProvider(Protocol):
    def secret(self, name: str) -> str | None: ...

    def credential(self, name: str) -> Mapping[str, Any] | None: ...


_NOT_ENV_CHAR = re.compile(r"[^A-Za-z0-9]")


def env_names(prefix: str, name: str) -> list[str]:
    """The variables that may hold `name`, in lookup order: the exact spelling, then the
    environment's convention (upper case, other characters as `_`)."""
    exact = f"{prefix}{name}"
    conventional = f"{prefix}{_NOT_ENV_CHAR.sub('_', name).upper()}"
    return [exact] if conventional == exact else [exact, conventional]


class EnvSecrets:
    """`NOETL_SECRET_<NAME>` and `NOETL_CREDENTIAL_<NAME>` from the environment (the name
    as written first, then in upper case)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    def _lookup(self, prefix: str, name: str) -> str | None:
        for variable in env_names(prefix, name):
            value = self._environ.get(variable)
            if value is not None:
                return value
        return None

    def secret(self, name: str) -> str | None:
        return self._lookup("NOETL_SECRET_", name)

    def credential(self, name: str) -> Mapping[str, Any] | None:
        raw = self._lookup("NOETL_CREDENTIAL_", name)
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            return {"dsn": raw}
        return value if isinstance(value, dict) else {"dsn": raw}


class FileSecrets:
    """`secrets:` and `credentials:` of a YAML or JSON file, read once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            data = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"secrets file {self.path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise ConfigError(f"secrets file {self.path} is not valid YAML{where}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"secrets file {self.path} must be a mapping")
        secrets, credentials = data.get("secrets") or {}, data.get("credentials") or {}
        if not isinstance(secrets, dict) or not isinstance(credentials, dict):
            raise ConfigError(f"secrets file {self.path}: `secrets` and `credentials` are maps")
        for name, value in credentials.items():
            if not isinstance(value, dict):
                raise ConfigError(f"secrets file {self.path}: credential {name!r} is not a map")
        self._secrets = {str(k): str(v) for k, v in secrets.items()}
        self._credentials: dict[str, dict[str, Any]] = {str(k): v for k, v in credentials.items()}

    def secret(self, name: str) -> str | None:
        return self._secrets.get(name)

    def credential(self, name: str) -> Mapping[str, Any] | None:
        return self._credentials.get(name)


class ChainSecrets:
    """Asks each provider in turn."""

    def __init__(self, providers: Sequence[SecretProvider]) -> None:
        self.providers = list(providers)

    def secret(self, name: str) -> str | None:
        for provider in self.providers:
            value = provider.secret(name)
            if value is not None:
                return value
        return None

    def credential(self, name: str) -> Mapping[str, Any] | None:
        for provider in self.providers:
            value = provider.credential(name)
            if value is not None:
                return value
        return None


def default_provider(
    secrets_file: str | None = None,
    *,
    credentials: CredentialConfig | None = None,
    store: CredentialStore | None = None,
) -> SecretProvider:
    """The environment, then the secrets file (`NOETL_SECRETS_FILE` when not given), then
    the credentials file of `credentials`, then the credentials kept in `store` (the
    database), decrypted with the keys of `credentials`. The files are read (and checked:
    ConfigError naming the file) and the keys checked now; the database at each call."""
    path = secrets_file or os.environ.get("NOETL_SECRETS_FILE")
    config = credentials or CredentialConfig()
    providers: list[SecretProvider] = [EnvSecrets()]
    if path:
        providers.append(FileSecrets(path))
    if config.file:
        providers.append(CredentialsFile(config.file))
    if store is not None:
        providers.append(DatabaseCredentials(store, Keyring(config.keys)))
    return ChainSecrets(providers)


class SecretScope:
    """The secrets of one task: resolve its markers, hand out credentials, mask values."""

    def __init__(self, provider: SecretProvider | None) -> None:
        self._provider = provider
        self._values: set[str] = set()
        self._unresolved: Task | None = None

    def resolve(self, task: Task) -> Task:
        """The task with the markers of its secret names replaced by their values."""
        self._unresolved = task
        if not task.secrets:
            return task
        values: dict[str, str] = {}
        for name in task.secrets:
            value = self._provider.secret(name) if self._provider is not None else None
            if value is None:
                raise SecretError(
                    f"secret {name!r} is not configured on this worker "
                    f"(set {' or '.join(env_names('NOETL_SECRET_', name))} "
                    "or add it to the secrets file)"
                )
            values[name] = value
            self._remember(value)
        return replace(
            task,
            spec=_substitute(task.spec, values),
            args=_substitute(task.args, values),
        )

    def unresolved(self, task: Task) -> Task:
        """`task` as it was before `resolve`, its secrets still markers: for a tool that
        hands values on to be stored (`playbook`: a child's workload), so they stay
        references that the child's own tasks resolve."""
        original = self._unresolved
        return original if original is not None and original.task_id == task.task_id else task

    def credential(self, name: str) -> dict[str, Any]:
        """A named credential as found (a map: an upstream record `{type, data}` or an
        untyped map); its secret values are masked in the outcome like secrets."""
        found = self._provider.credential(name) if self._provider is not None else None
        if found is None:
            raise SecretError(
                f"credential {name!r} is not configured on this worker "
                f"(set {' or '.join(env_names('NOETL_CREDENTIAL_', name))}, add it to "
                "the credentials file or the secrets file, or store it with "
                "`noetl credential set`)"
            )
        for value in secret_values(parse_credential(name, found)):
            self._remember(value)
        return dict(found)

    def record(self, name: str) -> Credential:
        """A named credential, parsed (`noetl.credentials.records`); values masked."""
        return parse_credential(name, self.credential(name))

    def remember(self, value: str) -> None:
        """Mask this value too (a tool found it, e.g. a password inside a DSN)."""
        self._remember(value)

    def _remember(self, value: str) -> None:
        if len(value) >= MIN_MASKED:
            self._values.add(value)
            SECRET_VALUES.remember(value)  # log lines of this process mask it too

    def holds(self, text: str) -> bool:
        """Whether `text` contains a secret value handed out to this task."""
        return any(secret in text for secret in self._values)

    def mask(self, value: Any) -> Any:
        """`value` with every handed-out secret replaced by `***` (strings, lists, maps)."""
        if not self._values:
            return value
        return _mask(value, sorted(self._values, key=len, reverse=True))

    def mask_outcome(self, outcome: Outcome) -> Outcome:
        if not self._values:
            return outcome
        return replace(
            outcome,
            this=self.mask(outcome.this),
            error=self.mask(outcome.error),
            stdout=self.mask(outcome.stdout),
        )


def _substitute(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        if "<<secret:" not in value:
            return value
        return MARKER.sub(lambda m: values.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {k: _substitute(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, values) for v in value]
    return value


def _mask(value: Any, secrets: Sequence[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {_mask(k, secrets): _mask(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, secrets) for v in value]
    return value


_SCOPE: ContextVar[SecretScope | None] = ContextVar("noetl_secret_scope", default=None)


def current_scope() -> SecretScope:
    """The secret scope of the task running in this thread (`ToolRegistry.run` sets it);
    an empty scope outside a task."""
    scope = _SCOPE.get()
    return scope if scope is not None else SecretScope(None)


def enter_scope(scope: SecretScope) -> Any:
    """Make `scope` current; returns the token for `leave_scope`."""
    return _SCOPE.set(scope)


def leave_scope(token: Any) -> None:
    _SCOPE.reset(token)
