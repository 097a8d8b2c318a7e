"""The fork server the python pool's children start from (`noetl.worker.python_pool`).

Standard library only, so `noetl run` can start the server (`prestart`) before it imports
the rest of NoETL: the server's interpreter then boots while this process imports.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
import threading
from collections.abc import Iterator
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext
from typing import Any

__all__ = ["MAIN_LOCK", "fork_context", "main_hidden", "prestart"]

# The module the fork server preloads: the child loop (noetl.worker._pychild).
CHILD_LOOP = "noetl.worker._pychild"


def fork_context() -> ForkServerContext:
    """The "forkserver" context: children start from a fresh interpreter, never by forking
    this (threaded) process, and in milliseconds rather than an interpreter start each.

    The fork server imports the child loop once. It never imports the main module, nor
    does a child (`main_hidden`): steps run code and modules, never the main script's
    functions, and a script that runs playbooks (`noetl.run`) without an
    `if __name__ == "__main__":` guard would otherwise run itself again in the server.
    The preload list is process-wide; NoETL is the only user of the fork server in its
    processes.
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([CHILD_LOOP])
    return ctx


MAIN_LOCK = threading.Lock()


def prestart() -> None:
    """Start the fork server now, from a thread of its own, so that the interpreter it
    starts boots while this process does other work (`noetl run` imports and parses its
    playbook meanwhile). The pool's first child waits for it (multiprocessing's own lock);
    a failure here is left for that first child to meet and report."""

    def start() -> None:
        with contextlib.suppress(Exception), main_hidden():
            fork_context()  # the preload list, before the server starts
            forkserver.ensure_running()

    threading.Thread(target=start, name="noetl-forkserver-start", daemon=True).start()


@contextlib.contextmanager
def main_hidden() -> Iterator[None]:
    """While a child starts, the main module shows neither a file nor a spec, so
    multiprocessing asks no process to import it (as for an interactive session)."""
    main = sys.modules.get("__main__")
    names: dict[str, Any] = vars(main) if main is not None else {}
    with MAIN_LOCK:
        saved: dict[str, Any] = {k: names[k] for k in ("__file__", "__spec__") if k in names}
        names.pop("__file__", None)
        if "__spec__" in names:
            names["__spec__"] = None
        try:
            yield
        finally:
            names.update(saved)
