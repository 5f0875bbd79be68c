"""Domain errors. Each carries the HTTP status it maps to; the API maps them in one handler."""

from __future__ import annotations

from typing import Any


class AssayError(Exception):
    status_code = 500
    code = "internal_error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class CriteriaError(AssayError):
    """A suite file or stored criteria that cannot be used (bad YAML, unset variable, unknown metric)."""

    status_code = 422
    code = "invalid_criteria"


class NotFound(AssayError):
    status_code = 404
    code = "not_found"


class Conflict(AssayError):
    status_code = 409
    code = "conflict"


class Pruned(AssayError):
    """The batch's scores were removed by retention: its results are gone, not empty."""

    status_code = 410
    code = "pruned"


class BadRequest(AssayError):
    status_code = 400
    code = "bad_request"


class InvalidInput(AssayError):
    status_code = 422
    code = "invalid_input"


class BudgetRequired(InvalidInput):
    """Paid work estimated over the spend a request may default to: it must name its own budget."""

    code = "budget_required"


class PayloadTooLarge(AssayError):
    status_code = 413
    code = "payload_too_large"


class Unauthorized(AssayError):
    status_code = 401
    code = "unauthorized"


class Forbidden(AssayError):
    """The caller is known but may not do this (another principal's suite, for one)."""

    status_code = 403
    code = "forbidden"
