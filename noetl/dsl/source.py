"""Reading playbook files into plain Python data that remembers its line numbers.

The tree is made of `YMap` / `YSeq` (dict and list subclasses with line numbers) holding
plain scalars. Every later pass works on it, so any error can point at the line it came from.

Two readers build the same tree. The fast one walks libyaml's event stream (PyYAML's C
parser) and resolves plain scalars with ruamel.yaml's YAML 1.2 rules; it gives up on anything
it cannot reproduce exactly (errors, tags, anchors, aliases, merge keys, duplicate or
non-string keys, several documents, directives, the node and depth limits). The reference
one, used then, is ruamel.yaml's round-trip loader copied into the tree (`_ruamel_tree`): it
gives every diagnostic.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path as FsPath
from typing import Any, Final

from ruamel.yaml import YAML
from ruamel.yaml.comments import (
    CommentedMap,
    CommentedOrderedMap,
    CommentedSeq,
    CommentedSet,
    TaggedScalar,
)
from ruamel.yaml.composer import Composer
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.scalarbool import ScalarBoolean
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

from noetl.dsl.diagnostics import Diagnostic, Path
from noetl.dsl.locate import yaml_scalar, yaml_type

MAX_PLAYBOOK_BYTES = 4 * 1024 * 1024
MAX_NODES = 200_000
MAX_DEPTH = 64
_STR_TAG = "tag:yaml.org,2002:str"


class YMap(dict[str, Any]):
    """A mapping from the document, with the line of the map and of each key (1-based).

    `origins` is set on maps that normalization made or rewrote: for a key whose value came
    from elsewhere in the file, the path to it from the map's own place in the file (`()`:
    the map's own node; `noetl.dsl.locate.UP` climbs to its parent). Diagnostics name the
    key the file has through it (`noetl.dsl.locate.source_path`)."""

    origins: dict[str | int, Path] | None = None

    def __init__(self, *args: Any, line: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.line = line
        self.key_lines: dict[str, int] = {}

    def key_line(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class YSeq(list[Any]):
    """A sequence from the document, with the line of the list and of each item (1-based),
    and the `origins` of items that came from elsewhere (as YMap's)."""

    origins: dict[str | int, Path] | None = None

    def __init__(self, items: Iterable[Any] = (), *, line: int = 0) -> None:
        super().__init__(items)
        self.line = line
        self.item_lines: list[int] = []

    def item_line(self, index: int) -> int:
        if 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


@dataclass(frozen=True)
class Source:
    """A loaded document: its display name, text and positioned tree."""

    name: str
    text: str
    tree: Any

    @cached_property
    def lines(self) -> list[str]:
        """The text split into lines, computed once."""
        return self.text.splitlines()


class _TooDeep(Exception):
    def __init__(self, line: int | None) -> None:
        super().__init__(line)
        self.line = line


class _DepthLimitedComposer(Composer):
    """ruamel's composer recurses once per nesting level; stop it long before Python's
    recursion limit (a deeply nested document would otherwise take seconds to fail)."""

    _depth = 0

    def _enter(self) -> None:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = getattr(self.parser.peek_event(), "start_mark", None)
            raise _TooDeep(mark.line + 1 if mark is not None else None)

    def compose_sequence_node(self, anchor: Any) -> Any:
        self._enter()
        try:
            return super().compose_sequence_node(anchor)
        finally:
            self._depth -= 1

    def compose_mapping_node(self, anchor: Any) -> Any:
        self._enter()
        try:
            return super().compose_mapping_node(anchor)
        finally:
            self._depth -= 1


class SourceError(Exception):
    """The file could not be read as a playbook document."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.format())
        self.diagnostic = diagnostic


def _fail(name: str, code: str, message: str, line: int | None = None) -> SourceError:
    return SourceError(Diagnostic(code=code, message=message, file=name, line=line))


def read_source(path: str | FsPath) -> Source:
    """Read a playbook file; raise SourceError with one clear diagnostic if it cannot be."""
    name = str(path)
    fs_path = FsPath(path)
    try:
        size = fs_path.stat().st_size
    except FileNotFoundError:
        raise _fail(name, "E001", "file not found") from None
    except OSError as exc:
        raise _fail(name, "E001", f"cannot read file: {exc.strerror}") from None
    if fs_path.is_dir():
        raise _fail(name, "E001", "is a directory, not a playbook file")
    if size > MAX_PLAYBOOK_BYTES:
        raise _too_big(name, size)
    raw = fs_path.read_bytes()
    return parse_source(raw, name)


def parse_source(raw: bytes | str, name: str = "<playbook>") -> Source:
    """Parse playbook text (bytes or str) into a positioned tree."""
    text = _decode(raw, name) if isinstance(raw, bytes) else raw
    if len(text) > MAX_PLAYBOOK_BYTES:
        raise _too_big(name, len(text.encode("utf-8", "surrogatepass")))
    if not text.strip() or all(
        not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()
    ):
        raise _fail(name, "E004", "is empty; a playbook needs at least metadata and workflow")
    tree = _fast_tree(text)
    if tree is _FALLBACK:
        tree = _ruamel_tree(text, name)
    return Source(name=name, text=text, tree=tree)


def _ruamel_tree(text: str, name: str) -> Any:
    """The reference reader: ruamel.yaml's round-trip loader, copied into YMap / YSeq.

    Slow, but it is the one that explains every problem (E005-E012)."""
    documents = _load_documents(text, name)
    # A trailing `---` (or `...`) leaves an empty document behind: not a second playbook.
    while len(documents) > 1 and documents[-1] is None:
        documents.pop()
    if len(documents) > 1:
        raise _fail(name, "E006", "holds several YAML documents; put one playbook per file")
    counter = [0]
    return _convert(documents[0], name, counter, line=1)


def _too_big(name: str, size: int) -> SourceError:
    return _fail(
        name,
        "E002",
        f"file is {size / 1_000_000:.1f} MB; a playbook may be at most "
        f"{MAX_PLAYBOOK_BYTES // (1024 * 1024)} MB (move data into the workload or a file)",
    )


def _decode(raw: bytes, name: str) -> str:
    if len(raw) > MAX_PLAYBOOK_BYTES:
        raise _too_big(name, len(raw))
    if b"\x00" in raw:
        raise _fail(name, "E003", "is a binary file, not YAML text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 1].hex()
        line = raw.count(b"\n", 0, exc.start) + 1
        raise _fail(
            name, "E003", f"is not UTF-8 text (byte 0x{bad} on line {line})", line
        ) from None


def _load_documents(text: str, name: str) -> list[Any]:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.Composer = _DepthLimitedComposer
    try:
        return list(yaml.load_all(text))
    except MarkedYAMLError as exc:
        raise _yaml_error(name, exc) from None
    except ReaderError as exc:
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        raise _fail(
            name,
            "E005",
            f"is not valid YAML: character {_codepoint(exc.character)} is not allowed "
            f"({exc.reason})",
            line,
        ) from None
    except _TooDeep as exc:
        raise _too_deep(name, exc.line) from None
    except RecursionError:  # pragma: no cover - the composer stops first
        raise _too_deep(name, None) from None
    except YAMLError as exc:  # pragma: no cover - ruamel marks nearly everything
        raise _fail(name, "E005", f"is not valid YAML: {exc}") from None


def _codepoint(character: Any) -> str:
    code = character if isinstance(character, int) else ord(str(character)[:1] or "\0")
    return f"U+{code:04X}"


def _too_deep(name: str, line: int | None) -> SourceError:
    return _fail(name, "E012", f"nests more than {MAX_DEPTH} levels deep", line)


def _yaml_error(name: str, exc: MarkedYAMLError) -> SourceError:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    problem = exc.problem or "syntax error"
    if "duplicate key" in problem:
        key = problem.split('"')[1] if '"' in problem else "?"
        first = exc.context_mark.line + 1 if exc.context_mark is not None else None
        where = f" (the mapping starts on line {first})" if first else ""
        return _fail(name, "E007", f"duplicate key '{key}'{where}", line)
    problem = problem[0].upper() + problem[1:] if problem else problem
    if exc.context:
        started = exc.context_mark.line + 1 if exc.context_mark is not None else None
        on_line = f" started on line {started}" if started and started != line else ""
        problem = f"{problem} ({exc.context}{on_line})"
    return _fail(name, "E005", f"is not valid YAML: {problem}", line)


def _convert(node: Any, name: str, counter: list[int], line: int, depth: int = 0) -> Any:
    counter[0] += 1
    if counter[0] > MAX_NODES:
        raise _fail(name, "E008", f"has more than {MAX_NODES} YAML nodes (alias expansion?)", line)
    if depth > MAX_DEPTH:
        raise _too_deep(name, line)
    tag = _explicit_tag(node)
    if tag is not None:
        raise _fail(name, "E010", f"YAML tag {tag!r} is not supported", line)
    if isinstance(node, CommentedMap):
        out = YMap(line=node.lc.line + 1)
        for key, value in node.items():
            if not isinstance(key, str):
                raise _fail(
                    name,
                    "E009",
                    f"map keys must be strings, got {_key_kind(key)}",
                    _key_line(node, key, out.line),
                )
            key_line = _key_line(node, key, out.line)
            out.key_lines[key] = key_line
            out[key] = _convert(value, name, counter, key_line, depth + 1)
        return out
    if isinstance(node, CommentedSeq):
        seq = YSeq(line=node.lc.line + 1)
        for index, value in enumerate(node):
            try:
                item_line = node.lc.item(index)[0] + 1
            except (KeyError, TypeError, IndexError):
                item_line = seq.line
            seq.item_lines.append(item_line)
            seq.append(_convert(value, name, counter, item_line, depth + 1))
        return seq
    if isinstance(node, TaggedScalar):  # only `!!str`, see _explicit_tag
        return str(node.value)
    return _plain_scalar(node)


def _explicit_tag(node: Any) -> str | None:
    """The tag of a node written with one we do not accept (anything but `!!str`)."""
    if isinstance(node, CommentedSet):
        return "!!set"
    if isinstance(node, CommentedOrderedMap):
        return "!!omap"
    if isinstance(node, bytes):
        return "!!binary"
    if isinstance(node, TaggedScalar):
        value = node.tag.value
        return None if value == _STR_TAG else str(value)
    if isinstance(node, CommentedMap | CommentedSeq):
        value = getattr(getattr(node, "tag", None), "value", None)
        return str(value) if value else None
    return None


def _key_kind(key: Any) -> str:
    kind = yaml_type(key)
    if key is None or isinstance(key, dict | list | tuple):
        return kind
    return f"{kind} {yaml_scalar(key)}"


def _key_line(node: CommentedMap, key: Any, default: int) -> int:
    try:
        return int(node.lc.key(key)[0]) + 1
    except (KeyError, TypeError):
        return default


def _plain_scalar(value: Any) -> Any:
    """Turn ruamel's scalar subclasses into plain Python values."""
    if value is None:
        return None
    if isinstance(value, ScalarBoolean):
        return bool(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    return value


# ---------------------------------------------------------------------------------------
# The fast reader: libyaml events -> YMap / YSeq, scalars resolved as ruamel.yaml does.
# ---------------------------------------------------------------------------------------

try:
    from yaml._yaml import CParser as _CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _CParser = None  # type: ignore[assignment, misc]

_FALLBACK: Final = object()
"""What `_fast_tree` returns when only the reference reader can be trusted with the text."""

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
    and turned into a plain value as `_convert` does; `_Unsupported` for merge keys (`<<`),
    `=` and anything ruamel would fail on."""
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
        return _plain_scalar(built)
    raise _Unsupported(value)


def _fast_tree(text: str) -> Any:
    """The tree `_ruamel_tree` would give, read from libyaml's events; `_FALLBACK` when the
    text holds anything this reader does not reproduce exactly (every error included)."""
    if _CParser is None or _CONSTRUCTOR is None or _SUSPECT_TEXT.search(text):
        return _FALLBACK
    parser = _CParser(text)
    try:
        return _build_tree(parser.get_event)
    except (_Unsupported, PyYAMLError, UnicodeError):
        return _FALLBACK
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


def line_at(tree: Any, path: Path) -> int | None:
    """The line of the deepest node on `path` that the tree knows a position for.

    Path parts that do not match the tree (pydantic union tags, for instance) are skipped.
    """
    node = tree
    line: int | None = getattr(tree, "line", None) or None
    for part in path:
        # Nodes made during normalization may not know their line (0): keep the last known.
        if isinstance(node, YMap) and isinstance(part, str) and part in node:
            line = node.key_line(part) or line
            node = node[part]
        elif isinstance(node, YSeq) and isinstance(part, int) and 0 <= part < len(node):
            line = node.item_line(part) or line
            node = node[part]
    return line


def to_plain(value: Any) -> Any:
    """Deep copy of a positioned tree into plain dicts and lists."""
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    return value
