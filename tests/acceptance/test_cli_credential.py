"""`noetl credential ...` (the real CLI in a subprocess) on SQLite and PostgreSQL, and
`noetl run` with named credentials in upstream's record format: from a credentials file
and from the database, a postgres tool against the real PostgreSQL and an http tool with a
bearer credential against a loopback server that checks the header."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from noetl.credentials.keys import key_id, new_key
from tests.helpers import cli
from tests.helpers.loopback import base_url, serving

PW = "pw-canary-3c9e1"
TOKEN = "tok-canary-3c9e1"


def noetl(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI without the developer's NOETL_* settings; never a traceback."""
    return cli.noetl(*args, env=env, stdin=stdin, clean_env=True, no_traceback=True)


def upstream_pg(url: str, password: str = PW) -> dict[str, Any]:
    parts = urlsplit(url)
    return {
        "name": "pg_local",
        "type": "postgres",
        "data": {
            "db_host": parts.hostname,
            "db_port": str(parts.port or 5432),
            "db_user": parts.username,
            "db_password": password,  # the local server trusts: never checked
            "db_name": parts.path.lstrip("/"),
        },
    }


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        (tmp_path / "data").mkdir()  # --db into a missing directory is refused
        return str(tmp_path / "data" / "noetl.db")
    url: str = request.getfixturevalue("pg_database")
    return url


def stored_text(db: str) -> bytes:
    """Every byte the database keeps of the credential table (SQLite: the whole files)."""
    if db.startswith("postgresql://"):
        with psycopg.connect(db) as conn:
            rows = conn.execute("SELECT c::text FROM credential c").fetchall()
        return str(rows).encode()
    path = Path(db)
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def test_set_list_replace_and_delete_credentials(db: str, tmp_path: Path) -> None:
    key = new_key()
    env = {"NOETL_DB": db, "NOETL_CREDENTIALS_KEY": key}
    assert "no credentials" in noetl("credential", "list", env=env).stdout

    data = tmp_path / "pg.json"
    data.write_text(json.dumps(upstream_pg("postgresql://app@db.internal:5433/wh")["data"]))
    stored = noetl(
        "credential", "set", "pg_local", "--type", "postgres", "--data-file", str(data), env=env
    )
    assert stored.returncode == 0, stored.stderr
    assert stored.stdout == f"stored credential 'pg_local' (postgres, key {key_id(key)})\n"
    # a whole upstream record on stdin: its type comes with it
    bearer = json.dumps({"name": "api", "type": "bearer", "data": {"token": TOKEN}})
    piped = noetl("credential", "set", "api", "--data-file", "-", env=env, stdin=bearer)
    assert piped.returncode == 0, piped.stderr

    listed = noetl("credential", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)["items"]
    assert [(i["name"], i["type"], i["key_id"]) for i in items] == [
        ("api", "bearer", key_id(key)),
        ("pg_local", "postgres", key_id(key)),
    ]
    table = noetl("credential", "list", env=env)
    assert table.stdout.splitlines()[0].split() == ["NAME", "TYPE", "KEY", "CREATED", "UPDATED"]
    for shown in (stored, piped, listed, table):
        assert PW not in shown.stdout + shown.stderr and TOKEN not in shown.stdout + shown.stderr
    assert PW.encode() not in stored_text(db) and TOKEN.encode() not in stored_text(db)

    replaced = noetl("credential", "set", "api", "--type", "bearer", "--data-file", "-",
                     "--json", env=env, stdin=json.dumps({"token": "tok-2"}))  # fmt: skip
    assert replaced.returncode == 0, replaced.stderr
    again = json.loads(replaced.stdout)
    assert (again["name"], again["created"]) == ("api", False)
    assert again["created_at"] == items[0]["created_at"] <= again["updated_at"]

    deleted = noetl("credential", "delete", "api", env=env)
    assert (deleted.returncode, deleted.stdout) == (0, "deleted credential 'api'\n")
    gone = noetl("credential", "delete", "api", env=env)
    assert gone.returncode == 1 and "no credential 'api'" in gone.stderr
    names = [
        i["name"]
        for i in json.loads(noetl("credential", "list", "--json", env=env).stdout)["items"]
    ]
    assert names == ["pg_local"]


