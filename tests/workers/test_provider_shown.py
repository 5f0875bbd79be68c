"""Where a judge's provider shows: the judge task messages Flower lists (``argsrepr``) name each judge
component's provider and model; Prometheus's judge metrics carry a bounded ``provider`` label; the
dashboard's judge panel and the Excel report's Summary sheet name the provider and model."""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta

import openpyxl
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from assay import observability
from assay.scoring.judge.providers.registry import configured_routes
from assay.scoring.metrics.registry import ComponentResult
from assay.scoring.pipeline.components import ComponentRef
from assay.scoring.pipeline.landing import land
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Score, ScoreComponent, utcnow
from assay.scoring.suites.loader import load_model_catalog
from assay.settings import get_settings
from assay.workers.metric_groups import describe_group
from assay.workers.tasks import enqueuer, reconcile
from tests.api.test_metrics import total
from tests.dashboard.support import make_app, post_sign_in
from tests.scoring.test_pipeline import plan_all
from tests.workers.test_metric_groups import _published, _purge
from tests.workers.test_providers_e2e import ITEMS, rubric

SUITE = "shown_providers"
JUDGES = {
    "correctness": rubric("correctness", model="claude-haiku-5-5"),
    "clarity": rubric("clarity", provider="openai", model="gpt-4.1-mini"),
}


def upload(api_client) -> uuid.UUID:
    body = yaml.safe_dump({"name": SUITE, "kind": "generic", "threshold": 0.5, "components": JUDGES})
    r = api_client.post("/api/v1/suites", content=body.encode(), headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    items = "".join(json.dumps(item) + "\n" for item in ITEMS)
    r = api_client.post(f"/api/v1/batches?suite={SUITE}", content=items, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    return uuid.UUID(r.json()["batch_id"])


def test_judge_task_messages_name_the_provider_and_model_for_flower(api_client):
    batch_id = upload(api_client)
    refs = plan_all(batch_id)
    _purge()
    try:
        enqueuer.enqueue(refs)
        messages = _published("judge")
    finally:
        _purge()
    assert sum(len(args) for args, _ in messages) == 2 * len(ITEMS)
    for _, shown in messages:
        assert shown.endswith(" judged by anthropic/claude-haiku-5-5, openai/gpt-4.1-mini"), shown


def test_judge_components_the_reconciler_re_sends_name_their_provider_and_model(api_client):
    """The label comes from the components' criteria wherever a publish starts: here the reconciler
    re-sends work whose messages were lost (the planner's were never delivered)."""
    batch_id = upload(api_client)
    plan_all(batch_id)
    with transaction() as s:
        s.execute(
            update(ScoreComponent)
            .where(ScoreComponent.score_id.in_(select(Score.id).where(Score.batch_id == batch_id)))
            .values(enqueued_at=utcnow() - timedelta(hours=1))
        )
    _purge()
    try:
        assert reconcile()["requeued"] >= 2 * len(ITEMS)
        messages = _published("judge")
    finally:
        _purge()
    resent = [shown for args, shown in messages if any(component in JUDGES for _, component in args)]
    assert sum(len(args) for args, _ in messages) >= 2 * len(ITEMS) and resent
    for shown in resent:
        assert shown.endswith(" judged by anthropic/claude-haiku-5-5, openai/gpt-4.1-mini"), shown


def test_a_group_without_judges_says_nothing_of_them():
    ref = ComponentRef(uuid.uuid4(), "exact", "metrics")
    assert "judged by" not in describe_group("g", [ref], {})


def test_judge_metrics_carry_a_bounded_provider_label(api_client):
    catalog = load_model_catalog(get_settings().config_dir)
    routes = configured_routes(catalog, env={})
    # One provider per configured route, and only the configured providers.
    providers = {route: observability.route_provider(route) for route in routes}
    assert set(providers.values()) == set(catalog.providers) - {
        name for name in catalog.providers if not any(m.provider == name for m in catalog.models.values())
    }
    for route, provider in providers.items():
        model = route.rsplit(":", 1)[-1] if "@" in route else route
        assert catalog.models[model].provider == provider
    openai_route = next(r for r in routes if r.endswith(":gpt-4.1-nano"))
    observability.judgment(openai_route, "verdict")
    observability.judgment("claude-opus-5-5", "verdict")
    text = api_client.get("/metrics").text
    assert total(text, "assay_judge_judgments_total", provider="openai", model=openai_route, outcome="verdict") >= 1
    assert total(text, "assay_judge_judgments_total", provider="anthropic", model="claude-opus-5-5", outcome="verdict") >= 1


def test_the_dashboard_and_the_report_name_each_judges_provider_and_model(api_client):
    batch_id = upload(api_client)
    details = {
        "correctness": {"model": "claude-haiku-5-5", "reasoning": "right", "scale": 5, "min": 1, "max": 5},
        "clarity": {"model": "gpt-4.1-mini", "provider": "openai", "lane": "batch", "reasoning": "clear", "scale": 4, "min": 1, "max": 5},
    }
    for ref in plan_all(batch_id):
        with transaction() as s:
            land(s, ref, ComponentResult.ok(0.8, details[ref.component]))
    with transaction() as s:
        item_id = s.scalars(select(Score.item_id).where(Score.batch_id == batch_id)).first()

    with TestClient(make_app(), base_url="https://testserver", follow_redirects=False) as browser:
        assert post_sign_in(browser).status_code == 303
        page = browser.get(f"/dashboard/items/{item_id}")
    assert page.status_code == 200, page.text
    assert 'data-field="judge-model"' in page.text
    assert "anthropic · claude-haiku-5-5</span>" in page.text
    assert "openai · gpt-4.1-mini · batch</span>" in page.text

    report = api_client.get(f"/api/v1/batches/{batch_id}/report.xlsx")
    assert report.status_code == 200
    summary = openpyxl.load_workbook(io.BytesIO(report.content))["Summary"]
    rows = {row[0]: row for row in summary.iter_rows(values_only=True) if row and row[0]}
    assert rows["Component"][:8] == ("Component", "Weight", "OK", "Failed", "Skipped", "Mean", "Median", "Judge")
    assert rows["correctness"][7] == "anthropic/claude-haiku-5-5" and rows["clarity"][7] == "openai/gpt-4.1-mini"
