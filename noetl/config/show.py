"""The effective configuration as `noetl config show` prints it, secrets masked.

A URL-valued key (`db.url`, `tracing.endpoint`) is shown without its password; a key whose
name looks sensitive (the API's rules, `noetl.redaction`) is shown as `***`; any other
string is passed through `mask_url` too, in case a credential was put where none belongs.
"""

from __future__ import annotations

import json
from typing import Any

from noetl.config.loader import HARMLESS_KEYS, SECRET_KEYS, Resolved, leaves
from noetl.redaction import MASK, mask_url, sensitive

__all__ = ["masked", "render"]


def _mask(path: str, value: Any) -> Any:
    if value is None or value == []:  # nothing set: nothing to hide (and it reads back)
        return value
    named = path not in SECRET_KEYS and path not in HARMLESS_KEYS
    if named and any(sensitive(part) for part in path.split(".")):
        return MASK
    if isinstance(value, str):
        return mask_url(value)
    if isinstance(value, list):
        return [mask_url(v) if isinstance(v, str) else v for v in value]
    return value


def masked(resolved: Resolved) -> dict[str, Any]:
    """The settings as plain data (YAML names), every secret masked."""
    data: dict[str, Any] = resolved.settings.model_dump(mode="json", by_alias=True)
    for leaf in leaves():
        *parents, last = leaf.path.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[last] = _mask(leaf.path, node[last])
    return data


def render(resolved: Resolved, *, as_json: bool = False) -> str:
    """YAML with each value's source as a comment, or JSON `{"config", "sources"}`."""
    data = masked(resolved)
    sources = {leaf.path: resolved.origin(leaf.path).describe() for leaf in leaves()}
    if as_json:
        return json.dumps({"config": data, "sources": sources}, indent=2)
    header = "# The configuration in effect"
    header += f" (file {resolved.file})" if resolved.file else " (no configuration file)"
    lines = [header + "; each value's source in a comment"]
    _yaml(data, "", 0, sources, lines)
    return "\n".join(lines) + "\n"


def _yaml(
    node: dict[str, Any], prefix: str, depth: int, sources: dict[str, str], out: list[str]
) -> None:
    indent = "  " * depth
    for key, value in node.items():
        path = prefix + key
        if isinstance(value, dict):
            out.append(f"{indent}{key}:")
            _yaml(value, path + ".", depth + 1, sources, out)
        else:
            # JSON scalars and flow lists are YAML too: the output reads back as a file.
            out.append(f"{indent}{key}: {json.dumps(value)}  # {sources.get(path, 'default')}")
