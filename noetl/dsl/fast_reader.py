"""The fast playbook reader: libyaml's event stream built into `YMap` / `YSeq`.

It walks the events of PyYAML's C parser and resolves plain scalars with ruamel.yaml's own
YAML 1.2 rules, so it builds exactly the tree the reference reader (`noetl.dsl.source`)
builds: same values, same Python types, same line numbers. It gives up (`FALLBACK`) on
anything it cannot reproduce exactly: errors, tags, anchors, aliases, merge keys, duplicate
or non-string keys, several documents, directives, the node and depth limits. The reference
reader then takes the text and gives every diagnostic.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from ruamel.yaml import YAML
from ruamel.yaml.nodes import ScalarNode
from yaml.error import YAMLError as PyYAMLError
from yaml.events import (
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)

from noetl.dsl.yaml_tree import MAX_DEPTH, MAX_NODES, YMap, YSeq, plain_scalar

__all__ = ["FALLBACK", "fast_tree"]

try:
    from yaml._yaml import CParser as _CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _CParser = None  # type: ignore[assignment, misc]

FALLBACK: Final = object()
"""What `fast_tree` returns when only the reference reader can be trusted with the text."""

# What libyaml (YAML 1.1) and ruamel.yaml (1.2) read differently, all rare in playbooks, so
# the reference reader takes those texts: tabs (ruamel refuses many that libyaml takes as
# blanks); NEL, LS and PS (line breaks in YAML 1.1 only); a byte order mark past the start;
# and two block scalar headers ruamel refuses: a `#` right after `|` / `>` (and their
# indicators), and a first line of only spaces followed by a more indented one.
_SUSPECT_TEXT = re.compile(
    "[\t\x85\u2028\u2029\ufeff]"
    r"|[|>][-+0-9]*(?:#|[ ]*(?:#[^\r\n]*)?(?:\r\n?|\n)[ ]+(?:\r\n?|\n))"
)

_NULL_TAG = "tag:yaml.org,2002:null"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_BOOLS: Final = {"true": True, "false": False}
_QUOTED: Final = ("'", '"')

_Resolvers = dict[str, tuple[tuple[str, "re.Pattern[str]"], ...]]


class _Unsupported(Exception):
    """The fast reader met something only the reference reader reproduces exactly."""


def _ruamel_scalar_rules() -> tuple[_Resolvers, Any]:
    """ruamel.yaml's implicit YAML 1.2 scalar rules (first character -> (tag, regexp)), and a
    round-trip constructor to build the rarer scalars (floats, odd ints, timestamps) with;
    no constructor if this ruamel.yaml is not the one we know.

    Taken from ruamel itself so both readers resolve `yes`, `0777`, `1e3`, ... alike."""
    try:
        loader = YAML(typ="rt")
        table = loader.resolver.versioned_resolver
        if None in table:  # a rule for every first character: not the table we know
            return {}, None
        rules = {
            str(first): tuple((str(tag), regexp) for tag, regexp in entries)
            for first, entries in table.items()
        }
        return rules, loader.constructor
    except Exception:  # pragma: no cover - an unknown ruamel.yaml: use the reference reader
        return {}, None


_SCALAR_RULES, _CONSTRUCTOR = _ruamel_scalar_rules()


def _plain_tag(value: str) -> str | None:
    """The tag ruamel.yaml resolves a plain scalar to; None for a string."""
    entries = _SCALAR_RULES.get(value[:1])  # "" holds the rule for the empty scalar (null)
    if entries is not None:
        for tag, regexp in entries:
            if regexp.match(value):
                return tag
    return None


def _plain_value(value: str) -> Any:
    """A plain (unquoted, untagged) scalar, resolved as ruamel.yaml's round-trip loader does
    and turned into a plain value as the reference reader does; `_Unsupported` for merge
    keys (`<<`), `=` and anything ruamel would fail on."""
    tag = _plain_tag(value)
    if tag is None:
        return value
    if tag == _NULL_TAG:
        return None
    if tag == _BOOL_TAG:
        result = _BOOLS.get(value.lower())
        if result is None:
            raise _Unsupported(value)
        return result
    if tag == _INT_TAG and value.isdecimal() and (value[0] != "0" or len(value) == 1):
        return int(value)
    if tag in (_INT_TAG, _FLOAT_TAG, _TIMESTAMP_TAG):
        method = getattr(_CONSTRUCTOR, "construct_yaml_" + tag.rsplit(":", 1)[1])
        try:
            built = method(ScalarNode(tag, value))
        except Exception as exc:  # whatever ruamel does with it, let it do it
            raise _Unsupported(value) from exc
        return plain_scalar(built)
    raise _Unsupported(value)


def fast_tree(text: str) -> Any:
    """The tree the reference reader would give, read from libyaml's events; `FALLBACK` when the
    text holds anything this reader does not reproduce exactly (every error included)."""
    if _CParser is None or _CONSTRUCTOR is None or _SUSPECT_TEXT.search(text):
        return FALLBACK
    parser = _CParser(text)
    try:
        return _build_tree(parser.get_event)
    except (_Unsupported, PyYAMLError, UnicodeError):
        return FALLBACK
    finally:
        parser.dispose()


def _build_tree(get_event: Callable[[], Any]) -> Any:  # noqa: C901, PLR0912, PLR0915
    """Build the tree from the event stream with an explicit stack (no recursion)."""
    documents: list[Any] = []
    stack: list[Any] = []
    parent: Any = None  # the innermost open YMap / YSeq
    in_map = False
    key: str | None = None  # in a mapping: the key whose value comes next
    key_line = 0
    nodes = 0
    while True:
        event = get_event()
        cls = type(event)
        if cls is ScalarEvent:
            if event.anchor is not None or event.tag is not None:
                raise _Unsupported("anchor or tag")
            node = event.value
            if in_map and key is None:
                if event.implicit[0]:
                    if _plain_tag(node) is not None:  # null, a number, a date, `<<`, ...
                        raise _Unsupported("non-string key")
                elif event.style not in _QUOTED:  # ruamel keeps `|` / `>` keys as str subclasses
                    raise _Unsupported("block scalar key")
                if node in parent:
                    raise _Unsupported("duplicate key")
                key = node
                key_line = event.start_mark.line + 1
                continue
            if event.implicit[0]:  # plain: resolve it; quoted and block scalars are strings
                node = _plain_value(node)
        elif cls is MappingStartEvent or cls is SequenceStartEvent:
            if event.anchor is not None or event.tag is not None:
                raise _Unsupported("anchor or tag")
            if in_map and key is None:
                raise _Unsupported("non-string key")
            start = event.start_mark
            if (
                cls is MappingStartEvent
                and event.flow_style
                and start.index == event.end_mark.index
            ):
                # `[a: b]`, a one-pair mapping with no `{`: ruamel refuses `["a":b]`
                raise _Unsupported("single pair in a flow sequence")
            line = start.line + 1
            node = YMap(line=line) if cls is MappingStartEvent else YSeq(line=line)
        elif cls is MappingEndEvent or cls is SequenceEndEvent:
            stack.pop()
            parent = stack[-1] if stack else None
            in_map = type(parent) is YMap
            continue
        elif cls is DocumentStartEvent:
            if event.version is not None or event.tags:
                raise _Unsupported("directive")
            continue
        elif cls is DocumentEndEvent or cls is StreamStartEvent:
            continue
        elif cls is StreamEndEvent:
            break
        else:  # an alias
            raise _Unsupported(cls.__name__)
        nodes += 1
        if nodes > MAX_NODES:
            raise _Unsupported("too many nodes")
        if parent is None:
            documents.append(node)
        elif in_map:
            parent.key_lines[key] = key_line
            parent[key] = node
            key = None
        else:
            parent.item_lines.append(event.start_mark.line + 1)
            parent.append(node)
        if cls is not ScalarEvent:
            stack.append(node)
            if len(stack) >= MAX_DEPTH:
                raise _Unsupported("too deep")
            parent = node
            in_map = cls is MappingStartEvent
    # A trailing `---` (or `...`) leaves an empty document behind: not a second playbook.
    while len(documents) > 1 and documents[-1] is None:
        documents.pop()
    if len(documents) != 1:
        raise _Unsupported("not one document")
    return documents[0]