def test_the_key_is_required_checked_and_rotated(tmp_path: Path) -> None:
    db = str(tmp_path / "noetl.db")
    data = tmp_path / "api.yaml"
    data.write_text(f"token: {TOKEN}\n")
    args = ("credential", "set", "api", "--type", "bearer", "--data-file", str(data))

    missing = noetl(*args, env={"NOETL_DB": db})
    assert missing.returncode == 3
    assert "no key to encrypt credentials with: set NOETL_CREDENTIALS_KEY" in missing.stderr
    assert not Path(db).exists()  # refused before the database was touched

    bad = noetl(*args, env={"NOETL_DB": db, "NOETL_CREDENTIALS_KEY": "my-secret-passphrase"})
    assert bad.returncode == 3
    assert "NOETL_CREDENTIALS_KEY: credentials.key: key 1 is not a Fernet key" in bad.stderr
    assert "my-secret-passphrase" not in bad.stderr

    old, new = new_key(), new_key()
    assert noetl(*args, env={"NOETL_DB": db, "NOETL_CREDENTIALS_KEY": old}).returncode == 0
    rotated = noetl("credential", "rotate", "--json",
                    env={"NOETL_DB": db, "NOETL_CREDENTIALS_KEY": f"{new},{old}"})  # fmt: skip
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout) == {
        "key_id": key_id(new),
        "rotated": ["api"],
        "current": [],
        "changed": [],
    }
    listed = noetl("credential", "list", "--json", env={"NOETL_DB": db})  # no key needed
    assert [i["key_id"] for i in json.loads(listed.stdout)["items"]] == [key_id(new)]
    keygen = noetl("credential", "keygen")
    assert keygen.returncode == 0 and len(keygen.stdout.strip()) == 44


@pytest.mark.parametrize(
    ("content", "extra", "expected"),
    [
        ("a: 1\nb: x: y\n", ("--type", "bearer"), "data file {f}:2: is not valid YAML or JSON"),
        ("token: t\n", (), "holds the fields only: give their --type"),
        ("{name: other, type: bearer, data: {token: t}}", (), "the record is named 'other'"),
        ("{type: basic, data: {token: t}}", ("--type", "bearer"), "is not --type 'bearer'"),
        ("db_port: five\n", ("--type", "postgres"), "field 'db_port' must be a port number"),
    ],
)
def test_bad_input_to_set_is_named(
    tmp_path: Path, content: str, extra: tuple[str, ...], expected: str
) -> None:
    data = tmp_path / "data.yaml"
    data.write_text(content)
    env = {"NOETL_DB": str(tmp_path / "noetl.db"), "NOETL_CREDENTIALS_KEY": new_key()}
    proc = noetl("credential", "set", "api", "--data-file", str(data), *extra, env=env)
    assert proc.returncode == 3
    assert expected.format(f=data) in proc.stderr


def test_a_type_no_builtin_tool_takes_is_kept_with_a_warning(tmp_path: Path) -> None:
    env = {"NOETL_DB": str(tmp_path / "noetl.db"), "NOETL_CREDENTIALS_KEY": new_key()}
    record = json.dumps({"type": "snowflake", "data": {"sf_private_key": "PK-CANARY"}})
    proc = noetl("credential", "set", "sf", "--data-file", "-", env=env, stdin=record)
    assert proc.returncode == 0
    assert "no built-in tool takes credentials of type 'snowflake'" in proc.stderr
    assert "PK-CANARY" not in proc.stdout + proc.stderr


# --- noetl run ----------------------------------------------------------------------------

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: credentials_by_name}
workload: {pg_auth: pg_local, api_auth: api}
workflow:
  - step: start
    tool:
      kind: postgres
      credential: "{{ workload.pg_auth }}"
      query: "SELECT current_database() AS db, current_user AS who"
    result: {as: db}
    next: call
  - step: call
    tool:
      kind: http
      url: "URL"
      credential: "{{ workload.api_auth }}"
    result: {as: called}
