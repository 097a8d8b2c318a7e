"""Who may call which route: bearer authentication and roles, denied by default.

Every route declares the role it needs next to its path, as a dependency:

    @router.post("/{id}/cancel", dependencies=[requires(Role.OPERATOR)])

`requires` depends on `authenticate`, which reads `Authorization: Bearer <credential>`
(an API token, or a session token from `POST /api/sessions`) and answers 401 when it is
missing or not valid; a valid credential with too low a role gets 403. Only the paths of
`PUBLIC_PATHS` and `PUBLIC_PREFIXES` answer without one. `check_routes` (run by
`create_app`) refuses to build an app with a route that is neither public nor declares a
role, and the app-wide `default_deny` dependency gives a route added later without a role
the admin role, so no route is ever public by omission.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.routing import BaseRoute, Mount

from noetl.auth import ANONYMOUS, SESSION_PREFIX, Principal, Role, TokenStore, hash_secret
from noetl.auth.cache import CachedTokens
from noetl.errors import AuthenticationError, PermissionDeniedError
from noetl.sessions.manager import Sessions

__all__ = [
    "PUBLIC_PATHS",
    "PUBLIC_PREFIXES",
    "Gate",
    "authenticate",
    "check_routes",
    "default_deny",
    "is_public",
    "iter_routes",
    "required_role",
    "requires",
]

# Answer without a credential: the health probe (load balancers, `noetl server health`),
# the API's own description (it shows the routes, never data) and `/`, which redirects to
# the console.
PUBLIC_PATHS = frozenset(
    {"/", "/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
)
# The web console's static pages: public, while the API calls they make are not.
# `/api/triggers`: a schedule's webhook checks its own token (noetl.runtime.webhooks).
PUBLIC_PREFIXES = ("/ui", "/api/triggers")
# `last_used_at` of a token is written at most this often (a write per request would
# serialize reads behind the database's write lock).
TOKEN_TOUCH_EVERY_S = 60.0

MISSING = (
    "missing bearer token: send 'Authorization: Bearer <token>' "
    "(an API token from `noetl auth token create`, or a session token)"
)
BAD_TOKEN = "the token is not valid (unknown, expired or revoked)"
BAD_SESSION = "the session is not valid (unknown, expired or logged out); log in again"


class Gate:
    """Turns a bearer credential into a `Principal` (or an AuthenticationError)."""

    def __init__(
        self,
        tokens: TokenStore,
        sessions: Sessions,
        *,
        enabled: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tokens = tokens
        self.sessions = sessions
        self.enabled = enabled
        self.clock = clock

    def authenticate(self, credential: str | None) -> Principal:
        if not self.enabled:
            return ANONYMOUS
        if not credential:
            raise AuthenticationError(MISSING)
        now = self.clock()
        if credential.startswith(SESSION_PREFIX):
            return self._session(credential, now)
        token = self.tokens.find(hash_secret(credential))
        if token is None or not token.usable(now):
            raise AuthenticationError(BAD_TOKEN)
        if token.last_used_at is None or now - token.last_used_at >= TOKEN_TOUCH_EVERY_S:
            self.tokens.touch(token.token_id, now)
        return Principal(role=token.role, name=token.name, token_id=token.token_id)

    def at_once(self, credential: str | None) -> Principal | None:
        """The principal when it is known without reading or writing the database (no
        authentication, a token the cache read a moment ago and need not touch), else
        None: `authenticate` decides. Safe to call on the event loop."""
        if not self.enabled:
            return ANONYMOUS
        if not credential or credential.startswith(SESSION_PREFIX):
            return None
        if not isinstance(self.tokens, CachedTokens):
            return None
        token = self.tokens.peek(hash_secret(credential))
        now = self.clock()
        if token is None or not token.usable(now) or token.last_used_at is None:
            return None
        if now - token.last_used_at >= TOKEN_TOUCH_EVERY_S:
            return None
        return Principal(role=token.role, name=token.name, token_id=token.token_id)

    def _session(self, credential: str, now: float) -> Principal:
        session = self.sessions.check(credential, now)
        if session is None:
            raise AuthenticationError(BAD_SESSION)
        # Revoking a token ends its sessions: its state is read on every use (through
        # `CachedTokens` on a server: within `server.revocation_delay_s`).
        token = self.tokens.get(session.token_id)
        if token is None or not token.usable(now):
            raise AuthenticationError(BAD_SESSION)
        return Principal(
            role=session.role, name=token.name, token_id=token.token_id, session_key=session.key
        )


_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="An API token (`noetl auth token create`) or a session token "
    "(`POST /api/sessions`), as `Authorization: Bearer <token>`.",
)


def _gate(request: Request) -> Gate:
    gate: Gate = request.app.state.services.gate
    return gate


async def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The principal of the request's bearer credential; 401 without a valid one.

    The dependencies here are coroutines: FastAPI runs a plain function dependency in its
    threadpool, one switch of threads each, which cost a busy server more than the check.
    What needs the database (a token not read a moment ago, a session) still runs there."""
    gate = _gate(request)
    credential = None if credentials is None else credentials.credentials
    principal = gate.at_once(credential)
    if principal is not None:
        return principal
    return await run_in_threadpool(gate.authenticate, credential)


