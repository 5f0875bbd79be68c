"""The metric catalog: every metric this process can score with, Assay's own modules and the installed
plug-ins loaded lazily on first use, and a metric rebuilt from its stored spec (name, version, args,
plug-in). Metrics register themselves in :mod:`.registry`; the catalog only loads and builds."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from assay.scoring.errors import CriteriaError
from assay.scoring.metrics.plugins import load_failures, load_plugins
from assay.scoring.metrics.registry import (
    BadItemValue,
    ComponentResult,
    Metric,
    MetricContext,
    MetricInfo,
    MissingItemValue,
    PluginRef,
    registration,
    registrations,
)
from assay.scoring.metrics.work import WorkBound, WorkTooLarge, check_bounds

# Modules that register metrics on import; imported lazily so the registry has no import cycles.
_METRIC_MODULES = (
    "assay.scoring.kinds.kql",
    "assay.scoring.kinds.pandas_codegen",
    "assay.scoring.metrics.library",
)


def _load_all() -> None:
    for module in _METRIC_MODULES:
        importlib.import_module(module)
    # Installed plug-ins last, so a plug-in can never take a name Assay's own metrics use.
    load_plugins()


def registered_metrics() -> dict[str, MetricInfo]:
    _load_all()
    return registrations()


def check_component_metric(component: str, metric: str, version: int, args: dict[str, Any], kind: str) -> PluginRef | None:
    """Check a suite component's metric spec when the suite is resolved; returns the plug-in the
    metric comes from (to store in the criteria), None for a metric that ships with Assay.

    The factory is built once, so whatever it checks (a regex that does not compile, a schema with
    a remote ``$ref``) makes the suite invalid here rather than failing every item later."""
    _load_all()
    reg = registration(metric)
    try:
        _build(metric, version, args, kind, reg[1].plugin if reg is not None else None)
    except CriteriaError as exc:
        raise CriteriaError(f"component {component!r}: {exc.message}") from exc
    assert reg is not None
    return reg[1].plugin


def build_metric(name: str, version: int, args: dict[str, Any], kind: str, plugin: PluginRef | None = None) -> Metric:
    """Rebuild a metric from its stored spec; a spec this process cannot honour (unknown metric,
    another version, a plug-in that is missing or at another version, bad arguments) is a criteria
    error, which the scorer turns into a failed component."""
    _load_all()
    return _build(name, version, args, kind, plugin)


def _build(name: str, version: int, args: dict[str, Any], kind: str, plugin: PluginRef | None) -> Metric:
    reg = registration(name)
    if reg is None:
        needed = f" (it comes from plug-in {plugin}, which is not installed here)" if plugin else ""
        broken = "".join(f"; not loaded: {failure}" for failure in load_failures())
        raise CriteriaError(f"unknown metric {name!r}{needed}; known: {', '.join(sorted(registrations()))}{broken}")
    factory, info = reg
    if info.plugin != plugin:
        raise CriteriaError(f"metric {name!r} comes from {_origin(plugin)} in the criteria but from {_origin(info.plugin)} here")
    if info.version != version:
        raise CriteriaError(
            f"metric {name!r} is at version {info.version} in this code but the criteria ask for version {version}"
        )
    if kind not in info.kinds:
        raise CriteriaError(f"metric {name!r} does not score items of kind {kind!r}; it scores {', '.join(sorted(info.kinds))}")
    if not isinstance(args, Mapping):
        raise CriteriaError(f"metric {name!r}: args must be a mapping, got {type(args).__name__}")
    if info.args_model is None:
        try:
            return _bounded(factory(**args), info.bounds, args)
        except (TypeError, ValueError, OverflowError) as exc:  # a kind's metric checking its own arguments
            raise CriteriaError(f"bad arguments for metric {name!r}: {exc}") from exc
    try:
        validated = info.args_model.model_validate(dict(args))
    except ValidationError as exc:
        raise CriteriaError(f"metric {name!r}: {_arg_errors(exc)}") from exc
    try:
        return _reports_missing_values(_bounded(factory(validated), info.bounds, validated))
    except ValueError as exc:
        # A factory's own check of validated args (e.g. a cross-field rule) names what is wrong.
        raise CriteriaError(f"metric {name!r}: {exc}") from exc


def _origin(plugin: PluginRef | None) -> str:
    return f"plug-in {plugin}" if plugin else "Assay itself"


def _arg_errors(exc: ValidationError, limit: int = 5) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(["args", *(str(p) for p in err["loc"])])
        # pydantic prefixes the message of a ValueError raised by a validator; the reason alone reads better.
        parts.append(f"{loc}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def _reports_missing_values(score: Metric) -> Metric:
    """An args-model metric's per-item value the item lacks skips the component; one it cannot use fails it."""
    def run(item: BaseModel, ctx: MetricContext) -> ComponentResult:
        try:
            return score(item, ctx)
        except MissingItemValue as exc:
            return ComponentResult.skipped(exc.message)
        except BadItemValue as exc:
            return ComponentResult.failed(exc.message)

    return run


def _bounded(score: Metric, bounds: tuple[WorkBound, ...], args: Any) -> Metric:
    """``score`` behind its work bounds: an item over one fails the component with the sizes, and
    the metric is not called (invariant 11)."""
    if not bounds:
        return score

    def run(item: BaseModel, ctx: MetricContext) -> ComponentResult:
        try:
            check_bounds(bounds, args, item)
        except WorkTooLarge as exc:
            return ComponentResult.failed(exc.message, dict(exc.details))
        return score(item, ctx)

    return run
