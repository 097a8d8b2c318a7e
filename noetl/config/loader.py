"""Building the settings: defaults < YAML file < `NOETL_*` environment < command-line flags.

* The file is `--config FILE`, else `NOETL_CONFIG`, else none. It is read with the
  playbook reader (`noetl.dsl.source`), so every key keeps its line. Unknown keys are
  errors, with the nearest known key as a suggestion.
* Each key has the environment variable `NOETL_<SECTION>_<KEY>` (`retries.plugin.max_attempts`
  is `NOETL_RETRIES_PLUGIN_MAX_ATTEMPTS`), and a few keep older names too (`NOETL_DB`,
  `NOETL_LOG_LEVEL`, ...; the canonical name wins when both are set). A list is comma-
  separated; `none`, `null` or an empty value clear a key that may be null. A variable that
  starts like a section's (`NOETL_RETRIES_...`) but names no key is an error.
* Flags come from the CLI as `{path: (value, flag)}`.

Every problem found is reported at once in one `ConfigError`, a line each, naming where the
value came from (file and line, variable or flag), the key and what is allowed; a value that
may hold a secret is never repeated.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from noetl.config.model import Settings
from noetl.dsl.source import SourceError, parse_source
from noetl.dsl.yaml_tree import YMap
from noetl.errors import ConfigError
from noetl.redaction import mask_url, sensitive

__all__ = ["Leaf", "Origin", "Resolved", "env_name", "leaves", "load_settings", "resolve"]

CONFIG_ENV = "NOETL_CONFIG"
# Older names that still set a key (the canonical NOETL_<SECTION>_<KEY> wins over them).
ALIASES: dict[str, tuple[str, ...]] = {
    "db.url": ("NOETL_DB",),
    "logging.level": ("NOETL_LOG_LEVEL",),
    "run.workers": ("NOETL_WORKERS",),
    "dsl.allow_legacy": ("NOETL_ALLOW_LEGACY", "NOETL_ALLOW_LEGACY_ITER"),
    # seed 003's rollout flags
    "dsl.strict": ("NOETL_STRICT_DSL_VALIDATION", "NOETL_STRICT_VALIDATION"),
    "dsl.v2_enabled": ("NOETL_DSL_V2_ENABLED",),
    "sinks.in_worker": ("NOETL_EXECUTE_SINKS_IN_WORKER",),
}
# Variables that look like a section's but belong to something else.
FOREIGN = frozenset({"NOETL_SERVER_URL"})  # the server the `exec` commands talk to
# Keys whose values may carry credentials: never shown in errors, masked by `config show`.
SECRET_KEYS = frozenset({"db.url", "tracing.endpoint", "sessions.nats_url"})
# Keys whose names look sensitive but whose values are not secrets.
HARMLESS_KEYS = frozenset(
    {"secrets.file", "credentials.file", "logging.redact_keys", "auth.enabled"}
)
_MAX_SHOWN = 80


@dataclass(frozen=True, slots=True)
class Leaf:
    """One setting: its dotted path (YAML names), environment variables and shape."""

    path: str
    env: str
    aliases: tuple[str, ...]
    many: bool  # a list: comma-separated in the environment
    nullable: bool

    @property
    def secret(self) -> bool:
        """Whether its value must not be shown (it may hold a credential)."""
        if self.path in SECRET_KEYS:
            return True
        return self.path not in HARMLESS_KEYS and any(sensitive(p) for p in self.path.split("."))


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a value came from: `default`, `file` (`where` is FILE:LINE), `env` (the
    variable) or `flag` (the option)."""

    kind: Literal["default", "file", "env", "flag"]
    where: str = ""

    def describe(self) -> str:
        return self.kind if not self.where else f"{self.kind} {self.where}"


DEFAULT = Origin("default")


@dataclass(frozen=True)
class Resolved:
    """The settings and where each value that is not a default came from."""

    settings: Settings
    origins: Mapping[str, Origin] = field(default_factory=dict)
    file: str | None = None

    def origin(self, path: str) -> Origin:
        return self.origins.get(path, DEFAULT)


def env_name(path: str) -> str:
    """`retries.plugin.max_attempts` -> `NOETL_RETRIES_PLUGIN_MAX_ATTEMPTS`."""
    return "NOETL_" + path.replace(".", "_").upper()


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    """A model's fields by their YAML names (the alias when there is one)."""
    return {(info.alias or name): info for name, info in model.model_fields.items()}


def _shape(annotation: Any) -> tuple[bool, bool]:
    """(a list, may be null) of a field's type."""
    nullable = False
    if get_origin(annotation) in (Union, UnionType):
        args = get_args(annotation)
        nullable = NoneType in args
        rest = [a for a in args if a is not NoneType]
        annotation = rest[0] if len(rest) == 1 else annotation
    return get_origin(annotation) in (list, tuple), nullable


@cache
def leaves() -> tuple[Leaf, ...]:
    """Every setting, in the order of the models."""
    out: list[Leaf] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in _fields(model).items():
            path = prefix + name
            sub = _submodel(info.annotation)
            if sub is not None:
                walk(sub, path + ".")
                continue
            many, nullable = _shape(info.annotation)
            out.append(Leaf(path, env_name(path), ALIASES.get(path, ()), many, nullable))

    walk(Settings, "")
    return tuple(out)


@cache
def _leaf_map() -> dict[str, Leaf]:
    return {leaf.path: leaf for leaf in leaves()}


