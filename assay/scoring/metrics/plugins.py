"""Plug-in metrics: metrics that come from an installed Python package, not from Assay's code.

**Writing one.** A package declares one or more :class:`PluginMetric` objects and names them in the
``assay.metrics`` entry point group of its ``pyproject.toml``::

    [project.entry-points."assay.metrics"]
    example = "assay_example_metrics:METRICS"     # a PluginMetric, or a list of them

    # assay_example_metrics/__init__.py
    from assay.scoring.metrics.plugins import ComponentResult, ItemRef, PluginArgs, PluginMetric, resolve_arg

    class OverlapArgs(PluginArgs):                # extra="forbid": an unknown arg makes the suite invalid
        reference: str | ItemRef = ItemRef(from_="expected")

    def word_overlap(item, args: OverlapArgs, context) -> float | ComponentResult:
        reference = resolve_arg(args.reference, item)   # the item's own value for {from: ...}
        ...

    METRICS = [PluginMetric(name="example.word_overlap", version=1, args_model=OverlapArgs, function=word_overlap)]

**Bounded work.** ``bounds`` (a tuple of :class:`WorkBound`) declares the most work one item may cause
the metric, in a unit the plug-in chooses, with a cheap ``measure(args, item) -> Work`` that counts it
from the sizes. Assay checks each bound before calling ``function``; an item over one fails the
component with the sizes and the bound, and ``function`` is not called.

``function(item, args, context)`` gets the item (the kind's pydantic model; for ``generic`` its
``input``, ``output``, ``expected``, ``context`` and ``metadata``), the suite's arguments validated
by ``args_model`` and the :class:`MetricContext`. It returns a score in [0, 1] or a
:class:`ComponentResult` (to add details, skip, fail or block the pass). A score outside [0, 1] (or
not a number) fails the component with that reason; it is never clamped. An exception fails that one
component with the exception's text (the worker carries on). A per-item value the item lacks
(:func:`resolve_arg` raises :class:`MissingItemValue`) skips the component with the reason; raise
:class:`BadItemValue` for a value the metric cannot use, to fail it with yours.

**Names and versions.** A plug-in metric's name has a namespace (``example.word_overlap``; Assay's
own metric names have no dot); a name already registered (by Assay or another plug-in) is refused.
Bump ``version`` whenever the metric's output can change. The criteria store the plug-in's
distribution name (normalised as pip does) and version beside the metric's version, so they are in
the criteria hash: a suite resolved after an upgrade has a new hash (its older scores are stale), and
a process whose installed plug-in is missing or at another version than the criteria name fails
those components with the reason.

**Loading.** Entry points are loaded lazily, once per process, the first time the metric registry is
asked for a metric (after Assay's own metrics, so a plug-in never shadows one). A plug-in that
cannot be loaded is logged and its metrics stay unknown: a suite naming one is refused with the
load error in the reason, and the API and workers keep running.
"""

from __future__ import annotations

import logging
import math
import numbers
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import BaseModel, ConfigDict

from assay.scoring.metrics.registry import (
    BadItemValue,
    ComponentResult,
    ItemRef,
    Metric,
    MetricContext,
    MissingItemValue,
    PluginRef,
    register_metric,
    resolve_arg,
)
from assay.scoring.metrics.work import Work, WorkBound

