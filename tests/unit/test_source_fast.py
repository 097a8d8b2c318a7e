"""The fast reader (libyaml events) builds exactly the tree the reference reader (ruamel.yaml)
builds: same values, same Python types, same line numbers; anything else falls back."""

from __future__ import annotations

import datetime as dt
import io
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from noetl.dsl import source
from noetl.dsl.source import (
    MAX_DEPTH,
    MAX_NODES,
    SourceError,
    YMap,
    YSeq,
    _fast_tree,
    _ruamel_tree,
    parse_source,
)

ROOT = Path(__file__).resolve().parents[2]
YAML_FILES = sorted(
    p
    for folder in (ROOT / "examples", ROOT / "tests" / "fixtures")
    for p in folder.rglob("*")
    if p.suffix in {".yaml", ".yml"}
)
FALLBACK = source._FALLBACK


def assert_same_tree(fast: Any, ref: Any, where: str = "$") -> None:
    """Walk both trees: same types, values, and line maps at every node."""
    assert type(fast) is type(ref), f"{where}: {type(fast).__name__} != {type(ref).__name__}"
    if isinstance(ref, YMap):
        assert fast.line == ref.line, f"{where}: line"
        assert list(fast.key_lines.items()) == list(ref.key_lines.items()), f"{where}: key_lines"
        assert list(fast) == list(ref), f"{where}: keys"
        assert [type(k) for k in fast] == [type(k) for k in ref], f"{where}: key types"
        for key in ref:
            assert_same_tree(fast[key], ref[key], f"{where}.{key}")
    elif isinstance(ref, YSeq):
        assert fast.line == ref.line, f"{where}: line"
        assert fast.item_lines == ref.item_lines, f"{where}: item_lines"
        assert len(fast) == len(ref), f"{where}: length"
        for index, (left, right) in enumerate(zip(fast, ref, strict=True)):
            assert_same_tree(left, right, f"{where}[{index}]")
    elif isinstance(ref, float) and math.isnan(ref):
        assert math.isnan(fast), where
    else:
        assert fast == ref, f"{where}: {fast!r} != {ref!r}"


def compare(text: str) -> Any:
    """Assert that both readers agree on `text` (or that the fast one stood aside where the
    reference one fails); return the fast reader's result."""
    fast = _fast_tree(text)
    try:
        ref = _ruamel_tree(text, "doc.yaml")
    except Exception:  # a diagnostic (or a crash inside ruamel.yaml): the fast reader stood aside
        assert fast is FALLBACK, "the reference reader fails, the fast one must fall back"
        return fast
    if fast is not FALLBACK:
        assert_same_tree(fast, ref)
    return fast


# --- every YAML file the project ships ----------------------------------------------------


def test_there_are_files() -> None:
    assert len(YAML_FILES) >= 60


@pytest.mark.parametrize("path", YAML_FILES, ids=[str(p.relative_to(ROOT)) for p in YAML_FILES])
def test_project_files_read_the_same(path: Path) -> None:
    text = path.read_bytes().decode("utf-8-sig")
    fast = compare(text)
    if "valid" in path.parts or "examples" in path.parts:
        assert fast is not FALLBACK, "an ordinary playbook takes the fast reader"


# --- hand-written tricky documents ------------------------------------------------------

