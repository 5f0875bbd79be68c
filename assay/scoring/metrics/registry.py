"""The metric registry.

A metric is registered as a *factory*: ``factory(**args)`` returns a callable that scores one item.
The spec stored in the criteria (``metric``, ``version``, ``args``) is enough to rebuild the very same
callable in any process, which is how workers score from the stored criteria content.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from assay.scoring.errors import CriteriaError

ComponentStatus = Literal["ok", "failed", "skipped"]

# A component's details may name why its item cannot pass, whatever its total (invariant 7: a pass
# needs evidence). Any metric of any kind may set it, on an ok or a skipped result; finalizing reads
# it (:func:`assay.scoring.pipeline.component_pass_blockers`).
PASS_BLOCKER = "pass_blocker"


@dataclass(frozen=True)
class ComponentResult:
    """What one component produced for one item. ``score`` is in [0, 1] and set only when ``ok``."""

    status: ComponentStatus
    score: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    usage: dict[str, int] | None = None
    cost_usd: float | None = None
    raw_output: str | None = None

    def __post_init__(self) -> None:
        if self.status == "ok":
            if self.score is None or not 0.0 <= self.score <= 1.0:
                raise ValueError(f"an ok component needs a score in [0, 1], got {self.score!r}")
        elif self.score is not None:
            raise ValueError(f"a {self.status} component carries no score")
        elif not self.reason:
            raise ValueError(f"a {self.status} component needs a reason")

    @classmethod
    def ok(cls, score: float, details: dict[str, Any] | None = None, *, pass_blocker: str | None = None) -> ComponentResult:
        # Float arithmetic can land a hair outside [0, 1]; that is rounding, not a result.
        return cls("ok", min(1.0, max(0.0, float(score))), _blocking(details, pass_blocker))

    @classmethod
    def failed(cls, reason: str, details: dict[str, Any] | None = None, **extra: Any) -> ComponentResult:
        return cls("failed", None, details or {}, reason, **extra)

    @classmethod
    def skipped(cls, reason: str, details: dict[str, Any] | None = None, *, pass_blocker: str | None = None) -> ComponentResult:
        return cls("skipped", None, _blocking(details, pass_blocker), reason)

    @property
    def pass_blocker(self) -> str | None:
        """Why the item cannot pass, as this component found it (None: nothing here blocks it)."""
        return self.details.get(PASS_BLOCKER)


def _blocking(details: dict[str, Any] | None, pass_blocker: str | None) -> dict[str, Any]:
    return {**(details or {}), PASS_BLOCKER: pass_blocker} if pass_blocker else dict(details or {})


@dataclass(frozen=True)
class MetricContext:
    """Per-run context a metric may use. ``now`` is pinned per score so reruns agree."""

    now: datetime
    dataset_loader: Callable[[str], dict[str, Any]] | None = None


Metric = Callable[[BaseModel, MetricContext], ComponentResult]
MetricFactory = Callable[..., Metric]


@dataclass(frozen=True)
class _Registration:
    factory: MetricFactory
    version: int
    kinds: frozenset[str]


_REGISTRY: dict[str, _Registration] = {}

# Modules that register metrics on import; imported lazily so the registry has no import cycles.
_METRIC_MODULES = ("assay.scoring.kinds.kql", "assay.scoring.kinds.pandas_codegen")


def metric(name: str, *, version: int, kinds: tuple[str, ...]) -> Callable[[MetricFactory], MetricFactory]:
    """Register ``factory`` under ``name``. Bump ``version`` whenever the metric's output can change."""

    def register(factory: MetricFactory) -> MetricFactory:
        if name in _REGISTRY and _REGISTRY[name].factory is not factory:
            raise RuntimeError(f"metric {name!r} is registered twice")
        _REGISTRY[name] = _Registration(factory, version, frozenset(kinds))
        return factory

    return register


def _load_all() -> None:
    for module in _METRIC_MODULES:
        importlib.import_module(module)


def registered_metrics() -> dict[str, tuple[int, frozenset[str]]]:
    _load_all()
    return {name: (reg.version, reg.kinds) for name, reg in _REGISTRY.items()}


def build_metric(name: str, version: int, args: dict[str, Any], kind: str) -> Metric:
    """Rebuild a metric from its stored spec; a spec this code cannot honour is a criteria error."""
    _load_all()
    reg = _REGISTRY.get(name)
    if reg is None:
        raise CriteriaError(f"unknown metric {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    if reg.version != version:
        raise CriteriaError(
            f"metric {name!r} is at version {reg.version} in this code but the criteria ask for version {version}"
        )
    if kind not in reg.kinds:
        raise CriteriaError(f"metric {name!r} does not score items of kind {kind!r}")
    try:
        return reg.factory(**args)
    except TypeError as exc:
        raise CriteriaError(f"bad arguments for metric {name!r}: {exc}") from exc
