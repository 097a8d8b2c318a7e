"""Callables for the python tool's `module` + `callable` form, used by the pool tests."""

from __future__ import annotations

from typing import Any


def double(context: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    return {"doubled": args["x"] * 2, "who": context.get("who")}


def args_only(args: dict[str, Any]) -> Any:
    return sorted(args)


def unreachable(context: dict[str, Any], args: dict[str, Any]) -> None:
    raise ConnectionError("database unreachable")


NOT_CALLABLE = 42
