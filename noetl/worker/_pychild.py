"""The child side of the `python` tool: a loop that runs user code sent over a pipe.

The fork server (see `python_pool`) imports this module before it forks children, so it
imports only the standard library and nothing of NoETL beyond its package markers (and
`noetl.pyscript`, standard library only too).

`style` is `main` (call `callable(context, args)`) or `toplevel` (upstream NoETL's
convention: the code runs top to bottom with its inputs bound as names; see `_toplevel`).

Protocol over two one-way pipes, one call at a time, pickled by `Connection.send`:

    child  -> parent   READY                                  once, when the loop starts
    parent -> child    (code, module, callable, args, context, style, libs)
    child  -> parent   (OUTPUT, text)                         any number, while it runs
    child  -> parent   (True, result_json, stdout)
                       (False, error, error_type, retryable, stdout)

A batch is a list of such requests: the child runs them in order and sends each one's
lines and reply as above, one after another.
"""

from __future__ import annotations

import builtins
import datetime
import importlib
import inspect
import io
import json
import logging
import os
import signal
import threading
import time
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from multiprocessing.connection import Connection
from typing import Any

from noetl.pyscript import FUNCTION, NO_RESULT, compile_toplevel, usable_name

READY = "ready"
OUTPUT = "out"  # a piece of the call's output, sent while it runs
INLINE_FILENAME = "<inline code>"
STDOUT_LIMIT = 64 * 1024  # bytes of UTF-8 kept from what user code prints
TRUNCATED_MARKER = "\n[output truncated at 64 KiB]\n"
CACHE_SIZE = 256  # compiled inline sources (and module callables) kept per child
MAX_FRAMES = 3  # user-code frames kept in an error message

_RETRYABLE_NAMES = frozenset({"RetryableError", "TimeoutError", "ConnectionError"})
# OSErrors that a retry cannot fix: the file system will not change by itself.
_PERMANENT_OS_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)

Reply = tuple[Any, ...]


def is_retryable(exc: BaseException) -> bool:
    """Whether a failure raised by user code may succeed when the task is retried.

    Retryable: an exception that says so (`retryable = True`, as NoETL's `RetryableError`
    does), any class in its MRO named `RetryableError`, `TimeoutError` or `ConnectionError`
    (matched by name, so users can define their own), and other `OSError`s except the
    file-system ones listed in `_PERMANENT_OS_ERRORS`.
    """
    if getattr(exc, "retryable", None) is True:
        return True
    if any(cls.__name__ in _RETRYABLE_NAMES for cls in type(exc).__mro__):
        return True
    return isinstance(exc, OSError) and not isinstance(exc, _PERMANENT_OS_ERRORS)


class _SpecError(Exception):
    """The spec cannot be turned into a callable (not an error of the user's code)."""


class _Capture(io.TextIOBase):
    """A text stream keeping only the first `STDOUT_LIMIT` characters written to it, and
    sending each whole line of them to the parent as it is written (`("out", text)`), so
    what a task prints is seen while it runs, and kept when it never replies."""

    def __init__(self, stream: Connection | None = None) -> None:
        super().__init__()
        self._parts: list[str] = []
        self._size = 0
        self._truncated = False
        self._stream = stream
        self._pending = ""
        # User code may print from threads of its own: one message at a time on the pipe.
        self._lock = threading.RLock()

    encoding = "utf-8"  # some libraries read sys.stdout.encoding

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            return self._write(text)

    def _write(self, text: str) -> int:
        room = STDOUT_LIMIT - self._size
        if room > 0:
            part = text[:room]
            self._parts.append(part)
            self._size += len(part)
            if self._stream is not None:
                self._send_lines(part)
        if len(text) > room and not self._truncated:
            self._truncated = True
            self.flush_lines()
        return len(text)

    def _send_lines(self, part: str) -> None:
        pending = self._pending + part
        cut = pending.rfind("\n") + 1
        self._pending = pending[cut:]
        if cut:
            self._send(pending[:cut])

    def _send(self, text: str) -> None:
        stream = self._stream
        if stream is None or not text:
            return
        try:
            stream.send((OUTPUT, text))
        except (OSError, ValueError):  # the parent is gone: the reply will not arrive either
            self._stream = None

    def flush_lines(self) -> None:
        """Send what is left of the last line (the output was cut)."""
        pending, self._pending = self._pending, ""
        self._send(pending)

    def end(self) -> None:
        """The call ended: send the rest of the last line; later writes (a thread the
        call left running) are kept from the pipe, whose next message is the reply."""
        with self._lock:
            self.flush_lines()
            self._stream = None

    def getvalue(self) -> str:
        if not self._parts:
            return ""
        text = "".join(self._parts)
        data = text.encode("utf-8", "replace")
        if self._truncated or len(data) > STDOUT_LIMIT:
            data = data[: STDOUT_LIMIT - len(TRUNCATED_MARKER)]
            text = data.decode("utf-8", "ignore") + TRUNCATED_MARKER
        return text


