"""The metric registry.

A metric is registered as a *factory* that returns a callable scoring one item. The spec stored in
the criteria (``metric``, ``version``, ``args`` and, for a plug-in metric, the plug-in's distribution
and version) is enough to rebuild the very same callable in any process, which is how workers score
from the stored criteria content.

A metric registered with an ``args_model`` (a pydantic model) gets its arguments validated by it and
the factory is called with the validated model instance; without one (the kinds' own metrics) the
factory is called as ``factory(**args)``. An argument may name a per-item value (:class:`ItemRef`,
written ``{from: expected}`` or ``{from: metadata.KEY}`` in a suite) that the metric resolves for
each item with :func:`resolve_arg`. Such a metric reports a value the item lacks
(:class:`MissingItemValue`) as a skipped component and a value it cannot use
(:class:`BadItemValue`) as a failed one, each with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from assay.scoring.errors import AssayError
from assay.scoring.metrics.work import WorkBound

ComponentStatus = Literal["ok", "failed", "skipped"]

# A component's details may name why its item cannot pass, whatever its total (invariant 7: a pass
# needs evidence). Any metric of any kind may set it, on an ok or a skipped result; finalizing reads
# it (:func:`assay.scoring.pipeline.finalize.component_pass_blockers`).
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


class PluginRef(BaseModel):
    """The installed distribution a plug-in metric comes from; stored in the criteria (hashed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    distribution: str = Field(..., min_length=1)
    version: str = Field(..., min_length=1)

    def __str__(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class MetricInfo:
    """What the registry knows about one metric (``plugin`` None: it ships with Assay)."""

    version: int
    kinds: frozenset[str]
    args_model: type[BaseModel] | None
    plugin: PluginRef | None
    # The most work one item may cause it, checked before it runs (invariant 11; see metrics.work).
    bounds: tuple[WorkBound, ...] = ()


@dataclass(frozen=True)
class _Registration:
    factory: MetricFactory
    info: MetricInfo


_REGISTRY: dict[str, _Registration] = {}


def register_metric(
    name: str,
    *,
    version: int,
    kinds: tuple[str, ...] | frozenset[str],
    factory: MetricFactory,
    args_model: type[BaseModel] | None = None,
    plugin: PluginRef | None = None,
    bounds: tuple[WorkBound, ...] = (),
) -> None:
    """Register ``factory`` under ``name``. Bump ``version`` whenever the metric's output can change.
    ``bounds``: the work one item may cause it, each measured (from the validated args, or for a metric
    without an args model its args mapping, and the item) and checked before it runs.

    Registering the same factory again with the same settings is a no-op (a module imported twice);
    anything else under a taken name is refused, so a plug-in can never replace a metric."""
    if not name or name != name.strip():
        raise ValueError(f"a metric name is a non-empty string without surrounding spaces, got {name!r}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"metric {name!r}: version is an integer >= 1, got {version!r}")
    if not kinds:
        raise ValueError(f"metric {name!r}: name at least one kind it scores")
    if args_model is not None and not (isinstance(args_model, type) and issubclass(args_model, BaseModel)):
        raise ValueError(f"metric {name!r}: args_model must be a pydantic model class")
    if not isinstance(bounds, tuple) or not all(isinstance(b, WorkBound) for b in bounds):
        raise ValueError(f"metric {name!r}: bounds is a tuple of WorkBound")
    registration = _Registration(factory, MetricInfo(version, frozenset(kinds), args_model, plugin, bounds))
    existing = _REGISTRY.get(name)
    if existing is not None and existing != registration:
        origin = f"plug-in {existing.info.plugin}" if existing.info.plugin else "Assay"
        raise RuntimeError(f"metric {name!r} is registered twice (it is already registered by {origin})")
    _REGISTRY[name] = registration


def registration(name: str) -> tuple[MetricFactory, MetricInfo] | None:
    """The factory and info registered under ``name``, or None (see :mod:`.catalog` for loading)."""
    reg = _REGISTRY.get(name)
    return (reg.factory, reg.info) if reg is not None else None


def registrations() -> dict[str, MetricInfo]:
    """Every metric registered so far in this process (the catalog loads them all first)."""
    return {name: reg.info for name, reg in _REGISTRY.items()}


def metric(
    name: str,
    *,
    version: int,
    kinds: tuple[str, ...],
    args_model: type[BaseModel] | None = None,
    bounds: tuple[WorkBound, ...] = (),
) -> Callable[[MetricFactory], MetricFactory]:
    """Decorator form of :func:`register_metric` for metrics that ship with Assay."""

    def register(factory: MetricFactory) -> MetricFactory:
        register_metric(name, version=version, kinds=kinds, factory=factory, args_model=args_model, bounds=bounds)
        return factory

    return register


# --- per-item argument values --------------------------------------------------------------------

_ITEM_FIELDS = ("input", "output", "expected", "context")


class ItemRef(BaseModel):
    """An argument naming a per-item value: ``{from: expected}``, ``{from: input}``,
    ``{from: output}``, ``{from: context}`` or ``{from: metadata.KEY}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    from_: str = Field(..., alias="from")

    @field_validator("from_")
    @classmethod
    def _known_field(cls, value: str) -> str:
        if value in _ITEM_FIELDS:
            return value
        if value.startswith("metadata.") and len(value) > len("metadata."):
            return value
        raise ValueError(f"'from' names one of {', '.join(_ITEM_FIELDS)} or metadata.KEY, got {value!r}")

    def __str__(self) -> str:
        return self.from_


class MissingItemValue(AssayError):
    """An :class:`ItemRef` named a value the item does not have. A metric built from an args model
    reports it as a skipped component with this reason (the item lacks what the metric needs)."""

    status_code = 422
    code = "missing_item_value"


class BadItemValue(AssayError):
    """A per-item value a metric cannot use (a reference that is not a number, not a list...). A
    metric built from an args model reports it as a failed component with this reason."""

    status_code = 422
    code = "bad_item_value"


def resolve_arg(value: Any, item: BaseModel) -> Any:
    """``value`` itself, or for an :class:`ItemRef` the item's value it names; raises
    :class:`MissingItemValue` when the item has no such value."""
    if not isinstance(value, ItemRef):
        return value
    ref = value.from_
    if ref.startswith("metadata."):
        key = ref[len("metadata.") :]
        metadata = getattr(item, "metadata", None) or {}
        if key not in metadata:
            raise MissingItemValue(f"the item has no metadata.{key}")
        return metadata[key]
    found = getattr(item, ref, None)
    if found is None:
        raise MissingItemValue(f"the item has no {ref}")
    return found