def _who(principal: Principal) -> str:
    if principal.session_key is not None:
        return f"the session of token {principal.name!r}"
    return f"the token {principal.name!r}"


def _require(role: Role) -> Callable[[Principal], Awaitable[Principal]]:
    async def check(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
        if not principal.role.allows(role):
            raise PermissionDeniedError(
                f"this needs the {role.value} role; {_who(principal)} has {principal.role.value}"
            )
        return principal

    check.__name__ = f"requires_{role.value}"
    return check


_CHECKS = {role: _require(role) for role in Role}
_ROLE_OF: dict[Callable[..., Any], Role] = {check: role for role, check in _CHECKS.items()}


def requires(role: Role) -> Any:
    """The dependency that admits principals of `role` or above (a `Depends`)."""
    return Depends(_CHECKS[Role(role)])


def _roles(dependant: Dependant) -> set[Role]:
    found = {_ROLE_OF[dependant.call]} if dependant.call in _ROLE_OF else set()
    for sub in dependant.dependencies:
        found |= _roles(sub)
    return found


def required_role(route: BaseRoute, inherited: Iterable[Role] = ()) -> Role | None:
    """The role a route declares (the highest, if several), or None."""
    roles = set(inherited)
    if isinstance(route, APIRoute):
        roles |= _roles(route.dependant)
    return max(roles, key=lambda r: r.rank) if roles else None


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or any(
        path == prefix or path.startswith(prefix + "/") for prefix in PUBLIC_PREFIXES
    )


def iter_routes(app: FastAPI) -> Iterator[tuple[str, BaseRoute, Role | None]]:
    """(full path, route, declared role) of every route of the app. FastAPI from 0.12x
    keeps an included router as one lazy entry of `app.routes` (its `original_router`);
    this walks into those too, with what the inclusion adds (prefix, dependencies)."""
    yield from _walk(app.routes, "", ())


def _walk(
    routes: Iterable[BaseRoute], prefix: str, inherited: tuple[Role, ...]
) -> Iterator[tuple[str, BaseRoute, Role | None]]:
    for route in routes:
        original = getattr(route, "original_router", None)
        if original is None:
            path = prefix + str(getattr(route, "path", ""))
            yield path, route, required_role(route, inherited)
            continue
        context = getattr(route, "include_context", None)
        extra = tuple(
            _ROLE_OF[dep.dependency]
            for dep in getattr(context, "dependencies", None) or ()
            if getattr(dep, "dependency", None) in _ROLE_OF
        )
        yield from _walk(
            original.routes, prefix + str(getattr(context, "prefix", "") or ""), inherited + extra
        )


def check_routes(app: FastAPI) -> None:
    """RuntimeError naming every route that is neither public nor declares a role (or is
    public and declares one, which would be a mistake of one or the other)."""
    problems = []
    for path, route, role in iter_routes(app):
        if role is None and not is_public(path):
            kind = "mount" if isinstance(route, Mount) else "route"
            problems.append(f"{kind} {path} declares no role and is not public")
        elif role is not None and is_public(path):
            problems.append(f"route {path} is public and declares the {role.value} role")
    if problems:
        raise RuntimeError(
            "every route needs `dependencies=[requires(Role.X)]` or a place in "
            "noetl.server.auth.PUBLIC_PATHS: " + "; ".join(problems)
        )


async def default_deny(request: Request) -> None:
    """App-wide: a route that neither is public nor declares a role needs the admin role
    (a route added after `create_app` checked the routes is still not public)."""
    route = request.scope.get("route")
    if route is None or required_role(route) is not None:
        return
    if is_public(str(getattr(route, "path", ""))):
        return
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    bearer = credential.strip() if scheme.lower() == "bearer" else None
    gate = _gate(request)
    principal = gate.at_once(bearer)
    if principal is None:
        principal = await run_in_threadpool(gate.authenticate, bearer)
    if not principal.role.allows(Role.ADMIN):
        raise PermissionDeniedError(
            f"this needs the admin role; {_who(principal)} has {principal.role.value}"
        )
