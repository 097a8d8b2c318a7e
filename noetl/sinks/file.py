"""The file sink: json, jsonl or csv, written atomically.

The body goes to a temporary file in the target's directory, is flushed to disk, and
replaces the target in one `os.replace`: a reader sees the old file or the new one, never
half of one, and a write that fails (a value that is not JSON, a disk full) leaves the old
file as it was and no temporary file behind. Missing parent directories are created.

Every path resolves under the writer's root (`sinks.file.root`; see noetl.paths): a
relative path is taken from it, and `..`, an absolute path elsewhere or a symlink leading
out of it is refused (`PathRefusedError`, never retried).
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from noetl.dsl.kinds import FileSink
from noetl.errors import RetryableError, SinkError
from noetl.paths import SINK_ROOT_SETTING, confine
from noetl.sinks._data import write_body

_TRANSIENT = frozenset({errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ETIMEDOUT})


class FileWriter:
    kind = "file"

    def __init__(self, root: Path | None = None) -> None:
        # None: the working directory when writing (a writer made without settings).
        self.root = root

    def write(self, value: Any, spec: Mapping[str, Any], key: str) -> dict[str, Any]:
        config = FileSink.model_validate(dict(spec))
        root = self.root or Path.cwd()
        path = confine(config.path, root, field="spec.path", setting=SINK_ROOT_SETTING)
        try:
            count = write_atomically(path, value, config.format)
            size = path.stat().st_size
        except OSError as exc:
            text = f"{path}: {exc.strerror or exc}"
            if exc.errno in _TRANSIENT:
                raise RetryableError(text) from None
            raise SinkError(text) from None
        return {"path": str(path), "format": config.format, "rows": count, "bytes": size}


def write_atomically(path: Path, value: Any, fmt: str) -> int:
    """Write `value` to `path` through a temporary file and `os.replace`; the count."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    # Opened with "x" rather than mkstemp so the file gets the usual umask permissions.
    temporary = directory / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(temporary, "x", encoding="utf-8", newline="") as fp:
            count = write_body(fp, value, fmt, "file")
            fp.flush()
            os.fsync(fp.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _sync_directory(directory)
    return count


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable (where the platform allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
