"""Prometheus metrics, counted where things happen: in the API and in every worker process.

Counters and histograms are incremented by small recording functions called from the pipeline, the
tasks and the judge service (each call site is one line). Queue depth and breaker state are not
counted: they are read from Redis when ``/metrics`` is scraped (``LiveCollector``), so they are never
stale and every API process reports the same numbers.

Several processes: with ``PROMETHEUS_MULTIPROC_DIR`` set (to one empty directory, shared by the API
and the workers of a host, wiped when they start) prometheus_client's multiprocess mode writes every
process's values to files in it, and the API's ``/metrics`` adds them up: a score finished in a worker
shows on the API's ``/metrics``. The variable must be in the environment before the process starts
(prometheus_client reads it at import). Without it each process counts only for itself. Workers on
other hosts can serve their own ``/metrics`` with ``start_worker_exporter``.

Recording never raises: a metric is not worth failing a paid judgment for.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
if os.environ.get(MULTIPROC_ENV):
    # prometheus_client writes there from the first count on; a missing directory would lose them all.
    os.makedirs(os.environ[MULTIPROC_ENV], exist_ok=True)

from prometheus_client import CollectorRegistry, Counter, Histogram  # noqa: E402
from prometheus_client.core import GaugeMetricFamily  # noqa: E402
from prometheus_client.registry import Collector  # noqa: E402

from assay.scoring.pricing import cost_usd  # noqa: E402

log = logging.getLogger(__name__)

# --- scores and components (pipeline, tasks) ------------------------------------------------------------

ITEMS_SCORED = Counter(
    "assay_items_scored_total",
    "Scores finished, per suite and outcome: passed, failed (below the threshold, or blocked from "
    "passing), errored (a component failed or timed out).",
    ["suite", "outcome"],
)
SCORE_COST = Counter("assay_score_cost_usd_total", "Judge spend of finished scores, in USD, per suite.", ["suite"])
COMPONENTS_LANDED = Counter(
    "assay_components_landed_total",
    "Component results recorded by the workers, per queue, component and status (ok, failed, skipped).",
    ["queue", "component", "status"],
)
TASK_RETRIES = Counter(
    "assay_task_retries_total",
    "Component tasks put back for later: deferred on purpose (breaker open, rate limit, provider "
    "outage) or after an unexpected error.",
    ["queue", "reason"],
)

# --- the judge (judge/service.py) -----------------------------------------------------------------------

JUDGE_LATENCY = Histogram(
    "assay_judge_request_duration_seconds",
    "Duration of one request to the judge model, per model and outcome (ok, or the HTTP status).",
    ["provider", "model", "outcome"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300),
)
JUDGE_REQUESTS = Counter(
    "assay_judge_requests_total",
    "Requests sent to the judge model, per model and outcome (ok, an HTTP status, timeout, connection_error).",
    ["provider", "model", "outcome"],
)
JUDGE_RETRIES = Counter(
    "assay_judge_retries_total",
    "Judge requests sent again after a transient failure (429, 5xx, 529, timeout).",
    ["provider", "model"],
)
JUDGE_REPAIRS = Counter(
    "assay_judge_repairs_total", "Unusable answers that got one repair request.", ["provider", "model"]
)
JUDGMENTS = Counter(
    "assay_judge_judgments_total",
    "Judgments, per model and outcome: verdict, failed (unusable answer, or a call that cannot succeed), "
    "deferred (breaker open, rate limit, outage: re-queued).",
    ["provider", "model", "outcome"],
)
BREAKER_REJECTIONS = Counter(
    "assay_judge_breaker_rejections_total",
    "Judge calls refused by the open circuit breaker (deferred).",
    ["provider", "model"],
)
GOVERNOR_WAITS = Counter(
    "assay_judge_governor_waits_total", "Times the rate governor made a judge call wait.", ["provider", "model"]
)
GOVERNOR_WAIT_SECONDS = Counter(
    "assay_judge_governor_wait_seconds_total",
    "Seconds judge calls were held back by the rate governor.",
    ["provider", "model"],
)
JUDGE_TOKENS = Counter(
    "assay_judge_tokens_total",
    "Tokens the judge provider reported, per model and type (input, output, cache_read, cache_creation; "
    "reasoning: the part of output a reasoning model spent thinking).",
    ["provider", "model", "type"],
)
JUDGE_COST = Counter(
    "assay_judge_cost_usd_total", "Judge spend in USD, per model, at the catalog's prices.", ["provider", "model"]
)


def route_provider(route: str) -> str:
    """The provider of a judge route (the ``model`` label): ``provider@host:model`` for an
    OpenAI-compatible provider, the bare model name for Anthropic (``judge/providers/registry.py``).
    Bounded like the routes: one value per configured provider."""
    return route.split("@", 1)[0] if "@" in route else "anthropic"


_TOKEN_TYPES = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_input_tokens": "cache_read",
    "cache_creation_input_tokens": "cache_creation",
    "reasoning_tokens": "reasoning",
}


def _safe(fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:  # never let bookkeeping break the work it describes
            log.debug("metric %s not recorded", fn.__name__, exc_info=True)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


# --- recording functions (one call per site) -----------------------------------------------------------


@_safe
def score_finished(
    suite: str, status: str, passed: bool | None, cost_usd: float | None = None, *, calibration: bool = False
) -> None:
    """A score reached a final status (pipeline.finalize.finalize_scores). A calibration repeat counts its cost
    only: it is no machine outcome."""
    if calibration:
        if cost_usd:
            SCORE_COST.labels(suite).inc(cost_usd)
        return
    if status == "completed":
        outcome = "passed" if passed else "failed"
    elif status in ("failed", "timed_out"):
        outcome = "errored"
    else:
        outcome = status
    ITEMS_SCORED.labels(suite, outcome).inc()
    if cost_usd:
        SCORE_COST.labels(suite).inc(cost_usd)


@_safe
def component_landed(queue: str, component: str, status: str) -> None:
    COMPONENTS_LANDED.labels(str(queue), component, status).inc()


@_safe
def task_retried(queue: str, reason: str) -> None:
    """``reason``: ``deferred`` (on purpose), ``error`` (an unexpected exception) or ``handed_back`` (a
    batch group gave its unstarted components back because online work was waiting)."""
    TASK_RETRIES.labels(str(queue), reason).inc()


def _outcome_of(result: Any) -> tuple[str, float | None]:
    """(outcome, seconds) of an SDK raw response, or of the exception a request raised."""
    if isinstance(result, BaseException):
        status = getattr(result, "status_code", None)
        response = getattr(result, "response", None)
        if status is None:  # no HTTP answer at all
            return ("timeout" if "Timeout" in type(result).__name__ else "connection_error"), None
    else:
        response = result
        status = getattr(result, "status_code", None)
    outcome = "ok" if status is not None and 200 <= int(status) < 300 else str(status)
    try:
        elapsed = response.elapsed.total_seconds() if response is not None else None
    except Exception:  # httpx raises until the response is closed
        elapsed = None
    return outcome, elapsed


@_safe
def judge_call(model: str, result: Any) -> None:
    """One judge request ended: ``result`` is the SDK's raw response, or the exception it raised."""
    outcome, seconds = _outcome_of(result)
    JUDGE_REQUESTS.labels(route_provider(model), model, outcome).inc()
    if seconds is not None:
        JUDGE_LATENCY.labels(route_provider(model), model, outcome).observe(seconds)


