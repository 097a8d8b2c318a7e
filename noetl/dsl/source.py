"""Reading playbook files into plain Python data that remembers its line numbers.

The result is a `Source`: the text and its positioned tree (`noetl.dsl.yaml_tree`). Two
readers build the same tree. The fast one (`noetl.dsl.fast_reader`) walks libyaml's event
stream and gives up on anything it cannot reproduce exactly. The reference one, used then,
is ruamel.yaml's round-trip loader copied into the tree (`_ruamel_tree`): it gives every
diagnostic.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path as FsPath
from typing import Any

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
from ruamel.yaml.reader import ReaderError

from noetl.dsl.diagnostics import Diagnostic
from noetl.dsl.fast_reader import FALLBACK as _FALLBACK
from noetl.dsl.fast_reader import fast_tree as _fast_tree
from noetl.dsl.locate import yaml_scalar, yaml_type
from noetl.dsl.yaml_errors import locate_mistake, unclosed_at_end
from noetl.dsl.yaml_tree import (
    MAX_DEPTH,
    MAX_NODES,
    YMap,
    YSeq,
    line_at,
    plain_scalar,
    to_plain,
)

# The tree's names are re-exported: tests and callers outside the DSL read them from here.
__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_PLAYBOOK_BYTES",
    "Source",
    "SourceError",
    "YMap",
    "YSeq",
    "line_at",
    "parse_source",
    "read_source",
    "to_plain",
]

MAX_PLAYBOOK_BYTES = 4 * 1024 * 1024
_STR_TAG = "tag:yaml.org,2002:str"


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
        raise _fail(name, "E001", "file not found" + _did_you_mean(fs_path)) from None
    except OSError as exc:
        raise _fail(name, "E001", f"cannot read file: {exc.strerror}") from None
    if fs_path.is_dir():
        raise _fail(name, "E001", "is a directory, not a playbook file")
    if size > MAX_PLAYBOOK_BYTES:
        raise _too_big(name, size)
    raw = fs_path.read_bytes()
    return parse_source(raw, name)


def _did_you_mean(path: FsPath) -> str:
    """A file the missing `path` may mean: the same name with a YAML extension, or a
    close name in its directory ("" when there is none)."""
    folder = path.parent
    try:
        names = [p.name for p in folder.iterdir() if p.suffix in (".yaml", ".yml")]
    except OSError:
        return ""
    for suffix in (".yaml", ".yml"):
        if path.with_suffix(suffix).name in names:
            return f"; did you mean {path.with_suffix(suffix)}?"
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.75)
    return f"; did you mean {folder / close[0]}?" if close else ""


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
        raise _yaml_error(name, exc, text) from None
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


def _yaml_error(name: str, exc: MarkedYAMLError, text: str) -> SourceError:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    problem = exc.problem or "syntax error"
    started = exc.context_mark.line + 1 if exc.context_mark is not None else None
    lines = text.splitlines()
    mistake = locate_mistake(problem, line, exc.context or "", started, lines)
    mistake = mistake or unclosed_at_end(problem, lines)
    if mistake is not None:  # the parser noticed it on a later line than the one to fix
        return _fail(name, "E005", mistake.message, mistake.line)
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
    if problem.startswith("Expected <block end>"):
        problem = f"this line is not indented like the lines of its block: {problem}"
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
    return plain_scalar(node)


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
