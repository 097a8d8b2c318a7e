"""How the engine reads a spilled result back (`EngineOptions.resolve`): the result
store's read, with the last few results kept parsed, so the templates of one decision
(or a few decisions in a row: the items of a loop over the rows of one result) load each
result once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from noetl.engine import EngineOptions
from noetl.store.ports import ResultStore

__all__ = ["ResultReader", "with_reader"]


class ResultReader:
    """`resolve(ref)`: the whole result kept under `ref` (KeyError when there is none)."""

    def __init__(self, results: ResultStore, keep: int = 8) -> None:
        self._results = results
        self._keep = keep
        self._lock = threading.Lock()
        self._recent: OrderedDict[str, Any] = OrderedDict()

    def __call__(self, ref: str) -> Any:
        with self._lock:
            if ref in self._recent:
                self._recent.move_to_end(ref)
                return self._recent[ref]
        stored = self._results.get(ref)
        if stored is None:
            raise KeyError(f"no result kept under {ref[:40]}")
        with self._lock:
            self._recent[ref] = stored.value
            while len(self._recent) > self._keep:
                self._recent.popitem(last=False)
        return stored.value


def with_reader(options: EngineOptions, results: ResultStore) -> EngineOptions:
    """`options` whose engines read spilled results from `results` (unless they have a
    reader already)."""
    if options.resolve is not None:
        return options
    return replace(options, resolve=ResultReader(results))
