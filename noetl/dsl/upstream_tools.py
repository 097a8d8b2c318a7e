"""A tool written in upstream NoETL's dialect, rewritten into this engine's tool block.

What each upstream key means here (docs/dsl.md has the table):

* `input` (on the tool, its `spec`, or the step) -> `args`: the task's inputs.
* `auth: <credential name>` (a template too) -> `spec.credential` of postgres, and of
  http and duckdb when their spec takes a credential.
* postgres / duckdb `command`, `commands` and `query` -> `spec.command`: statements run
  in order in one transaction (upstream renders them as templates, and so does this
  engine for an upstream file). A duckdb tool without `database` shares one file per
  execution, as upstream's does.
* python: `style: toplevel` (code run top to bottom), `libs` kept, `script` with an inline
  source -> `code`; `assert` (a declared contract upstream does not enforce either) dropped.
* python / postgres / duckdb `script: {uri, source: {type: file}}` -> `spec.script: uri`,
  read into `code` / `command` when an execution starts (noetl.scripts); other sources
  (http, gcs, s3) are reported, naming the source type.
* http: `endpoint` -> `url`; `payload`, a map `body` -> `json`; `data` -> the query of a
  GET / DELETE / HEAD, the JSON body otherwise (its own `query` / `body` keys say which).
* playbook: `input` / `payload` -> `args` (the child's workload), `timeout` seconds ->
  `timeout_ms`; `return_step` is this engine's key too (the child step whose result is
  the task's).
* retry: `retry_on` (timeouts and connection errors, which the retry policy retries
  anyway), `backoff` as a number and `backoff_seconds` -> `initial_delay`,
  `retry_on_status` -> `retry_when` over the status code.
* `name` (a task's label), `pool` (upstream's connection pool), `output_select` and
  `spec.policy.exec` placement hints are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from noetl.dsl.diagnostics import Path
from noetl.dsl.kinds import TOOL_SPECS, DuckdbSpec, HttpSpec, spec_fields
from noetl.dsl.locate import UP, set_origin
from noetl.dsl.rewrite import ShapeError, new_map, origin_of

# Kinds upstream NoETL has and this engine does not, with what each does there.
UNAVAILABLE_KINDS: dict[str, str] = {
    "agent": "`agent` runs an AI agent framework",
    "container": "`container` runs a Kubernetes job",
    "ducklake": "`ducklake` runs DuckDB over a DuckLake catalog",
    "gcs": "`gcs` reads and writes Google Cloud Storage",
    "nats": "`nats` uses NATS key-value and object stores",
    "script": "`script` runs a script as a Kubernetes job",
    "shell": "`shell` runs shell commands on the worker",
    "snowflake": "`snowflake` runs SQL on Snowflake",
    "subscription": "`subscription` drains a message queue (Pub/Sub, Kafka)",
    "transfer": "`transfer` copies tables between databases",
}
UNAVAILABLE_PREFIXES = ("gcp_",)
# A task's own `set:` (upstream sets `ctx`/`iter` variables from a pipeline's tasks).
# Tool keys only upstream writes (any of them marks a file as upstream's).
UPSTREAM_TOOL_KEYS = (
    "input",
    "auth",
    "command",
    "commands",
    "libs",
    "script",
    "payload",
    "endpoint",
    "verify_ssl",
    "form",
    "pool",
    "assert",
    "output_select",
    "data",
)
_DROPPED = ("name", "pool", "output_select", "output", "assert")
_RETRYABLE_KINDS = frozenset({"timeout", "connection_error"})
_QUERY_METHODS = frozenset({"GET", "DELETE", "HEAD", "OPTIONS"})
_SCRIPT_KINDS = frozenset({"python", "postgres", "duckdb"})
DUCKDB_EXECUTION_DATABASE = ".noetl/duckdb/{{ execution_id }}.duckdb"


@dataclass(frozen=True, slots=True)
class Finding:
    """A construct of an upstream file this engine cannot run yet (`kind`: a tool kind it
    does not have)."""

    what: str
    path: Path
    kind: str | None = None


def unavailable(kind: Any) -> bool:
    """Whether `kind` is a kind of upstream's this engine has no tool for (a third-party
    tool registered for it makes it available)."""
    if not isinstance(kind, str) or kind in TOOL_SPECS:
        return False
    return kind in UNAVAILABLE_KINDS or kind.startswith(UNAVAILABLE_PREFIXES)


def describe_kind(kind: str) -> str:
    """What an unavailable kind does upstream."""
    return UNAVAILABLE_KINDS.get(kind) or f"`{kind}` uses a Google Cloud service"


def _takes_credential(model: type[Any]) -> bool:
    return "credential" in spec_fields(model)


# --- what cannot run here ------------------------------------------------------------------


def tool_findings(tool: dict[str, Any], path: Path) -> Iterator[Finding]:
    """The constructs of one upstream tool this engine cannot run."""
    kind = tool.get("kind")
    if unavailable(kind):
        assert isinstance(kind, str)
        yield Finding(f"tool kind '{kind}'", (*path, "kind"), kind=kind)
        return
    merged = _merged(tool)
    if "policy" in tool:  # upstream writes a task's policy under its spec
        yield Finding("a task `policy` outside `spec.policy`", (*path, "policy"))
    yield from _kind_findings(kind, merged, path)
    retry = tool.get("retry")
    if isinstance(retry, dict):
        on = retry.get("retry_on")
        values = on if isinstance(on, list) else [on] if on is not None else []
        if any(value not in _RETRYABLE_KINDS for value in values):
            yield Finding(
                "retry_on values other than timeout and connection_error",
                (*path, "retry", "retry_on"),
            )


def _kind_findings(kind: Any, tool: dict[str, Any], path: Path) -> Iterator[Finding]:
    auth = tool.get("auth")
    if auth is not None and isinstance(auth, dict | list):
        yield Finding("structured `auth:` maps (a credential name is supported)", (*path, "auth"))
    script = tool.get("script")
    if script is not None and _inline_script(script) is None and _file_script(script) is None:
        yield Finding(_script_what(script), (*path, "script"))
    elif _file_script(script) is not None and kind not in _SCRIPT_KINDS:
        what = f"`script:` files for a {kind} tool (python, postgres and duckdb read one)"
        yield Finding(what, (*path, "script"))
    check = _KIND_CHECKS.get(kind) if isinstance(kind, str) else None
    if check is not None:
        yield from check(tool, path)


def _python_findings(tool: dict[str, Any], path: Path) -> Iterator[Finding]:
    if tool.get("auth") is not None:
        yield Finding("credentials for python code (`auth:`)", (*path, "auth"))
    if "iterator" in tool:
        yield Finding("`iterator` under a python tool", (*path, "iterator"))


def _http_findings(tool: dict[str, Any], path: Path) -> Iterator[Finding]:
    if tool.get("auth") is not None and not _takes_credential(HttpSpec):
        yield Finding("http `auth:` credentials", (*path, "auth"))
    if "form" in tool:
        yield Finding("http form bodies (`form:`)", (*path, "form"))
    if _falsy(tool.get("verify_ssl", True)):
        yield Finding("http without TLS verification (`verify_ssl: false`)", (*path, "verify_ssl"))


def _duckdb_findings(tool: dict[str, Any], path: Path) -> Iterator[Finding]:
    auth = tool.get("auth")
    if "gcs_credential" in tool or (auth is not None and not _takes_credential(DuckdbSpec)):
        yield Finding("duckdb `auth:` (attached databases and cloud secrets)", path)


_KIND_CHECKS: dict[str, Callable[[dict[str, Any], Path], Iterator[Finding]]] = {
    "python": _python_findings,
    "http": _http_findings,
    "duckdb": _duckdb_findings,
}


def _falsy(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


def _inline_script(script: Any) -> str | None:
    """The code of `script: {source: {type: inline, code: ...}}`, else None."""
    if not isinstance(script, dict):
        return None
    source = script.get("source")
    if isinstance(source, dict) and source.get("type") == "inline":
        code = source.get("code")
        return code if isinstance(code, str) else None
    return None


def _file_script(script: Any) -> Any:
    """The path of `script: {uri: PATH, source: {type: file}}`, else None."""
    if not isinstance(script, dict):
        return None
    source = script.get("source")
    if isinstance(source, dict) and source.get("type") == "file":
        return script.get("uri")
    return None


def _script_what(script: Any) -> str:
    """What a `script:` this engine cannot read is, naming its source type."""
    source = script.get("source") if isinstance(script, dict) else None
    kind_of = source.get("type") if isinstance(source, dict) else None
    if isinstance(kind_of, str) and kind_of:
        return (
            f"`script:` from a '{kind_of}' source (only `file`, read from playbooks.root, "
            f"and `inline` are read)"
        )
    return "`script:` without `source.type` (`file` or `inline`)"


def _merged(tool: dict[str, Any]) -> dict[str, Any]:
    spec = tool.get("spec")
    return {**spec, **tool} if isinstance(spec, dict) else dict(tool)


# --- rewriting -----------------------------------------------------------------------------


def rewrite_tool(tool: dict[str, Any], step_input: Any = None) -> Any:
    """One upstream tool as a canonical tool block (see the module docstring); shapes no
    form accepts raise ShapeError with the path of the key the file has."""
    if not isinstance(tool, dict):
        return tool
    out = _lift_spec(tool)
    for key in _DROPPED:
        if key in out and not (key == "name" and out.get("kind") == "workbook"):
            del out[key]
    _inputs(out, step_input)
    kind = out.get("kind")
    if kind == "python":
        _python(out)
    elif kind in ("postgres", "duckdb"):
        _sql(out, kind)
    elif kind == "http":
        _http(out)
    elif kind == "playbook":
        _move(out, "payload", "args")
        _seconds(out, "timeout")
    elif kind == "noop" and isinstance(out.get("result"), dict) and "args" not in out:
        # upstream's noop answers its `result` (this engine's answers its args)
        _move(out, "result", "args")
    if isinstance(out.get("retry"), dict):
        out["retry"] = _retry(out["retry"])
    return out


def _lift_spec(tool: dict[str, Any]) -> Any:
    """Upstream writes a tool's configuration under `tool.spec` as well as under `tool`:
    every key of the spec but `policy` comes up to the tool, where the rest of the
    rewriting (and this engine's own shorthand) finds it."""
    out = new_map(tool, {k: v for k, v in tool.items() if k != "spec"})
    spec = tool.get("spec")
    if not isinstance(spec, dict):
        if spec is not None:
            out["spec"] = spec
        return out
    for key, value in spec.items():
        if key == "policy":
            continue
        if key in tool:
            raise ShapeError(f"'{key}' is given both under tool and under tool.spec", (key,))
        out[key] = value
        set_origin(out, key, ("spec", key))
        if hasattr(spec, "key_line"):
            out.key_lines[key] = spec.key_line(key)
    return out


def _move(out: Any, old: str, new: str) -> None:
    """Rename a key of the tool in place (`out` is a new map), keeping where it came from."""
    if old not in out:
        return
    if new in out:
        raise ShapeError(f"tool has both '{old}' and '{new}'; keep one", (old,))
    origin = origin_of(out, old)
    out[new] = out.pop(old)
    if old in out.key_lines:
        out.key_lines[new] = out.key_lines.pop(old)
    set_origin(out, new, origin)


def _inputs(out: Any, step_input: Any) -> None:
    """`input` (on the tool, or on the step) is the task's `args`."""
    if step_input is not None:
        if "input" in out or "args" in out:
            raise ShapeError("input is given on the step and on its tool; keep one", ("input",))
        out["args"] = step_input
        set_origin(out, "args", (UP, "input"))  # the step's own key
        return
    _move(out, "input", "args")
    if "args" in out and out["args"] is None:
        out["args"] = new_map(out)


def _python(out: Any) -> None:
    code = _inline_script(out.get("script"))
    if code is not None:
        if "code" in out:
            raise ShapeError("python tool has both 'script' and 'code'; keep one", ("script",))
        out["code"] = code
        set_origin(out, "code", ("script", "source", "code"))
        del out["script"]
    _script_file(out, "code")
    if isinstance(out.get("libs"), list):
        # Upstream's list of packages to install for the code: a worker here runs with
        # what its environment has, so the list is dropped and the code's own imports
        # fail with ModuleNotFoundError when a package is missing.
        del out["libs"]
    if "module" not in out:
        out["style"] = "toplevel"


def _script_file(out: Any, target: str) -> None:
    """`script: {uri, source: {type: file}}` as `spec.script: PATH`: the file is read into
    `target` when an execution starts (noetl.scripts)."""
    script = out.get("script")
    uri = _file_script(script)
    if script is None or uri is None:
        return
    if not isinstance(uri, str) or not uri.strip():
        raise ShapeError("script.uri must be the path of a file", ("script", "uri"))
    if target in out:
        raise ShapeError(f"tool has both 'script' and '{target}'; keep one", ("script",))
    out["script"] = uri
    set_origin(out, "script", ("script", "uri"))


def _sql(out: Any, kind: str) -> None:
    for key in ("commands", "query"):
        _move(out, key, "command")
    if "command" not in out and "script" not in out:
        raise ShapeError(f"{kind} tool is missing required key 'command'", (), "E101")
    sql = _inline_script(out.get("script"))
    if sql is not None:
        if "command" in out:
            raise ShapeError(f"{kind} tool has both 'script' and 'command'; keep one", ("script",))
        out["command"] = sql
        set_origin(out, "command", ("script", "source", "code"))
        del out["script"]
    _script_file(out, "command")
    model = TOOL_SPECS[kind]
    if "auth" in out and _takes_credential(model):
        _move(out, "auth", "credential")
    if kind == "duckdb" and "database" not in out:
        out["database"] = DUCKDB_EXECUTION_DATABASE


def _http(out: Any) -> None:
    _move(out, "endpoint", "url")
    if "auth" in out and _takes_credential(HttpSpec):
        _move(out, "auth", "credential")
    verify = out.pop("verify_ssl", None)
    del verify  # true is the default; false was reported as unsupported
    body = out.get("body")
    if body is not None and not isinstance(body, str):
        _move(out, "body", "json")
    _move(out, "payload", "json")
    if "data" in out:
        _data(out)


def _data(out: Any) -> None:
    """Upstream's `data`: its `query` / `body` keys, else the whole map, go to the query
    of a GET-like request or the JSON body of the others."""
    data = out.pop("data")
    method = str(out.get("method") or "GET").upper()
    origin = ("data",)
    if isinstance(data, dict) and ("query" in data or "body" in data):
        parts = [("query", data.get("query")), ("body", data.get("body"))]
    else:
        parts = [("query" if method in _QUERY_METHODS else "body", data)]
    for part, value in parts:
        if value is None:
            continue
        target = "params" if part == "query" else "json"
        if target in out:
            raise ShapeError(f"http tool has both 'data' and '{target}'; keep one", origin)
        out[target] = value
        set_origin(out, target, origin)


def _seconds(out: Any, key: str) -> None:
    """Upstream's `timeout` in seconds, as this engine's `timeout_ms`."""
    value = out.get(key)
    if value is None:
        return
    if "timeout_ms" in out:
        raise ShapeError(f"tool has both '{key}' and 'timeout_ms'; keep one", (key,))
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ShapeError(f"'{key}' must be a positive number of seconds", (key,))
    del out[key]
    out["timeout_ms"] = int(value * 1000)
    set_origin(out, "timeout_ms", (key,))


def _retry(retry: dict[str, Any]) -> Any:
    """Upstream's retry keys in this engine's retry block."""
    keys = ("retry_on", "retry_on_status", "backoff_seconds")
    if not any(key in retry for key in keys) and not _number(retry.get("backoff")):
        return retry
    out = new_map(retry, {k: v for k, v in retry.items() if k != "retry_on"})
    for key in ("backoff_seconds", "backoff"):
        if key in out and (key == "backoff_seconds" or _number(out[key])):
            _move(out, key, "initial_delay")
    statuses = out.pop("retry_on_status", None)
    if statuses is not None:
        if not isinstance(statuses, list) or not all(isinstance(s, int) for s in statuses):
            raise ShapeError("retry_on_status must be a list of HTTP status codes", ())
        if "retry_when" in out:
            raise ShapeError("retry has both 'retry_on_status' and 'retry_when'; keep one", ())
        out["retry_when"] = f"{{{{ status_code in {sorted(statuses)} }}}}"
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
