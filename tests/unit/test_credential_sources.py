"""Where credentials are found: the credentials file, the database (encrypted with Fernet
keys), and the order in which a worker asks them; what a task's scope masks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from noetl.core import Outcome
from noetl.credentials import CredentialConfig
from noetl.credentials.file import CredentialsFile
from noetl.credentials.keys import CredentialKeyError, Keyring, key_id, new_key
from noetl.credentials.records import CredentialError, parse_credential
from noetl.credentials.scope import SecretScope, default_provider
from noetl.credentials.store import (
    DatabaseCredentials,
    open_stored,
    rotate_all,
    save_credential,
)
from noetl.errors import ConfigError
from noetl.store import MemoryStore

PW = "pw-canary-5150"
PG = {"type": "postgres", "data": {"db_host": "localhost", "db_user": "app", "db_password": PW}}


# --- keys ---------------------------------------------------------------------------------


def test_a_keyring_encrypts_with_its_first_key_and_decrypts_with_any() -> None:
    old, new = new_key(), new_key()
    token, made_with = Keyring([old]).encrypt(b"secret data")
    assert made_with == key_id(old) and b"secret data" not in token.encode()
    both = Keyring([new, old])
    assert both.decrypt(token, what="x", made_with=made_with) == b"secret data"
    rotated = both.rotate(token, what="x", made_with=made_with)
    assert Keyring([new]).decrypt(rotated, what="x", made_with=key_id(new)) == b"secret data"


def test_a_wrong_missing_or_malformed_key_is_explained_without_the_key() -> None:
    right, wrong = new_key(), new_key()
    token, made_with = Keyring([right]).encrypt(b"v")
    with pytest.raises(CredentialKeyError) as caught:
        Keyring([wrong]).decrypt(token, what="credential 'pg'", made_with=made_with)
    message = str(caught.value)
    assert f"credential 'pg' cannot be decrypted: it was encrypted with key {made_with}" in message
    assert key_id(wrong) in message and wrong not in message and right not in message
    with pytest.raises(CredentialKeyError, match="it is damaged"):
        Keyring([right]).decrypt(token[:-4] + "AAAA", what="c", made_with=made_with)
    with pytest.raises(CredentialKeyError, match="set NOETL_CREDENTIALS_KEY"):
        Keyring([]).encrypt(b"v")
    with pytest.raises(CredentialKeyError) as bad:
        Keyring([right, "not-a-key-but-a-secret"])
    assert "key 2 of NOETL_CREDENTIALS_KEY" in str(bad.value)
    assert "not-a-key-but-a-secret" not in str(bad.value)


# --- the database -------------------------------------------------------------------------


def test_stored_credentials_are_encrypted_and_read_back_with_the_key() -> None:
    store, key = MemoryStore(), new_key()
    row, created = save_credential(
        store.credentials, Keyring([key]), parse_credential("pg", PG), now=10.0
    )
    assert created and row.type == "postgres" and row.key_id == key_id(key)
    assert PW not in row.ciphertext and PW not in repr(row) and "ciphertext" not in row.summary()
    assert open_stored(store.credentials.get("pg"), Keyring([key])) == PG  # type: ignore[arg-type]
    provider = DatabaseCredentials(store.credentials, Keyring([key]))
    assert provider.credential("pg") == PG
    assert provider.credential("other") is None and provider.secret("pg") is None


def test_a_worker_without_the_right_key_fails_the_task_not_itself() -> None:
    store = MemoryStore()
    save_credential(store.credentials, Keyring([new_key()]), parse_credential("pg", PG), 1.0)
    for keys in ([], [new_key()]):
        with pytest.raises(CredentialError) as caught:
            DatabaseCredentials(store.credentials, Keyring(keys)).credential("pg")
        assert "credential 'pg' (in the database)" in str(caught.value)
        assert PW not in str(caught.value)


def test_rotation_moves_every_credential_to_the_first_key() -> None:
    store, old, new = MemoryStore(), new_key(), new_key()
    for name in ("a", "b"):
        save_credential(store.credentials, Keyring([old]), parse_credential(name, PG), 1.0)
    save_credential(store.credentials, Keyring([new]), parse_credential("c", PG), 1.0)
    done = rotate_all(store.credentials, Keyring([new, old]))
    assert (done.rotated, done.current, done.changed) == (("a", "b"), ("c",), ())
    only_new = DatabaseCredentials(store.credentials, Keyring([new]))
    assert [only_new.credential(n) for n in "abc"] == [PG, PG, PG]
    assert {row.key_id for row in store.credentials.all()} == {key_id(new)}


# --- the credentials file -----------------------------------------------------------------


def test_the_credentials_file_maps_names_to_records(tmp_path: Path) -> None:
    path = tmp_path / "credentials.yaml"
    path.write_text(
        "pg_local:\n"
        "  type: postgres\n"
        "  data: {db_host: localhost, db_password: pw}\n"
        "api: {type: bearer, data: {token: t}}\n",
        encoding="utf-8",
    )
    found = CredentialsFile(path)
    assert found.credential("pg_local") == {
        "type": "postgres",
        "data": {"db_host": "localhost", "db_password": "pw"},
    }
    assert found.credential("api") == {"type": "bearer", "data": {"token": "t"}}
    assert found.credential("none") is None and found.secret("api") is None


def test_a_list_of_upstream_json_records_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps([{"name": "pg_local", **PG}, {"name": "k", "type": "bearer"}]))
    assert CredentialsFile(path).credential("pg_local") == {"name": "pg_local", **PG}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: {type: bearer}\nb: x: y\n", ":2: is not valid YAML or JSON"),
        ("a: {type: bearer}\nb: just-a-secret-string\n", ":2: credential 'b' must be a map"),
        ("a:\n  type: bearer\nb:\n  type: 7\n", ":3: credential 'b': `type` must be"),
        ("a: {name: other, type: bearer}\n", ":1: credential 'a' has the name 'other'"),
        ("- {type: bearer}\n", ":1: each record of a list needs a `name`"),
        ("- {name: a}\n- {name: a}\n", ":2: credential 'a' is given twice"),
        ("just text\n", ":1: must map each credential name to its record"),
    ],
)
def test_a_bad_credentials_file_is_named_with_its_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "creds.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        CredentialsFile(path)
    assert str(caught.value).startswith(f"credentials file {path}")
    assert expected in str(caught.value)
    assert "just-a-secret-string" not in str(caught.value)


def test_an_edited_file_is_read_again_and_a_broken_edit_fails_the_task(tmp_path: Path) -> None:
    path = tmp_path / "creds.yaml"
    path.write_text("api: {type: bearer, data: {token: one}}\n", encoding="utf-8")
    found = CredentialsFile(path)
    assert found.credential("api") == {"type": "bearer", "data": {"token": "one"}}
    path.write_text("api: {type: bearer, data: {token: two-two}}\n", encoding="utf-8")
    os.utime(path, ns=(1, 1))  # a different stamp even within the clock's resolution
    assert found.credential("api") == {"type": "bearer", "data": {"token": "two-two"}}
    path.write_text("api: [broken\n", encoding="utf-8")
    with pytest.raises(CredentialError, match="is not valid YAML"):
        found.credential("api")


# --- lookup order and masking -------------------------------------------------------------


def test_environment_then_secrets_file_then_credentials_file_then_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, key = MemoryStore(), new_key()
    for name in ("env", "secrets", "file", "db"):
        record = {"type": "bearer", "data": {"token": f"from-db-{name}"}}
        save_credential(store.credentials, Keyring([key]), parse_credential(name, record), 1.0)
    secrets_file = tmp_path / "secrets.yaml"
    secrets_file.write_text(
        "credentials:\n  env: {token: from-secrets}\n  secrets: {token: from-secrets}\n"
    )
    creds_file = tmp_path / "creds.yaml"
    creds_file.write_text(
        "env: {type: bearer, data: {token: from-file}}\n"
        "secrets: {type: bearer, data: {token: from-file}}\n"
        "file: {type: bearer, data: {token: from-file}}\n"
    )
    monkeypatch.setenv("NOETL_CREDENTIAL_ENV", json.dumps({"token": "from-env"}))
    provider = default_provider(
        str(secrets_file),
        credentials=CredentialConfig(file=str(creds_file), keys=(key,)),
        store=store.credentials,
    )

    def token(name: str) -> str:
        found = provider.credential(name)
        assert found is not None
        data = found.get("data", found)
        return str(data["token"])

    assert [token(n) for n in ("env", "secrets", "file", "db")] == [
        "from-env",
        "from-secrets",
        "from-file",
        "from-db-db",
    ]


def test_a_scope_masks_a_records_secrets_and_keeps_hosts_and_users() -> None:
    class One:
        def secret(self, name: str) -> None:
            return None

        def credential(self, name: str) -> dict[str, object]:
            return PG

    scope = SecretScope(One())
    assert scope.record("pg").data["db_password"] == PW
    outcome = Outcome("t", ok=False, error=f"app@localhost refused {PW}", stdout=PW)
    masked = scope.mask_outcome(outcome)
    assert masked.error == "app@localhost refused ***" and masked.stdout == "***"


def test_the_unknown_name_message_names_every_source() -> None:
    with pytest.raises(Exception) as caught:
        SecretScope(default_provider()).credential("pg_local")
    message = str(caught.value)
    assert "NOETL_CREDENTIAL_pg_local or NOETL_CREDENTIAL_PG_LOCAL" in message
    assert "credentials file" in message and "noetl credential set" in message
