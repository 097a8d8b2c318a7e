"""The http tool: one HTTP request per task, sent with a shared, pooled `httpx.Client`.

What is sent, from the task's rendered `spec` (`HttpSpec`) and `args`:

* `spec.url` with `spec.params` added to its query; `spec.headers`; `spec.json` (as JSON) or
  `spec.body` (as text). `args` are not query parameters: they are sent as the JSON body
  only by POST, PUT and PATCH, only when neither `spec.json` nor `spec.body` is set, and
  only when they are not empty.
* `Idempotency-Key: <task.key>` unless the spec sets one, and a W3C `traceparent`: the
  spec's; else, when the task is traced (`Task.trace`), its `worker.plugin.http` span's
  context, so the downstream service's spans join the execution's trace; else the task
  context's (when well formed); else a new one (`new_traceparent`).
* Timeout: what is left of the task's `timeout_ms` (its `Deadline`, noetl.tools.deadline),
  or `spec.timeout` seconds when that is tighter; without either, 30 s. It bounds each
  phase (connect, write, wait for a byte) and, once more, the reading of the whole body.
* `spec.credential` names a credential of the worker (`noetl.credentials.records`): bearer
  and basic are sent as `Authorization`, api_key as its header (`X-API-Key` unless it
  names another), header as the header it names. Its values are masked in the outcome
  (the encoded `Basic` value too). A spec header of the same name is refused rather than
  silently replaced. On a redirect to another origin (scheme, host or port) the request
  loses the credential's header, `Authorization`, `Proxy-Authorization` and `Cookie`, and
  every spec header whose value holds one of the task's secrets. A credential of another
  type (snowflake, a cloud service account, ...) fails the task, fatally, naming its type.

The result (`this`) is `{"status_code", "headers", "data"}`: headers with lower-case names;
data the parsed JSON when the content type says JSON (None for an empty body, the text
when it does not parse), else the text. A body over 10 MB is refused (a fatal failure)
without reading the rest of it. 2xx and 3xx succeed; 408, 429 and 5xx fail retryably and
other 4xx fatally (error type `HttpError`, `this` holding the status and headers);
connection errors, timeouts and broken responses fail retryably, with the httpx exception's
name as the error type.

Errors name the method and the URL without its userinfo and query, and never carry request
headers or bodies. Cookies are never stored: the client is shared by every task.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import ValidationError

from noetl.core import Outcome, Task
from noetl.credentials.records import http_auth
from noetl.credentials.scope import current_scope
from noetl.dsl.kinds import HttpSpec
from noetl.errors import NoetlError
from noetl.observability.trace_context import plugin_traceparent
from noetl.tools.deadline import Deadline

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_BODY_BYTES", "HttpTool", "new_traceparent", "safe_url"]

DEFAULT_TIMEOUT_S = 30.0
MAX_BODY_BYTES = 10 * 1024 * 1024
ERROR_BODY_CHARS = 200
_ERROR_BODY_BYTES = 4096  # enough for 200 characters of any UTF-8 text
_RETRYABLE_STATUS = frozenset({408, 429})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_TRACEPARENT = re.compile(r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")
# Transport failures a second attempt may get past; the others (an unsupported scheme, a
# request httpx cannot encode, too many redirects) would fail the same way again.
_RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
)


def new_traceparent() -> str:
    """A new W3C trace context (`00-<trace id>-<parent id>-01`), sampled."""
    return f"00-{_nonzero_hex(16)}-{_nonzero_hex(8)}-01"


def _nonzero_hex(nbytes: int) -> str:
    while True:  # an all-zero id is invalid (odds of drawing one: 1 in 2**64 or less)
        value = secrets.token_hex(nbytes)
        if value.strip("0"):
            return value


def safe_url(url: str | httpx.URL) -> str:
    """`url` fit for an error message: no userinfo, no query, no fragment."""
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return "<invalid url>"
    host_port = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host_port, parts.path, "", ""))


class _TooLarge(Exception):
    """The response body passed the size limit."""


class _Failure(Exception):
    """A failure already described: the message, its type, whether to retry."""

    def __init__(
        self, message: str, error_type: str, *, retryable: bool = False, this: Any = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type
        self.retryable = retryable
        self.this = this


class HttpTool:
    """Sends the request of an http task; every failure is reported in the outcome."""

    kind: str = "http"

    def __init__(
        self,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.max_body_bytes = max_body_bytes
        self._transport = transport
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> httpx.Client:
        """The shared client, created on first use (httpx clients are thread-safe)."""
        client = self._client
        if client is None:
            with self._lock:
                client = self._client
                if client is None:
                    client = self._client = httpx.Client(
                        transport=self._transport,
                        # A shared jar would hand one task's cookies to the next.
                        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
                        event_hooks={"request": [_keep_credential_home]},
                    )
        return client

    def close(self) -> None:
        """Close the pooled connections; the next task opens a new client."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def run(self, task: Task) -> Outcome:
        started = time.perf_counter()
        try:
            this = self._call(task)
        except _Failure as failure:
            return Outcome(
                task_id=task.task_id,
                ok=False,
                this=failure.this,
                error=failure.message,
                error_type=failure.error_type,
                retryable=failure.retryable,
                duration_ms=(time.perf_counter() - started) * 1000,
            )
        return Outcome(
            task_id=task.task_id,
            ok=True,
            this=this,
            duration_ms=(time.perf_counter() - started) * 1000,
        )

    def _call(self, task: Task) -> dict[str, Any]:
        spec = _validate(task.spec)
        timeout = _timeout(spec, task)
        where = f"{spec.method} {safe_url(spec.url)}"
        request = self._build(spec, task, timeout, where)
        try:
            response = self.client.send(
                request, stream=True, follow_redirects=spec.follow_redirects
            )
            try:
                where = f"{spec.method} {safe_url(response.request.url)}"
                return self._read(response, where, deadline=time.monotonic() + timeout)
            finally:
                response.close()
        except _TooLarge:
            raise _Failure(
                f"response body of {where} is larger than the http tool's "
                f"{_megabytes(self.max_body_bytes)} limit; refused",
                "FatalError",
            ) from None
        except httpx.LocalProtocolError:
            # Not str(exc): h11 quotes the offending header value in it.
            raise _Failure(
                f"LocalProtocolError on {where}: the request is malformed "
                "(check spec.headers and spec.url)",
                "LocalProtocolError",
            ) from None
        except httpx.RequestError as exc:
            # str() of these describes the connection or the response, never the request
            raise _Failure(
                f"{type(exc).__name__} on {where}: {exc or 'no detail'}",
                type(exc).__name__,
                retryable=isinstance(exc, _RETRYABLE_ERRORS),
            ) from None

    def _build(self, spec: HttpSpec, task: Task, timeout: float, where: str) -> httpx.Request:
        body: dict[str, Any] = {}
        if spec.json_body is not None:
            body["json"] = spec.json_body
        elif spec.body is not None:
            body["content"] = spec.body.encode("utf-8")
        elif spec.method in _BODY_METHODS and task.args:
            body["json"] = task.args
        headers = _headers(spec.headers, task)
        header = None if spec.credential is None else _authorize(headers, spec.credential)
        try:
            # Merged here: httpx would replace the URL's own query with `params`.
            url = httpx.URL(spec.url).copy_merge_params(_params(spec.params))
            guarded = _guarded(headers, header)
            home = {_CREDENTIAL_HOME: (guarded, _origin(url))} if guarded else None
            return self.client.build_request(
                spec.method,
                url,
                headers=headers,
                timeout=timeout,
                extensions=home,
                **body,
            )
        except httpx.InvalidURL:
            raise _Failure(f"spec.url is not a valid URL: {where}", "FatalError") from None
        except (TypeError, ValueError) as exc:
            # Not str(exc): a header value that cannot be encoded would be quoted in it.
            raise _Failure(
                f"cannot build the request {where}: {type(exc).__name__} "
                "(check spec.headers, spec.params and the body)",
                "FatalError",
            ) from None

    def _read(self, response: httpx.Response, where: str, *, deadline: float) -> dict[str, Any]:
        status = response.status_code
        headers = dict(response.headers.items())
        if status >= 400:
            text = _decode(_read_some(response, _ERROR_BODY_BYTES, deadline), response)
            text = text.strip()[:ERROR_BODY_CHARS]
            raise _Failure(
                f"HTTP {status} from {where}: {text}" if text else f"HTTP {status} from {where}",
                "HttpError",
                retryable=status in _RETRYABLE_STATUS or status >= 500,
                this={"status_code": status, "headers": headers},
            )
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            raise _TooLarge
        raw = _read_some(response, self.max_body_bytes + 1, deadline)
        if len(raw) > self.max_body_bytes:
            raise _TooLarge
        return {"status_code": status, "headers": headers, "data": _data(raw, response)}


