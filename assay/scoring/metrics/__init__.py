"""Deterministic metrics: registered factories with a replayable spec (name, version, args)."""

from assay.scoring.metrics.registry import ComponentResult, MetricContext, build_metric, metric, registered_metrics

__all__ = ["ComponentResult", "MetricContext", "build_metric", "metric", "registered_metrics"]
