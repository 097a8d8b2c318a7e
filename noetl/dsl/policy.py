"""What a deployment accepts of the DSL (seed 003's rollout flags): which forms of
playbook (`native` DSL v2, its `legacy` aliases, upstream NoETL's dialect) and whether
warnings fail validation (`strict`). The configuration's `dsl` section makes one
(`noetl.config.Settings.dsl_policy`); every place that reads a playbook for a user (`noetl
validate`, `run`, the server's catalog and starts) applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from noetl.dsl.diagnostics import Diagnostic, Severity

__all__ = ["DIALECTS", "E_DIALECT", "DslPolicy", "dialect_refused", "strict"]

DIALECTS = ("native", "legacy", "upstream")
E_DIALECT = "E341"


@dataclass(frozen=True, slots=True)
class DslPolicy:
    accept: frozenset[str] = frozenset(DIALECTS)
    strict: bool = False

    @property
    def legacy(self) -> bool:
        return "legacy" in self.accept


def dialect_refused(policy: DslPolicy, dialect: str, file: str, line: int) -> Diagnostic | None:
    """The error for a playbook in a dialect (`native` or `upstream`) the policy does not
    accept, else None."""
    if dialect in policy.accept:
        return None
    named = "upstream NoETL's dialect" if dialect == "upstream" else "the native DSL v2 form"
    accepted = ", ".join(sorted(policy.accept)) or "none"
    return Diagnostic(
        code=E_DIALECT,
        message=f"this playbook is written in {named}, which this deployment does not accept "
        f"(dsl.dialects: {accepted}; NOETL_DSL_DIALECTS)",
        file=file,
        line=line,
    )


def strict(diags: list[Diagnostic]) -> list[Diagnostic]:
    """Every warning made an error (`dsl.strict`, NOETL_STRICT_DSL_VALIDATION)."""
    return [
        replace(
            d,
            severity=Severity.ERROR,
            message=f"{d.message} (a warning, an error under strict validation: dsl.strict)",
        )
        if d.severity is Severity.WARNING
        else d
        for d in diags
    ]
