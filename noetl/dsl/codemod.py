"""Rewrite legacy playbook forms into canonical DSL v2, keeping comments and layout.

The rewrite works on ruamel.yaml's round-trip tree, so comments, key order, quoting and
block scalars survive; only the rewritten keys move. In workflow steps:

* `iter` / `iterator` / `over` / `coll` -> `loop` (a string or list becomes
  `{collection: ...}`);
* inside `loop`: `in` -> `collection`, `iterator` -> `element`,
  `spec: {mode, max_in_flight}` -> `mode`, `max_concurrency`;
* `save: <sink or list of sinks>` -> `result: {sink: [...]}`;
* `tool.result` -> the step's own `result` (also in workbook tasks).

`tool: iterator` has no mechanical translation: it is left alone and reported. Conflicts
(a step with both `loop` and `iter`, say) are reported and left for a person. A document with
nothing to rewrite comes back byte for byte, so running the codemod twice changes nothing.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.tokens import CommentToken

from noetl.dsl.normalize import LEGACY_LOOP_KEYS
from noetl.dsl.source import Source, SourceError, parse_source, read_source
from noetl.errors import PlaybookError

__all__ = ["CodemodResult", "rewrite_file", "rewrite_text"]

LOOP_ALIASES = (("in", "collection"), ("iterator", "element"))
LOOP_SPEC_KEYS = {
    "mode": "mode",
    "max_in_flight": "max_concurrency",
    "max_concurrency": "max_concurrency",
}
WIDTH = 4096  # never fold long plain scalars the author kept on one line


@dataclass(frozen=True)
class CodemodResult:
    """The rewritten text, whether it differs from the input, and one note per rewrite
    or per thing left for a person."""

    text: str
    changed: bool
    notes: list[str] = field(default_factory=list)


def rewrite_file(path: Path) -> CodemodResult:
    """Rewrite one playbook file (the file itself is not touched)."""
    try:
        source = read_source(path)
    except SourceError as exc:
        raise PlaybookError([exc.diagnostic]) from None
    return _rewrite(source)


def rewrite_text(text: str | bytes, name: str = "<playbook>") -> CodemodResult:
    """Rewrite playbook text; raise PlaybookError when it cannot be parsed."""
    try:
        source = parse_source(text, name)
    except SourceError as exc:
        raise PlaybookError([exc.diagnostic]) from None
    return _rewrite(source)


def _rewrite(source: Source) -> CodemodResult:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = WIDTH
    yaml.brace_single_entry_mapping_in_flow_sequence = True  # `[{file: ...}]` stays braced
    root = yaml.load(source.text)
    indent = _guess_indent(root)
    rewriter = _Rewriter(indent)
    rewriter.document(root)
    if not rewriter.changed:
        return CodemodResult(text=source.text, changed=False, notes=rewriter.notes)
    yaml.indent(mapping=indent.mapping, sequence=indent.sequence, offset=indent.offset)
    yaml.explicit_start = _first_content_line(source.text).startswith("---")
    yaml.explicit_end = _first_content_line(source.text, reverse=True).startswith("...")
    out = io.StringIO()
    yaml.dump(root, out)
    text = out.getvalue()
    if "\r\n" in source.text:  # ruamel writes "\n"; keep a Windows file's line ends
        text = text.replace("\n", "\r\n")
    return CodemodResult(text=text, changed=text != source.text, notes=rewriter.notes)


def _first_content_line(text: str, *, reverse: bool = False) -> str:
    lines = text.splitlines()
    for line in reversed(lines) if reverse else lines:
        if line.strip() and not line.lstrip().startswith("#"):
            return line
    return ""


# --- indentation -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Indent:
    """ruamel's indent settings: `sequence` is where an item's content starts and `offset`
    where its dash sits, both counted from the parent key's column."""

    mapping: int = 2
    sequence: int = 4
    offset: int = 2


def _walk(node: Any) -> Iterator[Any]:
    """The node and everything under it, leaving out what a `<<` merge brings in."""
    yield node
    if isinstance(node, CommentedMap):
        for _, child in node.non_merged_items():
            yield from _walk(child)
    elif isinstance(node, CommentedSeq):
        for child in node:
            yield from _walk(child)