__all__ = [
    "ENTRY_POINT_GROUP",
    "BadItemValue",
    "ComponentResult",
    "ItemRef",
    "MetricContext",
    "MissingItemValue",
    "PluginArgs",
    "PluginMetric",
    "Work",
    "WorkBound",
    "load_failures",
    "load_plugins",
    "resolve_arg",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "assay.metrics"

# Segments of letters, digits, "_" or "-", at least two of them: the first is the plug-in's namespace.
_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+")


class PluginArgs(BaseModel):
    """A convenient base for a plug-in's args model: unknown arguments are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _NoArgs(PluginArgs):
    """The args model of a plug-in metric that takes no arguments."""


PluginFunction = Callable[[BaseModel, Any, MetricContext], "float | ComponentResult"]


@dataclass(frozen=True, kw_only=True)
class PluginMetric:
    """One metric a plug-in package provides (see the module docstring)."""

    name: str
    version: int
    function: PluginFunction
    args_model: type[BaseModel] | None = None
    kinds: tuple[str, ...] = ("generic",)
    # The most work one item may cause the metric, checked before ``function`` is called.
    bounds: tuple[WorkBound, ...] = ()

    def __post_init__(self) -> None:
        # Checked when the plug-in module is imported, so its author sees the problem in their own tests.
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"plug-in metric name {self.name!r}: use a namespace and a name, like 'mypackage.my_metric' "
                "(letters, digits, '_' and '-', segments separated by dots)"
            )
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"plug-in metric {self.name!r}: version is an integer >= 1, got {self.version!r}")
        if not callable(self.function):
            raise TypeError(f"plug-in metric {self.name!r}: function must be callable")
        if self.args_model is not None:
            if not (isinstance(self.args_model, type) and issubclass(self.args_model, BaseModel)):
                raise TypeError(f"plug-in metric {self.name!r}: args_model must be a pydantic model class")
            if self.args_model.model_config.get("extra") != "forbid":
                raise ValueError(
                    f"plug-in metric {self.name!r}: args_model must refuse unknown arguments "
                    "(model_config = ConfigDict(extra='forbid'), or subclass PluginArgs)"
                )
        if isinstance(self.kinds, str) or not self.kinds or not all(isinstance(k, str) and k for k in self.kinds):
            raise ValueError(f"plug-in metric {self.name!r}: kinds is a non-empty tuple of kind names")


@dataclass(frozen=True)
class _Factory:
    """The registry's factory for a plug-in metric. A value (not a closure), so registering the same
    plug-in metric twice compares equal and is a no-op."""

    metric: PluginMetric

    def __call__(self, args: BaseModel) -> Metric:
        def score(item: BaseModel, ctx: MetricContext) -> ComponentResult:
            return _as_result(self.metric, self.metric.function(item, args, ctx))

        return score


def _as_result(metric: PluginMetric, value: Any) -> ComponentResult:
    if isinstance(value, ComponentResult):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return ComponentResult.failed(
            f"plug-in metric {metric.name!r} returned {type(value).__name__}, not a score in [0, 1] or a ComponentResult"
        )
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        return ComponentResult.failed(f"plug-in metric {metric.name!r} returned {value!r}, outside [0, 1]")
    return ComponentResult.ok(float(value))


@dataclass
class _LoaderState:
    done: bool = False
    loading: bool = False
    failures: list[str] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)


_state = _LoaderState()


def load_plugins() -> None:
    """Register every installed plug-in's metrics, once per process (later calls return at once).

    Thread-safe; a call made while loading (a plug-in that asks the registry at import) returns
    without loading again."""
    if _state.done:
        return
    with _state.lock:
        if _state.done or _state.loading:
            return
        _state.loading = True
        try:
            for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (_dist_label(e), e.name)):
                _load_entry_point(ep)
        finally:
            _state.loading = False
            _state.done = True


def load_failures() -> list[str]:
    """Why each plug-in (or plug-in metric) that could not be registered in this process was left out."""
    return list(_state.failures)


def _dist_label(ep: EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else ""


def _normalise(distribution: str) -> str:
    # As pip compares names (PEP 503), so a packaging tool spelling the name differently never
    # changes the criteria hash.
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _fail(where: str, reason: str) -> None:
    message = f"{where}: {reason}"
    log.error("plug-in metrics not loaded: %s", message)
    _state.failures.append(message)


def _load_entry_point(ep: EntryPoint) -> None:
    where = f"entry point {ep.name!r} = {ep.value!r}"
    if ep.dist is None:
        _fail(where, "it belongs to no installed distribution, so it has no version to record in the criteria")
        return
    plugin = PluginRef(distribution=_normalise(ep.dist.name), version=ep.dist.version)
    where = f"plug-in {plugin} ({where})"
    try:
        loaded = ep.load()
    except Exception as exc:  # whatever a broken plug-in raises, the API and workers keep running
        log.exception("cannot load %s", where)
        _fail(where, f"{type(exc).__name__}: {exc}")
        return
    metrics = loaded if isinstance(loaded, list | tuple) else [loaded]
    if not metrics or not all(isinstance(m, PluginMetric) for m in metrics):
        _fail(where, f"it names {type(loaded).__name__}, not a PluginMetric or a list of them")
        return
    for m in metrics:
        try:
            register_metric(
                m.name,
                version=m.version,
                kinds=m.kinds,
                factory=_Factory(m),
                args_model=m.args_model or _NoArgs,
                plugin=plugin,
                bounds=m.bounds,
            )
        except (ValueError, RuntimeError) as exc:
            _fail(where, f"metric {m.name!r} not registered: {exc}")
