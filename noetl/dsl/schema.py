"""The JSON Schema of the playbook language, generated from the model."""

from __future__ import annotations

from typing import Any

from noetl.dsl.kinds import SINK_SPECS, TOOL_SPECS
from noetl.dsl.model import Playbook

SCHEMA_ID = "https://noetl.io/schemas/playbook-v2.json"


def playbook_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of what an author may write in a playbook."""
    schema = Playbook.model_json_schema(mode="validation", by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "NoETL playbook (DSL v2)"
    defs = schema.setdefault("$defs", {})
    tool_specs = {}
    for kind, model in sorted(TOOL_SPECS.items()):
        tool_specs[kind] = model.model_json_schema(mode="validation", by_alias=True)
    sink_specs = {}
    for kind, model in sorted(SINK_SPECS.items()):
        sink_specs[kind] = model.model_json_schema(mode="validation", by_alias=True)
    # Kind-specific configuration is checked after the structure; it is listed here so
    # editors and people can see what each kind takes.
    defs["ToolSpecs"] = {"description": "tool.spec by tool kind", "properties": tool_specs}
    defs["SinkSpecs"] = {"description": "sink configuration by sink kind", "properties": sink_specs}
    return schema
