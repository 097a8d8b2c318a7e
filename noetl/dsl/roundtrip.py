"""Editing ruamel.yaml's round-trip tree without losing the document's layout.

What the codemod (`noetl.dsl.codemod`) needs to move keys around and keep the file looking
as its author wrote it: the indentation the document uses (`guess_indent`), where a key
sits (`key_line`, `key_column`, `key_position`, `own_key`), and moving an entry with its
comments (`move_entry`, `Shift`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.tokens import CommentToken

# --- indentation -------------------------------------------------------------------------


@dataclass(frozen=True)
class Indent:
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
    return isinstance(node, CommentedMap | CommentedSeq) and bool(node) and not is_flow(node)


def is_flow(node: Any) -> bool:
    return bool(node.fa.flow_style())


def guess_indent(root: Any) -> Indent:
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
    default = Indent()
    mapping = maps.most_common(1)[0][0] if maps else default.mapping
    sequence, offset = seqs.most_common(1)[0][0] if seqs else (default.sequence, default.offset)
    if mapping < 1:
        mapping = default.mapping
    if offset < 0 or sequence < offset + 2:
        sequence, offset = default.sequence, default.offset
    return Indent(mapping=mapping, sequence=sequence, offset=offset)


# --- comments ----------------------------------------------------------------------------
# ruamel writes a comment at the column it was read at, and the comment lines that follow a
# value are stored inside that value's comment token with their own leading spaces. When a
# block moves sideways, both are moved with it; comment lines at or left of the column of
# the key that held the block belong to what follows it, and stay.


def comment_tokens(value: Any) -> Iterator[CommentToken]:
    if isinstance(value, CommentToken):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from comment_tokens(item)


def _shift_lines(text: str, delta: int, threshold: int) -> str:
    lines = text.split("\n")
    for index in range(1, len(lines)):
        body = lines[index].lstrip(" ")
        indent = len(lines[index]) - len(body)
        if body.startswith("#") and indent >= threshold:
            lines[index] = " " * max(0, indent + delta) + body
    return "\n".join(lines)


@dataclass(frozen=True)
class Shift:
    """A sideways move: the block by `block` columns, comments deeper than `threshold`
    with it; `key` is how far the end-of-line comment of the moved key goes."""

    block: int
    threshold: int
    key: int = 0

    def comment(self, value: Any, seen: set[int], *, key_comment: bool = False) -> None:
        for token in comment_tokens(value):
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


def nudge(comment: Any, columns: int) -> None:
    """Move the end-of-line comment of a key that moved `columns` sideways."""
    Shift(0, 0, columns).comment(comment, set(), key_comment=True)


def move_entry(
    src: CommentedMap, key: str, dst: CommentedMap, new_key: str, *, pos: int, block: int = 0
) -> None:
    """Move `key` of `src` to `new_key` at position `pos` of `dst`, with its comments;
    the key moves `block` columns sideways."""
    shift = Shift(block, key_column(src, key) + 1, block + len(new_key) - len(key))
    value = src[key]
    comment = src.ca.items.pop(key, None)
    del src[key]
    dst.insert(pos, new_key, value)
    if comment is not None:
        dst.ca.items[new_key] = comment
    shift.apply(comment, value)


def detach_key_comment(value: Any, key_comment: Any) -> None:
    """ruamel also files the comment on a `key:` line under the block below it; drop that
    copy when the block moves under another key, so the comment is not written twice."""
    shared = {id(t) for t in comment_tokens(key_comment)}
    own = value.ca.comment
    if own and isinstance(own, list) and id(own[0]) in shared:
        own[0] = None


def own_key(node: CommentedMap, key: str) -> bool:
    """`key` is written in this map itself, not brought in by a `<<` merge."""
    return any(k == key for k, _ in node.non_merged_items())


def key_position(node: CommentedMap, key: str) -> int:
    return list(node.keys()).index(key)


def key_column(node: Any, key: Any) -> int:
    try:
        return int(node.lc.key(key)[1])
    except (KeyError, TypeError, AttributeError):
        return int(getattr(getattr(node, "lc", None), "col", 0) or 0)


def key_line(node: Any, key: Any) -> int:
    try:
        return int(node.lc.key(key)[0]) + 1
    except (KeyError, TypeError, AttributeError):
        return int(getattr(getattr(node, "lc", None), "line", 0) or 0) + 1
