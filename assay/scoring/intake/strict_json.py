"""The one JSON reader for everything the API takes in: request bodies, batch lines, array items.

Every document goes through the same parser (pydantic-core's, the one ``model_validate_json`` uses) and
the same rule on top of it: ``NaN``, ``Infinity`` and numbers past the float range are not JSON, and
are refused rather than stored as null. The parser itself refuses the rest the same way everywhere:
bad UTF-8, lone surrogates, integers past 4300 digits, nesting deeper than its recursion limit.
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeVar

import pydantic_core
from pydantic import BaseModel

NON_FINITE_REASON = "NaN, Infinity or a number past the float range is not valid JSON"

# Bytes that may parse to a non-finite float: NaN / Infinity literals, or a number past the float range.
# A cheap test on the raw text, so only a document that could hold one is walked.
_NON_FINITE_HINT = re.compile(rb"NaN|Infinity|\d[eE]\+?0*[1-9]\d{2}|\d{200}")
# A UTF-8 byte order mark: RFC 8259 lets a parser ignore one that starts the text (Windows tools write it).
_BOM = b"\xef\xbb\xbf"

Model = TypeVar("Model", bound=BaseModel)


class JsonRejected(ValueError):
    """A document that is not (standard) JSON; ``message`` says why, as a user should read it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def has_non_finite(value: Any) -> bool:
    """Whether a parsed value holds a NaN or infinite float anywhere."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(has_non_finite(inner) for inner in value.values())
    if isinstance(value, list | tuple):
        return any(has_non_finite(inner) for inner in value)
    return False


def _could_hold_non_finite(data: bytes) -> bool:
    return _NON_FINITE_HINT.search(data) is not None


def loads(data: bytes) -> Any:
    """Parse one JSON document (a leading byte order mark is skipped)."""
    data = data.removeprefix(_BOM)
    try:
        value = pydantic_core.from_json(data)
    except ValueError as exc:
        raise JsonRejected(f"invalid JSON: {exc}") from None
    if _could_hold_non_finite(data) and has_non_finite(value):
        raise JsonRejected(NON_FINITE_REASON)
    return value


def validate(model: type[Model], data: bytes) -> Model:
    """Parse one JSON document straight into ``model`` (pydantic's ``ValidationError`` when it does
    not fit, its ``json_invalid`` error when it is not JSON), under the same rule as :func:`loads`."""
    item = model.model_validate_json(data)
    if _could_hold_non_finite(data) and has_non_finite(item.model_dump()):
        raise JsonRejected(NON_FINITE_REASON)
    return item
