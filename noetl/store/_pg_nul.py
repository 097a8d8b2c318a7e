"""NUL characters in PostgreSQL: stored escaped, read back as they were.

PostgreSQL's `text` cannot hold a NUL character at all, and `jsonb` refuses the JSON escape
`\\u0000` ("unsupported Unicode escape sequence"). Values reach the store from user code
and remote services (a python step returning "a\\x00b", an HTTP answer with `\\u0000`), so
the PostgreSQL adapter escapes NUL reversibly in what it writes and unescapes what it
reads; the other adapters hold NUL as it is.

The escape uses MARK, U+FDD0 (a Unicode noncharacter, meant for a program's internal use):
NUL is written as MARK followed by "0", and MARK itself as MARK twice, in keys and values
alike, so every string, including one that already holds MARK, comes back exactly.

The cost is paid only where a NUL or MARK is present: writing checks the JSON text from
`noetl.store._json.dumps` (ASCII: both appear as `\\u` escapes) for those two escapes, and
reading checks the text PostgreSQL hands back (MARK appears as itself) for MARK; both are
substring searches. A value without either goes through untouched.
"""

from __future__ import annotations

import json
import re
from typing import Any

from noetl.store._json import dumps

MARK = "\ufdd0"
_MARK_BYTES = MARK.encode()

# In JSON text made by `dumps`: the escape of NUL or of MARK, not itself escaped (preceded
# by an even number of backslashes, i.e. by pairs that each stand for one backslash).
_JSON_IN = re.compile(r"(?<!\\)((?:\\\\)*)\\u(0000|fdd0)")
# In text read back (JSON or plain): MARK and the character it escapes.
_OUT = re.compile(f"{MARK}([0{MARK}])")


def _json_in(match: re.Match[str]) -> str:
    escaped = "\\ufdd00" if match.group(2) == "0000" else "\\ufdd0\\ufdd0"
    return match.group(1) + escaped


def json_in(text: str) -> str:
    """JSON text from `dumps` made storable in `jsonb`: NUL and MARK escaped."""
    if "\\u0000" not in text and "\\ufdd0" not in text:
        return text
    return _JSON_IN.sub(_json_in, text)


def pg_dumps(value: Any) -> str:
    """`dumps` for a PostgreSQL `jsonb` column."""
    return json_in(dumps(value))


def json_out(text: str) -> str:
    """JSON text read from a `jsonb` column (`::text`), with NUL and MARK restored."""
    if MARK not in text:
        return text
    return _OUT.sub(lambda m: "\\u0000" if m.group(1) == "0" else MARK, text)


def jsonb_loads(data: str | bytes) -> Any:
    """The `jsonb` loader of the store's connections: `json.loads` with NUL and MARK
    restored (psycopg hands it the column's text as bytes)."""
    if isinstance(data, str):
        return json.loads(json_out(data))
    if _MARK_BYTES not in data:
        return json.loads(data)
    return json.loads(json_out(bytes(data).decode()))


def text_in(value: str) -> str:
    """A string made storable in a `text` column: NUL and MARK escaped."""
    if "\x00" not in value and MARK not in value:
        return value
    return value.replace(MARK, MARK + MARK).replace("\x00", MARK + "0")


def text_out(value: str) -> str:
    """A string read from a `text` column written with `text_in`."""
    if MARK not in value:
        return value
    return _OUT.sub(lambda m: "\x00" if m.group(1) == "0" else MARK, value)
