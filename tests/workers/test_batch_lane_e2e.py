"""The judge's batch lane end to end: a re-scoring run on the batch lane is judged through the fake's
Message Batches API by a live worker; errored, expired and unusable results go to the realtime lane;
the run survives a worker SIGKILL while its provider batch is in flight; nothing is paid twice."""

from __future__ import annotations

import signal
import uuid

import pytest
from sqlalchemy import func, select

from assay.scoring.pipeline.planning import BATCH_LANE_WAITING
from assay.scoring.store.db import transaction
from assay.scoring.store.models import Batch, ProviderBatch, Score, ScoreComponent
from assay.scoring.suites.loader import load_model_catalog
from assay.settings import get_settings
from tests.conftest import wait_for
from tests.scoring.test_pipeline import make_batch
from tests.scoring.test_rescore import complete_all
from tests.workers.test_end_to_end import wait_finished
from tests.workers.test_rescore_e2e import NEW_MODEL, judge_env, switch_criteria

N = 6


def judge_components(batch_id: str) -> list[ScoreComponent]:
    with transaction() as s:
        rows = s.scalars(
            select(ScoreComponent)
            .join(Score, Score.id == ScoreComponent.score_id)
            .where(Score.batch_id == uuid.UUID(batch_id), ScoreComponent.component == "llm_grading")
            .order_by(Score.position)
        ).all()
        s.expunge_all()
        return list(rows)


def test_batch_lane_rescore_with_expired_errored_and_unusable_results_and_a_worker_kill(
    api_client, live_worker_factory, fake_judge
):
    from assay.workers.tasks import provider_batches

    old_batch, _ = make_batch(N)
    complete_all(old_batch)
    switch_criteria(NEW_MODEL)
    env = judge_env(fake_judge, ASSAY_KQL_JUDGE_MODEL=NEW_MODEL, ASSAY_PROVIDER_BATCH_INTERVAL_SECONDS="1")
    worker = live_worker_factory(env)
    fake_judge.configure(batch_processing_seconds=4.0)

    # A budget far above the run's cost: the batch then keeps its spend (spent_usd) as it goes.
    r = api_client.post("/api/v1/rescore", json={"suite": "kql", "lane": "batch", "budget_usd": 100})
    assert r.status_code == 202, r.text
    run_id = r.json()["batch_id"]
    assert r.json()["estimate"]["lane"] == "batch"
    # Planned: metrics run, the judge components wait for a provider batch (nothing sent realtime).
    wait_for(
        lambda: len(judge_components(run_id)) == N and all(c.reason == BATCH_LANE_WAITING for c in judge_components(run_id)),
        timeout=60, message="the run's judge components to wait for the batch lane",
    )
    scores = [str(c.score_id) for c in judge_components(run_id)]
    fake_judge.batch_outcomes({scores[0]: "errored", scores[1]: "expired", scores[2]: "malformed"})

    provider_batches.apply_async()
    def sent() -> ProviderBatch | None:
        with transaction() as s:
            return s.scalar(select(ProviderBatch).where(ProviderBatch.batch_id == uuid.UUID(run_id), ProviderBatch.status == "in_progress"))

    row = wait_for(sent, timeout=30, message="the provider batch to be created")
    assert row.request_count == N and row.provider_id.startswith("msgbatch_")
    # The worker dies while the provider batch is in flight (its metrics done, so nothing else waits on
    # a lease); the provider batch's id is in Postgres, and a new worker polls it.
    def metrics_landed() -> bool:
        with transaction() as s:
            return s.scalar(
                select(func.count())
                .select_from(ScoreComponent)
                .join(Score, Score.id == ScoreComponent.score_id)
                .where(Score.batch_id == uuid.UUID(run_id), ScoreComponent.queue == "metrics", ScoreComponent.landed_at.is_(None))
            ) == 0

    wait_for(metrics_landed, timeout=60, message="the run's metrics to land")
    worker.kill(signal.SIGKILL)
    live_worker_factory(env)

    def finished() -> bool:
        provider_batches.apply_async()  # beat's tick (ASSAY_PROVIDER_BATCH_INTERVAL_SECONDS in production)
        with transaction() as s:
            return s.get(Batch, uuid.UUID(run_id)).status not in ("planning", "running")

    wait_for(finished, timeout=120, interval=1.5, message="the batch-lane run to finish")
    view = wait_finished(api_client, run_id)
    assert view["status"] == "completed" and view["progress"]["completed"] == N, view

    calls = fake_judge.calls()
    assert calls["batch_api"]["create"] == 1, "one provider batch, never re-created after the worker kill"
    by_lane = calls["by_lane"]
    # Batch lane: N requests answered except the expired one; realtime: the errored, expired and unusable.
    assert sum(by_lane["batch"].values()) == N - 1
    assert sum(by_lane["realtime"].values()) == 3
    comps = judge_components(run_id)
    lanes = [c.details.get("lane", "realtime") for c in comps]
    assert lanes == ["realtime"] * 3 + ["batch"] * (N - 3)
    catalog = load_model_catalog(get_settings().config_dir)
    price = catalog.models[NEW_MODEL]
    batched = comps[3]
    full_price = (
        batched.usage["input_tokens"] * price.input_per_mtok
        + batched.usage.get("cache_read_input_tokens", 0) * price.cache_read_per_mtok
        + batched.usage.get("cache_creation_input_tokens", 0) * price.cache_write_per_mtok
        + batched.usage["output_tokens"] * price.output_per_mtok
    ) / 1e6
    assert batched.cost_usd == pytest.approx(full_price * price.batch_discount, rel=1e-6), "half price on the batch lane"
    # The unusable batch answer was paid for too: its cost is on the component beside the realtime one.
    assert comps[2].cost_usd > comps[0].cost_usd * 0.99
    with transaction() as s:
        assert s.get(Batch, uuid.UUID(run_id)).spent_usd == pytest.approx(sum(c.cost_usd for c in comps))
        assert s.scalar(select(ProviderBatch.status).where(ProviderBatch.batch_id == uuid.UUID(run_id))) == "processed"
