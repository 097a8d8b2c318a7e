"""What the embedded runtime derives once per playbook object: its graph, and its model
dumped as JSON (stored with each execution, so another process can decide for it)."""

from __future__ import annotations

from noetl.dsl.graph import Graph, build_graph
from noetl.dsl.model import Playbook


class PlaybookCache:
    def __init__(self) -> None:
        self._graphs: dict[int, Graph] = {}
        self._dumped: dict[int, tuple[Playbook, str]] = {}

    def graph(self, playbook: Playbook) -> Graph:
        graph = self._graphs.get(id(playbook))
        if graph is None or graph.playbook is not playbook:
            graph = build_graph(playbook)
            self._graphs[id(playbook)] = graph
        return graph

    def compiled(self, playbook: Playbook) -> str:
        """The playbook as JSON (its validated model)."""
        cached = self._dumped.get(id(playbook))
        if cached is None or cached[0] is not playbook:
            cached = (playbook, playbook.model_dump_json(by_alias=True))
            self._dumped[id(playbook)] = cached
        return cached[1]
