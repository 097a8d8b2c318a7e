"""API tokens for tests: create one in a store (or a database) and send it."""

from __future__ import annotations

import time
from typing import Any

from noetl.auth import Role, issue_token
from noetl.store import open_store
from noetl.store.base import Store


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def new_token(store: Store, role: Role = Role.ADMIN, **kwargs: Any) -> str:
    """A fresh token of `role` in `store`."""
    secret, _ = issue_token(
        store.tokens,
        role=role,
        name=kwargs.pop("name", f"test-{role.value}"),
        now=time.time(),
        **kwargs,
    )
    return secret


def auth_headers(store: Store, role: Role = Role.ADMIN) -> dict[str, str]:
    """The Authorization header of a fresh token of `role` in `store`."""
    return bearer(new_token(store, role))


def token_in_database(url: str, role: Role = Role.ADMIN) -> str:
    """A fresh token of `role` in the database `url` (for servers in subprocesses)."""
    store = open_store(url)
    try:
        return new_token(store, role)
    finally:
        store.close()
