"""The operator console: a static page and its assets under `/ui`, talking to `/api`.

The assets ship inside the package (`noetl/server/ui`): plain HTML, CSS and JavaScript
modules, no build step and nothing fetched from elsewhere, so the console works offline.
They are read once when the app is built. Every answer carries a strict Content Security
Policy (scripts and styles from this server only, no inline code), so data that slipped
through escaping still could not run as code.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from noetl.core import NotFoundError

PREFIX = "/ui"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidate every time (a 304 when unchanged): an upgraded server serves new assets.
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets(root: Traversable | None = None) -> dict[str, Asset]:
    """Every file under the console directory by its path relative to it ("js/api.js")."""
    root = root if root is not None else resources.files("noetl.server") / "ui"
    assets: dict[str, Asset] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for child in node.iterdir():
            name = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, f"{name}/")
                continue
            suffix = "." + child.name.rsplit(".", 1)[-1] if "." in child.name else ""
            content_type = CONTENT_TYPES.get(suffix)
            if content_type is None:
                continue  # only what the console serves; never stray files
            body = child.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            assets[name] = Asset(body, content_type, etag)

    walk(root, "")
    return assets


def console_router(assets: dict[str, Asset] | None = None) -> APIRouter:
    """Routes serving the console: `/ui/` is the page, `/ui/<file>` its assets."""
    files = assets if assets is not None else load_assets()
    router = APIRouter(include_in_schema=False)

    def serve(name: str, request: Request) -> Response:
        asset = files.get(name)
        if asset is None:
            raise NotFoundError(f"the console has no file {name!r}")
        headers = {**SECURITY_HEADERS, "ETag": asset.etag}
        if request.headers.get("if-none-match") == asset.etag:
            return Response(status_code=304, headers=headers)
        return Response(asset.body, media_type=asset.content_type, headers=headers)

    @router.get("/")
    def root() -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/", status_code=307)

    @router.get(PREFIX)
    def page_redirect() -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/", status_code=307)

    @router.get(PREFIX + "/")
    def page(request: Request) -> Response:
        return serve("index.html", request)

    @router.get(PREFIX + "/{name:path}")
    def asset(name: str, request: Request) -> Response:
        return serve(name, request)

    return router
