"""Where steps may touch the file system: every path a playbook names for the file sink
(`sinks.file.root`) or the `playbook` tool (`playbooks.root`) resolves under a root.

A relative path is taken from the root; `..`, an absolute path elsewhere and a symlink
that leads out of the root are refused (`PathRefusedError`, naming the field, the path,
the root and the setting). The roots are settings, resolved once by the command that
runs tasks (`noetl run` and `noetl dlq replay --run-here`: the working directory;
`noetl worker start`: the data directory) and passed down to the tools it builds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from noetl.errors import PathRefusedError

__all__ = ["Roots", "confine", "data_dir"]

SINK_ROOT_SETTING = "sinks.file.root, NOETL_SINKS_FILE_ROOT"
PLAYBOOK_ROOT_SETTING = "playbooks.root, NOETL_PLAYBOOKS_ROOT"


@dataclass(frozen=True, slots=True)
class Roots:
    """The roots of the file sink and of the `playbook` tool (absolute, resolved)."""

    sinks: Path
    playbooks: Path

    @classmethod
    def of(cls, sinks: str | Path | None, playbooks: str | Path | None, default: Path) -> Roots:
        """Roots from settings (None: `default`), made absolute and resolved."""
        return cls(_absolute(sinks, default), _absolute(playbooks, default))

    @classmethod
    def here(cls) -> Roots:
        """Both roots at the working directory (what `noetl run` uses by default)."""
        cwd = Path.cwd().resolve()
        return cls(cwd, cwd)


def data_dir(env: Mapping[str, str]) -> Path:
    """The data directory of a worker: `$XDG_DATA_HOME/noetl`, else
    `~/.local/share/noetl`."""
    base = env.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "noetl"


def confine(path: str, root: Path, *, field: str, setting: str) -> Path:
    """`path` (relative to `root`, or absolute) resolved, symlinks followed; raises
    PathRefusedError when it is not inside `root`."""
    real_root = root.resolve()
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = real_root / candidate
    resolved = candidate.resolve()
    if resolved != real_root and not resolved.is_relative_to(real_root):
        raise PathRefusedError(field=field, path=path, root=str(real_root), setting=setting)
    return resolved


def _absolute(value: str | Path | None, default: Path) -> Path:
    return Path(value or default).expanduser().resolve()
