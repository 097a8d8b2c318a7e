"""Secret references: `{{ secrets.NAME }}` is rendered to a marker, never to the value.

The engine renders a task's templates, and what it renders goes into events and the task
queue, so it must never see a secret. In templates, `secrets.NAME` (or `secrets['NAME']`)
is a `SecretRef`: a string whose text is the marker `<<secret:NAME>>`. It can be placed
anywhere in a value (`"Bearer {{ secrets.API_TOKEN }}"`), and the task lists the names its
values refer to (`Task.secrets`). The worker that runs the task replaces the markers of
those names with the values from its secret providers just before the call, and masks
those values in what it reports (see `noetl.credentials.scope`).

A marker only stands for its secret where a template put it: a value that merely contains
marker text (a response body, say) is not resolved unless its task uses that secret, and
then only to that same secret. Transforming a reference in a template (`| upper`,
`| b64encode`) transforms the marker, not the secret, so the worker would not find it:
references are for placing values, not for computing with them.

The marker is part of a task (`Task.secrets` names the markers its values hold), so it
lives in `noetl.core`: the engine renders markers, the worker and `noetl.credentials.scope`
resolve and mask them, and none of them needs another's package for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"
MARKER = re.compile(rf"<<secret:({NAME_PATTERN})>>")
_NAME = re.compile(rf"^{NAME_PATTERN}$")


def marker(name: str) -> str:
    """The text a reference to secret `name` renders to."""
    return f"<<secret:{name}>>"


class SecretRef(str):
    """`secrets.NAME` in a template: renders as the marker of NAME."""

    __slots__ = ("name",)
    name: str

    def __new__(cls, name: str) -> SecretRef:
        ref = super().__new__(cls, marker(name))
        ref.name = name
        return ref


class SecretNamespace(Mapping[str, SecretRef]):
    """The `secrets` name in templates: any valid name is a reference (whether a worker
    can resolve it is only known where the task runs)."""

    __slots__ = ()

    def __getitem__(self, name: str) -> SecretRef:
        if not isinstance(name, str) or not _NAME.match(name):
            raise KeyError(name)
        return SecretRef(name)

    def __getattr__(self, name: str) -> SecretRef:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(())  # the names are not known here; listing them shows nothing

    def __len__(self) -> int:
        return 0


SECRETS = SecretNamespace()


def referenced(value: Any) -> set[str]:
    """The secret names whose markers appear in a rendered value (strings, lists, maps)."""
    found: set[str] = set()
    _walk(value, found)
    return found


def _walk(value: Any, found: set[str]) -> None:
    if isinstance(value, str):
        if "<<secret:" in value:
            found.update(MARKER.findall(value))
    elif isinstance(value, dict):
        for item in value.values():
            _walk(item, found)
    elif isinstance(value, list):
        for item in value:
            _walk(item, found)