SCALARS = """\
nulls: [null, ~, Null, NULL, nULL, '']
empty:
empty_in_seq:
  -
  - x
  -
bools: [True, TRUE, true, false, False, FALSE, yes, no, on, off, Yes, y, n]
ints: [0, -0, +12, 0o17, 017, 00, 0x1F, 0x1f, -0x1f, 0b101, 1_000, 0_1, 1__2, 0o, 0x, 0b]
floats: [1e3, 1E5, 1.5e-3, 12., .5, 1.e5, 1.0e+5, .1E-5, 1_0.5_0, -1.5, +2.5]
specials: [.inf, -.Inf, +.INF, .NaN, .nan, .NAN, -.nan]
times:
  - 2001-12-14
  - 2001-12-14t21:59:43.10-05:00
  - 2001-12-14T21:59:43Z
  - 2001-12-14 21:59:43.10 +5
  - 2001-12-14 21:59:43.123456789
  - 2001-1-1 1:00:00
  - 2001-12-14T21:59:43 -05:30
  - 2001-12-14t21:59:43.10+01
sexagesimal: 1:30
quoted: ["quoted", 'single', "1", '2001-12-14', "true", 'null', "", '.inf']
escapes: "\\0\\a\\b\\t\\n\\v\\f\\r\\e\\ \\"\\\\\\/\\N\\_\\x41\\u00fc\\U0001F600"
continued: "line \\
  continued"
"""

TRICKY: dict[str, str] = {
    "scalars": SCALARS,
    "block scalars": (
        "lit: |\n  line1\n   line2\n\n"
        "fold: >\n  folded\n  text\n\n  para\n    more\n  back\n"
        "strip: |-\n  x\n\n"
        "keep: |+\n  y\n\n\n"
        "fold_strip: >-\n  z\n  w\n"
        "indent: |2\n    q\n"
        "after: 1\n"
        "last: |+\n  kept\n\n"
    ),
    "flow": (
        "a: {x: 1, 'y': [c, d], \"z\": f}\n"
        "b: [a, 'b', \"c\", {d: e}, [f, [g, [h]]]]\n"
        "c: []\nd: {}\ne: [ ]\nf: [a, b, ]\ng: {a: 1, }\n"
        "h: [1,\n  2,\n  3]\n"
        "i: {x: 1,\n  y: 2}\n"
        "j: {a}\n"
        'k: {"a":1}\n'
        "l: [http://x.y/z, a:b]\n"
    ),
    "json": '{"a": [1, 2.5, true, null, "x"], "b": {"c": -1e-3}}\n',
    "nested": (
        "a:\n  b:\n    - c: 1\n      d:\n        - [1, 2]\n        - e: f\n"
        "    -   - g\n        - h\n"
        "i:\n- 1\n- 2\nj: 3\n"
    ),
    "comments": "# c\na: 1 # x\n# d\nb: #e\n  - 1 # f\n  # g\n  - 2\nc: b#c\nd: e #f\n",
    "special keys": (
        "a-b: 1\na.b: 2\na/b: 3\n'a: b': 4\n\"a#b\": 5\nc#d: 6\n"
        '"<<": 7\n"1": 8\n\'true\': 9\n"": 10\n"null": 11\n$x: 12\n? explicit\n: 13\n'
    ),
    "explicit keys": "? a\n: b\n? c\n",
    "block scalar key": "? |\n  a\n: b\n",
    "plain multi-line": "a: this is\n  a multi\n\n  line plain\nb: 'single ''q''\n\n  multi'\n",
    "dash and colon scalars": "a: -x\nb: :x\nc: ?x\nd: x:y\n",
    "trailing ---": "a: 1\n---\n",
    "trailing ...": "a: 1\n...\n",
    "trailing null document": "a: 1\n--- ~\n",
    "leading ---": "--- # start\na: 1\n...\n",
    "only ---": "---\n",
    "unicode": "ключ: значение\nemoji: 😀\n'ü': ü\nmixed: [é, 中文]\n",
    "CRLF": "a: 1\r\nb:\r\n  - x\r\n  - 'y\r\n    z'\r\nc: |\r\n  q\r\n  r\r\n"
    "d: >\r\n  s\r\n  t\r\n",
    "empty items": "- \n-\n- x\n-   \n- -\n  -\n",
    "CR": "a: 1\rb: 2\r",
    "tabs in scalars": 'a: "x\\ty"\nb: "x\ty"\nc: |\n  \tindented\n  x\ty\n',
    "tab separation": "a:\t1\nb: x\ty\n",
    "trailing spaces": "a: x   \nb: 'y'   \nc:   \n",
    "root scalar": "hello\n",
    "root int": "42\n",
    "root list": "- 1\n- [2]\n- {a: b}\n",
    "no final newline": "a: 1\nb: [2]",
    "anchors": "a: &x 1\nb: *x\n",
    "merge": "a: &x {b: 1}\nc:\n  <<: *x\n  d: 2\n",
    "merge without alias": "a:\n  <<: {b: 1}\n",
    "str tag": "a: !!str 1\n",
    "other tag": "a: !!int '1'\n",
    "local tag": "a: !include other.yaml\n",
    "directive": "%YAML 1.1\n---\na: yes\n",
    "single pair in flow sequence": '[a: b, "c":d]\n',
    "value tag": "a: =\n",
    "ruamel crash int": "a: -_\n",
    "date key": "2001-01-01: 1\n",
    "null key": "~: 1\n",
    "int key": "1: 1\n",
    "bool key": "true: 1\n",
    "list key": "[a]: 1\n",
    "duplicate keys": "a: 1\nb: 2\na: 3\n",
    "two documents": "a: 1\n---\nb: 2\n",
    "syntax error": "metadata:\n  name: [a, b\nworkflow: []\n",
    "bad indent": "metadata:\n  name: x\n   bad: indent\n",
    "comment on block header": "a: |#\n  x\n",
    "spaces before block": "a: |\n \n   x\n",
    "NEL": "a: x\x85b: y\n",
}

