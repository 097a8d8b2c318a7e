"""Bodies of the playbook catalog: register, list, fetch and validate playbooks."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from noetl.server.schemas.common import DiagnosticOut, Request, Response


class PlaybookRegister(Request):
    content: str = Field(min_length=1, description="The playbook's YAML text")
    path: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        description="Catalog path; defaults to the playbook's metadata.path",
    )


class PlaybookSummary(Response):
    path: str
    version: int
    name: str
    created_at: float


class PlaybookRegistered(PlaybookSummary):
    warnings: list[DiagnosticOut] = Field(default_factory=list)


class PlaybookDetail(PlaybookSummary):
    content: str
    workload: dict[str, Any] | None = Field(
        None,
        description='The workload defaults (sensitive values masked as "***"): what an '
        "execution's workload is merged over; null when the stored text no longer loads",
    )


class PlaybookList(Response):
    items: list[PlaybookSummary]


class PlaybookValidate(Request):
    content: str = Field(min_length=1, description="The playbook's YAML text")
    path: str | None = Field(
        None, min_length=1, max_length=512, description="Name shown in diagnostics"
    )


class PlaybookValidation(Response):
    """Every problem found, errors and warnings, in line order; nothing is stored."""

    valid: bool = Field(description="True when there is no error (warnings allowed)")
    name: str | None = Field(None, description="metadata.name, when the playbook is valid")
    path: str | None = Field(None, description="metadata.path, when the playbook is valid")
    workload: dict[str, Any] | None = Field(
        None, description="The workload defaults (sensitive values masked), when valid"
    )
    steps: list[str] = Field(default_factory=list, description="Step names, when valid")
    diagnostics: list[DiagnosticOut]
