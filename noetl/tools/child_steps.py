"""What the `playbook` tool reads of a child playbook besides starting it: the file a
playbook path names under the root (`find_file`: `file_candidates`, else the playbook
file whose `metadata.path` it is), the step names of its text (`StepNames`, to check a
`return_step` before the child starts) and, once the child finished, the result of one
of its steps (`step_result`), read from the child's event log in the store.

`noetl validate` / `noetl lint` use the first two to check a `return_step` against a
child file they can find (noetl.cli.dsl_cmds).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path, PurePosixPath
from typing import Any

from noetl.core import EventType
from noetl.dsl.source import SourceError, parse_source
from noetl.dsl.validate import load_playbook_text
from noetl.paths import PLAYBOOK_ROOT_SETTING, confine
from noetl.store.base import Store

__all__ = ["StepNames", "file_candidates", "find_file", "step_result"]

SUFFIXES = (".yaml", ".yml")
# Events read at a time when looking for a step's result in a child's log.
EVENT_CHUNK = 1000
# Looking for a playbook by its `metadata.path` reads at most this many files under the
# root (a root may be a big directory), and none bigger than this.
MAX_SCANNED_FILES = 5000
MAX_SCANNED_BYTES = 4 * 1024 * 1024


def file_candidates(path: str) -> list[str]:
    """The files a playbook path may name, in the order they are tried: the path as
    given; with `.yaml`, `.yml`; and, for a directory, the file inside it named after its
    last part (`x/y` -> `x/y/y.yaml`: upstream's layout, where a playbook's catalog path
    is its directory). A path that ends in `.yaml` / `.yml` names that file only."""
    path = path.rstrip("/")
    if not path or path.endswith(SUFFIXES):
        return [path] if path else []
    out = [path, *(path + suffix for suffix in SUFFIXES)]
    name = PurePosixPath(path).name
    if name and name not in (".", ".."):
        out.extend(f"{path}/{name}{suffix}" for suffix in SUFFIXES)
    return out


def find_file(path: str, root: Path) -> tuple[Path | None, list[str]]:
    """The file under `root` that playbook `path` names, and what was tried: the first of
    `file_candidates` that is a file, else the first playbook file (sorted walk of the
    root, hidden directories skipped) whose `metadata.path` is `path`. PathRefusedError
    when `path` leads out of the root."""
    tried = file_candidates(path)
    for name in tried:
        file = confine(name, root, field="spec.path", setting=PLAYBOOK_ROOT_SETTING)
        if file.is_file():
            return file, tried
    tried.append(f"a playbook with metadata.path {path!r}")
    return _by_metadata_path(path.rstrip("/"), root.resolve()), tried


def _by_metadata_path(path: str, root: Path) -> Path | None:
    scanned = 0
    for folder, dirs, files in os.walk(root):  # symlinks are not followed
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.endswith(SUFFIXES):
                continue
            scanned += 1
            if scanned > MAX_SCANNED_FILES:
                return None
            file = Path(folder) / name
            if _declares(file, path):
                return file
    return None


def _declares(file: Path, path: str) -> bool:
    """Whether `file` is a playbook whose `metadata.path` is `path`."""
    try:
        if file.is_symlink() or file.stat().st_size > MAX_SCANNED_BYTES:
            return False
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if path not in text:  # most files: no need to parse
        return False
    try:
        tree = parse_source(text, str(file)).tree
    except SourceError:
        return False
    metadata = tree.get("metadata") if isinstance(tree, dict) else None
    return isinstance(metadata, dict) and str(metadata.get("path", "")).rstrip("/") == path


class StepNames:
    """The step names of playbook texts, each text read once (a loop starts many
    children of one text)."""

    def __init__(self, size: int = 32) -> None:
        self._size = size
        self._names: dict[str, frozenset[str] | None] = {}
        self._lock = threading.Lock()

    def __call__(self, text: str, name: str = "<child>") -> frozenset[str] | None:
        """The names of the steps of `text`; None when it is not a valid playbook (then
        starting it reports why)."""
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        with self._lock:
            if key in self._names:
                return self._names[key]
        loaded = load_playbook_text(text, name)
        names = (
            frozenset(step.step for step in loaded.playbook.workflow)
            if loaded.ok and loaded.playbook is not None
            else None
        )
        with self._lock:
            if len(self._names) >= self._size:
                self._names.pop(next(iter(self._names)))
            self._names[key] = names
        return names


def step_result(store: Store, execution_id: str, step: str) -> tuple[bool, Any]:
    """`(True, result)` of the last time `step` of the execution finished `ok` (its
    `step.finished` event), `(False, None)` when it never did (it did not run, was
    skipped, or failed)."""
    found: tuple[bool, Any] = (False, None)
    after = 0
    while True:
        events = store.load_events(execution_id, after_seq=after, limit=EVENT_CHUNK)
        for event in events:
            if (
                event.type == EventType.STEP_FINISHED
                and event.step == step
                and event.payload.get("status") == "ok"
            ):
                found = (True, event.payload.get("result"))
        if len(events) < EVENT_CHUNK:
            return found
        after = events[-1].seq
