"""Named verdict types a suite's judge section may name (``verdict: kql_grade``).

A kind registers its verdict model and the function turning a validated verdict into a component
score when its module is imported; this module imports no kind (ARCHITECTURE.md, invariant 8). The
model's JSON schema is part of the criteria, so changing a verdict model changes the criteria hash of
every suite that uses it. Rubric judges build their verdict types from the suite instead
(``judge.rubrics.rubric_verdict``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from assay.scoring.errors import CriteriaError

VerdictScore = Callable[[Any], tuple[float, dict[str, Any]]]


@dataclass(frozen=True)
class VerdictType:
    """A verdict model and how one of its validated instances becomes (score in [0, 1], details)."""

    model: type[BaseModel]
    score: VerdictScore


_VERDICTS: dict[str, VerdictType] = {}
_lock = threading.Lock()


def register_verdict(name: str, model: type[BaseModel], score: VerdictScore) -> None:
    """Register ``name``. The same registration again is a no-op (a module imported twice); another
    model or score function under a taken name is refused, so no module can replace a verdict."""
    if not name or name != name.strip():
        raise ValueError(f"a verdict name is a non-empty string without surrounding spaces, got {name!r}")
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"verdict {name!r}: the model must be a pydantic model class")
    registration = VerdictType(model, score)
    with _lock:
        existing = _VERDICTS.get(name)
        if existing is not None and existing != registration:
            raise RuntimeError(f"verdict {name!r} is registered twice with different models or score functions")
        _VERDICTS[name] = registration


def verdict_type(name: str) -> VerdictType:
    """The verdict registered as ``name``; the kind that registers it must have been imported."""
    try:
        return _VERDICTS[name]
    except KeyError:
        raise CriteriaError(f"unknown verdict schema {name!r}; known: {', '.join(sorted(_VERDICTS)) or 'none'}") from None
