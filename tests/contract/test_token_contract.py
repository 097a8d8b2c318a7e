"""The API token store (`store.tokens`) of every Store adapter."""

from __future__ import annotations

from dataclasses import replace

import pytest

from noetl.auth import ApiToken, Role, hash_secret, issue_token
from noetl.errors import ConflictError
from noetl.store.base import Store

T0 = 1_000_000.0


def token(token_id: str = "tok_a", **changes: object) -> ApiToken:
    base = ApiToken(
        token_id=token_id,
        name="ci",
        role=Role.OPERATOR,
        token_hash=hash_secret(f"noetl_{token_id}"),
        created_at=T0,
        expires_at=T0 + 86400,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_token_is_found_by_its_digest_and_by_its_id(store: Store) -> None:
    store.tokens.create(token())
    assert store.tokens.find(hash_secret("noetl_tok_a")) == token()
    assert store.tokens.get("tok_a") == token()
    assert store.tokens.find(hash_secret("noetl_other")) is None
    assert store.tokens.get("tok_b") is None


def test_ids_and_digests_are_unique(store: Store) -> None:
    store.tokens.create(token())
    with pytest.raises(ConflictError):
        store.tokens.create(token(token_hash=hash_secret("noetl_x")))  # same id
    with pytest.raises(ConflictError):
        store.tokens.create(token("tok_b", token_hash=hash_secret("noetl_tok_a")))  # same digest
    assert [t.token_id for t in store.tokens.all()] == ["tok_a"]


def test_all_lists_tokens_oldest_first(store: Store) -> None:
    store.tokens.create(token("tok_b", token_hash="b" * 64, created_at=T0 + 2))
    store.tokens.create(token("tok_a", token_hash="a" * 64, created_at=T0 + 1, expires_at=None))
    found = store.tokens.all()
    assert [t.token_id for t in found] == ["tok_a", "tok_b"]
    assert found[0].expires_at is None and found[1].expires_at == T0 + 86400


def test_revoke_marks_a_token_once(store: Store) -> None:
    store.tokens.create(token())
    revoked = store.tokens.revoke("tok_a", T0 + 10)
    assert revoked == token(revoked=True, revoked_at=T0 + 10)
    again = store.tokens.revoke("tok_a", T0 + 20)
    assert again is not None and again.revoked_at == T0 + 10
    assert store.tokens.get("tok_a") == revoked
    assert store.tokens.revoke("tok_none", T0) is None


def test_touch_records_the_last_use(store: Store) -> None:
    store.tokens.create(token())
    store.tokens.touch("tok_a", T0 + 5)
    found = store.tokens.get("tok_a")
    assert found is not None and found.last_used_at == T0 + 5
    store.tokens.touch("tok_none", T0 + 5)  # nothing to touch: no error


def test_issue_token_stores_only_the_digest(store: Store) -> None:
    secret, record = issue_token(store.tokens, role=Role.ADMIN, name="first", now=T0)
    assert secret.startswith("noetl_") and len(secret) >= 6 + 43
    assert record.token_hash == hash_secret(secret) != secret
    assert store.tokens.find(hash_secret(secret)) == record
    assert all(secret not in repr(t) for t in store.tokens.all())
    other, _ = issue_token(store.tokens, role=Role.VIEWER, name="second", now=T0, expires_in_s=60)
    assert other != secret
    assert store.tokens.find(hash_secret(other)).expires_at == T0 + 60  # type: ignore[union-attr]
