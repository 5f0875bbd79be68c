"""The online windows as Prometheus gauges, read from the store at scrape time.

Label sets stay bounded: a suite's overall gauges carry ``suite`` and ``window`` (three windows); the
per-slice ones add ``slice`` for the suite's ``ASSAY_ONLINE_MAX_SLICE_LABELS`` busiest slices in the
window, and add the rest up under ``slice="other"`` (counts and pass rate; percentiles do not add
up, so ``other`` has none). Components are labelled per suite only, never per slice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from assay.scoring.online.windows import WINDOWS, WindowSummary, summaries

OTHER_SLICE = "other"


def _families() -> dict[str, GaugeMetricFamily]:
    return {
        "scores": GaugeMetricFamily("assay_online_scores", "Online scores completed in the window", labels=["suite", "window"]),
        "failed": GaugeMetricFamily("assay_online_failed", "Online scores failed or timed out in the window", labels=["suite", "window"]),
        "pass_rate": GaugeMetricFamily("assay_online_pass_rate", "Share of the window's completed online scores that passed", labels=["suite", "window"]),
        "total": GaugeMetricFamily("assay_online_total", "Online scores' total in the window: mean, p50, p90", labels=["suite", "window", "stat"]),
        "component": GaugeMetricFamily(
            "assay_online_component", "Online scores' component score in the window: mean, p50, p90", labels=["suite", "window", "component", "stat"]
        ),
        "slice_scores": GaugeMetricFamily("assay_online_slice_scores", "Online scores completed in the window, per slice", labels=["suite", "window", "slice"]),
        "slice_pass_rate": GaugeMetricFamily(
            "assay_online_slice_pass_rate", "Share of the window's completed online scores that passed, per slice", labels=["suite", "window", "slice"]
        ),
    }


def _labelled_slices(slices: Sequence[WindowSummary], limit: int) -> list[tuple[str, int, int]]:
    """(slice label, count, passed): the ``limit`` busiest by name, the rest as ``other``."""
    named = [(s.slice or "", s.count, s.passed) for s in slices[:limit]]
    rest = slices[limit:]
    if rest:
        named.append((OTHER_SLICE, sum(s.count for s in rest), sum(s.passed for s in rest)))
    return named


def collect(session: Session, now: datetime, max_slice_labels: int) -> list[GaugeMetricFamily]:
    families = _families()
    for window in WINDOWS:
        by_suite: dict[str, list[WindowSummary]] = {}
        for summary in summaries(session, now, window):
            if summary.slice is None:
                labels = [summary.suite, window]
                families["scores"].add_metric(labels, summary.count)
                families["failed"].add_metric(labels, summary.failed)
                if summary.pass_rate is not None:
                    families["pass_rate"].add_metric(labels, summary.pass_rate)
                for stat in ("mean", "p50", "p90"):
                    value = getattr(summary.total, stat)
                    if value is not None:
                        families["total"].add_metric([*labels, stat], value)
                    for component, distribution in summary.components.items():
                        found = getattr(distribution, stat)
                        if found is not None:
                            families["component"].add_metric([*labels, component, stat], found)
            else:
                by_suite.setdefault(summary.suite, []).append(summary)  # busiest first (summaries' order)
        for suite, slices in by_suite.items():
            for label, count, passed in _labelled_slices(slices, max_slice_labels):
                families["slice_scores"].add_metric([suite, window, label], count)
                if count:
                    families["slice_pass_rate"].add_metric([suite, window, label], round(passed / count, 6))
    return list(families.values())


class _Fixed(Collector):
    def __init__(self, families: list[GaugeMetricFamily]) -> None:
        self.families = families

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self.families


def render(session: Session, now: datetime, max_slice_labels: int) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(collect(session, now, max_slice_labels)))
    return generate_latest(registry)