# Documents where the fast reader must do the work (not fall back).
FAST = {
    "scalars",
    "block scalars",
    "flow",
    "json",
    "nested",
    "comments",
    "special keys",
    "explicit keys",
    "plain multi-line",
    "dash and colon scalars",
    "trailing ---",
    "trailing ...",
    "trailing null document",
    "leading ---",
    "only ---",
    "unicode",
    "CRLF",
    "empty items",
    "CR",
    "trailing spaces",
    "root scalar",
    "root int",
    "root list",
    "no final newline",
}


@pytest.mark.parametrize("name", list(TRICKY))
def test_tricky_documents_read_the_same(name: str) -> None:
    fast = compare(TRICKY[name])
    assert (fast is not FALLBACK) is (name in FAST)


def test_scalar_types_are_the_plain_ones() -> None:
    tree = _fast_tree(SCALARS)
    assert tree is not FALLBACK
    assert tree["nulls"] == [None, None, None, None, "nULL", ""]
    assert tree["empty"] is None
    assert tree["bools"][:6] == [True, True, True, False, False, False]
    assert tree["bools"][6:] == ["yes", "no", "on", "off", "Yes", "y", "n"]  # YAML 1.2
    assert tree["ints"][:7] == [0, 0, 12, 15, 17, 0, 31]
    assert all(type(v) is int for v in tree["ints"][:13])
    assert tree["ints"][13:] == ["0o", "0x", "0b"]
    assert all(type(v) is float for v in tree["floats"] + tree["specials"][:-1])
    assert tree["specials"][-1] == "-.nan"  # a NaN has no sign in YAML 1.2
    assert tree["times"][:2] == ["2001-12-14", "2001-12-14T21:59:43.100000-05:00"]
    assert tree["sexagesimal"] == "1:30"
    assert all(type(v) is str for v in tree["quoted"])


def test_line_maps() -> None:
    tree = _fast_tree(TRICKY["nested"])
    assert tree is not FALLBACK
    assert (tree.line, tree.key_lines) == (1, {"a": 1, "i": 9, "j": 12})
    b = tree["a"]["b"]
    assert (b.line, b.item_lines) == (3, [3, 7])
    assert b[0]["d"].item_lines == [5, 6]
    assert tree["i"].line == 10


# --- the limits fall back to the reader that reports them -------------------------------