def _is_block(node: Any) -> bool:
    return isinstance(node, CommentedMap | CommentedSeq) and bool(node) and not _is_flow(node)


def _is_flow(node: Any) -> bool:
    return bool(node.fa.flow_style())


def _guess_indent(root: Any) -> _Indent:
    """The indentation most used by the document (defaults when it shows none)."""
    maps: Counter[int] = Counter()
    seqs: Counter[tuple[int, int]] = Counter()
    for node in _walk(root):
        if not _is_block(node) or not isinstance(node, CommentedMap):
            continue
        for key, value in node.non_merged_items():
            if not _is_block(value):
                continue
            try:
                key_col = node.lc.key(key)[1]
                if isinstance(value, CommentedMap):
                    maps[value.lc.col - key_col] += 1
                else:
                    seqs[(value.lc.item(0)[1] - key_col, value.lc.col - key_col)] += 1
            except (KeyError, TypeError, IndexError, AttributeError):
                continue
    default = _Indent()
    mapping = maps.most_common(1)[0][0] if maps else default.mapping
    sequence, offset = seqs.most_common(1)[0][0] if seqs else (default.sequence, default.offset)
    if mapping < 1:
        mapping = default.mapping
    if offset < 0 or sequence < offset + 2:
        sequence, offset = default.sequence, default.offset
    return _Indent(mapping=mapping, sequence=sequence, offset=offset)


# --- comments ----------------------------------------------------------------------------
# ruamel writes a comment at the column it was read at, and the comment lines that follow a
# value are stored inside that value's comment token with their own leading spaces. When a
# block moves sideways, both are moved with it; comment lines at or left of the column of
# the key that held the block belong to what follows it, and stay.


def _tokens(value: Any) -> Iterator[CommentToken]:
    if isinstance(value, CommentToken):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tokens(item)


def _shift_lines(text: str, delta: int, threshold: int) -> str:
    lines = text.split("\n")
    for index in range(1, len(lines)):
        body = lines[index].lstrip(" ")
        indent = len(lines[index]) - len(body)
        if body.startswith("#") and indent >= threshold:
            lines[index] = " " * max(0, indent + delta) + body
    return "\n".join(lines)


@dataclass(frozen=True)
class _Shift:
    """A sideways move: the block by `block` columns, comments deeper than `threshold`
    with it; `key` is how far the end-of-line comment of the moved key goes."""

    block: int
    threshold: int
    key: int = 0

    def comment(self, value: Any, seen: set[int], *, key_comment: bool = False) -> None:
        for token in _tokens(value):
            if id(token) in seen:
                continue
            seen.add(id(token))
            if token.start_mark is not None:
                if key_comment:
                    token.column = max(0, token.column + self.key)
                elif token.column >= self.threshold:
                    token.column = max(0, token.column + self.block)
            if self.block and "\n" in token.value:
                token.value = _shift_lines(token.value, self.block, self.threshold)

    def subtree(self, node: Any, seen: set[int]) -> None:
        if not self.block:
            return
        for item in _walk(node):
            if isinstance(item, CommentedMap | CommentedSeq):
                self.comment(item.ca.comment, seen)
                self.comment(list(item.ca.items.values()), seen)
                self.comment(item.ca.end, seen)

    def apply(self, key_comment: Any, value: Any) -> None:
        seen: set[int] = set()
        self.comment(key_comment, seen, key_comment=True)
        self.subtree(value, seen)


def _nudge(comment: Any, columns: int) -> None:
    """Move the end-of-line comment of a key that moved `columns` sideways."""
    _Shift(0, 0, columns).comment(comment, set(), key_comment=True)


def _move_entry(
    src: CommentedMap, key: str, dst: CommentedMap, new_key: str, *, pos: int, block: int = 0
) -> None:
    """Move `key` of `src` to `new_key` at position `pos` of `dst`, with its comments;
    the key moves `block` columns sideways."""
    shift = _Shift(block, _col(src, key) + 1, block + len(new_key) - len(key))
    value = src[key]
    comment = src.ca.items.pop(key, None)
    del src[key]
    dst.insert(pos, new_key, value)
    if comment is not None:
        dst.ca.items[new_key] = comment
    shift.apply(comment, value)


