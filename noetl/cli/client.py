"""A small HTTP client for the NoETL server API, and how its failures reach the terminal.

Exit codes follow `noetl.cli.main`: 1 when the server rejected the request (invalid
playbook or request, unknown id, no or a bad token, too low a role), 3 when the server
cannot be reached or failed itself (connection refused, timeout, 5xx, database
unavailable).

Every request carries `Authorization: Bearer <token>` when a token is given (`--token` or
`NOETL_API_TOKEN`: an API token, or a session token).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from noetl.dsl.diagnostics import Diagnostic, Severity

if TYPE_CHECKING:
    import httpx

DEFAULT_SERVER = "http://127.0.0.1:8083"
EXIT_REJECTED = 1
EXIT_UNREACHABLE = 3

TOKEN_ENV = "NOETL_API_TOKEN"
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Server:
    """Where the server is, and the token to send it."""

    url: str = DEFAULT_SERVER
    token: str | None = None

    def __repr__(self) -> str:  # never the token
        return f"Server({self.url!r}, token={'***' if self.token else None})"


token_option = click.option(
    "--token",
    "token",
    default=None,
    envvar=TOKEN_ENV,
    show_envvar=True,
    help="API token (or session token) sent as 'Authorization: Bearer'.",
)


def server_option(func: F) -> F:
    """`--server` (NOETL_SERVER_URL) and `--token` (NOETL_API_TOKEN), given to the command
    as one `server: Server`."""

    @functools.wraps(func)
    def wrapper(*args: Any, server: str, token: str | None, **kwargs: Any) -> Any:
        return func(*args, server=Server(server, token or None), **kwargs)

    wrapped = token_option(wrapper)
    return click.option(  # type: ignore[return-value]
        "--server",
        "server",
        default=DEFAULT_SERVER,
        envvar="NOETL_SERVER_URL",
        show_envvar=True,
        show_default=True,
        help="Base URL of the NoETL server.",
    )(wrapped)


class ApiError(click.ClickException):
    """A request that failed; `show` prints the server's own message."""

    def __init__(self, message: str, *, exit_code: int, status: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.status = status

    def show(self, file: Any = None) -> None:
        head, *rest = self.message.split("\n")
        if self.status is not None:
            head += f" (HTTP {self.status})"
        click.echo("\n".join([f"error: {head}", *rest]), err=True, file=file)


def _diagnostic_lines(items: list[dict[str, Any]], file: str | None) -> list[str]:
    """Diagnostics as `noetl validate` prints them; `file` replaces the server's name for
    a playbook sent inline (the server only saw its text)."""
    lines = []
    for item in items:
        key = item.get("key")
        diagnostic = Diagnostic(
            code=str(item.get("code", "")),
            message=str(item.get("message", "")),
            file=file or str(item.get("file", "")),
            line=item.get("line"),
            step=item.get("step"),
            path=(key,) if key else (),
            severity=Severity(item.get("severity", "error")),
        )
        lines.append(diagnostic.format())
    return lines


def error_from_response(
    response: httpx.Response, *, file: str | None = None, token_given: bool = True
) -> ApiError:
    """The server's message (and diagnostics) for a failed response."""
    try:
        body = response.json()
    except ValueError:
        body = None
    message = ""
    if isinstance(body, dict):
        message = str(body.get("message") or body.get("detail") or "")
        diagnostics = body.get("diagnostics")
        if isinstance(diagnostics, list) and diagnostics:
            message = "\n".join([message, *_diagnostic_lines(diagnostics, file)])
    if not message:
        message = response.text.strip()[:500] or response.reason_phrase
    status = response.status_code
    if status == 401:
        message = (
            f"{message}; pass a token with --token or {TOKEN_ENV} "
            "(create one with `noetl auth token create`)"
            if not token_given
            else f"{message}; check the token in --token or {TOKEN_ENV}"
        )
    code = EXIT_UNREACHABLE if status >= 500 else EXIT_REJECTED
    return ApiError(message, exit_code=code, status=status)


class Client:
    """Calls the API at `base_url`; every failure becomes an ApiError."""

    def __init__(
        self,
        server: str | Server = DEFAULT_SERVER,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx  # only commands that talk to a server pay for the import

        target = server if isinstance(server, Server) else Server(server)
        self.base_url = target.url.rstrip("/")
        self.has_token = bool(target.token)
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else None
        self._http = httpx.Client(
            base_url=self.base_url, timeout=timeout, transport=transport, headers=headers
        )
        # Called with an execution id once its cancel is recorded (a local database
        # decides it at once: noetl.cli.local_api); None on a server, which decides it.
        self.after_cancel: Callable[[str], None] | None = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        ok: tuple[int, ...] = (),
        file: str | None = None,
    ) -> Any:
        """The decoded JSON body of a 2xx answer (or of a status in `ok`)."""
        import httpx

        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(method, path, json=json, params=query)
        except httpx.ConnectError as exc:
            raise ApiError(
                f"cannot connect to the NoETL server at {self.base_url} ({_reason(exc)}); "
                "is `noetl server start` running there? (set --server or NOETL_SERVER_URL)",
                exit_code=EXIT_UNREACHABLE,
            ) from None
        except httpx.TimeoutException:
            raise ApiError(
                f"the NoETL server at {self.base_url} did not answer in time",
                exit_code=EXIT_UNREACHABLE,
            ) from None
        except httpx.HTTPError as exc:
            raise ApiError(
                f"request to the NoETL server at {self.base_url} failed: {_reason(exc)}",
                exit_code=EXIT_UNREACHABLE,
            ) from None
        if not response.is_success and response.status_code not in ok:
            raise error_from_response(response, file=file, token_given=self.has_token)
        try:
            return response.json()
        except ValueError:
            raise ApiError(
                f"{self.base_url}{path} did not answer with JSON; is it a NoETL server?",
                exit_code=EXIT_UNREACHABLE,
            ) from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, *, file: str | None = None) -> Any:
        return self.request("POST", path, json=body, file=file)


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    if "refused" in text.lower() or not text:
        return "connection refused"
    return text