def _validate(spec: Mapping[str, Any]) -> HttpSpec:
    try:
        return HttpSpec.model_validate(spec)
    except ValidationError as exc:
        # msg only: the input value may be a resolved secret
        problems = "; ".join(
            f"spec.{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            if error["loc"]
            else f"spec: {error['msg']}"
            for error in exc.errors()
        )
        raise _Failure(f"invalid http spec: {problems}", "FatalError") from None


def _timeout(spec: HttpSpec, task: Task) -> float:
    """What is left of the task's deadline, or `spec.timeout` when tighter; without
    either, the default."""
    deadline = Deadline.of(task)
    if deadline is None:
        return DEFAULT_TIMEOUT_S if spec.timeout is None else spec.timeout
    left = deadline.remaining()
    return left if spec.timeout is None else min(spec.timeout, left)


def _headers(spec_headers: Mapping[str, Any], task: Task) -> dict[str, str]:
    headers = {
        name: value if isinstance(value, str) else json.dumps(value)
        for name, value in spec_headers.items()
        if value is not None
    }
    present = {name.lower() for name in headers}
    if "idempotency-key" not in present:
        headers["Idempotency-Key"] = task.key
    if "traceparent" not in present:
        inherited = task.context.get("traceparent")
        traced = None if task.trace is None else plugin_traceparent(task)
        if traced is not None:
            headers["traceparent"] = traced
        elif isinstance(inherited, str) and _TRACEPARENT.match(inherited):
            headers["traceparent"] = inherited
        else:  # none, or malformed: W3C says start a new trace
            headers["traceparent"] = new_traceparent()
    return headers