def _detach_key_comment(value: Any, key_comment: Any) -> None:
    """ruamel also files the comment on a `key:` line under the block below it; drop that
    copy when the block moves under another key, so the comment is not written twice."""
    shared = {id(t) for t in _tokens(key_comment)}
    own = value.ca.comment
    if own and isinstance(own, list) and id(own[0]) in shared:
        own[0] = None


def _own(node: CommentedMap, key: str) -> bool:
    """`key` is written in this map itself, not brought in by a `<<` merge."""
    return any(k == key for k, _ in node.non_merged_items())


def _position(node: CommentedMap, key: str) -> int:
    return list(node.keys()).index(key)


def _col(node: Any, key: Any) -> int:
    try:
        return int(node.lc.key(key)[1])
    except (KeyError, TypeError, AttributeError):
        return int(getattr(getattr(node, "lc", None), "col", 0) or 0)


def _line(node: Any, key: Any) -> int:
    try:
        return int(node.lc.key(key)[0]) + 1
    except (KeyError, TypeError, AttributeError):
        return int(getattr(getattr(node, "lc", None), "line", 0) or 0) + 1


# --- the rewrites ------------------------------------------------------------------------


class _Rewriter:
    """Applies every rewrite to the tree in place, noting each one."""

    def __init__(self, indent: _Indent) -> None:
        self.indent = indent
        self._notes: list[tuple[int, str]] = []
        self.changed = False

    def _note(self, line: int, label: str, text: str, *, change: bool) -> None:
        self._notes.append((line, f"line {line}: {label}: {text}"))
        self.changed = self.changed or change

    @property
    def notes(self) -> list[str]:
        return [text for _, text in sorted(self._notes, key=lambda note: note[0])]

    def document(self, root: Any) -> None:
        if not isinstance(root, CommentedMap):
            return
        for section, key in (("workflow", "step"), ("workbook", "name")):
            items = root.get(section)
            if not isinstance(items, CommentedSeq):
                continue
            for index, item in enumerate(items):
                if isinstance(item, CommentedMap):
                    label = _label(item, key, section, index)
                    self.step(item, label, legacy=section == "workflow")

    def step(self, step: CommentedMap, label: str, *, legacy: bool) -> None:
        self._iterator_tool(step, label)
        for key in (*LEGACY_LOOP_KEYS, "save") if legacy else ():
            if key in step and not _own(step, key):
                self._note(
                    _line(step, "<<"),
                    label,
                    f"legacy '{key}' comes from a '<<' merge; rewrite it where it is defined",
                    change=False,
                )
            elif key in step and key != "save":
                self._legacy_loop(step, key, label)
        if isinstance(step.get("loop"), CommentedMap):
            self._loop_aliases(step["loop"], label)
        self._tool_result(step, label)
        if legacy and _own(step, "save"):
            self._save(step, label)

    def _iterator_tool(self, step: CommentedMap, label: str) -> None:
        tool = step.get("tool")
        kind = tool.get("kind") if isinstance(tool, CommentedMap) else tool
        if kind == "iterator":
            self._note(
                _line(step, "tool"),
                label,
                "'tool: iterator' cannot be rewritten automatically; rewrite it by hand as "
                "a 'loop:' block on the step (loop: {collection: ..., element: ...})",
                change=False,
            )

    def _legacy_loop(self, step: CommentedMap, key: str, label: str) -> None:
        line = _line(step, key)
        if "loop" in step:
            self._note(
                line, label, f"has both 'loop' and legacy '{key}'; keep one by hand", change=False
            )
            return
        value = step[key]
        if isinstance(value, str | list):
            self._wrap_collection(step, key, value)
        else:
            _move_entry(step, key, step, "loop", pos=_position(step, key))
        self._note(line, label, f"'{key}' -> 'loop'", change=True)

    def _wrap_collection(self, step: CommentedMap, key: str, value: Any) -> None:
        """`iter: <collection>` -> `loop: {collection: <collection>}`.

        The key's comment follows the value (it may carry the comment lines below it too).
        """
        deeper = self.indent.mapping
        shift = _Shift(deeper, _col(step, key) + 1, deeper + len("collection") - len(key))
        pos = _position(step, key)
        comment = step.ca.items.pop(key, None)
        loop = CommentedMap()
        loop["collection"] = value
        del step[key]
        step.insert(pos, "loop", loop)
        if comment is not None:
            loop.ca.items["collection"] = comment
        shift.apply(comment, value)

    def _loop_aliases(self, loop: CommentedMap, label: str) -> None:
        for alias, canonical in LOOP_ALIASES:
            if not _own(loop, alias):
                continue
            line = _line(loop, alias)
            if canonical in loop:
                self._note(
                    line,
                    label,
                    f"loop has both '{alias}' and '{canonical}'; keep one by hand",
                    change=False,
                )
                continue
            _move_entry(loop, alias, loop, canonical, pos=_position(loop, alias))
            self._note(line, label, f"loop '{alias}' -> '{canonical}'", change=True)
        if _own(loop, "spec"):
            self._loop_spec(loop, label)

    def _loop_spec(self, loop: CommentedMap, label: str) -> None:
        spec = loop["spec"]
        line = _line(loop, "spec")
        problem = _spec_problem(loop, spec)
        if problem:
            self._note(line, label, f"loop 'spec' left as is: {problem}", change=False)
            return
        pos = _position(loop, "spec")
        key_comment = loop.ca.items.pop("spec", None)
        moves = [(key, LOOP_SPEC_KEYS[key], _line(spec, key)) for key in spec]
        del loop["spec"]
        for offset, (key, target, key_line) in enumerate(moves):
            _move_entry(spec, key, loop, target, pos=pos + offset, block=-self.indent.mapping)
            self._note(key_line, label, f"loop 'spec.{key}' -> '{target}'", change=True)
        if not moves:
            self._note(line, label, "empty loop 'spec' removed", change=True)
        if key_comment is not None:
            first = moves[0][1] if moves else None
            self._keep_comment(loop, first, key_comment, line=line, label=label)

    def _tool_result(self, step: CommentedMap, label: str) -> None:
        tool = step.get("tool")
        if not _own(step, "tool") or not isinstance(tool, CommentedMap) or not _own(tool, "result"):
            return
        line = _line(tool, "result")
        if "result" in step:
            self._note(
                line,
                label,
                "'result' is given both on the step and inside 'tool'; merge them by hand",
                change=False,
            )
            return
        pos = _position(step, "tool") + 1
        _move_entry(tool, "result", step, "result", pos=pos, block=-self.indent.mapping)
        self._note(line, label, "'tool.result' -> 'result'", change=True)

    def _save(self, step: CommentedMap, label: str) -> None:
        line = _line(step, "save")
        saved = step["save"]
        result = step.get("result")
        problem = _save_problem(saved, result)
        if "result" in step and not _own(step, "result"):
            problem = "the step's 'result' comes from a '<<' merge"
        if problem:
            self._note(line, label, f"'save' left as is: {problem}", change=False)
            return
        # the comment on the `save:` line goes with the key, not with the block below it
        _detach_key_comment(saved, step.ca.items.get("save"))
        as_item = isinstance(saved, CommentedMap)
        block = self.indent.sequence if as_item else self.indent.mapping
        _Shift(block, _col(step, "save") + 1).subtree(saved, set())
        saved_list = CommentedSeq([saved]) if as_item else saved
        if result is None:
            if "result" in step:  # `result: null` gives way to the new block
                null_comment = step.ca.items.pop("result", None)
                self._keep_comment(step, "save", null_comment, line=line, label=label, delta=-2)
                del step["result"]
            new_result = CommentedMap()
            new_result["sink"] = saved_list
            _move_entry(step, "save", step, "result", pos=_position(step, "save"))
            step["result"] = new_result
        else:
            comment = step.ca.items.pop("save", None)
            del step["save"]
            sinks = _append_sinks(result, saved_list, self.indent)
            deep = self.indent.mapping + self.indent.sequence
            if not (
                isinstance(saved, CommentedMap) and _comment_on_item(sinks, saved, comment, deep)
            ):
                self._keep_comment(
                    result, "sink", comment, line=line, label=label, delta=self.indent.mapping
                )
        self._note(line, label, "'save' -> 'result.sink'", change=True)

    def _keep_comment(
        self,
        node: CommentedMap,
        key: str | None,
        comment: Any,
        *,
        line: int,
        label: str,
        delta: int = 0,
    ) -> None:
        """Give the comment of a key that went away to `key` (`delta` columns further right):
        on its line when that line has no comment, else on a line of its own above it."""
        tokens = [t for t in _tokens(comment) if t.value.strip()]
        if not tokens:
            return
        entry = node.ca.items.get(key) if key is not None else None
        if key is not None and entry is None:
            node.ca.items[key] = comment
            _nudge(comment, delta)
            return
        if isinstance(entry, list) and len(entry) > 2 and entry[2] is None and len(comment) > 2:
            entry[2] = comment[2]
            _nudge(comment[2], delta)
            return
        text = "\n".join(
            part.strip().lstrip("#").strip()
            for token in tokens
            for part in token.value.splitlines()
            if part.strip()
        )
        col = getattr(node.lc, "col", None)
        if key is None or not isinstance(col, int):
            self._note(line, label, f"comment dropped, re-add it by hand: # {text}", change=False)
            return
        node.yaml_set_comment_before_after_key(key, before=text, indent=col)


