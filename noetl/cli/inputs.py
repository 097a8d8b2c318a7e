"""Parsing what users pass on the command line: `--set key=value` and workload files."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import click
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from noetl.dsl.limits import MAX_DEPTH, check_data

_STRUCTURED = ("{", "[", '"')  # a value that starts so means JSON (or YAML flow), not text


def parse_value(text: str, key: str | None = None) -> Any:
    """A `--set` value: YAML scalars and flow collections (`3`, `true`, `[1, 2]`), else
    text. One that starts like JSON (`{`, `[`, `"`) but does not parse is an error
    naming `key`, not text."""
    try:
        value = YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        if text.lstrip().startswith(_STRUCTURED):
            where = f"{key}=" if key else ""
            reason = str(getattr(exc, "problem", None) or exc).strip().splitlines()[0]
            raise click.BadParameter(
                f"{where}{text[:60]}: looks like JSON but does not parse ({reason})",
                param_hint="--set",
            ) from None
        return text
    except RecursionError:
        raise click.BadParameter(
            f"{text[:40]}...: nests more than {MAX_DEPTH} levels deep (the limit)",
            param_hint="--set",
        ) from None
    return text if value is None and text.strip() not in ("null", "~") else value


def apply_sets(workload: dict[str, Any], sets: tuple[str, ...]) -> dict[str, Any]:
    """Apply `a.b=value` assignments to a copy of the workload."""
    out = dict(workload)
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="--set")
        parts = key.strip().split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            child = dict(child) if isinstance(child, dict) else {}
            node[part] = child
            node = child
        node[parts[-1]] = parse_value(raw, key.strip())
    return out


def unknown_sets(workload: dict[str, Any], sets: tuple[str, ...]) -> list[str]:
    """A warning for each `--set` whose top-level key the playbook's workload does not
    have (with the closest key it has), as the playbook may mean another name."""
    known = [str(k) for k in workload]
    warnings = []
    for item in sets:
        top = item.partition("=")[0].strip().split(".")[0]
        if top and top not in workload:
            close = difflib.get_close_matches(top, known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            keys = ", ".join(known) if known else "none"
            warnings.append(
                f"warning: --set {top}: not a key of the playbook's workload (its keys: "
                f"{keys}){hint}"
            )
    return warnings


def read_workload(path: Path) -> dict[str, Any]:
    """A workload file: a JSON (or YAML) object."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise click.BadParameter(f"{path}: {exc.strerror}", param_hint="--workload") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise _too_deep(path) from None
    except json.JSONDecodeError as exc:
        if path.suffix.lower() == ".json":
            raise click.BadParameter(
                f"{path}:{exc.lineno}: invalid JSON: {exc.msg}", param_hint="--workload"
            ) from None
        try:
            data = YAML(typ="safe", pure=True).load(text)
        except RecursionError:
            raise _too_deep(path) from None
        except YAMLError as yexc:
            raise click.BadParameter(
                f"{path}: invalid YAML: {yexc}", param_hint="--workload"
            ) from None
    if not isinstance(data, dict):
        raise click.BadParameter(
            f"{path}: a workload must be an object, got {type(data).__name__}",
            param_hint="--workload",
        )
    return data


def _too_deep(path: Path) -> click.BadParameter:
    return click.BadParameter(
        f"{path}: nests more than {MAX_DEPTH} levels deep (the limit)", param_hint="--workload"
    )


def check_workload(workload: dict[str, Any]) -> dict[str, Any]:
    """`workload` when the server and the engine can take it: nested at most as deep as a
    playbook may be (`noetl.dsl.limits`), no NUL character in any string (PostgreSQL
    refuses them). Else a usage error naming where, before anything is started."""
    problem = check_data(workload, root="workload")
    if problem is not None:
        raise click.BadParameter(str(problem), param_hint="--workload / --set")
    return workload
