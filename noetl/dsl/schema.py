"""The JSON Schema of the playbook language, generated from the model.

The model describes the canonical form; the loader also accepts shorthand and (by default)
legacy forms. The schema is widened here to describe what an author may write, so a
playbook the loader accepts is also valid against the schema: tool configuration written
directly under `tool`, `result` inside `tool`, `next: {spec, arcs}` and `next: {step, when}`,
the loop aliases, a single sink instead of a list, and the deprecated legacy step keys.
"""

from __future__ import annotations

import copy
from typing import Any

from noetl.dsl.kinds import SINK_SPECS, TOOL_SPECS
from noetl.dsl.model import Playbook
from noetl.dsl.normalize import LEGACY_LOOP_KEYS

SCHEMA_ID = "https://noetl.io/schemas/playbook-v2.json"

_REF = "#/$defs/"


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
    _authoring_forms(defs, tool_specs)
    # Kind-specific configuration is checked after the structure; it is listed here so
    # editors and people can see what each kind takes.
    defs["ToolSpecs"] = {"description": "tool.spec by tool kind", "properties": tool_specs}
    defs["SinkSpecs"] = {"description": "sink configuration by sink kind", "properties": sink_specs}
    return schema


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _authoring_forms(defs: dict[str, Any], tool_specs: dict[str, Any]) -> None:
    """Widen the canonical definitions to the shorthand and legacy forms the loader takes."""
    _tool_forms(defs, tool_specs)
    _next_forms(defs)
    _loop_forms(defs)
    _sink_forms(defs)
    _legacy_step_keys(defs)


def _tool_forms(defs: dict[str, Any], tool_specs: dict[str, Any]) -> None:
    block = copy.deepcopy(defs["Tool"])
    block["properties"]["result"] = _ref("Result")
    block["title"] = "ToolBlock"
    defs["ToolBlock"] = block
    variants: list[dict[str, Any]] = [_ref("ToolBlock")]
    for kind, spec_schema in tool_specs.items():
        properties = copy.deepcopy(spec_schema.get("properties", {}))
        properties.update(copy.deepcopy(block["properties"]))
        properties["kind"] = {"const": kind}
        variants.append(
            {
                "title": f"{kind} tool, configuration written directly under tool",
                "type": "object",
                "properties": properties,
                "required": ["kind"],
                "additionalProperties": False,
            }
        )
    defs["Tool"] = {
        "title": "Tool",
        "description": defs["Tool"].get("description", ""),
        "anyOf": variants,
    }


def _next_forms(defs: dict[str, Any]) -> None:
    step_name = copy.deepcopy(defs["NextEdge"]["properties"]["step"])
    step_name.pop("title", None)
    edges = {"items": {"anyOf": [step_name, _ref("NextEdge")]}, "type": "array", "minItems": 1}
    spec = defs["NextSpec"]
    spec["properties"]["to"] = {"anyOf": [step_name, _ref("NextEdge"), edges]}
    defs["NextArcs"] = {
        "title": "NextArcs",
        "description": "The upstream form: `next: {spec: {mode: ...}, arcs: [...]}`.",
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"mode": spec["properties"]["mode"]},
                "additionalProperties": False,
            },
            "arcs": {"anyOf": [step_name, _ref("NextEdge"), edges]},
        },
        "required": ["arcs"],
        "additionalProperties": False,
    }
    for owner in ("Step", "CaseThen"):
        options = defs[owner]["properties"]["next"]["anyOf"]
        at = options.index(_ref("NextSpec")) + 1
        options[at:at] = [_ref("NextArcs"), _ref("NextEdge")]


def _loop_forms(defs: dict[str, Any]) -> None:
    loop = defs["Loop"]
    props = loop["properties"]
    props["in"] = {**copy.deepcopy(props["collection"]), "description": "alias of collection"}
    props["iterator"] = {**copy.deepcopy(props["element"]), "description": "alias of element"}
    props["iterator"].pop("default", None)
    props["spec"] = {
        "type": "object",
        "description": "upstream form of mode and max_concurrency",
        "properties": {
            "mode": copy.deepcopy(props["mode"]),
            "max_in_flight": copy.deepcopy(props["max_concurrency"]),
            "max_concurrency": copy.deepcopy(props["max_concurrency"]),
        },
        "additionalProperties": False,
    }
    loop.pop("required", None)
    loop["oneOf"] = [{"required": ["collection"]}, {"required": ["in"]}]


def _sink_forms(defs: dict[str, Any]) -> None:
    one_key = {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 1,
        "additionalProperties": {"anyOf": [{"type": "object"}, {"type": "null"}]},
    }
    defs["SinkEntry"] = {"title": "SinkEntry", "anyOf": [_ref("Sink"), one_key]}
    defs["Sinks"] = {
        "title": "Sinks",
        "description": "One sink or a list of them; a sink is `{kind, spec}` or `{<kind>: {...}}`.",
        "anyOf": [
            _ref("SinkEntry"),
            {"type": "array", "items": _ref("SinkEntry")},
        ],
    }
    defs["Result"]["properties"]["sink"] = _ref("Sinks")
    defs["CaseThen"]["properties"]["sink"] = {"anyOf": [_ref("Sinks"), {"type": "null"}]}


def _legacy_step_keys(defs: dict[str, Any]) -> None:
    props = defs["Step"]["properties"]
    loop_like = {
        "anyOf": [{"type": "string"}, {"type": "array"}, _ref("Loop")],
        "deprecated": True,
        "description": "legacy form of loop",
    }
    for key in LEGACY_LOOP_KEYS:
        props[key] = copy.deepcopy(loop_like)
    props["save"] = {
        **_ref("Sinks"),
        "deprecated": True,
        "description": "legacy form of result.sink",
    }