def _label(item: CommentedMap, key: str, section: str, index: int) -> str:
    name = item.get(key)
    what = "step" if section == "workflow" else "workbook task"
    return f"{what} '{name}'" if isinstance(name, str) else f"{section}[{index}]"


def _spec_problem(loop: CommentedMap, spec: Any) -> str | None:
    if not isinstance(spec, CommentedMap):
        return "it is not a map"
    unknown = [k for k in spec if k not in LOOP_SPEC_KEYS]
    if unknown:
        return f"unknown key '{unknown[0]}'"
    targets = [LOOP_SPEC_KEYS[k] for k in spec]
    for target in targets:
        if target in loop or targets.count(target) > 1:
            return f"'{target}' would be given twice"
    return None


def _save_problem(saved: Any, result: Any) -> str | None:
    if not isinstance(saved, CommentedMap | CommentedSeq):
        return "it must be a sink map or a list of sinks"
    if result is not None and not isinstance(result, CommentedMap):
        return "the step's 'result' is not a map"
    sinks = result.get("sink") if isinstance(result, CommentedMap) else None
    if sinks is not None and not isinstance(sinks, CommentedMap | CommentedSeq):
        return "'result.sink' is not a sink map or a list of sinks"
    return None


def _append_sinks(result: CommentedMap, sinks: CommentedSeq, indent: _Indent) -> CommentedSeq:
    existing: CommentedSeq | CommentedMap | None = result.get("sink")
    if existing is None:
        result["sink"] = sinks
        return sinks
    if isinstance(existing, CommentedMap):  # one sink becomes a list of one
        _detach_key_comment(existing, result.ca.items.get("sink"))
        _Shift(indent.sequence - indent.mapping, _col(result, "sink") + 1).subtree(existing, set())
        existing = CommentedSeq([existing])
        result["sink"] = existing
    existing.extend(sinks)
    return existing


def _comment_on_item(seq: CommentedSeq, item: CommentedMap, comment: Any, deep: int) -> bool:
    """Put the comment of a `save: <sink>` line on the line where that sink now starts,
    `deep` columns right of where `save` was."""
    token = comment[2] if isinstance(comment, list) and len(comment) > 2 else None
    if token is None or _is_flow(seq):
        return False
    if _is_flow(item) or not item:
        index = next(i for i, value in enumerate(seq) if value is item)
        if seq.ca.items.get(index) is not None:
            return False
        seq.ca.items[index] = [token, None, None, None]
        _nudge(token, deep - len("save: "))
        return True
    first = next(iter(item))
    entry = item.ca.items.get(first)
    if entry is None:
        item.ca.items[first] = [None, None, token, None]
    elif entry[2] is None:
        entry[2] = token
    else:
        return False
    _nudge(token, deep + len(str(first)) - len("save"))
    return True