def test_too_deep_falls_back() -> None:
    text = "a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n"
    assert _fast_tree(text) is FALLBACK
    with pytest.raises(SourceError) as caught:
        parse_source(text, "deep.yaml")
    assert caught.value.diagnostic.code == "E012"


def test_deep_enough_is_fast() -> None:
    depth = MAX_DEPTH - 2
    compare("a: " + "[" * depth + "]" * depth + "\n")
    assert _fast_tree("a: " + "[" * depth + "]" * depth + "\n") is not FALLBACK


def test_too_many_nodes_falls_back() -> None:
    # The reference reader's E008 for it is tested in test_source.py (an alias bomb).
    assert _fast_tree("a: [" + ", ".join(["1"] * MAX_NODES) + "]\n") is FALLBACK
    assert _fast_tree("a: [" + ", ".join(["1"] * (MAX_NODES - 2)) + "]\n") is not FALLBACK


# --- which reader runs ------------------------------------------------------------------

GOOD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: good\nworkflow:\n  - step: a\n"


def test_an_ordinary_document_takes_the_fast_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str, name: str) -> Any:
        raise AssertionError("the reference reader should not run")

    monkeypatch.setattr(source, "_ruamel_tree", refuse)
    tree = parse_source(GOOD, "good.yaml").tree
    assert tree["workflow"][0] == {"step": "a"}
    assert tree.key_line("workflow") == 5


@pytest.mark.parametrize(
    ("text", "code", "line"),
    [
        ("metadata:\n  name: [a, b\nworkflow: []\n", "E005", 2),
        ("a: 1\na: 2\n", "E007", 2),
        ("a: 1\n---\nb: 2\n", "E006", None),
        ("1: x\n", "E009", 1),
        ("a: !include x.yaml\n", "E010", 1),
    ],
)
def test_errors_come_from_the_reference_reader(
    monkeypatch: pytest.MonkeyPatch, text: str, code: str, line: int | None
) -> None:
    calls: list[str] = []
    reference = source._ruamel_tree

    def counted(text: str, name: str) -> Any:
        calls.append(name)
        return reference(text, name)

    monkeypatch.setattr(source, "_ruamel_tree", counted)
    with pytest.raises(SourceError) as caught:
        parse_source(text, "bad.yaml")
    assert calls == ["bad.yaml"]
    with pytest.raises(SourceError) as direct:
        reference(text, "bad.yaml")
    assert caught.value.diagnostic == direct.value.diagnostic
    assert (caught.value.diagnostic.code, caught.value.diagnostic.line) == (code, line)


# --- random documents -------------------------------------------------------------------

SCALAR_TEXT = st.text(
    alphabet=st.sampled_from(
        [*"abcxyz019 -_:#.,'\"!&*?|>%@`{}[]~=\\<\n\t", "é", "中", "😀", "\r", "\x85"]
    ),
    max_size=12,
)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | SCALAR_TEXT
    | st.sampled_from(["yes", "no", "on", "off", "null", "~", "0o17", "017", "1e3", "1:30", "<<"])
    | st.dates(min_value=dt.date(1000, 1, 1)).map(lambda d: d)
)
TREES = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(SCALAR_TEXT, children, max_size=4)
    ),
    max_leaves=25,
)


def ruamel_dump(data: Any, flow: bool) -> str:
    writer = YAML(typ="rt")
    writer.default_flow_style = flow
    buffer = io.StringIO()
    writer.dump(data, buffer)
    return buffer.getvalue()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(st.dictionaries(SCALAR_TEXT, TREES, max_size=5), st.lists(TREES, max_size=5)),
    flow=st.sampled_from([False, True, None]),
    unicode=st.booleans(),
    width=st.sampled_from([20, 80]),
)
def test_random_documents_read_the_same(
    data: Any, flow: bool | None, unicode: bool, width: int
) -> None:
    compare(yaml.safe_dump(data, default_flow_style=flow, allow_unicode=unicode, width=width))
    compare(ruamel_dump(data, bool(flow)))
