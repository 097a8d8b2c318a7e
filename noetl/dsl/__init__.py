"""The playbook language: YAML -> normalized tree -> validated model -> graph."""

from noetl.dsl.diagnostics import Diagnostic, Severity
from noetl.dsl.graph import Edge, Graph, build_graph
from noetl.dsl.model import Playbook, Step
from noetl.dsl.validate import LoadResult, load_playbook, load_playbook_text

__all__ = [
    "Diagnostic",
    "Edge",
    "Graph",
    "LoadResult",
    "Playbook",
    "Severity",
    "Step",
    "build_graph",
    "load_playbook",
    "load_playbook_text",
]