def _arity(func: Callable[..., Any]) -> int:
    """How many of (context, args) to pass: 2, 1 (args only) or 0."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # some builtins have no signature
        return 2
    positional = 0
    for param in parameters:
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            return 2
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            positional += 1
    return min(positional, 2)


def _describe(exc: BaseException) -> str:
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not hide the error itself
        message = "<unprintable>"
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


def _short_path(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if relative.startswith("..") else relative


def _format_error(exc: BaseException, source: str | None) -> str:
    """`Type: message` plus the last few frames of user code, one line each."""
    lines = [_describe(exc)]
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename != __file__ and not frame.filename.startswith("<frozen ")
    ]
    code_lines = source.splitlines() if source is not None else []
    for frame in frames[-MAX_FRAMES:]:
        if frame.filename == INLINE_FILENAME:
            where = "inline code"
            lineno = frame.lineno or 0
            text = code_lines[lineno - 1].strip() if 0 < lineno <= len(code_lines) else ""
        else:
            where = _short_path(frame.filename)
            text = (frame.line or "").strip()
        lines.append(f"  {where}, line {frame.lineno}, in {frame.name}")
        if text:
            lines.append(f"    {text}")
    return "\n".join(lines)


class Runner:
    """Resolves specs to callables (cached) and runs one call."""

    def __init__(self) -> None:
        # callables (with their arity) and compiled top-level code, by source
        self._cache: OrderedDict[object, Any] = OrderedDict()

    def _remember(self, key: object, func: Callable[..., Any]) -> tuple[Callable[..., Any], int]:
        entry = (func, _arity(func))
        self._cache[key] = entry
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return entry

    def _resolve(
        self, code: str | None, module: str | None, name: str
    ) -> tuple[Callable[..., Any], int]:
        key: object = (code, name) if code is not None else (module, name, None)
        entry: tuple[Callable[..., Any], int] | None = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)
            return entry
        if code is not None:
            namespace: dict[str, Any] = {"__name__": "__noetl_inline__", "__builtins__": builtins}
            exec(compile(code, INLINE_FILENAME, "exec"), namespace)
            func = namespace.get(name)
            where = "inline code"
        elif module is not None:
            func = getattr(importlib.import_module(module), name, None)
            where = f"module {module!r}"
        else:
            raise _SpecError("python tool needs spec.code or spec.module")
        if not callable(func):
            raise _SpecError(f"{where} does not define a callable {name!r}")
        return self._remember(key, func)

    def _compiled(self, code: str, names: tuple[str, ...]) -> tuple[Any, bool]:
        """Top-level code compiled (cached by source and the names it is given)."""
        key = ("toplevel", code, names)
        entry = self._cache.get(key)
        if entry is None:
            entry = compile_toplevel(code, INLINE_FILENAME, names)
            self._cache[key] = entry
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return entry

    def _toplevel(
        self, code: str | None, name: str, args: Any, context: Any, libs: dict[str, Any]
    ) -> Any:
        """Upstream NoETL's convention: the code runs top to bottom with the preloaded
        modules (`json`, `os`, `datetime`, `uuid`), its `libs`, `context`, the inputs as
        `input_data` and each input as a plain name (later ones win). The outcome is a
        top-level `return`, else a function `name` the code defines, called with its
        parameters bound by name, else the code's `result` variable (None without one)."""
        if code is None:
            raise _SpecError("python tool with style: toplevel needs spec.code")
        inputs = args if isinstance(args, dict) else {}
        bindings: dict[str, Any] = {"json": json, "os": os, "datetime": datetime, "uuid": uuid}
        bindings.update(_imports(libs))
        if isinstance(context, dict) and isinstance(context.get("workload"), dict):
            # Upstream's context holds each workload key bare (the task carries the
            # workload once, under `workload`).
            context = {**context["workload"], **context}
        bindings["context"] = context
        bindings["input_data"] = inputs
        bindings.update((k, v) for k, v in inputs.items() if usable_name(k))
        names = tuple(sorted(bindings))
        compiled, wrapped = self._compiled(code, names)
        namespace: dict[str, Any] = {"__name__": "__noetl_inline__", "__builtins__": builtins}
        missing = object()
        namespace[NO_RESULT] = missing
        if wrapped:
            exec(compiled, namespace)
            value = namespace[FUNCTION](**bindings)
            return None if value is missing else value
        namespace.update(bindings)
        exec(compiled, namespace)
        func = namespace.get(name)
        if callable(func) and name not in bindings:
            return func(**_by_name(func, inputs, context))
        return namespace.get("result")

    def run(self, request: Reply, stream: Connection | None = None) -> Reply:
        """Run one request; never raises (a user's `sys.exit` included). Each line the
        call prints is sent to `stream` as it is written."""
        capture = _Capture(stream)
        try:
            return self._run(request, capture)
        finally:
            capture.end()

    def _run(self, request: Reply, capture: _Capture) -> Reply:
        code, module, name, args, context = request[:5]
        style, libs = request[5:7] if len(request) >= 7 else ("main", {})
        try:
            with redirect_stdout(capture), redirect_stderr(capture), _logs_into(capture):
                if style == "toplevel":
                    result = self._toplevel(code, name, args, context, libs or {})
                else:
                    func, arity = self._resolve(code, module, name)
                    result = func(context, args) if arity == 2 else func(args) if arity else func()
                if inspect.iscoroutine(result):
                    import asyncio  # noqa: PLC0415 - only async users pay for it

                    result = asyncio.run(result)
        except _SpecError as exc:
            return (False, str(exc), "FatalError", False, capture.getvalue())
        except SystemExit as exc:
            call = "sys.exit()" if exc.code is None else f"sys.exit({exc.code!r})"
            return (False, f"user code called {call}", "SystemExit", False, capture.getvalue())
        except BaseException as exc:  # user code may raise anything; report it all
            error = _format_error(exc, code)
            return (False, error, type(exc).__name__, is_retryable(exc), capture.getvalue())
        try:
            text = json.dumps(result, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            error = f"result of {name}() is not JSON-serializable: {exc}"
            return (False, error, type(exc).__name__, False, capture.getvalue())
        return (True, text, capture.getvalue())


def _imports(libs: dict[str, Any]) -> dict[str, Any]:
    """The modules of `libs` by alias: `{alias: "module.path"}` imports the module,
    `{alias: {from, import}}` takes `import` from the module `from` (a submodule or an
    attribute)."""
    out: dict[str, Any] = {}
    for alias, target in libs.items():
        if isinstance(target, str):
            out[alias] = importlib.import_module(target)
            continue
        base, attribute = str(target["from"]), str(target["import"])
        module = importlib.import_module(base)
        try:
            out[alias] = getattr(module, attribute)
        except AttributeError:
            out[alias] = importlib.import_module(f"{base}.{attribute}")
    return out


def _by_name(func: Any, inputs: dict[str, Any], context: Any) -> dict[str, Any]:
    """The keyword arguments of `func` by parameter name, as upstream calls `main`:
    `context`, `input_data` / `args` (every input), each input by its name, and for
    `**kwargs` the inputs no parameter took; a parameter with a default may be left out."""
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return dict(inputs)
    kwargs: dict[str, Any] = {}
    for param in parameters:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name in inputs:
            kwargs[param.name] = inputs[param.name]
        elif param.name == "context":
            kwargs[param.name] = context
        elif param.name in ("input_data", "args"):
            kwargs[param.name] = inputs
        elif param.default is param.empty:
            raise TypeError(
                f"{func.__name__}() takes '{param.name}', which is not one of the inputs "
                f"({', '.join(sorted(inputs)) or 'none'})"
            )
    if any(param.kind is param.VAR_KEYWORD for param in parameters):
        kwargs.update((k, v) for k, v in inputs.items() if k not in kwargs)
    return kwargs


class _CaptureHandler(logging.Handler):
    """Writes log records to the output of the call in progress (none between calls)."""

    target: _Capture | None = None

    def emit(self, record: logging.LogRecord) -> None:
        target = self.target
        if target is None:
            return
        try:
            target.write(self.format(record) + "\n")
        except Exception:  # a broken record must not fail the user's call
            self.handleError(record)


_HANDLER = _CaptureHandler()
_HANDLER.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))


