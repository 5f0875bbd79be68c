"""Deterministic metrics: registered factories with a replayable spec (name, version, args)."""

from assay.scoring.metrics.catalog import build_metric, check_component_metric, registered_metrics
from assay.scoring.metrics.registry import (
    ComponentResult,
    ItemRef,
    MetricContext,
    MetricInfo,
    PluginRef,
    metric,
    register_metric,
    resolve_arg,
)
from assay.scoring.metrics.work import Work, WorkBound, WorkTooLarge

__all__ = [
    "ComponentResult",
    "ItemRef",
    "MetricContext",
    "MetricInfo",
    "PluginRef",
    "build_metric",
    "check_component_metric",
    "metric",
    "register_metric",
    "registered_metrics",
    "resolve_arg",
    "Work",
    "WorkBound",
    "WorkTooLarge",
]