@_safe
def judge_attempt(model: str, attempt_number: int) -> None:
    """Called before each attempt of one judge request; attempts after the first are retries."""
    if attempt_number > 1:
        JUDGE_RETRIES.labels(route_provider(model), model).inc()


@_safe
def judge_repair(model: str) -> None:
    JUDGE_REPAIRS.labels(route_provider(model), model).inc()


@_safe
def judgment(model: str, outcome: str) -> None:
    """``outcome``: ``verdict``, ``failed`` or ``deferred``."""
    JUDGMENTS.labels(route_provider(model), model, outcome).inc()


@_safe
def breaker_rejected(model: str) -> None:
    BREAKER_REJECTIONS.labels(route_provider(model), model).inc()


@_safe
def governor_wait(model: str, seconds: float) -> None:
    GOVERNOR_WAITS.labels(route_provider(model), model).inc()
    GOVERNOR_WAIT_SECONDS.labels(route_provider(model), model).inc(max(0.0, float(seconds)))


@_safe
def judge_usage(model: str, usage: Any, price: Any = None) -> None:
    """Tokens of one answer (the SDK's ``message.usage`` or a dict) and, given the model's price, its cost."""
    spent: dict[str, int] = {}
    for field, label in _TOKEN_TYPES.items():
        value = usage.get(field) if isinstance(usage, Mapping) else getattr(usage, field, None)
        if value:
            JUDGE_TOKENS.labels(route_provider(model), model, label).inc(int(value))
            spent[field] = int(value)
    if price is not None and spent:
        JUDGE_COST.labels(route_provider(model), model).inc(cost_usd(spent, price))


# --- read at scrape time -----------------------------------------------------------------------------------


BreakerStatus = Callable[[], list[dict[str, Any]]]
ReviewOpen = Callable[[], Mapping[str, int]]  # suite -> open review queue entries (read from the store)


