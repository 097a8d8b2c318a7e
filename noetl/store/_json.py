"""JSON text of the stores' JSON columns: one encoder for all, made once."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["dumps", "loads"]


def dumps(value: Any) -> str:
    """Compact JSON text, the one encoding of every JSON column (one encoder for all:
    `json.dumps` with options builds one per call, a cost each event paid)."""
    return "".join(_ENCODE(value, 0))


_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _encoder() -> Callable[[Any, int], Sequence[str]]:
    """`_ENCODER`'s C encoder, made once: `encode` makes one per call, about half the
    cost of encoding a small value (a commit encodes each event, row and parameter).
    Without the markers of circular references: a value that holds itself ends in
    RecursionError (a ValueError with them), and every value is bounded in depth before
    it is stored. Where there is no C encoder, `encode` itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return lambda value, _level: (_ENCODER.encode(value),)
    encoder: Callable[[Any, int], Sequence[str]] = make(
        None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",",
        False, False, True,
    )  # fmt: skip
    return encoder


_ENCODE = _encoder()


def loads(text: str) -> Any:
    return json.loads(text)
