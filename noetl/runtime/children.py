"""How the `playbook` tool starts child executions (`noetl.tools.playbook.ChildLauncher`).

* `StoreLauncher` (distributed workers): creates the child in the shared store exactly as
  a server starts an execution (`Decider.start`: validated, created with its first tasks
  in one transaction); the workers of the pool run its tasks and the servers decide on
  their outcomes.
* `EmbeddedLauncher` (`noetl run`): starts the child in the same embedded runtime, whose
  `wait` drives it along with its parent.

Both take the child's id from the caller and answer "already started" when an execution
with that id exists, so a task that runs again finds its child instead of starting another.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

from noetl.core import ConcurrencyError
from noetl.decision.decider import Decider
from noetl.dsl.model import Playbook
from noetl.dsl.validate import load_playbook_text
from noetl.runtime.embedded import EmbeddedRuntime
from noetl.scripts import ScriptReader
from noetl.store.base import InputKind, Store

__all__ = ["EmbeddedLauncher", "StoreLauncher"]


class StoreLauncher:
    """Starts child executions in a shared store, as a server would."""

    def __init__(
        self,
        decider: Decider,
        *,
        stopping: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._decider = decider
        self._stopping = stopping
        self._clock = clock

    @property
    def store(self) -> Store:
        return self._decider.store

    def launch(
        self,
        text: str,
        *,
        path: str | None,
        workload: dict[str, Any],
        execution_id: str,
        parent_execution_id: str,
    ) -> bool:
        try:
            self._decider.start(
                text,
                path=path,
                workload=workload,
                parent_execution_id=parent_execution_id,
                now=self._clock(),
                execution_id=execution_id,
            )
        except ConcurrencyError:
            return False  # created before (a re-run of the parent's task): nothing written
        return True

    def cancel(self, execution_id: str) -> None:
        record = self.store.get_execution(execution_id)
        if record is not None and not record.status.terminal:
            self.store.post_input(execution_id, InputKind.CANCEL, {"by": "parent"})

    def stopping(self) -> bool:
        return self._stopping()


class EmbeddedLauncher:
    """Starts child executions in an embedded runtime. Bound after the runtime is built
    (`bind`): the runtime takes the tool registry, which takes this launcher."""

    def __init__(
        self, runtime: EmbeddedRuntime | None = None, *, scripts: ScriptReader | None = None
    ) -> None:
        self._runtime = runtime
        self._scripts = scripts  # reads the script files a child's tools name
        self._playbooks: dict[str, Playbook] = {}
        self._lock = threading.Lock()

    def bind(self, runtime: EmbeddedRuntime) -> None:
        self._runtime = runtime

    @property
    def runtime(self) -> EmbeddedRuntime:
        if self._runtime is None:
            raise RuntimeError("EmbeddedLauncher is not bound to a runtime")
        return self._runtime

    @property
    def store(self) -> Store:
        return self.runtime.store

    def launch(
        self,
        text: str,
        *,
        path: str | None,
        workload: dict[str, Any],
        execution_id: str,
        parent_execution_id: str,
    ) -> bool:
        try:
            self.runtime.start(
                self._playbook(text, path),
                workload=workload,
                source_text=text,
                path=path,
                parent_execution_id=parent_execution_id,
                execution_id=execution_id,
            )
        except ConcurrencyError:
            return False
        return True

    def cancel(self, execution_id: str) -> None:
        self.runtime.cancel(execution_id)

    def stopping(self) -> bool:
        return self._runtime is not None and self._runtime.closed

    def _playbook(self, text: str, path: str | None) -> Playbook:
        """The validated playbook of `text`, parsed once per text (the runtime then builds
        its graph once too)."""
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        with self._lock:
            playbook = self._playbooks.get(key)
        if playbook is None:
            playbook = load_playbook_text(text, path or "<child>").require()
            if self._scripts is not None:
                playbook = self._scripts(playbook, path or "<child>")
            with self._lock:
                playbook = self._playbooks.setdefault(key, playbook)
        return playbook
