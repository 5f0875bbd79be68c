"""Rolling windows of online scores: the numbers, the bounded Prometheus labels, the dashboard's chart
and the links from a point to its scores."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from assay.scoring.online import gauges, otlp, windows
from assay.scoring.online.sampler import sample
from assay.scoring.online.spans import store_spans
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Score, ScoreComponent, utcnow
from assay.scoring.store.online_models import OnlineScore
from tests.conftest import API_KEY
from tests.dashboard.support import make_app, post_sign_in
from tests.online.support import SUITE, chat_span, clear_online_tables, export_request, register_online_suite

TOTALS = {"gpt-4o": [0.2, 1.0], "gpt-4o-mini": [0.4], "o3": [0.6]}


@pytest.fixture
def finished(clean_db):
    """Four online scores, finished a minute ago with known totals (the live tests score them for real)."""
    clear_online_tables()
    register_online_suite()
    for model, totals in TOTALS.items():
        for _ in totals:
            decoded = otlp.decode_spans(export_request([chat_span(os.urandom(16), os.urandom(8), model=model)]), 1 << 20)
            with transaction() as session:
                store_spans(session, decoded.rows, utcnow())
    with transaction() as session:
        assert sample(session, utcnow(), 100).items == 4
    done = utcnow() - timedelta(minutes=1)
    with transaction() as session:
        pending = {model: list(totals) for model, totals in TOTALS.items()}
        for link in session.scalars(select(OnlineScore)):
            total = pending[link.slice].pop()
            session.execute(
                update(Score).where(Score.id == link.score_id)
                .values(status="completed", total=total, passed=total >= 0.5, completed_at=done, components_landed=1)
            )
            session.execute(
                update(ScoreComponent).where(ScoreComponent.score_id == link.score_id).values(status="ok", score=total, landed_at=done)
            )
    return done


def test_windows_count_pass_rate_and_percentiles(finished):
    with transaction() as session:
        found = {(s.slice, s.window): s for w in windows.WINDOWS for s in windows.summaries(session, utcnow(), w)}
    overall = found[(None, "5m")]
    assert (overall.suite, overall.count, overall.failed, overall.passed, overall.pass_rate) == (SUITE, 4, 0, 2, 0.5)
    assert (overall.total.mean, overall.total.p50, overall.total.p90) == (0.55, 0.5, 0.88)
    assert overall.components["mentions_refund"].p50 == 0.5
    assert found[("gpt-4o", "1h")].count == 2 and found[("gpt-4o", "1h")].pass_rate == 0.5
    # A score finished a minute ago is in every window; one in the future of the window is not.
    assert found[(None, "1d")].count == 4
    with transaction() as session:
        assert windows.summaries(session, finished - timedelta(seconds=1), "5m") == []


def test_series_puts_each_score_in_its_bucket(finished):
    with transaction() as session:
        buckets = windows.series(session, utcnow(), "5m", SUITE)
    assert len(buckets) == 10 and sum(b.count for b in buckets) == 4
    (full,) = [b for b in buckets if b.count]
    assert full.start < finished <= full.end and full.pass_rate == 0.5


def test_gauges_name_the_busiest_slices_and_add_up_the_rest(finished):
    with transaction() as session:
        text = gauges.render(session, utcnow(), max_slice_labels=1).decode()
    assert f'assay_online_pass_rate{{suite="{SUITE}",window="5m"}} 0.5' in text
    assert f'assay_online_total{{stat="p90",suite="{SUITE}",window="1h"}} 0.88' in text
    assert f'assay_online_slice_scores{{slice="gpt-4o",suite="{SUITE}",window="5m"}} 2.0' in text
    assert f'assay_online_slice_scores{{slice="other",suite="{SUITE}",window="5m"}} 2.0' in text
    assert 'slice="o3"' not in text and 'slice="gpt-4o-mini"' not in text


def test_the_api_answers_windows_series_and_scores(finished):
    with TestClient(make_app(), headers={"Authorization": f"Bearer {API_KEY}"}) as client:
        body = client.get("/api/v1/online/windows", params={"window": "1h"}).json()
        assert [(w["slice"], w["count"]) for w in body["windows"]] == [(None, 4), ("gpt-4o", 2), ("gpt-4o-mini", 1), ("o3", 1)]
        assert client.get("/api/v1/online/windows", params={"window": "2h"}).status_code == 422
        span = {"since": (finished - timedelta(seconds=1)).isoformat(), "until": finished.isoformat()}
        scores = client.get(f"/api/v1/online/suites/{SUITE}/scores", params=span).json()
        assert len(scores["scores"]) == 4 and all(len(s["trace_id"]) == 32 and len(s["span_id"]) == 16 for s in scores["scores"])
        backwards = client.get(f"/api/v1/online/suites/{SUITE}/scores", params={"since": span["until"], "until": span["since"]})
        assert backwards.status_code == 400
        naive = client.get(f"/api/v1/online/suites/{SUITE}/scores", params={"since": "2026-01-01T00:00:00", "until": span["until"]})
        assert naive.status_code == 422


def test_the_dashboard_draws_the_chart_and_links_points_to_their_scores(finished):
    with TestClient(make_app(), base_url="https://testserver", follow_redirects=False) as browser:
        assert post_sign_in(browser).status_code == 303
        page = browser.get("/dashboard/online?window=5m")
        assert page.status_code == 200
        assert "<svg" in page.text and "<script" not in page.text.split('<section class="card online-suite"')[1]
        link = page.text.split('<a href="/dashboard/online/online_chat/scores?', 1)[1].split('"', 1)[0]
        scores = browser.get("/dashboard/online/online_chat/scores?" + link.replace("&amp;", "&"))
        assert scores.status_code == 200
        with transaction() as session:
            links = session.scalars(select(OnlineScore)).all()
        assert all(l.trace_id in scores.text and f"/dashboard/items/{l.item_id}" in scores.text for l in links)
