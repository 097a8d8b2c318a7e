"""The configuration of NoETL: a YAML file and `NOETL_*` environment variables, validated
once at start-up by the CLI and passed down (nothing here reads the environment on import).

    load_settings(config_file, environ, flags) -> Settings
    resolve(...) -> Resolved (the settings and where each value came from)
    Settings.engine_options() -> noetl.engine.EngineOptions
    render(resolved, as_json=...) -> the text `noetl config show` prints, secrets masked

Precedence: built-in defaults < the file (`--config` / `NOETL_CONFIG`) < environment
variables (`NOETL_<SECTION>_<KEY>`) < command-line flags. Bad values raise `ConfigError`.
The reference of every key is docs/operations.md, "Configuration".
"""

from noetl.config.loader import (
    CONFIG_ENV,
    Leaf,
    Origin,
    Resolved,
    env_name,
    leaves,
    load_settings,
    resolve,
)
from noetl.config.model import DEFAULT_DB, Settings
from noetl.config.show import masked, render

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_DB",
    "Leaf",
    "Origin",
    "Resolved",
    "Settings",
    "env_name",
    "leaves",
    "load_settings",
    "masked",
    "render",
    "resolve",
]