def resolve(
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, tuple[Any, str]] | None = None,
) -> Resolved:
    """The settings from defaults, the file, the environment (`os.environ` when None) and
    `flags` (`{path: (value, option)}`), with the origin of each value set. Raises
    ConfigError listing every problem."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    errors: list[str] = []
    file = str(config_file) if config_file else env.get(CONFIG_ENV) or None
    if file:
        _read_file(file, from_env=not config_file, values=values, origins=origins, errors=errors)
    _read_environ(env, values, origins, errors)
    for path, (value, option) in (flags or {}).items():
        if path not in _leaf_map():
            raise ValueError(f"no setting {path!r}")  # a mistake in the CLI, not the user's
        values[path] = value
        origins[path] = Origin("flag", option)
    settings = None
    try:  # also after other errors: every bad value is reported at once
        settings = Settings.model_validate(_nest(values))
    except ValidationError as exc:
        errors += [_explain(error, values, origins) for error in exc.errors(include_url=False)]
    if errors or settings is None:
        raise ConfigError("\n".join(errors))
    return Resolved(settings, origins, file)


def load_settings(
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, tuple[Any, str]] | None = None,
) -> Settings:
    """The settings (see `resolve`)."""
    return resolve(config_file, environ, flags).settings


# --- the file ----------------------------------------------------------------------------


def _read_file(
    file: str,
    *,
    from_env: bool,
    values: dict[str, Any],
    origins: dict[str, Origin],
    errors: list[str],
) -> None:
    named = f"{file} (from {CONFIG_ENV})" if from_env else file
    try:
        text = Path(file).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        errors.append(f"{named}: configuration file not found")
        return
    except IsADirectoryError:
        errors.append(f"{named}: is a directory, not a configuration file")
        return
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        errors.append(f"{named}: cannot read the configuration file ({reason})")
        return
    if all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        return  # an empty file: every default
    try:
        tree = parse_source(text, file).tree
    except SourceError as exc:
        diagnostic = exc.diagnostic
        where = f"{file}:{diagnostic.line}" if diagnostic.line else file
        # The reader speaks of playbooks; its YAML messages hold for any file.
        errors.append(f"{where}: {diagnostic.message.replace('playbook', 'configuration')}")
        return
    if not isinstance(tree, YMap):
        sections = ", ".join(_fields(Settings))
        errors.append(f"{file}:1: the configuration must be a mapping of sections ({sections})")
        return
    _Walk(file, values, origins, errors).section(tree, Settings, "")


@dataclass
class _Walk:
    """Collects the values of a file's tree, with the line of each."""

    file: str
    values: dict[str, Any]
    origins: dict[str, Origin]
    errors: list[str]

    def section(self, node: YMap, model: type[BaseModel], prefix: str) -> None:
        known = _fields(model)
        for key, value in node.items():
            line = node.key_line(key)
            path = prefix + key
            info = known.get(key)
            if info is None:
                where = f"in '{prefix[:-1]}'" if prefix else "at the top level"
                self.error(line, f"unknown key '{path}' {where}{_suggest(key, known)}")
                continue
            sub = _submodel(info.annotation)
            if sub is None:
                self.values[path] = value
                self.origins[path] = Origin("file", f"{self.file}:{line}")
            elif isinstance(value, YMap):
                self.section(value, sub, path + ".")
            elif value is not None:  # `dlq:` alone is an empty section
                keys = ", ".join(_fields(sub))
                self.error(line, f"'{path}' must be a mapping of its keys ({keys})")

    def error(self, line: int, message: str) -> None:
        self.errors.append(f"{self.file}:{line}: {message}")


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


# --- the environment ---------------------------------------------------------------------


def _read_environ(
    env: Mapping[str, str],
    values: dict[str, Any],
    origins: dict[str, Origin],
    errors: list[str],
) -> None:
    known: set[str] = set(FOREIGN)
    for leaf in leaves():
        known.add(leaf.env)
        known.update(leaf.aliases)
        for name in (leaf.env, *leaf.aliases):
            if name in env:
                values[leaf.path] = _parse_env(leaf, env[name])
                origins[leaf.path] = Origin("env", name)
                break
    prefixes = tuple(f"NOETL_{section.upper()}_" for section in _fields(Settings))
    for name in sorted(env):
        if name.startswith(prefixes) and name not in known:
            errors.append(f"{name}: unknown setting{_suggest(name, sorted(known))}")


def _parse_env(leaf: Leaf, raw: str) -> Any:
    text = raw.strip()
    if leaf.nullable and text.lower() in ("", "none", "null"):
        return None
    if leaf.many:
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


# --- validation errors -------------------------------------------------------------------


def _nest(values: Mapping[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, value in values.items():
        *parents, last = path.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return tree


def _explain(error: Any, values: Mapping[str, Any], origins: Mapping[str, Origin]) -> str:
    """One line for a pydantic error: where, the key, the value (unless secret), what is
    allowed."""
    # A list item's position is left out: the error is about the key that holds the list.
    path = ".".join(str(part) for part in error["loc"] if not isinstance(part, int))
    origin = origins.get(path, DEFAULT)
    message = str(error["msg"]).removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    leaf = _leaf_map().get(path)
    where = origin.where or origin.kind
    if leaf is None or leaf.secret or path not in values:
        return f"{where}: {path}: {message}"
    return f"{where}: {path} = {_shown(values[path])}: {message}"


def _shown(value: Any) -> str:
    """A bad value as an error may repeat it: short, and without any password in it."""
    text = mask_url(value) if isinstance(value, str) else value
    shown = repr(text)
    return shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 3] + "..."