@contextmanager
def _logs_into(capture: _Capture) -> Iterator[None]:
    """Records the user's code logs at INFO and above go to the captured output too, as
    `LEVEL logger: message` lines. The handler is installed on the root logger once per
    child (and the root level lowered to INFO then); each call only points it at its own
    output, which costs nothing."""
    root = logging.getLogger()
    if _HANDLER not in root.handlers:
        root.addHandler(_HANDLER)
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
    _HANDLER.target = capture
    try:
        yield
    finally:
        _HANDLER.target = None


def _timed(runner: Runner, request: Reply, writer: Connection) -> Reply:
    """The reply to `request`, with the milliseconds it ran here as its last item (the
    parent may read it late: `PythonPool.start_early`)."""
    began = time.perf_counter()
    reply = runner.run(request, writer)
    return (*reply, (time.perf_counter() - began) * 1000)


def serve(reader: Connection, writer: Connection) -> None:
    """The child's main loop: answer calls until the parent closes its end."""
    # Ctrl-C reaches the whole process group; the parent decides when children stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    runner = Runner()
    try:
        writer.send(READY)
        while True:
            request = reader.recv()
            if isinstance(request, list):  # a batch (`PythonPool.run_ahead`): a reply each
                for one in request:
                    writer.send(_timed(runner, one, writer))
            else:
                writer.send(_timed(runner, request, writer))
    except (EOFError, OSError):  # the parent is gone or closed the pool: exit quietly
        return