# A request extension (kept by httpx on each redirect): the headers that carry a credential
# or a secret, and the origin they were meant for.
_CREDENTIAL_HOME = "noetl.credential_home"
# Headers that carry credentials by their nature, whatever their value (curl drops these
# on a redirect to another host too).
_ALWAYS_GUARDED = frozenset({"authorization", "proxy-authorization", "cookie"})


def _guarded(headers: Mapping[str, str], credential_header: str | None) -> frozenset[str]:
    """The names of the headers that must not follow a redirect to another origin: the
    credential's, those that carry credentials by nature, and any whose value holds one of
    the task's secrets (`headers: {X-Token: "{{ secrets.api }}"}`)."""
    scope = current_scope()
    names = {credential_header} if credential_header is not None else set()
    for name, value in headers.items():
        if name.lower() in _ALWAYS_GUARDED or scope.holds(value):
            names.add(name)
    return frozenset(names)


def _origin(url: str | httpx.URL) -> tuple[str, str, int | None]:
    parsed = httpx.URL(url)
    return parsed.scheme, parsed.host, parsed.port


def _keep_credential_home(request: httpx.Request) -> None:
    """Drop the guarded headers (`_guarded`) from a redirect to another origin (httpx drops
    only `Authorization`, and keeps it from http to https; an api key or a secret token
    must not follow a redirect either)."""
    home = request.extensions.get(_CREDENTIAL_HOME)
    if home is not None and _origin(request.url) != home[1]:
        for name in home[0]:
            request.headers.pop(name, None)


def _authorize(headers: dict[str, str], name: str) -> str:
    """Add the header of credential `name` (its name is returned); its values are masked
    in the outcome."""
    scope = current_scope()
    try:
        auth = http_auth(scope.record(name))
    except NoetlError as exc:  # unknown, unusable or unreadable: the message names it
        raise _Failure(str(exc), type(exc).__name__, retryable=exc.retryable) from None
    for value in auth.derived:  # the credential's own values are remembered already
        scope.remember(value)
    if auth.header.lower() in {header.lower() for header in headers}:
        raise _Failure(
            f"spec.headers sets {auth.header} and spec.credential {name!r} sends it too; keep one",
            "FatalError",
        )
    headers[auth.header] = auth.value
    return auth.header


def _params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Query values httpx takes: scalars, lists of scalars; anything else as JSON."""

    def scalar(value: Any) -> Any:
        return value if isinstance(value, str | int | float | bool) else json.dumps(value)

    return {
        name: [scalar(v) for v in value] if isinstance(value, list) else scalar(value)
        for name, value in params.items()
        if value is not None
    }


def _read_some(response: httpx.Response, limit: int, deadline: float) -> bytes:
    """At most `limit` bytes of the (decoded) body; the rest is never read."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
        if time.monotonic() > deadline:
            # A server trickling bytes must not hold a worker past the timeout.
            raise httpx.ReadTimeout("the response body took longer than the timeout")
    return b"".join(chunks)[:limit]


def _decode(raw: bytes, response: httpx.Response) -> str:
    try:
        return raw.decode(response.charset_encoding or "utf-8", errors="replace")
    except LookupError:  # an unknown charset in the content type
        return raw.decode("utf-8", errors="replace")


def _data(raw: bytes, response: httpx.Response) -> Any:
    if "json" in response.headers.get("content-type", "").lower():
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            pass  # mislabelled: the text is still worth having
    return _decode(raw, response)


def _megabytes(nbytes: int) -> str:
    return f"{nbytes / (1024 * 1024):g} MB"
