"""The real thing: an application instrumented with the OpenTelemetry SDK exports to a live API; its
traces are sampled, scored by live workers on the online queues and appear in the windows, the
Prometheus gauges and the dashboard; workers stopped during export lose nothing."""

from __future__ import annotations

import json

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from sqlalchemy import func, select

from assay.scoring.store.db import transaction
from assay.scoring.store.models import Score
from assay.scoring.store.online_models import OnlineScore, Span
from tests.conftest import API_KEY, wait_for, worker_env
from tests.dashboard.support import api_process
from tests.online.support import SUITE, clear_online_tables, register_online_suite

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture
def api(clean_db, tmp_path):
    clear_online_tables()
    register_online_suite()
    with api_process(worker_env(), log=tmp_path / "api.log") as url:
        yield url


def _application(url: str) -> tuple[TracerProvider, object]:
    """A chat application as a team would instrument it: the SDK, the OTLP/HTTP exporter, its key in the headers."""
    exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", headers=AUTH, timeout=10)
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    return provider, provider.get_tracer("support-bot")


def _chat(tracer, n: int) -> None:
    """One request of the application: a root span with one GenAI chat span under it."""
    with tracer.start_as_current_span("handle request"):
        with tracer.start_as_current_span("chat gpt-4o") as span:
            answer = "Your refund is on its way." if n % 2 == 0 else "Please hold."
            span.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o" if n % 4 < 2 else "gpt-4o-mini",
                    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"question {n}"}]}]),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]),
                }
            )


def _run_sampler() -> dict:
    # What beat does every ASSAY_ONLINE_SAMPLE_INTERVAL_SECONDS, run here so the test owns the clock.
    from assay.workers.tasks import online_sample

    return online_sample.apply().get()


def _landed() -> int:
    with transaction() as session:
        return session.scalar(
            select(func.count()).select_from(OnlineScore).join(Score, Score.id == OnlineScore.score_id).where(Score.status == "completed")
        )


def test_exported_traces_are_scored_online_and_show_in_the_windows(api, live_worker_factory):
    live_worker_factory(queues="metrics,control")
    provider, tracer = _application(api)
    for n in range(8):
        _chat(tracer, n)
    assert provider.force_flush(10_000)
    wait_for(lambda: _run_sampler().get("items", 0) or _landed(), timeout=30, message="the sampler to take the traces")
    wait_for(lambda: _landed() == 8, timeout=60, message="8 online scores to land")
    with transaction() as session:
        links = session.scalars(select(OnlineScore)).all()
    assert len({link.trace_id for link in links}) == 8 and all(link.span_id for link in links)

    windows = httpx.get(f"{api}/api/v1/online/windows", params={"window": "5m", "suite": SUITE}, headers=AUTH).json()["windows"]
    overall = next(w for w in windows if w["slice"] is None)
    assert (overall["count"], overall["passed"], overall["pass_rate"]) == (8, 4, 0.5)
    assert overall["components"]["mentions_refund"]["mean"] == 0.5
    by_slice = {w["slice"]: w["count"] for w in windows if w["slice"] is not None}
    assert by_slice == {"gpt-4o": 4, "gpt-4o-mini": 4}

    series = httpx.get(f"{api}/api/v1/online/suites/{SUITE}/series", params={"window": "5m"}, headers=AUTH).json()
    assert sum(bucket["count"] for bucket in series["buckets"]) == 8

    metrics = httpx.get(f"{api}/metrics", headers=AUTH).text
    assert f'assay_online_pass_rate{{suite="{SUITE}",window="5m"}} 0.5' in metrics
    assert f'assay_online_slice_scores{{slice="gpt-4o",suite="{SUITE}",window="1h"}} 4.0' in metrics
    provider.shutdown()


def test_workers_stopped_during_export_lose_nothing(api, live_worker_factory):
    provider, tracer = _application(api)
    for n in range(6):
        _chat(tracer, n)
    assert provider.force_flush(10_000)
    with transaction() as session:
        assert session.scalar(select(func.count()).select_from(Span)) == 12  # stored with no worker running
    wait_for(lambda: _run_sampler().get("items", 0), timeout=30, message="the sampler to take the traces")
    assert _landed() == 0  # no worker: the scores wait, pending, on the online queue
    live_worker_factory(queues="metrics,control")
    wait_for(lambda: _landed() == 6, timeout=60, message="the waiting online scores to land once a worker runs")
    provider.shutdown()
