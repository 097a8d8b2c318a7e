"""What must not be shown: the rules shared by the API (seed 000, section 8.9 "API
Masking"), `noetl config show` and configuration errors.

A value is hidden when its KEY looks sensitive: the key contains one of `REDACT_KEYS`,
case-insensitively, at any depth of nested mappings and lists. Substring matching errs on
the side of hiding (`author` contains `auth`, `monkey` contains `key`); a leaked token
costs more than a hidden harmless value.

A URL or DSN is shown without its password (`mask_url`): the password of its user part,
query parameters under a sensitive name, and `password=...` words of a keyword DSN.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["MASK", "REDACT_KEYS", "mask_url", "redact", "sensitive"]

REDACT_KEYS = ("password", "token", "secret", "authorization", "key", "auth", "api_key")
MASK = "***"

# `password=...` (or pwd / passwd) in a keyword DSN or any other text.
_PASSWORD_WORD = re.compile(r"(?i)\b(password|passwd|pwd)(\s*=\s*)('[^']*'|\"[^\"]*\"|\S+)")


def sensitive(key: object) -> bool:
    """True if a value stored under `key` must not be shown."""
    lowered = str(key).lower()
    return any(word in lowered for word in REDACT_KEYS)


def redact(value: Any, *, keep: Collection[str] = ()) -> Any:
    """A copy of `value` with every value under a sensitive key replaced by `MASK`.

    `keep` names top-level keys left as they are (fields the engine itself writes whose
    names happen to match, such as an event's idempotency `key`); nested keys are always
    checked.
    """
    if isinstance(value, Mapping):
        return {
            k: (v if k in keep else MASK if sensitive(k) else redact(v)) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value


def mask_url(text: str) -> str:
    """`text` (a URL, a DSN, any string) with its passwords replaced by `MASK`:
    `postgresql://ada:s3cret@db/x` -> `postgresql://ada:***@db/x`; a query parameter with a
    sensitive name and a `password=...` word are masked too. Text that holds none is
    returned as it is."""
    masked = _PASSWORD_WORD.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    if "://" not in masked:
        return masked
    try:
        parts = urlsplit(masked)
        password = parts.password
    except ValueError:  # not a URL after all (a bad port, brackets): hide what may follow
        scheme, _, _ = masked.partition("://")
        return f"{scheme}://{MASK}"
    netloc = parts.netloc
    if password is not None:
        user, _, host = netloc.rpartition("@")
        name = user.split(":", 1)[0]
        netloc = f"{name}:{MASK}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(sensitive(k) for k, _ in pairs):
            query = urlencode([(k, MASK if sensitive(k) else v) for k, v in pairs], safe="*")
    if netloc == parts.netloc and query == parts.query:
        return masked
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