"""


class Guarded(BaseHTTPRequestHandler):
    """200 only with `Authorization: Bearer <TOKEN>`; 401 otherwise."""

    seen: list[str] = []

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        Guarded.seen.append(auth)
        status = 200 if auth == f"Bearer {TOKEN}" else 401
        body = json.dumps({"welcome": status == 200}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def guarded_url() -> Iterator[str]:
    Guarded.seen = []
    with serving(Guarded) as server:
        yield f"{base_url(server)}/v1/me"


def run_playbook(tmp_path: Path, url: str, db: str, env: dict[str, str], *extra: str) -> Any:
    playbook = tmp_path / "credentials_by_name.yaml"
    playbook.write_text(PLAYBOOK.replace("URL", url), encoding="utf-8")
    return noetl("run", str(playbook), "--json", "--db", db, *extra, env=env)


def check_ran(proc: subprocess.CompletedProcess[str], pg_url: str) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    context = json.loads(proc.stdout)["context"]
    parts = urlsplit(pg_url)
    assert context["db"]["rows"] == [{"db": parts.path[1:], "who": parts.username}]
    assert context["called"]["data"] == {"welcome": True}
    assert Guarded.seen == [f"Bearer {TOKEN}"]
    assert PW not in proc.stdout + proc.stderr and TOKEN not in proc.stdout + proc.stderr


def test_run_with_credentials_from_a_credentials_file(
    tmp_path: Path, pg_database: str, guarded_url: str
) -> None:
    creds = tmp_path / "credentials.yaml"
    creds.write_text(
        json.dumps({"pg_local": upstream_pg(pg_database)})[:-1]
        + f', "api": {{"type": "bearer", "data": {{"token": "{TOKEN}"}}}}}}'
    )
    db = str(tmp_path / "noetl.db")
    by_flag = run_playbook(tmp_path, guarded_url, db, {}, "--credentials-file", str(creds))
    check_ran(by_flag, pg_database)
    Guarded.seen = []
    by_env = run_playbook(tmp_path, guarded_url, db, {"NOETL_CREDENTIALS_FILE": str(creds)})
    check_ran(by_env, pg_database)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_run_with_credentials_from_the_database(
    store: str, tmp_path: Path, pg_database: str, guarded_url: str
) -> None:
    db = str(tmp_path / "noetl.db") if store == "sqlite" else pg_database
    env = {"NOETL_DB": db, "NOETL_CREDENTIALS_KEY": new_key()}
    for name, record in (
        ("pg_local", upstream_pg(pg_database)),
        ("api", {"type": "bearer", "data": {"token": TOKEN}}),
    ):
        proc = noetl(
            "credential", "set", name, "--data-file", "-", env=env, stdin=json.dumps(record)
        )
        assert proc.returncode == 0, proc.stderr
    check_ran(run_playbook(tmp_path, guarded_url, db, env), pg_database)
    assert PW.encode() not in stored_text(db) and TOKEN.encode() not in stored_text(db)

    # another key cannot open them: the first step fails, saying why, and nothing is sent
    Guarded.seen = []
    wrong = run_playbook(tmp_path, guarded_url, db, {**env, "NOETL_CREDENTIALS_KEY": new_key()})
    assert wrong.returncode == 1
    result = json.loads(wrong.stdout)
    assert result["status"] == "fail" and Guarded.seen == []
    assert (
        "credential 'pg_local' (in the database) cannot be decrypted: it was encrypted with key"
        in wrong.stdout
    )
    assert PW not in wrong.stdout + wrong.stderr


def test_a_bad_credentials_file_stops_run_before_it_starts(tmp_path: Path) -> None:
    creds = tmp_path / "credentials.yaml"
    creds.write_text("pg_local:\n  type: postgres\n  data: [not, a, map]\n")
    proc = run_playbook(tmp_path, "http://127.0.0.1:9/", str(tmp_path / "noetl.db"), {},
                        "--credentials-file", str(creds))  # fmt: skip
    assert proc.returncode == 3
    assert f"credentials file {creds}:1: credential 'pg_local': `data` must be a map" in proc.stderr


def test_a_bad_credentials_file_stops_a_worker_before_it_starts(tmp_path: Path) -> None:
    creds = tmp_path / "credentials.yaml"
    creds.write_text("api: {type: bearer}\nbad: just-a-string\n")
    db = tmp_path / "noetl.db"
    proc = noetl("worker", "start", "--db", str(db), "--credentials-file", str(creds))
    assert proc.returncode == 3
    assert f"credentials file {creds}:2: credential 'bad' must be a map" in proc.stderr
    assert not db.exists()  # nothing was opened
