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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from noetl.dsl.normalize import LEGACY_LOOP_KEYS
from noetl.dsl.roundtrip import (
    Indent,
    Shift,
    comment_tokens,
    detach_key_comment,
    guess_indent,
    is_flow,
    key_column,
    key_line,
    key_position,
    move_entry,
    nudge,
    own_key,
)
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
    indent = guess_indent(root)
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


# --- the rewrites ------------------------------------------------------------------------


class _Rewriter:
    """Applies every rewrite to the tree in place, noting each one."""

    def __init__(self, indent: Indent) -> None:
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
            if key in step and not own_key(step, key):
                self._note(
                    key_line(step, "<<"),
                    label,
                    f"legacy '{key}' comes from a '<<' merge; rewrite it where it is defined",
                    change=False,
                )
            elif key in step and key != "save":
                self._legacy_loop(step, key, label)
        if isinstance(step.get("loop"), CommentedMap):
            self._loop_aliases(step["loop"], label)
        self._tool_result(step, label)
        if legacy and own_key(step, "save"):
            self._save(step, label)

    def _iterator_tool(self, step: CommentedMap, label: str) -> None:
        tool = step.get("tool")
        kind = tool.get("kind") if isinstance(tool, CommentedMap) else tool
        if kind == "iterator":
            self._note(
                key_line(step, "tool"),
                label,
                "'tool: iterator' cannot be rewritten automatically; rewrite it by hand as "
                "a 'loop:' block on the step (loop: {collection: ..., element: ...})",
                change=False,
            )

    def _legacy_loop(self, step: CommentedMap, key: str, label: str) -> None:
        line = key_line(step, key)
        if "loop" in step:
            self._note(
                line, label, f"has both 'loop' and legacy '{key}'; keep one by hand", change=False
            )
            return
        value = step[key]
        if isinstance(value, str | list):
            self._wrap_collection(step, key, value)
        else:
            move_entry(step, key, step, "loop", pos=key_position(step, key))
        self._note(line, label, f"'{key}' -> 'loop'", change=True)

    def _wrap_collection(self, step: CommentedMap, key: str, value: Any) -> None:
        """`iter: <collection>` -> `loop: {collection: <collection>}`.

        The key's comment follows the value (it may carry the comment lines below it too).
        """
        deeper = self.indent.mapping
        shift = Shift(deeper, key_column(step, key) + 1, deeper + len("collection") - len(key))
        pos = key_position(step, key)
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
            if not own_key(loop, alias):
                continue
            line = key_line(loop, alias)
            if canonical in loop:
                self._note(
                    line,
                    label,
                    f"loop has both '{alias}' and '{canonical}'; keep one by hand",
                    change=False,
                )
                continue
            move_entry(loop, alias, loop, canonical, pos=key_position(loop, alias))
            self._note(line, label, f"loop '{alias}' -> '{canonical}'", change=True)
        if own_key(loop, "spec"):
            self._loop_spec(loop, label)

    def _loop_spec(self, loop: CommentedMap, label: str) -> None:
        spec = loop["spec"]
        line = key_line(loop, "spec")
        problem = _spec_problem(loop, spec)
        if problem:
            self._note(line, label, f"loop 'spec' left as is: {problem}", change=False)
            return
        pos = key_position(loop, "spec")
        key_comment = loop.ca.items.pop("spec", None)
        moves = [(key, LOOP_SPEC_KEYS[key], key_line(spec, key)) for key in spec]
        del loop["spec"]
        for offset, (key, target, moved_line) in enumerate(moves):
            move_entry(spec, key, loop, target, pos=pos + offset, block=-self.indent.mapping)
            self._note(moved_line, label, f"loop 'spec.{key}' -> '{target}'", change=True)
        if not moves:
            self._note(line, label, "empty loop 'spec' removed", change=True)
        if key_comment is not None:
            first = moves[0][1] if moves else None
            self._keep_comment(loop, first, key_comment, line=line, label=label)

    def _tool_result(self, step: CommentedMap, label: str) -> None:
        tool = step.get("tool")
        if (
            not own_key(step, "tool")
            or not isinstance(tool, CommentedMap)
            or not own_key(tool, "result")
        ):
            return
        line = key_line(tool, "result")
        if "result" in step:
            self._note(
                line,
                label,
                "'result' is given both on the step and inside 'tool'; merge them by hand",
                change=False,
            )
            return
        pos = key_position(step, "tool") + 1
        move_entry(tool, "result", step, "result", pos=pos, block=-self.indent.mapping)
        self._note(line, label, "'tool.result' -> 'result'", change=True)

    def _save(self, step: CommentedMap, label: str) -> None:
        line = key_line(step, "save")
        saved = step["save"]
        result = step.get("result")
        problem = _save_problem(saved, result)
        if "result" in step and not own_key(step, "result"):
            problem = "the step's 'result' comes from a '<<' merge"
        if problem:
            self._note(line, label, f"'save' left as is: {problem}", change=False)
            return
        # the comment on the `save:` line goes with the key, not with the block below it
        detach_key_comment(saved, step.ca.items.get("save"))
        as_item = isinstance(saved, CommentedMap)
        block = self.indent.sequence if as_item else self.indent.mapping
        Shift(block, key_column(step, "save") + 1).subtree(saved, set())
        saved_list = CommentedSeq([saved]) if as_item else saved
        if result is None:
            if "result" in step:  # `result: null` gives way to the new block
                null_comment = step.ca.items.pop("result", None)
                self._keep_comment(step, "save", null_comment, line=line, label=label, delta=-2)
                del step["result"]
            new_result = CommentedMap()
            new_result["sink"] = saved_list
            move_entry(step, "save", step, "result", pos=key_position(step, "save"))
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
        tokens = [t for t in comment_tokens(comment) if t.value.strip()]
        if not tokens:
            return
        entry = node.ca.items.get(key) if key is not None else None
        if key is not None and entry is None:
            node.ca.items[key] = comment
            nudge(comment, delta)
            return
        if isinstance(entry, list) and len(entry) > 2 and entry[2] is None and len(comment) > 2:
            entry[2] = comment[2]
            nudge(comment[2], delta)
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


def _append_sinks(result: CommentedMap, sinks: CommentedSeq, indent: Indent) -> CommentedSeq:
    existing: CommentedSeq | CommentedMap | None = result.get("sink")
    if existing is None:
        result["sink"] = sinks
        return sinks
    if isinstance(existing, CommentedMap):  # one sink becomes a list of one
        detach_key_comment(existing, result.ca.items.get("sink"))
        Shift(indent.sequence - indent.mapping, key_column(result, "sink") + 1).subtree(
            existing, set()
        )
        existing = CommentedSeq([existing])
        result["sink"] = existing
    existing.extend(sinks)
    return existing


def _comment_on_item(seq: CommentedSeq, item: CommentedMap, comment: Any, deep: int) -> bool:
    """Put the comment of a `save: <sink>` line on the line where that sink now starts,
    `deep` columns right of where `save` was."""
    token = comment[2] if isinstance(comment, list) and len(comment) > 2 else None
    if token is None or is_flow(seq):
        return False
    if is_flow(item) or not item:
        index = next(i for i, value in enumerate(seq) if value is item)
        if seq.ca.items.get(index) is not None:
            return False
        seq.ca.items[index] = [token, None, None, None]
        nudge(token, deep - len("save: "))
        return True
    first = next(iter(item))
    entry = item.ca.items.get(first)
    if entry is None:
        item.ca.items[first] = [None, None, token, None]
    elif entry[2] is None:
        entry[2] = token
    else:
        return False
    nudge(token, deep + len(str(first)) - len("save"))
    return True
