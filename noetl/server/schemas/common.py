"""What every body of the HTTP API shares: the request and response bases, the error body
and the health answer."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from noetl.dsl.limits import check_data


class Request(BaseModel):
    """A request body. Every field is checked for what the store cannot hold or later
    steps cannot walk: a NUL character in any string (PostgreSQL refuses it) and data
    nested deeper than playbooks may be (`noetl.dsl.limits`), each a 422 naming where."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str | dict | list):
            name = info.field_name or "value"
            problem = check_data(value, root=name)
            if problem is not None:
                where = "" if problem.path == name else f" (at {problem.path})"
                raise ValueError(f"{problem.message}{where}")
        return value


class Response(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


# --- errors ----------------------------------------------------------------------------


class DiagnosticOut(Response):
    """One problem found in a playbook (see docs/dsl.md for the codes)."""

    severity: str
    code: str
    message: str
    file: str
    line: int | None = None
    step: str | None = None
    key: str | None = Field(None, description="Document path of the key, e.g. workflow[1].next")


class FieldError(Response):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(Response):
    """Every error response: a stable `error` code and a message for people."""

    error: str = Field(
        description="not_found, invalid_request, invalid_playbook, bad_config, conflict, "
        "too_large, unavailable or internal"
    )
    message: str
    diagnostics: list[DiagnosticOut] | None = None
    errors: list[FieldError] | None = None


# --- health ----------------------------------------------------------------------------


class Health(Response):
    status: str = Field(description="ok, or degraded when the database is unavailable")
    version: str
    database: str = Field(description="ok or unavailable")