class LiveCollector(Collector):
    """Queue depth per queue and the judge breaker per model, read from Redis at each scrape, and the
    open review queue entries per suite (``review_open``, read from the store by the caller's callable).

    ``breaker_status`` returns one row per model (``model``, ``state``, ``failures``); the caller passes
    it (the judge's breaker) because this module imports no judge module: the judge records its
    metrics here, so an import the other way would make a cycle."""

    def __init__(
        self, settings: Any, breaker_status: BreakerStatus | None = None, review_open: ReviewOpen | None = None
    ) -> None:
        self.settings = settings
        self.breaker_status = breaker_status
        self.review_open = review_open

    def collect(self) -> Iterator[Any]:
        up = GaugeMetricFamily("assay_metrics_source_up", "1 when /metrics could read this source.", labels=["source"])
        try:
            depth, unacked = queue_depths(self.settings)
            ready = GaugeMetricFamily(
                "assay_queue_depth", "Messages waiting in each Celery queue (read from the broker).", labels=["queue"]
            )
            for queue, n in depth.items():
                ready.add_metric([queue], n)
            yield ready
            yield GaugeMetricFamily(
                "assay_queue_unacked",
                "Messages delivered to a worker and not yet acknowledged (running, or waiting for a countdown).",
                value=unacked,
            )
            up.add_metric(["broker"], 1)
        except Exception as exc:
            log.warning("metrics: cannot read queue depth: %s", exc)
            up.add_metric(["broker"], 0)
        if self.review_open is not None:
            try:
                counts = self.review_open()
                queue = GaugeMetricFamily(
                    "assay_review_queue_open", "Open entries of each suite's review queue.", labels=["suite"]
                )
                for suite, n in sorted(counts.items()):
                    queue.add_metric([suite], n)
                yield queue
                up.add_metric(["store"], 1)
            except Exception as exc:
                log.warning("metrics: cannot read the review queue: %s", exc)
                up.add_metric(["store"], 0)
        if self.breaker_status is None:
            yield up
            return
        try:
            rows = self.breaker_status()
            state = GaugeMetricFamily(
                "assay_judge_breaker_state",
                "Judge circuit breaker per model: 1 for its current state (closed, open, half_open), else 0.",
                labels=["provider", "model", "state"],
            )
            failures = GaugeMetricFamily(
                "assay_judge_breaker_failures",
                "Consecutive transient failures the breaker counted.",
                labels=["provider", "model"],
            )
            for row in rows:
                for name in ("closed", "open", "half_open"):
                    state.add_metric([route_provider(row["model"]), row["model"], name], 1.0 if row["state"] == name else 0.0)
                failures.add_metric([route_provider(row["model"]), row["model"]], row["failures"])
            yield state
            yield failures
            up.add_metric(["breaker"], 1)
        except Exception as exc:
            log.warning("metrics: cannot read the judge breaker: %s", exc)
            up.add_metric(["breaker"], 0)
        yield up


QUEUES = ("metrics", "judge", "control", "online-metrics", "online-judge")
_PRIORITY_SEP = "\x06\x16"  # kombu's Redis transport: queue, queue\x06\x163, \x06\x166, \x06\x169


def queue_depths(settings: Any) -> tuple[dict[str, int], int]:
    """Ready messages per Celery queue and the unacked count, straight from the Redis broker."""
    import redis

    client = redis.Redis.from_url(settings.broker_url, socket_timeout=2, socket_connect_timeout=2)
    prefix = settings.broker_key_prefix or ""
    try:
        with client.pipeline(transaction=False) as pipe:
            for queue in QUEUES:
                for pri in ("", "3", "6", "9"):
                    pipe.llen(f"{prefix}{queue}{_PRIORITY_SEP + pri if pri else ''}")
            pipe.hlen(f"{prefix}unacked")
            values = pipe.execute()
    finally:
        client.close()
    depth = {queue: sum(int(v) for v in values[i * 4 : i * 4 + 4]) for i, queue in enumerate(QUEUES)}
    return depth, int(values[-1])


def multiprocess_dir() -> str | None:
    path = os.environ.get(MULTIPROC_ENV)
    return path if path and os.path.isdir(path) else None


def render(
    settings: Any, breaker_status: BreakerStatus | None = None, review_open: ReviewOpen | None = None
) -> tuple[bytes, str]:
    """The ``/metrics`` body and its content type: every process's counts (multiprocess mode) or this
    process's, plus the live gauges (the breaker's when ``breaker_status`` is given, the open review
    queue per suite when ``review_open`` is)."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest, multiprocess

    registry = CollectorRegistry(auto_describe=False)
    if multiprocess_dir():
        multiprocess.MultiProcessCollector(registry)
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    live = CollectorRegistry(auto_describe=False)
    live.register(LiveCollector(settings, breaker_status, review_open))
    return body + generate_latest(live), CONTENT_TYPE_LATEST


def start_worker_exporter(port: int, addr: str = "0.0.0.0") -> None:
    """Serve this worker's own ``/metrics`` (for workers on hosts that share no directory with the API)."""
    from prometheus_client import REGISTRY, multiprocess, start_http_server

    registry = REGISTRY
    if multiprocess_dir():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    start_http_server(port, addr=addr, registry=registry)
