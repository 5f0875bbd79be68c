"""The batch lane's submitter on the real store: provider batches split at the request and byte
limits, items that cannot be judged fail without being sent, and a budget caps what is sent."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select, update

from assay.scoring.judge.providers.base import BatchLimits
from assay.scoring.judge.providers.registry import build_batch_apis
from assay.scoring.pipeline.planning import BATCH_LANE_WAITING
from assay.scoring.rescoring import batch_lane
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, ProviderBatch, ScoreComponent
from assay.scoring.suites.loader import load_model_catalog
from assay.settings import get_settings
from tests.scoring.test_pipeline import make_batch, plan_all

CATALOG = load_model_catalog(get_settings().config_dir)
# Batch APIs that are never called here (prepare only encodes requests): an address nothing listens on.
APIS = build_batch_apis(CATALOG, anthropic_key="test", anthropic_base_url="http://127.0.0.1:9", env={})


def batch_lane_batch(n: int, **values: object) -> uuid.UUID:
    batch_id, _ = make_batch(n)
    with transaction() as s:
        s.execute(update(Batch).where(Batch.id == batch_id).values(judge_lane="batch", **values))
    refs = plan_all(batch_id)
    assert all(r.queue == "metrics" for r in refs), "batch-lane judge components are not published"
    return batch_id


def waiting(batch_id: uuid.UUID) -> int:
    with transaction() as s:
        return s.scalar(
            select(func.count()).select_from(ScoreComponent).where(
                ScoreComponent.reason == BATCH_LANE_WAITING, ScoreComponent.provider_batch_id.is_(None)
            )
        )


def test_provider_batches_split_at_the_request_limit(clean_db):
    batch_id = batch_lane_batch(5)
    assert waiting(batch_id) == 5
    with transaction() as s:
        assert batch_lane.waiting_groups(s) == [(batch_id, "llm_grading")]
    sizes = []
    while True:
        with transaction() as s:
            prepared = batch_lane.prepare(s, batch_id, "llm_grading", CATALOG, APIS, batch_lane.Limits(2, 10**9))
        if prepared.row_id is None:
            break
        sizes.append(len(prepared.requests))
        ids = [r["custom_id"] for r in prepared.requests]
        assert len(set(ids)) == len(ids) and all(uuid.UUID(i) for i in ids)
        params = prepared.requests[0]["params"]
        assert params["output_config"]["format"]["type"] == "json_schema" and params["messages"][0]["role"] == "user"
    assert sizes == [2, 2, 1] and waiting(batch_id) == 0
    with transaction() as s:
        rows = s.scalars(select(ProviderBatch).where(ProviderBatch.batch_id == batch_id)).all()
        assert [r.status for r in rows] == ["creating"] * 3 and sum(r.request_count for r in rows) == 5
        # Released (the provider never took it): its requests wait to be sent again.
        assert batch_lane.release(s, rows[0].id, "refused") == 2
    assert waiting(batch_id) == 2


def test_provider_batches_split_at_the_byte_limit(clean_db):
    batch_id = batch_lane_batch(3)
    with transaction() as s:
        one = batch_lane.prepare(s, batch_id, "llm_grading", CATALOG, APIS, batch_lane.Limits(100, 10**9))
        s.rollback()
    size = max(len(str(r)) for r in one.requests)
    with transaction() as s:
        prepared = batch_lane.prepare(s, batch_id, "llm_grading", CATALOG, APIS, batch_lane.Limits(100, int(size * 1.5)))
    assert len(prepared.requests) == 1


def test_a_budget_caps_what_is_sent_and_stops_the_batch_when_nothing_fits(clean_db):
    batch_id = batch_lane_batch(3, budget_usd=0.000001)
    with transaction() as s:
        prepared = batch_lane.prepare(s, batch_id, "llm_grading", CATALOG, APIS, batch_lane.Limits(100, 10**9))
    assert prepared.row_id is None and prepared.requests == [] and prepared.budget_stopped == 3
    with transaction() as s:
        batch = s.get(Batch, batch_id)
        assert batch.status == "budget_exhausted" and batch.finished_at is not None  # nothing left to wait for


def test_the_providers_own_batch_limits_apply_below_the_settings_caps(clean_db):
    batch_id = batch_lane_batch(3)
    small = build_batch_apis(CATALOG, anthropic_key="test", anthropic_base_url="http://127.0.0.1:9", env={})["anthropic"]
    small.limits = BatchLimits(max_requests=2, max_bytes=10**9)  # as a provider capping batches at 2
    with transaction() as s:
        prepared = batch_lane.prepare(s, batch_id, "llm_grading", CATALOG, {"anthropic": small}, batch_lane.Limits(100, 10**9))
    assert prepared.provider == "anthropic" and len(prepared.requests) == 2
    with transaction() as s:
        assert s.get(ProviderBatch, prepared.row_id).provider == "anthropic"


def test_a_provider_without_its_batch_api_here_leaves_the_requests_waiting(clean_db):
    batch_id = batch_lane_batch(2)
    with transaction() as s:
        prepared = batch_lane.prepare(s, batch_id, "llm_grading", CATALOG, {}, batch_lane.Limits(100, 10**9))
    assert prepared.row_id is None and prepared.unavailable == "anthropic" and waiting(batch_id) == 2
