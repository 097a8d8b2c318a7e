"""Where a YAML syntax error really is.

The parser reports the place where it gave up, which for some mistakes is a later line
than the one to fix: a key without its `:` is only noticed on the next line, a `[` or
`{` left open or a quote left unclosed only where the block structure resumes or the file
ends. For those, the line of the mistake and a message that says what it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Mistake", "locate_mistake", "open_brackets", "unclosed_at_end"]

_CLOSERS = {"[": "]", "{": "}"}


@dataclass(frozen=True, slots=True)
class Mistake:
    line: int  # from 1
    message: str


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" "))


def open_brackets(lines: Sequence[str]) -> list[tuple[int, str]]:
    """The `[` and `{` still open at the end of the text, each with its line (from 1):
    brackets inside quotes and comments are left out."""
    stack: list[tuple[int, str]] = []
    quote = ""
    for number, text in enumerate(lines, start=1):
        for index, char in enumerate(text):
            if quote:
                if char == quote:
                    quote = ""
            elif char == "#" and (index == 0 or text[index - 1] in " \t"):
                break
            elif char in "'\"" and (index == 0 or text[index - 1] in " \t[{,:"):
                quote = char
            elif char in _CLOSERS and (index == 0 or text[index - 1] in " \t[{,:"):
                stack.append((number, char))
            elif char in "]}" and stack and _CLOSERS[stack[-1][1]] == char:
                stack.pop()
    return stack


def locate_mistake(
    problem: str, line: int | None, context: str, started: int | None, lines: Sequence[str]
) -> Mistake | None:
    """The line and message of the mistake behind the parser's error (its `problem` found
    on `line`, `context` started on `started`), when it is on an earlier line; None
    when the parser's line is the one to fix."""
    if line is None or started is None or started >= line:
        return None
    low = problem.lower()
    if "could not find expected ':'" in low and "simple key" in context:
        return Mistake(
            started,
            "is not valid YAML: this line has text but no ':' (a key is written 'key: value'), "
            "or it is indented out of the block it belongs to; the parser noticed it on line "
            f"{line}",
        )
    if "quoted scalar" in context and "end of stream" in low:
        return Mistake(started, "is not valid YAML: the quote opened on this line is never closed")
    if "flow" in context and started <= len(lines):
        problem_text = lines[line - 1] if line <= len(lines) else ""
        if problem_text.strip() and _indent(problem_text) > _indent(lines[started - 1]):
            return None  # inside a flow collection written over lines: the error is there
        bracket = "[" if "sequence" in context else "{"
        return Mistake(
            started,
            f"is not valid YAML: the '{bracket}' on this line is never closed (on line {line}: "
            f"{problem})",
        )
    return None


def unclosed_at_end(problem: str, lines: Sequence[str]) -> Mistake | None:
    """A `[` or `{` the file never closes, when the parser found the end of the file."""
    if "<stream end>" not in problem and "end of stream" not in problem:
        return None
    still_open = open_brackets(lines)
    if not still_open:
        return None
    number, bracket = still_open[-1]
    return Mistake(number, f"is not valid YAML: the '{bracket}' on this line is never closed")
