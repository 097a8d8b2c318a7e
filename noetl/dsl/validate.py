"""Load and validate a playbook, collecting every problem with its file, line, step and key.

Passes, in order: read the file (`source`), recognise upstream NoETL's dialect and rewrite
it (`upstream`), normalize shorthand and legacy forms (`normalize`), check structure and
types (the pydantic model, errors translated by `messages`), then semantic checks that
need the whole document (`checks`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from pydantic import ValidationError

from noetl.dsl import upstream
from noetl.dsl.checks import partial_checks, semantic_checks
from noetl.dsl.diagnostics import Diagnostic, Severity, has_errors
from noetl.dsl.messages import translate_errors, type_name
from noetl.dsl.model import NATIVE, Playbook
from noetl.dsl.name_checks import name_checks
from noetl.dsl.normalize import normalize_document
from noetl.dsl.policy import DslPolicy, dialect_refused, strict
from noetl.dsl.rewrite import new_map
from noetl.dsl.source import Source, SourceError, parse_source, read_source
from noetl.dsl.template_checks import Reads, template_checks
from noetl.dsl.yaml_tree import YMap
from noetl.errors import PlaybookError


@dataclass(frozen=True)
class LoadResult:
    """What loading a playbook gave: the model (when valid) and every diagnostic."""

    file: str
    playbook: Playbook | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    source: Source | None = None

    @property
    def ok(self) -> bool:
        return self.playbook is not None and not has_errors(self.diagnostics)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.WARNING]

    @property
    def notes(self) -> list[Diagnostic]:
        """Information `lint` shows (how the file was read); never a failure."""
        return [d for d in self.diagnostics if d.severity is Severity.INFO]

    def require(self) -> Playbook:
        """The playbook, or PlaybookError listing the errors."""
        if self.playbook is None or not self.ok:
            raise PlaybookError(self.errors)
        return self.playbook


def load_playbook(
    path: str | FsPath,
    *,
    allow_legacy: bool = True,
    policy: DslPolicy | None = None,
    check_names: bool = True,
) -> LoadResult:
    """Read and validate a playbook file (under `policy`: the forms a deployment accepts,
    and whether warnings fail; noetl.dsl.policy). `check_names=False` leaves out the
    checks of the names templates read (E313, W413): for a test of what a run does with
    such a name."""
    with _gc_paused():
        try:
            source = read_source(path)
        except SourceError as exc:
            return LoadResult(file=str(path), playbook=None, diagnostics=[exc.diagnostic])
        return _validate(source, allow_legacy=allow_legacy, policy=policy, check_names=check_names)


def load_playbook_text(
    text: str | bytes,
    name: str = "<playbook>",
    *,
    allow_legacy: bool = True,
    policy: DslPolicy | None = None,
    check_names: bool = True,
) -> LoadResult:
    """Validate playbook text (from the API, a test or stdin), under `policy`;
    `check_names` as for `load_playbook`."""
    with _gc_paused():
        try:
            source = parse_source(text, name)
        except SourceError as exc:
            return LoadResult(file=name, playbook=None, diagnostics=[exc.diagnostic])
        return _validate(source, allow_legacy=allow_legacy, policy=policy, check_names=check_names)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Reading a playbook allocates many small objects that all stay alive until it is
    done: the cyclic garbage collector's full passes over them made a 10,000-step playbook
    cost 1.5x per step of a 1,000-step one. It holds no cycles to collect, so the
    collector waits until the playbook is read (plain reference counting still frees)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _validate(
    source: Source, *, allow_legacy: bool, policy: DslPolicy | None, check_names: bool = True
) -> LoadResult:
    legacy = allow_legacy and (policy is None or policy.legacy)
    result = _checked(source, allow_legacy=legacy, check_names=check_names)
    if policy is None or result.source is None:
        return result
    diags = result.diagnostics
    if isinstance(result.source.tree, YMap):
        upstream_form = upstream.detect(result.source.tree) is not None
        refused = dialect_refused(
            policy,
            "upstream" if upstream_form else "native",
            result.file,
            _first_content_line(source.text),
        )
        if refused is not None:
            diags = [refused, *diags]
    if policy.strict:
        diags = strict(diags)
    if diags is result.diagnostics:
        return result
    return LoadResult(
        file=result.file,
        playbook=result.playbook if not has_errors(diags) else None,
        diagnostics=diags,
        source=result.source,
    )


def _checked(source: Source, *, allow_legacy: bool, check_names: bool) -> LoadResult:
    file = source.name
    if not isinstance(source.tree, YMap):
        got = "nothing" if source.tree is None else type_name(source.tree)
        diag = Diagnostic(
            code="E011",
            message=f"a playbook must be a map with metadata and workflow; got {got}",
            file=file,
            line=getattr(source.tree, "line", 0) or _first_content_line(source.text),
        )
        return LoadResult(file=file, playbook=None, diagnostics=[diag], source=source)
    tree, diags = _dialect(source.tree, file)
    if tree is None:
        return LoadResult(file=file, playbook=None, diagnostics=diags, source=source)
    tree, normalized = normalize_document(tree, file, allow_legacy=allow_legacy)
    diags.extend(normalized)
    reads: Reads | None = {} if check_names else None
    diags.extend(template_checks(tree, source, reads))
    playbook: Playbook | None = None
    try:
        playbook = Playbook.model_validate(tree, context={"dialect": tree.get("dialect", NATIVE)})
    except ValidationError as exc:
        diags.extend(translate_errors(exc.errors(), tree, file))
        if not has_errors(diags):  # pragma: no cover - every pydantic error is reported
            raise
        diags.extend(partial_checks(tree, source))
    else:
        diags.extend(semantic_checks(playbook, tree, source, graph=not has_errors(diags)))
        if reads is not None:
            diags.extend(name_checks(playbook, tree, source, reads))
    diags = _dedupe(diags)
    diags.sort(key=lambda d: (d.line or 0, d.severity is not Severity.ERROR, d.code))
    return LoadResult(
        file=file,
        playbook=playbook if not has_errors(diags) else None,
        diagnostics=diags,
        source=source,
    )


def _dialect(tree: YMap, file: str) -> tuple[Any, list[Diagnostic]]:
    """The tree in this engine's form and the diagnostics of reading its dialect: for an
    upstream NoETL file the note naming its dialect, and either its rewritten tree or
    (None and) the one error naming what this engine does not support yet."""
    diags: list[Diagnostic] = []
    if "dialect" in tree:  # set by the loader only, never by the file
        diags.append(
            Diagnostic(
                code="E100",
                message="unknown root key 'dialect'",
                file=file,
                line=tree.key_line("dialect"),
                path=("dialect",),
            )
        )
        tree = new_map(tree, {k: v for k, v in tree.items() if k != "dialect"})
    evidence = upstream.detect(tree)
    if evidence is None:
        return tree, diags
    diags.append(upstream.dialect_note(evidence, tree, file))
    findings = upstream.unsupported(tree)
    if findings:
        diags.append(upstream.unsupported_diagnostic(findings, tree, file))
        return None, diags
    rewritten, problems = upstream.rewrite(tree, file)
    return rewritten, diags + problems


def _first_content_line(text: str) -> int:
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", "---", "%")):
            return number
    return 1


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[Any, ...]] = set()
    out = []
    for diag in diags:
        key = (diag.code, diag.line, diag.message)
        if key not in seen:
            seen.add(key)
            out.append(diag)
    return out
