"""Commands about the language itself: validate, lint, schema, codemod."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from noetl.cli.settings import setting_option, with_settings
from noetl.config import Settings
from noetl.dsl.codemod import rewrite_file
from noetl.dsl.diagnostics import Diagnostic
from noetl.dsl.schema import playbook_json_schema
from noetl.dsl.validate import LoadResult, load_playbook
from noetl.errors import PlaybookError

legacy_option = setting_option(
    "dsl.allow_legacy",
    "--legacy/--no-legacy",
    help="Accept legacy forms (iter/iterator/over/coll, save) with a deprecation warning.",
)
strict_option = setting_option(
    "dsl.strict",
    "--strict/--no-strict",
    help="Warnings fail validation too (dsl.strict, NOETL_STRICT_DSL_VALIDATION).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


PLAYBOOK_SUFFIXES = (".yaml", ".yml")


def _expand(files: tuple[Path, ...]) -> list[Path]:
    """Files as given; a directory stands for the playbooks under it (sorted)."""
    out: list[Path] = []
    for path in files:
        found = (
            sorted(p for p in path.rglob("*") if p.suffix in PLAYBOOK_SUFFIXES and p.is_file())
            if path.is_dir()
            else []
        )
        out.extend(found or [path])  # an empty directory is reported as not a playbook
    return out


def _check(files: tuple[Path, ...], settings: Settings) -> list[LoadResult]:
    """Each file validated, and its playbook tools' `return_step` checked against the
    child files found under `playbooks.root` (noetl.tools.child_checks)."""
    from noetl.tools.child_checks import file_lookup, with_child_checks
    from noetl.tools.child_steps import StepNames

    lookup, names = file_lookup(settings.roots(Path.cwd()).playbooks), StepNames()
    policy = settings.dsl.policy()
    return [
        with_child_checks(load_playbook(f, policy=policy), lookup, names) for f in _expand(files)
    ]


def _report(results: list[LoadResult], *, warnings: bool, as_json: bool) -> int:
    shown: list[Diagnostic] = []
    for result in results:
        shown.extend(result.errors)
        if warnings:
            shown.extend(result.warnings)
            shown.extend(result.notes)
    errors = sum(len(r.errors) for r in results)
    bad = sum(1 for r in results if not r.ok)
    if as_json:
        payload = {
            "valid": bad == 0,
            "files": [
                {
                    "file": r.file,
                    "valid": r.ok,
                    "diagnostics": [
                        d.to_dict() for d in r.diagnostics if warnings or d in r.errors
                    ],
                }
                for r in results
            ],
        }
        click.echo(json.dumps(payload, indent=2))
    else:
        for diag in shown:
            click.echo(diag.format(), err=diag in {e for r in results for e in r.errors})
        n_warn = sum(len(r.warnings) for r in results)
        summary = f"{len(results)} file(s) checked: {errors} error(s)"
        if warnings:
            summary += f", {n_warn} warning(s)"
        click.echo(summary if bad else summary + "; all valid", err=bool(bad))
    return 1 if bad else 0


files_argument = click.argument(
    "files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=True)
)


@click.command("validate")
@files_argument
@legacy_option
@strict_option
@json_option
@with_settings
def validate_cmd(files: tuple[Path, ...], as_json: bool, settings: Settings) -> None:
    """Check playbooks; exit 0 when all are valid, 1 otherwise (every error is listed)."""
    results = _check(files, settings)
    sys.exit(_report(results, warnings=False, as_json=as_json))


@click.command("lint")
@files_argument
@legacy_option
@json_option
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@with_settings
def lint_cmd(files: tuple[Path, ...], as_json: bool, strict: bool, settings: Settings) -> None:
    """Like validate, and also show warnings (unreachable steps, legacy forms, ...)."""
    results = _check(files, settings)
    code = _report(results, warnings=True, as_json=as_json)
    if strict and any(r.warnings for r in results):
        if not as_json:
            click.echo("failed: --strict treats warnings as errors", err=True)
        code = 1
    sys.exit(code)


@click.command("schema")
def schema_cmd() -> None:
    """Print the JSON Schema of the playbook language."""
    click.echo(json.dumps(playbook_json_schema(), indent=2))


@click.command("codemod")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--write", "-w", is_flag=True, help="Rewrite the files in place.")
@click.option("--check", is_flag=True, help="Exit 1 if any file would change.")
def codemod_cmd(files: tuple[Path, ...], write: bool, check: bool) -> None:
    """Rewrite legacy forms into canonical DSL v2, keeping comments.

    Without --write the new text is printed. Notes (one per rewrite, and what must be
    rewritten by hand) go to stderr. Exit 1 if a file cannot be parsed, or with --check
    if a file would change.
    """
    changed = failed = 0
    for path in files:
        try:
            result = rewrite_file(path)
        except PlaybookError as exc:
            # one unreadable file must not stop the others from being rewritten
            failed += 1
            click.echo(str(exc), err=True)
            continue
        changed += result.changed
        for note in result.notes:
            click.echo(f"{path}: {note}", err=True)
        if write:
            if result.changed:
                path.write_text(result.text, encoding="utf-8", newline="")
                click.echo(f"{path}: rewritten", err=True)
        elif check:
            if result.changed:
                click.echo(f"{path}: would be rewritten", err=True)
        else:
            click.echo(result.text, nl=False)
    if check and changed:
        verb = "were rewritten" if write else "would change"
        click.echo(f"{changed} file(s) {verb}", err=True)
    if failed or (check and changed):
        sys.exit(1)
